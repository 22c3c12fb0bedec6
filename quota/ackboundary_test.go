package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerAckingIdleBeforeBoundary pins acksAsItGoes at E/2 (200 ms
// at a 1 s interval and a 2 s budget) on nats1s-5x-idledrop.jsonl: acks
// 190 ms old drain at the first reading after the drop, 210 ms keep
// idleBefore (threshold mutants from 10 ms to 580 ms pass the other tests).
func TestControllerAckingIdleBeforeBoundary(t *testing.T) {
	for _, c := range []struct {
		acked time.Duration
		want  Rule
	}{{190 * time.Millisecond, RuleDrain}, {210 * time.Millisecond, RuleSaturated}} {
		ds := replayEdited(t, "nats1s-5x-idledrop.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
			if st.AckedWithin > 0 {
				st.AckedWithin = c.acked
			}
		})
		if d := ds[10]; d.Rule != c.want {
			t.Errorf("AckedWithin %v: %s (%s), want %s", c.acked, d.Rule, d.Reason, c.want)
		}
	}
}
