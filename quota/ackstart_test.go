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
	for _, c := range []struct {
		name  string
		acked time.Duration // AckedWithin set on every reading; -1: as recorded
		want  Rule
	}{
		// As recorded: acks a few ms old.
		{"acking each message", -1, RuleSaturated},
		// Acks 600 ms before the readings: a commit timer's lump may
		// lie behind the floor, as before.
		{"acking once a second", 600 * time.Millisecond, RuleUnlimited},
		// No ack times: as Kafka commits are read.
		{"no ack times", 0, RuleUnlimited},
	} {
		t.Run(c.name, func(t *testing.T) {
			var edit func(*lag.State)
			if c.acked >= 0 {
				edit = func(st *lag.State) { st.AckedWithin = c.acked }
			}
			ds := replayEdited(t, "nats1s-10x-ackstart.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), edit)
			if d := ds[1]; d.Rule != c.want || c.want == RuleSaturated && d.Rate >= 2000 {
				t.Fatalf("first measured reading (lag %d, head %v): %s at %.0f/s (%s), want %s", d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason, c.want)
			}
		})
	}
}
