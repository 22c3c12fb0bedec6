package quota

import (
	"errors"
	"fmt"
	"math"
	"time"
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
