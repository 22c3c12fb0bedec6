package quota

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	// Signal, RetryAfter, AvoidPartitions and PartitionShares come from the topic's
	// decision (see [Decision]).
	Signal          Signal        `json:"signal"`
	RetryAfter      time.Duration `json:"retryAfter,omitempty"`
	AvoidPartitions []int32       `json:"avoidPartitions,omitempty"`
	// PartitionShares: the keyless share some avoided partitions still
	// get (see [PartitionShare]), from the topic's decision.
	PartitionShares []PartitionShare `json:"partitionShares,omitempty"`
	// Advisory is true when the policy only advises: the SDK reports
	// what it would have done and does not throttle.
	Advisory bool `json:"advisory,omitempty"`
	// Criticality is the class the producer was served in: SHEDDABLE
	// for a producer its policy does not list.
	Criticality Criticality `json:"criticality"`
	// Unlisted is true when the policy does not list the producer: it was
	// served after every listed producer (see [Unlisted]).
	Unlisted bool `json:"unlisted,omitempty"`
	// Refused is true when the producer, unlisted, was refused a share:
	// the policy refuses unlisted ids, or admits no more on this topic.
	// Rate is then 0 and Signal stop.
	Refused bool `json:"refused,omitempty"`
	// Then is the producer's share of its topic's [Plan] (a decision made
	// for a bounded time says what follows it), through the same
	// allocation: from Then.At on, the SDK applies Then's rate and burst
	// unless a newer lease came first, until Expires. nil when the
	// decision has no plan, the plan is not within the lease's lifetime,
	// or the producer's share of it is its share of the decision.
	Then *LeasePlan `json:"then,omitempty"`
	// Reason, when set, says why this lease is not simply the producer's
	// share of its topic's decision (refused, or provisional until the
	// next allocation). It is not part of the versioned content.
	Reason string `json:"reason,omitempty"`
	// Rule is the rule of the topic's decision the lease is a share of,
	// set with the topic's reason when the lease has none of its own
	// (RuleNone otherwise). Like Reason, not part of the versioned
	// content: it is the rule as of the lease's last material change.
	Rule Rule `json:"rule,omitempty"`
	// Version identifies the content above (everything but Reason,
	// Expires and RefreshAfter). It moves only on a material change (see
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

// LeasePlan is a producer's share of a [Plan]: what its lease allows from
// At on (Rate msg/s, finite, with a token bucket of Burst).
type LeasePlan struct {
	At    time.Time `json:"at"`
	Rate  float64   `json:"rate"`
	Burst int       `json:"burst"`
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
		l.Unlisted != o.Unlisted || l.Refused != o.Refused || !slices.Equal(l.AvoidPartitions, o.AvoidPartitions) ||
		!sameShares(l.PartitionShares, o.PartitionShares, tol) {
		return false
	}
	if !samePlan(l.Then, o.Then, tol, planSlack) {
		return false
	}
	return sameRate(l.Rate, o.Rate, tol)
}

// planSlack is how far a lease plan's time may move without a new version
// (a drain's plan, re-projected every interval, moves with the noise of
// the capacity measured).
const planSlack = 50 * time.Millisecond

// samePlan reports whether a and b are both nil, or plan rates within
// tol of each other from times at most slack apart.
func samePlan(a, b *LeasePlan, tol float64, slack time.Duration) bool {
	if a == nil || b == nil {
		return a == b
	}
	d := a.At.Sub(b.At)
	return d <= slack && d >= -slack && sameRate(a.Rate, b.Rate, tol)
}

// sameRate reports whether rates a and b are equal up to a relative change
// of at most tol (an unlimited one only to another).
func sameRate(a, b, tol float64) bool {
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
	// one at SHEDDABLE below every listed producer (see [Unlisted]), so
	// the declared class counts for nothing until a policy lists it.
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
	// InlineMembers bounds the work of [LeaseBook.Join]: a topic with at
	// most this many producers taking part in its allocation (listed and
	// admitted unlisted ones) is re-allocated at once by a report; on a
	// larger one the report's demand counts from the next
	// [LeaseBook.Apply], and a producer new to the topic gets a
	// provisional lease until then. Default 256; negative is invalid.
	InlineMembers int
}

