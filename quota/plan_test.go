package quota

import (
	"math"
	"testing"
	"time"
)

// TestControllerPlansAfterPause: a decision that pauses (a step down, a
// drain: rate 0) says what follows it (Then): a step down the law at the
// backlog projected one interval on, two intervals after the decision (one
// after the next decision is due); a drain the capacity once the backlog
// is projected back at the setpoint, one interval after that. The next
// decision, when it comes, has its own (none, limited at the law). A stop
// plans nothing.
func TestControllerPlansAfterPause(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	at := func(s float64) time.Time { return leaseT0.Add(time.Duration(s * float64(time.Second))) }
	t.Run("step down", func(t *testing.T) {
		c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
		for _, s := range []float64{1, 1.25, 1.5} {
			if d := c.Step(st(s, 500, 2000, 2000), p, at(s)); d.Then != nil {
				t.Fatalf("saturated at %.2fs with a plan %+v: %s", s, *d.Then, d.Reason)
			}
		}
		// 2,000 -> 400 a fifth into the interval: 720/s seen, 940
		// queued: pause.
		d := c.Step(st(1.75, 940, 720, 2000), p, at(1.75))
		if d.Rule != RuleStepDown || d.Rate != 0 || d.Then == nil {
			t.Fatalf("step down: rate %.0f, rule %s, plan %v: %s", d.Rate, d.Rule, d.Then, d.Reason)
		}
		// One interval at 720/s drains 180 of 940: 760 left, 0.25 s
		// target: 720 + (180 - 760)/max(2 - 0.25, 0.5) = 389/s.
		if want := at(2.25); !d.Then.At.Equal(want) {
			t.Errorf("plan at %v, want %v (two intervals on)", d.Then.At.Sub(leaseT0), want.Sub(leaseT0))
		}
		if math.Abs(d.Then.Rate-389) > 2 {
			t.Errorf("plan rate %.1f, want 389 (the law at the projected backlog)", d.Then.Rate)
		}
		// The next, clean interval decides: no plan.
		if d = c.Step(st(2, 500, 400, 0), p, at(2)); d.Then != nil || d.Rule != RuleSaturated {
			t.Fatalf("after the pause: rule %s, plan %v", d.Rule, d.Then)
		}
	})
	t.Run("drain", func(t *testing.T) {
		c := newCtl(t, ControllerConfig{})
		// 3 s of wait at 400/s, budget 2 s: drain; back at the 0.5 s
		// setpoint after 2.5 s, then 400/s, one interval later.
		d := c.Step(st(1, 1200, 400, 800), p, at(1))
		if d.Rule != RuleDrain || d.Rate != 0 || d.Then == nil {
			t.Fatalf("drain: rate %.0f, rule %s, plan %v: %s", d.Rate, d.Rule, d.Then, d.Reason)
		}
		if want := at(4.5); !d.Then.At.Equal(want) || d.Then.Rate != 400 {
			t.Errorf("plan %v at %v, want 400 at %v", d.Then.Rate, d.Then.At.Sub(leaseT0), want.Sub(leaseT0))
		}
	})
	t.Run("stop", func(t *testing.T) {
		c := newCtl(t, ControllerConfig{})
		hard := p
		hard.HardAge = 2500 * time.Millisecond
		if d := c.Step(st(1, 1200, 400, 800), hard, at(1)); d.Signal != SignalStop || d.Then != nil {
			t.Fatalf("hard age: signal %s, plan %v", d.Signal, d.Then)
		}
	})
}

// TestControllerPlansAfterProbe: a probe that raises the rate above the
// capacity the controller works with plans that capacity two intervals on
// (answered by the next decision, due one interval on); a decision that
// keeps its rate plans nothing.
func TestControllerPlansAfterProbe(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	at := func(s float64) time.Time { return leaseT0.Add(time.Duration(s * float64(time.Second))) }
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	// Saturated at 400/s, then caught up with the producers using the
	// rate: probes up from it.
	for _, s := range []float64{1, 1.25, 1.5} {
		c.Step(st(s, 300, 400, 800), p, at(s))
	}
	var probed *Decision
	for i, s := range []float64{1.75, 2, 2.25, 2.5, 2.75} {
		d := c.Step(st(s, 0, 400, 400+float64(i)*40), p, at(s))
		if d.Rule == RuleProbe && d.Rate > d.Capacity {
			probed = &d
			break
		}
		if d.Then != nil && d.Rule != RuleProbe {
			t.Fatalf("%s at %.2fs with a plan %+v", d.Rule, s, *d.Then)
		}
	}
	if probed == nil {
		t.Fatal("no probe above the capacity")
	}
	if probed.Then == nil || probed.Then.Rate != probed.Capacity || !probed.Then.At.Equal(probed.At.Add(500*time.Millisecond)) {
		t.Fatalf("probe to %.0f (capacity %.0f): plan %+v, want the capacity two intervals on", probed.Rate, probed.Capacity, probed.Then)
	}
}

