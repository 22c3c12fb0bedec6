package quota

import "fmt"

// Rule names the rule of the controller that decided a [Decision]: tests,
// the decision log and the dashboard assert and show rules, never the
// words of Decision.Reason.
type Rule uint8

// The controller's rules. The zero value, RuleNone, is a decision no rule
// made (a zero Decision).
const (
	RuleNone Rule = iota
	// RuleInvalidPolicy: the policy cannot be applied (maxAge -
	// processingTime <= 0): unlimited.
	RuleInvalidPolicy
	// RuleRatesUnknown: not enough observations yet: unlimited.
	RuleRatesUnknown
	// RuleHold: the data is stale; the last fresh decision is held.
	RuleHold
	// RuleFailOpen: stale for longer than MaxHold: unlimited.
	RuleFailOpen
	// RuleAbandoned: no live consumer (lag.StatusAbandoned): unlimited,
	// signal ok, and never binding in CombineTopic.
	RuleAbandoned
	// RuleConsumerStopped: the consumer stopped with work waiting: stop.
	RuleConsumerStopped
	// RuleHardAge: a new message would exceed the hard age, or the head
	// is past it: stop.
	RuleHardAge
	// RuleUnlimited: the predicted wait is under the engage threshold.
	RuleUnlimited
	// RuleDrain: the predicted wait reached the budget, or a kept pause
	// (see RuleStepDown) has its head past the budget (keptPause): admit
	// nothing until the backlog drains.
	RuleDrain
	// RuleStepDown: capacity fell during the interval: pause for one
	// interval and measure; paused so, and nothing committed since with
	// the commit overdue: pause again (stillAfterPause), while the head
	// is within the budget.
	RuleStepDown
	// RuleSaturated: the consumer is saturated: rate = capacity plus the
	// backlog error over tau.
	RuleSaturated
	// RuleFollow: limited, backlog small but not empty: follow the law.
	RuleFollow
	// RuleProbe: limited and the consumer has spare capacity: probe the
	// rate upward.
	RuleProbe
	// RuleRelease: the rate went unused long enough: unlimited again.
	RuleRelease
	// RuleAvoidPartitions: only some partitions are late and the rate is
	// unlimited: producers avoid them. (A limited target keeps the rule
	// that set its rate; the list travels with it.)
	RuleAvoidPartitions
	// RuleAwaitCommit: limited, and a consumer that commits less often
	// than it is observed has not committed since its position last
	// moved: its capacity is unknown, not 0; the rate in force is kept.
	RuleAwaitCommit
	// RuleObserverStall: a stall of the whole consumer read in the shadow
	// of a stall the observer shared (see observerStall) is not believed
	// yet: an unlimited target stays unlimited, a limited one keeps the
	// rate in force.
	RuleObserverStall
	// RuleRelearn: limited, and the head at the commit of a consumer that
	// commits about once per observation stayed past the standing wait
	// learned while healthy: a probe is let through to tell a standing
	// wait its commit timer's phase moved to from a queue (see
	// relearnStanding).
	RuleRelearn
	// RuleProbeRestored: limited, caught up right after a probe, the
	// producers using the rate, and the consumer (its positions read
	// from commits with a learned cadence) kept up over two moves with a
	// produce rate a step above the highest capacity the law found it
	// saturated at in this limited episode, consuming no backlog, its
	// head at the commit within the engage wait: a capacity that came
	// back, probed 1+4p probe steps (x3 at the default), at most one
	// probe step above the rate it kept up with while unlimited when
	// that is known, else once an episode (see Controller.restoredProbe).
	RuleProbeRestored
	// RuleFall: unlimited, and a reading of a consumer read through its
	// commits (or acks) at a learned cadence of at most 1.5 observations
	// shows its capacity fell within the interval: the move it ends,
	// taken alone, consumed well under the estimate while the consumer
	// had work the whole span, its head at the commit past the standing
	// wait (see Controller.fell). The backlog is valued at what it
	// consumed, not the estimate from before, and the target engages on
	// the wait predicted at the next decision (the wait plus (P - C)/C of
	// the interval): the saturated law at that capacity.
	RuleFall
)

var ruleNames = [...]string{
	RuleNone:            "none",
	RuleInvalidPolicy:   "invalid-policy",
	RuleRatesUnknown:    "rates-unknown",
	RuleHold:            "hold",
	RuleFailOpen:        "fail-open",
	RuleAbandoned:       "abandoned",
	RuleConsumerStopped: "consumer-stopped",
	RuleHardAge:         "hard-age",
	RuleUnlimited:       "unlimited",
	RuleDrain:           "drain",
	RuleStepDown:        "step-down",
	RuleSaturated:       "saturated",
	RuleFollow:          "follow",
	RuleProbe:           "probe",
	RuleRelease:         "release",
	RuleAvoidPartitions: "avoid-partitions",
	RuleAwaitCommit:     "await-commit",
	RuleObserverStall:   "observer-stall",
	RuleRelearn:         "relearn",
	RuleProbeRestored:   "probe-restored",
	RuleFall:            "fall",
}

// String returns the rule's name ("drain", "probe", ...), or "Rule(n)".
func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return fmt.Sprintf("Rule(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler with [Rule.String].
func (r Rule) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler for the names String
// returns. A name this version does not know reads as RuleNone: a rule
// explains a decision, and the decisions replicas exchange (shard
// records) may come from a newer version with rules of its own, which
// must not make this one refuse the whole record in a rolling upgrade.
// An empty name is an error.
func (r *Rule) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("quota: empty rule name")
	}
	for i, n := range ruleNames {
		if n == string(b) {
			*r = Rule(i)
			return nil
		}
	}
	*r = RuleNone
	return nil
}