// DefaultInlineMembers is LeaseConfig.InlineMembers's default.
const DefaultInlineMembers = 256

// WithDefaults returns c with every zero field set to its default: the
// values a [LeaseBook] built from c uses (Lifetime 10 x Interval, ...), for
// callers that need them.
func (c LeaseConfig) WithDefaults() LeaseConfig {
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
	if c.InlineMembers == 0 {
		c.InlineMembers = DefaultInlineMembers
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
	if c.InlineMembers < 0 {
		errs = append(errs, configError("inlineMembers", "must be >= 0 (0 means %d), got %d", DefaultInlineMembers, c.InlineMembers))
	}
	c = c.WithDefaults()
	if !(c.Jitter >= 0 && c.Jitter < 1) {
		errs = append(errs, configError("jitter", "must be in [0, 1), got %v", c.Jitter))
	}
	if !(c.MaterialChange > 0 && c.MaterialChange < 1) {
		errs = append(errs, configError("materialChange", "must be in (0, 1), got %v", c.MaterialChange))
	}
	return errors.Join(errs...)
}

// memberState is how a member of a topic takes part in its allocation.
type memberState uint8

const (
	unclassified memberState = iota
	listedMember
	admittedMember // unlisted, admitted
	refusedMember  // unlisted, refused
)

type member struct {
	r    Report
	seen time.Time
	// seq orders members by when they joined the topic: unlisted ids
	// are admitted first come, first served.
	seq   uint64
	state memberState
	lease *Lease
}

// topicBook is one topic's members.
type topicBook struct {
	members map[string]*member
	// active holds the members taking part in the allocation (listed and
	// admitted unlisted) as classified by the last Join or Apply.
	active map[string]*member
	// admitted and refused count the unlisted members by state.
	admitted, refused int
	// silent holds the leases of producers a kafkaClientQuota policy
	// lists that never reported.
	silent map[string]*Lease
}

func (tb *topicBook) setState(m *member, st memberState) {
	switch m.state {
	case admittedMember:
		tb.admitted--
	case refusedMember:
		tb.refused--
	}
	m.state = st
	switch st {
	case admittedMember:
		tb.admitted++
	case refusedMember:
		tb.refused++
	}
	if st == listedMember || st == admittedMember {
		tb.active[m.r.Producer] = m
	} else {
		delete(tb.active, m.r.Producer)
	}
}

func (tb *topicBook) remove(id string) *member {
	m := tb.members[id]
	if m == nil {
		return nil
	}
	tb.setState(m, unclassified)
	delete(tb.members, id)
	return m
}

// LeaseBook keeps the producers' demand reports and turns a topic's decision
// into leases. It is pure (the caller passes now) and not safe for
// concurrent use: the caller locks.
//
// Reports and leases are kept per topic, so that a report ([LeaseBook.Join])
// costs time bounded by LeaseConfig.InlineMembers whatever the number of
// producers, and [LeaseBook.Apply] time in the number of the topic's
// producers.
type LeaseBook struct {
	cfg     LeaseConfig
	topics  map[Topic]*topicBook
	version uint64
	seq     uint64
	count   int // members in all topics
}

// NewLeaseBook returns an empty LeaseBook, or the problems of cfg.
func NewLeaseBook(cfg LeaseConfig) (*LeaseBook, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &LeaseBook{
		cfg:     cfg,
		topics:  make(map[Topic]*topicBook),
		version: cfg.VersionBase,
	}, nil
}

func (b *LeaseBook) topic(t Topic) *topicBook {
	tb := b.topics[t]
	if tb == nil {
		tb = &topicBook{members: map[string]*member{}, active: map[string]*member{}, silent: map[string]*Lease{}}
		b.topics[t] = tb
	}
	return tb
}

// Report records r as of now: the producer joins the topic, or refreshes
// its demand. It returns an error wrapping [ErrInvalidReport] when the
// producer id or topic name is empty, the demand is negative or NaN, or the
// criticality invalid. Whether the producer is admitted (see [Unlisted]) is
// decided by the next Join or Apply.
func (b *LeaseBook) Report(r Report, now time.Time) error {
	_, err := b.report(r, now)
	return err
}

func (b *LeaseBook) report(r Report, now time.Time) (*member, error) {
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
		return nil, fmt.Errorf("%w: %s", ErrInvalidReport, strings.Join(errs, "; "))
	}
	tb := b.topic(r.Topic)
	m := tb.members[r.Producer]
	if m == nil {
		b.seq++
		m = &member{seq: b.seq}
		tb.members[r.Producer] = m
		b.count++
		if l := tb.silent[r.Producer]; l != nil {
			m.lease = l
			delete(tb.silent, r.Producer)
		}
	}
	m.r, m.seen = r, now
	return m, nil
}

