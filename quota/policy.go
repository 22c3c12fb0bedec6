package quota

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// ErrInvalidPolicy is wrapped by every problem [Policy.Validate] and
// [NewPolicies] report; each problem is a [*FieldError].
var ErrInvalidPolicy = errors.New("quota: invalid policy")

// FieldError is one problem with one field of a policy. Its message is
// "<field>: <problem>", so a caller can prefix the field with where the
// policy came from (see [PrefixFields]). It wraps [ErrInvalidPolicy].
type FieldError struct {
	// Field is the path of the field in the config's spelling, e.g.
	// "maxAge" or "policies[2].producers[0].weight".
	Field   string
	Problem string
	// sentinel is what Unwrap returns; nil means ErrInvalidPolicy.
	sentinel error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Unwrap returns [ErrInvalidPolicy], or [ErrInvalidConfig] for the problems
// of a [ControllerConfig] or [LeaseConfig].
func (e *FieldError) Unwrap() error {
	if e.sentinel != nil {
		return e.sentinel
	}
	return ErrInvalidPolicy
}

// PrefixFields returns err with prefix put in front of the Field of every
// [*FieldError] it holds (directly or joined with errors.Join); other errors
// are kept as they are. PrefixFields(nil, p) is nil.
func PrefixFields(err error, prefix string) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) && err == error(fe) {
		return &FieldError{Field: prefix + fe.Field, Problem: fe.Problem, sentinel: fe.sentinel}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = PrefixFields(e, prefix)
		}
		return errors.Join(out...)
	}
	return err
}

// Match selects the targets a policy applies to. Each non-empty field is a
// regular expression (RE2 syntax) that must match the whole name: it is
// anchored as ^(?:pattern)$, so "orders" matches only "orders" and
// "orders-.*" the orders- family. An empty field matches anything; the zero
// Match matches every target.
type Match struct {
	// Kind is "kafka" or "nats", compared exactly; empty matches both.
	Kind lag.Kind `json:"kind,omitempty" mapstructure:"kind"`
	// Cluster is matched against the target's cluster name.
	Cluster string `json:"cluster,omitempty" mapstructure:"cluster"`
	// Topic is matched against the Kafka topic or the NATS stream.
	Topic string `json:"topic,omitempty" mapstructure:"topic"`
	// Group is matched against the Kafka consumer group or the NATS
	// consumer.
	Group string `json:"group,omitempty" mapstructure:"group"`
}

// ProducerSpec is what a policy says about one producer.
type ProducerSpec struct {
	// ID is the producer id (the SDK's producer id; for Kafka client
	// quotas, the client.id). Required, unique within a policy.
	ID string `json:"id" mapstructure:"id"`
	// Weight is the producer's share within its criticality relative to
	// the others (weighted max-min fairness). Zero means 1; negative is
	// invalid.
	Weight float64 `json:"weight,omitempty" mapstructure:"weight"`
	// Criticality is the producer's class. The zero value is CRITICAL.
	// A listed producer's criticality overrides what it declares itself.
	Criticality Criticality `json:"criticality" mapstructure:"criticality"`
}

// EffectiveWeight is Weight, or 1 when Weight is zero.
func (s ProducerSpec) EffectiveWeight() float64 {
	if s.Weight == 0 {
		return 1
	}
	return s.Weight
}

