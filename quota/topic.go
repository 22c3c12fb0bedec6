package quota

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// Topic names what producers write to: a Kafka topic or a NATS stream on
// one cluster. It is comparable and used as a map key.
type Topic struct {
	Kind    lag.Kind `json:"kind"`
	Cluster string   `json:"cluster"`
	// Name is the Kafka topic or the NATS stream.
	Name string `json:"name"`
}

// TopicOf returns the topic a target reads.
func TopicOf(t lag.Target) Topic { return Topic{Kind: t.Kind, Cluster: t.Cluster, Name: t.Topic} }

// String returns kind/cluster/name.
func (t Topic) String() string { return string(t.Kind) + "/" + t.Cluster + "/" + t.Name }

// TopicDecision is the verdict on one topic: the decisions of the consumer
// groups that read it, combined by [CombineTopic]. It is what the lease
// book allocates ([LeaseBook.Apply], [LeaseBook.Join]) and what publishers
// and the decision log see per topic. Its fields mean what a [Decision]'s
// do, for the whole topic; Target names the topic, with an empty Group
// ([TopicDecision.Topic]). Its JSON is a Decision's.
type TopicDecision Decision

// Topic is the topic decided on.
func (d TopicDecision) Topic() Topic { return TopicOf(d.Target) }

// IsUnlimited reports whether d.Rate is +Inf.
func (d TopicDecision) IsUnlimited() bool { return Decision(d).IsUnlimited() }

// MarshalJSON encodes d as [Decision.MarshalJSON] does.
func (d TopicDecision) MarshalJSON() ([]byte, error) { return Decision(d).MarshalJSON() }

// UnmarshalJSON is the inverse of MarshalJSON.
func (d *TopicDecision) UnmarshalJSON(b []byte) error { return (*Decision)(d).UnmarshalJSON(b) }

// CombineTopic combines the decisions of the consumer groups that read one
// topic into the topic's decision: a producer may write no faster than the
// slowest reader can bear. ds must all be of one topic (the first one's is
// used). The result:
//
//   - ignores abandoned targets' decisions (Rule [RuleAbandoned]: a consumer
//     nobody runs binds nothing); when all are abandoned it is unlimited,
//     signal ok, with RuleAbandoned;
//   - considers the enforced decisions only, when there is any (advisory
//     ones must not bind an enforced topic); otherwise all, and is then
//     advisory;
//   - has the minimum Rate, and the Policy, MinRate, Capacity, Wait,
//     TargetWait and Lag of the decision with that minimum (the binding
//     one; among equal rates, the one with the worst signal);
//   - has the worst signal (stop > slow-down > avoid-partitions > ok), the
//     longest retry-after, the union of the partitions to avoid, the
//     oldest head age, the latest At, and Held if any was held;
//   - gives an avoided partition the smallest of the keyless shares
//     (PartitionShares) of the groups that list it, and none when one of
//     them lists it without a share;
//   - has a Then (see [Plan]) when some of those decisions have one: from
//     the latest of their times, the lowest of their planned rates and
//     the others' rates, when that is not the topic's rate;
//   - has the Rule of the binding decision, and a Reason naming the
//     binding group.
//
// With no decisions it returns an unlimited decision with signal ok and
// RuleNone.
func CombineTopic(ds []Decision) TopicDecision {
	if len(ds) == 0 {
		return TopicDecision{Rate: Unlimited, Reason: "no consumer groups"}
	}
	var live, enforced int
	for _, d := range ds {
		if d.Rule != RuleAbandoned {
			live++
			if !d.Advisory {
				enforced++
			}
		}
	}
	if live == 0 {
		out := TopicDecision{Target: ds[0].Target, Policy: ds[0].Policy, At: ds[0].At, Rate: Unlimited, Rule: RuleAbandoned}
		out.Target.Group = ""
		out.Reason = fmt.Sprintf("all %d groups abandoned: unlimited", len(ds))
		return out
	}
	// counts: the decisions that may bind.
	counts := func(d Decision) bool { return d.Rule != RuleAbandoned && (enforced == 0 || !d.Advisory) }
	var bind Decision
	found := false
	for _, d := range ds {
		if counts(d) && (!found || d.Rate < bind.Rate || (d.Rate == bind.Rate && severity(d.Signal) > severity(bind.Signal))) {
			bind, found = d, true
		}
	}
	out := TopicDecision(bind)
	out.Target.Group = ""
	out.Target.Kind, out.Target.Cluster, out.Target.Topic = ds[0].Target.Kind, ds[0].Target.Cluster, ds[0].Target.Topic
	out.Advisory = enforced == 0
	out.AvoidPartitions = nil
	var avoid []int32
	for _, d := range ds {
		if !counts(d) {
			continue
		}
		if severity(d.Signal) > severity(out.Signal) {
			out.Signal = d.Signal
		}
		out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
		out.HeadAge = max(out.HeadAge, d.HeadAge)
		out.ProduceRate = max(out.ProduceRate, d.ProduceRate)
		if d.At.After(out.At) {
			out.At = d.At
		}
		out.Held = out.Held || d.Held
		avoid = append(avoid, d.AvoidPartitions...)
	}
	out.PartitionShares = nil
	if len(avoid) > 0 {
		slices.Sort(avoid)
		out.AvoidPartitions = slices.Compact(avoid)
		out.PartitionShares = combineShares(ds, counts, out.AvoidPartitions)
	}
	if out.Signal != SignalSlowDown {
		out.RetryAfter = 0
	}
	out.Then = combinePlans(ds, counts, out.Rate)
	out.Reason = fmt.Sprintf("group %s binds (%d groups): %s", bind.Target.Group, len(ds), bind.Reason)
	return out
}

// combinePlans is the topic's [Plan] when some of its groups' decisions
// that may bind have one: from the latest of their times, the lowest of
// their planned rates and the other decisions' rates (a group without a
// plan keeps its rate). nil when none has one, or when that rate is rate,
// the topic's.
func combinePlans(ds []Decision, counts func(Decision) bool, rate float64) *Plan {
	var at time.Time
	next, planned := Unlimited, false
	for _, d := range ds {
		switch {
		case !counts(d):
		case d.Then != nil:
			planned = true
			if d.Then.At.After(at) {
				at = d.Then.At
			}
			next = min(next, d.Then.Rate)
		default:
			next = min(next, d.Rate)
		}
	}
	if !planned || math.IsInf(next, 1) || next == rate {
		return nil
	}
	return &Plan{At: at, Rate: next}
}

// CombineTopics groups ds by topic ([TopicOf] their targets) and combines
// each group with [CombineTopic]. The result is sorted by topic.
func CombineTopics(ds []Decision) []TopicDecision {
	by := make(map[Topic][]Decision)
	for _, d := range ds {
		t := TopicOf(d.Target)
		by[t] = append(by[t], d)
	}
	out := make([]TopicDecision, 0, len(by))
	for _, g := range by {
		out = append(out, CombineTopic(g))
	}
	slices.SortFunc(out, func(a, b TopicDecision) int {
		return strings.Compare(a.Topic().String(), b.Topic().String())
	})
	return out
}