// Join records r like [LeaseBook.Report] and returns the producer's lease
// on r.Topic under the topic's decision d (from [CombineTopic])
// and its policy p, plus the leases of the topic's other producers that
// changed materially because of it (new versions, for the caller to push).
//
// Its cost does not grow with the number of producers: an unlisted producer
// is admitted or refused at once (see [Unlisted]; a refused one gets its
// stop lease), and a topic with at most LeaseConfig.InlineMembers
// producers taking part is re-allocated at once, exactly as Apply would. On
// a larger topic the reported demand counts from the next Apply; a producer
// that already has a lease keeps it (its expiry moves), and a new one gets
// a provisional lease: unlimited when d is, otherwise rate 0 with the
// signal slow-down (stop when d says stop) and a retry-after of one
// interval, until Apply gives it its share.
//
// Errors are those of Report.
func (b *LeaseBook) Join(r Report, d TopicDecision, p Policy, now time.Time) (Lease, []Lease, error) {
	m, err := b.report(r, now)
	if err != nil {
		return Lease{}, nil, err
	}
	tb := b.topics[r.Topic]
	if m.state == unclassified {
		_, listed := p.Producer(r.Producer)
		switch {
		case listed:
			tb.setState(m, listedMember)
		case tb.admitted < p.Unlisted.Limit() && tb.refused == 0:
			// Nobody refused is waiting for a slot: first come,
			// first served.
			tb.setState(m, admittedMember)
		default:
			tb.setState(m, refusedMember)
		}
	}
	if m.state == refusedMember {
		b.setLease(m, b.refusedLease(r.Producer, r.Topic, d, p), now)
		return copyLease(m.lease), nil, nil
	}
	if len(tb.active) <= b.cfg.InlineMembers {
		ms := make([]*member, 0, len(tb.active))
		for _, o := range tb.active {
			if now.Sub(o.seen) <= b.cfg.DemandTTL {
				ms = append(ms, o)
			}
		}
		slices.SortFunc(ms, func(a, b *member) int { return strings.Compare(a.r.Producer, b.r.Producer) })
		before := make([]uint64, len(ms))
		for i, o := range ms {
			if o.lease != nil {
				before[i] = o.lease.Version
			}
		}
		// Listed producers that never report (Kafka client quotas)
		// keep their part, as in Apply.
		var silent []ProducerSpec
		for _, id := range slices.Sorted(maps.Keys(tb.silent)) {
			if s, ok := p.Producer(id); ok {
				silent = append(silent, s)
			}
		}
		b.allocate(r.Topic, d, p, ms, silent, now)
		var changed []Lease
		for i, o := range ms {
			if o != m && o.lease.Version != before[i] {
				changed = append(changed, copyLease(o.lease))
			}
		}
		return copyLease(m.lease), changed, nil
	}
	if m.lease == nil || m.lease.Refused {
		crit := Sheddable
		if s, ok := p.Producer(r.Producer); ok {
			crit = s.Criticality
		}
		next := b.share(r.Producer, r.Topic, d, m.state == admittedMember, crit, p, Unlimited)
		if !math.IsInf(d.Rate, 1) {
			next.Rate, next.Burst = 0, 0
			if next.Signal != SignalStop {
				next.Signal = SignalSlowDown
			}
			next.RetryAfter = max(next.RetryAfter, b.cfg.Interval)
			next.Reason = "provisional: joined a topic of many producers; its share comes at the next allocation"
		}
		b.setLease(m, next, now)
	} else {
		b.setLease(m, *m.lease, now)
	}
	return copyLease(m.lease), nil, nil
}

