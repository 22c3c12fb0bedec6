package engine

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// TestRemoteDecisions: a replica that does not observe a topic leases it
// by the decisions of the replica that does (SetRemote), from its next
// cycle on; its own decision for a target wins over a remote one once it
// knows the target's rates (before, the remote one holds: the shard has
// just moved here); once the source is removed, the topic's producers get
// the open lease of a topic nobody observes.
func TestRemoteDecisions(t *testing.T) {
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	c := &clock{now: t0}
	cut := ownerCut(t, c, p)
	other, hub := newEngine(t, c, p)
	lease := func() quotaproto.Lease {
		t.Helper()
		if _, err := other.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1000}}}); err != nil {
			t.Fatal(err)
		}
		set, _, _ := hub.Current("checkout")
		if len(set.Leases) != 1 {
			t.Fatalf("leases %+v", set.Leases)
		}
		return set.Leases[0]
	}
	cycle := func(states ...lag.State) {
		c.now = c.now.Add(time.Second)
		other.OnCycle("c1", c.now, states)
	}
	steps := []struct {
		name    string
		do      func()
		limited bool
	}{
		{"nothing known: open", func() { cycle() }, false},
		{"set, before the next cycle: still open", func() { other.SetRemote("c1/0", cut) }, false},
		{"after the next cycle: the owner's cut", func() { cycle() }, true},
		{"an own decision without rates yet holds the remote one", func() {
			cycle(lag.State{Target: target, At: c.now, Status: lag.StatusOK, Live: lag.LiveYes})
		}, true},
		{"an own decision with rates wins", func() {
			(&world{tr: lag.NewTracker(nil), c: c, e: other, produce: 100, consume: 2000}).cycles(4)
		}, false},
		{"the own target gone: the remote one again", func() { cycle() }, true},
		{"source removed: open at the next cycle", func() { other.SetRemote("c1/0", nil); cycle() }, false},
	}
	for _, st := range steps {
		st.do()
		l := lease()
		if got := rateOf(l) >= 0; got != st.limited {
			t.Errorf("%s: lease %+v, limited %v, want %v", st.name, l, got, st.limited)
		}
	}
	if d := other.Decisions(); len(d) != 0 {
		t.Errorf("remote decisions listed as the engine's own: %+v", d)
	}
}

// TestRemoteAdopted: an engine that begins to decide a target another
// replica decided (its shard moved here, or it stands in) goes on from the
// former owner's cut: while it cannot measure the consumer's capacity yet
// (no commit moved since it began), the lease stays limited. (A fresh
// controller read that as a wait of 0, unlimited, and opened the topic
// the former owner limited.)
func TestRemoteAdopted(t *testing.T) {
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	c := &clock{now: t0}
	cut := ownerCut(t, c, p)
	other, hub := newEngine(t, c, p)
	other.SetRemote("c1/0", cut)
	// The new observer sees the backlog but no commit move.
	w := &world{tr: lag.NewTracker(nil), c: c, e: other, produce: 1000, consume: 100, end: 6000, consumed: 600}
	w.cycles(1)
	w.consume = 0
	for i := range 3 {
		w.cycles(1)
		if _, err := other.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1000}}}); err != nil {
			t.Fatal(err)
		}
		set, _, _ := hub.Current("checkout")
		if len(set.Leases) != 1 || rateOf(set.Leases[0]) < 0 {
			t.Fatalf("cycle %d without a commit: leases %+v, want the cut held (own decisions %+v)", i+1, set.Leases, other.Decisions())
		}
	}
}

// TestRemoteAdoptedLate: the former owner's decision reaches the engine a
// cycle after it began to decide the target (a replica that restarts
// observes its shard before it has read the lease state): while its own
// decision still has no rates, it goes on from the remote one all the
// same. (Adopted only at the cycle that began the target, it was missed,
// and the first decision with rates opened the topic.)
func TestRemoteAdoptedLate(t *testing.T) {
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	c := &clock{now: t0}
	cut := ownerCut(t, c, p)
	other, hub := newEngine(t, c, p)
	w := &world{tr: lag.NewTracker(nil), c: c, e: other, produce: 1000, consume: 100, end: 6000, consumed: 600}
	w.cycles(1)
	if d := other.Decisions(); len(d) != 1 || d[0].Rule != quota.RuleRatesUnknown {
		t.Fatalf("the first cycle's decisions %+v, want one without rates", d)
	}
	other.SetRemote("c1/0", cut) // read late
	w.consume = 0
	for i := range 3 {
		w.cycles(1)
		if _, err := other.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1000}}}); err != nil {
			t.Fatal(err)
		}
		set, _, _ := hub.Current("checkout")
		if len(set.Leases) != 1 || rateOf(set.Leases[0]) < 0 {
			t.Fatalf("cycle %d without a commit: leases %+v, want the cut held (own decisions %+v)", i+1, set.Leases, other.Decisions())
		}
	}
}

// ownerCut runs an engine of policy p, the shard's former owner, for six
// cycles of a consumer at 100 msg/s under 1,000 msg/s, and returns its
// decisions: one, a cut.
func ownerCut(t *testing.T, c *clock, p quota.Policy) []quota.Decision {
	t.Helper()
	owner, _ := newEngine(t, c, p)
	(&world{tr: lag.NewTracker(nil), c: c, e: owner, produce: 1000, consume: 100}).cycles(6)
	cut := owner.Decisions()
	if len(cut) != 1 || cut[0].IsUnlimited() {
		t.Fatalf("the owner's decisions %+v, want one cut", cut)
	}
	return cut
}
