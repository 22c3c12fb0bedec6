package engine

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var target = lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "orders", Group: "billing"}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// twoProducers is the story's policy: checkout (CRITICAL_PLUS) and batch
// (SHEDDABLE) write to what its consumers must take within 2 s.
var twoProducers = quota.Policy{Name: "p", MaxAge: 2 * time.Second,
	Producers: []quota.ProducerSpec{{ID: "checkout", Criticality: quota.CriticalPlus}, {ID: "batch", Criticality: quota.Sheddable}}}

func newEngine(tb testing.TB, c *clock, policies ...quota.Policy) (*Engine, *quotaserver.Hub) {
	tb.Helper()
	hub := quotaserver.NewHub()
	e, err := New(Config{Policies: policies, Hub: hub, Now: c.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Lease: quota.LeaseConfig{Interval: time.Second, VersionBase: 100, Rand: func() float64 { return 0.5 }}})
	if err != nil {
		tb.Fatal(err)
	}
	return e, hub
}

// feed runs the tracker and the engine for n one-second cycles of a
// consumer at consume msg/s under produce msg/s, starting with backlog.
type world struct {
	tr               *lag.Tracker
	end, consumed    int64
	produce, consume int64
	c                *clock
	e                *Engine
}

func (w *world) cycles(n int) {
	for range n {
		w.c.now = w.c.now.Add(time.Second)
		w.end += w.produce
		w.consumed = min(w.consumed+w.consume, w.end)
		backlog := w.end - w.consumed
		// The head is as old as the backlog at the produce rate.
		head := w.c.now.Add(-time.Duration(float64(backlog) / float64(max(w.produce, 1)) * float64(time.Second)))
		st := w.tr.Observe(lag.Sample{Target: target, At: w.c.now, Members: 1, Partitions: []lag.PartitionSample{{
			End: w.end, Lag: backlog, Committed: w.consumed, HeadTime: head, HeadKnown: true}}}, w.c.now)
		w.e.OnCycle("c1", w.c.now, []lag.State{st})
	}
}

func rateOf(l quotaproto.Lease) float64 {
	if l.Rate == nil {
		return -1 // unlimited
	}
	return *l.Rate
}

// TestEngine walks one topic through the story: producers report (an
// unknown topic gets an open lease), the consumer slows and the leases are
// cut with a new version pushed to the hub, sheddable before critical; a
// producer that stops reporting loses its lease.
func TestEngine(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, twoProducers)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)

	// A topic nobody observes: an open lease, at once.
	set, err := e.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 400}, {Topic: "elsewhere"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Leases) != 2 || rateOf(set.Leases[0]) != -1 || set.Leases[0].Topic != "elsewhere" || set.Version <= 100 {
		t.Fatalf("first set: %+v", set)
	}
	if _, err := e.Report(quotaproto.Report{Producer: "batch", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 600}}}); err != nil {
		t.Fatal(err)
	}
	before, changed, _ := hub.Current("checkout")

	// The consumer drops to 400 msg/s.
	w.consume = 400
	w.cycles(4)
	select {
	case <-changed:
	default:
		t.Fatal("no push to checkout after the drop")
	}
	ck, _, _ := hub.Current("checkout")
	bt, _, _ := hub.Current("batch")
	if ck.Version <= before.Version {
		t.Fatalf("version did not move: %d -> %d", before.Version, ck.Version)
	}
	ckRate, btRate := rateOf(ck.Leases[1]), rateOf(bt.Leases[0])
	if ckRate < 0 || btRate < 0 || btRate > ckRate {
		t.Fatalf("after the drop: checkout %v, batch %v: want both limited, sheddable below critical", ckRate, btRate)
	}
	if ck.Leases[1].Signal == quotaproto.SignalOK {
		t.Fatalf("signal %s after the drop", ck.Leases[1].Signal)
	}
	d := e.Decisions()
	if len(d) != 1 || d[0].Target != target {
		t.Fatalf("decisions %+v", d)
	}

	// batch stops reporting; past its lease lifetime (10 intervals) it
	// is gone from the hub, checkout (which reports) stays.
	for range 12 {
		w.cycles(1)
		if _, err := e.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 400}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := hub.Current("batch"); ok {
		t.Fatal("batch still has leases after it stopped reporting")
	}
	if _, _, ok := hub.Current("checkout"); !ok {
		t.Fatal("checkout lost its leases")
	}
}

