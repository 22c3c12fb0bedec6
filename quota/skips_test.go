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

// TestControllerLateShareBack replays the Kafka target of a lagbridge demo
// run (2026-12-03 11:29:41 UTC, main at 87ff78a, load 19: the hook behind
// the ttl guard, 5 s auto-commit, counting its skips; 2,000 -> 400 msg/s,
// a 2 s deadline, read every second and at wakes). At decision 12
// (11:29:51.685) partitions 0 and 1 are late (listed) and the one consumer
// loop spent most of the quarter second on their records: 395 msg/s
// consumed in all, 253 of them theirs. Left out (leaveOutLate), the other
// partitions read 142 msg/s, and the reading lowered the estimate from
// 538 to it (saturated at 5 msg/s, right for the others' wait then).
// Caught up at decision 14, nothing raised it back: a caught-up reading
// measures what the producers were allowed, never more than the estimate,
// and the law re-opened from 142 (178 msg/s, then x1.5 a second: the
// demo's lock when the share is tens of msg/s). The estimate comes back
// to the 395 the whole consumer did (lateShareBack); not past what a
// queued reading between showed the consumer doing, nor on a reading
// from commits (the reports lapsed: positions read from commits move by
// several intervals' work).
func TestControllerLateShareBack(t *testing.T) {
	replay := func(edit func(k int, st *lag.State)) []Decision {
		k := 0
		ds := replayEdited(t, "demo-kafka-hook-lateshare-back.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
			if edit != nil {
				edit(k, st)
			}
			k++
		})
		if len(ds) < 17 {
			t.Fatalf("%d decisions, want at least 17", len(ds))
		}
		if d := ds[12]; d.Rule != RuleSaturated || !strings.Contains(d.Reason, "partitions [0 1] late") || d.Capacity > 200 {
			t.Fatalf("decision 12: %s, capacity %.0f/s (%s), want saturated on the others' share with partitions 0 and 1 late: the case tests nothing", d.Rule, d.Capacity, d.Reason)
		}
		return ds
	}
	if d := replay(nil)[14]; d.Lag != 0 || d.Capacity < 390 || d.Rate < 390 {
		t.Errorf("decision 14 (%s), lag %d: %s at %.0f/s, capacity %.0f/s (%s); want the capacity back at the 395 msg/s the consumer did at decision 12, and the rate from it",
			d.At.Format("15:04:05.000"), d.Lag, d.Rule, d.Rate, d.Capacity, d.Reason)
	}
	// Reading 14 made a queued one (300 records behind, the heads 1 s
	// old, 200 msg/s done): the caught-up reading after it (15) takes the
	// estimate back to no more than that.
	queued := replay(func(k int, st *lag.State) {
		if k != 14 {
			return
		}
		st.ConsumeRateInstant, st.HeadAge, st.Lag = 200, time.Second, 0
		for i := range st.Partitions {
			ps := &st.Partitions[i]
			ps.Lag, ps.HeadAge, ps.HeadTime = 50, time.Second, st.At.Add(-time.Second)
			ps.Reported.HeadTime, ps.Reported.Held = ps.HeadTime, 10
			st.Lag += ps.Lag
		}
	})
	if d := queued[15]; d.Lag > 20 || d.Capacity > 210 {
		t.Errorf("with a queued reading at 200 msg/s before it, decision 15 (lag %d): %s at %.0f/s, capacity %.0f/s (%s); want at most the 200 msg/s it showed",
			d.Lag, d.Rule, d.Rate, d.Capacity, d.Reason)
	}
	// The caught-up reading read from commits (the reports lapsed).
	commits := replay(func(k int, st *lag.State) {
		if k == 14 {
			st.Source = lag.SourceCommits
		}
	})
	if d := commits[14]; d.Capacity > 150 {
		t.Errorf("decision 14 read from commits: %s at %.0f/s, capacity %.0f/s (%s); want the estimate left at 142 msg/s",
			d.Rule, d.Rate, d.Capacity, d.Reason)
	}
}

// TestControllerLateShareHeldBack is TestControllerLateShareBack's chain
// through the skip-burst hold (a lagbridge demo run that locked,
// 2026-12-03 11:40:00 UTC, main at 87ff78a, load 32, Kafka goodput 867
// msg/s: the grant 0/s, then 83, 124, 186, 279 msg/s). At decision 11
// (11:40:10.348; the demo decided hard-age, its policy has a hard age)
// partitions 2 and 3 were still listed
// and took 340 of the 402 msg/s consumed: the others read 62 msg/s, the
// estimate. The next reading did 230 msg/s of work (130 more skipped) with
// the head past MaxAge, and the one after, caught up, skipped the rest:
// the hold kept 62 at both, and the probe climbed from it. The estimate
// comes back at the caught-up reading, to what the queued reading between
// showed the consumer doing.
func TestControllerLateShareHeldBack(t *testing.T) {
	ds := replayStates(t, "demo-kafka-hook-lateshare-held.jsonl", time.Second)
	if len(ds) < 14 {
		t.Fatalf("%d decisions, want at least 14", len(ds))
	}
	if d := ds[11]; d.Capacity > 100 {
		t.Fatalf("decision 11: %s, capacity %.0f/s (%s), want the others' share of the late partitions' reading: the case tests nothing", d.Rule, d.Capacity, d.Reason)
	}
	if d := ds[13]; d.Lag != 0 || d.Capacity < 220 || d.Rate < 250 {
		t.Errorf("decision 13 (%s), lag %d: %s at %.0f/s, capacity %.0f/s (%s); want the capacity back at the 230 msg/s the consumer did at decision 12, and the rate from it",
			d.At.Format("15:04:05.000"), d.Lag, d.Rule, d.Rate, d.Capacity, d.Reason)
	}
}

// TestControllerNoStepDownCaughtUp replays the Kafka target of a lagbridge
// demo run (2026-12-03 11:25:03 UTC, main at 87ff78a, load 6.1): drained
// at the drop (0/s from decision 8 to 13), the consumer skipped the rest
// of its backlog at decision 14 (a reading not measured), and decision 15
// found it caught up with nothing consumed and nothing produced (the grant
// was 0). Read as a step down (consumed 0 against 399, and a backlog of 0
// "covers" an interval at 0 msg/s), the grant stayed 0/s for another
// second; caught up, it is probed from the capacity.
func TestControllerNoStepDownCaughtUp(t *testing.T) {
	ds := replayStates(t, "demo-kafka-hook-caughtup-pause.jsonl", time.Second)
	if len(ds) < 16 {
		t.Fatalf("%d decisions, want at least 16", len(ds))
	}
	if d := ds[13]; d.Rule != RuleDrain {
		t.Fatalf("decision 13: %s (%s), want the drain the recording saw: the case tests nothing", d.Rule, d.Reason)
	}
	if d := ds[15]; d.Lag != 0 || d.Rate < 390 {
		t.Errorf("decision 15 (%s), lag %d: %s at %.0f/s (%s); want a probe from the 399 msg/s capacity",
			d.At.Format("15:04:05.000"), d.Lag, d.Rule, d.Rate, d.Reason)
	}
}
