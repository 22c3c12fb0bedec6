package quota

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// ErrInvalidConfig is wrapped by every problem [ControllerConfig.Validate]
// and [LeaseConfig.Validate] report.
var ErrInvalidConfig = errors.New("quota: invalid config")

// Unlimited is the rate of a decision, grant or lease that does not limit:
// +Inf messages per second.
var Unlimited = math.Inf(1)

// ControllerConfig tunes the [Controller]. The zero value means the defaults
// noted on each field, which are the values the control law in
// docs/quota-control.md is argued for; most deployments change none.
type ControllerConfig struct {
	// Interval is the observation interval assumed for a target until two
	// observations of it have been seen; after that the measured spacing
	// of State.At is used. Default 1s.
	Interval time.Duration
	// Setpoint is the fraction of the wait budget (MaxAge -
	// ProcessingTime) the controller steers the predicted wait of a new
	// message to under sustained overload, capped at one observation
	// interval (the loop's delay: the backlog that keeps the consumer busy
	// until the next decision). Default 0.25; in (0, 1). A lower setpoint
	// keeps a smaller standing backlog, which is what a sudden capacity
	// drop turns into old messages (a k-fold drop makes the wait k times
	// the target at once).
	Setpoint float64
	// Engage is the fraction of the wait budget above which the consumer
	// is taken to be saturated: its consume rate is then its capacity,
	// and an unlimited target becomes limited. When the interval caps
	// the setpoint, the engage wait is scaled with it (it keeps its ratio
	// Engage/Setpoint). Default 0.2; in
	// (0, Setpoint]. Higher lets bursts ride on the queue longer before
	// the controller engages.
	Engage float64
	// Probe is the multiplicative increase per interval of a limited
	// rate while the backlog is near empty (wait under Engage/2 of the
	// budget) and the consumer keeps up, or while it has capacity to
	// spare (docs/quota-control.md): rate x (1 + Probe). It is capped
	// per target so that one interval of probing cannot overshoot by
	// more than half the slack between the setpoint and the budget.
	// A probe right after a probe that shows a capacity that came back
	// (the rule probe-restored) steps rate x (1 + 4p) instead, p the
	// capped probe: x3 at the default. Default 0.5; > 0.
	Probe float64
	// Smoothing is the time constant of the controller's own smoothing
	// of the consume rate (an exponentially weighted average of the
	// instant rates, restarted on a step; see StepThreshold). Default 2s.
	Smoothing time.Duration
	// StepThreshold is the relative difference between the instant
	// consume rate and the smoothed one beyond which the smoothing
	// restarts from the instant rate (a step change is under way: react
	// now). Default 0.25; > 0.
	StepThreshold float64
	// ReleaseRatio and ReleaseAfter: a limited target whose consumer keeps
	// up becomes unlimited again after ReleaseAfter consecutive
	// observations in which the producers used less than ReleaseRatio of
	// the rate. Defaults 0.75 and 3.
	ReleaseRatio float64
	ReleaseAfter int
	// MaxHold is how long a decision is held while a target's data is
	// stale; after it the target fails open (unlimited, signal ok), so
	// that lagbridge losing sight of a broker never throttles producers
	// for longer than this. Default 30s.
	MaxHold time.Duration
	// MaxRetryAfter caps the retry-after hint. Default 30s.
	MaxRetryAfter time.Duration
	// AvoidBelow: late partitions (head older than MaxAge, or predicted
	// wait over the budget) are listed for avoidance while they are fewer
	// than AvoidBelow of the partitions (at least two partitions).
	// Default 0.5 (fewer than half).
	AvoidBelow float64
}

// DefaultControllerConfig holds the defaults of [ControllerConfig].
var DefaultControllerConfig = ControllerConfig{
	Interval:      time.Second,
	Setpoint:      0.25,
	Engage:        0.2,
	Probe:         0.5,
	Smoothing:     2 * time.Second,
	StepThreshold: 0.25,
	ReleaseRatio:  0.75,
	ReleaseAfter:  3,
	MaxHold:       30 * time.Second,
	MaxRetryAfter: 30 * time.Second,
	AvoidBelow:    0.5,
}

// bindRatio: the producers "use the whole rate" when they produced at least
// this fraction of it during the last interval.
const bindRatio = 0.9

// maxFill: while the consumer is saturated and the backlog under its
// setpoint, the allowed rate exceeds the capacity by at most this fraction
// (from the engage threshold up).
const maxFill = 0.1

// stillAged is how much of the time since a step down's pause a head
// must have aged, at least, for the observation after it to read as
// nothing consumed since (see stillAfterPause).
const stillAged = 0.75

// floorMemory is the time constant over which the controller forgets the
// standing wait of a healthy target (see judge), seconds.
const floorMemory = 30.0

// floorLearn is how many healthy readings of a position read from commits
// the standing wait is learned from before the controller trusts it (see
// unlearnedWait).
const floorLearn = 3

// keepUpRatio: the consumer "keeps up" when it consumed at least this
// fraction of what was produced since its position last moved (the last
// interval, unless it commits less often than it is observed).
const keepUpRatio = 0.95

// firstCommitEvery is the commit cadence assumed for a live consumer that
// has not committed yet (lag.SourceFirstSight): the default auto-commit
// interval of franz-go and the Java client. Its first commit is overdue
// after 1.5 of it plus one observation; until then it is not throttled
// for what it has not committed.
const firstCommitEvery = 5 * time.Second

func (c ControllerConfig) withDefaults() ControllerConfig {
	d := DefaultControllerConfig
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.Setpoint == 0 {
		c.Setpoint = d.Setpoint
	}
	if c.Engage == 0 {
		c.Engage = min(d.Engage, c.Setpoint)
	}
	if c.Probe == 0 {
		c.Probe = d.Probe
	}
	if c.Smoothing == 0 {
		c.Smoothing = d.Smoothing
	}
	if c.StepThreshold == 0 {
		c.StepThreshold = d.StepThreshold
	}
	if c.ReleaseRatio == 0 {
		c.ReleaseRatio = d.ReleaseRatio
	}
	if c.ReleaseAfter == 0 {
		c.ReleaseAfter = d.ReleaseAfter
	}
	if c.MaxHold == 0 {
		c.MaxHold = d.MaxHold
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = d.MaxRetryAfter
	}
	if c.AvoidBelow == 0 {
		c.AvoidBelow = d.AvoidBelow
	}
	return c
}

func configError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...), sentinel: ErrInvalidConfig}
}

func inOpen(x, lo, hi float64) bool { return x > lo && x < hi }

// Validate returns every problem of c (after defaults) at once, each a
// [*FieldError] wrapping [ErrInvalidConfig].
func (c ControllerConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, configError("interval", "must be > 0, got %v", c.Interval))
	}
	if !inOpen(c.Setpoint, 0, 1) {
		errs = append(errs, configError("setpoint", "must be in (0, 1), got %v", c.Setpoint))
	}
	if !(c.Engage > 0 && c.Engage <= c.Setpoint) {
		errs = append(errs, configError("engage", "must be in (0, setpoint=%v], got %v", c.Setpoint, c.Engage))
	}
	if !(c.Probe > 0) || math.IsInf(c.Probe, 0) {
		errs = append(errs, configError("probe", "must be a finite number > 0, got %v", c.Probe))
	}
	if c.Smoothing < 0 {
		errs = append(errs, configError("smoothing", "must be > 0, got %v", c.Smoothing))
	}
	if !(c.StepThreshold > 0) || math.IsInf(c.StepThreshold, 0) {
		errs = append(errs, configError("stepThreshold", "must be a finite number > 0, got %v", c.StepThreshold))
	}
	if !inOpen(c.ReleaseRatio, 0, bindRatio) {
		errs = append(errs, configError("releaseRatio", "must be in (0, %v), got %v", bindRatio, c.ReleaseRatio))
	}
	if c.ReleaseAfter < 1 {
		errs = append(errs, configError("releaseAfter", "must be >= 1, got %d", c.ReleaseAfter))
	}
	if c.MaxHold < 0 {
		errs = append(errs, configError("maxHold", "must be > 0, got %v", c.MaxHold))
	}
	if c.MaxRetryAfter < 0 {
		errs = append(errs, configError("maxRetryAfter", "must be > 0, got %v", c.MaxRetryAfter))
	}
	if !(c.AvoidBelow > 0 && c.AvoidBelow <= 1) {
		errs = append(errs, configError("avoidBelow", "must be in (0, 1], got %v", c.AvoidBelow))
	}
	return errors.Join(errs...)
}

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

// Controller turns successive [lag.State] values of each target into
// [Decision] values. It keeps a small record per target (the rate in force,
// whether it limits, the last decision). The control law is documented in
// docs/quota-control.md.
//
// A Controller is not safe for concurrent use: one loop owns it.
type Controller struct {
	cfg     ControllerConfig
	targets map[lag.Target]*control
	// standIn: the decisions are served by a replica standing in for a
	// silent leader (see StandIn).
	standIn bool
	// sightAsIs: a partition without a commit is read as lag/ gives it
	// (no committedSight). Only tests set it, to replay recordings whose
	// case arose from that reading.
	sightAsIs bool
}

type control struct {
	// has is true once a decision was made from fresh data.
	has       bool
	last      Decision
	lastAt    time.Time // State.At of that data
	lastFresh time.Time // now of that decision
	limited   bool
	rate      float64 // rate in force while limited
	capacity  float64 // smoothed consume rate, msg/s
	// othersLag is the lag, messages, of the partitions producers did not
	// avoid at the last decision from fresh data (see idleBefore).
	othersLag float64
	// floor is the standing wait the target showed while healthy,
	// seconds; floorSeen counts the readings it was learned from.
	floor     float64
	floorSeen int
	// floorTold: a trial told tc.floor a standing wait (raiseFloor, for
	// trialUnderCut and relearnStanding); never reset.
	floorTold bool
	// floorEarly: tc.floor holds a standing wait learned from the first
	// floorLearn readings (see learnFloor); floorLess counts the healthy
	// readings since that showed a much smaller one (limited episodes between
	// them do not break the count), floorLow the largest
	// of them, seconds.
	floorEarly bool
	floorLess  int
	floorLow   float64
	// headKept is the oldest head at the commit, seconds, of the healthy
	// readings of a consumer read through its commits that showed it
	// keeping up (on their own or over two moves), forgotten over
	// floorMemory, learned before its cadence is (see noQueueAtCommit).
	headKept float64
	// keptRate: the highest produce rate a consumer read through its
	// commits kept up with while unlimited, forgotten over floorMemory,
	// msg/s (see drainedAtCommits).
	keptRate float64
	// satCap is the highest capacity estimate of the readings the law
	// decided as saturated (RuleSaturated) since the target was last
	// judged unlimited or adopted unlimited, msg/s (see restoredProbe).
	// restored: a probe-restored step was taken since then (restoredProbe
	// takes one an episode when keptRate is not known).
	satCap   float64
	restored bool
	// learnedSeen counts the measured readings with a learned cadence,
	// measuredSeen all measured readings.
	learnedSeen, measuredSeen int
	// ceiling is the capacity the consumer showed: its capacity when last
	// saturated, raised by any higher rate it consumed since, msg/s.
	ceiling float64
	// moveAt is the State.At of the last observation that measured the
	// consumption (the position moved, or there was nothing to consume);
	// spanProduced the messages produced since.
	moveAt       time.Time
	spanProduced float64
	// moveLag is the lag at moveAt (see reportStill).
	moveLag  int64
	interval float64 // smoothed observation interval, seconds
	// shadowUntil: readings up to this time are in the shadow of an
	// observer's stall (see observerStall), after a gap of shadowGap
	// seconds between observations.
	shadowUntil time.Time
	shadowGap   float64
	// paused: the last decision paused admission on a step down;
	// pauseHead and pauseAt are that observation's head age, seconds,
	// and time (see stillAfterPause), pauseCommits and pauseMove its
	// partitions' committed offsets and when they last moved; stillHeld:
	// the pause was kept because nothing was consumed since (see endHold).
	paused       bool
	stillHeld    bool
	pauseHead    float64
	pauseAt      time.Time
	pauseCommits []partCommit
	pauseMove    time.Time
	// headLate: the last observation's head was older than MaxAge.
	headLate bool
	// saturated: the last observation that measured the consumption found
	// the consumer saturated; moveBacklog is the backlog it saw.
	saturated   bool
	moveBacklog float64
	release     int // consecutive observations with the rate unused
	// hardStopped: the last decision was a stop for hard age.
	hardStopped bool
	// lastCommit is the newest commit of the target's partitions seen
	// (PartitionState.LastCommit); caughtUp: at that commit the consumer
	// had consumed everything written before it (see caughtUpAtCommit).
	lastCommit time.Time
	caughtUp   bool
	// blindCap: the highest rate a probe may reach until the next commit
	// of a consumer caught up at its last one, msg/s.
	blindCap float64
	// Between the commits of a consumer that commits less often than it
	// is observed (see caughtUpAtCommit and blindStep): behindAt, its
	// last commit showed a backlog beyond what the dating of the commit
	// explains; sureCaught, it showed the consumer caught up whatever
	// the dating (or caught up again after a span in which the
	// producers used capCap); overshot, a commit showed it behind after
	// a span without a drain (the controller's own admission put it
	// there), until a commit after a drain; drained, a drain was
	// decided since the last commit; capCap, the highest rate a probe
	// may reach until the next commit while overshot, msg/s.
	behindAt, sureCaught, overshot, drained bool
	capCap, capBase                         float64
	// sinceCommit: messages produced since lastCommit.
	sinceCommit float64
	// spanAt and spanPos: the newest commit of a consumer whose position
	// is estimated between commits, and the sum of its committed offsets
	// then (see commitSpan).
	spanAt  time.Time
	spanPos int64
	// prevMove is what the previous move of a position read from commits
	// measured (see consumption).
	prevMove moveWindow
	// quick counts the moves in a row, each one observation after the
	// one before, of a position read from commits: from two on, the
	// consumer commits at least once per observation (see cadence).
	// still: while the cadence is not learned, the position (with lag)
	// was seen not to move in an observation: the consumer may commit
	// less often than it is observed.
	quick int
	still bool
	// sightAt: when a live group without a commit was first seen
	// (lag.SourceFirstSight), while its position has not moved since;
	// zero otherwise (see overdue).
	sightAt time.Time
	// capLower: the capacity estimate rests on a lower bound of the
	// consumer's rate (see reading.lower).
	capLower bool
	// stalled: the last reading that measured the consumption consumed
	// nothing with work waiting; the estimate was kept from before it
	// (see estimateCapacity).
	stalled bool
	// fellFrom is the capacity estimate a reading of the consumer's
	// reports lowered by more than a step (StepThreshold), the first such
	// since the target was last unlimited, msg/s (0: none); fellSpent: a
	// reading has climbed back from it since (see climbBack). hand is
	// what the reports held at the last reading. drainRate is the rate a
	// reading not caught up read (the climb back's measure) at drainAt.
	// climbTo is the estimate the climb back restored (0: none, or no
	// longer on trial), climbAt the reading's time, climbKept how many
	// caught-up readings have kept it since (see rearmClimb).
	fellFrom  float64
	fellSpent bool
	// lateWork is what the whole consumer did (less its counted skips)
	// at a reading whose avoided partitions' drain, taken out, lowered
	// the capacity estimate by more than a step, up to the estimate
	// before it, msg/s (0: none since; see lateShareBack).
	lateWork  float64
	hand      handMark
	drainRate float64
	drainAt   time.Time
	climbTo   float64
	climbAt   time.Time
	climbKept int
	// prevHead is the head at the commit, seconds, of the last measured
	// reading with a known head (-1: none; see standingUnderCut).
	prevHead float64
	// underCut counts the measured readings in a row whose wait may be
	// the standing wait of the commit cadence (see standingUnderCut);
	// trialHead is the head at the commit when a probe was let through
	// to tell (0: none).
	underCut  int
	trialHead float64
	// staleSeen counts the measured readings in a row whose head at the
	// commit may be a standing wait the learned one (tc.floor) no longer
	// fits (see relearnStanding); staleHead is the head at the commit
	// when a probe was let through to tell (0: none), staleTell the
	// readings since.
	staleSeen int
	staleHead float64
	staleTell int
	// staleBy is when the verdict of that probe is due (see
	// staleDue): one not told by then is dropped.
	staleBy time.Time
	// shown is the highest consume rate measured while limited (from
	// the first reading after the cut on), msg/s (see unlearnedStale).
	shown float64
	// staleSpent: while limited, a trial of a consumer whose commit
	// phase is not seen to matter (see phaseShown) found a queue; no
	// other is let through until the target is unlimited again.
	staleSpent bool
	// skipAt is the State.At of the last reading in which a consumer
	// that commits about once per observation had not committed (see
	// staleStanding): its commit timer's phase crossed the observations'.
	skipAt time.Time
	parts  map[int32]partTrack
	gen    uint64
	// partsAt: tc.parts was recorded from a reading before the first
	// fresh one (rates not known yet), at this time (see sightParts);
	// zero once a fresh reading was decided on.
	partsAt time.Time
}

// moveWindow is what one move of the position measured: messages consumed
// and produced over its span (seconds).
type moveWindow struct{ msgs, produced, span float64 }

// partTrack is what the controller remembers of one partition.
type partTrack struct {
	pos  int64 // consumed position (End - Lag)
	lag  int64
	late bool // listed for avoidance
	gen  uint64
	// in and out are what was written to the partition and what its
	// consumer drained in the last interval, msg/s, out less what it
	// skipped where that is counted (see leaveOutLate).
	in, out float64
	// calm counts the observations in a row a listed partition was
	// comfortably inside the deadline (see lateParts).
	calm int
	// rate is the partition's consume rate, msg/s, measured between two
	// moves of its position while it had a backlog (0: not known); movePos
	// and moveAt are its position and the time at its last move.
	rate    float64
	movePos int64
	moveAt  time.Time
	// moveLag is its lag at its last move.
	moveLag int64
	// handAt is the State.At at which a position from the consumer's
	// reports with work in hand was first seen, handLag the lag then
	// (zero: none in hand; see reportedWait).
	handAt  time.Time
	handLag int64
	// inAvg is in smoothed over about a second (see fedLimited).
	inAvg float64
	// calmFor is how long, seconds, it was calm (as calm counts).
	// probe is how long, seconds, its next trial waits for (0:
	// avoidProbe); trial is the time since it was last tried again,
	// seconds, while that is being watched (0: not watched).
	calmFor, probe, trial float64
	// limit is the keyless rate, msg/s, a listed partition is fed (see
	// partLimit); 0: none, avoided outright.
	limit float64
	// full: rate was measured between two moves that left work behind
	// (the consumer's capacity; see knownSlow). capSeen: full was so at
	// some observation since the partition was last unlisted (see
	// holdLate).
	full, capSeen bool
	// head is its HeadAge at this observation, seconds (see sharedRise).
	head float64
	// committed is its committed offset at this observation; freshAt the
	// State.At of its last observation that was not between two of its
	// commits (see betweenCommits).
	committed int64
	freshAt   time.Time
}

// avoidCalm is how many observations in a row a listed partition must be
// comfortably inside the deadline (no backlog, or head and wait within
// the target wait) before it is no longer avoided; avoidProbe is how long
// (seconds) it must, when the rate it was seen to consume at is below the
// share of the produce rate it would get back, before it is tried
// again (its consumer may have recovered, which nothing shows while it is
// avoided). A partition late again within probeWatch seconds of such a
// trial failed it: its next trial waits twice as long, up to maxProbe;
// one that stays fine for probeWatch passed it, and the wait is
// avoidProbe again. The trials are timed in seconds, not observations: a
// trial costs what the partition gets until it is seen late again, the
// same at any interval.
const (
	avoidCalm  = 3
	avoidProbe = 30.0
	probeWatch = 10.0
	maxProbe   = 8 * avoidProbe
)

// NewController returns a Controller, or the problems of cfg (see
// [ControllerConfig.Validate]).
func NewController(cfg ControllerConfig) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg.withDefaults(), targets: make(map[lag.Target]*control)}, nil
}

// Forget drops the record of t (a target no longer observed).
func (c *Controller) Forget(t lag.Target) { delete(c.targets, t) }

// Len is the number of targets with a record.
func (c *Controller) Len() int { return len(c.targets) }

// Step folds st, the newest state of its target, into a decision as of now,
// under policy p (which must be valid; an invalid one gives an unlimited
// decision that says so).
//
// Call it once per observation of the target. A state with the same At as
// the previous call brings no new rates: the previous decision is returned
// again (with At set to now). A stale state (lag.StatusStale, or rates not
// yet known) holds the last decision for up to MaxHold after it was made,
// then fails open. An abandoned target (lag.StatusAbandoned) is unlimited
// with signal ok and never binds its topic (see [CombineTopic]).
//
// Every decision names the rule that made it in Decision.Rule; the rules
// and when each fires are tabled in docs/quota-control.md.
func (c *Controller) Step(st lag.State, p Policy, now time.Time) Decision {
	tc := c.targets[st.Target]
	if tc == nil {
		tc = &control{}
		c.targets[st.Target] = tc
	}
	d := Decision{
		Target:   st.Target,
		Policy:   p.Name,
		At:       now,
		Rate:     Unlimited,
		Advisory: p.Mode.Advisory(),
		MinRate:  p.MinRate,
		HeadAge:  st.HeadAge,
		Lag:      st.Lag,
		// The rate is known only with RatesKnown; NaN never travels.
		ProduceRate: produceRate(st),
	}
	switch {
	case p.MaxAge <= 0 || p.Budget() <= 0:
		d.Rule, d.Reason = RuleInvalidPolicy, "invalid policy (maxAge - processingTime <= 0): unlimited"
		return d
	case st.Status == lag.StatusAbandoned:
		// Reported, never obeyed; start from scratch if it comes back.
		*tc = control{}
		d.Rule, d.Reason = RuleAbandoned, "no live consumer ("+orDash(st.Reason)+"): abandoned, binds no producer"
		return d
	case st.Status == lag.StatusStale || !st.RatesKnown || st.At.IsZero():
		return c.unfresh(tc, d, &st, now)
	case tc.has && !st.At.After(tc.lastAt):
		// Same observation again: nothing new to decide on.
		r := tc.last
		r.At = now
		return r
	}
	if !c.sightAsIs {
		committedSight(&st)
	}
	var v reading
	c.measure(tc, &st, &p, &v)
	rule, reason := c.regime(tc, &st, &v)
	if v.relearn && rule != RuleRelearn {
		// The trial did not go through (another rule decided): nothing
		// to tell from the next reading; the next qualifying one tries.
		tc.staleHead, tc.staleSeen = 0, floorLearn-1
	}
	c.signal(tc, &d, &st, &p, &v, rule, reason)
	tc.has, tc.last, tc.lastAt, tc.lastFresh = true, d, st.At, now
	tc.headLate = v.headAge > p.MaxAge.Seconds()
	tc.hand = handOf(&st, tc.hand.parts)
	// A reading that read still keeps the pause whether it paused or
	// drained (see keptPause), and the commit that ends it is read by
	// endHold either way.
	tc.paused = v.stepDown && v.engaged && st.Status != lag.StatusStopped
	tc.stillHeld = tc.paused && v.stillHead
	tc.pauseHead, tc.pauseAt = st.HeadAge.Seconds(), st.At
	tc.pauseCommits, tc.pauseMove = tc.pauseCommits[:0], lastMove(&st)
	if tc.paused {
		tc.pauseCommits = appendCommits(tc.pauseCommits, &st)
	}
	return d
}