// Policy says what the consumers of the matching targets can bear and who
// produces to them. The zero value is not valid: Name and MaxAge are
// required.
type Policy struct {
	// Name identifies the policy in logs, metrics and errors. Required,
	// unique within [Policies].
	Name string `json:"name" mapstructure:"name"`
	// Match selects the targets. The zero Match matches all.
	Match Match `json:"match" mapstructure:"match"`
	// MaxAge is the deadline the consumers really use: a message older
	// than this when it is consumed is dead work. Required, > 0. The
	// controller keeps the predicted wait of a new message under
	// MaxAge - ProcessingTime and, under sustained overload, steers it to
	// ControllerConfig.Setpoint of that (a quarter by default), or one
	// observation interval when that is less.
	MaxAge time.Duration `json:"maxAge" mapstructure:"maxAge"`
	// HardAge, when set, is the age beyond which retrying cannot help:
	// when the head is older, or a message produced now would wait longer
	// than HardAge - ProcessingTime (dead on arrival), the signal is stop.
	// Zero means no stop for age (the signal is then slow-down). When set
	// it must be >= MaxAge.
	HardAge time.Duration `json:"hardAge,omitempty" mapstructure:"hardAge"`
	// ProcessingTime is the consumer's typical processing time per
	// message, subtracted from MaxAge by the sizing rule:
	// backlog limit = consume rate x (MaxAge - ProcessingTime).
	// Zero by default; must be < MaxAge.
	ProcessingTime time.Duration `json:"processingTime,omitempty" mapstructure:"processingTime"`
	// MinRate is a floor in messages per second: the controller never
	// sets a rate below this in total, and the allocator splits it
	// across the producers by weight. Under stop (RuleHardAge,
	// RuleConsumerStopped) the leases carry it as their rate, but the
	// SDK admits nothing while a lease says stop (ErrStop); only a
	// Kafka client quota (kafkaClientQuota), which is set from the
	// rate, lets producers without the SDK send it then. Zero by
	// default: the rate may be cut to nothing.
	MinRate float64 `json:"minRate,omitempty" mapstructure:"minRate"`
	// Producers lists producers with their weight and criticality.
	// Producers not listed are governed by Unlisted. Optional, but a
	// policy that lists nobody serves every producer as unlisted.
	Producers []ProducerSpec `json:"producers,omitempty" mapstructure:"producers"`
	// Unlisted says what a producer id the policy does not list gets:
	// by default at most [DefaultMaxUnlisted] ids per topic, served at
	// SHEDDABLE below every listed producer; see [Unlisted].
	Unlisted Unlisted `json:"unlisted,omitzero" mapstructure:"unlisted"`

	// index maps a listed id to its place in Producers; set by
	// NewPolicies, so that Producer costs O(1) however many are listed.
	index map[string]int
	// Mode is enforce (the zero value) or advise.
	Mode Mode `json:"mode,omitempty" mapstructure:"mode"`
	// KafkaClientQuota opts the policy's Kafka targets into broker-native
	// client quotas for the listed producers (set by a publisher, not by
	// this package). Listed producers of such a policy take part in the
	// allocation even when they never report demand, since they cannot.
	KafkaClientQuota bool `json:"kafkaClientQuota,omitempty" mapstructure:"kafkaClientQuota"`
}

// DefaultMaxUnlisted is the number of unlisted producer ids a policy admits
// per topic when Unlisted.Max is zero.
const DefaultMaxUnlisted = 32

// MaxUnlistedLimit is the largest Unlisted.Max a policy may set.
const MaxUnlistedLimit = 100000

// UnlistedAdmission is what a policy does with producer ids it does not
// list: [AdmitSheddable] (the zero value means it) or [RefuseUnlisted].
type UnlistedAdmission string

// The unlisted admissions.
const (
	// AdmitSheddable serves unlisted ids at SHEDDABLE, below every
	// listed producer whatever their class and demand, at most
	// Unlisted.Max of them per topic. The default.
	AdmitSheddable UnlistedAdmission = "sheddable"
	// RefuseUnlisted gives every unlisted id a lease of rate 0 with the
	// signal stop.
	RefuseUnlisted UnlistedAdmission = "refuse"
)

// Unlisted is a policy's rule for producer ids it does not list. Any client
// that may reach the quota protocol can report under any id its token
// allows (every id when authentication is off), so an unlisted id is
// untrusted: it never takes part in the allocation above a listed producer,
// never shares a listed producer's floor while the policy lists anyone, and
// only so many of them are admitted per topic. The zero value admits
// [DefaultMaxUnlisted] ids per topic at SHEDDABLE.
//
// Admission is first come, first served and sticky: the first Max unlisted
// ids that report for a topic are admitted and stay so while they keep
// reporting; later ones get a stop lease of rate 0 (the reason says why)
// and are admitted, in the order they came, as admitted ones leave or
// expire, at the next allocation of the topic.
type Unlisted struct {
	// Admit is "sheddable" (the default, also for an empty value) or
	// "refuse".
	Admit UnlistedAdmission `json:"admit,omitempty" mapstructure:"admit"`
	// Max is the number of unlisted ids admitted per topic with admit
	// sheddable; beyond it they are refused. Zero means
	// [DefaultMaxUnlisted]; from 1 to [MaxUnlistedLimit]. Must be zero
	// with admit refuse.
	Max int `json:"max,omitempty" mapstructure:"max"`
}

// Refuses reports whether u refuses every unlisted id.
func (u Unlisted) Refuses() bool { return u.Admit == RefuseUnlisted }

