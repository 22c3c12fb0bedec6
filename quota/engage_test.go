package quota

import (
	"testing"
	"time"
)

// TestEngageWait: the engage threshold is Engage/Setpoint of the standing
// wait min(Setpoint x budget, interval), as measure uses it.
func TestEngageWait(t *testing.T) {
	c, err := NewController(ControllerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		maxAge   time.Duration
		proc     time.Duration
		interval time.Duration
		want     time.Duration
	}{
		{"2 s deadline at 1 s: 0.2 of the budget", 2 * time.Second, 0, time.Second, 400 * time.Millisecond},
		{"2 s deadline at 250 ms: the interval caps the setpoint", 2 * time.Second, 0, 250 * time.Millisecond, 200 * time.Millisecond},
		{"processing time comes off the budget", 2 * time.Second, time.Second, time.Second, 200 * time.Millisecond},
		{"no budget", time.Second, time.Second, time.Second, 0},
		{"no interval", 2 * time.Second, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{MaxAge: tc.maxAge, ProcessingTime: tc.proc}
			if got := c.EngageWait(&p, tc.interval); got != tc.want {
				t.Fatalf("EngageWait = %v, want %v", got, tc.want)
			}
		})
	}
}