// committedSight reads st from its commits when the only partitions that
// make it lag.SourceFirstSight are ones its group has not committed yet
// while it commits the others: a group whose every other partition with a
// position is read from its commits (lag.SourceCommits), at least one of
// them with a commit. Such a partition had nothing to consume when the
// group was first seen (its end was its first-sight position: a sticky
// partitioner had sent nothing there yet) and its first records came
// since; the consumer has had nothing to commit there before them, so its
// position is what the group commits, at the group's cadence. Read as a
// group without a commit (lag/ takes a target's source from its least
// exact partition with lag), every commit-aware reading (the commit
// slack, the standing wait, a first reading of uncommitted work) was off
// for the whole target, and a healthy consumer was limited at its
// learned cadence's standing wait: "saturated: capacity 801/s, wait
// 943ms" at the third fresh reading of a franz-go 1 s auto-commit read
// every second (800 msg/s offered, 2,000 of capacity), held at 620/s
// until the drop, the source flipping between first-seen and commits as
// the sticky partitioner reached partitions empty at first sight
// (lagbridge bench kafka/autocommit-1s/sync/1s on Kafka 4.3.1;
// TestControllerUncommittedPartitionOfCommittingGroup). A partition its
// consumer does not consume still shows: its head ages past the
// interval, as on a committed partition. The state's Uncertainty, the
// time since first sight on such a partition, is that of the committed
// partitions (none for commits).
func committedSight(st *lag.State) {
	if st.Source != lag.SourceFirstSight {
		return
	}
	committed := false
	for i := range st.Partitions {
		switch ps := &st.Partitions[i]; ps.Source {
		case lag.SourceFirstSight, "":
		case lag.SourceCommits:
			committed = committed || ps.Committed >= 0
		default:
			return
		}
	}
	if committed {
		st.Source, st.Uncertainty = lag.SourceCommits, 0
	}
}

// unfresh decides on a state without fresh rates: the last fresh decision,
// held, for up to MaxHold after it was made; then unlimited, and the record
// starts from scratch when data returns.
func (c *Controller) unfresh(tc *control, d Decision, st *lag.State, now time.Time) Decision {
	if tc.has && now.Sub(tc.lastFresh) <= c.cfg.MaxHold {
		h := tc.last
		h.At, h.Held, h.Rule = now, true, RuleHold
		h.Reason = fmt.Sprintf("no fresh data (%s): holding the decision of %s", orDash(st.Reason), tc.lastFresh.Format(time.RFC3339Nano))
		return h
	}
	*tc = control{}
	if !st.RatesKnown && st.Status != lag.StatusStale && !st.At.IsZero() {
		sightParts(tc, st)
	}
	if st.RatesKnown || st.Status == lag.StatusStale {
		d.Rule, d.Reason = RuleFailOpen, fmt.Sprintf("no fresh data for more than %s (%s): fail-open", c.cfg.MaxHold, orDash(st.Reason))
	} else {
		d.Rule, d.Reason = RuleRatesUnknown, "rates not known yet: unlimited"
	}
	return d
}

// sightParts records the partitions of a reading whose rates are not
// known yet (a new group's first), as lateParts records a partition it
// sees for the first time, so that the first fresh decision knows each
// partition's lag and position one reading before: how much its lag grew
// and how fast its consumer drained it (see partWait). Without it, a
// partition that holds a new group's backlog alone had no rate of its own
// at that decision, was judged at its share of the target's consume rate,
// and got another interval of a sticky partitioner's batches before it
// was listed (seen on real Kafka and kfake: 120-190 records of a 20 msg/s
// partition, 6-9 s of its work, before the first listing).
func sightParts(tc *control, st *lag.State) {
	tc.parts = make(map[int32]partTrack, len(st.Partitions))
	for _, ps := range st.Partitions {
		tc.parts[ps.Partition] = trackPart(partTrack{}, false, &ps, st, 0)
	}
	tc.partsAt = st.At
}

// reading is what one fresh observation tells the controller: the figures
// every rule decides from. Times are in seconds, rates in msg/s.
type reading struct {
	dt   float64 // this observation interval
	span float64 // the time the consumption was measured over (>= dt)
	// cadence is the commit cadence worked with (see cadence), 0 when
	// the position moves whenever the consumer consumes.
	cadence float64
	// commits: the position is a commit of a consumer that commits less
	// often than it is observed, or whose cadence is not learned yet
	// (v.cadence > 0, Source commits).
	commits bool
	// learned: the cadence is the one lag/ learned (State.CommitInterval),
	// not assumed (see cadence).
	learned   bool
	since     float64 // how long ago it committed the position seen (0: exact enough)
	headAge   float64 // the head's age at the commit (HeadAge - since), of the partitions not avoided
	headKnown bool    // State.HeadAgeKnown
	// queued: the wait less the standing wait the target shows when
	// healthy (see judge), seconds.
	queued     float64
	budget     float64 // L: MaxAge - ProcessingTime
	setWait    float64 // W*: the standing wait steered to under overload
	engageWait float64 // E: the wait above which the consumer is saturated
	consumed   float64 // the consume rate measured (see consumption)
	produced   float64 // the produce rate of the interval
	prevCap    float64 // the capacity estimate before this observation
	capacity   float64 // C: the capacity estimate
	lag        float64 // messages, as observed
	backlog    float64 // B: the lag minus the commit slack, messages
	setBacklog float64 // B* = W*·C
	wait       float64 // W = B / C; +Inf with a backlog and nothing consumed
	// rawWait is the wait before the standing wait (tc.floor) is taken
	// out of the backlog; unlearned: the position is read from commits
	// whose cadence is not learned yet.
	rawWait   float64
	unlearned bool
	// measured: the interval measured the consumption; false while a
	// consumer that commits less often than it is observed has not
	// committed yet (its capacity is then unknown, not 0).
	measured bool
	// keepsUp: measured, and the consumer consumed at least keepUpRatio
	// of what was produced since its position last moved, or has no
	// backlog.
	keepsUp bool
	// spare: the producers are refused (binding) while the consumer
	// keeps up at well below the rate it showed before (the ceiling),
	// or, limited, it keeps up and is caught up at every commit (see
	// caughtAtCommits): it has capacity to spare, whatever standing lag
	// it shows.
	spare   bool
	engaged bool // W > E and no spare capacity: the consumer is saturated
	// standing and allowance are the standing wait (tc.floor) and the
	// startup allowance (unlearnedWait) the engage test took off the
	// wait, seconds, as they were then (unlimitedReason).
	standing, allowance float64
	stepDown            bool    // capacity fell during the interval: pause
	stillHead           bool    // paused, and nothing consumed since: pause again (stillAfterPause)
	law                 float64 // the saturated law's rate (0 while draining dead work)
	probe               float64 // the multiplicative step of a probe
	// wasSaturated: the last measured observation found the consumer
	// saturated.
	wasSaturated bool
	// binding: the target was limited and the producers used the whole
	// rate in force (at least bindRatio of it) during the interval.
	binding bool
	// avoid lists the partitions producers avoid (fewBad: they are few
	// enough to write around); lateLag is their lag, which the target's
	// backlog leaves out: producers that write around them add nothing
	// to it, so the wait of a new message is the other partitions'.
	// The rates leave them out too (see leaveOutLate).
	avoid   []int32
	fewBad  bool
	lateLag float64
	// lateOut: what leaveOutLate took out of v.consumed, msg/s (the
	// avoided partitions' drain, less their counted skips).
	lateOut float64
	// shares: the keyless shares of the avoided partitions that have a
	// rate (see keylessShares).
	shares []PartitionShare
	// spanProduced: messages produced over the span the consumption was
	// measured over (see consumption); prevProduced: the produce rate
	// over the move before, msg/s (0: unknown), for positions read from
	// commits as often as observations.
	spanProduced, prevProduced float64
	// keptTwo: over this move and the one before (which span at least
	// two commits), the consumer consumed keepUpRatio of what was
	// produced (a position read from commits as often as observations).
	keptTwo bool
	// lower: the consumption measured is a lower bound of the
	// consumer's rate (the first commit after first sight, see
	// consumption); sightCommit: that commit measures nothing, and its
	// lag is the backlog (not extrapolated from the reading before).
	lower, sightCommit bool
	// noQueue: measured, and the head at the commit shows no queue
	// beyond the standing wait (see noQueueAtCommit); caught: measured,
	// and every commit shows the consumer caught up (see
	// caughtAtCommits).
	noQueue, caught bool
	// trial: a probe is let through to tell a standing wait from a
	// queue (see trialUnderCut).
	trial bool
	// headRose: the head at the commit is more than E/4 older than at
	// the last measured reading (see risenHead).
	headRose bool
	// relearn: that probe is relearnStanding's (RuleRelearn);
	// phaseMoved: within floorMemory a consumer that commits about once
	// per observation was seen not to commit in one (tc.skipAt).
	relearn, phaseMoved bool
	// at: the State.At of the reading.
	at time.Time
	// blind: the position is an estimate between the commits of a
	// consumer that was caught up at its last commit (see
	// caughtUpAtCommit).
	blind bool
	// estimated: the position is lag/'s estimate between the commits
	// of a consumer that commits less often than it is observed;
	// capped: a probe is capped at tc.capCap however the estimate
	// reads (see blindStep).
	estimated, capped bool
	// spanMeasured: a commit that corrected the estimate measured the
	// consumption from the commit before it (see correctedSpan).
	spanMeasured bool
	// shadow: the reading is in the shadow of a stall the observer
	// shared (see observerStall); held: it read a stall of the whole
	// consumer there, which is not believed yet.
	shadow, held bool
	// rise: every partition not listed showed its head rise together
	// while some are listed (see sharedRise): a stall of the whole
	// consumer, the topic's law's evidence and no partition's.
	rise bool
	// raised: a probe raised the rate in force (see plan).
	raised bool
}

// measure reads st into v and updates the smoothed interval and capacity
// of tc.
func (c *Controller) measure(tc *control, st *lag.State, p *Policy, v *reading) {
	cfg := &c.cfg
	v.budget, v.produced, v.lag, v.at = p.Budget().Seconds(), st.ProduceRateInstant, float64(st.Lag), st.At
	v.binding = tc.limited && v.produced >= bindRatio*tc.rate
	// The observation interval, as measured, and its smoothed value, the
	// delay of the feedback loop.
	v.dt = cfg.Interval.Seconds()
	if tc.has {
		v.dt = st.At.Sub(tc.lastAt).Seconds()
	}
	v.shadow = c.observerStall(tc, st, v)
	if tc.interval <= 0 {
		tc.interval = v.dt
	} else {
		tc.interval += 0.25 * (v.dt - tc.interval)
	}
	// The standing wait steered to under overload: Setpoint of the budget,
	// but no more than one loop delay. A backlog of one interval of work
	// is what keeps the consumer busy (its capacity visible) until the
	// next decision takes effect; more only waits, and is what a sudden
	// capacity drop turns into dead messages. Engage keeps its ratio to
	// the setpoint.
	v.setWait, v.engageWait = cfg.waits(v.budget, tc.interval)

	v.prevCap, v.wasSaturated = tc.capacity, tc.saturated
	v.cadence = cadence(tc, st)
	c.consumption(tc, st, v)
	c.caughtUpAtCommit(tc, st, v)
	v.learned = st.CommitInterval > 0
	v.commits = fromCommits(st) && (v.learned || (v.cadence > 0 && tc.still))
	commitPhase(tc, st, v)
	switch {
	case v.commits:
		v.since = commitAge(tc, st, v)
	case idleReported(st):
		// The consumer said it had nothing in hand, up to a reporter's
		// period ago: what was written since is lag it has not been
		// asked about yet, not work waiting for it. Read it as a commit
		// that old. (A report with work in hand is taken as it is: how
		// far the consumer got through what it holds is unknown.)
		v.since = st.Uncertainty.Seconds()
	}
	v.headAge, v.headKnown = max(st.HeadAge.Seconds()-v.since, 0), st.HeadAgeKnown
	sight := idleSince(tc, st)
	v.avoid, v.fewBad = c.lateParts(tc, st, p, v)
	// A share is of what the producers send next: over the larger of the
	// interval's produce rate and the smoothed one, so that an interval
	// they sent little in (a stall of the machine, a reading that came
	// early) does not hand a listed partition its whole share
	// (TestControllerKeylessShareRate).
	v.shares = keylessShares(tc, v.avoid, max(v.produced, produceRate(*st)), len(st.Partitions))
	leaveOutLate(tc, v)
	if len(v.avoid) > 0 {
		v.headAge = max(othersHead(st, v.avoid)-v.since, 0)
	}
	v.capacity = readCapacity(tc)
	if v.measured {
		c.measured(tc, st, p, v, sight)
	}
	endHold(tc, st, v)
	tc.othersLag = v.lag
	backlog(tc, v, st.At)
	v.rawWait = waitOf(v)
	beyondStanding(tc, v)
	v.wait = waitOf(v)
	v.unlearned = fromCommits(st) && !v.learned && v.cadence > 0
	noteShown(tc, v)
	if v.measured {
		tc.measuredSeen++
		if v.learned {
			tc.learnedSeen++
		}
	}
	c.judge(tc, v)
	v.stillHead = stillAfterPause(tc, st, v)
	c.saturatedLaw(tc, v)
}

// stillAfterPause reports whether a target paused on a step down (see
// saturatedLaw) shows, at the next observation, that its consumer still
// consumes next to nothing: read from commits (or estimated between them,
// lag.SourceEstimate) at a learned cadence, no commit since the pause, the
// last one overdue as overdue has it (1.5 commit intervals and one
// observation ago: a poll in hand longer than any before the drop; at
// 1.5 intervals alone, a cadence learned as 250 ms for commits every
// 0.5 s at 10x held a lumpy pause 376 ms after a commit), and the head
// aged by at least stillAged of the time since the pause (the position
// moved over less than a quarter of what was written in that time). The pause is a measure for one
// interval, and the observation after it measures nothing: a consumer
// that commits every poll holds the poll it had at the drop, lag/'s
// estimate between commits stops at what the last commit explains, and
// the capacity estimate stays at the rate from before the drop. Commit
// per poll and the ttl guard at 10x, read every 250 ms, were re-opened
// at 1,497, 1,224 and 978 msg/s (at "capacity 1,972/s") and 1,407 and
// 1,130 msg/s (1,829/s) for a consumer down to 400/s, their heads aging
// 0.27-0.30 s an observation (lagbridge bench on kfake, session 23;
// TestControllerStillAfterPause). A lumpy reading that fired the step
// down (a consumer keeping up that committed less in one interval)
// shows its head moving at the next observation (0.04-0.05 s aged), or
// a commit, and goes on as before.
func stillAfterPause(tc *control, st *lag.State, v *reading) bool {
	if !tc.paused || !st.HeadAgeKnown || st.Lag <= 0 || st.CommitInterval <= 0 ||
		(st.Source != lag.SourceCommits && st.Source != lag.SourceEstimate) {
		return false
	}
	since := st.At.Sub(tc.pauseAt).Seconds()
	last := lastMove(st)
	return since > 0 && !last.After(tc.pauseAt) &&
		st.At.Sub(last).Seconds() > 1.5*st.CommitInterval.Seconds()+v.dt &&
		st.HeadAge.Seconds()-tc.pauseHead >= stillAged*since
}

// keptPause is the rule of a reading that keeps a pause (see
// stillAfterPause): the step down, at 0/s, until the head is past the
// budget; from there on the drain, which says what holds: a consumer
// that consumes nothing while its head ages past the budget (a hung
// member: alive, never committing) is no capacity still to measure. Kept
// so, a hung member read "capacity still not measured" under the step
// down up to the hard age (review-tenx, session 24; the wait stayed
// below the budget, the producers held at 0/s adding no lag). Either
// keeps the pause (Step): the drain of a kept pause re-opens at no stale
// capacity. Only the rule and reason differ: tc.drained stays as the
// step down leaves it (set, the next commit's probe cap read the pause
// as a drain: a behaviour of its own, not measured).
func keptPause(st *lag.State, v *reading) (Rule, string) {
	head, since := st.HeadAge.Seconds(), st.At.Sub(lastMove(st)).Round(time.Millisecond)
	if head > v.budget {
		return RuleDrain, fmt.Sprintf("paused on a step down, and nothing committed since (no commit for %s, commit interval %s): head %s > budget %s, draining",
			since, st.CommitInterval.Round(time.Millisecond), secs(head), secs(v.budget))
	}
	return RuleStepDown, fmt.Sprintf("paused on a step down, and nothing committed since (head %s, no commit for %s, commit interval %s): capacity still not measured, admitting nothing (wait %s)",
		secs(head), since, st.CommitInterval.Round(time.Millisecond), secs(v.wait))
}

// endHold reads the commit that ends a pause kept by stillAfterPause (the
// first since the pause): what the consumer committed from its last
// commit before the pause to this one, over the time between them, is
// the capacity when it is below the estimate (counted over the partitions
// with a commit, not stale, in both readings, each at least 0; nothing
// taken when none moved: a partition gone stale or reset is not a
// capacity of 0). At a drop that span holds the poll in hand, partly
// worked through at the old capacity, so it overstates the new one. It
// understates a consumer that stalled after the step down and commits
// its first moments back: replayed, commit per poll at 2,000/s blocked
// 2 s then committing 300 records read 195/s and drained, where main kept
// 2,945/s (review-tenx, session 24); the next readings measure it again
// and the probe climbs back (x1.5 a decision). Taken by the estimate
// (read through a position estimated between commits, such a commit
// measures nothing, see commitSpan), commit per poll at 10x re-opened at
// "capacity 2,037/s", 1,526 msg/s, on the commit that came 1.5 s after
// the pause for a consumer of 400, and was drained one reading later
// (lagbridge bench on kfake, session 24). Only after a pause that was
// kept, whatever its last reading's rule (step-down, keptPause's drain on
// the head, or a drain on the wait): skipped after a drain on the wait,
// the commit re-opened at 978/s on the 1,972/s from before the drop
// (review-keptpause, session 25; the simulator's 1 s auto-commit grid
// moves by a second of 162 refused while idle).
func endHold(tc *control, st *lag.State, v *reading) {
	if !tc.stillHeld {
		return
	}
	last := lastMove(st)
	if !last.After(tc.pauseMove) {
		return
	}
	tc.stillHeld = false
	span := last.Sub(tc.pauseMove).Seconds()
	if span <= 0 || tc.pauseMove.IsZero() {
		return
	}
	var moved int64
	var counted bool
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if !withCommit(ps) {
			continue
		}
		j, found := slices.BinarySearchFunc(tc.pauseCommits, ps.Partition, func(c partCommit, p int32) int { return cmp.Compare(c.partition, p) })
		if found {
			moved += max(ps.Committed-tc.pauseCommits[j].committed, 0)
			counted = true
		}
	}
	if r := float64(moved) / span; counted && r > 0 && r < v.capacity {
		tc.capacity, v.capacity = r, r
	}
}

// partCommit is a partition's committed offset (see endHold).
type partCommit struct {
	partition int32
	committed int64
}

// appendCommits appends st's committed offsets, on the partitions with a
// commit that are not stale, to dst in partition order.
func appendCommits(dst []partCommit, st *lag.State) []partCommit {
	from := len(dst)
	for i := range st.Partitions {
		if ps := &st.Partitions[i]; withCommit(ps) {
			dst = append(dst, partCommit{ps.Partition, ps.Committed})
		}
	}
	slices.SortFunc(dst[from:], func(a, b partCommit) int { return cmp.Compare(a.partition, b.partition) })
	return dst
}

// withCommit says whether ps has a committed offset to count: it has a
// commit and is not stale.
func withCommit(ps *lag.PartitionState) bool { return ps.Committed >= 0 && !ps.Stale }

// committedPos is the sum of st's committed offsets, on the partitions
// with a commit that are not stale.
func committedPos(st *lag.State) int64 {
	var pos int64
	for i := range st.Partitions {
		if ps := &st.Partitions[i]; withCommit(ps) {
			pos += ps.Committed
		}
	}
	return pos
}

// noteShown keeps tc.shown, the highest consume rate measured while
// limited (see unlearnedStale): forgotten while unlimited, and restarted
// from v's at a head older than any standing wait explains (floorCap and
// E/2): a queue, the consumer at its capacity now, whatever it consumed
// before (a capacity drop).
func noteShown(tc *control, v *reading) {
	switch {
	case !tc.limited:
		tc.shown = 0
	case v.measured && v.headKnown && v.headAge > floorCap(v)+v.engageWait/2:
		tc.shown = v.consumed
	case v.measured:
		tc.shown = max(tc.shown, v.consumed)
	}
}

// commitPhase records a reading in which a consumer that commits about
// once per observation had not committed (tc.skipAt: its commit timer's
// phase crossed the observations') and sets v.phaseMoved when that was
// within floorMemory (see staleStanding). A reading in the shadow of the
// observer's own stall (v.shadow) is not one: the machine, not the
// consumer's timer, held that commit back, and any consumer that commits
// once per observation or more often (NATS acks too: lag/ rounds the
// cadence to the interval) would have read as one whose phase matters
// for floorMemory after it.
func commitPhase(tc *control, st *lag.State, v *reading) {
	if !v.measured && !v.shadow && v.commits && v.learned && onceObs(v) && st.Lag > 0 {
		tc.skipAt = st.At
	}
	v.phaseMoved = !tc.skipAt.IsZero() && st.At.Sub(tc.skipAt).Seconds() <= floorMemory
}

// beyondStanding takes the standing wait a consumer read through its
// commits shows while healthy (tc.floor: uncommitted work, messages in
// flight) out of v.backlog: it is no work waiting, and the law steers the
// backlog beyond it. It is work consumed at the rate produced while the
// head shows no queue beyond it (the consumer was caught up at its
// commit), else at most at the capacity.
func beyondStanding(tc *control, v *reading) {
	if !v.commits || tc.floor <= 0 || v.capacity <= 0 {
		return
	}
	rate := min(v.capacity, v.produced)
	if v.headKnown && v.headAge+v.since <= tc.floor+v.engageWait/2 {
		rate = v.produced
	}
	v.backlog = max(v.backlog-tc.floor*rate, 0)
}

// measured completes v for a reading that measured the consumption
// (sight: see idleSince): whether every commit shows the consumer caught
// up, whether the head shows no queue, a trial probe (trialUnderCut) and
// the capacity estimate.
func (c *Controller) measured(tc *control, st *lag.State, p *Policy, v *reading, sight float64) {
	v.caught = caughtAtCommits(st, v)
	v.noQueue = noQueueAtCommit(tc, st, v) || v.caught || idleBefore(tc, v) || idleAtReport(st, v) || idleAtSight(v, sight)
	c.trialUnderCut(tc, v)
	c.estimateCapacity(tc, st, p, v)
}