// Limit is the number of unlisted ids u admits per topic: 0 when it
// refuses them, Max or [DefaultMaxUnlisted] otherwise.
func (u Unlisted) Limit() int {
	switch {
	case u.Refuses():
		return 0
	case u.Max > 0:
		return u.Max
	}
	return DefaultMaxUnlisted
}

// Budget is the wait a message may spend in the queue: MaxAge minus
// ProcessingTime.
func (p *Policy) Budget() time.Duration { return p.MaxAge - p.ProcessingTime }

// Producer returns the spec of the listed producer id: O(1) for a policy
// from [Policies], O(len(Producers)) for one built otherwise.
func (p *Policy) Producer(id string) (ProducerSpec, bool) {
	if p.index != nil {
		if i, ok := p.index[id]; ok && i < len(p.Producers) && p.Producers[i].ID == id {
			return p.Producers[i], true
		}
		return ProducerSpec{}, false
	}
	for _, s := range p.Producers {
		if s.ID == id {
			return s, true
		}
	}
	return ProducerSpec{}, false
}

// ClientQuotaFor reports whether the policy's Kafka client quotas reach
// producer: KafkaClientQuota is set and producer is listed ("": any
// producer, so some listed one).
func (p *Policy) ClientQuotaFor(producer string) bool {
	if !p.KafkaClientQuota {
		return false
	}
	if producer == "" {
		return len(p.Producers) > 0
	}
	_, ok := p.Producer(producer)
	return ok
}

// Validate returns every problem of p at once, joined with errors.Join, each
// a [*FieldError] wrapping [ErrInvalidPolicy] with a field path relative to
// the policy ("maxAge", "producers[1].weight"); nil when p is valid.
func (p *Policy) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if p.Name == "" {
		add("name", "is required")
	}
	switch p.Match.Kind {
	case "", lag.KindKafka, lag.KindNATS:
	default:
		add("match.kind", "must be %q, %q or empty, got %q", lag.KindKafka, lag.KindNATS, p.Match.Kind)
	}
	for _, f := range []struct{ name, pat string }{{"match.cluster", p.Match.Cluster}, {"match.topic", p.Match.Topic}, {"match.group", p.Match.Group}} {
		if _, err := compilePattern(f.pat); err != nil {
			add(f.name, "invalid pattern %q: %v", f.pat, err)
		}
	}
	if p.MaxAge <= 0 {
		add("maxAge", "is required and must be > 0, got %v", p.MaxAge)
	}
	if p.HardAge < 0 {
		add("hardAge", "must be >= 0, got %v", p.HardAge)
	} else if p.HardAge > 0 && p.MaxAge > 0 && p.HardAge < p.MaxAge {
		add("hardAge", "must be >= maxAge (%v) when set, got %v", p.MaxAge, p.HardAge)
	}
	if p.ProcessingTime < 0 {
		add("processingTime", "must be >= 0, got %v", p.ProcessingTime)
	} else if p.MaxAge > 0 && p.ProcessingTime >= p.MaxAge {
		add("processingTime", "must be < maxAge (%v), got %v", p.MaxAge, p.ProcessingTime)
	}
	if p.MinRate < 0 || math.IsNaN(p.MinRate) || math.IsInf(p.MinRate, 0) {
		add("minRate", "must be a finite number >= 0, got %v", p.MinRate)
	}
	seen := make(map[string]int, len(p.Producers))
	for i, s := range p.Producers {
		if s.ID == "" {
			add(fmt.Sprintf("producers[%d].id", i), "is required")
		} else if j, dup := seen[s.ID]; dup {
			add(fmt.Sprintf("producers[%d].id", i), "duplicates producers[%d] (%q)", j, s.ID)
		} else {
			seen[s.ID] = i
		}
		if s.Weight < 0 || math.IsNaN(s.Weight) || math.IsInf(s.Weight, 0) {
			add(fmt.Sprintf("producers[%d].weight", i), "must be a finite number >= 0 (0 means 1), got %v", s.Weight)
		}
		if !s.Criticality.Valid() {
			add(fmt.Sprintf("producers[%d].criticality", i), "invalid value %d", uint8(s.Criticality))
		}
	}
	if !p.Mode.Valid() {
		add("mode", "must be advise or enforce, got %q", string(p.Mode))
	}
	switch p.Unlisted.Admit {
	case "", AdmitSheddable:
		if p.Unlisted.Max < 0 || p.Unlisted.Max > MaxUnlistedLimit {
			add("unlisted.max", "must be from 1 to %d (0 means %d), got %d", MaxUnlistedLimit, DefaultMaxUnlisted, p.Unlisted.Max)
		}
	case RefuseUnlisted:
		if p.Unlisted.Max != 0 {
			add("unlisted.max", "must not be set with admit %q (no unlisted id is admitted), got %d", RefuseUnlisted, p.Unlisted.Max)
		}
	default:
		add("unlisted.admit", "must be %q or %q, got %q", AdmitSheddable, RefuseUnlisted, string(p.Unlisted.Admit))
	}
	return errors.Join(errs...)
}

