package engine

import (
	"testing"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestMeasuredIdleKeepsTrickle: a CRITICAL_PLUS producer idle on a limited
// topic (measured 0) that a SHEDDABLE producer asks all of keeps one
// message per refresh (the lease lifetime's third: 10 s / 3 here, 0.3
// msg/s, burst 1), so that the first message after idle passes in Drop
// mode and the report it wakes brings the class's share; the trickle
// comes out of the lower classes (the grants add up to the topic's rate,
// not over it). Red on 6bc9bf3: checkout's lease is 0 (rate 0, burst 0)
// and its first message after each idle window is refused.
func TestMeasuredIdleKeepsTrickle(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, twoProducers)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(10)
	w.consume = 800
	w.cycles(2)
	for _, r := range []quotaproto.Report{
		{Producer: "batch", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 5000}}},
		{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Measured: true}}},
	} {
		if _, err := e.Report(r); err != nil {
			t.Fatal(err)
		}
	}
	total := e.Decisions()[0].Rate
	ck, _, _ := hub.Current("checkout")
	bt, _, _ := hub.Current("batch")
	trickle := 3 / e.lifetime.Seconds()
	if r := rateOf(ck.Leases[0]); !near(r, trickle) || ck.Leases[0].Burst != 1 {
		t.Fatalf("checkout idle: rate %v burst %d, want %v (one message a refresh), burst 1", r, ck.Leases[0].Burst, trickle)
	}
	// batch's lease keeps its content within the 1% material change.
	if r := rateOf(bt.Leases[0]); r < total-trickle-1e-9 || r > total {
		t.Fatalf("batch: %v, want the topic's %v less checkout's trickle %v (or kept within 1%%)", r, total, trickle)
	}
}
