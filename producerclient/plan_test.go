package producerclient

import (
	"fmt"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// planProducer is producer svc-a on kfake topic orders, on a fake clock,
// its leases from a fake daemon that reports only once an hour.
func planProducer(t *testing.T) (*fakeDaemon, *fakeClock, *KafkaProducer) {
	t.Helper()
	d := newFakeDaemon(t)
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk, Mode: Drop,
		Leases: LeaseConfig{URL: d.srv.URL, ReportInterval: time.Hour}})
	return d, clk, p
}

// TestLeasePlan: a lease that pauses (rate 0) with a plan (protocol 1.2,
// Then) switches to the plan's rate at its time when no newer lease came,
// on the producer's own clock (the daemon is gone: a leader lost); a newer
// lease always wins over the plan; a plan due already on arrival applies
// at once. Without plans the producer stayed at 0 until the next lease.
func TestLeasePlan(t *testing.T) {
	d, clk, p := planProducer(t)
	exp := clk.Now().Add(30 * time.Second)
	plan := func(after time.Duration, rate float64) *quotaproto.LeasePlan {
		return &quotaproto.LeasePlan{At: clk.Now().Add(after), Rate: rate, Burst: 4}
	}
	d.set(leaseSet("svc-a", 2, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: "slow-down", Version: 5, ExpiresAt: exp,
		Then: plan(500*time.Millisecond, 40)}))
	eventually(t, 10*time.Second, "the pause", func() bool { q, _ := p.Quota("orders"); return q.Version == 5 })
	d.kill()
	clk.Advance(400 * time.Millisecond)
	if q, _ := p.Quota("orders"); q.Rate != 0 {
		t.Fatalf("the plan applied before its time: %+v", q)
	}
	eventually(t, 10*time.Second, "the plan's rate", func() bool {
		clk.Advance(time.Millisecond)
		q, _ := p.Quota("orders")
		return q.Rate == 40
	})
	q, _ := p.Quota("orders")
	if !q.FromLease || q.Burst != 4 || q.Signal != SignalSlowDown || q.Version != 5 || !q.ExpiresAt.Equal(exp) {
		t.Fatalf("planned quota %+v", q)
	}
	if s := p.Stats(); s.LeasePlans != 1 {
		t.Fatalf("lease plans %d, want 1", s.LeasePlans)
	}
	// It holds until the lease expires, then the safe quota (open).
	clk.Advance(30 * time.Second)
	eventually(t, 10*time.Second, "the safe quota", func() bool {
		clk.Advance(time.Millisecond)
		q, _ := p.Quota("orders")
		return !q.FromLease
	})
}

// TestLeasePlanNewerWins: a newer lease arriving before the plan's time
// replaces the lease and its plan: the plan never applies.
func TestLeasePlanNewerWins(t *testing.T) {
	d, clk, p := planProducer(t)
	exp := clk.Now().Add(30 * time.Second)
	d.set(leaseSet("svc-a", 2, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: "slow-down", Version: 5, ExpiresAt: exp,
		Then: &quotaproto.LeasePlan{At: clk.Now().Add(500 * time.Millisecond), Rate: 40}}))
	eventually(t, 10*time.Second, "the pause", func() bool { q, _ := p.Quota("orders"); return q.Version == 5 })
	// The live leader's next decision: still 0 (a drain longer than
	// planned), without a plan.
	d.set(leaseSet("svc-a", 3, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: "slow-down", Version: 6, ExpiresAt: exp}))
	eventually(t, 10*time.Second, "the newer lease", func() bool { q, _ := p.Quota("orders"); return q.Version == 6 })
	for range 20 {
		clk.Advance(100 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if q, _ := p.Quota("orders"); q.Rate != 0 || q.Version != 6 {
		t.Fatalf("the replaced lease's plan applied: %+v", q)
	}
	if s := p.Stats(); s.LeasePlans != 0 {
		t.Fatalf("lease plans %d, want 0", s.LeasePlans)
	}
	// A plan already due on arrival (the set came late, through a
	// failover) applies at once.
	d.set(leaseSet("svc-a", 4, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: "slow-down", Version: 7, ExpiresAt: exp,
		Then: &quotaproto.LeasePlan{At: clk.Now().Add(-time.Millisecond), Rate: 25}}))
	eventually(t, 10*time.Second, "the due plan", func() bool { q, _ := p.Quota("orders"); return q.Version == 7 && q.Rate == 25 })
}

// TestLeasePlanInvalid: a plan that is not one (a negative rate or burst,
// no time, malformed, or due at or after the lease's expiry) is dropped
// with a log and counted as malformed; the lease applies without it.
func TestLeasePlanInvalid(t *testing.T) {
	base := `{"topic":"t","rate":0,"signal":"slow-down","version":1,"expiresAt":"2099-01-01T00:00:00Z","then":%s}`
	for _, tc := range []struct {
		name, then string
		bad        bool
	}{
		{"good", `{"at":"2098-01-01T00:00:00Z","rate":12.5,"burst":2}`, false},
		{"null", `null`, false},
		{"negative rate", `{"at":"2098-01-01T00:00:00Z","rate":-1}`, true},
		{"negative burst", `{"at":"2098-01-01T00:00:00Z","rate":1,"burst":-3}`, true},
		{"no time", `{"rate":1}`, true},
		{"rate not a number", `{"at":"2098-01-01T00:00:00Z","rate":"fast"}`, true},
		{"huge rate", `{"at":"2098-01-01T00:00:00Z","rate":1e999}`, true},
		{"not an object", `[1,2]`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decodeLease([]byte(fmt.Sprintf(base, tc.then)))
			if err != nil {
				t.Fatalf("the lease was dropped with its plan: %v", err)
			}
			if got := d.badPlan != ""; got != tc.bad || (d.Then != nil) == tc.bad && tc.then != "null" {
				t.Fatalf("bad plan %q, plan %+v", d.badPlan, d.Then)
			}
		})
	}

	// End to end: a plan due after the lease expires is dropped.
	dm, clk, p := planProducer(t)
	exp := clk.Now().Add(10 * time.Second)
	dm.set(leaseSet("svc-a", 2, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: "slow-down", Version: 5, ExpiresAt: exp,
		Then: &quotaproto.LeasePlan{At: exp, Rate: 40}}))
	eventually(t, 10*time.Second, "the lease", func() bool { q, _ := p.Quota("orders"); return q.Version == 5 })
	if s := p.Stats(); s.LeaseMalformed < 1 {
		t.Fatalf("malformed %d, want the plan past expiry counted", s.LeaseMalformed)
	}
	clk.Advance(9 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if q, _ := p.Quota("orders"); q.Rate != 0 {
		t.Fatalf("a plan past the lease's expiry applied: %+v", q)
	}
}
