package quota

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

var (
	leaseT0    = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ordersK    = lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "orders", Group: "billing"}
	ordersT    = TopicOf(ordersK)
	plainPolic = Policy{Name: "p", MaxAge: 2 * time.Second}
)

// fixedRand returns the values in turn, forever repeating the last.
func fixedRand(vs ...float64) func() float64 {
	i := 0
	return func() float64 {
		v := vs[min(i, len(vs)-1)]
		i++
		return v
	}
}

func newBook(tb testing.TB, cfg LeaseConfig) *LeaseBook {
	tb.Helper()
	if cfg.Rand == nil {
		cfg.Rand = fixedRand(0.5)
	}
	b, err := NewLeaseBook(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func report(tb testing.TB, b *LeaseBook, id string, c Criticality, demand float64, now time.Time) {
	tb.Helper()
	if err := b.Report(Report{Producer: id, Topic: ordersT, Criticality: c, Demand: demand}, now); err != nil {
		tb.Fatal(err)
	}
}

func decision(rate float64, sig Signal) TopicDecision {
	return TopicDecision{Target: ordersK, Policy: "p", Rate: rate, Signal: sig}
}

// TestLeaseVersions: the version moves on a material change only: a rate
// change above 1% of the published rate (drift accumulates against the
// published value, not the last computed one), any signal, advisory or
// avoided-partitions change, and unlimited <-> limited.
func TestLeaseVersions(t *testing.T) {
	b := newBook(t, LeaseConfig{})
	report(t, b, "a", Critical, 1000, leaseT0)
	steps := []struct {
		d    TopicDecision
		bump bool
		rate float64 // published rate
	}{
		{decision(100, SignalSlowDown), true, 100},     // first lease
		{decision(100.5, SignalSlowDown), false, 100},  // +0.5%: kept
		{decision(100.9, SignalSlowDown), false, 100},  // +0.9% from published: kept
		{decision(101.5, SignalSlowDown), true, 101.5}, // +1.5% from published: new version
		{decision(101.5, SignalOK), true, 101.5},       // signal change
		{decision(inf, SignalOK), true, inf},           // unlimited
		{decision(inf, SignalOK), false, inf},          // same
		{func() TopicDecision { d := decision(inf, SignalOK); d.Advisory = true; return d }(), true, inf},
		{func() TopicDecision {
			d := decision(inf, SignalAvoidPartitions)
			d.Advisory = true
			d.AvoidPartitions = []int32{2}
			return d
		}(), true, inf},
		{func() TopicDecision {
			d := decision(inf, SignalAvoidPartitions)
			d.Advisory = true
			d.AvoidPartitions = []int32{2, 3}
			return d
		}(), true, inf},
		{decision(0, SignalStop), true, 0},
		{decision(0, SignalStop), false, 0},
		{decision(0.001, SignalStop), true, 0.001}, // from zero, any rate is material
	}
	var last uint64
	for i, s := range steps {
		now := leaseT0.Add(time.Duration(i) * time.Second)
		report(t, b, "a", Critical, 1000, now)
		ls := b.Apply(s.d, plainPolic, now)
		if len(ls) != 1 {
			t.Fatalf("step %d: %d leases", i, len(ls))
		}
		l := ls[0]
		if bumped := l.Version != last; bumped != s.bump {
			t.Errorf("step %d: version %d -> %d, want bump %v", i, last, l.Version, s.bump)
		}
		if !close(l.Rate, s.rate) {
			t.Errorf("step %d: published rate %v, want %v", i, l.Rate, s.rate)
		}
		if !l.Expires.Equal(now.Add(10 * time.Second)) {
			t.Errorf("step %d: expires %v, want now+10s", i, l.Expires)
		}
		last = l.Version
	}
}

// TestLeaseRefreshJitter: RefreshAfter is a third of the lifetime spread by
// ±Jitter from the injected source: deterministic in tests.
func TestLeaseRefreshJitter(t *testing.T) {
	b := newBook(t, LeaseConfig{Interval: time.Second, Jitter: 0.2, Rand: fixedRand(0, 0.5, 0.999999)})
	report(t, b, "a", Critical, 10, leaseT0)
	third := float64(10*time.Second) / 3
	want := []time.Duration{time.Duration(third * 0.8), time.Duration(third), time.Duration(third * (1 + 0.2*(2*0.999999-1)))}
	for i, w := range want {
		l := b.Apply(decision(100, SignalOK), plainPolic, leaseT0)[0]
		if d := l.RefreshAfter - w; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("refresh %d: %v, want %v", i, l.RefreshAfter, w)
		}
	}
}

// TestLeaseBurst: Rate x BurstWindow, at least 1; 0 for zero and unlimited.
func TestLeaseBurst(t *testing.T) {
	b := newBook(t, LeaseConfig{BurstWindow: 100 * time.Millisecond})
	for rate, want := range map[float64]int{1000: 100, 3: 1, 0: 0, inf: 0, 10.5: 2} {
		if got := b.burst(rate); got != want {
			t.Errorf("burst(%v) = %d, want %d", rate, got, want)
		}
	}
}

// TestLeaseMembership: producers join by reporting, leave explicitly or by
// TTL (Expire returns what it removed), unlisted producers cannot claim
// CRITICAL_PLUS, listed ones get the policy's class and weight, and Kafka
// client-quota policies include listed producers that never report.
func TestLeaseMembership(t *testing.T) {
	b := newBook(t, LeaseConfig{Interval: time.Second, DemandTTL: 5 * time.Second})
	p := Policy{Name: "p", MaxAge: time.Second, Producers: []ProducerSpec{{ID: "vip", Criticality: CriticalPlus, Weight: 3}, {ID: "batch", Criticality: Sheddable}, {ID: "legacy"}}}
	report(t, b, "self-promoted", CriticalPlus, inf, leaseT0)
	report(t, b, "vip", Sheddable, inf, leaseT0) // the policy overrides the declared class
	report(t, b, "batch", CriticalPlus, inf, leaseT0)
	ls := b.Apply(decision(500, SignalSlowDown), p, leaseT0)
	got := map[string]Lease{}
	for _, l := range ls {
		got[l.Producer] = l
	}
	// An unlisted producer is served at SHEDDABLE whatever it declares.
	if len(ls) != 3 || got["self-promoted"].Criticality != Sheddable || !got["self-promoted"].Unlisted || got["vip"].Criticality != CriticalPlus || got["batch"].Criticality != Sheddable || got["batch"].Unlisted {
		t.Fatalf("leases %+v", ls)
	}
	// vip (CRITICAL_PLUS, unknown demand) takes everything first.
	if got["vip"].Rate != 500 || got["self-promoted"].Rate != 0 || got["batch"].Rate != 0 {
		t.Fatalf("rates %+v", ls)
	}

	// batch leaves explicitly; vip stops reporting and expires after 5 s.
	b.Leave("batch", ordersT)
	report(t, b, "self-promoted", Critical, 100, leaseT0.Add(4*time.Second))
	if gone := b.Expire(leaseT0.Add(5 * time.Second)); len(gone) != 0 {
		t.Fatalf("expired early: %+v", gone)
	}
	gone := b.Expire(leaseT0.Add(5*time.Second + time.Nanosecond))
	if len(gone) != 1 || gone[0].Producer != "vip" {
		t.Fatalf("expired %+v, want vip", gone)
	}
	if _, ok := b.Lease("vip", ordersT); ok {
		t.Fatal("vip still has a lease")
	}
	ls = b.Apply(decision(500, SignalSlowDown), p, leaseT0.Add(6*time.Second))
	if len(ls) != 1 || ls[0].Producer != "self-promoted" || ls[0].Rate != 500 {
		t.Fatalf("after leaving: %+v", ls)
	}
	// An expired report that Expire has not removed yet is skipped by
	// Apply, and its lease dropped.
	ls = b.Apply(decision(500, SignalSlowDown), p, leaseT0.Add(20*time.Second))
	if len(ls) != 0 || len(b.Leases()) != 0 {
		t.Fatalf("stale reports still leased: %+v", ls)
	}

	// Kafka client quotas: listed producers take part without reports.
	p.KafkaClientQuota = true
	ls = b.Apply(decision(300, SignalSlowDown), p, leaseT0.Add(21*time.Second))
	if len(ls) != 3 {
		t.Fatalf("client-quota leases %+v, want the 3 listed producers", ls)
	}
	// Not on NATS.
	nd := decision(300, SignalSlowDown)
	nd.Target.Kind = lag.KindNATS
	if ls := b.Apply(nd, p, leaseT0.Add(21*time.Second)); len(ls) != 0 {
		t.Fatalf("NATS leases %+v", ls)
	}
}

// TestLeaseVersionAcrossRejoin: a producer that leaves and returns gets a
// higher version than it ever had, and VersionBase offsets all versions.
func TestLeaseVersionAcrossRejoin(t *testing.T) {
	b := newBook(t, LeaseConfig{VersionBase: 1000})
	report(t, b, "a", Critical, 10, leaseT0)
	v1 := b.Apply(decision(100, SignalOK), plainPolic, leaseT0)[0].Version
	b.Leave("a", ordersT)
	report(t, b, "a", Critical, 10, leaseT0)
	v2 := b.Apply(decision(100, SignalOK), plainPolic, leaseT0)[0].Version
	if v1 != 1001 || v2 <= v1 {
		t.Fatalf("versions %d then %d", v1, v2)
	}
}

// TestLeaseReportErrors: every problem of a report in one error wrapping
// ErrInvalidReport.
func TestLeaseReportErrors(t *testing.T) {
	b := newBook(t, LeaseConfig{})
	cases := []Report{
		{Topic: ordersT, Demand: 1},                                // no producer
		{Producer: "a", Demand: 1},                                 // no topic
		{Producer: "a", Topic: ordersT, Demand: -1},                // negative demand
		{Producer: "a", Topic: ordersT, Demand: math.NaN()},        // NaN demand
		{Producer: "a", Topic: ordersT, Demand: 1, Criticality: 8}, // bad class
		{Criticality: 8, Demand: -1},                               // all of it
	}
	for _, r := range cases {
		if err := b.Report(r, leaseT0); !errors.Is(err, ErrInvalidReport) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if b.Producers() != 0 {
		t.Fatalf("bad reports recorded: %d", b.Producers())
	}
}

// TestLeaseJSON: a lease survives JSON, and an unlimited one travels as
// "unlimited": true without a rate (JSON has no infinity).
func TestLeaseJSON(t *testing.T) {
	for _, rate := range []float64{123.5, inf, 0} {
		l := Lease{Producer: "a", Topic: ordersT, Rate: rate, Burst: 3, Signal: SignalSlowDown, RetryAfter: time.Second,
			AvoidPartitions: []int32{1}, Criticality: Sheddable, Version: 7, Expires: leaseT0, RefreshAfter: 3 * time.Second}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Lease
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Rate != l.Rate && !(math.IsInf(back.Rate, 1) && math.IsInf(l.Rate, 1)) || back.Signal != l.Signal || back.Version != 7 || back.Criticality != Sheddable || !back.Expires.Equal(leaseT0) {
			t.Fatalf("round trip %s -> %+v", b, back)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if _, has := m["rate"]; has == math.IsInf(rate, 1) || (m["unlimited"] == true) != math.IsInf(rate, 1) {
			t.Fatalf("rate encoding %s", b)
		}
		if m["signal"] != "slow-down" || m["criticality"] != "SHEDDABLE" {
			t.Fatalf("names %s", b)
		}
	}
}

// TestLeaseConfigValidate: every problem at once, wrapping ErrInvalidConfig.
func TestLeaseConfigValidate(t *testing.T) {
	err := LeaseConfig{Interval: -1, Jitter: 1, MaterialChange: 2}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || len(err.(interface{ Unwrap() []error }).Unwrap()) != 3 {
		t.Fatalf("%v", err)
	}
	if _, err := NewLeaseBook(LeaseConfig{Jitter: -0.5}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("%v", err)
	}
}