// keepsUpAtCommits reports whether a consumer read through its commits,
// that did not consume 95% of what was produced in the interval, keeps up
// all the same, once its standing wait is learned: a reading of commits
// holds a commit's worth more or less than was consumed, so with the
// backlog beyond the standing wait near empty (under E/2) it is no
// evidence of falling behind; and a consumer whose commits run one
// observation behind (a standing wait of half an interval or more)
// consumes in one interval what was produced in the one before, which
// reads as falling behind whenever the rate rises (a probe).
func (c *Controller) keepsUpAtCommits(tc *control, v *reading) bool {
	if !v.commits || tc.floorSeen < floorLearn {
		return false
	}
	return v.wait <= v.engageWait/2 || (tc.floor >= v.dt/2 && v.prevProduced > 0 && v.consumed >= keepUpRatio*v.prevProduced)
}

// caughtAtCommits reports whether st reads the commits of a consumer (a
// learned cadence, every partition with lag read at its commit) that was
// caught up at each of them: on every partition not avoided that has lag,
// the record at the committed position had waited at most E when the
// commit was made, however the commit is dated (lag/ dates it half an
// interval before the reading that saw it; it may have been made up to
// half an interval later), and the head is at most a commit interval, an
// observation interval and E/2 old (a partition that stopped on a record
// written after its last commit ages past that). Its lag is then what was
// written since its commits, not work waiting: the standing wait its commit
// cadence creates, which no quota removes, and the consume rate read is the
// commits' timing, not the capacity. Read as a queue, such readings limited
// a consumer of 12,000 msg/s at the 60 msg/s of its first reading and held
// it there (lagbridge bench --hot-partition at 250 ms, kfake;
// TestControllerCaughtAtCommitsReleases, TestSimCaughtUpNotHeld). A
// consumer held at its setpoint shows a record that waited about the
// setpoint (more than E) at each commit. When half an observation interval
// is the engage wait or more (at 1 s, E is 0.4 s), the dating cannot tell
// a queue of E from none: false (at 1 s, TestUnlistedFloodDoesNotStarveListed
// of internal/engine saw a slowdown one interval late).
func caughtAtCommits(st *lag.State, v *reading) bool {
	if !fromCommits(st) || !v.learned || v.cadence <= 0 || v.dt/2 >= v.engageWait {
		return false
	}
	found := false
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag <= 0 || slices.Contains(v.avoid, ps.Partition) {
			continue
		}
		if !ps.HeadKnown || ps.LastCommit.IsZero() || ps.Stale || !(ps.Source == "" || ps.Source == lag.SourceCommits) {
			return false
		}
		head, since := ps.HeadAge.Seconds(), st.At.Sub(ps.LastCommit).Seconds()
		if head-since+v.dt/2 > v.engageWait || head > partCadence(ps, v)+v.dt+v.engageWait/2 {
			return false
		}
		found = true
	}
	return found
}

// behindWait is the standing wait of a consumer whose commits run most of
// an observation behind (tc.floor, when it is over twice the engage wait:
// a 1 s auto-commit read every second shows 0.9-1.0 s), else 0, seconds: a
// head that old shows no queue. A smaller standing wait is within what
// the engage wait allows already, and taking it in would see a capacity
// drop one engage wait later (TestSimCommitCadence: a 250 ms auto-commit
// read every 250 ms let in 300 messages after the drop, bound 200).
func behindWait(tc *control, v *reading) float64 {
	if tc.floor > 2*v.engageWait {
		return tc.floor
	}
	return 0
}

// trialUnderCut tells the standing wait of a commit cadence from a
// queue for a limited target that has not learned its standing wait
// (tc.floor) because it was limited before it could: after floorLearn
// readings in a row that may show either (standingUnderCut), the next
// such reading lets a probe through (v.trial: capacity to spare), and
// the reading after it tells. A consumer at its limit queues the probe's
// surplus: its head at the commit grows (by about half an interval at
// the x1.5 step). A consumer that commits once per observation and has
// capacity to spare consumes it: its head stays where it was (within E/4)
// with no more lag than was produced since it (and E/2), and that head is
// learned as its standing wait, as healthy readings learn it while the
// target is unlimited. Without it, such a target read its uncommitted
// second of work as a queue at every reading, the consumption it showed
// (all it was allowed) as its capacity, and the law cut the rate below
// it each time, the consumer idle: 2,000 msg/s held at 27-51 msg/s for a
// whole lagbridge bench run (kafka/autocommit-1s/sync/1s at 2x, kfake,
// after a drain at its first fresh reading), and from 1,500 to 104 msg/s
// over 40 s in the simulator (TestSimFalseDrainNotLocked). The readings
// alone cannot tell: at a 1 s interval a consumer at its limit read
// through commits every 100 ms, its estimate high after a drop, or on a
// slow ramp down, reads the same (TestSimRestoreProbesFromConsumed,
// TestSimSlowRamp learned a second of standing wait and let the head
// reach 3.1 s).
func (c *Controller) trialUnderCut(tc *control, v *reading) {
	if !v.measured {
		return
	}
	if tc.trialHead > 0 && tc.limited && v.headKnown && v.headAge > v.engageWait && v.headAge <= tc.trialHead+v.engageWait/4 &&
		v.lag <= (v.headAge+v.engageWait/2)*v.produced {
		raiseFloor(tc, v, v.headAge)
	}
	tc.trialHead = 0
	switch {
	case !c.standingUnderCut(tc, v):
		tc.underCut = 0
	case tc.underCut+1 >= floorLearn:
		v.trial, tc.trialHead, tc.underCut = true, v.headAge, 0
	default:
		tc.underCut++
	}
	relearnStanding(tc, v, c.probeStep(v))
	v.headRose = v.headKnown && tc.prevHead >= 0 && v.headAge > tc.prevHead+v.engageWait/4
	tc.prevHead = -1
	if v.headKnown {
		tc.prevHead = v.headAge
	}
}

// standingUnderCut reports whether v may show a limited target's wait
// to be the standing wait of its commit cadence (see trialUnderCut): the
// target has not learned its standing wait, the last measured reading
// found it saturated and the law has the rate in force below the
// capacity estimate (by more than twice the keep-up tolerance), the
// producers used it, and the consumer, read through the commits it makes
// about once per observation, consumed what was produced over this
// interval or the one before (within 1-keepUpRatio: its commits may run
// one observation behind), while the head at its commit, over the engage
// wait, stayed where it was (within E/4) and no older than its cadence
// allows (floorCap and E/2). A queue at a consumer at its limit mostly
// drains under such a cut: the consumer consumes at its capacity, more
// than was admitted, and the head falls.
func (c *Controller) standingUnderCut(tc *control, v *reading) bool {
	if tc.floorSeen >= floorLearn || !tc.limited || !tc.saturated || tc.rate >= (1-2*(1-keepUpRatio))*v.prevCap {
		return false
	}
	return cadenceHeld(tc, v) && consumedProduced(v) && v.headAge > v.engageWait
}

// cadenceHeld reports whether v reads a consumer that commits about once
// per observation, through those commits, while the producers use the
// rate in force (v.binding), with its head at the commit held where it was
// (within E/4) and no older than its cadence allows (floorCap and E/2):
// what both a standing wait of its commit cadence and a queue the law
// holds at its setpoint show (see standingUnderCut, staleStanding).
func cadenceHeld(tc *control, v *reading) bool {
	return v.measured && v.commits && v.learned && v.headKnown && tc.prevHead >= 0 && v.binding &&
		onceObs(v) &&
		v.headAge <= floorCap(v)+v.engageWait/2 && math.Abs(v.headAge-tc.prevHead) <= v.engageWait/4
}

// consumedProduced reports whether the consumer consumed what was
// produced over this interval or the one before (within 1-keepUpRatio:
// its commits may run one observation behind).
func consumedProduced(v *reading) bool {
	near := func(a, b float64) bool { return b > 0 && math.Abs(a-b) <= (1-keepUpRatio)*b }
	return near(v.consumed, v.produced) || near(v.consumed, v.prevProduced)
}

// relearnStanding is trialUnderCut for a standing wait learned while
// healthy (tc.floor) that the commits no longer fit. A consumer that
// commits about once per observation on a timer that drifts (Java's and
// franz-go's auto-commit) shows anything from none to a whole commit of
// uncommitted work, as its timer's phase against the observations moves,
// and the standing wait is learned only while the target is unlimited.
// Limited across a capacity drop and its restore, the phase moved (0.4 s
// learned, 0.8-0.9 s shown): the law read the difference as its
// setpoint's queue and held the rate at what the idle consumer was
// allowed for the rest of the run (the simulator, 1 s auto-commit read
// every second at 2x: 13 of 40 runs refused 1.1-13 s while the consumer
// idled; lagbridge bench on a loaded machine: 108-463 msg/s held for an
// 800 msg/s offer). No reading tells that standing wait from a queue the
// law holds at its setpoint, so after floorLearn readings in a row that
// may show either (staleStanding) one probe is let through (v.trial,
// RuleRelearn) and the next measured readings tell: a consumer with
// capacity to spare consumed what the probe admitted (in that reading,
// or over it and the next: its commits may run one observation behind)
// while its head at the commit grew no more than E/4, and the head the
// trial was let through at (or the telling one, if older) is learned as
// its standing wait; a consumer at its limit queued
// the surplus (its head grows, or it consumed less than was produced),
// and the law drains it. Only a trial that went through (the decision's
// rule is RuleRelearn) is told: a reading in which another rule decided
// (the consumer seen not to keep up) admitted nothing more, and learning
// from it relearned the standing wait with no probe and no decision to
// show it (Step cancels it; the next qualifying reading tries).
//
// The head learned is the trial's, the one held for floorLearn readings:
// the telling reading's is as often the head of a commit the drifting
// timer moved just before the observation (0.02-0.04 s), and learning
// only that left the standing wait where it was, so the law read the
// next 0.8-0.9 s head as its setpoint's queue again, with the one trial
// of the episode spent (TestSimOneSecondGrid at 5x, seed 7 with the
// first commit at 0.8 s: refused 13 s while the consumer idled after
// the restore, `saturated` at 150-1,229 msg/s of a 2,000 offer). What
// that risks, a consumer at its limit whose trial the cut after it
// hid, is held by risenHead.
func relearnStanding(tc *control, v *reading, step float64) {
	if !tc.limited {
		tc.staleSpent = false
	}
	if tc.staleHead > 0 && v.at.After(tc.staleBy) {
		// Not told in time (no commit came, or none measured): what a
		// later reading shows is no longer the probe's doing.
		tc.staleHead, tc.staleSeen, tc.staleTell = 0, 0, 0
	}
	if tc.staleHead > 0 {
		tc.staleTell++
		held := tc.limited && v.headKnown && v.headAge <= tc.staleHead+v.engageWait/4 && v.lag <= (v.headAge+v.engageWait/2)*v.produced
		switch {
		case held && (v.consumed >= keepUpRatio*v.produced || tc.staleTell >= 2 && v.keptTwo):
			raiseFloor(tc, v, max(v.headAge, tc.staleHead))
		case held && tc.staleTell < 2:
			return
		default:
			tc.staleSpent = tc.staleSpent || !phaseShown(tc, v) || unlearnedFloor(tc)
		}
		tc.staleHead, tc.staleSeen, tc.staleTell = 0, 0, 0
		return
	}
	switch {
	case v.trial || !staleStanding(tc, v, step):
		tc.staleSeen = 0
	case tc.staleSeen+1 >= floorLearn:
		v.trial, v.relearn, tc.staleHead, tc.staleSeen, tc.staleBy = true, true, v.headAge, 0, staleDue(tc, v)
	default:
		tc.staleSeen++
	}
}

// staleDue returns when the verdict of a relearn trial let through at
// reading v is due: the two readings after it (relearnStanding tells at
// the first or the second), with a commit that may come half a cadence
// late (lag/'s overdue bound) between, from the interval and cadence of
// the trial's reading. A trial without a verdict by then (readings that
// measured nothing, a consumer that stopped committing, observations that
// failed for a while) told nothing, and a head read later is not the
// probe's: before, the pending trial was told by whichever measured
// reading came next, however late. The due time is fixed at the trial: a
// bound from the reading that tells grew with the gap it came after.
func staleDue(tc *control, v *reading) time.Time {
	due := 2*max(tc.interval, v.dt) + 1.5*max(v.cadence, v.dt)
	return v.at.Add(time.Duration(due * float64(time.Second)))
}

// staleStanding reports whether v may show a limited target's wait to be
// a standing wait of its commit cadence that the one learned (tc.floor)
// no longer fits (see relearnStanding): the producers use the rate in
// force, and the consumer, read through the commits it makes about once
// per observation, consumed what was produced (over this interval or the
// one before, within 1-keepUpRatio, or over two moves), while its head at
// the commit, past the learned standing wait by more than E/2 and no
// older than its cadence allows (floorCap and E/2), stayed where it was
// (within E/4). Only for a consumer whose commit timer's phase is seen
// to matter: the standing wait learned is over E/2 (more than messages
// in flight and commits several times per observation leave), or within
// floorMemory it was seen not to commit in an observation (v.phaseMoved).
// Consumers that commit as they consume, held at their setpoint, read
// the same, and a trial every few readings broke their steady overload
// (TestSimSlowRamp). A target with no standing wait learned
// (unlearnedFloor) is tried only as unlearnedStale allows, once until it
// is unlimited again.
func staleStanding(tc *control, v *reading, step float64) bool {
	if !tc.limited || !phaseShown(tc, v) && tc.staleSpent || unlearnedFloor(tc) && !unlearnedStale(tc, v, step) {
		return false
	}
	return cadenceHeld(tc, v) && (consumedProduced(v) || v.keptTwo) && v.headAge > tc.floor+v.engageWait/2
}

// unlearnedFloor reports whether tc has no standing wait: not learned
// while healthy (floorLearn readings) nor by a trial. What fewer healthy
// readings showed is a lower bound on it, not a learned one: a consumer
// limited after one or two healthy readings and held at its capacity is
// still tried only as unlearnedStale allows (TestUnlearnedFloorPartial).
func unlearnedFloor(tc *control) bool { return tc.floorSeen < floorLearn && !tc.floorTold }

// unlearnedStale reports whether a limited target that has no standing
// wait (unlearnedFloor) may have its wait tried as one (see
// staleStanding): no trial failed since it was last unlimited, and the
// consumer once consumed more than the probe would admit (the capacity
// estimate before this reading, one probe step up). A consumer that
// commits about once per observation shows half a commit of uncommitted
// work on average, about the law's setpoint at a 1 s interval, so a
// target limited before its standing wait was learned read that as the
// queue the law holds, and the consumption it was allowed as its
// capacity, however fast the consumer: a first fresh reading inside a
// machine stall drained the target and learned 103-181 msg/s, held at
// 150-250 msg/s for the rest of the run with a consumer of 2,000 that
// had consumed 864 msg/s in that stall (lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on Kafka 4.3.1, load 14;
// TestControllerStallStartRelearns). A consumer held at its setpoint at
// its capacity from the start shows the same readings but no higher
// rate: no trial (TestSimHardAgeStop). One that had shown more and lost
// it (a capacity drop) queues the trial's surplus, and gets no other
// until it is unlimited again.
func unlearnedStale(tc *control, v *reading, step float64) bool {
	return !tc.staleSpent && v.prevCap > 0 && tc.shown >= (1+step)*v.prevCap
}

// phaseShown reports whether a consumer's commit phase is seen to matter
// (see staleStanding): its learned standing wait is over E/2, or within
// floorMemory it was seen not to commit in an observation.
func phaseShown(tc *control, v *reading) bool { return v.phaseMoved || tc.floor > v.engageWait/2 }

// unlearnedWait is the standing wait, seconds, assumed for an unlimited
// target read through commits in its first readings, before its own is
// learned (floorLearn healthy readings; the cadence, from which it is
// learned, takes two commits): up to one observation interval (at least
// the engage wait), less what is learned already. A consumer that commits
// about once per observation shows a whole commit of uncommitted work when
// its commit timer falls just after the observations (franz-go's 1 s
// auto-commit read every second: lag/ reads a 1 s wait, lagbridge bench),
// and limiting it for that locks the rate before the standing wait is
// known. Only while the consumer keeps up (consumed at least keepUpRatio
// of what was produced): a queue that builds from the start is no
// standing wait. A reading that measured nothing (no commit since the
// last move) of a consumer that commits about once per observation tells
// neither: one commit fell just after the observation, and the next
// reading measures two. Before, such a reading got no allowance, its
// second of uncommitted work read as a queue at the capacity measured the
// reading before, and the target was limited at its second fresh reading
// ("saturated: capacity 686/s, wait 1.11s", 800 msg/s offered to a
// consumer of 2,000), never learned its standing wait, and cycled through
// saturated, step-down and a probe from 0 until the drop (lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on Kafka 4.3.1: 9 false-throttle
// seconds before the drop; TestControllerStartupUnmeasuredNotAQueue). A
// consumer slow from the start shows it at the next reading, which
// measures. A consumer that commits less often (5 s) misses most readings'
// commits, so for it a reading that measured nothing gets no allowance.
func unlearnedWait(tc *control, v *reading) float64 {
	if !startupAtCommits(tc) {
		return 0
	}
	if !v.noQueue && ((v.measured || !onceObs(v)) && !(v.keepsUp || v.keptTwo) || !fromCommitsCadence(v)) {
		return 0
	}
	return max(max(v.engageWait, v.dt)-tc.floor, 0)
}

// startupAtCommits reports whether tc is in its first readings, its
// standing wait not learned yet (see unlearnedWait).
func startupAtCommits(tc *control) bool {
	return tc.floorSeen < floorLearn && tc.learnedSeen <= floorLearn && tc.measuredSeen <= 2*floorLearn
}

// floorCap is the most standing wait the controller learns, seconds: the
// engage wait, or, for a consumer that commits about once per observation
// (whose commits are read as they are), up to one commit interval (at
// most half the budget): half a commit of uncommitted work on average,
// and a whole one when the commit timer and the observations fall in
// phase, which no quota can remove.
func floorCap(v *reading) float64 {
	if v.cadence > 0 && v.cadence <= 1.5*v.dt {
		return max(v.engageWait, min(v.cadence, v.budget/2))
	}
	return v.engageWait
}

// fromCommitsCadence reports whether v reads a position from the commits of
// a consumer with a commit cadence (known or assumed).
func fromCommitsCadence(v *reading) bool { return v.commits || v.unlearned }

// waitOf is the wait of v.backlog at v.capacity, seconds: 0 with no
// backlog (or nothing measured yet to judge it by), +Inf with a backlog
// and nothing consumed.
func waitOf(v *reading) float64 {
	switch {
	case v.backlog <= 0 || (!v.measured && v.capacity <= 0):
		return 0
	case v.capacity > 0:
		return v.backlog / v.capacity
	}
	return math.Inf(1)
}

// judge decides whether the consumer keeps up, has capacity to spare, and
// is saturated (v.keepsUp, v.spare, v.engaged), and updates the ceiling:
// the capacity the consumer showed when it was last saturated, raised by
// any higher rate it consumed since.
func (c *Controller) judge(tc *control, v *reading) {
	// As measured: consumed against produced, over this move or, for
	// commits read as often as observations, this move and the one
	// before (one of them may hold no commit).
	kept := v.keepsUp || v.keptTwo
	v.keepsUp = v.keepsUp || (v.measured && (v.backlog <= 0 || c.keepsUpAtCommits(tc, v)))
	// Limited, and caught up at every commit: the standing wait of its
	// cadence is no queue, whether or not the producers use the rate.
	v.spare = v.keepsUp && (v.caught && tc.limited || v.trial || v.binding && v.consumed < (1-c.cfg.StepThreshold)*tc.ceiling && v.backlog <= v.engageWait*tc.ceiling)
	// Whether work is queued: the wait, less the standing wait the
	// target shows while healthy (tc.floor: what consumed-but-uncommitted
	// work and messages in flight look like), which no quota can remove.
	// With positions from commits the wait rests on a consume rate
	// measured between commits known only to an interval, which is off
	// by up to a commit when the span covers more than one observation;
	// then, or while the consumer keeps up by that measure, the age of
	// the message at the committed position (the wait it had) must
	// agree: the smaller counts. (A consumer seen not to keep up over
	// one interval is believed: the head age lags the wait by the time
	// the queue took to form.)
	queued, raw := v.wait, v.rawWait
	v.standing = tc.floor
	if v.commits && v.headKnown && (v.keepsUp || v.keptTwo || v.span > 1.5*v.dt) {
		queued, raw = min(queued, v.headAge-tc.floor), min(raw, v.headAge)
	}
	if v.noQueue {
		// Its capacity not lowered by the reading, the wait understates
		// the standing wait the head at the commit shows.
		raw = v.headAge
	}
	v.queued = max(queued, 0)
	v.engaged = v.wait > v.engageWait && !v.spare
	if v.shadow && shadowExplains(v) && (v.engaged || v.measured && !v.keepsUp) {
		// A stall the observer shared: not believed yet (observerStall).
		v.held, v.engaged = true, false
	}
	// Caught up at its last commit, estimated since: the backlog the
	// estimate shows is what the producers sent beyond the rate it
	// consumed before, which was what it was offered, not its capacity.
	// Not evidence of saturation until a commit says so (a probe it
	// allows is capped, see caughtUpAtCommit).
	v.blind = v.blind && (v.engaged || !v.keepsUp || v.queued > v.engageWait/2)
	if v.blind {
		v.keepsUp, v.queued, v.engaged = true, 0, false
	}
	if !tc.limited {
		tc.satCap, tc.restored = 0, false
		v.allowance = unlearnedWait(tc, v)
		v.engaged = v.engaged && v.queued-v.allowance > v.engageWait
		if !v.engaged {
			tc.fellFrom, tc.fellSpent, tc.climbTo, tc.lateWork = 0, false, 0, 0
		}
		if fromCommitsCadence(v) && v.measured && v.headKnown && kept && !v.engaged && !v.held {
			tc.headKept = max(v.headAge, tc.headKept*math.Exp(-v.dt/floorMemory))
			tc.keptRate = max(v.produced, tc.keptRate*math.Exp(-v.dt/floorMemory))
		}
		if v.commits && v.learned && v.measured && kept && !v.engaged && !v.held {
			// Healthy: learn the standing wait (its recent peak, up to
			// floorCap, forgotten over floorMemory), once the cadence it
			// comes from is known, from readings that show the consumer
			// keeping up (a queue that builds is no standing wait).
			learnFloor(tc, v, min(raw, floorCap(v)))
		}
	}
	switch {
	case !v.measured || v.held:
	case v.engaged:
		// v.capacity: a stall reading's own, 0 (see estimateCapacity).
		// Kept at the estimate from before the stall, the ceiling made
		// a hung consumer with a small backlog "spare" (consumed 0 of
		// a ceiling it no longer has) and released it
		// (TestControllerStallHungNotSpare).
		tc.ceiling, tc.saturated = v.capacity, true
	default:
		tc.ceiling, tc.saturated = max(tc.ceiling, v.consumed), false
	}
}