// share is the lease of a producer taking part in the allocation of topic
// with grant rate, before versioning.
func (b *LeaseBook) share(id string, topic Topic, d TopicDecision, unlisted bool, crit Criticality, p Policy, rate float64) Lease {
	l := Lease{
		Producer:    id,
		Topic:       topic,
		Rate:        rate,
		Burst:       b.burst(rate),
		Signal:      d.Signal,
		RetryAfter:  d.RetryAfter,
		Advisory:    d.Advisory,
		Criticality: crit,
		Unlisted:    unlisted,
	}
	if unlisted {
		l.Criticality = Sheddable
	}
	if len(d.AvoidPartitions) > 0 {
		l.AvoidPartitions = slices.Clone(d.AvoidPartitions)
		l.PartitionShares = slices.Clone(d.PartitionShares)
	}
	return l
}

// refusedLease is the lease of an unlisted producer refused a share.
func (b *LeaseBook) refusedLease(id string, topic Topic, d TopicDecision, p Policy) Lease {
	l := Lease{Producer: id, Topic: topic, Signal: SignalStop, Advisory: d.Advisory, Criticality: Sheddable, Unlisted: true, Refused: true}
	if p.Unlisted.Refuses() {
		l.Reason = fmt.Sprintf("producer %q is not listed in policy %q, which refuses unlisted producers", id, p.Name)
	} else {
		l.Reason = fmt.Sprintf("producer %q is not listed in policy %q, which admits at most %d unlisted producers per topic; they are all taken", id, p.Name, p.Unlisted.Limit())
	}
	return l
}

// setLease stores next as m's lease: a new version when its content differs
// materially from the current one, else the current version; the expiry
// and refresh move either way.
func (b *LeaseBook) setLease(m *member, next Lease, now time.Time) {
	b.store(&m.lease, next, now)
}

func (b *LeaseBook) store(cur **Lease, next Lease, now time.Time) {
	if *cur == nil || !(*cur).sameContent(&next, b.cfg.MaterialChange) {
		b.version++
		next.Version = b.version
		if *cur == nil {
			*cur = new(Lease)
		}
		**cur = next
	}
	(*cur).Reason = next.Reason
	(*cur).Expires = now.Add(b.cfg.Lifetime)
	(*cur).RefreshAfter = b.refresh()
}

func copyLease(l *Lease) Lease {
	c := *l
	if l.Then != nil {
		t := *l.Then
		c.Then = &t
	}
	c.AvoidPartitions = slices.Clone(l.AvoidPartitions)
	c.PartitionShares = slices.Clone(l.PartitionShares)
	return c
}

// allocate splits d.Rate across ms (sorted by producer) and the silent ids
// (sorted), and stores their leases.
func (b *LeaseBook) allocate(topic Topic, d TopicDecision, p Policy, ms []*member, silent []ProducerSpec, now time.Time) {
	n := len(ms) + len(silent)
	demands := make([]Demand, 0, n)
	for _, m := range ms {
		dm := Demand{Producer: m.r.Producer, Criticality: Sheddable, Weight: 1, Rate: m.r.Demand, Unlisted: true}
		if m.state == listedMember {
			s, _ := p.Producer(m.r.Producer)
			dm.Criticality, dm.Weight, dm.Unlisted = s.Criticality, s.EffectiveWeight(), false
		}
		demands = append(demands, dm)
	}
	for _, s := range silent {
		demands = append(demands, Demand{Producer: s.ID, Criticality: s.Criticality, Weight: s.EffectiveWeight(), Rate: UnknownDemand})
	}
	SplitFloor(p.MinRate, demands)
	grants := b.cfg.Allocator(d.Rate, demands)
	var plans []Grant
	if b.plans(d, now) {
		plans = b.cfg.Allocator(d.Then.Rate, demands)
	}
	tb := b.topic(topic)
	for i, g := range grants {
		next := b.share(g.Producer, topic, d, demands[i].Unlisted, demands[i].Criticality, p, g.Rate)
		if plans != nil && plans[i].Rate != g.Rate && !math.IsInf(plans[i].Rate, 1) && !math.IsInf(g.Rate, 1) {
			next.Then = &LeasePlan{At: d.Then.At, Rate: plans[i].Rate, Burst: b.burst(plans[i].Rate)}
		}
		if i < len(ms) {
			b.setLease(ms[i], next, now)
			continue
		}
		cur := tb.silent[g.Producer]
		b.store(&cur, next, now)
		tb.silent[g.Producer] = cur
	}
}

