package quota

import "testing"

// TestControllerFellFromUnlimited: the hook consumer of
// TestControllerHeldBoundsAtOnce (2,000/s in polls of at most 500, its
// reports saying what it holds), offered its capacity and so unlimited,
// read every second, slows to 400/s; the wake brings the first cycle after
// the drop early. That cycle reads the drop either from the poll in hand,
// still (at most Held in HeldFor: an upper bound), or from a move whose
// span straddles the drop (a poll taken at the old rate, finished at the
// new one: a mix of the two). Neither is the new capacity, and the backlog
// is already seconds of work at 400/s.
//
// Decided on as the capacity, the law admitted 59-783 msg/s to the
// consumer of 400 here ("saturated: capacity 633/s", "saturated:
// capacity 957/s"), and in lagbridge bench kafka/hook/sync/1s at 5x on
// kfake (session 35) "saturated: capacity 1209/s, wait 703ms" admitted
// 1,045 msg/s for 0.3 s (true head age p99 2.31 s) and "saturated:
// capacity 909/s, wait 1.435s" 377 msg/s. A saturated target's reading
// that fell more than a step is a step-down (admit nothing until the next
// reading measures it); a reporting consumer that was unlimited gets the
// same, once: the next reading decides on the law.
func TestControllerFellFromUnlimited(t *testing.T) {
	cases := []struct {
		name        string
		after, wake float64 // the drop after a cycle, the wake after the drop
		still       bool    // the poll in hand is the one the cycle before saw
	}{
		{"poll in hand still", 0.7, 0, true},
		{"a move straddling the drop", 0.2, 0.5, false},
		{"a move straddling the drop, late wake", 0.3, 0.8, false},
	}
	for _, tc := range cases {
		h := newHookRun(t, true)
		for range 10 {
			if d := h.observe(1, 1); !d.IsUnlimited() {
				t.Fatalf("%s: limited before the drop: %s", tc.name, d.Reason)
			}
		}
		h.con.run(tc.after, min(2000, h.rate))
		h.con.rate = 400
		var d Decision
		if tc.still {
			// The cycle after the drop sees the poll move; the wake
			// brings one 0.25 s later with it still in hand.
			if d = h.observe(1-tc.after, 1); !d.IsUnlimited() {
				t.Fatalf("%s: the cycle that saw the poll move limits already (%s)", tc.name, d.Reason)
			}
			d = h.observe(0.25, 0.25)
		} else {
			d = h.observe(tc.wake, tc.after+tc.wake)
		}
		t.Logf("%s: %v %.0f/s: %s", tc.name, d.Rule, d.Rate, d.Reason)
		if d.Rule != RuleStepDown || d.Rate > h.p.MinRate {
			t.Errorf("%s: the first cycle after the drop decides %v at %.0f/s (%s); want step-down at %.0f/s", tc.name, d.Rule, d.Rate, d.Reason, h.p.MinRate)
		}
		d = h.observe(0.25, 0.25)
		if d.Rule == RuleStepDown {
			t.Errorf("%s: paused twice in a row: %s", tc.name, d.Reason)
		}
	}
}
