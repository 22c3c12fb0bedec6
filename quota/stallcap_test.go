package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerStallNotCapacity replays readings shaped like the episode
// of `lagbridge demo` in session 17's first fresh-clone CI (TestWhyDuringDemo
// under machine load): a consumer reporting its position through the hook,
// saturated at 1,114 msg/s, then slowed to 400 and drained; one reading
// during the drain consumed nothing with 743 messages waiting (a stall of
// the machine, or of the partitions not avoided while the consumer drained
// the late ones), read as a capacity of 0; the next showed the backlog
// drained (a reading a commit corrected, which measures nothing), and from
// then on the consumer sat caught up with the producers let through about
// 1 msg/s. The law re-opened from that capacity and the probe climbed x1.5
// a reading from about 1 msg/s (1.25, 1.87, 2.81, 4.22 ...): no release of
// batch-export before the demo ended.
//
// Nothing consumed with work waiting is a stall, not a capacity: that
// reading still drains (its wait is unbounded: a consumer that stopped is
// at the floor one interval on), but the estimate is kept, and a reading
// with no lag does not lower it; caught up, the law re-opens from the 400
// msg/s the consumer showed. Red before: the rate climbed 1.2, 1.9, 2.8, 4.2
// ... msg/s, 108 msg/s 12 readings after the stall.
func TestControllerStallNotCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		// idle: caught-up readings with nothing produced (the rate at 0)
		// before the trickle: a reading with no lag and nothing consumed
		// read as a capacity of 0 as well (a traced demo run under load
		// at 20:22 UTC, session 18: "caught up: probing from 0/s").
		idle int
	}{
		{"trickle at once", 0},
		{"a reading with nothing produced first", 1},
	} {
		t.Run(tc.name, func(t *testing.T) { stallThenCaughtUp(t, tc.idle) })
	}
}

func stallThenCaughtUp(t *testing.T, idle int) {
	p := Policy{Name: "demo", MaxAge: 2 * time.Second, HardAge: 8 * time.Second}
	const offered, capacity = 1800.0, 400.0
	type reading struct {
		lag                int64
		consumed, produced float64
		corrected          bool
	}
	head := []reading{
		{50, 1800, 1800, false}, // healthy, unlimited
		{50, 1800, 1800, false},
		{50, 1800, 1800, false},
		{700, 1114, 1800, false}, // saturated at 1,114 msg/s
		{1043, 399, 250, false},  // slowed to 400: a drain
		{700, 399, 56, false},
		{743, 0, 43, false}, // the stall: nothing consumed, 743 waiting
		{0, 743, 0, true},   // drained; a commit corrected the reading
	}
	const stallAt = 6
	for range idle {
		head = append(head, reading{})
	}
	c := newCtl(t, ControllerConfig{})
	at := func(k int) time.Time { return leaseT0.Add(time.Duration(k+1) * time.Second) }
	step := func(k int, r reading) Decision {
		s := st(float64(k+1), r.lag, r.consumed, r.produced)
		s.Corrected = r.corrected
		return c.Step(s, p, at(k))
	}
	for k, r := range head {
		d := step(k, r)
		if k == stallAt && (d.Rate != 0 || d.Rule != RuleDrain) {
			t.Fatalf("the stall reading: %s at %.0f/s (%s), want %s at 0/s: nothing consumed with work waiting still drains", d.Rule, d.Rate, d.Reason, RuleDrain)
		}
	}
	// Caught up: the consumer consumes what the producers are let
	// through (a trickle of about 1 msg/s while the rate is 0).
	rate := 0.0
	for k := len(head); k < len(head)+12; k++ {
		produced := max(min(offered, rate), 1)
		d := step(k, reading{lag: 0, consumed: produced, produced: produced})
		t.Logf("reading %d: %s at %.1f/s, capacity %.1f/s (%s)", k, d.Rule, d.Rate, d.Capacity, d.Reason)
		if d.IsUnlimited() {
			return
		}
		rate = d.Rate
		if k == len(head)+1 && rate < capacity {
			t.Errorf("reading %d, caught up after the stall: %s at %.1f/s, want at least the %.0f/s the consumer showed before it (%s)", k, d.Rule, rate, capacity, d.Reason)
		}
	}
	if rate < capacity {
		t.Errorf("12 readings after the stall, still limited at %.1f/s, under the %.0f/s the consumer showed before it: the quota locked", rate, capacity)
	}
}

