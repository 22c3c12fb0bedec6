package publish

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func lease(cluster, name string, rate float64, refresh time.Duration) quota.Lease {
	return quota.Lease{Producer: "p", Topic: quota.Topic{Kind: lag.KindKafka, Cluster: cluster, Name: name}, Rate: rate,
		Version: 1, RefreshAfter: refresh, Reason: "r-" + cluster}
}

// rateOf is a wire lease's rate, -1 for unlimited.
func rateOf(l quotaproto.Lease) float64 {
	if l.Rate == nil {
		return -1
	}
	return *l.Rate
}

// TestSet: a producer's leases in the protocol's form. A topic name on
// several clusters gets the strictest of its leases, whatever other topics
// come between them; a reported name without a lease gets an open one; the
// refresh is the shortest of the leases', a third of the lifetime without
// leases.
func TestSet(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name    string
		ls      []quota.Lease // sorted by topic, as the engine passes them
		names   []string
		want    map[string]float64 // rate per topic name, -1 unlimited
		reason  map[string]string
		refresh time.Duration
	}{
		{"same name in a row", []quota.Lease{lease("a", "orders", 100, time.Second), lease("b", "orders", 10, time.Second)}, nil,
			map[string]float64{"orders": 10}, map[string]string{"orders": "r-b"}, time.Second},
		{"another topic in between", []quota.Lease{lease("a", "orders", 100, time.Second), lease("a", "payments", 50, time.Second),
			lease("b", "orders", 10, time.Second)}, nil,
			map[string]float64{"orders": 10, "payments": 50}, nil, time.Second},
		{"unlimited first, topics in between", []quota.Lease{lease("a", "orders", inf, time.Second), lease("a", "payments", 50, time.Second),
			lease("a", "refunds", 5, time.Second), lease("b", "orders", 10, time.Second)}, nil,
			map[string]float64{"orders": 10, "payments": 50, "refunds": 5}, nil, time.Second},
		{"the shortest refresh of the leases", []quota.Lease{lease("a", "orders", 5, 3*time.Second), lease("a", "payments", 5, 2*time.Second)}, nil,
			map[string]float64{"orders": 5, "payments": 5}, nil, 2 * time.Second},
		{"a reported name without a lease is open", []quota.Lease{lease("a", "orders", 5, time.Second)}, []string{"orders", "elsewhere"},
			map[string]float64{"orders": 5, "elsewhere": -1}, map[string]string{"elsewhere": OpenReason, "orders": "r-a"}, time.Second},
		{"no leases: open ones, refresh a third of the lifetime", nil, []string{"b", "a"},
			map[string]float64{"a": -1, "b": -1}, nil, 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := Set("p", tc.ls, tc.names, t0, 30*time.Second)
			if set.Producer != "p" || set.Version != 0 {
				t.Fatalf("producer %q version %d", set.Producer, set.Version)
			}
			got := map[string]float64{}
			for i, l := range set.Leases {
				got[l.Topic] = rateOf(l)
				if i > 0 && set.Leases[i-1].Topic >= l.Topic {
					t.Errorf("leases not sorted by topic: %q before %q", set.Leases[i-1].Topic, l.Topic)
				}
				if want, ok := tc.reason[l.Topic]; ok && l.Reason != want {
					t.Errorf("%s: reason %q, want %q", l.Topic, l.Reason, want)
				}
				if l.Reason == OpenReason && (!l.ExpiresAt.Equal(t0.Add(30*time.Second)) || l.Signal != quotaproto.SignalOK) {
					t.Errorf("%s: open lease %+v, want ok until now+lifetime", l.Topic, l)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("leases %v, want %v", got, tc.want)
			}
			for name, r := range tc.want {
				if got[name] != r {
					t.Errorf("%s: rate %v, want %v (all: %v)", name, got[name], r, got)
				}
			}
			if set.RefreshAfterMs != tc.refresh.Milliseconds() {
				t.Errorf("refresh %dms, want %v", set.RefreshAfterMs, tc.refresh)
			}
		})
	}
}

