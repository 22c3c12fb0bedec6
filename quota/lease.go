package quota

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// ErrInvalidReport is returned (wrapped) by [LeaseBook.Report] for a report
// it cannot use.
var ErrInvalidReport = errors.New("quota: invalid demand report")

// Lease is what one producer may send to one topic, until it expires.
type Lease struct {
	Producer string `json:"producer"`
	Topic    Topic  `json:"topic"`
	// Rate is the granted rate in messages per second; +Inf
	// ([Unlimited]) when the topic does not limit. See
	// [Lease.MarshalJSON] for its JSON form.
	Rate float64 `json:"-"`
	// Burst is the token-bucket depth in messages: Rate x
	// LeaseConfig.BurstWindow, at least 1 for a positive finite rate; 0
	// for a zero rate and for an unlimited one (no bucket).
	Burst int `json:"burst"`
	// Signal, RetryAfter and AvoidPartitions come from the topic's
	// decision (see [Decision]).
	Signal          Signal        `json:"signal"`
	RetryAfter      time.Duration `json:"retryAfter,omitempty"`
	AvoidPartitions []int32       `json:"avoidPartitions,omitempty"`
	// Advisory is true when the policy only advises: the SDK reports
	// what it would have done and does not throttle.
	Advisory bool `json:"advisory,omitempty"`
	// Criticality is the class the producer was served in.
	Criticality Criticality `json:"criticality"`
	// Version identifies the content above (everything but Expires and
	// RefreshAfter). It moves only on a material change (see
	// LeaseConfig.MaterialChange) and is unique and increasing across
	// all leases of a LeaseBook, also across a producer leaving and
	// coming back: a higher version is news, push it.
	Version uint64 `json:"version"`
	// Expires is when the lease stops being valid: the SDK keeps it until
	// then if lagbridge cannot be reached (fail-static), then falls back
	// to its configured safe quota.
	Expires time.Time `json:"expires"`
	// RefreshAfter is when the producer should next report its demand
	// (and so refresh the lease): a third of the lease lifetime, with
	// jitter so that producers do not come back in lockstep.
	RefreshAfter time.Duration `json:"refreshAfter"`
}

// IsUnlimited reports whether l.Rate is +Inf.
func (l Lease) IsUnlimited() bool { return math.IsInf(l.Rate, 1) }

// MarshalJSON encodes l with its rate as "rate" (msg/s) or, when unlimited,
// "unlimited": true and no rate, since JSON has no infinity.
func (l Lease) MarshalJSON() ([]byte, error) {
	type plain Lease
	return json.Marshal(struct {
		plain
		rateJSON
	}{plain(l), toRateJSON(l.Rate)})
}

