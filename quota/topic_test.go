package quota

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/lagbridge/lagbridge/lag"
)

// TestTopicDecisionJSON: a topic's decision travels as a target's does,
// rate and unlimited included, and names its topic.
func TestTopicDecisionJSON(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "billing"}
	for _, tc := range []struct {
		name string
		rate float64
	}{
		{"limited", 120},           // a number
		{"unlimited", Unlimited},   // no rate, unlimited: true
		{"zero", 0},                // a stop's rate is a number too
		{"fraction", 0.5},          // below one message a second
		{"large", math.MaxFloat32}, // finite however large
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := CombineTopic([]Decision{{Target: tg, Policy: "p", Rate: tc.rate, Signal: SignalSlowDown, RetryAfter: 1}})
			if d.Topic() != TopicOf(tg) || d.Target.Group != "" {
				t.Fatalf("topic %v, group %q", d.Topic(), d.Target.Group)
			}
			got, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(Decision(d))
			if string(got) != string(want) {
				t.Fatalf("json %s, want a decision's %s", got, want)
			}
			var back TopicDecision
			if err := json.Unmarshal(got, &back); err != nil || back.Rate != tc.rate || back.IsUnlimited() != math.IsInf(tc.rate, 1) {
				t.Fatalf("round trip: %+v, %v", back, err)
			}
		})
	}
}

// TestCombineTopicShares: an avoided partition keeps a keyless share only
// when every group that lists it gives it one (the smallest); a group
// that does not list it does not constrain it, and an abandoned group's
// list counts for nothing.
func TestCombineTopicShares(t *testing.T) {
	g := func(name string, avoid []int32, shares ...PartitionShare) Decision {
		return Decision{
			Target: lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: name}, Rate: Unlimited,
			Signal: SignalAvoidPartitions, AvoidPartitions: avoid, PartitionShares: shares,
		}
	}
	abandoned := g("gone", []int32{0, 1})
	abandoned.Rule = RuleAbandoned
	for _, tc := range []struct {
		name string
		ds   []Decision
		want []PartitionShare
	}{
		// One group: its shares.
		{"one", []Decision{g("a", []int32{0, 2}, PartitionShare{0, 0.1})}, []PartitionShare{{0, 0.1}}},
		// Both list 0 with a share: the smaller; 2 is listed by b alone.
		{"smallest", []Decision{
			g("a", []int32{0}, PartitionShare{0, 0.1}),
			g("b", []int32{0, 2}, PartitionShare{0, 0.05}, PartitionShare{2, 0.12}),
		}, []PartitionShare{{0, 0.05}, {2, 0.12}}},
		// b lists 0 without a share: avoided outright.
		{"one without", []Decision{
			g("a", []int32{0}, PartitionShare{0, 0.1}),
			g("b", []int32{0}),
		}, nil},
		// The abandoned group's list binds nothing.
		{"abandoned", []Decision{g("a", []int32{0}, PartitionShare{0, 0.1}), abandoned}, []PartitionShare{{0, 0.1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := CombineTopic(tc.ds)
			if !sameShares(d.PartitionShares, tc.want, 0) {
				t.Fatalf("shares %v (avoid %v), want %v", d.PartitionShares, d.AvoidPartitions, tc.want)
			}
		})
	}
}