// learnFloor learns the standing wait w, seconds, from a healthy reading:
// tc.floor is its recent peak, forgotten over floorMemory. A standing wait
// learned from the first floorLearn readings (tc.floorEarly) may be the
// startup's, not the cadence's: a first commit that spans the startup, or
// a commit timer in phase with the observations then that has drifted
// since. Once floorLearn healthy readings after them all show one smaller
// by more than E/2, the peak is what they showed (and the oldest head kept,
// tc.headKept, at most that); one that shows it again makes it the
// cadence's. Held for floorMemory, a 1 s auto-commit read
// every second that showed 0.82-0.95 s in its first readings and 0.002 s
// in every one after hid a capacity drop for two readings: its head at the
// commit, 0.52 s, was within the standing wait, the queue beyond it 0.25 s
// at the next (lagbridge bench kafka/autocommit-1s/sync/1s at 2x on kfake,
// excess after the drop 1.49x its bound; TestControllerEarlyFloorForgotten).
func learnFloor(tc *control, v *reading, w float64) {
	held := tc.floor * math.Exp(-v.dt/floorMemory)
	tc.floor = max(w, held)
	switch {
	case tc.floorSeen < floorLearn:
		tc.floorEarly = tc.floorEarly || w > 0 && w >= held
	case !tc.floorEarly:
	case w+v.engageWait/2 >= held:
		tc.floorEarly = false
	default:
		tc.floorLess++
		tc.floorLow = max(tc.floorLow, w)
		if tc.floorLess >= floorLearn {
			tc.floor, tc.headKept, tc.floorEarly = tc.floorLow, min(tc.headKept, tc.floorLow), false
		}
	}
	if !tc.floorEarly {
		tc.floorLess, tc.floorLow = 0, 0
	}
	tc.floorSeen++
}

// raiseFloor learns head, a head at the commit, as the standing wait (up
// to floorCap) when a trial told it is one (see trialUnderCut,
// relearnStanding): the cadence's, not the startup's.
func raiseFloor(tc *control, v *reading, head float64) {
	tc.floor, tc.floorEarly, tc.floorTold = max(tc.floor, min(head, floorCap(v))), false, true
}

// consumption sets v.consumed, v.span, v.measured and v.keepsUp, aware of
// the consumer's commit cadence (State.CommitInterval).
//
// A consumer that commits less often than it is observed moves its
// committed position in jumps: an interval without a commit reads as
// nothing consumed, the one with the commit as several intervals' worth.
// Neither is its rate. So while the cadence is known, there is lag and the
// position has not moved, the interval measures nothing (the capacity is
// unknown, not 0) until the commit is overdue (see overdue: then nothing
// consumed is taken at its word); and a move is spread over the time
// since the previous one (for a group first seen without a commit, its
// first commit over the time since first sight, see firstCommit). With the cadence unknown, or positions that move every
// interval (an estimate), this is the interval's consume rate. A
// consumer's reports move once per poll: see reportStill.
func (c *Controller) consumption(tc *control, st *lag.State, v *reading) {
	cadence := v.cadence
	if st.Source == lag.SourceFirstSight && tc.sightAt.IsZero() {
		tc.sightAt = lastMove(st)
	}
	if st.Corrected && tc.sightAt.IsZero() {
		// A commit corrected the estimate: this interval's consume
		// rate counts nothing; measure from here, unless the commit
		// found the consumer behind, when the commits measure it
		// (correctedSpan). (A first commit
		// behind the position a group without one was first seen at
		// is no fresh start: the span runs on from first sight.)
		tc.moveAt, tc.spanProduced = st.At, 0
		c.correctedSpan(tc, st, v)
		return
	}
	if st.Source == lag.SourceConsumer && st.ConsumeRateInstant <= 0 && st.Lag > 0 {
		reportStill(tc, st, v)
		return
	}
	moved := st.ConsumeRateInstant > 0 || st.Lag <= 0 || cadence <= 0
	if !moved && (!tc.has || tc.moveAt.IsZero()) {
		// The first sighting: the span starts when the position last
		// moved as far as the state says (see lastMove), else now. One
		// that is overdue already measures at once: a group that has
		// not committed since long before this controller started
		// (a restart, a takeover) consumes nothing, whatever rate it
		// has yet to show.
		tc.moveAt, tc.spanProduced, tc.quick, tc.still = lastMove(st), 0, 0, true
		if !overdue(tc, st, v, st.At.Sub(tc.moveAt).Seconds()) {
			return
		}
	}
	span := v.dt
	if !tc.moveAt.IsZero() {
		span = max(st.At.Sub(tc.moveAt).Seconds(), v.dt)
	}
	switch {
	case !moved || span > 1.5*v.dt:
		tc.quick = 0
	case st.ConsumeRateInstant > 0 && fromCommits(st):
		tc.quick++
	}
	tc.still = (tc.still || !moved) && tc.quick < 2 && st.CommitInterval <= 0
	produced := tc.spanProduced + v.produced*v.dt // messages since the last move
	switch {
	case moved && firstCommit(tc, st) && !behindAtCommit(st, v):
		// No evidence yet: measure from this commit on (its lag is the
		// backlog, see backlog).
		tc.moveAt, tc.spanProduced, tc.moveLag, tc.sightAt = st.At, 0, st.Lag, time.Time{}
		v.sightCommit = true
		return
	case moved:
		v.consumed, v.span = st.ConsumeRateInstant*v.dt/span, span
		leaveOutSkipped(st, v)
		tc.moveAt, tc.spanProduced, tc.moveLag = st.At, 0, st.Lag
		if firstCommit(tc, st) {
			v.lower, tc.sightAt = true, time.Time{}
		}
		span, produced = twoMoves(tc, st, v, span, produced)
	case overdue(tc, st, v, span):
		// Overdue: the consumer consumed nothing that it committed.
		v.consumed, v.span, tc.spanProduced = 0, span, produced
	default:
		tc.spanProduced = produced
		return
	}
	v.measured = true
	v.spanProduced = produced
	v.keepsUp = v.consumed*span >= keepUpRatio*produced
}

// twoMoves reads a move of a position read from commits about as often as
// it is observed (a learned cadence), and returns the span and the
// messages produced that v's consumption is measured over.
//
// One interval holds a commit's worth more or less than was consumed in
// it (a 250 ms cadence read every 250 ms reads half its rate, then one and
// a half). A low reading while the head shows no queue (its age at most
// the engage wait) is that, not a slower consumer: it is measured over
// this move and the one before, which span at least two commits. A low
// reading with a queue is believed (a capacity drop must be seen at
// once).
func twoMoves(tc *control, st *lag.State, v *reading, span, produced float64) (float64, float64) {
	if st.CommitInterval <= 0 || !fromCommits(st) {
		tc.prevMove = moveWindow{}
		return span, produced
	}
	own := moveWindow{msgs: v.consumed * span, produced: produced, span: span}
	if w := tc.prevMove; w.span > 0 {
		v.prevProduced = w.produced / w.span
		v.keptTwo = own.msgs+w.msgs >= keepUpRatio*(own.produced+w.produced)
	}
	if w := tc.prevMove; w.span > 0 && othersHead(st, tc.last.AvoidPartitions)-behindWait(tc, v) <= v.engageWait {
		if avg := (own.msgs + w.msgs) / (span + w.span); avg > v.consumed {
			span += w.span
			v.consumed, v.span = avg, span
			produced += w.produced
		}
	}
	tc.prevMove = own
	return span, produced
}

// firstCommit reports whether st shows the first commit of a group first
// seen without one (tc.sightAt), its position past the first-sight one.
//
// What the commit moved past that position over the time since first
// sight is a lower bound of the consumer's rate (it commits what an
// earlier poll returned, and the span may hold a faster spell), not its
// capacity: a consumer that keeps up reads as consuming less than was
// produced. It is taken as a reading (v.lower) only when the consumer was
// behind by half the budget at that commit (behindAtCommit); otherwise the commit
// measures nothing, and the consumption is measured from it on.
func firstCommit(tc *control, st *lag.State) bool {
	return !tc.sightAt.IsZero() && st.Source != lag.SourceFirstSight
}

// behindAtCommit reports whether the record at st's newest commit had
// waited longer than half the budget when the commit was made (the head
// age, less the time since the commit as lag/ dates it, half an
// observation before the reading that saw it): a consumer a poll behind a
// caught-up position shows far less. In lagbridge bench at 2x and a 1 s
// interval, the first commit read 0.4-0.5 s so for a consumer that kept
// up (the plain 5 s row), 1.0-1.5 s when its capacity had dropped 1.5 s
// before it (--short), 1.6-3.3 s when 4 s before (+no-commit-yet).
func behindAtCommit(st *lag.State, v *reading) bool {
	if !st.HeadAgeKnown || st.Lag <= 0 {
		return false
	}
	return (st.HeadAge - st.At.Sub(lastMove(st))).Seconds() > v.budget/2
}

// overdue reports whether a position with lag that has not moved for span
// seconds (since it last moved, or since there was nothing to consume) is
// overdue: the consumer consumed nothing that it committed. A consumer
// that commits at a cadence is overdue 1.5 commit intervals plus one
// observation after its last move. One that has not moved since its group
// was first seen live without a commit (tc.sightAt; lag.SourceFirstSight,
// or a first commit behind that position) is overdue once its first
// commit is (firstCommitDue): the auto-commit timer of franz-go and of
// the Java client starts when the consumer joins, before it could be
// seen, so a consumer that consumed anything commits within
// firstCommitEvery of first sight. It must also have lag that old (the
// head age, when known): a record written a moment ago on a quiet topic
// may be consumed and wait for the next commit.
func overdue(tc *control, st *lag.State, v *reading, span float64) bool {
	if tc.sightAt.IsZero() {
		return span > 1.5*v.cadence+v.dt
	}
	if st.HeadAgeKnown {
		span = min(span, st.HeadAge.Seconds())
	}
	return span > firstCommitDue(v.dt)
}

// firstCommitDue is how long after a live group without a commit was first
// seen its first commit is overdue, seconds, at observation interval dt:
// firstCommitEvery, one observation to see it, and half a second or half
// an observation of margin (the commit's own latency, the time an
// observation takes).
func firstCommitDue(dt float64) float64 {
	return firstCommitEvery.Seconds() + dt + max(dt/2, 0.5)
}

// reportStill reads an interval in which a position from the consumer's
// reports (lag.SourceConsumer) did not move while there is lag. The hook
// reports the first record in hand until the next poll, so the position
// moves once per poll: a position that stands still is a poll still being
// worked through (the consumer is busy, not stopped; the head age, from
// the record in hand, is exact all the same), and its next move, the
// whole poll, is spread over the time since the previous one (see
// consumption). Nothing consumed is no reading of its capacity (read as
// one, it set the capacity to 0 and the next interval several times the
// true one); but it bounds it. The poll in hand was taken at or before
// the observation its position was first seen at (tc.moveAt), and held at
// most the lag seen then (tc.moveLag); the consumer has been busy on it
// since, so it consumed less than that lag in that time. Once that bound
// is below the capacity estimate, it is the reading: a consumer that
// slows down or hangs inside a poll reads ever slower, never below what
// it does. With no estimate yet, the bound is no better than a guess
// until the poll has taken longer than the budget (its first record is
// late by then): from then on it is the reading. (The hook's
// KeepUntilFinished mode reports a count of the records finished, in any
// order, which moves with each: standing still, it finished none.) A
// report with nothing in hand is a consumer waiting for records (the lag came
// after the report): not busy, nothing measured; the time busy starts
// again at the next report with work in hand (as after a move to no lag:
// the poll came after it).
//
// A consumer that says how many records it holds and for how long it has
// finished none of them (lag.Report.Held, HeldFor: the hook, from its
// polls) bounds it exactly and at once, without waiting an interval: it
// consumed fewer than it holds in that time (see heldBound).
func reportStill(tc *control, st *lag.State, v *reading) {
	tc.spanProduced += v.produced * v.dt
	repAt := st.At.Add(-st.Uncertainty)
	if idleReported(st) {
		tc.moveAt, tc.spanProduced = time.Time{}, 0
		return
	}
	first := !tc.has || tc.moveAt.IsZero() || tc.moveLag <= 0
	if first {
		// Busy since its poll, at or before this report.
		tc.moveAt, tc.spanProduced, tc.moveLag = st.At, 0, st.Lag
	}
	if bound, busy, ok := heldBound(st); ok {
		stillBound(tc, v, bound, busy, v.produced*busy)
		return
	}
	if first {
		return
	}
	busy := repAt.Sub(tc.moveAt).Seconds()
	if busy <= v.dt {
		return
	}
	stillBound(tc, v, float64(tc.moveLag)/busy, busy, tc.spanProduced)
}

// stillBound takes bound, an upper bound of what a consumer whose position
// stood still consumed over the busy seconds it has been working on what
// it holds (produced: the messages written meanwhile), as the interval's
// reading once it is below the capacity estimate; with no estimate, once
// the consumer has been busy longer than the budget.
func stillBound(tc *control, v *reading, bound, busy, produced float64) {
	if (tc.capacity > 0 && bound >= tc.capacity) || (tc.capacity <= 0 && busy <= v.budget) {
		return
	}
	v.consumed, v.span, v.measured = bound, busy, true
	v.spanProduced = produced
	v.keepsUp = v.consumed*busy >= keepUpRatio*v.spanProduced
}

// heldBound is the most the consumer of st can consume, messages per
// second, by what its reports say it holds: a consumer that holds Held
// records and has finished none of them for HeldFor (since its poll or
// its last finished record) consumes fewer than Held in HeldFor. The
// records of one report share one HeldFor (one poll): their counts add
// up; reports of members with their own polls add up as bounds. busy is
// the longest HeldFor, seconds. ok only when every partition with lag is
// read from a fresh report with work in hand and a count (an older
// reporter, a NATS consumer of several members, an idle member: no
// bound), and each report held its records for some time.
func heldBound(st *lag.State) (bound, busy float64, ok bool) {
	type poll struct {
		since time.Time
		held  int64
		busy  time.Duration
	}
	var polls []poll
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag <= 0 {
			continue
		}
		r := ps.Reported
		if ps.Source != lag.SourceConsumer || r.HeadTime.IsZero() || r.Held <= 0 || r.HeldFor <= 0 {
			return 0, 0, false
		}
		since := r.At.Add(-r.HeldFor)
		if j := slices.IndexFunc(polls, func(p poll) bool { return p.since.Equal(since) }); j >= 0 {
			polls[j].held += r.Held
			continue
		}
		polls = append(polls, poll{since, r.Held, r.HeldFor})
	}
	for _, p := range polls {
		bound += float64(p.held) / p.busy.Seconds()
		busy = max(busy, p.busy.Seconds())
	}
	return bound, busy, len(polls) > 0
}

// lastMove is when st's position last moved, as far as st says: the
// newest commit lag/ saw move (PartitionState.LastCommit) of a position
// read from commits, or when a position without a commit was first seen
// (it never moves; State.Uncertainty is the time since); st.At when
// neither is known.
func lastMove(st *lag.State) time.Time {
	if st.Source == lag.SourceFirstSight {
		return st.At.Add(-st.Uncertainty)
	}
	var newest time.Time
	for i := range st.Partitions {
		if lc := st.Partitions[i].LastCommit; lc.After(newest) {
			newest = lc
		}
	}
	if newest.IsZero() || newest.After(st.At) {
		return st.At
	}
	return newest
}

// leaveOutLate takes the partitions producers avoid (v.avoid) out of the
// target's figures: their lag out of the lag (a new message waits on the
// other partitions), what was written to them out of the produce rate, and
// what their consumer drained out of the consume rate, so that the
// capacity, "keeps up" and the rate the law sets are those of the other
// partitions. Keyless producers write around an avoided partition, and the
// SDK refuses keyed records bound for it; whatever still reaches it (plain
// producers) must not make the topic look unable to keep up, or slow-down
// would refuse producers on every partition for one.
//
// An avoided partition's consumption is what its position moved in the
// interval, counted as the target's consumption is (see consumption: the
// messages consumed in the interval over the span measured), so that the
// difference is what the other partitions consumed. Less what its
// consumer skipped where that is counted (PartitionState.Skipped): those
// are out of v.consumed already (leaveOutSkipped), and the skips of a
// late partition, whose head is past the deadline, are most of its move.
// Taken out twice, the other partitions read as consuming their own work
// less the late one's skips: a Kafka consumer behind the ttl guard read
// 36 msg/s for 123, was drained, and once caught up the probe climbed
// from it x1.5 a second, 0, 45, 67, 101 ... msg/s (a lagbridge demo run
// whose grant locked for 10 s, TestControllerLateSkipsOnce). Not the rate its
// consumer was seen to drain it at under a backlog: that is what it can
// do, not what it did, and a partition listed for a moment (a healthy one
// given a whole batch by a sticky partitioner, which it drains at 2,000
// msg/s) took that rate out of a topic that consumed a few hundred: the
// others read as consuming nothing, the topic as saturated at a few
// messages a second (lagbridge bench --hot-partition at 250 ms on real
// Kafka: "saturated: capacity 3/s", refusing every partition).
func leaveOutLate(tc *control, v *reading) {
	var in, out float64
	for _, id := range v.avoid {
		pt := tc.parts[id]
		v.lateLag += float64(pt.lag)
		in += pt.in
		out += pt.out
	}
	v.lag = max(v.lag-v.lateLag, 0)
	v.produced = max(v.produced-in, 0)
	if !v.measured || (in == 0 && out == 0) {
		return
	}
	if v.span > 0 {
		before := v.consumed
		v.consumed = max(v.consumed-out*v.dt/v.span, 0)
		v.lateOut = before - v.consumed
	}
	v.spanProduced = max(v.spanProduced-in*v.span, 0)
	v.keepsUp = v.consumed*v.span >= keepUpRatio*v.spanProduced
}

// lateShareBack returns the capacity estimate cInst of v, taken back to
// what the whole consumer did at a reading that lowered the estimate on
// the avoided partitions' share alone (tc.lateWork), at the first measured
// reading after it that shows the consumer caught up (no lag, or its head
// within E/2) and takes nothing out for avoided partitions. A measured
// reading with work queued between them (queuedReading) bounds it by what
// the whole consumer did: what it consumed, with the avoided partitions'
// drain when it took one out without lowering the estimate by a step
// (a hot partition listed until the consumer catches up: bounded only by
// readings with nothing taken out, a save across the demo's drop to 400
// msg/s came back as 1,305; TestControllerLateShareBackQueuedLateBounds). For
// positions the consumer reports (lag.SourceConsumer), which move as it
// works; a move read from commits holds several intervals' work, not the
// loop's time in one.
//
// Why: one consumer works every partition in one loop (the hook's poll,
// franz-go's default), so an interval it spent on a late partition's
// records is one the others waited in. leaveOutLate takes that drain out
// of the consumption (right for the law at that reading: the others' wait
// is at what they got), and the reading lowers the estimate to the
// others' share: 142 msg/s of the 395 the consumer did, with two late
// partitions taking 253 (lagbridge demo, the Kafka consumer behind the
// hook and the ttl guard, 5 s auto-commit; TestControllerLateShareBack;
// through the skip-burst hold, 62 msg/s of 402, TestControllerLateShareHeldBack).
// Once the late records were drained or skipped the others get it all
// again, but nothing shows it: a caught-up reading measures what the
// producers were allowed, never more than the estimate, and a queued one
// whose head was past MaxAge is held as a skip burst. The probe then
// climbed from the share, x1.5 a second from tens of msg/s (a lock).
// What the consumer did at that reading, less what it skipped, is work:
// a lower bound of its capacity, bounded by the estimate before it.
func lateShareBack(tc *control, st *lag.State, v *reading, cInst, step float64) float64 {
	switch {
	case st.Source != lag.SourceConsumer:
		tc.lateWork = 0
	case v.lateOut > 0:
		if cInst < (1-step)*tc.capacity {
			tc.lateWork = max(tc.lateWork, min(v.consumed+v.lateOut, tc.capacity))
		} else if tc.lateWork > 0 && queuedReading(v) {
			tc.lateWork = min(tc.lateWork, v.consumed+v.lateOut)
		}
	case tc.lateWork <= 0:
	case queuedReading(v):
		tc.lateWork = min(tc.lateWork, v.consumed)
	default:
		cInst, tc.lateWork = max(cInst, tc.lateWork), 0
	}
	return cInst
}

// leaveOutSkipped takes the messages the consumer terminated as expired
// in the interval (State.SkipRateInstant: the ttl guard's skips, which
// the NATS observer counts from the server's advisories) out of
// v.consumed, as leaveOutLate takes out a listed partition's: a skip
// costs the consumer nothing, so it measures no capacity, and the
// capacity estimate, the rise it may take (see estimateCapacity) and
// every rule that reads the consumption read the work done. A consumer
// behind the guard, drained at a drop to 1,690 messages with its head at
// 1.94 s of a 2 s deadline, skipped most of them in the next second:
// read as consumption, 1,688 msg/s estimated a consumer of 400 at 1,679
// msg/s, the probe admitted 2,519 msg/s, and the slow phase cycled
// drain, probe, saturated, drain (lagbridge demo's NATS consumer,
// TestControllerSkipsNotCapacity). Where nobody counts the skips (Kafka,
// a server that drops the term's reason), the skip-burst hold in
// estimateCapacity is the fallback.
//
// It runs where the consumption is read, before twoMoves saves the move
// for the next reading's average: taken out after, the burst came back
// one reading later as half of a two-move average (decision 11 of
// TestControllerSkipsNotCapacity probed from 1,244 msg/s, capacity 1,040,
// and drained at the next).
func leaveOutSkipped(st *lag.State, v *reading) {
	skip := min(st.SkipRateInstant, st.ConsumeRateInstant)
	if skip <= 0 || v.span <= 0 {
		return
	}
	v.consumed = max(v.consumed-skip*v.dt/v.span, 0)
}

// othersHead is the head age of st's partitions that are not in avoid,
// seconds: st.HeadAge with none. The head of a partition producers write
// around is its own lateness, not a wait of the topic's (see
// leaveOutLate): taken as the topic's, one late partition's head froze
// the capacity estimate (see estimateCapacity) and made every reading of
// commits as often as observations a queue (see consumption).
func othersHead(st *lag.State, avoid []int32) float64 {
	if len(avoid) == 0 {
		return st.HeadAge.Seconds()
	}
	var head time.Duration
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag > 0 && !slices.Contains(avoid, ps.Partition) {
			head = max(head, ps.HeadAge)
		}
	}
	return head.Seconds()
}

// idleReported reports whether every partition of st with lag has its
// position from a consumer's fresh report that had nothing in hand.
func idleReported(st *lag.State) bool {
	if st.Source != lag.SourceConsumer || st.Uncertainty <= 0 {
		return false
	}
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag > 0 && (ps.Source != lag.SourceConsumer || !ps.Reported.HeadTime.IsZero()) {
			return false
		}
	}
	return true
}