// TestControllerStallStaysStopped: the estimate a stall reading keeps does
// not open the rate while nothing is consumed: a consumer that stops with
// work waiting is drained (rate 0) at every reading until it consumes again.
func TestControllerStallStaysStopped(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	at := func(k int) time.Time { return leaseT0.Add(time.Duration(k) * time.Second) }
	c.Step(st(1, 50, 800, 800), p, at(1))
	c.Step(st(2, 600, 400, 800), p, at(2)) // saturated at 400
	for k := 3; k < 10; k++ {
		d := c.Step(st(float64(k), 600+int64(k), 0, 1), p, at(k))
		if d.Rate != 0 {
			t.Fatalf("reading %d, nothing consumed, lag %d: %s at %.1f/s (%s), want 0/s", k, d.Lag, d.Rule, d.Rate, d.Reason)
		}
	}
}

// TestControllerStallHungNotSpare: a consumer that hangs with a small
// backlog once the producers obey a drain (nothing produced) is held at
// 0/s at every reading. With the ceiling kept at the estimate from before
// the stall, consumed 0 of it with a backlog under E x that ceiling read
// as capacity to spare: the probe from 0/s, then release to unlimited every
// four readings while the consumer was hung (red before: unlimited at
// readings 7 and 11, at 400 and at 2,000 msg/s).
func TestControllerStallHungNotSpare(t *testing.T) {
	for _, tc := range []struct {
		name    string
		before  []lag.State
		waiting int64
	}{
		{"400 msg/s, 150 waiting", []lag.State{st(1, 50, 800, 800), st(2, 600, 400, 800), st(3, 150, 450, 0), st(4, 150, 0, 10)}, 150},
		{"2,000 msg/s, 500 waiting", []lag.State{st(1, 100, 1800, 1800), st(2, 3000, 2000, 4000), st(3, 500, 2500, 0), st(4, 500, 0, 20)}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Name: "p", MaxAge: 2 * time.Second}
			c := newCtl(t, ControllerConfig{})
			for _, s := range tc.before {
				c.Step(s, p, s.At)
			}
			for k := 5; k < 12; k++ {
				s := st(float64(k), tc.waiting, 0, 0)
				if d := c.Step(s, p, s.At); d.Rate != 0 {
					t.Errorf("reading %d, hung with %d waiting: %s at %.1f/s (%s), want 0/s", k, tc.waiting, d.Rule, d.Rate, d.Reason)
				}
			}
		})
	}
}

// TestControllerStallUnmeasuredAfter: a reading that measures nothing
// after a stall (no commit yet) reads no wait at the estimate kept from
// before the stall: that estimate is for the reading that measures again.
// Red before: saturated at 400/s, then kept. A stall reading whose position
// moved (all of it on avoided partitions, see leaveOutLate) is set up by
// dating the last move at it.
func TestControllerStallUnmeasuredAfter(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	c.Step(st(1, 50, 800, 800), p, st(1, 0, 0, 0).At)
	c.Step(st(2, 600, 400, 800), p, st(2, 0, 0, 0).At)
	stall := st(3, 600, 0, 10)
	c.Step(stall, p, stall.At)
	c.targets[ordersK].moveAt = stall.At
	for k := 4; k < 6; k++ {
		s := st(float64(k), 600, 0, 0)
		s.CommitInterval = 3 * time.Second
		if d := c.Step(s, p, s.At); d.Rate != 0 {
			t.Errorf("reading %d, nothing measured since the stall: %s at %.1f/s (%s), want 0/s", k, d.Rule, d.Rate, d.Reason)
		}
	}
}