// TestVanishedTopicLeavesItsLeases: the only target of a topic leaves (the
// topic was deleted): at that cycle its producers' cut lease gives way to
// the open lease of a topic nobody observes, not at its expiry.
func TestVanishedTopicLeavesItsLeases(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, quota.Policy{Name: "p", MaxAge: 2 * time.Second})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	if _, err := e.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1000}}}); err != nil {
		t.Fatal(err)
	}
	w.consume = 100
	w.cycles(4)
	set, _, _ := hub.Current("checkout")
	if len(set.Leases) != 1 || rateOf(set.Leases[0]) < 0 {
		t.Fatalf("before: %+v, want one cut lease", set.Leases)
	}
	c.now = c.now.Add(time.Second)
	e.OnCycle("c1", c.now, nil)
	set, _, _ = hub.Current("checkout")
	if len(set.Leases) != 1 || rateOf(set.Leases[0]) != -1 || set.Leases[0].Signal != quotaproto.SignalOK {
		t.Fatalf("after the target left: %+v, want the open lease", set.Leases)
	}
	if d := e.Decisions(); len(d) != 0 {
		t.Fatalf("decisions %+v", d)
	}
}

// TestVersionsAcrossReplicas: two engines (replicas) started from the same
// low base number their sets on the wall clock: a set the second one
// makes after the first's last change has a higher version, however many
// changes the first made, so a producer failing over is not ignored.
func TestVersionsAcrossReplicas(t *testing.T) {
	report := func(tb testing.TB, e *Engine, topic string) uint64 {
		tb.Helper()
		set, err := e.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: topic}}})
		if err != nil {
			tb.Fatal(err)
		}
		return set.Version
	}
	ca, cb := &clock{now: t0}, &clock{now: t0}
	a, _ := newEngine(t, ca)
	b, _ := newEngine(t, cb)
	var last uint64
	for i := range 50 { // many changes within one microsecond of clock
		v := report(t, a, fmt.Sprintf("t%d", i))
		if v <= last {
			t.Fatalf("change %d: version %d after %d", i, v, last)
		}
		last = v
	}
	if last < uint64(t0.UnixMicro()) {
		t.Fatalf("version %d below the clock %d", last, t0.UnixMicro())
	}
	cb.now = t0.Add(time.Millisecond)
	if v := report(t, b, "t0"); v <= last {
		t.Errorf("the second replica's set is %d, below the first's %d", v, last)
	}
}

// TestRenumber: a replica that starts leading numbers every set above the
// last version the previous leader wrote (the floor), even when its clock
// is behind it, pushes them to the hub, and keeps numbering above.
func TestRenumber(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c)
	for _, p := range []string{"a", "b"} {
		if _, err := e.Report(quotaproto.Report{Producer: p, Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
			t.Fatal(err)
		}
	}
	floor := uint64(t0.Add(time.Hour).UnixMicro()) // the old leader's clock ran ahead
	e.Renumber(floor)
	seen := map[uint64]bool{}
	for _, p := range []string{"a", "b"} {
		set, _, _ := hub.Current(p)
		if set.Version <= floor || seen[set.Version] {
			t.Errorf("%s: version %d, want above %d and unique", p, set.Version, floor)
		}
		seen[set.Version] = true
	}
	set, err := e.Report(quotaproto.Report{Producer: "a", Topics: []quotaproto.TopicDemand{{Topic: "payments"}}})
	if err != nil {
		t.Fatal(err)
	}
	if set.Version <= floor+2 {
		t.Errorf("a change after renumbering: version %d, want above %d", set.Version, floor+2)
	}
}