// idleAtReport reports whether st reads a consumer's reports that had
// nothing in hand on every partition with lag (idleReported), with a head
// no older than the report and E/2 (lag/ dates a record that came after
// an idle report at the report), and a lag no more than was produced over
// the report's age and E/2: every record it holds was written after it
// said it had nothing to do, so no queue can have formed, and its consume
// reading is what it was given, a lower bound of its capacity (with none
// yet, the rate produced is). A consumer whose capacity fell has work in
// hand when it reports. Read as its capacity, the first fresh reading of a
// new group reporting through the hook at 250 ms (its idle reports 0.2 s
// old: 159 msg/s consumed of 795 produced, lag 160, all written since the
// report) limited it: "saturated: capacity 159/s, wait 807ms", and later
// idle reports held it for 3-4 s (lagbridge bench, kafka/hook/sync/250ms
// on kfake; TestControllerIdleReportNotAQueue).
func idleAtReport(st *lag.State, v *reading) bool {
	return idleReported(st) && writtenSince(v, 0, v.since)
}

// writtenSince reports whether v holds only records written over the
// last t seconds, within E/2: its head (at the commit or report) no older
// than head and E/2, and its lag no more than was produced over t and E/2
// (see idleAtReport, idleAtSight).
func writtenSince(v *reading, head, t float64) bool {
	return v.headKnown && v.headAge <= head+v.engageWait/2 && v.lag <= (t+v.engageWait/2)*v.produced
}

// fromCommits reports whether st's position is the committed one.
func fromCommits(st *lag.State) bool { return st.Source == "" || st.Source == lag.SourceCommits }

// cadence is the commit cadence the controller reads a position with,
// seconds: the learned one (State.CommitInterval). While it is not learned
// yet (the Tracker needs two moves of the committed offsets), an unknown
// cadence is no evidence that the consumer stopped: a position from
// commits, or from first sight (lag.SourceFirstSight, no commit yet), is
// taken to move at the auto-commit interval of franz-go and the Java
// client (firstCommitEvery), unless it was seen to move in two
// observations in a row (tc.quick: it commits at least once per
// observation, and is read as it is). 0 for a position from the
// consumer's reports, whatever cadence lag/ learned from the group's
// commits: it moves once per poll, not per commit (see reportStill); and 0
// for an estimate before the cadence is learned (it moves whenever the
// consumer consumes).
func cadence(tc *control, st *lag.State) float64 {
	switch {
	case st.Source == lag.SourceConsumer:
		return 0
	case st.CommitInterval > 0:
		return st.CommitInterval.Seconds()
	case st.Source == lag.SourceFirstSight, fromCommits(st) && tc.quick < 2:
		return firstCommitEvery.Seconds()
	}
	return 0
}

// caughtUpAtCommit sets v.blind and tracks tc.caughtUp.
//
// Between the commits of a consumer that commits less often than it is
// observed, lag/ estimates its position from the rate measured from commit
// to commit. When the consumer was caught up at its last commit, that
// rate is what it was offered, not what it can do: producers that send
// more (a probe raising the rate) read as a backlog growing at the
// difference, and the consumer as saturated, until the next commit shows
// it idle. So at each commit the controller notes whether the consumer
// was caught up: on every partition with a new commit, the record at the
// committed position was at most E/2 old when committed (the commit dated
// as lag/ dates it, half an interval before the reading that saw it), the
// "near empty" of a probe. Until the next commit (or until that one is
// overdue), such a consumer's estimated backlog is not taken as
// saturation, and the probe it allows is capped at one probe step above
// the rate produced over the commit span that ended caught up (what the
// consumer is known to keep up with): if the commit misled, the next one
// shows it, and what was admitted meanwhile is at most one probe step
// over one commit interval.
func (c *Controller) caughtUpAtCommit(tc *control, st *lag.State, v *reading) {
	if st.Source != lag.SourceEstimate || st.CommitInterval.Seconds() <= 1.5*v.dt {
		tc.caughtUp, tc.lastCommit = false, time.Time{}
		return
	}
	var newest time.Time
	for i := range st.Partitions {
		if ps := &st.Partitions[i]; ps.LastCommit.After(newest) {
			newest = ps.LastCommit
		}
	}
	v.estimated = true
	if newest.After(tc.lastCommit) {
		c.atCommit(tc, st, v, newest)
	}
	tc.sinceCommit += v.produced * v.dt
	overdue := st.At.Sub(tc.lastCommit).Seconds() > 1.5*st.CommitInterval.Seconds()+v.dt
	v.blind = tc.caughtUp && !overdue && (tc.limited || v.produced <= tc.blindCap)
	v.capped = tc.overshot && !tc.sureCaught && !overdue && tc.capCap > 0
}

// atCommit reads a new commit (newest) of a consumer whose position is
// estimated between its commits: whether it was caught up at it (on
// every partition with a new commit, the record at the committed
// position was at most E/2 old, the commit dated half an interval before
// the reading), surely caught up (at most E/2 old at the reading, which
// the dating cannot explain away) or behind beyond the dating (more than
// E/2 old one interval before the reading, the earliest the commit can
// have been made), and sets the caps of the probes until the next one
// (see blindStep).
func (c *Controller) atCommit(tc *control, st *lag.State, v *reading, newest time.Time) {
	caught, behind, sure := true, false, true
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if !ps.LastCommit.After(tc.lastCommit) || ps.CommittedLag <= 0 {
			continue
		}
		atCommit := ps.CommittedHeadAge - st.At.Sub(ps.LastCommit)
		if !ps.HeadKnown || atCommit.Seconds() > v.engageWait/2 {
			caught = false
		}
		if ps.HeadKnown && ps.CommittedHeadAge.Seconds()-v.dt > v.engageWait/2 {
			behind = true
		}
		if !ps.HeadKnown || ps.CommittedHeadAge.Seconds() > v.engageWait/2 {
			sure = false
		}
	}
	// What it kept up with: the rate produced over the span that
	// ended at this commit.
	kept := 0.0
	if span := newest.Sub(tc.lastCommit).Seconds(); !tc.lastCommit.IsZero() && span > 0 {
		kept = tc.sinceCommit / span
	}
	// Caught up again after a span in which the producers used the
	// capped probe: the consumer took more than it had shown, and is
	// caught up all the same.
	again := (tc.caughtUp && caught || !tc.behindAt && !behind) && kept >= bindRatio*tc.capCap
	step := c.blindStep(v, st.CommitInterval.Seconds())
	dated, base, rate := datesSetpoint(tc, v), kept, spanRate(tc, st, newest)
	if dated {
		// Where a commit tells a consumer at its setpoint from one
		// caught up, the probe cap holds through a drain (a restore
		// shows at a commit: caught up, surely or again, or a span
		// consumed at more than twice the capacity, beyond what
		// commits of polls scatter), "again" needs the producers to
		// have used half a step above the cap's base (at the capacity
		// it read as caught up as often as not), and the base is at
		// least what the consumer committed over its span (after a
		// drain the producers sent next to nothing).
		again = again && kept >= (1+step/2)*tc.capBase
		if kept > 0 {
			base = max(kept, rate)
		}
	}
	switch {
	case dated && tc.capacity > 0 && rate > 2*tc.capacity, !dated && tc.drained:
		tc.overshot = false
	case behind:
		tc.overshot = true
	}
	tc.lastCommit, tc.caughtUp, tc.sinceCommit = newest, caught && kept > 0, 0
	tc.behindAt, tc.sureCaught, tc.drained = behind, sure || again, false
	tc.blindCap = kept * (1 + c.probeStep(v))
	if dated {
		// The blind cap never cuts below this commit's own probe cap
		// (see blindStep).
		tc.blindCap = max(tc.blindCap, base*(1+step))
	}
	tc.capCap, tc.capBase = base*(1+step), base
}

// datesSetpoint reports whether a commit, dated as lag/ dates it (half an
// interval before the reading that saw it), tells a consumer held at its
// setpoint from one caught up: the record at the first one's commit is at
// least the setpoint wait W* old, which reads at least W* - Δ/2 once the
// commit is dated, and that is past the E/2 a caught-up commit reads at
// most when W* > (Δ + E)/2 (at a 250 ms interval, W* = Δ; not at 1 s,
// where W* = Δ/2 and a commit at the setpoint made in the last 0.2 s
// before the reading reads caught up). Where it cannot, only a probe tells the two apart. Δ is the
// smoothed interval (the one W* comes from): one late reading does not
// change the answer.
func datesSetpoint(tc *control, v *reading) bool {
	return v.setWait > (tc.interval+v.engageWait)/2
}

// spanRate is what the consumer consumed from its previous commit
// (tc.spanAt, tc.spanPos, which commitSpan moves on after this) to the
// newest one, msg/s; 0 while unknown.
func spanRate(tc *control, st *lag.State, newest time.Time) float64 {
	if tc.spanAt.IsZero() || !newest.After(tc.spanAt) {
		return 0
	}
	return max(float64(committedPos(st)-tc.spanPos), 0) / newest.Sub(tc.spanAt).Seconds()
}

// blindStep is the relative step of a probe above what a consumer kept
// up with over its last commit span, until its next commit (cadence
// seconds away), while overshot: what the step admits beyond its
// capacity, if the commit misled, is seen only at that commit, so the
// step keeps it, over a commit and an observation interval, within half
// the slack of the budget (as probeStep does over one observation).
//
// Why: a consumer held at its setpoint behind 5 s commits reads,
// at its commit, the same as one caught up (the commit is dated to half
// an interval), and lag/ then estimates it keeping up at up to twice its
// rate until the end offset, so the estimate reads lag 0 and the
// controller probes x1.5 a reading: 133 to 461 msg/s for a consumer of
// 100 for a whole commit interval (the lead's A/A trace), then a drain.
// Once a commit has shown the consumer behind after a span without a
// drain (the controller's own probe put it there), the probes until
// each next commit are capped at one such step above what the producers
// sent over the last commit span, unless a commit shows the consumer
// surely caught up (or caught up again after the producers used the
// cap); and while the last commit showed it behind, it is not probed
// at all (regime). A drain starts over where a commit cannot tell a
// consumer at its setpoint from one caught up (datesSetpoint: at a 1 s
// interval): after it the consumer's backlog says nothing of the probes,
// and a consumer whose capacity came back (a restore) is re-opened at the
// full probe step. Where a commit can (at 250 ms), the cap holds through
// a drain, from a base of at least what the consumer committed over its
// span: a restore shows at a commit there (caught up, or a span consumed
// at more than twice the capacity), and starting over re-opened the
// same x1.5 probes at the next commit that read caught up (the simulator,
// TestSimSteadyOverload at 250 ms seed 2: 66.8% goodput, now 99.6%).
// There the blind cap (one probe step above what the producers sent over
// the span, see caughtUpAtCommit) is never below the commit's own probe
// cap: after a restore the commit's cap rests on what the consumer
// consumed, the blind cap on the slow phase's rate the producers were
// held to, and a reading between commits that the producers' use of the
// commit's rate made look backlogged cut the rate back to the blind cap,
// the next one let it up again: 954 -> 544 -> 954 -> 544 msg/s of an
// 800 msg/s offer, refused while the consumer idled (lagbridge bench,
// kafka/autocommit-1s/sync/250ms at 2x; TestControllerBlindCapKeepsCommitCap).
func (c *Controller) blindStep(v *reading, cadence float64) float64 {
	return min(c.probeStep(v), (v.budget-v.setWait)/(2*(cadence+v.dt)))
}

// commitAge is how long ago, in seconds, a consumer that commits less
// often than it is observed committed the position st reports:
// State.Uncertainty when the observer knows it, else the time since the
// position was last seen to move plus half an interval (the commit
// happened within the interval before that sighting). The commits of a
// consumer that commits about once per observation or more often are
// exact enough (the cadence is learned at the resolution of the
// interval, so one that commits every poll reads the same): 0. It is at
// most one commit interval and one observation interval: a consumer that
// has not committed for longer is overdue, not taken to be consuming what
// it has not committed (lag/ stops its estimate there too), so the head
// of a group stuck for 78 s is 78 s of wait, not 78 s of slack.
func commitAge(tc *control, st *lag.State, v *reading) float64 {
	if v.cadence <= 1.5*v.dt {
		return 0
	}
	age := st.At.Sub(tc.moveAt).Seconds() + v.dt/2
	if u := st.Uncertainty.Seconds(); u > 0 {
		age = u
	}
	return min(age, v.cadence+v.dt)
}

// backlog sets v.backlog: the work waiting for the consumer, which is the
// lag less what the consumer consumed since its last commit (v.since at
// the smaller of its capacity and the produce rate: the commit slack).
// A position that is not a commit is taken as it is.
//
// Between commits (nothing measured) the lag only grows by what is
// produced, so the backlog is extrapolated from the one at the last move:
// plus what was produced since, minus what the consumer consumed at its
// capacity when it was saturated then, or at the produce rate when it was
// not (then nothing tells whether it still keeps up, and it is taken to:
// overload shows at the next commit, the blind spell a commit-only
// observer has). Not at the first commit after first sight that measures
// nothing (v.sightCommit): the position moved to it, and the backlog
// before it was the first-seen lag, which that commit consumed (on kfake,
// a group idle at first sight read that lag again one reading later:
// "saturated: capacity 299/s, wait 201ms" for a lag of 7).
func backlog(tc *control, v *reading, at time.Time) {
	if v.measured || !v.commits || v.sightCommit {
		v.backlog = max(v.lag-min(v.capacity, v.produced)*v.since, 0)
		tc.moveBacklog = v.backlog
		return
	}
	elapsed := at.Sub(tc.moveAt).Seconds()
	drained := v.capacity * elapsed
	if !tc.saturated {
		drained = max(drained, tc.spanProduced)
	}
	v.backlog = max(tc.moveBacklog+tc.spanProduced-drained, 0)
}

// readCapacity is the capacity a reading starts from: the estimate, or 0
// when nothing was measured since a stall (see estimateCapacity): the
// estimate kept from before it is for the reading that measures again, not
// a capacity to read a wait at meanwhile (TestControllerStallUnmeasuredAfter).
func readCapacity(tc *control) float64 {
	if tc.stalled {
		return 0
	}
	return tc.capacity
}

// estimateCapacity sets v.capacity: the smoothed consume rate, restarted
// from the instant one when they differ by more than StepThreshold (a step
// is under way: react now, not one time constant later).
//
// A reading lowers the estimate only when it measures the capacity: one
// with work queued (a lag of at least the engage wait at the rate it
// consumed; with less, or none, the consumer consumed what it was given,
// a lower bound: nothing consumed of nothing produced is no capacity of
// 0), in which the consumer consumed something (nothing consumed is a
// stall, see below), and, for a position estimated between commits (a
// model of the consumer, not a measure of it), only a commit that found
// the consumer behind (see commitSpan). Without these, the estimate followed the rate
// admitted while a backlog drained and the quota followed the estimate:
// down to a few messages a second for a consumer of 2,000.
func (c *Controller) estimateCapacity(tc *control, st *lag.State, p *Policy, v *reading) {
	cInst := v.consumed
	switch {
	case st.Source == lag.SourceEstimate && !v.spanMeasured:
		span, measured := c.commitSpan(tc, st, v)
		if !measured {
			span = max(cInst, span)
		}
		cInst = span
	case cInst < tc.capacity && (v.lag <= 0 || v.lag < v.engageWait*cInst || v.noQueue || v.shadow):
		cInst = tc.capacity
	case v.noQueue:
		cInst = max(cInst, v.produced)
	}
	if v.lower {
		cInst = max(cInst, tc.capacity)
	}
	if cInst <= 0 && v.lag > 0 && tc.capacity > 0 {
		// Nothing consumed with work waiting: a stall (of the machine,
		// or of the partitions not avoided while the consumer drained
		// the late ones), not a capacity, as for a report that stands
		// still (see reportStill). This reading's wait is unbounded (a
		// consumer that stopped is at the floor one interval on, as
		// before); the estimate is kept for the next reading that
		// measures the capacity (until then, and as the ceiling, the
		// capacity is this reading's 0: see judge and readCapacity).
		// Taken as the estimate, one such reading in a drain set it to
		// 0: once the consumer had drained the backlog and sat caught
		// up, the law re-opened from what the producers were allowed
		// (0, then about 1 msg/s) and the probe climbed x1.5 a reading
		// from there (lagbridge demo under machine load, session 17
		// CI: no release of batch-export in the demo's 30 s;
		// TestControllerStallNotCapacity). The next reading that
		// measures the capacity restarts the estimate, as it did from 0
		// (tc.stalled): a rise is not held as a skip burst at the
		// estimate from before the stall (held, a consumer back after
		// 40 s stopped, TestSimStoppedConsumer, re-opened from the 500/s
		// of the interval it stopped in, not from the 1,500/s it
		// consumed); only a reading that is no measure of it (no lag, a
		// lower bound) keeps it.
		v.capacity, tc.stalled = 0, true
		return
	}
	if tc.has && (tc.headLate || v.headAge > p.MaxAge.Seconds()) && tc.capacity > 0 && cInst > tc.capacity && !tc.capLower && !tc.stalled {
		// The head was past the deadline: consumers that skip expired
		// messages (the ttl guard) or retention then "consume" in bursts
		// that cost them nothing. Skips the observer counted are out of
		// the consumption already (leaveOutSkipped); this is for those
		// nobody counts (Kafka's guard, a NATS server that drops the
		// term's reason, retention). A rise seen now is not capacity; hold
		// the estimate until the head is live again (at most the time to
		// drain what is late, since the quota keeps new work out). An
		// estimate that is only a lower bound (tc.capLower: from a first
		// commit, see consumption) is not held: the next reading
		// measures the rate from commit to commit. A consumer that has
		// drained what it held (drainedAtCommits) is taken up to the
		// rate it kept up with while unlimited, no further.
		if drainedAtCommits(tc, v) {
			cInst = min(cInst, max(tc.capacity, tc.keptRate))
		} else {
			cInst = tc.capacity
		}
	}
	cInst = lateShareBack(tc, st, v, cInst, c.cfg.StepThreshold)
	cInst = max(cInst, climbBack(tc, st, v))
	rearmClimb(tc, st, v, cInst, c.cfg.StepThreshold)
	if st.Source == lag.SourceConsumer && tc.fellFrom <= 0 && !tc.fellSpent && cInst < (1-c.cfg.StepThreshold)*tc.capacity {
		tc.fellFrom = tc.capacity
	}
	if !tc.has || tc.capacity <= 0 || tc.stalled || math.Abs(cInst-tc.capacity) > c.cfg.StepThreshold*tc.capacity {
		tc.capacity = cInst
	} else {
		tc.capacity += (1 - math.Exp(-v.dt/c.cfg.Smoothing.Seconds())) * (cInst - tc.capacity)
	}
	tc.capLower, tc.stalled = v.lower, false
	v.capacity = tc.capacity
}

// idleBefore reports whether v reads the commits of a consumer that had
// no lag at the last observation (on the partitions not avoided) and
// holds nothing older than the time since (its head at the commit, plus
// the time since the commit, is at most one interval): every record it
// holds was written after it was seen caught up, so no queue can have
// formed, and the consumption read is when its commits fell, a lower
// bound of its capacity. After an interval in which the producers sent
// nothing (a pause, a drain), commits made just after the observation
// cover only the records written in between: read as the capacity, 24
// msg/s of 297 drained the topic, the next interval (nothing sent)
// measured 255 msg/s, the one after 24 again, every other observation for
// 2.5 s while the consumer kept up with everything (lagbridge bench
// --hot-partition at 250 ms on kfake; TestControllerIdleBeforeNotDrained).
func idleBefore(tc *control, v *reading) bool {
	return tc.has && tc.othersLag <= 0 && v.commits && v.headKnown && v.headAge+v.since <= v.dt
}

// idleSince returns the time, seconds, since the reading a new target's
// partitions were recorded at (sightParts: its rates not known yet) when
// none of them had lag then, else -1. Called before lateParts, which
// replaces that record.
func idleSince(tc *control, st *lag.State) float64 {
	if tc.has || tc.partsAt.IsZero() || !st.At.After(tc.partsAt) {
		return -1
	}
	for _, pt := range tc.parts {
		if pt.lag > 0 {
			return -1
		}
	}
	return st.At.Sub(tc.partsAt).Seconds()
}

// idleAtSight reports whether v is the first fresh reading of a target
// that had no lag at the reading before (idleSince: sight seconds ago)
// and holds nothing older than that (its head, at the commit, no older
// than the time since and E/2; its lag no more than was produced over
// it): every record it holds was written after it was seen caught up, so
// no queue can have formed, and its consume reading is what its first
// commits (or reports) moved since, a lower bound of its capacity, as for
// idleBefore. Read as its capacity, the first fresh reading of a new group
// committing every 250 ms, read every 250 ms (some partitions not
// committed yet), 54 msg/s consumed of 313 produced, lag 62, head 0.24 s,
// limited it: "saturated: capacity 54/s, wait 1.142s", then probes and
// follows for 3 s (lagbridge bench --hot-partition --hot-interval 250ms on
// real Kafka; TestControllerIdleAtSightNotAQueue). A consumer slow from
// the start shows a head past the time since within a reading or two.
func idleAtSight(v *reading, sight float64) bool {
	return sight > 0 && writtenSince(v, sight, sight)
}

// noQueueAtCommit reports whether st reads the commit of a consumer that
// commits about once per observation (a cadence of more than half an
// interval and at most one and a half) whose head at the commit shows no
// queue: at most E/2 older than the standing wait it showed while healthy
// (tc.floor; until that is learned, floorLearn readings after the cadence
// is, the larger of it and tc.headKept, at most floorCap: a learned
// standing wait is the current one, a head kept from the first readings
// may be of a commit timer that has drifted since, and kept a 2x drop
// unseen for a reading in one bench run, excess 1.5x its bound). Its lag
// is then consumed work it has not committed yet, not work queued, and a low consume reading is its commit's timing (a
// franz-go 1 s auto-commit read every second reads 3 msg/s, then 1,634,
// of 800), a lower bound of its capacity: read as its capacity at the
// reading that learned the cadence, it drained a healthy consumer
// (lagbridge bench, kafka/autocommit-1s at 2x, refused before the drop).
// A consumer whose capacity fell shows a queue: the record at its commit
// waited longer.
func noQueueAtCommit(tc *control, st *lag.State, v *reading) bool {
	if !fromCommits(st) || !v.headKnown {
		return false
	}
	perObs := onceObs(v)
	if startupAtCommits(tc) && (!v.learned || perObs) {
		// The first readings, the standing wait not learned and the
		// cadence perhaps not either: a head at most one interval old
		// (at least E, at most half the budget) whose lag is no more
		// than was produced since is a commit of uncommitted work, not
		// a queue. From its first measured reading, a 1 s auto-commit
		// read every second that commits a few records reads 40 msg/s
		// consumed of 800 (lag 760, head 0.96 s): taken as its
		// capacity, it was drained, limited, and never learned its
		// standing wait (lagbridge bench, autocommit-1s at 2x, 4 runs
		// of 6; TestControllerOneSecondCommitsFirstReading). A
		// consumer slow from the start shows a head past that within
		// a reading or two.
		standing := min(max(v.dt, v.engageWait), v.budget/2)
		return v.headAge <= standing+v.engageWait/2 && v.lag <= (v.headAge+v.engageWait/2)*max(v.produced, v.prevProduced)
	}
	if !perObs {
		return false
	}
	standing := tc.floor
	if tc.floorSeen < floorLearn {
		standing = max(standing, min(tc.headKept, floorCap(v)))
	}
	return v.headAge <= standing+v.engageWait/2
}

