package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerAckingFirstReading replays the first 12 readings of
// lagbridge bench nats/ack-each/sync/1s at 10x (embedded nats-server, main
// at 9ad36c9's controller, 2026-12-04 21:24 UTC): a pull consumer of
// 2,000 msg/s acking each message, 4,000 msg/s offered from the start,
// read every second. At its first measured reading (lag 3,931, head
// 0.98 s, acks 0.3-1.7 ms before each reading) main read the ack floor as
// a commit timer's: the lag as consumed work not committed yet
// (noQueueAtCommit's startup reading, a capacity of 3,999/s) and a second
// of startup allowance ("queued 983ms less 1s"): unlimited, then drained at
// the next reading with 3 s of work queued. A consumer seen acking within
// E/2 of its readings has no commit timer: the first measured reading
// limits it below the offer (RuleSaturated, at its capacity of 2,000/s).
// The same readings with acks 600 ms old (a consumer acking about once a
// second) or without ack times (Kafka commits) keep the allowance: red
// against the mutant that drops the startup standing wait for every
// target.
func TestControllerAckingFirstReading(t *testing.T) {
	replayAckTimes(t, "nats1s-10x-ackstart.jsonl", RuleSaturated, RuleUnlimited, func(t *testing.T, ds []Decision, want Rule) {
		if d := ds[1]; d.Rule != want || want == RuleSaturated && d.Rate >= 2000 {
			t.Fatalf("first measured reading (lag %d, head %v): %s at %.0f/s (%s), want %s", d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason, want)
		}
	})
}

// TestControllerAckingIdleBeforeDrop replays the first 20 readings of
// lagbridge bench nats/ack-each/sync/1s at 5x (embedded nats-server, main
// at e362ee6, 2026-12-05 02:32 UTC): a pull consumer acking each message,
// 2,000 msg/s offered to its 2,000 msg/s, read every second, unlimited;
// its capacity falls to 400 msg/s between the readings at 02:32:12.696
// (lag 0) and 02:32:13.697 (lag 1,577, head 0.79 s, acks 5 ms before
// each reading). Main read the second as idleBefore's (no lag at the
// reading before, nothing older than the interval: commits of work
// written since, a lower bound of the capacity), kept the capacity at
// 2,005/s ("saturated", 1,718/s admitted) and drained only at the next
// reading, 0.25 s later with 1,938 queued. An ack floor seen moving as
// the consumer goes is no commit timer's: the reading measures 423/s
// with a queue, and drains at once. The same readings with acks 600 ms
// old (a consumer acking about once a second) or without ack times
// (Kafka commits) keep idleBefore's reading.
func TestControllerAckingIdleBeforeDrop(t *testing.T) {
	replayAckTimes(t, "nats1s-5x-idledrop.jsonl", RuleDrain, RuleSaturated, func(t *testing.T, ds []Decision, want Rule) {
		if len(ds) != 20 {
			t.Fatalf("%d decisions, want 20", len(ds))
		}
		if d := ds[9]; d.Rule != RuleUnlimited || d.Lag != 0 {
			t.Fatalf("reading before the drop: %s, lag %d, want unlimited at lag 0: the case tests nothing", d.Rule, d.Lag)
		}
		if d := ds[10]; d.Rule != want {
			t.Fatalf("first reading after the drop (lag %d, head %v): %s at %.0f/s (%s), want %s", d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason, want)
		}
	})
}

// replayAckTimes replays the NATS recording name at 1 s readings three
// ways and hands each run's decisions to check with the rule wanted: as
// recorded (acks a few ms before each reading: acking), with AckedWithin
// 600 ms on every reading (a consumer acking about once a second, whose
// ack floor may hide a commit timer's lump) and without ack times (as
// Kafka commits are read): both otherwise.
func replayAckTimes(t *testing.T, name string, acking, otherwise Rule, check func(*testing.T, []Decision, Rule)) {
	t.Helper()
	for _, c := range []struct {
		name  string
		acked time.Duration // AckedWithin set on every reading; -1: as recorded
		want  Rule
	}{
		{"acking each message", -1, acking},
		{"acking once a second", 600 * time.Millisecond, otherwise},
		{"no ack times", 0, otherwise},
	} {
		t.Run(c.name, func(t *testing.T) {
			var edit func(*lag.State)
			if c.acked >= 0 {
				edit = func(st *lag.State) { st.AckedWithin = c.acked }
			}
			check(t, replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: time.Second}), edit), c.want)
		})
	}
}
