package quota

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerSkipsNotCapacity replays the NATS target of a lagbridge
// demo run (2026-12-03 05:34 UTC, the observer counting the ttl guard's
// terms): a pull consumer acking each message behind the guard, 2,000 ->
// 400 msg/s, a 2 s deadline, read every second. Drained at the drop, its
// head reached 1.93 s with 1,679 messages left and nothing written since;
// in the next second the guard skipped 1,275 of them as they expired, and
// the reading shows lag 0, 1,674 msg/s consumed, 1,275 msg/s of it
// skipped (State.SkipRateInstant). What it skipped is no capacity: the
// probe starts from the 400 msg/s it did (a probe step of it), not from
// 1,674. Without the count (the same readings, SkipRateInstant 0: what a
// controller read before the observer counted skips) the probe admits
// over 2,000 msg/s into a consumer of 400: the slow phase then cycled
// drain, probe, saturated, drain. With the count, the next reading
// (decision 11) does not read the skips through the average of two moves
// either.
func TestControllerSkipsNotCapacity(t *testing.T) {
	const skip = 10 // 05:34:43.980: lag 0, 1,674 msg/s consumed, 1,275 skipped
	for _, counted := range []bool{true, false} {
		ds := replaySkips(t, "demo-nats-guard-skips.jsonl", counted)
		if len(ds) != 29 {
			t.Fatalf("%d decisions, want 29", len(ds))
		}
		for i, d := range ds[8:skip] {
			if d.Rule != RuleDrain {
				t.Fatalf("decision %d: %s (%s), want the drain the recording saw", 8+i, d.Rule, d.Reason)
			}
		}
		d := ds[skip]
		switch {
		case counted && (d.Rule != RuleProbe || d.Rate > 1.5*400*1.05):
			t.Errorf("decision %d (%s): %s at %.0f/s (%s), want a probe from the 400 msg/s done, at most %.0f/s",
				skip, d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason, 1.5*400*1.05)
		case !counted && d.Rate < 2000:
			t.Errorf("without the count, decision %d: %s at %.0f/s (%s), want the probe from the skips read as capacity (the fallback unchanged)",
				skip, d.Rule, d.Rate, d.Reason)
		}
		if !counted {
			continue
		}
		// The reading after: a move read from commits is averaged with
		// the one before (twoMoves), which must not hold the skips
		// either. (Later readings show what the recorded producers sent
		// on the controller of the time, 1,244 msg/s admitted here: the
		// drain at decision 12 is theirs, not this controller's.)
		if d := ds[skip+1]; d.Capacity > 1.5*400 || d.Rate > 1.5*400*1.05 {
			t.Errorf("decision %d (%s): %s at %.0f/s, capacity %.0f/s (%s), want a capacity of the 400 msg/s done (at most %.0f/s) and a rate of at most %.0f/s",
				skip+1, d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Capacity, d.Reason, 1.5*400, 1.5*400*1.05)
		}
	}
}

// replaySkips is replayStates (1 s interval) of a recording whose states
// keep their skip counts (counted) or lose them.
func replaySkips(t *testing.T, name string, counted bool) []Decision {
	t.Helper()
	var edit func(*lag.State)
	if !counted {
		edit = func(st *lag.State) { st.SkipRateInstant = 0 }
	}
	return replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: time.Second}), edit)
}

// TestControllerLateSkipsOnce replays the Kafka target of a lagbridge demo
// run that locked (2026-12-03 08:17:48 UTC, the hook behind the ttl guard
// counting its skips, before this fix; 2,000 -> 400 msg/s, a 2 s
// deadline, read every second and at wakes; Kafka goodput 878 msg/s). At
// decision 15 (08:17:58.974) partitions 1 and 2 are late (listed:
// producers write around them); partition 1 moved 91 records, 22 of them
// skipped as expired: 486 msg/s consumed in all, 88 skipped. The other
// partitions did what they did whether the skips are counted or not: the
// reading with the count reads their capacity as the one without it does
// (123 msg/s). The late partition's skips were taken out twice, as skips
// (leaveOutSkipped) and in its move (leaveOutLate): 36 msg/s, a drain;
// caught up a second later, the probe climbed from it, 0, 45, 67, 101,
// 151, 227 msg/s ... (the run's grant for 10 s).
func TestControllerLateSkipsOnce(t *testing.T) {
	const at = 15
	zeroed := func(st *lag.State) {
		st.SkipRateInstant = 0
		for i := range st.Partitions {
			st.Partitions[i].Skipped = 0
		}
	}
	ctl := func() *Controller { return newCtl(t, ControllerConfig{Interval: time.Second}) }
	counted := replayEdited(t, "demo-kafka-guard-lateskips.jsonl", 0, ctl(), nil)
	without := replayEdited(t, "demo-kafka-guard-lateskips.jsonl", 0, ctl(), zeroed)
	if len(counted) != 36 {
		t.Fatalf("%d decisions, want 36", len(counted))
	}
	if !strings.Contains(counted[at].Reason, "partitions [1 2] late") {
		t.Fatalf("decision %d: %s, want partitions 1 and 2 late", at, counted[at].Reason)
	}
	c, w := counted[at], without[at]
	if math.Abs(c.Capacity-w.Capacity) > 1 || c.Capacity < 100 {
		t.Errorf("decision %d with the count: %s, capacity %.0f/s (%s); want what the other partitions did, as without it: %s, capacity %.0f/s",
			at, c.Rule, c.Capacity, c.Reason, w.Rule, w.Capacity)
	}
}
