package quota

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestUnlistedCannotStarveListed reproduces the starvation of issue 13:
// thousands of unlisted ids report a huge demand on a limited topic where a
// listed CRITICAL producer sends. Through the report path (Join) and the
// cycle (Apply), the listed producer's grant does not move when it wants
// more than the topic allows, and keeps its whole demand when it wants
// less; the unlisted ids are capped or refused as the policy says.
func TestUnlistedCannotStarveListed(t *testing.T) {
	const flood = 4000
	cases := []struct {
		name     string
		unlisted Unlisted
		demand   float64 // the listed producer's
		admitted int     // unlisted ids with a share
	}{
		// The default: 32 admitted at SHEDDABLE below checkout, the
		// rest refused; checkout wants more than the topic's 100 msg/s.
		{name: "default, overloaded", demand: 500, admitted: DefaultMaxUnlisted},
		// checkout wants less than the total: it keeps all of it (the
		// admitted unlisted ids share only what it leaves).
		{name: "default, spare room", demand: 40, admitted: DefaultMaxUnlisted},
		// A policy that refuses unlisted ids: none gets anything.
		{name: "refuse", unlisted: Unlisted{Admit: RefuseUnlisted}, demand: 500},
		// A generous cap changes nothing for checkout.
		{name: "cap 10000", unlisted: Unlisted{Max: 10000}, demand: 500, admitted: flood},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Policy{Name: "p", MaxAge: time.Second, MinRate: 10, Unlisted: c.unlisted,
				Producers: []ProducerSpec{{ID: "checkout", Criticality: Critical}}}
			d := decision(100, SignalSlowDown)
			b := newBook(t, LeaseConfig{})
			now := leaseT0
			alone, _, err := b.Join(Report{Producer: "checkout", Topic: ordersT, Demand: c.demand}, d, p, now)
			if err != nil {
				t.Fatal(err)
			}
			want := min(c.demand, d.Rate)
			if !close(min(alone.Rate, c.demand), want) {
				t.Fatalf("checkout alone: %v, want at least %v", alone.Rate, want)
			}
			for i := range flood {
				id := fmt.Sprintf("anon-%d", i)
				l, _, err := b.Join(Report{Producer: id, Topic: ordersT, Criticality: CriticalPlus, Demand: 1e6}, d, p, now)
				if err != nil {
					t.Fatal(err)
				}
				if got := i < c.admitted; got == l.Refused || !l.Unlisted || l.Criticality != Sheddable {
					t.Fatalf("%s: %+v, want admitted %v at SHEDDABLE", id, l, got)
				}
				if l.Refused && (l.Rate != 0 || l.Signal != SignalStop || !strings.Contains(l.Reason, "not listed")) {
					t.Fatalf("%s refused with %+v", id, l)
				}
			}
			check := func(step string, ls []Lease) {
				t.Helper()
				var admitted int
				var total float64
				for _, l := range ls {
					total += l.Rate
					switch {
					case l.Producer == "checkout":
						if c.demand >= d.Rate && l.Rate != alone.Rate {
							t.Errorf("%s: checkout %v, was %v alone", step, l.Rate, alone.Rate)
						}
						if l.Rate < want {
							t.Errorf("%s: checkout %v, below its demand %v", step, l.Rate, want)
						}
					case !l.Refused:
						admitted++
					}
				}
				if admitted != c.admitted {
					t.Errorf("%s: %d unlisted ids admitted, want %d", step, admitted, c.admitted)
				}
				if total > d.Rate+p.MinRate+1e-9 {
					t.Errorf("%s: %v granted in all, over %v", step, total, d.Rate+p.MinRate)
				}
			}
			check("after the reports", b.Leases())
			for i := range 3 {
				now = now.Add(time.Second)
				check(fmt.Sprintf("cycle %d", i), b.Apply(d, p, now))
			}
		})
	}
}

// TestUnlistedAdmission: unlisted ids are admitted first come, first
// served, and stay admitted while they report; a refused one waits and is
// admitted, in the order it came, once an admitted one expires.
func TestUnlistedAdmission(t *testing.T) {
	p := Policy{Name: "p", MaxAge: time.Second, Unlisted: Unlisted{Max: 2}}
	d := decision(90, SignalSlowDown)
	b := newBook(t, LeaseConfig{DemandTTL: 5 * time.Second})
	state := func(now time.Time) string {
		var s []string
		for _, l := range b.Apply(d, p, now) {
			if l.Refused {
				s = append(s, l.Producer+":refused")
			} else {
				s = append(s, fmt.Sprintf("%s:%g", l.Producer, l.Rate))
			}
		}
		return strings.Join(s, " ")
	}
	for _, id := range []string{"c", "a", "d", "b"} {
		if _, _, err := b.Join(Report{Producer: id, Topic: ordersT, Demand: 100}, d, p, leaseT0); err != nil {
			t.Fatal(err)
		}
	}
	if got := state(leaseT0); got != "a:45 b:refused c:45 d:refused" {
		t.Fatalf("first come: %s", got)
	}
	// a stops reporting; the others go on. Past its TTL d (which came
	// before b) takes its place.
	for _, id := range []string{"b", "c", "d"} {
		report(t, b, id, Critical, 100, leaseT0.Add(4*time.Second))
	}
	if got := state(leaseT0.Add(4 * time.Second)); got != "a:45 b:refused c:45 d:refused" {
		t.Fatalf("before a expires: %s", got)
	}
	if got := state(leaseT0.Add(6 * time.Second)); got != "b:refused c:45 d:45" {
		t.Fatalf("after a expired: %s", got)
	}
	// a comes back: it waits behind b.
	l, _, err := b.Join(Report{Producer: "a", Topic: ordersT, Demand: 100}, d, p, leaseT0.Add(6*time.Second))
	if err != nil || !l.Refused {
		t.Fatalf("a back: %+v, %v", l, err)
	}
	// A policy that refuses unlisted ids refuses even the admitted ones.
	p.Unlisted = Unlisted{Admit: RefuseUnlisted}
	if got := state(leaseT0.Add(6 * time.Second)); got != "a:refused b:refused c:refused d:refused" {
		t.Fatalf("refuse: %s", got)
	}
}