// commitSpan measures, at each new commit of a consumer whose position is
// estimated between commits, what it consumed from its previous commit to
// this one (msg/s, from the committed offsets and the commits' times):
// its capacity when it was behind at this commit (the record at a
// committed position had waited more than the engage wait when the
// commit was made, as lag/ dates it), else a lower bound of it. It
// returns the rate and true when it measured the capacity, else the
// higher of that lower bound and tc.capacity.
func (c *Controller) commitSpan(tc *control, st *lag.State, v *reading) (float64, bool) {
	var newest time.Time
	var pos int64
	behind := false
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if !withCommit(ps) {
			continue
		}
		pos += ps.Committed
		if ps.LastCommit.After(newest) {
			newest = ps.LastCommit
		}
		if ps.LastCommit.After(tc.spanAt) && ps.CommittedLag > 0 && ps.HeadKnown {
			atCommit := ps.CommittedHeadAge - st.At.Sub(ps.LastCommit)
			behind = behind || atCommit.Seconds() > v.engageWait
		}
	}
	if !newest.After(tc.spanAt) {
		return tc.capacity, false
	}
	prevAt, prevPos := tc.spanAt, tc.spanPos
	tc.spanAt, tc.spanPos = newest, pos
	if prevAt.IsZero() || pos < prevPos {
		return tc.capacity, false
	}
	rate := float64(pos-prevPos) / newest.Sub(prevAt).Seconds()
	if !behind {
		return max(rate, tc.capacity), false
	}
	return rate, true
}

// correctedSpan measures a reading whose commit corrected the estimate
// (State.Corrected: the commit landed behind the position estimated
// before it) by the commits: what the consumer committed from its
// previous commit to this one (commitSpan), when this commit found it
// behind (the record at the commit had waited more than the engage wait)
// and the previous commit is at most two cadences (or observations) older.
// The consumer was then slower than the estimate took it to be, and the
// commits are the measure of it: a capacity drop shows at once. Measuring
// nothing there, a 1 s auto-commit whose cadence read 2 s (a commit that
// fell just after an observation) kept the capacity of 1,599/s its
// estimate showed before a drop to 400 for two corrected readings in a
// row, "saturated: capacity 1599/s, wait 475ms", and 1,600 messages were
// admitted after the drop, twice the bound (lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on kfake, dead work 5.4%;
// TestControllerCorrectedCommitMeasures). A corrected commit it does not
// measure leaves the span where it was (commitSpan moves it on), so the
// next measured reading spans it, as before correctedSpan: a commit that
// found the consumer behind after a gap still lowers the capacity there.
// (commitSpan finds nothing behind without a previous commit.)
func (c *Controller) correctedSpan(tc *control, st *lag.State, v *reading) {
	prevAt, prevPos := tc.spanAt, tc.spanPos
	rate, behind := c.commitSpan(tc, st, v)
	if !behind || tc.spanAt.Sub(prevAt).Seconds() > 2*max(v.cadence, v.dt) {
		tc.spanAt, tc.spanPos = prevAt, prevPos
		return
	}
	v.consumed, v.span, v.measured, v.spanMeasured = rate, v.dt, true, true
	leaveOutSkipped(st, v)
	v.spanProduced = v.produced * v.dt
	v.keepsUp = v.consumed >= keepUpRatio*v.produced
}

// saturatedLaw sets v.law, v.stepDown and v.probe.
//
// The law: consume rate plus the backlog error over tau; nothing while a
// new message would be dead on arrival. Draining (backlog above the
// setpoint) uses tau; filling up to the setpoint uses a slower tauFill, so
// that a saturated consumer is never offered more than maxFill above its
// capacity.
func (c *Controller) saturatedLaw(tc *control, v *reading) {
	cfg := &c.cfg
	tau := lawTau(v)
	tauFill := max(tau, (v.setWait-v.engageWait)/maxFill)
	v.setBacklog = v.setWait * v.capacity
	law := v.capacity + (v.setBacklog-v.backlog)/tau
	if v.backlog < v.setBacklog {
		law = v.capacity + (v.setBacklog-v.backlog)/tauFill
	}
	if v.wait >= v.budget {
		law = 0
	}
	// A step down is measured over an interval that straddles it: the
	// instant rate mixes the old capacity with the new one, so it
	// overstates the new one, and every message admitted on it joins a
	// queue that now drains slower than it looks. When the consumer was
	// saturated before the step and its backlog covers another interval
	// even at the rate it just showed (so a pause cannot starve it),
	// admit nothing for one interval and decide on the next, clean
	// measurement (which is clean: the step was in the interval before).
	// Nothing consumed of no backlog is no step: caught up after a
	// drain that admitted nothing, the first reading paused the grant
	// at 0/s for another second (TestControllerNoStepDownCaughtUp).
	v.stepDown = v.measured && tc.has && v.wasSaturated && !tc.paused && v.prevCap > 0 &&
		v.consumed < (1-cfg.StepThreshold)*v.prevCap && v.backlog > 0 && v.backlog >= v.consumed*v.dt
	v.stepDown = v.stepDown || v.stillHead
	if v.stepDown {
		law = 0
	}
	v.law = max(law, 0)
	v.probe = c.probeStep(v)
}

// lawTau is the time, seconds, in which the law drains a backlog above
// the setpoint: the budget's slack over the target wait, at least two
// intervals.
func lawTau(v *reading) float64 { return max(v.budget-v.setWait, 2*v.dt) }

// unlimitedReason says why an unlimited target stays so: the wait within
// the engage wait, or, when the wait is over it, what the controller read
// as no queue (the consumer keeping up with spare capacity, an estimate
// since a commit it caught up at, or the part of the wait over the
// standing wait and the startup allowance, which engage compares). Printed
// alone, "wait 1.447s <= engage 400ms" read as a contradiction (session
// 16, a 1 s auto-commit row on kfake).
func unlimitedReason(v *reading) string {
	switch {
	case v.wait <= v.engageWait:
		return fmt.Sprintf("wait %s <= engage %s: unlimited", secs(v.wait), secs(v.engageWait))
	case v.spare:
		return fmt.Sprintf("wait %s, but the consumer keeps up with capacity to spare: unlimited", secs(v.wait))
	case v.blind:
		return fmt.Sprintf("wait %s estimated since a commit it caught up at, no queue until a commit says so: unlimited", secs(v.wait))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "wait %s, queued %s", secs(v.wait), secs(v.queued))
	if v.queued < v.wait {
		fmt.Fprintf(&b, " (the head at the commit less the standing wait %s)", secs(v.standing))
	}
	if v.allowance > 0 {
		fmt.Fprintf(&b, " less %s of startup allowance (the standing wait not learned yet)", secs(v.allowance))
	}
	fmt.Fprintf(&b, " <= engage %s: unlimited", secs(v.engageWait))
	return b.String()
}

// probeStep is the relative step of a probe. Probing overshoots by at most
// Probe x rate x dt messages per interval; keep that within half the slack
// of the budget.
func (c *Controller) probeStep(v *reading) float64 {
	return min(c.cfg.Probe, (v.budget-v.setWait)/(2*v.dt))
}

// regime picks the rule that sets the rate in force (tc.rate, tc.limited)
// and says why.
func (c *Controller) regime(tc *control, st *lag.State, v *reading) (Rule, string) {
	inForce := tc.rate
	switch {
	case st.Status == lag.StatusStopped:
		tc.limited, tc.rate, tc.release = true, 0, 0
		return RuleConsumerStopped, "consumer stopped: " + st.Reason
	case v.held:
		return heldStall(tc, v)
	case !tc.limited && !v.engaged:
		return RuleUnlimited, unlimitedReason(v)
	case v.engaged:
		tc.limited = true
		tc.rate, tc.release = v.law, 0
		switch {
		case v.wait >= v.budget:
			tc.drained = true
			return RuleDrain, fmt.Sprintf("wait %s >= budget %s: a new message would be dead on arrival, draining", secs(v.wait), secs(v.budget))
		case v.stillHead:
			return keptPause(st, v)
		case v.stepDown:
			return RuleStepDown, fmt.Sprintf("capacity fell from %.0f/s to at most %.0f/s during the interval: admitting nothing until the next observation measures it (wait %s)", v.prevCap, v.consumed, secs(v.wait))
		}
		tc.satCap = max(tc.satCap, v.capacity)
		return RuleSaturated, fmt.Sprintf("saturated: capacity %.0f/s, wait %s, target %s", v.capacity, secs(v.wait), secs(v.setWait))
	case !v.measured && st.Source == lag.SourceConsumer:
		// Limited, and the consumer reports a poll in hand (or nothing
		// in hand): see reportStill.
		return RuleAwaitCommit, fmt.Sprintf("reported position not moved (a poll in hand, or waiting for records): capacity not measured, keeping %.0f/s", tc.rate)
	case !v.measured:
		// Limited, and the consumer has not committed since it was last
		// seen to move: nothing new is known of its capacity; keep the
		// rate in force.
		return RuleAwaitCommit, fmt.Sprintf("no commit for %s (commit interval %s): capacity not measured, keeping %.0f/s",
			st.At.Sub(tc.moveAt).Round(time.Millisecond), st.CommitInterval, tc.rate)
	case !v.keepsUp || (v.queued > v.engageWait/2 && !v.spare):
		return follow(tc, st, v, inForce)
	case risenHead(tc, v):
		tc.rate, tc.release = min(v.law, v.consumed), 0
		return RuleFollow, fmt.Sprintf("head at the commit rose to %s (standing wait a trial told: %s), consumed %.0f/s of %.0f/s: keeping %.0f/s",
			secs(v.headAge), secs(tc.floor), v.consumed, v.produced, tc.rate)
	case v.estimated && tc.behindAt && tc.overshot && v.binding:
		// Caught up by the estimate only: between the commits of a
		// consumer whose last commit showed the backlog a probe made,
		// lag/ moves its position up to the end offset, where it reads
		// as caught up whatever the consumer does. Follow the law (no
		// probe) until a commit shows it caught up (see blindStep).
		tc.rate, tc.release = v.law, 0
		return RuleFollow, fmt.Sprintf("estimated between commits, the last one behind after a probe (wait %s): no probe until a commit shows the consumer caught up, capacity %.0f/s", secs(v.wait), v.capacity)
	}
	return c.caughtUp(tc, st, v, inForce)
}

// risenHead reports whether a target whose standing wait a trial told
// (tc.floorTold, set by raiseFloor for the under-cut trial, trialUnderCut,
// and the relearn trial, relearnStanding; never reset) shows a queue that
// standing wait hides: read through commits, its head at the commit rose
// by more than E/4 since the last measured reading while it consumed less
// than keepUpRatio of what was produced. The standing wait a trial tells can
// be most of a commit interval (0.8-0.9 s at 1 s auto-commits), and a
// head within it reads as no queue, so a consumer at its limit whose
// trial passed (the law cut the probe at the next reading, before a
// commit showed its surplus, and it caught up) was probed from a lumpy
// reading (606 msg/s consumed for a consumer of 400) to 909 and 1,364
// msg/s, its head 0.48 s read as caught up while it consumed 486 of 744
// msg/s; a queue of 1.5-4 s followed, dead work 3.8% in that run
// (TestSimOneSecondGrid at 2x, seed 3 with the first commit at 0.02 s).
// Such a reading is held at what the consumer consumed (the law, if
// lower): neither probed nor cut below what it showed it takes. Not while
// a partition is listed (v.avoid): the listing answers its queue, and a
// topic held at what it consumed while a slow partition was listed was
// cut to 36-37 msg/s of a 300 msg/s offer
// (TestControllerSlowPartitionListedAfterTrialTold).
func risenHead(tc *control, v *reading) bool {
	return tc.floorTold && v.commits && v.headRose && v.consumed < keepUpRatio*v.produced && len(v.avoid) == 0
}

// caughtUp is regime for a limited target that is caught up, or has
// capacity to spare: the capacity is invisible, so never cut; probe
// upward (multiplicative increase) while the consumer keeps up; release
// once the producers leave the rate in force (inForce) unused. Standing
// in, a rate unused is no evidence: hold it.
func (c *Controller) caughtUp(tc *control, st *lag.State, v *reading, inForce float64) (Rule, string) {
	if c.standIn && inForce > 0 && v.produced < c.cfg.ReleaseRatio*inForce {
		tc.release = 0
		return RuleProbe, fmt.Sprintf("caught up, the rate unused while standing in for a silent leader (producers may hold its leases): keeping %.0f/s", inForce)
	}
	if tc.release < 0 && inForce > 0 && v.produced < c.cfg.ReleaseRatio*inForce {
		// Adopted (a takeover): the producers have not had the rate yet
		// (they hold the former leader's leases, or its Kafka client
		// quotas throttle them), so its being unused says nothing of
		// the consumer. Probing it up meanwhile compounded, unused, to
		// several times the capacity, which the producers then used
		// all at once. Hold it while the adoption's grace runs.
		tc.release++
		return RuleProbe, fmt.Sprintf("caught up, the rate unused since it was adopted from another replica (producers may still be held to its leases or client quotas): keeping %.0f/s", inForce)
	}
	base := c.probeBase(tc, st, v, inForce)
	probed := max(tc.rate, v.law, base*(1+v.probe))
	tc.rate = max(probed, c.restoredProbe(tc, v, base))
	if v.blind {
		tc.rate, probed = min(tc.rate, tc.blindCap), min(probed, tc.blindCap)
	}
	if v.capped {
		tc.rate, probed = min(tc.rate, tc.capCap), min(probed, tc.capCap)
	}
	if v.produced < c.cfg.ReleaseRatio*inForce || inForce <= 0 {
		// (A rate of 0 cannot be probed up: caught up, it is released.)
		tc.release++
	} else {
		tc.release = 0
	}
	if tc.release >= c.cfg.ReleaseAfter {
		tc.limited, tc.release = false, 0
		return RuleRelease, fmt.Sprintf("caught up and the rate unused for %d observations: unlimited", c.cfg.ReleaseAfter)
	}
	v.raised = tc.rate > inForce
	if tc.rate > probed {
		tc.restored = true
		return RuleProbeRestored, fmt.Sprintf("caught up, and kept up over two moves with %.0f/s, a step above the %.0f/s it showed saturated: a capacity that came back, probing from %.0f/s to %.0f/s",
			(v.produced+v.prevProduced)/2, tc.satCap, base, tc.rate)
	}
	if v.relearn && v.raised {
		// A trial is a probe that went through: one capped at the rate
		// in force (blindStep, the probe cap) let nothing more in and
		// tells nothing; Step drops it and the next qualifying reading
		// tries.
		if unlearnedFloor(tc) {
			return RuleRelearn, fmt.Sprintf("head at the commit held at %s for %d readings, no standing wait learned, %.0f/s consumed while limited: a probe to %.0f/s tells a standing wait of its commit cadence from a queue",
				secs(v.headAge), floorLearn, tc.shown, tc.rate)
		}
		return RuleRelearn, fmt.Sprintf("head at the commit held at %s for %d readings, past the standing wait learned (%s): a probe to %.0f/s tells a standing wait its commit timer moved to from a queue",
			secs(v.headAge), floorLearn, secs(tc.floor), tc.rate)
	}
	return RuleProbe, fmt.Sprintf("caught up: probing from %.0f/s", tc.rate)
}

// restoreSteps is the step of a restoredProbe in probe steps: 1+4p, x3
// at the default probe (p = 0.5) against the probe's x1.5, and smaller
// with a smaller ControllerConfig.Probe or a budget that caps the probe
// (probeStep).
const restoreSteps = 4.0

// restoredProbe returns the rate a probe from base may step to when v
// shows a capacity that came back (0: none; the probe's own step applies).
//
// A consumer limited through a capacity drop and caught up after the
// restore is probed up x1.5 a reading from where the law re-opened, which
// after a drain at the restore can be a few hundred msg/s or less: at 5x
// (2,000 msg/s offered to a consumer back at 2,000; lagbridge bench
// kafka/autocommit-1s/sync/1s on kfake) 22 -> 327 -> 490 -> 736 -> 1,103
// -> 1,655 -> 2,483 msg/s in one run, 453 -> 550 -> 825 -> 1,238 -> 1,857
// -> 2,785 in another, the consumer caught up at every commit all along:
// the producers were refused for 2-4 s of the judged window (from the
// restore plus a commit and an observation) while it idled
// (TestControllerRestoredClimb).
//
// The step is larger when the last decision was a probe (or a
// probe-restored), this one is a probe and not a relearn trial, the
// producers use the rate in force (v.binding), and the consumer kept up
// over this move and the one before (keepUpRatio, also of what was
// produced the interval before: its commits may run one observation
// behind) at a produce rate over the two a step (StepThreshold) above the
// highest capacity estimate of the readings the law decided as saturated
// in this limited episode (tc.satCap), consumed no more than a step above
// what was produced in this move, and its head at the commit is at most
// the engage wait old. keptTwo is known only for positions read from
// commits with a learned cadence (twoMoves): the rule is inert for
// positions the consumer reports and before the cadence is learned. The
// last two conditions are what a consumer whose capacity has not come
// back still shows when its saturated estimates were low: lumpy commits of
// the previous poll read "saturated: capacity 228-326/s" for a consumer of
// 400 in the simulator's slow phase, which then kept up with 336-426
// msg/s over two moves, 1.31-1.47 times that, while it consumed 1.5 times
// what was produced (the backlog the move before left) or its head at the
// commit was 0.92 s old (TestSimOneSecondGrid's 2x previous-poll row,
// seeds 1, 4 and 8); after the restore a consumer caught up consumed
// 0.6-1.05 times what was produced, its head 0.0-0.7 s (0.05-0.09 s in the
// kfake recordings). The step is then 1+4p probe steps (restoreSteps: x3
// at the default probe of 0.5, less with a smaller ControllerConfig.Probe
// or a budget that caps the probe), at most one probe step above the rate
// the consumer kept up with while unlimited (tc.keptRate) when that is
// known; when it is not (a start or a takeover mid-overload learns none),
// once in a limited episode: repeated, x3 a reading compounds past any
// capacity. What it costs when wrong: a capacity that came back only part
// way is overshot by up to x3 for an interval and a commit, and the law
// drains it (the simulator, 2,000 -> 400 -> 600 msg/s at 5x over the
// grid's 40 runs: dead work 7.63 -> 7.78%, session 16, before the last
// two conditions).
func (c *Controller) restoredProbe(tc *control, v *reading, base float64) float64 {
	if tc.satCap <= 0 || base <= 0 || !v.binding || !v.keepsUp || !v.keptTwo || v.relearn || v.trial ||
		(tc.last.Rule != RuleProbe && tc.last.Rule != RuleProbeRestored) ||
		v.consumed < keepUpRatio*v.prevProduced ||
		v.produced+v.prevProduced < 2*(1+c.cfg.StepThreshold)*tc.satCap ||
		tc.keptRate <= 0 && tc.restored ||
		v.consumed > (1+c.cfg.StepThreshold)*v.produced || v.headAge > v.engageWait {
		return 0
	}
	r := base * (1 + restoreSteps*v.probe)
	if tc.keptRate > 0 {
		r = min(r, max(base, tc.keptRate)*(1+v.probe))
	}
	return r
}

// keptBack is the share of the rate a consumer kept up with while
// unlimited (tc.keptRate) that it must drain at for drainedAtCommits.
const keptBack = 0.9

// handMark is what a consumer's reports said it held at a reading: the
// records in hand, summed over the partitions with lag (-1: one of them
// not read from the consumer's reports, or reported without a count),
// the newest report's time, and each reported partition's report
// (see climbBack).
type handMark struct {
	held  int64
	at    time.Time
	parts []partMark
}

// partMark is one partition's report at a reading: its time and position.
type partMark struct {
	id  int32
	at  time.Time
	pos int64
}

// handOf returns what st's reports say the consumer holds (see handMark),
// its partitions appended to buf[:0] (the mark it replaces: one slice per
// target, not one a reading). A partition with lag whose report has
// nothing in hand holds none.
func handOf(st *lag.State, buf []partMark) handMark {
	m := handMark{parts: buf[:0]}
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		r := ps.Reported
		if ps.Lag > 0 && (ps.Source != lag.SourceConsumer || !r.HeadTime.IsZero() && r.Held <= 0) {
			return handMark{held: -1, parts: buf[:0]}
		}
		if ps.Lag > 0 && !r.HeadTime.IsZero() {
			m.held += r.Held
		}
		if r.At.After(m.at) {
			m.at = r.At
		}
		if !r.At.IsZero() {
			m.parts = append(m.parts, partMark{ps.Partition, r.At, r.Position})
		}
	}
	return m
}

// reportSpan returns the longest time between a partition's report at
// the reading before (prev) and its report in st, over the partitions
// whose reported position moved, and whether every one of them was
// reported then. Each member reports on its own (one goroutine a
// replica): a member whose report was 2 s old at the reading before
// moved 3 s of its work in this interval, which over another member's
// 1 s reads three times its rate.
func reportSpan(prev []partMark, st *lag.State) (float64, bool) {
	span := 0.0
	for i := range st.Partitions {
		r := st.Partitions[i].Reported
		if r.At.IsZero() {
			continue
		}
		j := slices.IndexFunc(prev, func(m partMark) bool { return m.id == st.Partitions[i].Partition })
		switch {
		case j >= 0 && prev[j].pos == r.Position:
		case j < 0:
			return 0, false
		default:
			span = max(span, r.At.Sub(prev[j].at).Seconds())
		}
	}
	return span, true
}