// TestRenumberAbove: a producer that holds a version above its set's (a
// follower's) gets its set, alone, numbered above it; one that holds the
// set's own version, or an older one, changes nothing.
func TestRenumberAbove(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c)
	for _, p := range []string{"a", "b"} {
		if _, err := e.Report(quotaproto.Report{Producer: p, Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
			t.Fatal(err)
		}
	}
	a, _, _ := hub.Current("a")
	b, _, _ := hub.Current("b")
	for _, held := range []uint64{a.Version, a.Version - 1, 0} {
		if e.RenumberAbove("a", held) {
			t.Errorf("held %d (the set's %d): renumbered", held, a.Version)
		}
	}
	if e.RenumberAbove("nobody", a.Version+10) {
		t.Error("an unknown producer's set renumbered")
	}
	held := b.Version + 1000
	if !e.RenumberAbove("a", held) {
		t.Fatalf("held %d above the set's %d: not renumbered", held, a.Version)
	}
	if got, _, _ := hub.Current("a"); got.Version <= held || len(got.Leases) != len(a.Leases) {
		t.Errorf("a: version %d with %d leases, want above %d with %d", got.Version, len(got.Leases), held, len(a.Leases))
	}
	if got, _, _ := hub.Current("b"); got.Version != b.Version {
		t.Errorf("b: version %d, want %d (untouched)", got.Version, b.Version)
	}
}

// TestRenumberAboveBounded: a caller that tells the leader one version
// more than it was served, again and again, gets the set renumbered (a
// write of the lease state) at most once an interval, and a held version
// far ahead of the clock and the engine's versions moves nothing (it
// would number every producer's later sets above it).
func TestRenumberAboveBounded(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c)
	for _, p := range []string{"a", "b"} {
		if _, err := e.Report(quotaproto.Report{Producer: p, Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range 100 {
		a, _, _ := hub.Current("a")
		if e.RenumberAbove("a", a.Version+1) {
			n++
		}
		c.now = c.now.Add(10 * time.Millisecond)
	}
	if n != 1 {
		t.Errorf("renumbered %d times in 1 s (interval 1 s), want 1", n)
	}
	c.now = c.now.Add(time.Second)
	a, _, _ := hub.Current("a")
	for _, held := range []uint64{a.Version + uint64(time.Minute/time.Microsecond), math.MaxUint64} {
		if e.RenumberAbove("a", held) {
			t.Errorf("held %d, far ahead of the clock: renumbered the set", held)
		}
	}
	if !e.RenumberAbove("a", a.Version+1) {
		t.Error("an interval later: not renumbered")
	}
}

// TestEngaged: Engaged says whether a policy is engaged on a cluster (the
// daemon observes it faster then): no while the consumer keeps up, yes
// once the drop has its producers limited, no on another cluster; and no
// for decisions observing sooner cannot change (an abandoned target, a
// held one), limited as they may be; and no when asked only about other
// targets (the loop asks about those whose position moves finely enough).
func TestEngaged(t *testing.T) {
	all := []lag.Target{target}
	c := &clock{now: t0}
	e, _ := newEngine(t, c, twoProducers)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	if e.Engaged("c1", all) {
		t.Fatalf("engaged while the consumer keeps up: %+v", e.Decisions())
	}
	w.consume = 400
	w.cycles(4)
	if d := e.Decisions(); len(d) != 1 || d[0].IsUnlimited() {
		t.Fatalf("not limited after the drop: %+v", d)
	}
	if !e.Engaged("c1", all) || e.Engaged("c2", all) {
		t.Errorf("after the drop: engaged c1 %v (want true), c2 %v (want false)", e.Engaged("c1", all), e.Engaged("c2", all))
	}
	other := target
	other.Group = "other"
	if e.Engaged("c1", nil) || e.Engaged("c1", []lag.Target{other}) {
		t.Error("engaged when asked about no target or only another one")
	}
	for _, r := range []quota.Rule{quota.RuleAbandoned, quota.RuleHold} {
		e.mu.Lock()
		d := e.decisions["c1"][target]
		d.Rule = r
		e.decisions["c1"][target] = d
		e.mu.Unlock()
		if e.Engaged("c1", all) {
			t.Errorf("engaged by a %s decision", r)
		}
	}
}