// plans reports whether d's plan goes into the leases allocated at now:
// it has one, a finite rate other than d's, from a time after now and before
// the leases expire (a held decision's plan may be due already: its
// leases say what the decision said, the pause, with no plan).
func (b *LeaseBook) plans(d TopicDecision, now time.Time) bool {
	t := d.Then
	return t != nil && t.Rate >= 0 && t.Rate != d.Rate && !math.IsInf(t.Rate, 0) && t.At.After(now) && t.At.Before(now.Add(b.cfg.Lifetime))
}

// Leave removes the producer from the topic at once (its report and lease).
func (b *LeaseBook) Leave(producer string, topic Topic) {
	tb := b.topics[topic]
	if tb == nil {
		return
	}
	if tb.remove(producer) != nil {
		b.count--
	}
	delete(tb.silent, producer)
	b.dropEmpty(topic, tb)
}

func (b *LeaseBook) dropEmpty(t Topic, tb *topicBook) {
	if len(tb.members) == 0 && len(tb.silent) == 0 {
		delete(b.topics, t)
	}
}

// Expire removes the producers whose last report is older than DemandTTL
// as of now, with their leases, and returns the leases removed (sorted by
// topic and producer) so that publishers can clear them.
func (b *LeaseBook) Expire(now time.Time) []Lease {
	var gone []Lease
	for t, tb := range b.topics {
		for id, m := range tb.members {
			if now.Sub(m.seen) > b.cfg.DemandTTL {
				tb.remove(id)
				b.count--
				if m.lease != nil {
					gone = append(gone, *m.lease)
				}
			}
		}
		b.dropEmpty(t, tb)
	}
	sortLeases(gone)
	return gone
}