// climbBack returns the capacity estimate a reading of a consumer's
// reports restores after a fall (tc.fellFrom), 0 when none: once the
// consumer has caught up (no lag, or its head no older than E/2), what
// its position moved since the last reading (less what it skipped, where
// that is counted: see leaveOutSkipped) less what it held then (the
// records of the poll it had in hand may have been worked through
// before that reading; every record after them was polled and finished
// since), over the time between the two readings' reports (the longest
// of the partitions that moved, see reportSpan; none without a report at
// the reading before), is a rate it consumed at: up to the estimate from
// before the fall, or the rate the reading before read that way while
// not caught up (tc.drainRate) with its head past MaxAge, if higher.
// Once in a limited episode
// (tc.fellSpent), and only with the counts (lag.Report.Held) at the
// reading before.
//
// Why: a consumer of 2,000/s keeping up with 1,500/s that meets one
// record taking 2 s reads, in the stall, a capacity of 6-12/s (the
// records it holds over the time it has held them, see heldBound, or
// the one small poll its position moved by), and is drained, as it should
// be (MaxAge 2 s). It then drains the backlog within an interval, but
// its head was past MaxAge, so that rise was held as a skip burst (see
// estimateCapacity) and the probe climbed x1.5 a reading from the drain's
// rate while it sat caught up: about 11 s to 1,500/s, producers refused
// at 50 (plain hook) and 20 (guard) caught-up readings over 5 runs, down
// to 5/s (TestControllerStallClimbBack); a catch-up whose head was not
// past MaxAge, spread over the stall, read the stall's share (485/s) and
// climbed from there. What was
// consumed within the interval is no skip burst for a consumer that skips
// nothing; one behind the ttl guard whose capacity really fell may
// read one here, and is let in up to the estimate from before the fall
// for an interval, once, until its next reading shows the queue. A
// consumer whose capacity fell shows what it does: after a drop to 400/s
// behind the same stall, the capacity read once caught up stays at
// 399-551/s as before (TestControllerStallThenDrop).
//
// The reading before: a stall of 3 s leaves a backlog the consumer drains
// over two readings. The first, not caught up, shows the drain (946/s);
// the second, caught up, moved the little that was left (339, less the
// 346 it held: 6/s). Read alone, it spent the episode's climb on 6/s and
// the probe climbed from there (TestControllerStallLongClimbBack). The
// drain reading is taken only with its head past MaxAge: the ttl guard
// skips a record older than MaxAge (ttl.Rule.MaxAge is the policy's)
// when its turn comes, so a consumer whose head was that old worked
// through the records before it. Behind a guard whose capacity really
// fell, the drain is mostly skips nobody counts (Kafka) with a head
// within MaxAge: taken as capacity, 7% more records skipped at a 3 s
// stall into a drop to 400/s (TestControllerStallLongThenDropSkips).
// The best rate since the fall (every drain reading) cost 2.9% at 2 s.
func climbBack(tc *control, st *lag.State, v *reading) float64 {
	prev, before := tc.hand, 0.0
	if tc.drainAt.Equal(tc.lastAt) && tc.headLate {
		before = tc.drainRate
	}
	tc.drainRate, tc.drainAt = 0, st.At
	if tc.fellFrom <= 0 || tc.fellSpent || prev.held < 0 || prev.at.IsZero() || st.Source != lag.SourceConsumer || !v.measured {
		return 0
	}
	parts, known := reportSpan(prev.parts, st)
	if !known {
		return 0
	}
	moved := (st.ConsumeRateInstant - min(st.SkipRateInstant, st.ConsumeRateInstant)) * v.dt
	span := max(v.dt, parts)
	rate := (moved - float64(prev.held)) / span
	if queuedReading(v) {
		tc.drainRate = rate
		return 0
	}
	back := min(max(rate, before), tc.fellFrom)
	if back <= tc.capacity {
		return 0
	}
	tc.fellSpent = true
	tc.climbTo, tc.climbAt, tc.climbKept = back, st.At, 0
	return back
}

// climbRearm is how many caught-up readings after a climb back must keep
// its estimate before a new fall in the same limited episode may climb
// back too (see rearmClimb).
const climbRearm = 2

// rearmClimb re-arms the climb back (tc.fellFrom, tc.fellSpent) after
// climbRearm measured readings of the consumer caught up (no lag, or its
// head within E/2) since the climb restored tc.climbTo; a measured reading
// below a step (StepThreshold) of tc.climbTo ends the trial for the
// episode (tc.climbTo 0). A caught-up reading is never below
// (estimateCapacity lifts it to the estimate), so the rule as it acts is:
// two caught-up readings with no reading between that measured a queue
// below a step. It fires on any fall after those, not only on a second
// stall: in the hook row's slow phase after a real drop too (a climb to
// measured rates only; review-climb3's trace).
//
// Why: a climb back once per limited episode left a second stall in the
// same episode to climb from the drain: two 2 s stalls 4 s apart, the
// plain hook refused producers at 235 caught-up readings after the
// second over 40 runs, down to 7/s (now 11, at 1,173/s at the lowest;
// TestControllerStallTwiceClose). A consumer whose capacity really fell
// and that read a skip burst as its climb back (the ttl guard, uncounted
// skips) shows the queue at the next reading or the one after: its trial
// ends there and it is not let in again in that episode, as before. A
// consumer that kept the estimate and then stalls into a real drop gets
// the exposure of a new episode: behind a guard that skips (uncounted),
// 4 s apart, 1.8% more records skipped over 40 runs.
func rearmClimb(tc *control, st *lag.State, v *reading, cInst, step float64) {
	if tc.climbTo <= 0 || !v.measured || !st.At.After(tc.climbAt) {
		return
	}
	switch {
	case cInst < (1-step)*tc.climbTo:
		tc.climbTo = 0
	case queuedReading(v):
	case tc.climbKept+1 >= climbRearm:
		tc.fellFrom, tc.fellSpent, tc.climbTo = 0, false, 0
	default:
		tc.climbKept++
	}
}

// drainedAtCommits reports whether v reads the commits of a consumer that
// commits about once per observation, kept up with a known rate while
// unlimited (tc.keptRate), and has drained what it held at keptBack of
// that rate or more: the head at its commit shows no queue (v.noQueue, no
// older than its cadence allows), its lag is no more than was produced
// over that head (and E/2), and it consumed at least keptBack x keptRate.
//
// Such a reading right after a drain, or after a head past the deadline,
// is how a capacity that came back first shows through commits made once
// a second: the consumer drained the backlog the drain left (lagbridge
// bench, kafka/autocommit-1s/sync/1s at 2x on kfake: 770 and 1,337 msg/s
// over the interval, lag 0, the head at the reading before 2.72 s and
// 2.20 s). Held as a skip burst (see estimateCapacity) and stepped from
// the drain's 0 (see probeBase), the law re-opened at 207 and 332 msg/s
// and the probe climbed from there while the consumer idled: producers
// refused for 1-3 s of the judged window in 5 of 12 runs
// (TestControllerRestoreAfterDrainReopens). Without keptBack the slow
// phase's own drains re-opened the same way (lumpy commits read 450-592
// msg/s for a consumer of 400) and dead work rose in every kfake pair;
// a consumer that drained at the rate it kept up with before its overload
// shows that capacity back. Up to that rate, what it drained is no skip
// burst's gift: a consumer behind the ttl guard whose capacity did not come back
// re-opens at most to where it was before its overload, and its next
// commit shows the queue; the guard and the hook (commits per poll,
// reports) are not read this way.
func drainedAtCommits(tc *control, v *reading) bool {
	return v.commits && v.measured && v.headKnown && v.noQueue && tc.keptRate > 0 && v.consumed >= keptBack*tc.keptRate &&
		onceObs(v) && v.headAge <= floorCap(v)+v.engageWait/2 &&
		v.lag <= (v.headAge+v.engageWait/2)*max(v.produced, v.prevProduced)
}

// probeBase is the rate a probe steps up from: the rate in force, or,
// when more, what the consumer consumed over the interval (at most the
// capacity estimate), for a position read from commits made at least about
// once per observation (read as they are, see commitAge) that showed no
// standing wait (tc.floor, tc.headKept) beyond E/2 more than the one its
// commits run behind by (behindWait: a 1 s auto-commit read every second
// shows up to a second of uncommitted work, no queue), when that is a step
// above the capacity estimate before the reading (StepThreshold: a
// capacity that came back, not a drain at the capacity it had) with the
// head at the commit no older than that standing wait and E/2 (it drained
// what was queued: a partition that catches up in a burst behind a sticky
// partitioner, its head still old, read 404/s after 314/s and was probed
// into a drain in the simulator; a consumer held at its setpoint W* > E/2
// shows a head that much older), and a rate is in force (not right after
// a drain, where the law re-opens, unless the consumer drained what it
// held, see drainedAtCommits). A consumer that consumed more than it was allowed drained a
// backlog: it showed that rate over the interval, a lower bound of its
// capacity, so a probe from it overshoots that capacity by no more than a
// probe from the rate in force would overshoot the rate in force. Not for
// a consumer's reports (they move by whole polls: a poll's worth in one
// interval is no rate), nor
// for an estimate between commits, nor while the head was past the
// deadline (a consumer that skips expired messages, the ttl guard,
// "consumes" them at no cost; see estimateCapacity), again unless
// drainedAtCommits (the capacity estimate then bounds the step's base at
// the rate the consumer kept up with while unlimited).
//
// Why: once capacity returns, the consumer drains the slow phase's
// standing backlog within the first interval: at 1 s, 624 msg/s consumed
// against 404 allowed (the simulator, 2,000 -> 400 -> 2,000 msg/s, 800
// offered, commits every 100 ms). Probing from the 404 in force (the law
// gave 780) refused the producers for the next interval while the
// consumer sat idle; from 624 the probe admits the offer
// (TestSimRestoreProbesFromConsumed). A 1 s auto-commit read every second
// with its timer in phase (lagbridge bench's kafka/autocommit-1s/sync/1s)
// was left out while its standing wait of a second counted against E/2:
// probed from 470/s in force instead of 564/s consumed, it refused the
// producers 1.1 s after the restore plus one commit and one observation
// interval (TestSimOneSecondAutoCommit).
func (c *Controller) probeBase(tc *control, st *lag.State, v *reading, inForce float64) float64 {
	standing := behindWait(tc, v)
	if !fromCommits(st) || v.cadence > 1.5*v.dt || max(tc.floor, tc.headKept) > standing+v.engageWait/2 ||
		(inForce <= 0 || tc.headLate) && !drainedAtCommits(tc, v) ||
		!v.measured || !v.headKnown || v.headAge > standing+v.engageWait/2 ||
		v.consumed <= (1+c.cfg.StepThreshold)*v.prevCap {
		return inForce
	}
	return max(inForce, min(v.consumed, v.capacity))
}

// follow is the rule for a limited consumer under the engage threshold
// whose backlog grows or is not near empty: the consumer showed (some of)
// its capacity; follow the law, which here allows at least that. No
// probing into a consumer that may be at its limit, unless it showed
// capacity to spare (v.spare): then the standing lag is not work waiting
// for it (uncommitted work, messages in flight), and following it would
// lock the rate.
//
// When only the keep-up test failed and the position is the consumer's
// own (see exactPosition), its backlog near empty, the rate in force is
// held: the law rests on a capacity estimate that, while limited, is what
// the producers were allowed, and cutting to it refused producers while
// the consumer sat idle, and restarted the count towards release
// (lagbridge bench, kafka/hook/sync/1s at 2x: after the restore 3,175/s
// cut to 918/s of an 800/s offer, wait 70 ms, consumed 757/s of 799/s;
// before the drop 1,555/s cut to 1,036/s, wait 6 ms). A consumer really
// at its limit shows a backlog beyond E next.
func follow(tc *control, st *lag.State, v *reading, inForce float64) (Rule, string) {
	if exactPosition(st, v) && v.queued <= v.engageWait/2 {
		if v.binding && inForce > 0 {
			// The producers use the whole rate and are refused: holding
			// it refuses them again while the consumer sits idle
			// (lagbridge bench, kafka/hook/sync/1s at 2x after the
			// restore: 339/s held for an 800/s offer, consumed 301/s of
			// 336/s, wait 21 ms). A probe from the rate in force keeps
			// the probe's overshoot bound; a consumer at its limit
			// shows a backlog beyond E next.
			tc.rate = max(v.law, inForce*(1+v.probe))
			return RuleProbe, fmt.Sprintf("backlog near empty (wait %s), consumed %.0f/s of %.0f/s, the rate in use: probing from %.0f/s", secs(v.wait), v.consumed, v.produced, tc.rate)
		}
		tc.rate = max(v.law, inForce)
		return RuleFollow, fmt.Sprintf("backlog near empty (wait %s), consumed %.0f/s of %.0f/s: keeping %.0f/s", secs(v.wait), v.consumed, v.produced, tc.rate)
	}
	tc.rate, tc.release = v.law, 0
	return RuleFollow, fmt.Sprintf("backlog small (wait %s), consumed %.0f/s of %.0f/s: capacity %.0f/s", secs(v.wait), v.consumed, v.produced, v.capacity)
}

// exactPosition reports whether st's position is the consumer's own, as
// it consumes: reported by the consumer (idle or with work in hand), or
// committed more than twice per observation (not estimated between
// commits). Its lag is then work waiting, messages in flight, or written
// since an idle report, not uncommitted work.
func exactPosition(st *lag.State, v *reading) bool {
	return st.Source == lag.SourceConsumer || (fromCommits(st) && v.cadence <= v.dt/2)
}

// signal completes d from the rate in force: hard age, the signal and its
// retry-after, the partitions to avoid, the rule and the reason.
func (c *Controller) signal(tc *control, d *Decision, st *lag.State, p *Policy, v *reading, rule Rule, reason string) {
	proc := p.ProcessingTime.Seconds()
	avoid, fewBad := v.avoid, v.fewBad
	// Hard age: stop when a new message would be dead on arrival or the
	// head is past it (unless only a few partitions are); once stopped,
	// stay stopped until both the head is under the hard age and a new
	// message's wait is back within the budget (hysteresis: the head age
	// lags the wait, so without it the signal would flap stop, slow-down,
	// stop while the backlog drains).
	headOver := v.headAge > p.HardAge.Seconds() && !fewBad
	hardStop := p.HardAge > 0 && ((!math.IsInf(v.wait, 1) && v.wait+proc > p.HardAge.Seconds()) || headOver ||
		(tc.hardStopped && v.wait > v.budget))
	tc.hardStopped = hardStop
	stopped := st.Status == lag.StatusStopped

	d.Capacity, d.CapacityKnown = v.capacity, v.engaged && (v.measured || tc.saturated)
	d.TargetWait = time.Duration(v.setWait * float64(time.Second))
	d.Wait = waitDuration(v.wait)
	d.AvoidPartitions, d.PartitionShares = avoid, v.shares
	// others: the rate the partitions not avoided get (see withShares).
	others := d.Rate
	if tc.limited {
		others = max(tc.rate, p.MinRate)
		d.Rate = max(withShares(tc.rate, v.shares), p.MinRate)
	}
	switch {
	case stopped || hardStop:
		d.Signal = SignalStop
		d.Rate = p.MinRate
		if hardStop && !stopped {
			// Say what passed the hard age: the head, or the wait a new
			// message would have (the head may be well under it), or
			// neither any more (held until the wait is within budget).
			rule = RuleHardAge
			head := st.HeadAge.Round(time.Millisecond)
			switch {
			case headOver:
				reason = fmt.Sprintf("head age %s past the hard age %s (a new message would wait %s + processing): %s", head, p.HardAge, secs(v.wait), reason)
			case !math.IsInf(v.wait, 1) && v.wait+proc > p.HardAge.Seconds():
				reason = fmt.Sprintf("a new message would wait %s + processing, past the hard age %s (head age %s): %s", secs(v.wait), p.HardAge, head, reason)
			default:
				reason = fmt.Sprintf("stopped for the hard age %s until a new message's wait (%s) is within the budget %s (head age %s): %s", p.HardAge, secs(v.wait), secs(v.budget), head, reason)
			}
		}
	case tc.limited && (v.wait > v.setWait || v.binding || others < v.capacity):
		d.Signal = SignalSlowDown
		d.RetryAfter = retryAfter(v.backlog, v.setBacklog, v.capacity, others, v.dt, c.cfg.MaxRetryAfter)
	case len(avoid) > 0:
		d.Signal = SignalAvoidPartitions
		if !tc.limited {
			rule = RuleAvoidPartitions
		}
	}
	if len(avoid) > 0 {
		reason += fmt.Sprintf("; partitions %v late (head older than %s or wait over budget; their lag of %.0f left out of the wait, producers write around them)", avoid, p.MaxAge, v.lateLag)
		// The rates the rules name are the other partitions' (the law's);
		// with shares the decision grants more (withShares): say so, or
		// a reason reads "probing from 2890/s" on a rate of 3083/s.
		if d.Signal != SignalStop && tc.limited && math.RoundToEven(d.Rate) != math.RoundToEven(others) {
			reason += fmt.Sprintf("; %.0f/s for the other partitions, %.0f/s in all with the late ones' shares", others, d.Rate)
		}
	}
	d.Rule, d.Reason = rule, reason
	d.Then = plan(d, v, p)
}

// plan is what follows d, a decision made for a bounded time (see
// [Plan]): after a pause (a step down, a drain; see planAfter), the rate
// the law is projected to give; after a probe that raised the rate above
// the capacity the controller works with, that capacity, two intervals on
// (the probe is answered by the next decision, due one interval on; a
// probe that keeps a rate plans nothing, so that a rate kept keeps its
// lease version). nil for any other decision, a stop, or when the plan
// would not lower (a probe) or raise (a pause) the rate.
func plan(d *Decision, v *reading, p *Policy) *Plan {
	if d.Signal == SignalStop || math.IsInf(d.Rate, 1) {
		return nil
	}
	var r, after float64
	switch d.Rule {
	case RuleStepDown, RuleDrain:
		r, after = planAfter(v)
	case RuleProbe, RuleRelearn, RuleProbeRestored:
		if v.raised {
			r, after = v.capacity, 2*v.dt
		}
	}
	if !(r > 0) || math.IsInf(r, 1) || !(after > 0) {
		return nil
	}
	rate := max(withShares(r, v.shares), p.MinRate)
	probe := d.Rule == RuleProbe || d.Rule == RuleRelearn || d.Rule == RuleProbeRestored
	if probe && rate >= d.Rate || !probe && rate <= d.Rate {
		return nil
	}
	return &Plan{At: d.At.Add(time.Duration(after * float64(time.Second))), Rate: rate}
}

// planAfter is what follows a pause (a step down or a drain: the law at
// 0): the rate, msg/s, and in how many seconds it holds. A step down
// pauses for one interval and decides on the next, clean measurement; a
// drain admits nothing until the wait is back within the budget, and the
// law then ramps up to the capacity as the backlog falls to the setpoint.
// Both are projected at the capacity the decision worked with, but no
// more than the consumer showed over this interval (which, on a step
// down, still overstates the new capacity): the backlog then drains at
// that rate, and the law at the projected backlog is the rate. A step
// down's rate follows one interval on; a drain's once the projected
// backlog is back at the setpoint (the law's rate there is the capacity).
// Each comes one more interval later than that: the next decision is due
// by then and, pushed on change, reaches the producers before (a
// follower's replication adds tens of milliseconds), so a plan takes
// effect only when no newer decision arrived. 0: nothing to plan (no
// capacity measured, or the law still at 0 after the pause).
//
// A pause kept because nothing was committed since (stillAfterPause)
// plans nothing: its capacity is the one from before the drop, and a plan
// on it re-opened producers at ~1,800/s for a hung member, to take effect
// at a daemon restart or a lost push (review-keptpause, session 25).
func planAfter(v *reading) (float64, float64) {
	if v.stillHead {
		return 0, 0 // nothing measured since the pause: no capacity to plan on
	}
	c := v.capacity
	if v.consumed > 0 {
		c = min(c, v.consumed)
	}
	if !(c > 0) || math.IsInf(c, 1) || v.dt <= 0 {
		return 0, 0
	}
	hold := v.dt
	if !v.stepDown {
		hold = max((v.backlog-v.setWait*c)/c, v.dt)
	}
	backlog := max(v.backlog-c*hold, 0)
	rate := min(max(c+(v.setWait*c-backlog)/lawTau(v), 0), c)
	return rate, hold + v.dt
}

// withShares is the topic's rate that leaves rate to the partitions
// producers do not avoid: rate, msg/s, is what the law sets for them (their
// capacity, see leaveOutLate), and the rate in force binds every record,
// the keyless records drawn for an avoided partition's share (and the
// keyed records let through for it) too. Set to rate, the others got rate
// less those shares, below their capacity whenever the law is (filling up
// to the setpoint), and the next observation measured that as their
// capacity: a topic limited while partition 0 was fed 6% fell from 298/s
// to 218/s over 10 s (lagbridge bench --hot-partition at 250 ms on kfake).
func withShares(rate float64, shares []PartitionShare) float64 {
	return rate / (1 - min(sumShares(shares), 0.5))
}

// sumShares is the sum of the shares, at least 0.
func sumShares(shares []PartitionShare) float64 {
	var s float64
	for _, ps := range shares {
		s += max(ps.Share, 0)
	}
	return s
}

// retryAfter is the time the backlog above the setpoint takes to drain at
// the net rate capacity - rate, at least one interval, at most max.
func retryAfter(backlog, setBacklog, capacity, rate, dt float64, maxWait time.Duration) time.Duration {
	s := dt
	switch {
	case backlog > setBacklog && capacity > rate:
		s = max((backlog-setBacklog)/(capacity-rate), dt)
	case backlog > setBacklog:
		return maxWait
	}
	return min(time.Duration(s*float64(time.Second)), maxWait)
}

// lateParts returns the partitions producers should avoid: those with lag
// whose head is older than MaxAge, or whose predicted wait (lag over the
// partition's own consume rate since its previous move; unknown while a
// position read from commits has not moved and its commit is not overdue,
// see partCadence; for a still position from the consumer's reports, see
// reportedWait, and one that moved is listed by its head only, see
// polledWait; plus, while more is written to it than it drains, the
// growth of its wait over one more interval, until the next decision
// takes effect; on first sight, lag over its share of the target's
// consume rate) reaches the budget
// while the head is past the setpoint's share of the budget (s·L; 0.5 s
// of a 2 s budget, see lateHead). The list is returned only while
// it holds fewer than AvoidBelow of the partitions (and there are at least
// two), and some partition not listed was written to since the last
// observation: "a few lag, most are fine", and the producers write to the
// others; fewBad reports that. (Producers that write to the late
// partitions only, keyed records, would have their lag left out of the
// wait for good.)
//
// Once listed, a partition stays listed (hysteresis: a partition freed at
// its first empty sample is refilled at once by producers' sticky
// partitioners, by a whole batch) until it was comfortably inside the
// deadline (no backlog, or its head and wait within the target wait) for
// avoidCalm observations in a row, and, when the rate its consumer was
// seen to drain it at while it left work behind (its capacity) is below
// the share of the produce rate it would get back, for avoidProbe
// seconds (a trial; twice as long after each trial it failed, up to
// maxProbe). knownSlow lists a partition that drains less
// than half its share: the band between is hysteresis (at 250 ms the rate
// of a 20 msg/s consumer is read from 5 records, give or take one, and
// one read just over half its share freed it, at once listed again:
// TestSimHotPartitionTrialsBackOff).
//
// Head ages are taken at the commit (less v.since), as for the target.
func (c *Controller) lateParts(tc *control, st *lag.State, p *Policy, v *reading) (late []int32, fewBad bool) {
	dt, havePrev := partsSpan(tc, st, v)
	budget := p.Budget().Seconds()
	// A partition whose oldest message waited less than the setpoint's
	// share of the budget is not late, whatever its predicted wait says:
	// a healthy partition read through commits every few hundred
	// milliseconds shows that much lag, and a rate measured over a span
	// it was mostly idle in is its producers', not its consumer's; unless
	// its consumer's own rate is known and says so (see knownSlow).
	lateHead := c.cfg.Setpoint * budget
	if tc.parts == nil {
		tc.parts = make(map[int32]partTrack, len(st.Partitions))
	}
	listed := 0
	for _, pt := range tc.parts {
		if pt.late {
			listed++
		}
	}
	// The shares a freed partition gets, and (of the offer) an unlisted one.
	share := v.produced / float64(max(len(st.Partitions)-listed+1, 1))
	offerShare := max(v.produced, st.ProduceRate) / float64(max(len(st.Partitions)-listed, 1))
	tc.gen++
	othersKept := keptUpSomewhere(tc, st)
	v.rise = sharedRise(tc, st, v, dt)
	others := false // a partition not late was written to
	for _, ps := range st.Partitions {
		pt, had := tc.parts[ps.Partition]
		head := max(ps.HeadAge.Seconds()-v.since, 0)
		next := trackPart(pt, had, &ps, st, dt)
		next.gen = tc.gen
		wait, loop := partWait(pt, next, had, havePrev, &ps, st, v)
		// A wait that is the poll loop's (loop) is the target's business:
		// it lists no partition (see polledWait).
		isLate := ps.Lag > 0 && (head > p.MaxAge.Seconds() || (wait >= budget && head > lateHead && !loop))
		isLate = isLate || (!loop && had && othersKept && knownSlow(pt, next, head, partCadence(&ps, v), budget, offerShare))
		if (v.shadow || v.rise) && !pt.late && head <= p.MaxAge.Seconds() {
			// A stall the observer shared, or one every partition's
			// head shows, lists no partition by its wait: the listed
			// ones stand (see observerStall, sharedRise).
			isLate = false
		}
		if v.rise && !pt.late {
			next.rate, next.full = pt.rate, pt.full // nothing learned
		}
		next.capSeen = next.capSeen || next.full
		if (isLate || pt.late) && next.rate <= 0 && ps.Lag > 0 && ps.CommitRate > 0 && !math.IsInf(ps.CommitRate, 0) {
			// Not measured here yet: what the tracker measured from its
			// commits while it had a backlog.
			next.rate = ps.CommitRate
		}
		next.inAvg = pt.inAvg + min(dt, 1)*(next.in-pt.inAvg)
		isLate = keepLate(tc, pt, &next, had, &ps, st, v, isLate, head, wait, share, dt)
		tc.parts[ps.Partition] = next
		if isLate {
			late = append(late, ps.Partition)
		} else if !had || ps.End > pt.pos+pt.lag || next.inAvg >= 1 {
			// Written to since the last observation, or at a message a
			// second or more over about the last second (observed every
			// 250 ms, a topic slowed to a trickle has intervals without
			// a write, and dropping the list then put the late
			// partition's backlog back in the topic's wait), or first
			// seen (no evidence against it): producers do write around
			// the late partitions.
			others = true
		}
	}
	pruneParts(tc, len(st.Partitions))
	n := len(st.Partitions)
	if n < 2 || len(late) == 0 || !others || float64(len(late)) >= c.cfg.AvoidBelow*float64(n) {
		return nil, false
	}
	slices.Sort(late)
	return late, true
}

