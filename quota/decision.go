package quota

import (
	"encoding/json"
	"math"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// Decision is the controller's verdict on one target at one instant. The
// verdict on a topic, its groups' decisions combined, is a [TopicDecision]
// (the same fields; the notes "from CombineTopic" below are about it).
type Decision struct {
	// Target is the target decided on; from CombineTopic, its Group is
	// empty.
	Target lag.Target `json:"target"`
	// Policy is the name of the policy applied (from CombineTopic: the
	// policy of the binding decision).
	Policy string `json:"policy"`
	// At is the time the decision was made (the now passed to Step).
	At time.Time `json:"at"`
	// Rate is the allowed total produce rate of the target in messages
	// per second, never below MinRate; +Inf ([Unlimited]) when the target
	// does not limit. See [Decision.MarshalJSON] for its JSON form.
	Rate float64 `json:"-"`
	// Signal and RetryAfter: what producers are told besides the rate.
	// RetryAfter is set with SignalSlowDown only.
	Signal     Signal        `json:"signal"`
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	// AvoidPartitions lists the late partitions (head older than MaxAge,
	// or a new message's wait there over the budget) while most others
	// are fine, sorted. It may be set with any
	// signal; the signal is SignalAvoidPartitions only when nothing worse
	// applies.
	AvoidPartitions []int32 `json:"avoidPartitions,omitempty"`
	// PartitionShares gives some of the partitions in AvoidPartitions a
	// share of keyless records instead of none: what their consumer
	// drains, over the target's produce rate (see [PartitionShare]).
	// Sorted by partition; from CombineTopic, the smallest of the groups
	// that list the partition, and none when one lists it without.
	PartitionShares []PartitionShare `json:"partitionShares,omitempty"`
	// Advisory is true when the policy's mode is advise.
	Advisory bool `json:"advisory,omitempty"`
	// MinRate is the policy's floor, msg/s.
	MinRate float64 `json:"minRate,omitempty"`
	// Capacity is the consume rate the controller works with, msg/s.
	// When CapacityKnown is false the consumer was not saturated and
	// this is only what it consumed (a lower bound of its capacity).
	// Between the commits of a consumer that commits less often than it
	// is observed, it is the last measured value, held.
	Capacity      float64 `json:"capacity"`
	CapacityKnown bool    `json:"capacityKnown"`
	// Wait is the predicted wait of a message produced now: the backlog
	// (Lag, less what a consumer seen through its commits has consumed
	// and not committed yet) / Capacity. lag.Never (-1) when there is a
	// backlog and nothing is consumed.
	Wait time.Duration `json:"wait"`
	// TargetWait is the wait the controller steers to under sustained
	// overload: Setpoint x (MaxAge - ProcessingTime), but at most one
	// observation interval.
	TargetWait time.Duration `json:"targetWait"`
	// HeadAge and Lag are copied from the state.
	HeadAge time.Duration `json:"headAge"`
	Lag     int64         `json:"lag"`
	// ProduceRate is the target's smoothed produce rate, msg/s, copied
	// from the state (from CombineTopic: the highest of the groups'; they
	// observe the same topic). 0 when unknown.
	ProduceRate float64 `json:"produceRate,omitempty"`
	// Held is true when the state was stale and this is the last fresh
	// decision, held (see ControllerConfig.MaxHold).
	Held bool `json:"held,omitempty"`
	// Then, on a decision made for a bounded time (a step down pauses
	// for one interval, a drain until the backlog is back at the target
	// wait, a probe above the capacity is answered by the next
	// decision), is what follows it: the rate from Then.At on, should no
	// newer decision come by then (a leader lost in the meantime). nil
	// otherwise. See [Plan].
	Then *Plan `json:"then,omitempty"`
	// Rule names the rule that decided (see [Rule]); Reason says it in
	// words, with the figures.
	Rule   Rule   `json:"rule"`
	Reason string `json:"reason"`
}

// Plan is what a decision made for a bounded time says follows it: from
// At on, Rate (msg/s, finite), unless a newer decision came first. A pause
// (a step down, a drain: the rate at 0) plans a higher rate; a probe above
// the capacity the controller works with plans that capacity. The
// controller sets At one interval after the next decision is due (see
// planAfter), so that in the normal case that decision, pushed on change,
// reaches the producers first, also through a follower's replication; the
// plan takes effect only when no newer decision comes (the leader lost).
// Leases carry each producer's share of it ([Lease.Then]).
type Plan struct {
	At   time.Time `json:"at"`
	Rate float64   `json:"rate"`
}

// produceRate is st's smoothed produce rate when it is known and finite,
// else 0.
func produceRate(st lag.State) float64 {
	if !st.RatesKnown || math.IsNaN(st.ProduceRate) || math.IsInf(st.ProduceRate, 0) || st.ProduceRate < 0 {
		return 0
	}
	return st.ProduceRate
}

// IsUnlimited reports whether d.Rate is +Inf.
func (d Decision) IsUnlimited() bool { return math.IsInf(d.Rate, 1) }

// rateJSON is how a rate travels in JSON: a number, or absent with
// unlimited set (JSON has no infinity).
type rateJSON struct {
	Rate      *float64 `json:"rate,omitempty"`
	Unlimited bool     `json:"unlimited,omitempty"`
}

func toRateJSON(r float64) rateJSON {
	if math.IsInf(r, 1) {
		return rateJSON{Unlimited: true}
	}
	return rateJSON{Rate: &r}
}

func (r rateJSON) value() float64 {
	if r.Unlimited || r.Rate == nil {
		return Unlimited
	}
	return *r.Rate
}

// MarshalJSON encodes d with its rate as "rate" (msg/s) or, when unlimited,
// "unlimited": true and no rate, since JSON has no infinity.
func (d Decision) MarshalJSON() ([]byte, error) {
	type plain Decision
	return json.Marshal(struct {
		plain
		rateJSON
	}{plain(d), toRateJSON(d.Rate)})
}

// UnmarshalJSON is the inverse of MarshalJSON; a missing rate is unlimited.
func (d *Decision) UnmarshalJSON(b []byte) error {
	type plain Decision
	var v struct {
		plain
		rateJSON
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*d = Decision(v.plain)
	d.Rate = v.rateJSON.value()
	return nil
}
