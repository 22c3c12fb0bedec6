package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/ttl"
)

// ErrInvalidOptions is wrapped by every problem [Options.Validate] reports.
var ErrInvalidOptions = errors.New("bench: invalid options")

// Class is one producer of the scenario: its id, the criticality of its
// messages and its share of the offered load.
type Class struct {
	// Producer is the producer id (the SDK's Config.Producer and the
	// policy's producers[].id).
	Producer string
	// Criticality of every message of this producer.
	Criticality ttl.Criticality
	// Share of the offered load, in (0, 1]; the shares of a scenario add
	// up to 1.
	Share float64
}

// Scenario is what one run does over time: the consumer's capacity in
// three phases and the deadline its callers use.
type Scenario struct {
	// Normal and Slow are the consumer's capacity in msg/s: Normal in the
	// first and the last phase, Slow in the middle one.
	Normal, Slow float64
	// NormalFor, SlowFor and RecoverFor are the lengths of the three
	// phases.
	NormalFor, SlowFor, RecoverFor time.Duration
	// Deadline is the consumers' deadline: a message consumed more than
	// Deadline after it was produced is dead work. It is also the quota
	// policy's maxAge and the SDK's message TTL.
	Deadline time.Duration
	// Classes are the producers; at most four.
	Classes []Class
}

// DefaultScenario is issue 7's: 2,000 msg/s for 10 s, 400 msg/s for 20 s,
// 2,000 msg/s for 15 s; a 2 s deadline; three producers offering 20%
// (CRITICAL_PLUS), 30% (CRITICAL) and 50% (SHEDDABLE) of the load.
func DefaultScenario() Scenario {
	return Scenario{
		Normal: 2000, Slow: 400,
		NormalFor: 10 * time.Second, SlowFor: 20 * time.Second, RecoverFor: 15 * time.Second,
		Deadline: 2 * time.Second,
		Classes: []Class{
			{Producer: "checkout", Criticality: ttl.CriticalPlus, Share: 0.2},
			{Producer: "orders", Criticality: ttl.Critical, Share: 0.3},
			{Producer: "analytics", Criticality: ttl.Sheddable, Share: 0.5},
		},
	}
}

// Scaled returns s with its three phases multiplied by f (f > 0); rates and
// the deadline are kept.
func (s Scenario) Scaled(f float64) Scenario {
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f).Round(time.Millisecond) }
	s.NormalFor, s.SlowFor, s.RecoverFor = scale(s.NormalFor), scale(s.SlowFor), scale(s.RecoverFor)
	return s
}

// Duration is the length of a run: the three phases.
func (s Scenario) Duration() time.Duration { return s.NormalFor + s.SlowFor + s.RecoverFor }

// DropAt is when the capacity drops, from the start of the run.
func (s Scenario) DropAt() time.Duration { return s.NormalFor }

// RecoverAt is when the capacity is restored.
func (s Scenario) RecoverAt() time.Duration { return s.NormalFor + s.SlowFor }

// Capacity is the consumer's capacity in msg/s at d since the start.
func (s Scenario) Capacity(d time.Duration) float64 {
	if d >= s.DropAt() && d < s.RecoverAt() {
		return s.Slow
	}
	return s.Normal
}

// validate reports every problem of s.
func (s Scenario) validate() []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: scenario: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if !(s.Normal > 0) || !(s.Slow > 0) || math.IsInf(s.Normal, 0) || math.IsInf(s.Slow, 0) {
		add("capacities must be finite and > 0, got normal %v, slow %v", s.Normal, s.Slow)
	}
	if s.NormalFor <= 0 || s.SlowFor <= 0 || s.RecoverFor <= 0 {
		add("every phase must last > 0, got %v, %v, %v", s.NormalFor, s.SlowFor, s.RecoverFor)
	}
	if s.Deadline <= 0 {
		add("deadline must be > 0, got %v", s.Deadline)
	}
	if len(s.Classes) == 0 || len(s.Classes) > 4 {
		add("1 to 4 producer classes, got %d", len(s.Classes))
	}
	sum := 0.0
	for i, c := range s.Classes {
		if c.Producer == "" {
			add("classes[%d]: producer id is required", i)
		}
		if !c.Criticality.Valid() {
			add("classes[%d]: criticality %d is not one of the four", i, c.Criticality)
		}
		if !(c.Share > 0) || c.Share > 1 {
			add("classes[%d]: share %v must be in (0, 1]", i, c.Share)
		}
		sum += c.Share
	}
	if len(s.Classes) > 0 && math.Abs(sum-1) > 1e-6 {
		add("the shares add up to %v, not 1", sum)
	}
	return errs
}