func compilePattern(pat string) (*regexp.Regexp, error) {
	if pat == "" {
		return nil, nil
	}
	// pat must compile on its own: "a)|(b" does not, but anchored it
	// would, as "^(?:a)|(b)$" (a prefix or a suffix, not the names it says).
	if _, err := regexp.Compile(pat); err != nil {
		return nil, err
	}
	return regexp.Compile("^(?:" + pat + ")$")
}

// Policies is a validated, compiled, ordered list of policies. It is
// immutable after [NewPolicies] and safe for concurrent use.
type Policies struct {
	list []compiled
}

type compiled struct {
	p                     Policy
	cluster, topic, group *regexp.Regexp
}

func (c *compiled) matches(t lag.Target) bool {
	if c.p.Match.Kind != "" && c.p.Match.Kind != t.Kind {
		return false
	}
	for _, m := range []struct {
		re *regexp.Regexp
		s  string
	}{{c.cluster, t.Cluster}, {c.topic, t.Topic}, {c.group, t.Group}} {
		if m.re != nil && !m.re.MatchString(m.s) {
			return false
		}
	}
	return true
}

// NewPolicies validates and compiles ps (kept in order). It returns every
// problem at once: each [*FieldError] of ps[i] prefixed "policies[i].", plus
// duplicate names. A nil or empty ps gives an empty, valid Policies that
// matches nothing.
func NewPolicies(ps []Policy) (*Policies, error) {
	var errs []error
	names := make(map[string]int, len(ps))
	out := &Policies{list: make([]compiled, 0, len(ps))}
	for i := range ps {
		p := ps[i]
		prefix := fmt.Sprintf("policies[%d].", i)
		bad := false
		if err := p.Validate(); err != nil {
			errs = append(errs, PrefixFields(err, prefix))
			bad = true
		}
		// Names are checked whether or not the policy has other problems,
		// so that one run reports a duplicate next to them.
		if p.Name != "" {
			if j, dup := names[p.Name]; dup {
				errs = append(errs, &FieldError{Field: prefix + "name", Problem: fmt.Sprintf("duplicates policies[%d] (%q)", j, p.Name)})
				bad = true
			} else {
				names[p.Name] = i
			}
		}
		if bad {
			continue
		}
		c := compiled{p: p}
		// Validate compiled these already; errors cannot happen here.
		c.cluster, _ = compilePattern(p.Match.Cluster)
		c.topic, _ = compilePattern(p.Match.Topic)
		c.group, _ = compilePattern(p.Match.Group)
		c.p.Producers = append([]ProducerSpec(nil), p.Producers...)
		c.p.index = make(map[string]int, len(p.Producers))
		for j, s := range c.p.Producers {
			c.p.index[s.ID] = j
		}
		out.list = append(out.list, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Match returns the first policy, in list order, whose Match selects t. The
// returned Policy shares its Producers slice with ps: do not modify it.
func (ps *Policies) Match(t lag.Target) (Policy, bool) {
	if ps == nil {
		return Policy{}, false
	}
	for i := range ps.list {
		if ps.list[i].matches(t) {
			return ps.list[i].p, true
		}
	}
	return Policy{}, false
}

// ByName returns the policy called name.
func (ps *Policies) ByName(name string) (Policy, bool) {
	if ps == nil {
		return Policy{}, false
	}
	for i := range ps.list {
		if ps.list[i].p.Name == name {
			return ps.list[i].p, true
		}
	}
	return Policy{}, false
}

// Len is the number of policies.
func (ps *Policies) Len() int {
	if ps == nil {
		return 0
	}
	return len(ps.list)
}

// List returns the policies in order (copies; their Producers slices are
// shared: do not modify them).
func (ps *Policies) List() []Policy {
	if ps == nil {
		return []Policy{}
	}
	out := make([]Policy, len(ps.list))
	for i, c := range ps.list {
		out[i] = c.p
	}
	return out
}