// TestCombineTopicPlans: a topic's plan is from the latest of its groups'
// plans, at the lowest of their planned rates and the other groups' rates.
func TestCombineTopicPlans(t *testing.T) {
	t0 := leaseT0
	g := func(group string, rate float64, then *Plan) Decision {
		tg := ordersK
		tg.Group = group
		return Decision{Target: tg, Policy: "p", Rate: rate, Signal: SignalSlowDown, Then: then, Rule: RuleSaturated}
	}
	pl := func(ms int, rate float64) *Plan {
		return &Plan{At: t0.Add(time.Duration(ms) * time.Millisecond), Rate: rate}
	}
	for _, tc := range []struct {
		name string
		ds   []Decision
		want *Plan
	}{
		{"one pause", []Decision{g("a", 0, pl(500, 80))}, pl(500, 80)},
		{"another group allows more", []Decision{g("a", 0, pl(500, 80)), g("b", 100, nil)}, pl(500, 80)},
		{"another group allows less", []Decision{g("a", 0, pl(500, 80)), g("b", 50, nil)}, pl(500, 50)},
		{"two pauses", []Decision{g("a", 0, pl(500, 80)), g("b", 0, pl(900, 120))}, pl(900, 80)},
		{"another group at 0 without a plan", []Decision{g("a", 0, pl(500, 80)), g("b", 0, nil)}, nil},
		{"a probe binds", []Decision{g("a", 300, pl(500, 200)), g("b", 250, nil)}, pl(500, 200)},
		{"a probe that does not bind", []Decision{g("a", 300, pl(500, 280)), g("b", 250, nil)}, nil},
		{"none", []Decision{g("a", 0, nil), g("b", 50, nil)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CombineTopic(tc.ds).Then
			if (got == nil) != (tc.want == nil) || got != nil && (!got.At.Equal(tc.want.At) || got.Rate != tc.want.Rate) {
				t.Fatalf("plan %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLeasePlanShares: each lease carries the producer's share of the
// topic's plan through the same allocation; a plan due already or past
// the lease's lifetime is left out; the plan is part of the lease's
// content (a new one, or none, makes a new version; one moved by no more
// than planSlack does not).
func TestLeasePlanShares(t *testing.T) {
	b := newBook(t, LeaseConfig{Interval: 250 * time.Millisecond})
	now := leaseT0
	report(t, b, "orders", Critical, 30, now)
	report(t, b, "analytics", Sheddable, 1000, now)
	p := Policy{Name: "p", MaxAge: 2 * time.Second, Producers: []ProducerSpec{{ID: "orders", Criticality: Critical}, {ID: "analytics", Criticality: Sheddable}}}
	paused := func(then *Plan) TopicDecision {
		d := decision(0, SignalSlowDown)
		d.Then = then
		return d
	}
	get := func(ls []Lease, id string) Lease {
		for _, l := range ls {
			if l.Producer == id {
				return l
			}
		}
		t.Fatalf("no lease of %s", id)
		return Lease{}
	}
	ls := b.Apply(paused(&Plan{At: now.Add(500 * time.Millisecond), Rate: 100}), p, now)
	o, a := get(ls, "orders"), get(ls, "analytics")
	if o.Rate != 0 || o.Then == nil || o.Then.Rate != 30 || a.Then == nil || a.Then.Rate != 70 || a.Then.Burst != 7 {
		t.Fatalf("leases %+v %+v, plans %+v %+v: want 30 and 70 of 100", o, a, o.Then, a.Then)
	}
	v := o.Version
	// The same plan 40 ms later: the same version.
	ls = b.Apply(paused(&Plan{At: now.Add(540 * time.Millisecond), Rate: 100}), p, now)
	if o = get(ls, "orders"); o.Version != v {
		t.Fatalf("a plan moved by 40ms made version %d after %d", o.Version, v)
	}
	// Moved by 100 ms: a new version.
	ls = b.Apply(paused(&Plan{At: now.Add(600 * time.Millisecond), Rate: 100}), p, now)
	if o = get(ls, "orders"); o.Version == v || !o.Then.At.Equal(now.Add(600*time.Millisecond)) {
		t.Fatalf("a plan moved by 100ms: version %d (was %d), plan %+v", o.Version, v, o.Then)
	}
	v = o.Version
	// No plan: a new version, no plan.
	ls = b.Apply(paused(nil), p, now)
	if o = get(ls, "orders"); o.Version == v || o.Then != nil {
		t.Fatalf("without a plan: version %d (was %d), plan %+v", o.Version, v, o.Then)
	}
	// Due already, or past the lease's lifetime (2.5 s): left out.
	for _, at := range []time.Duration{0, -time.Second, 2500 * time.Millisecond, time.Hour} {
		ls = b.Apply(paused(&Plan{At: now.Add(at), Rate: 100}), p, now)
		if o = get(ls, "orders"); o.Then != nil {
			t.Fatalf("a plan %v from now went into the lease: %+v", at, o.Then)
		}
	}
}