// Broker names accepted in Options.Brokers.
const (
	BrokerKafka = "kafka"
	BrokerNATS  = "nats"
)

// The two modes of a run.
const (
	ModeNaive     = "naive"
	ModeLagbridge = "lagbridge"
)

// Options configure [Run]. The zero value of each field means its default.
type Options struct {
	// Scenario is the capacity profile, deadline and producer mix; the
	// zero value means DefaultScenario.
	Scenario Scenario
	// Scale multiplies the three phases (--short uses 0.4); zero
	// means 1.
	Scale float64
	// Loads are the offered loads as multiples of Scenario.Slow; nil means
	// 2, 5 and 10.
	Loads []float64
	// Rows are the matrix rows to run, in order; nil means FullMatrix.
	Rows []Row
	// Brokers keeps only the rows on these brokers (BrokerKafka,
	// BrokerNATS); nil keeps every row.
	Brokers []string
	// KafkaBrokers, when set, runs the Kafka rows against this real
	// cluster (seed addresses) instead of an embedded kfake.
	KafkaBrokers []string
	// NATSURL, when set, runs the NATS rows against this server instead
	// of an embedded one. It needs JetStream.
	NATSURL string
	// Bin is the resolution of the recorded series; zero means 100ms.
	Bin time.Duration
	// OutDir receives bench.md and bench.png; empty means "results".
	// Created when missing.
	OutDir string
	// Out receives the progress lines and the table; nil means discard.
	Out io.Writer
	// Log receives the daemon's and the SDK's logs; nil discards them.
	Log *slog.Logger
	// Phase is when each run starts its consumer against the daemon's
	// cycles (--phase); the zero value: at once.
	Phase StartPhase
}

func (o Options) withDefaults() Options {
	if o.Scenario.Classes == nil && o.Scenario.Normal == 0 {
		o.Scenario = DefaultScenario()
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Loads == nil {
		o.Loads = []float64{2, 5, 10}
	}
	if o.Rows == nil {
		o.Rows = FullMatrix()
	}
	if o.Brokers != nil {
		var keep []Row
		for _, r := range o.Rows {
			if slices.Contains(o.Brokers, r.Broker) {
				keep = append(keep, r)
			}
		}
		o.Rows = keep
	}
	if o.Bin == 0 {
		o.Bin = 100 * time.Millisecond
	}
	if o.OutDir == "" {
		o.OutDir = "results"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem of o (after defaults) at once, each
// wrapping ErrInvalidOptions; nil when o is valid.
func (o Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	for i, b := range o.Brokers {
		if b != BrokerKafka && b != BrokerNATS {
			add("brokers[%d] = %q is not %q or %q", i, b, BrokerKafka, BrokerNATS)
		}
	}
	o = o.withDefaults()
	errs = append(errs, o.Scenario.validate()...)
	if !(o.Scale > 0) || math.IsInf(o.Scale, 0) {
		add("scale must be finite and > 0, got %v", o.Scale)
	}
	if len(o.Loads) == 0 {
		add("at least one load")
	}
	for i, l := range o.Loads {
		if !(l > 0) || l > 100 {
			add("loads[%d] = %v must be in (0, 100]", i, l)
		}
	}
	if len(o.Rows) == 0 {
		add("no row to run")
	}
	for _, r := range o.Rows {
		errs = append(errs, r.validate()...)
	}
	if o.Bin < 10*time.Millisecond || o.Bin > time.Second {
		add("bin must be from 10ms to 1s, got %v", o.Bin)
	}
	if s := o.Scenario.Scaled(o.Scale); s.Duration() > 0 && s.Duration() < 10*o.Bin {
		add("a run of %v is shorter than ten bins of %v", s.Duration(), o.Bin)
	}
	return errors.Join(errs...)
}
