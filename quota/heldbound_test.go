package quota

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerHeldBoundsAtOnce: a hook consumer in polls of at most
// 500 at 2,000/s, offered 2,000/s and unlimited, observed every second,
// slows to 400/s 0.7 s into a cycle. The next cycle sees its position
// moved (a poll); the poll it took then (250 records, 0.6 s at 400/s) is
// in hand, its reported position still, when the wake brings a cycle
// 0.25 s later (the message in hand late). That early cycle read nothing
// (a position still for less than an interval measures nothing) and
// decided on the capacity from before the drop: 2,000/s, the rate at the
// offer (lagbridge bench's hook row at 1 s: "saturated: capacity 1365/s,
// wait 1.14s" in the second after the drop).
//
// With the records held and for how long in its reports (lag.Report.Held,
// HeldFor: 250 for 0.4 s), that cycle reads the capacity below 1,000/s
// (633/s) and limits at once.
func TestControllerHeldBoundsAtOnce(t *testing.T) {
	for _, counts := range []bool{false, true} {
		h := newHookRun(t, counts)
		for range 10 {
			h.observe(1, 1)
		}
		// The drop 0.7 s into a cycle; the next cycle sees the position
		// moved (the poll it takes then is in hand), the wake brings
		// one 0.25 s after that with the position still.
		h.con.run(0.7, min(2000, h.rate))
		h.con.rate = 400
		h.observe(0.3, 1)
		d := h.observe(0.25, 0.25)
		held := h.con.now - h.con.pollAt
		t.Logf("counts %v: %.2f s into a poll of %.0f: capacity %.0f/s, %v %s", counts, held, h.con.hand, d.Capacity, d.Rule, d.Reason)
		switch {
		case counts && (d.Capacity >= 1000 || d.IsUnlimited()):
			t.Errorf("with the records held reported, the first cycle after the drop reads capacity %.0f/s (%s), want below 1,000/s and a limit", d.Capacity, d.Reason)
		case !counts && d.Capacity < 1500:
			t.Errorf("without the records held reported, capacity %.0f/s: the still position was expected to measure nothing yet", d.Capacity)
		}
	}
}

// hookRun is a controller deciding on a pollConsumer (a hook consumer in
// polls of at most 500 at 2,000/s, offered 2,000/s) under a 2 s maxAge.
type hookRun struct {
	t    *testing.T
	p    Policy
	c    *Controller
	con  *pollConsumer
	rate float64
	at   time.Time
}

func newHookRun(t *testing.T, counts bool) *hookRun {
	return &hookRun{t: t, p: Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5},
		c:   newCtl(t, ControllerConfig{Interval: time.Second}),
		con: &pollConsumer{rate: 2000, maxPoll: 500, counts: counts}, rate: math.Inf(1), at: leaseT0}
}

// observe runs the consumer for run seconds and observes it dt after the
// last observation.
func (h *hookRun) observe(run, dt float64) Decision {
	h.con.run(run, min(2000, h.rate))
	h.at = h.at.Add(time.Duration(dt * float64(time.Second)))
	d := h.c.Step(h.con.state(h.at, dt, 0), h.p, h.at)
	h.rate = d.Rate
	return d
}