// Apply allocates the topic decision d (from [CombineTopic]) under
// policy p (the one named by d.Policy: its producers, weights, floor and
// [Unlisted] rule) across the producers of the topic as of now, and returns
// their leases sorted by producer. The producers are those with a report
// younger than DemandTTL, plus, when p.KafkaClientQuota is set on a Kafka
// topic, the producers p lists that never reported (their demand is
// unknown: they are throttled by the broker and cannot report). Leases of
// producers no longer taking part are dropped.
//
// Unlisted producers are admitted up to p.Unlisted's limit, those admitted
// before first, then in the order they joined; the others get a refused
// lease (rate 0, stop). Admitted ones are served after every listed
// producer (see [PriorityFair]).
//
// A lease keeps its version and content when the new content differs by no
// more than MaterialChange in rate and not at all otherwise; only its
// Expires and RefreshAfter (and Reason) move.
func (b *LeaseBook) Apply(d TopicDecision, p Policy, now time.Time) []Lease {
	topic := TopicOf(d.Target)
	tb := b.topics[topic]
	if tb == nil {
		if !p.KafkaClientQuota || topic.Kind != lag.KindKafka || len(p.Producers) == 0 {
			return []Lease{}
		}
		tb = b.topic(topic)
	}
	listed := make(map[string]bool, len(p.Producers))
	for _, s := range p.Producers {
		listed[s.ID] = true
	}
	var ms, unlisted []*member
	for id, m := range tb.members {
		if now.Sub(m.seen) > b.cfg.DemandTTL {
			// Not taking part; Expire removes the report.
			tb.setState(m, unclassified)
			m.lease = nil
			continue
		}
		if listed[id] {
			tb.setState(m, listedMember)
			ms = append(ms, m)
		} else {
			unlisted = append(unlisted, m)
		}
	}
	// Admitted ones keep their place, then first come, first served.
	slices.SortFunc(unlisted, func(a, b *member) int {
		if c := cmp.Compare(b2i(a.state != admittedMember), b2i(b.state != admittedMember)); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	limit := p.Unlisted.Limit()
	var refused []*member
	for i, m := range unlisted {
		if i < limit {
			tb.setState(m, admittedMember)
			ms = append(ms, m)
		} else {
			tb.setState(m, refusedMember)
			refused = append(refused, m)
		}
	}
	var silent []ProducerSpec
	isSilent := map[string]bool{}
	if p.KafkaClientQuota && topic.Kind == lag.KindKafka {
		for _, s := range p.Producers {
			if tb.members[s.ID] == nil || tb.members[s.ID].state != listedMember {
				silent = append(silent, s)
				isSilent[s.ID] = true
			}
		}
	}
	for id := range tb.silent {
		if !isSilent[id] {
			delete(tb.silent, id)
		}
	}
	slices.SortFunc(ms, func(a, b *member) int { return strings.Compare(a.r.Producer, b.r.Producer) })
	slices.SortFunc(silent, func(a, b ProducerSpec) int { return strings.Compare(a.ID, b.ID) })
	b.allocate(topic, d, p, ms, silent, now)
	out := make([]Lease, 0, len(ms)+len(silent)+len(refused))
	for _, m := range ms {
		out = append(out, copyLease(m.lease))
	}
	for _, s := range silent {
		out = append(out, copyLease(tb.silent[s.ID]))
	}
	for _, m := range refused {
		b.setLease(m, b.refusedLease(m.r.Producer, topic, d, p), now)
		out = append(out, copyLease(m.lease))
	}
	slices.SortFunc(out, func(a, b Lease) int { return strings.Compare(a.Producer, b.Producer) })
	b.dropEmpty(topic, tb)
	return out
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
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
	tb := b.topics[topic]
	if tb == nil {
		return Lease{}, false
	}
	if m := tb.members[producer]; m != nil && m.lease != nil {
		return copyLease(m.lease), true
	}
	if l := tb.silent[producer]; l != nil {
		return copyLease(l), true
	}
	return Lease{}, false
}

// Leases returns every current lease, sorted by topic and producer.
func (b *LeaseBook) Leases() []Lease {
	out := make([]Lease, 0, b.count)
	for _, tb := range b.topics {
		for _, m := range tb.members {
			if m.lease != nil {
				out = append(out, copyLease(m.lease))
			}
		}
		for _, l := range tb.silent {
			out = append(out, copyLease(l))
		}
	}
	sortLeases(out)
	return out
}

// Silent returns the leases of the producers a kafkaClientQuota policy
// lists that never reported (see Apply), sorted by topic and producer.
func (b *LeaseBook) Silent() []Lease {
	var out []Lease
	for _, tb := range b.topics {
		for _, l := range tb.silent {
			out = append(out, copyLease(l))
		}
	}
	sortLeases(out)
	return out
}

// Producers is the number of (producer, topic) reports the book holds
// (expired or not: see Expire).
func (b *LeaseBook) Producers() int { return b.count }

// sortLeases sorts by topic (kind, cluster, name) and producer, comparing
// fields: building Topic.String per comparison cost a 10,000-producer cycle
// most of its time.
func sortLeases(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int {
		return cmp.Or(strings.Compare(string(a.Topic.Kind), string(b.Topic.Kind)), strings.Compare(a.Topic.Cluster, b.Topic.Cluster),
			strings.Compare(a.Topic.Name, b.Topic.Name), strings.Compare(a.Producer, b.Producer))
	})
}