// TestJoinBoundedWork: a report re-allocates a small topic at once and
// names the other leases it changed; on a topic above InlineMembers it
// keeps an existing lease and gives a newcomer a provisional one, and the
// next Apply gives every producer its share.
func TestJoinBoundedWork(t *testing.T) {
	p := Policy{Name: "p", MaxAge: time.Second}
	d := decision(90, SignalSlowDown)
	b := newBook(t, LeaseConfig{Interval: time.Second, InlineMembers: 2})
	a, changed, err := b.Join(Report{Producer: "a", Topic: ordersT, Demand: inf}, d, p, leaseT0)
	if err != nil || a.Rate != 90 || len(changed) != 0 {
		t.Fatalf("a alone: %+v %+v %v", a, changed, err)
	}
	// b halves a's share: a's new lease comes back to be pushed.
	bl, changed, _ := b.Join(Report{Producer: "b", Topic: ordersT, Demand: inf}, d, p, leaseT0)
	if bl.Rate != 45 || len(changed) != 1 || changed[0].Producer != "a" || changed[0].Rate != 45 || changed[0].Version <= a.Version {
		t.Fatalf("b joins: %+v, changed %+v", bl, changed)
	}
	aVersion := changed[0].Version
	// c makes three, above InlineMembers: provisional, nobody else moves.
	c, changed, _ := b.Join(Report{Producer: "c", Topic: ordersT, Demand: inf}, d, p, leaseT0)
	if c.Rate != 0 || c.Signal != SignalSlowDown || c.RetryAfter != time.Second || !strings.HasPrefix(c.Reason, "provisional") || len(changed) != 0 {
		t.Fatalf("c joins a large topic: %+v, changed %+v", c, changed)
	}
	// a reports again: same lease, same version.
	a2, _, _ := b.Join(Report{Producer: "a", Topic: ordersT, Demand: 10}, d, p, leaseT0.Add(time.Second))
	if a2.Version != aVersion || a2.Rate != 45 {
		t.Fatalf("a again: %+v", a2)
	}
	// The cycle applies a's new demand and gives c its share.
	got := map[string]float64{}
	for _, l := range b.Apply(d, p, leaseT0.Add(time.Second)) {
		got[l.Producer] = l.Rate
		if l.Reason != "" {
			t.Errorf("%s still says %q", l.Producer, l.Reason)
		}
	}
	if got["a"] != 10 || got["b"] != 40 || got["c"] != 40 {
		t.Fatalf("after the cycle: %v", got)
	}
	// A listed newcomer's provisional lease carries its policy's class.
	p.Producers = []ProducerSpec{{ID: "vip", Criticality: CriticalPlus}}
	v, _, _ := b.Join(Report{Producer: "vip", Topic: ordersT, Criticality: Sheddable, Demand: 5}, d, p, leaseT0.Add(time.Second))
	if v.Criticality != CriticalPlus || v.Unlisted || v.Rate != 0 {
		t.Fatalf("listed newcomer: %+v", v)
	}
	// An unlimited topic needs no allocation: a newcomer is unlimited.
	u, _, _ := b.Join(Report{Producer: "d", Topic: ordersT, Demand: 5}, decision(Unlimited, SignalOK), p, leaseT0.Add(time.Second))
	if !u.IsUnlimited() || u.Reason != "" {
		t.Fatalf("unlimited topic: %+v", u)
	}
}

// TestJoinKeepsSilentShare: a report re-allocating a topic at once keeps
// the part of the listed producers that never report (Kafka client
// quotas), as Apply does.
func TestJoinKeepsSilentShare(t *testing.T) {
	p := Policy{Name: "p", MaxAge: time.Second, KafkaClientQuota: true, Producers: []ProducerSpec{{ID: "legacy"}, {ID: "sdk"}}}
	d := decision(100, SignalSlowDown)
	b := newBook(t, LeaseConfig{})
	if ls := b.Apply(d, p, leaseT0); len(ls) != 2 || ls[0].Rate != 50 {
		t.Fatalf("silent leases %+v", ls)
	}
	l, _, err := b.Join(Report{Producer: "sdk", Topic: ordersT, Demand: inf}, d, p, leaseT0)
	if err != nil || l.Rate != 50 {
		t.Fatalf("sdk joins: %+v, %v; want half, legacy keeping its part", l, err)
	}
	if lg, ok := b.Lease("legacy", ordersT); !ok || lg.Rate != 50 {
		t.Fatalf("legacy: %+v", lg)
	}
}
