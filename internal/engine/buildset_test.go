package engine

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestBuildSetSameNameStrictest: a topic name on several clusters gets the
// strictest of its leases in the producer's set, whatever other topics
// come between them.
func TestBuildSetSameNameStrictest(t *testing.T) {
	lease := func(cluster, name string, rate float64) quota.Lease {
		return quota.Lease{Producer: "p", Topic: quota.Topic{Kind: lag.KindKafka, Cluster: cluster, Name: name}, Rate: rate,
			Version: 1, RefreshAfter: time.Second}
	}
	inf := math.Inf(1)
	cases := []struct {
		name string
		ls   []quota.Lease // sorted by topic, as publishOne passes them
		want map[string]float64
	}{
		{"same name in a row", []quota.Lease{lease("a", "orders", 100), lease("b", "orders", 10)},
			map[string]float64{"orders": 10}},
		{"another topic in between", []quota.Lease{lease("a", "orders", 100), lease("a", "payments", 50), lease("b", "orders", 10)},
			map[string]float64{"orders": 10, "payments": 50}},
		{"unlimited first, topics in between", []quota.Lease{lease("a", "orders", inf), lease("a", "payments", 50), lease("a", "refunds", 5),
			lease("b", "orders", 10)}, map[string]float64{"orders": 10, "payments": 50, "refunds": 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEngine(t, &clock{now: t0})
			set := e.buildSet("p", tc.ls, t0)
			got := map[string]float64{}
			for _, l := range set.Leases {
				got[l.Topic] = rateOf(l)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("leases %v, want %v", got, tc.want)
			}
			for name, r := range tc.want {
				if got[name] != r {
					t.Errorf("%s: rate %v, want %v (all: %v)", name, got[name], r, got)
				}
			}
		})
	}
}