// UnmarshalJSON is the inverse of MarshalJSON; a missing rate is unlimited.
func (l *Lease) UnmarshalJSON(b []byte) error {
	type plain Lease
	var v struct {
		plain
		rateJSON
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Lease(v.plain)
	l.Rate = v.rateJSON.value()
	return nil
}

// sameContent reports whether l and o carry the same content up to a
// relative rate change of at most tol.
func (l *Lease) sameContent(o *Lease, tol float64) bool {
	if l.Signal != o.Signal || l.Advisory != o.Advisory || l.Criticality != o.Criticality ||
		!slices.Equal(l.AvoidPartitions, o.AvoidPartitions) {
		return false
	}
	a, b := l.Rate, o.Rate
	switch {
	case math.IsInf(a, 1) || math.IsInf(b, 1):
		return a == b
	case a == b:
		return true
	case a == 0 || b == 0:
		return false
	}
	return math.Abs(a-b) <= tol*max(a, b)
}

// Report is a producer's registration with a topic, repeated as its demand
// changes and at least every RefreshAfter.
type Report struct {
	Producer string
	Topic    Topic
	// Criticality is the class the producer declares. A producer listed
	// in the policy is served in the policy's class instead; an unlisted
	// one at most in CRITICAL (CRITICAL_PLUS must be given by policy).
	Criticality Criticality
	// Demand is the rate the producer would send if unthrottled, msg/s;
	// [UnknownDemand] (+Inf) when it does not know. Must not be negative
	// or NaN.
	Demand float64
}

// LeaseConfig tunes a [LeaseBook]. The zero value means the defaults noted
// on each field.
type LeaseConfig struct {
	// Interval is the observation interval. Default 1s.
	Interval time.Duration
	// Lifetime is how long a lease is valid after it is issued. Default
	// 10 x Interval.
	Lifetime time.Duration
	// Jitter is the relative spread of RefreshAfter around Lifetime/3
	// (uniform in [1-Jitter, 1+Jitter]). Zero means the default 0.2;
	// in (0, 1).
	Jitter float64
	// DemandTTL is how long a producer's last report counts: a producer
	// with no report for longer has left, and its leases go. Default
	// Lifetime.
	DemandTTL time.Duration
	// MaterialChange is the relative rate change that makes a new lease
	// version (a signal, advisory, criticality or avoided-partitions
	// change always does). Default 0.01 (1%).
	MaterialChange float64
	// BurstWindow sizes Lease.Burst: that many seconds of the rate.
	// Default 100ms.
	BurstWindow time.Duration
	// Allocator splits a topic's rate across its producers. Default
	// [PriorityFair].
	Allocator Allocator
	// Rand returns uniform numbers in [0, 1) for the refresh jitter.
	// Default math/rand/v2.Float64; inject one for deterministic tests.
	Rand func() float64
	// VersionBase is where versions start (the first is VersionBase+1).
	// A daemon can set it from the wall clock at start so that versions
	// keep increasing across restarts. Default 0.
	VersionBase uint64
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Lifetime == 0 {
		c.Lifetime = 10 * c.Interval
	}
	if c.Jitter == 0 {
		c.Jitter = 0.2
	}
	if c.DemandTTL == 0 {
		c.DemandTTL = c.Lifetime
	}
	if c.MaterialChange == 0 {
		c.MaterialChange = 0.01
	}
	if c.BurstWindow == 0 {
		c.BurstWindow = 100 * time.Millisecond
	}
	if c.Allocator == nil {
		c.Allocator = PriorityFair
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// Validate returns every problem of c (after defaults) at once, each a
// [*FieldError] wrapping [ErrInvalidConfig].
func (c LeaseConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"interval", c.Interval}, {"lifetime", c.Lifetime}, {"demandTTL", c.DemandTTL}, {"burstWindow", c.BurstWindow}} {
		if f.d < 0 {
			errs = append(errs, configError(f.name, "must be > 0, got %v", f.d))
		}
	}
	c = c.withDefaults()
	if !(c.Jitter >= 0 && c.Jitter < 1) {
		errs = append(errs, configError("jitter", "must be in [0, 1), got %v", c.Jitter))
	}
	if !(c.MaterialChange > 0 && c.MaterialChange < 1) {
		errs = append(errs, configError("materialChange", "must be in (0, 1), got %v", c.MaterialChange))
	}
	return errors.Join(errs...)
}

type leaseKey struct {
	producer string
	topic    Topic
}

type reported struct {
	r    Report
	seen time.Time
}

// LeaseBook keeps the producers' demand reports and turns a topic's decision
// into leases. It is pure (the caller passes now) and not safe for
// concurrent use: the caller locks.
type LeaseBook struct {
	cfg     LeaseConfig
	reports map[leaseKey]reported
	leases  map[leaseKey]*Lease
	version uint64
}

// NewLeaseBook returns an empty LeaseBook, or the problems of cfg.
func NewLeaseBook(cfg LeaseConfig) (*LeaseBook, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &LeaseBook{
		cfg:     cfg,
		reports: make(map[leaseKey]reported),
		leases:  make(map[leaseKey]*Lease),
		version: cfg.VersionBase,
	}, nil
}

// Report records r as of now: the producer joins the topic, or refreshes
// its demand. It returns an error wrapping [ErrInvalidReport] when the
// producer id or topic name is empty, the demand is negative or NaN, or the
// criticality invalid.
func (b *LeaseBook) Report(r Report, now time.Time) error {
	var errs []string
	if r.Producer == "" {
		errs = append(errs, "producer id is required")
	}
	if r.Topic.Name == "" {
		errs = append(errs, "topic name is required")
	}
	if r.Demand < 0 || math.IsNaN(r.Demand) {
		errs = append(errs, fmt.Sprintf("demand must be >= 0 msg/s, got %v", r.Demand))
	}
	if !r.Criticality.Valid() {
		errs = append(errs, fmt.Sprintf("invalid criticality %d", uint8(r.Criticality)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidReport, strings.Join(errs, "; "))
	}
	b.reports[leaseKey{r.Producer, r.Topic}] = reported{r: r, seen: now}
	return nil
}

// Leave removes the producer from the topic at once (its report and lease).
func (b *LeaseBook) Leave(producer string, topic Topic) {
	k := leaseKey{producer, topic}
	delete(b.reports, k)
	delete(b.leases, k)
}

// Expire removes the producers whose last report is older than DemandTTL
// as of now, with their leases, and returns the leases removed (sorted by
// topic and producer) so that publishers can clear them.
func (b *LeaseBook) Expire(now time.Time) []Lease {
	var gone []Lease
	for k, r := range b.reports {
		if now.Sub(r.seen) > b.cfg.DemandTTL {
			delete(b.reports, k)
			if l := b.leases[k]; l != nil {
				gone = append(gone, *l)
				delete(b.leases, k)
			}
		}
	}
	sortLeases(gone)
	return gone
}

// Apply allocates the topic decision d (normally from [CombineTopic]) under
// policy p (the one named by d.Policy: its producers, weights and floor)
// across the producers of the topic as of now, and returns their leases
// sorted by producer. The producers are those with a report younger than
// DemandTTL, plus, when p.KafkaClientQuota is set on a Kafka topic, the
// producers p lists that never reported (their demand is unknown: they are
// throttled by the broker and cannot report). Leases of producers no longer
// taking part are dropped.
//
// A lease keeps its version and content when the new content differs by no
// more than MaterialChange in rate and not at all otherwise; only its
// Expires and RefreshAfter move.
func (b *LeaseBook) Apply(d Decision, p Policy, now time.Time) []Lease {
	topic := TopicOf(d.Target)
	type member struct {
		id   string
		crit Criticality
		w    float64
		want float64
	}
	var members []member
	in := make(map[string]bool)
	for k, r := range b.reports {
		if k.topic != topic || now.Sub(r.seen) > b.cfg.DemandTTL {
			continue
		}
		// Unlisted: the declared class, but never above CRITICAL.
		m := member{id: k.producer, crit: rankCriticality(max(r.r.Criticality.Rank(), Critical.Rank())), w: 1, want: r.r.Demand}
		if s, ok := p.Producer(k.producer); ok {
			m.crit, m.w = s.Criticality, s.EffectiveWeight()
		}
		members = append(members, m)
		in[k.producer] = true
	}
	if p.KafkaClientQuota && topic.Kind == lag.KindKafka {
		for _, s := range p.Producers {
			if !in[s.ID] {
				members = append(members, member{id: s.ID, crit: s.Criticality, w: s.EffectiveWeight(), want: UnknownDemand})
				in[s.ID] = true
			}
		}
	}
	// Drop the leases of producers that left this topic.
	for k := range b.leases {
		if k.topic == topic && !in[k.producer] {
			delete(b.leases, k)
		}
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.id, b.id) })

	demands := make([]Demand, len(members))
	for i, m := range members {
		demands[i] = Demand{Producer: m.id, Criticality: m.crit, Weight: m.w, Rate: m.want}
	}
	SplitFloor(p.MinRate, demands)
	grants := b.cfg.Allocator(d.Rate, demands)

	out := make([]Lease, len(grants))
	for i, g := range grants {
		next := Lease{
			Producer:    g.Producer,
			Topic:       topic,
			Rate:        g.Rate,
			Burst:       b.burst(g.Rate),
			Signal:      d.Signal,
			RetryAfter:  d.RetryAfter,
			Advisory:    d.Advisory,
			Criticality: demands[i].Criticality,
		}
		if len(d.AvoidPartitions) > 0 {
			next.AvoidPartitions = slices.Clone(d.AvoidPartitions)
		}
		k := leaseKey{g.Producer, topic}
		cur := b.leases[k]
		if cur == nil || !cur.sameContent(&next, b.cfg.MaterialChange) {
			b.version++
			next.Version = b.version
			if cur == nil {
				cur = new(Lease)
				b.leases[k] = cur
			}
			*cur = next
		}
		cur.Expires = now.Add(b.cfg.Lifetime)
		cur.RefreshAfter = b.refresh()
		out[i] = *cur
		out[i].AvoidPartitions = slices.Clone(cur.AvoidPartitions)
	}
	return out
}

