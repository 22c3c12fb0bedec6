package quota

import (
	"strings"
	"testing"
	"time"
)

// TestHardAgeReasonSaysWhatPassedIt: a stop for the hard age says what
// passed it: the wait a new message would have (the head itself under the
// hard age), or the head. Before, both read "hard age 10s exceeded (wait
// 33.3s + processing, head age 5.982s)", which a new user read as the head
// being past 10 s while /v1/lag showed 6 s (lagbridge run on Kafka 4.3.1, a
// 5 s auto-commit group slowed to 100 msg/s).
func TestHardAgeReasonSaysWhatPassedIt(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, HardAge: 2500 * time.Millisecond}
	cases := []struct {
		name    string
		headAge time.Duration
		want    string
	}{
		// A 3 s wait at 400/s for 1,200 messages, the head 1 s old.
		{"the wait passes it", time.Second, "a new message would wait 3s + processing, past the hard age 2.5s (head age 1s)"},
		// The same wait, the head 4 s old: the head passed it.
		{"the head passed it", 4 * time.Second, "head age 4s past the hard age 2.5s (a new message would wait 3s + processing)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := st(1, 1200, 400, 800)
			s.HeadAge, s.HeadAgeKnown = c.headAge, true
			d := newCtl(t, ControllerConfig{}).Step(s, p, s.At)
			if d.Rule != RuleHardAge || !strings.HasPrefix(d.Reason, c.want+": ") {
				t.Fatalf("rule %v, reason %q; want %v starting %q", d.Rule, d.Reason, RuleHardAge, c.want)
			}
		})
	}
	// Stopped, then a wait of 2.2 s: under the hard age, over the 2 s
	// budget: it stays stopped (hysteresis), and says that is why.
	t.Run("held until within budget", func(t *testing.T) {
		ctl := newCtl(t, ControllerConfig{})
		first, next := st(1, 1200, 400, 800), st(2, 880, 400, 80)
		ctl.Step(first, p, first.At)
		d := ctl.Step(next, p, next.At)
		want := "stopped for the hard age 2.5s until a new message's wait (2.2s) is within the budget 2s"
		if d.Rule != RuleHardAge || !strings.HasPrefix(d.Reason, want) {
			t.Fatalf("rule %v, reason %q; want %v starting %q", d.Rule, d.Reason, RuleHardAge, want)
		}
	})
}
