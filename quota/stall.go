package quota

import (
	"fmt"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// gapRatio: an observation that comes more than gapRatio observation
// intervals after the one before (the smoothed interval, at least the
// configured one) comes after a stall of the observer (see observerStall).
const gapRatio = 1.5

// observerStall reports whether st is read in the shadow of a stall the
// observer itself went through: it came more than gapRatio intervals after
// the observation before (the observer's own gap, late by g seconds past
// its interval), or within min(g, L/4) after such an observation. A
// machine that stalls (a loaded host, a pause of the process) delays the
// observer and a consumer on it alike: the reading after the gap shows
// every partition's head old and little consumed over the stretched
// interval, which reads as a stall of the whole consumer, and the
// consumer's partitions catch up at once afterwards (and the producers'
// requests held in the stall arrive together, read at once as a backlog
// the consumer has not committed yet). Read as it looks, the topic was
// limited at 56-75 msg/s ("saturated") for a consumer of 10,000 and
// refused producers on every partition for a second or more (lagbridge
// bench --hot-partition --hot-interval 250ms on real Kafka 4.3.1, keyed
// records of partitions other than the slow one refused in 1 of 3 runs on
// a loaded machine; TestControllerObserverStallNotBelieved).
//
// In the shadow a stall of the whole consumer is not believed yet: the
// capacity estimate is not lowered, the target is not engaged and a
// limited one keeps its rate (v.held, see heldStall), no partition is
// newly listed by its wait (one whose head is past MaxAge is; those
// listed stay listed on their own evidence), and nothing is learned from
// the reading. A stall that outlasts the shadow is read as it is at the
// next observation, at most min(g, L/4) plus one interval later; a stall
// of the consumer alone, with the observer on time, is read at once as
// before (TestControllerConsumerStallBelieved).
func (c *Controller) observerStall(tc *control, st *lag.State, v *reading) bool {
	if !tc.has {
		return false
	}
	iv := max(tc.interval, c.cfg.Interval.Seconds())
	if v.dt > gapRatio*iv {
		late := min(v.dt-iv, v.budget/4)
		tc.shadowUntil, tc.shadowGap = st.At.Add(time.Duration(late*float64(time.Second))), v.dt
		return true
	}
	return !st.At.After(tc.shadowUntil)
}

// heldStall decides on a reading in the shadow of an observer's stall
// that reads a stall of the whole consumer (v.held, see observerStall),
// with a rule of its own (RuleObserverStall): unlimited stays unlimited,
// a limited target keeps the rate in force.
func heldStall(tc *control, v *reading) (Rule, string) {
	why := fmt.Sprintf("wait %s, consumed %.0f/s of %.0f/s in the shadow of a gap of %s between observations: a stall the observer shared is not believed before it outlasts the observer's own", secs(v.wait), v.consumed, v.produced, secs(tc.shadowGap))
	if !tc.limited {
		return RuleObserverStall, why + ": unlimited"
	}
	return RuleObserverStall, fmt.Sprintf("%s: capacity not measured, keeping %.0f/s", why, tc.rate)
}

// shadowExplains reports whether a reading in the shadow of an observer's
// stall (observerStall) is one such a stall can explain: a new message
// would not be dead on arrival (the wait is within the budget) and no
// head is older than the budget. A backlog past the budget is not the
// stall's doing (a stall of a second or two holds the consumer back by as
// much): it is read as it is, also right after the observer's own gap. A
// replica resumed after a 2.6 s pause read a wait of 79 s, a consumer at
// 20/s of 100/s offered, as the stall's shadow and served its producers
// unlimited (TestHAShards/nats; TestControllerShadowKeepsRealBacklog).
func shadowExplains(v *reading) bool {
	return v.wait < v.budget && (!v.headKnown || v.headAge < v.budget)
}