func rankCriticality(rank int) Criticality {
	if rank >= 0 && rank < len(Criticalities) {
		return Criticalities[rank]
	}
	return Critical
}

func (b *LeaseBook) burst(rate float64) int {
	if math.IsInf(rate, 1) || !(rate > 0) {
		return 0
	}
	return max(1, int(math.Ceil(rate*b.cfg.BurstWindow.Seconds())))
}

func (b *LeaseBook) refresh() time.Duration {
	base := float64(b.cfg.Lifetime) / 3
	f := 1 + b.cfg.Jitter*(2*b.cfg.Rand()-1)
	return time.Duration(base * f)
}

// Lease returns the current lease of producer on topic.
func (b *LeaseBook) Lease(producer string, topic Topic) (Lease, bool) {
	l := b.leases[leaseKey{producer, topic}]
	if l == nil {
		return Lease{}, false
	}
	c := *l
	c.AvoidPartitions = slices.Clone(l.AvoidPartitions)
	return c, true
}

// Leases returns every current lease, sorted by topic and producer.
func (b *LeaseBook) Leases() []Lease {
	out := make([]Lease, 0, len(b.leases))
	for _, l := range b.leases {
		c := *l
		c.AvoidPartitions = slices.Clone(l.AvoidPartitions)
		out = append(out, c)
	}
	sortLeases(out)
	return out
}

// Producers is the number of producers with a report (expired or not: see
// Expire).
func (b *LeaseBook) Producers() int { return len(b.reports) }

func sortLeases(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int {
		if c := strings.Compare(a.Topic.String(), b.Topic.String()); c != 0 {
			return c
		}
		return strings.Compare(a.Producer, b.Producer)
	})
}