// keepLate sets a partition's keyless rate (partLimit) and hysteresis
// (holdLate) after an observation that judged it isLate (or not) now, in
// next, and returns whether it stays listed. Between its commits (see
// betweenCommits), a partition producers avoid (listed at the last
// decision) shows nothing new: its hold and its rate stand, and the
// rate's growth at its next commit counts the time since the last one;
// what its rate adds beyond its drain is spread over its commit cadence
// (see partLimit).
func keepLate(tc *control, pt partTrack, next *partTrack, had bool, ps *lag.PartitionState, st *lag.State, v *reading, isLate bool, head, wait, share, dt float64) bool {
	avoided := slices.Contains(tc.last.AvoidPartitions, ps.Partition)
	between := avoided && betweenCommits(pt, had, ps, dt)
	span := dt
	if !pt.freshAt.IsZero() {
		span = st.At.Sub(pt.freshAt).Seconds()
	}
	if !between {
		next.freshAt = st.At
	}
	h := 1.0
	if avoided {
		h = max(commitCadence(ps, dt), 1)
	}
	next.limit = partLimit(pt, *next, partBacklog(ps, next.rate, st.At, v), v.setWait, span, h, between)
	isLate = holdLate(pt, next, isLate, between, ps.Lag, head, wait, v.setWait, share, dt)
	if !isLate {
		next.limit = 0
	}
	return isLate
}

// sharedRise reports whether st shows a stall of the whole consumer while
// some partition is listed (at the last decision): the interval measured
// a commit (v.measured), and every partition not listed has lag, a known
// head older than at the observation before (0 if it had no lag then)
// but not past half the budget, and drained less than half the rate its
// consumer was seen to drain it at (a saturated consumer drains at its
// rate; a stalled one does not). A loaded machine stalls the consumer of
// every partition at once, the observer on time (no observerStall's
// shadow): each healthy partition's head rose with the clock while its
// consumer drained 1-14 records (at most 0.41 of its rate seen before),
// which read as a wait over the budget or a slow drain (knownSlow), at
// once or from the rate learned there, and listed one to five healthy
// partitions beside the slow one. With half the partitions listed or
// more the list was dropped (AvoidBelow), and the hysteresis held the
// healthy ones listed for seconds after the stall (lagbridge bench
// --hot-partition on real Kafka 4.3.1 at load 11-15: the topic drained,
// saturated, stepped down or probed in 8-49 decisions of a run;
// TestControllerSharedRiseKeepsList). Such a reading lists no partition
// by its wait or its drain (one whose head is past MaxAge is) and teaches
// no partition not listed a consume rate: the listed partitions stand on
// their own evidence, and what every partition shows is the topic's law's
// to read, as it is (a stall of the consumer is believed at once, see
// observerStall). A first form also held the topic's law (capacity kept,
// the rate in force kept) until those heads passed half the budget: a
// real drop of the whole consumer's capacity while a partition was listed
// was then believed only once a new message would be dead on arrival (at
// 250 ms, 15 msg/s a partition: limited 1 s later than without the rule,
// 244 messages dead in 10 s against 0; TestControllerSharedRiseDropBelieved).
// A whole consumer that keeps slowing lists its partitions by their wait
// once their heads pass half the budget.
func sharedRise(tc *control, st *lag.State, v *reading, dt float64) bool {
	if len(tc.last.AvoidPartitions) == 0 || dt <= 0 || !v.measured {
		return false
	}
	others := false
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		pt, had := tc.parts[ps.Partition]
		drained := float64(ps.End-ps.Lag-pt.pos) / dt
		switch h := ps.HeadAge.Seconds(); {
		case !had:
			return false
		case slices.Contains(tc.last.AvoidPartitions, ps.Partition):
		case ps.Stale || !ps.HeadKnown || ps.Lag <= 0 || h <= pt.head || h > v.budget/2 || drained >= pt.rate/2:
			return false
		default:
			others = true
		}
	}
	return others
}

// partsSpan is the span, seconds, the partitions' rates of st are
// measured over, and whether an earlier reading of them is at hand: the
// interval, or for the first fresh decision the span since the
// partitions were recorded at the reading before it (see sightParts),
// which it consumes.
func partsSpan(tc *control, st *lag.State, v *reading) (dt float64, havePrev bool) {
	dt, havePrev = v.dt, tc.has
	if !tc.has && !tc.partsAt.IsZero() && st.At.After(tc.partsAt) {
		dt, havePrev = st.At.Sub(tc.partsAt).Seconds(), true
	}
	tc.partsAt = time.Time{}
	return dt, havePrev
}

// pruneParts forgets the partitions the reading of generation tc.gen did
// not show (it showed n).
func pruneParts(tc *control, n int) {
	if len(tc.parts) <= n {
		return
	}
	for id, pt := range tc.parts {
		if pt.gen != tc.gen {
			delete(tc.parts, id)
		}
	}
}

// knownSlow reports whether a partition is late by its own drain whatever
// its head says against lateHead (see lateParts): its consumer's rate was
// measured between two moves that left work behind (next.full: its
// capacity, not the rate its producers fed it), the work it holds now was
// there in part at the last observation (its position is short of that
// observation's end), and at that rate either it holds the budget or more,
// or it drains less than half the share of the produce rate it gets
// (share, of the producers' offer) while its head is older than its commit
// cadence (cad: what a healthy partition read through commits shows):
// keyless producers write to it faster than it drains, and its backlog can
// only grow. The caller
// checks that the consumer kept up on some other partition (see
// keptUpSomewhere): a stall of the whole consumer leaves every partition's
// work behind, and is the target's business. At 250 ms on kfake a
// partition whose consumer slowed to 20 msg/s drained 5 of its 29 records
// (24 left, 1.2 s of its work, head 0.61 s, a share of 50 msg/s): under
// the head gate's wait test it stayed unlisted until the sticky
// partitioner's next run put 30 more on it (lagbridge bench
// --hot-partition; TestControllerSlowPartitionListedByItsDrain).
func knownSlow(pt, next partTrack, head, cad, budget, share float64) bool {
	if next.lag <= 0 || pt.lag <= 0 || next.pos >= pt.pos+pt.lag || !next.full || next.rate <= 0 {
		return false
	}
	return float64(next.lag)/next.rate >= budget || (next.rate < share/2 && head > cad)
}

// keptUpSomewhere reports whether, on some partition that had lag at the
// previous observation, the consumer's position has passed that
// observation's end since: it kept up there.
func keptUpSomewhere(tc *control, st *lag.State) bool {
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if pt, had := tc.parts[ps.Partition]; had && pt.lag > 0 && !ps.Stale && ps.End-ps.Lag >= pt.pos+pt.lag {
			return true
		}
	}
	return false
}

// trackPart is a partition's record after this observation: its position
// and lag, the rate its consumer drained it at between its last two moves
// while it had a backlog, and what was written to it (in) and drained
// (out) over the last interval.
func trackPart(pt partTrack, had bool, ps *lag.PartitionState, st *lag.State, dt float64) partTrack {
	pos := ps.End - ps.Lag
	next := partTrack{full: pt.full, capSeen: pt.capSeen, committed: ps.Committed, freshAt: pt.freshAt, pos: pos, lag: ps.Lag, rate: pt.rate, movePos: pt.movePos, moveAt: pt.moveAt, moveLag: pt.moveLag, probe: pt.probe, limit: pt.limit, head: ps.HeadAge.Seconds()}
	switch {
	case ps.Source != lag.SourceConsumer || ps.Reported.HeadTime.IsZero() || ps.Lag <= 0:
		// Nothing in hand: the next poll comes after this observation.
	case had && pos == pt.pos && !pt.handAt.IsZero():
		next.handAt, next.handLag = pt.handAt, pt.handLag
	default:
		next.handAt, next.handLag = st.At, ps.Lag
	}
	switch {
	case !had || ps.Stale:
		next.movePos, next.moveAt, next.moveLag = pos, st.At, ps.Lag
	case pos != pt.movePos:
		// Moved: if it had a backlog all along, it drained at its
		// capacity since the last move. When it drained all the lag it
		// had at that move (with positions from commits, lag it had
		// consumed already), it may have run out of work: what it
		// drained is a lower bound of its capacity, which only raises
		// the rate known (fed a trickle, a slow consumer drains the
		// trickle, not its capacity).
		if pt.lag > 0 && ps.Lag > 0 && st.At.After(pt.moveAt) && !pt.moveAt.IsZero() {
			r := float64(pos-pt.movePos) / st.At.Sub(pt.moveAt).Seconds()
			next.full = true
			if pos-pt.movePos >= pt.moveLag {
				next.full = pt.full && pt.rate >= r
				r = max(r, pt.rate)
			}
			next.rate = r
		}
		next.movePos, next.moveAt, next.moveLag = pos, st.At, ps.Lag
	}
	if had && !ps.Stale && dt > 0 {
		next.in = float64(max(ps.End-(pt.pos+pt.lag), 0)) / dt
		next.out = float64(max(pos-pt.pos-ps.Skipped, 0)) / dt
	}
	return next
}

// partWait is the predicted wait of a message written to the partition
// now, seconds (see lateParts); -1 when unknown, +Inf when its consumer
// is overdue. loop reports that it is the wait of the poll loop that
// drains all the target's partitions (see polledWait), not the
// partition's own.
func partWait(pt, next partTrack, had, havePrev bool, ps *lag.PartitionState, st *lag.State, v *reading) (wait float64, loop bool) {
	dt, pos := v.dt, ps.End-ps.Lag
	// polled: a position from the consumer's reports, of a target whose
	// consumption was measured: its wait is the poll loop's (see
	// polledWait) once it moved or is first seen, unless the reporter
	// finishes the partition's records at its own pace (ownPace: a worker
	// per partition) and the loop keeps up: its moves are then its own
	// drain. Workers that share one capacity (a pool, a pacer) say
	// ownPace too; while the loop is behind, each partition's drain is
	// its share of that capacity, and read as its own it listed healthy
	// partitions at heads of 0.4-1.3 s (TestControllerOwnPaceSharedPoolNotListed).
	polled := ps.Source == lag.SourceConsumer && v.measured && v.consumed > 0 && (!ps.Reported.OwnPace || polledWait(st, v) > v.setWait)
	wait = -1.0 // unknown
	if ps.Lag > 0 && had && havePrev && dt > 0 && !ps.Stale && !pt.moveAt.IsZero() {
		// Its consume rate over the span since its previous move: a
		// position read from commits moves only when the consumer
		// commits, so an interval without a move measures nothing
		// until its commit is overdue (as for the target, see
		// consumption).
		span, cad := st.At.Sub(pt.moveAt).Seconds(), partCadence(ps, v)
		switch {
		case pos != pt.movePos && polled:
			return polledWait(st, v), true
		case pos != pt.movePos && span > 0:
			drain := float64(pos-pt.movePos) / span
			wait = float64(ps.Lag) / drain
			if next.in > drain {
				// What is written to it beyond what it drains until
				// the next decision takes effect (one interval) waits
				// longer still.
				wait += (next.in/drain - 1) * dt
			}
		case ps.Source == lag.SourceConsumer:
			wait = reportedWait(pt, ps, st, v)
		case cad <= 0 || span > 1.5*cad+dt:
			wait = math.Inf(1)
		}
	} else if ps.Lag > 0 && !had && !ps.Stale {
		// First sight: its own rate is not known yet; take the rate
		// the tracker measured from its commits, else its share of the
		// target's. A partition that holds the target's backlog alone
		// is late at once, before the target's wait, made of its lag,
		// drains the whole topic for it.
		switch {
		case polled:
			return polledWait(st, v), true
		case ps.CommitRate > 0 && !math.IsInf(ps.CommitRate, 0):
			wait = float64(ps.Lag) / ps.CommitRate
		case v.measured && v.consumed > 0:
			wait = float64(ps.Lag) * float64(len(st.Partitions)) / v.consumed
		}
	}
	return wait, false
}

// polledWait is the wait of a new message on a partition whose position
// comes from the consumer's reports and moved (or is first seen),
// seconds: the target's lag over its consume rate. The hook reports a
// position as the poll hands records out (consumerclient), and the loop
// works through a poll's records before it polls again: a partition's
// records wait for the polls ahead of them, whichever partitions those
// hold, and the loop drains them all at one rate. A partition's own
// moves measure what its polls held, not what its consumer can do: read
// as its drain, a poll of 5 records over a second is 5 msg/s, and a
// trickle partition (or one a full poll left mostly out) with a lag of
// 12 read as a 2.4 s wait, listed late while the consumer kept up; its
// drain was then taken out of the target's (see leaveOutLate), and the
// quota locked near 0. The loop's wait is the target's business, for
// its law: it lists no partition (lateParts), and serves only to see a
// listed one comfortably inside the deadline again. Such a partition is
// listed when its exact head is past MaxAge; one that stands still with
// work in hand is read by reportedWait.
func polledWait(st *lag.State, v *reading) float64 {
	return float64(st.Lag) / v.consumed
}

// reportedWait is the predicted wait of a partition whose position, from
// the consumer's reports (lag.SourceConsumer), did not move while it has
// lag, seconds; -1 when unknown. The position moves once per poll, so it
// standing still is a poll in hand or a consumer waiting for records, not
// a consumer that stopped (read as one, the partition was listed late
// between two polls and its drain taken out of the target's, see
// leaveOutLate); its head age, from the record in hand, is exact and
// decides as it is. As for the target (see reportStill): the poll in hand
// was taken at or before the observation its position was first seen at
// (partTrack.handAt) and held at most the lag seen then, so the consumer
// drains it slower than that lag over the time since; the wait is the
// lag over that bound once it is below the rate the partition was seen
// to drain at (with no such rate, once the poll has lasted longer than
// the budget), else the lag over that rate, else unknown. A report with
// nothing in hand measures nothing: unknown.
func reportedWait(pt partTrack, ps *lag.PartitionState, st *lag.State, v *reading) float64 {
	if ps.Reported.HeadTime.IsZero() || pt.handAt.IsZero() || pt.handLag <= 0 {
		return -1
	}
	repAt := ps.Reported.At
	if repAt.IsZero() || repAt.After(st.At) {
		repAt = st.At
	}
	drain := pt.rate
	if busy := repAt.Sub(pt.handAt).Seconds(); busy > v.dt {
		bound := float64(pt.handLag) / busy
		if (drain > 0 && bound < drain) || (drain <= 0 && busy > v.budget) {
			drain = bound
		}
	}
	if drain <= 0 {
		return -1
	}
	return float64(ps.Lag) / drain
}

// holdLate applies the hysteresis and the trials of lateParts to a
// partition judged isLate (or not) now, recording them in next, and
// returns whether it stays listed. A listed partition is not freed at an
// observation between two of its commits (between, see betweenCommits):
// its calm observations count, and the release waits for a commit that
// shows it comfortable too.
func holdLate(pt partTrack, next *partTrack, isLate, between bool, lagMsgs int64, head, wait, setWait, share, dt float64) bool {
	probe := cmp.Or(pt.probe, avoidProbe)
	if pt.late && !isLate {
		comfortable := lagMsgs <= 0 || (head <= setWait && wait >= 0 && wait <= setWait)
		if comfortable {
			next.calm, next.calmFor = pt.calm+1, pt.calmFor+dt
		}
		// Slow: its consumer's rate, measured at least once while it
		// left work behind (its capacity, see knownSlow), is below the
		// share it would get back. A partition only ever seen draining
		// everything it was given shows its producers' rate
		// (TestControllerFirstSightHoldNotSlow).
		slow := next.capSeen && next.rate > 0 && next.rate < share
		isLate = next.calm < avoidCalm || (slow && next.calmFor < probe)
		if fedLimited(pt, *next) {
			// Fed at its rate, it shows a recovered consumer by itself:
			// listed until that rate reaches what it would get back.
			slow = false
			isLate = next.calm < avoidCalm || next.limit < share
		}
		isLate = isLate || between
		if !isLate && slow {
			next.trial = dt // tried again: watch it
		}
	}
	switch {
	case isLate && !pt.late && pt.trial > 0:
		// Late again soon after a trial: the next one waits longer.
		next.probe = min(2*probe, maxProbe)
	case !isLate && pt.trial > 0 && pt.trial < probeWatch:
		next.trial = pt.trial + dt
	case !isLate && pt.trial > 0:
		next.probe = 0 // it passed
	}
	next.late = isLate
	if !isLate {
		next.calm, next.calmFor, next.capSeen = 0, 0, false
	}
	return isLate
}

// partCadence is the commit cadence a partition's position is read with,
// seconds: its own learned one, else the target's (v.cadence); 0 for a
// position that moves whenever the consumer consumes (an estimate, a
// consumer's report).
func partCadence(ps *lag.PartitionState, v *reading) float64 {
	switch ps.Source {
	case "", lag.SourceCommits, lag.SourceFirstSight:
		if ci := ps.CommitInterval.Seconds(); ci > 0 {
			return ci
		}
		return v.cadence
	}
	return 0
}

func secs(s float64) string {
	if unbounded(s) {
		return "unbounded"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

// unbounded reports whether a wait of s seconds is infinite, not a
// number, or beyond what a Duration holds.
func unbounded(s float64) bool {
	return math.IsNaN(s) || s >= float64(math.MaxInt64)/float64(time.Second)
}

// waitDuration is a wait in seconds as a Decision's Wait: lag.Never when
// it is unbounded, not a number, or beyond what a Duration holds (a
// backlog over a capacity estimate near 0: converted as it was, the wait
// read -2562047h47m16.854775808s in a hard-age reason of the demo).
func waitDuration(s float64) time.Duration {
	if unbounded(s) {
		return lag.Never
	}
	return time.Duration(s * float64(time.Second))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// StandIn says whether the decisions are served by a replica standing in
// for a silent leader (a follower serving its own leases while the
// leader's are not renewed): producers may still hold the leader's
// leases, or another replica's, and leave this controller's rate unused
// for that. While on, a limited target that is caught up with its rate
// unused keeps the rate in force (RuleProbe, saying so) instead of
// probing it up and releasing it; everything else, cuts included, is
// decided as usual. Off by default. Not safe for concurrent use, like
// Step.
func (c *Controller) StandIn(on bool) { c.standIn = on }

// Adopt makes another replica's decision d the rate in force of its
// target, for a controller that steps the same target without its
// decisions being obeyed (a follower: producers obey the leader's leases).
// A limited d (a finite Rate) leaves the target limited at d.Rate; an
// unlimited one leaves it not limited. A d admitting nothing (Rate 0: a
// pause on a step down, a stop) is what the leader holds for an
// observation, not a rate to go on from: the rate in force becomes
// d.Capacity, the consume rate it worked with (a caught-up target limited
// at 0 is released). A release then takes ReleaseAfter more observations
// of the rate unused than usual: the producers were given the other
// replica's leases, not this controller's rate, and take some
// observations to use a rate they are given on a takeover; meanwhile a
// rate left unused is kept, not probed up (it would compound, unused, to
// several times the capacity, and the producers would use it all at
// once). The next Step
// goes on from there with this controller's own measurements, so that a
// follower that takes over continues the leader's regime (probing from its
// rate, following, releasing) instead of its own, which had diverged.
// Nothing is done for a target without a record (one this controller
// never stepped, or forgot). Not safe for concurrent use, like Step.
func (c *Controller) Adopt(d Decision) {
	tc := c.targets[d.Target]
	if tc == nil {
		return
	}
	tc.release = -c.cfg.ReleaseAfter
	tc.limited = !d.IsUnlimited() && !math.IsNaN(d.Rate) && d.Rate >= 0
	if !tc.limited {
		// A release the leader decided between two of this follower's
		// readings ends the episode restoredProbe reads (satCap).
		tc.satCap, tc.restored = 0, false
	}
	if tc.limited {
		// The rate of the partitions not avoided (see withShares).
		tc.rate = d.Rate * (1 - min(sumShares(d.PartitionShares), 0.5))
		if tc.rate <= 0 && d.Capacity > 0 && !math.IsInf(d.Capacity, 1) {
			tc.rate = d.Capacity
		}
	}
}

// onceObs reports whether v reads a consumer that commits about once per
// observation (a cadence of more than half an interval, at most one and a
// half).
func onceObs(v *reading) bool { return v.cadence > v.dt/2 && v.cadence <= 1.5*v.dt }

// queuedReading reports whether v shows work queued: lag, the head older
// than E/2 (or unknown).
func queuedReading(v *reading) bool {
	return v.lag > 0 && (!v.headKnown || v.headAge > v.engageWait/2)
}
