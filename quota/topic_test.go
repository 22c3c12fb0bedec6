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
