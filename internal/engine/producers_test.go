package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// TestUnlistedFloodDoesNotStarveListed reproduces issue 13's attack at the
// engine: on a topic cut to below what its listed CRITICAL producer wants,
// 4,000 anonymous ids report a demand of 1e6 msg/s, for several cycles.
// The listed producer's lease does not move; with the default policy 32
// of the ids get a SHEDDABLE share below it and the rest a stop lease that
// says why.
func TestUnlistedFloodDoesNotStarveListed(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, quota.Policy{Name: "orders", MaxAge: 2 * time.Second,
		Producers: []quota.ProducerSpec{{ID: "checkout", Criticality: quota.Critical}}})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	checkout := func() quotaproto.Report {
		return quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 5000}}}
	}
	if _, err := e.Report(checkout()); err != nil {
		t.Fatal(err)
	}
	// The consumer slows: the topic is limited to less than checkout
	// wants, so checkout alone would get the topic's whole rate.
	w.consume = 800
	w.cycles(2)
	alone := func(step string) {
		t.Helper()
		set, _, _ := hub.Current("checkout")
		d := e.Decisions()[0]
		if got := rateOf(set.Leases[0]); got != d.Rate || !(got > 0) || got > 5000 {
			t.Fatalf("%s: checkout's rate %v, want the topic's %v", step, got, d.Rate)
		}
	}
	alone("before the flood")

	const flood = 4000
	refused, admitted := 0, 0
	for round := range 3 {
		for i := range flood {
			set, err := e.Report(quotaproto.Report{Producer: fmt.Sprintf("anon-%d", i),
				Topics: []quotaproto.TopicDemand{{Topic: "orders", Criticality: "CRITICAL_PLUS", Demand: 1e6}}})
			if err != nil {
				t.Fatal(err)
			}
			if round > 0 {
				continue
			}
			l := set.Leases[0]
			if l.Signal == quotaproto.SignalStop && rateOf(l) == 0 && strings.Contains(l.Reason, "not listed") {
				refused++
			} else {
				admitted++
			}
		}
		if _, err := e.Report(checkout()); err != nil {
			t.Fatal(err)
		}
		alone(fmt.Sprintf("round %d, after the reports", round))
		w.cycles(1)
		alone(fmt.Sprintf("round %d, after a cycle", round))
	}
	if admitted != quota.DefaultMaxUnlisted || refused != flood-quota.DefaultMaxUnlisted {
		t.Fatalf("%d admitted, %d refused; want %d admitted", admitted, refused, quota.DefaultMaxUnlisted)
	}
}

// TestProducerCap: the engine keeps at most MaxProducers ids; a new id
// beyond gets a BusyError (ErrTooManyProducers, a retry-after of one
// interval) while known ids keep reporting; the cycles evict ids that
// stopped reporting, which makes room again.
func TestProducerCap(t *testing.T) {
	c := &clock{now: t0}
	hubE, hub := newEngine(t, c, quota.Policy{Name: "orders", MaxAge: 2 * time.Second})
	e := hubE
	e.maxProducers = 100
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	report := func(id string) error {
		_, err := e.Report(quotaproto.Report{Producer: id, Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1}, {Topic: "unobserved"}}})
		return err
	}
	for i := range 150 {
		err := report(fmt.Sprintf("p-%d", i))
		var busy *BusyError
		switch {
		case i < 100 && err != nil:
			t.Fatalf("p-%d: %v", i, err)
		case i >= 100 && (!errors.Is(err, ErrTooManyProducers) || !errors.As(err, &busy) || busy.RetryAfter() != time.Second || busy.Max != 100):
			t.Fatalf("p-%d: %v, want a BusyError", i, err)
		}
	}
	if _, _, ok := hub.Current("p-120"); ok {
		t.Fatal("a refused id has a lease set")
	}
	// A known id keeps reporting; the others stop. Past the lease
	// lifetime the cycles evict them, and a new id finds room.
	for range 11 {
		w.cycles(1)
		if err := report("p-0"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.producers); n != 1 {
		t.Fatalf("%d producers kept after eviction, want 1", n)
	}
	if err := report("p-120"); err != nil {
		t.Fatalf("after eviction: %v", err)
	}
	if _, _, ok := hub.Current("p-7"); ok {
		t.Fatal("an evicted producer still has a lease set")
	}
}

// TestReportPushesWhatItChanges: a report that changes other producers'
// leases (a small topic, re-allocated at once) pushes their new sets, and
// only theirs.
func TestReportPushesWhatItChanges(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, quota.Policy{Name: "orders", MaxAge: 2 * time.Second,
		Producers: []quota.ProducerSpec{{ID: "a"}, {ID: "b"}, {ID: "other"}}})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	w.consume = 800
	w.cycles(2)
	for _, id := range []string{"a", "other"} {
		topic := "orders"
		if id == "other" {
			topic = "unobserved"
		}
		if _, err := e.Report(quotaproto.Report{Producer: id, Topics: []quotaproto.TopicDemand{{Topic: topic}}}); err != nil {
			t.Fatal(err)
		}
	}
	_, aChanged, _ := hub.Current("a")
	_, otherChanged, _ := hub.Current("other")
	set, err := e.Report(quotaproto.Report{Producer: "b", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}})
	if err != nil || rateOf(set.Leases[0]) <= 0 {
		t.Fatalf("b: %+v, %v", set, err)
	}
	select {
	case <-aChanged:
	default:
		t.Fatal("a's share halved without a push")
	}
	select {
	case <-otherChanged:
		t.Fatal("a producer of another topic was pushed")
	default:
	}
	a, _, _ := hub.Current("a")
	if rateOf(a.Leases[0]) != rateOf(set.Leases[0]) {
		t.Fatalf("a %v and b %v do not share equally", rateOf(a.Leases[0]), rateOf(set.Leases[0]))
	}
}