// TestControllerHeldHiccup: a hook consumer of 2,000/s keeping up with
// 1,500/s offered (small polls, a few records in hand) stalls once for
// 100 or 200 ms (a GC pause, one slow call), at a random point of a
// cycle, observed every second with 10% jitter. The stall costs it no
// backlog worth a limit: producers must not be refused while it is
// caught up (lag <= 2).
//
// Red when a move's reading was capped by held/heldFor: the interval in
// which the position moved read the records of the poll in hand over the
// stall (12/0.18 s = 66/s) as its capacity, drained the producers, and
// probed back from the minimum with no lag.
func TestControllerHeldHiccup(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	for _, stall := range []float64{0.1, 0.2} {
		refused, idle := 0, 0
		for seed := uint64(1); seed <= 20; seed++ {
			c := newCtl(t, ControllerConfig{Interval: time.Second})
			con := &pollConsumer{rate: 2000, maxPoll: 500, counts: true, stallAt: float64(30*1500 + seed*37), stall: stall}
			rng := rand.New(rand.NewPCG(seed, 1))
			rate, at := math.Inf(1), leaseT0
			for el := 0.0; el < 60; {
				dt := 0.9 + 0.2*rng.Float64()
				el += dt
				con.run(dt, min(1500, rate))
				at = at.Add(time.Duration(dt * float64(time.Second)))
				s := con.state(at, dt, 0)
				d := c.Step(s, p, at)
				rate = d.Rate
				if el > 20 && !d.IsUnlimited() && d.Rate < 1500*0.99 {
					refused++
					if s.Lag <= 2 {
						idle++
					}
				}
			}
		}
		t.Logf("a %.0f ms stall, 20 runs: %d observations refused, %d of them caught up", stall*1000, refused, idle)
		if idle > 0 {
			t.Errorf("a %.0f ms stall at 1,500/s of 2,000/s: producers refused %d times while the consumer was caught up (lag <= 2)", stall*1000, idle)
		}
	}
}

// TestHeldBound: what heldBound reads from a state's partitions. The
// records of one poll (the same report time less HeldFor) add up to one
// bound; members' polls add up as bounds; a partition with lag and no
// count (an older reporter, NATS) leaves no bound, wherever it
// is among the partitions.
func TestHeldBound(t *testing.T) {
	at := leaseT0
	held := func(lagN, n int64, heldFor time.Duration) lag.PartitionState {
		rep := lag.Report{At: at, Position: 10, HeadTime: at.Add(-time.Second), Held: n, HeldFor: heldFor}
		return lag.PartitionState{PartitionSample: lag.PartitionSample{End: 10 + lagN, Lag: lagN, Reported: rep},
			Source: lag.SourceConsumer, Position: 10}
	}
	idle := lag.PartitionState{PartitionSample: lag.PartitionSample{End: 10, Reported: lag.Report{At: at, Position: 10}},
		Source: lag.SourceConsumer, Position: 10}
	cases := []struct {
		name        string
		parts       []lag.PartitionState
		bound, busy float64
		ok          bool
	}{
		{"one partition", []lag.PartitionState{held(500, 100, 500*time.Millisecond)}, 200, 0.5, true},
		{"one poll, three partitions: summed", []lag.PartitionState{held(500, 100, 500*time.Millisecond), idle,
			held(500, 300, 500*time.Millisecond), held(40, 40, 500*time.Millisecond)}, 880, 0.5, true},
		{"two polls: bounds added", []lag.PartitionState{held(500, 100, 500*time.Millisecond),
			held(500, 300, 250*time.Millisecond)}, 1400, 0.5, true},
		{"no count first", []lag.PartitionState{held(500, 0, 0), held(500, 300, 500*time.Millisecond)}, 0, 0, false},
		{"no count last", []lag.PartitionState{held(500, 300, 500*time.Millisecond), held(500, 0, 0)}, 0, 0, false},
		{"count for no time", []lag.PartitionState{held(500, 300, 0)}, 0, 0, false},
		{"idle only", []lag.PartitionState{idle}, 0, 0, false},
	}
	for _, tc := range cases {
		bound, busy, ok := heldBound(&lag.State{At: at, Partitions: tc.parts})
		if ok != tc.ok || math.Abs(bound-tc.bound) > 1e-9 || math.Abs(busy-tc.busy) > 1e-9 {
			t.Errorf("%s: heldBound = %.1f/s over %.2f s, %v; want %.1f/s over %.2f s, %v", tc.name, bound, busy, ok, tc.bound, tc.busy, tc.ok)
		}
	}
}