// TestWire: what the protocol carries of a lease.
func TestWire(t *testing.T) {
	l := quota.Lease{Producer: "p", Topic: quota.Topic{Kind: lag.KindKafka, Cluster: "c", Name: "orders"}, Rate: 12.5, Burst: 3,
		Signal: quota.SignalSlowDown, RetryAfter: 1500*time.Millisecond + 700*time.Microsecond, AvoidPartitions: []int32{2},
		Advisory: true, Version: 9, Expires: t0, Reason: "why", Rule: quota.RuleSaturated}
	w := Wire(l)
	if w.Topic != "orders" || rateOf(w) != 12.5 || w.Burst != 3 || w.Signal != "slow-down" || w.RetryAfterMs != 1500 ||
		len(w.AvoidPartitions) != 1 || w.AvoidPartitions[0] != 2 || !w.Advisory || w.Version != 9 || !w.ExpiresAt.Equal(t0) || w.Reason != "why" ||
		w.Rule != "saturated" {
		t.Fatalf("Wire(%+v) = %+v", l, w)
	}
	if l := (quota.Lease{Rate: quota.Unlimited}); Wire(l).Rule != "" {
		t.Fatalf("RuleNone on the wire as %q, want no rule", Wire(l).Rule)
	}
	l.AvoidPartitions[0] = 5
	if w.AvoidPartitions[0] != 2 {
		t.Fatal("the wire lease shares the lease's avoided partitions")
	}
	l.Rate = quota.Unlimited
	if w := Wire(l); w.Rate != nil {
		t.Fatalf("unlimited rate on the wire: %v", *w.Rate)
	}
	// A plan (protocol 1.2) travels as it is.
	l.Rate, l.Then = 0, &quota.LeasePlan{At: t0.Add(500 * time.Millisecond), Rate: 40, Burst: 4}
	if w := Wire(l); w.Then == nil || !w.Then.At.Equal(l.Then.At) || w.Then.Rate != 40 || w.Then.Burst != 4 {
		t.Fatalf("the plan on the wire: %+v", w.Then)
	}
}

// TestFingerprintAndVersions: the fingerprint sees topics and versions,
// not expiries; the versions hash sees lease versions and reported names.
func TestFingerprintAndVersions(t *testing.T) {
	set := func(exp time.Time, versions ...uint64) quotaproto.LeaseSet {
		s := quotaproto.LeaseSet{Producer: "p"}
		for i, v := range versions {
			s.Leases = append(s.Leases, quotaproto.Lease{Topic: string(rune('a' + i)), Version: v, ExpiresAt: exp})
		}
		return s
	}
	fps := []struct {
		name string
		a, b quotaproto.LeaseSet
		same bool
	}{
		{"only the expiries differ", set(t0, 1, 2), set(t0.Add(time.Hour), 1, 2), true},
		{"a version moved", set(t0, 1, 2), set(t0, 1, 3), false},
		{"a lease more", set(t0, 1), set(t0, 1, 2), false},
	}
	for _, c := range fps {
		if got := Fingerprint(c.a) == Fingerprint(c.b); got != c.same {
			t.Errorf("fingerprint, %s: same %v, want %v", c.name, got, c.same)
		}
	}
	ls := []quota.Lease{{Version: 1}, {Version: 2}}
	vs := []struct {
		name  string
		ls    []quota.Lease
		names []string
		same  bool
	}{
		{"same versions and names", []quota.Lease{{Version: 1, Rate: 9}, {Version: 2}}, []string{"x"}, true},
		{"a version moved", []quota.Lease{{Version: 1}, {Version: 3}}, []string{"x"}, false},
		{"another name", ls, []string{"y"}, false},
		{"names split differently", ls, []string{"", "x"}, false},
	}
	for _, c := range vs {
		if got := Versions(c.ls, c.names) == Versions(ls, []string{"x"}); got != c.same {
			t.Errorf("versions, %s: same %v, want %v", c.name, got, c.same)
		}
	}
}
