package history

import (
	"encoding/json"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// EventKind says what a decision event records.
type EventKind string

// The kinds of decision events.
const (
	// KindSignal: a topic's signal changed (ok, slow-down, stop,
	// avoid-partitions); Producers lists the producers holding a lease on
	// the topic.
	KindSignal EventKind = "signal"
	// KindCut: a producer's grant on a topic fell by more than
	// Config.GrantChange from the last one logged (or from unlimited, or
	// to zero).
	KindCut EventKind = "cut"
	// KindRelease: a producer's grant rose by more than
	// Config.GrantChange (or became unlimited again).
	KindRelease EventKind = "release"
)

// Inputs are the figures the controller decided on, from the topic's
// binding decision (quota.Decision) and its policy.
type Inputs struct {
	// Lag in messages and HeadAgeSeconds, the age of the oldest
	// unconsumed message.
	Lag            int64   `json:"lag"`
	HeadAgeSeconds float64 `json:"headAgeSeconds"`
	// Capacity is the consume rate the controller worked with, msg/s;
	// CapacityKnown is false when the consumer was not saturated (then it
	// is only what was consumed, a lower bound).
	Capacity      float64 `json:"capacity"`
	CapacityKnown bool    `json:"capacityKnown"`
	// WaitSeconds is the predicted wait of a message produced then
	// (lag / capacity); -1 when nothing was consumed with work waiting.
	WaitSeconds float64 `json:"waitSeconds"`
	// TargetWaitSeconds is the wait the controller steers to.
	TargetWaitSeconds float64 `json:"targetWaitSeconds"`
	// BudgetSeconds is the policy's budget: maxAge - processingTime.
	BudgetSeconds float64 `json:"budgetSeconds"`
}

// Event is one entry of the decision log.
type Event struct {
	// Seq numbers events from 1 since the daemon started.
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind EventKind `json:"kind"`
	// Topic is the topic (Kafka) or stream (NATS) decided on.
	Topic  quota.Topic `json:"topic"`
	Policy string      `json:"policy"`
	// Rule is the controller's rule behind the topic's decision.
	Rule quota.Rule `json:"rule"`
	// Signal and PrevSignal: the topic's signal (KindSignal) or the
	// producer's lease's (cut, release), now and before.
	Signal     string `json:"signal"`
	PrevSignal string `json:"prevSignal"`
	// Producers are the producers affected: the one whose grant changed,
	// or every producer with a lease on the topic.
	Producers []string `json:"producers"`
	// Rate and PrevRate: the topic's allowed rate (KindSignal) or the
	// producer's grant, in msg/s, now and as last logged. +Inf is
	// unlimited (JSON: null with unlimited / prevUnlimited true).
	Rate     float64 `json:"-"`
	PrevRate float64 `json:"-"`
	Inputs   Inputs  `json:"inputs"`
	// Reason is the controller's reason in words.
	Reason string `json:"reason"`
	// NotServed marks a decision of a replica whose decisions on the
	// topic were not in force (Log.Served): a follower's, whose
	// producers are served the leader's. Omitted (false) on every
	// event that was served, and without ha.
	NotServed bool `json:"notServed,omitempty"`
}

// MarshalJSON writes Rate and PrevRate as numbers, or null with
// unlimited / prevUnlimited set (JSON has no infinity).
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	out := struct {
		plain
		Rate          *float64 `json:"rate"`
		Unlimited     bool     `json:"unlimited,omitempty"`
		PrevRate      *float64 `json:"prevRate"`
		PrevUnlimited bool     `json:"prevUnlimited,omitempty"`
	}{plain: plain(e)}
	out.Rate, out.Unlimited = finite(e.Rate)
	out.PrevRate, out.PrevUnlimited = finite(e.PrevRate)
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var in struct {
		plain
		Rate          *float64 `json:"rate"`
		Unlimited     bool     `json:"unlimited"`
		PrevRate      *float64 `json:"prevRate"`
		PrevUnlimited bool     `json:"prevUnlimited"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*e = Event(in.plain)
	e.Rate, e.PrevRate = fromJSON(in.Rate, in.Unlimited), fromJSON(in.PrevRate, in.PrevUnlimited)
	return nil
}

func finite(f float64) (*float64, bool) {
	if math.IsInf(f, 1) {
		return nil, true
	}
	v := math.Round(f*1000) / 1000
	return &v, false
}

func fromJSON(f *float64, unlimited bool) float64 {
	if unlimited || f == nil {
		return math.Inf(1)
	}
	return *f
}

// Log is the decision log: a bounded ring of events, fed by [Log.Observe]
// after each quota cycle. Create it with [NewLog]. Safe for concurrent
// use.
type Log struct {
	threshold float64
	log       *slog.Logger
	counter   *prometheus.CounterVec
	// Served, when set, says whether this replica's decisions on a topic
	// are in force now (with ha: it leads, or stands in for a silent
	// leader; internal/app). An event of a topic it says no for is kept
	// marked Event.NotServed, logged at DEBUG and not counted: a
	// follower steps every target it observes, but its producers are
	// served the leader's decisions, which the leader logs. Nil: every
	// decision is served. It must depend only on the topic's kind and
	// cluster and the policy (Observe asks once per such triple a cycle).
	// Set it before the first Observe; it is called under the log's lock
	// (and the engine's).
	Served func(t quota.Topic, policy string) bool

	mu       sync.Mutex
	capacity int
	buf      []Event
	start    int
	seq      uint64
	dropped  uint64
	// topics and grants are what was seen last of each topic's decision
	// and each lease; servedTopics and servedGrants what was last seen
	// served since it last served (with Served set; nil without;
	// forgotten at a cycle not served). A served cycle compares with the
	// latter, so a replica that takes over or stands in states the
	// decisions it now serves, at INFO, even when its own were the same
	// while it followed or what it served before it followed.
	topics       map[quota.Topic]grant
	grants       map[grantKey]grant
	servedTopics map[quota.Topic]grant
	servedGrants map[grantKey]grant
}

// servedKey is what Served depends on.
type servedKey struct {
	kind            lag.Kind
	cluster, policy string
}

type grantKey struct {
	producer string
	topic    quota.Topic
}

// grant is what was seen last of a topic's decision or a producer's
// lease.
type grant struct {
	rate   float64 // msg/s, +Inf unlimited; of a lease: the last logged
	signal quota.Signal
}

// NewLog returns an empty log of cfg.Events events (cfg must be valid),
// writing each event to logger (nil: slog.Default()) at level Info and
// counting them in lagbridge_decision_events_total{kind} on reg (nil:
// not counted); see Log.Served for the events not served.
func NewLog(cfg Config, logger *slog.Logger, reg prometheus.Registerer) *Log {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	l := &Log{threshold: cfg.GrantChange, log: logger, buf: make([]Event, 0, min(cfg.Events, 1024)),
		topics: map[quota.Topic]grant{}, grants: map[grantKey]grant{}, capacity: cfg.Events}
	l.counter = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lagbridge_decision_events_total",
		Help: "Quota decisions logged: a topic's signal changed (kind signal), a producer's grant was cut or released beyond history.grantChange. With ha, only those this replica served (its leases or client quotas were in force).",
	}, []string{"kind"})
	for _, k := range []EventKind{KindSignal, KindCut, KindRelease} {
		l.counter.WithLabelValues(string(k))
	}
	if reg != nil {
		reg.MustRegister(l.counter)
	}
	return l
}

// Observe compares the topics' combined decisions and the producers'
// leases with what it saw last, and logs every change of a topic's signal
// and every grant cut or released beyond the threshold. budget returns a
// policy's budget (maxAge - processingTime). It is called with the quota
// engine's state as of now; topics and leases are only read.
func (l *Log) Observe(now time.Time, topics map[quota.Topic]quota.TopicDecision, leases []quota.Lease, budget func(policy string) time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	holders := map[quota.Topic][]string{}
	for _, ls := range leases {
		holders[ls.Topic] = append(holders[ls.Topic], ls.Producer)
	}
	inputs := func(d quota.TopicDecision) Inputs {
		in := Inputs{Lag: d.Lag, HeadAgeSeconds: d.HeadAge.Seconds(), Capacity: round3(d.Capacity), CapacityKnown: d.CapacityKnown,
			WaitSeconds: d.Wait.Seconds(), TargetWaitSeconds: d.TargetWait.Seconds()}
		if d.Wait < 0 {
			in.WaitSeconds = -1
		}
		if budget != nil {
			in.BudgetSeconds = budget(d.Policy).Seconds()
		}
		return in
	}
	// Served is asked once per cluster and policy (it runs under the
	// engine's lock).
	var cache map[servedKey]bool
	served := func(t quota.Topic, policy string) bool {
		if l.Served == nil {
			return true
		}
		k := servedKey{t.Kind, t.Cluster, policy}
		in, ok := cache[k]
		if !ok {
			if cache == nil {
				cache = map[servedKey]bool{}
			}
			in = l.Served(t, policy)
			cache[k] = in
		}
		return in
	}
	if l.Served != nil && l.servedTopics == nil {
		l.servedTopics, l.servedGrants = map[quota.Topic]grant{}, map[grantKey]grant{}
	}
	names := make([]quota.Topic, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	for _, t := range names {
		d := topics[t]
		in := served(t, d.Policy)
		base := l.topics
		if in && l.servedTopics != nil {
			base = l.servedTopics
		}
		prev, seen := base[t]
		l.topics[t] = grant{rate: d.Rate, signal: d.Signal}
		if in && l.servedTopics != nil {
			l.servedTopics[t] = l.topics[t]
		} else if !in {
			// What it served before it followed is not what the
			// producers have now: a takeover states its decision.
			delete(l.servedTopics, t)
		}
		if !seen {
			prev = grant{rate: math.Inf(1), signal: quota.SignalOK} // a topic starts unconstrained
		}
		if d.Signal == prev.signal {
			continue
		}
		ps := slices.Clone(holders[t])
		sort.Strings(ps)
		l.add(!in, Event{At: now, Kind: KindSignal, Topic: t, Policy: d.Policy, Rule: d.Rule, Signal: d.Signal.String(),
			PrevSignal: prev.signal.String(), Producers: ps, Rate: d.Rate, PrevRate: prev.rate, Inputs: inputs(d), Reason: d.Reason})
	}
	for t := range l.topics {
		if _, ok := topics[t]; !ok {
			delete(l.topics, t)
			delete(l.servedTopics, t)
		}
	}
	current := make(map[grantKey]bool, len(leases))
	sorted := slices.Clone(leases)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Topic != sorted[j].Topic {
			return sorted[i].Topic.String() < sorted[j].Topic.String()
		}
		return sorted[i].Producer < sorted[j].Producer
	})
	for _, ls := range sorted {
		k := grantKey{ls.Producer, ls.Topic}
		current[k] = true
		d := topics[ls.Topic]
		in := served(ls.Topic, d.Policy)
		base := l.grants
		if in && l.servedGrants != nil {
			base = l.servedGrants
		}
		g, seen := base[k]
		if !seen {
			g = grant{rate: math.Inf(1), signal: quota.SignalOK} // a new producer starts unconstrained
		}
		kind := l.change(g.rate, ls.Rate)
		if kind == "" {
			l.setGrant(k, in, grant{rate: g.rate, signal: ls.Signal})
			continue
		}
		l.add(!in, Event{At: now, Kind: kind, Topic: ls.Topic, Policy: d.Policy, Rule: d.Rule, Signal: ls.Signal.String(),
			PrevSignal: g.signal.String(), Producers: []string{ls.Producer}, Rate: ls.Rate, PrevRate: g.rate,
			Inputs: inputs(d), Reason: d.Reason})
		l.setGrant(k, in, grant{rate: ls.Rate, signal: ls.Signal})
	}
	for k := range l.grants {
		if !current[k] {
			delete(l.grants, k) // the lease expired: a returning producer starts afresh
			delete(l.servedGrants, k)
		}
	}
}

// setGrant records g as the last seen of lease k, and as the last seen
// served when in. Called with l.mu held.
func (l *Log) setGrant(k grantKey, in bool, g grant) {
	l.grants[k] = g
	if in && l.servedGrants != nil {
		l.servedGrants[k] = g
	} else if !in {
		delete(l.servedGrants, k)
	}
}

// change classifies a grant going from prev to next (msg/s, +Inf
// unlimited): "" when within the threshold.
func (l *Log) change(prev, next float64) EventKind {
	pi, ni := math.IsInf(prev, 1), math.IsInf(next, 1)
	switch {
	case pi && ni:
		return ""
	case pi:
		return KindCut
	case ni:
		return KindRelease
	case next == prev:
		return ""
	case next == 0:
		return KindCut
	case prev == 0:
		return KindRelease
	case next < prev*(1-min(l.threshold, 1)):
		return KindCut
	case next > prev*(1+l.threshold):
		return KindRelease
	}
	return ""
}

// add stores e (with its sequence number), logs it and counts it; an
// event not served (Served said no) is marked so and logged at DEBUG,
// uncounted. Called with l.mu held.
func (l *Log) add(notServed bool, e Event) {
	e.NotServed = notServed
	l.seq++
	e.Seq = l.seq
	if len(l.buf) < l.capacity {
		l.buf = append(l.buf, e)
	} else {
		l.buf[l.start] = e
		l.start = (l.start + 1) % len(l.buf)
		l.dropped++
	}
	if !e.NotServed {
		l.counter.WithLabelValues(string(e.Kind)).Inc()
	}
	attrs := []any{"kind", e.Kind, "topic", e.Topic.String(), "policy", e.Policy, "rule", e.Rule.String(),
		"signal", e.Signal, "prevSignal", e.PrevSignal, "producers", e.Producers,
		"rate", RateText(e.Rate), "prevRate", RateText(e.PrevRate), "lag", e.Inputs.Lag, "headAge", logSeconds(e.Inputs.HeadAgeSeconds, "unknown"),
		"capacity", e.Inputs.Capacity, "capacityKnown", e.Inputs.CapacityKnown,
		"wait", logSeconds(e.Inputs.WaitSeconds, "unbounded"), "budget", logSeconds(e.Inputs.BudgetSeconds, "none")}
	if e.NotServed {
		// A follower's own decision: what it would have served. At
		// DEBUG, so that the log at INFO of every replica says only
		// what the producers got.
		l.log.Debug("quota decision", append(attrs, "served", false)...)
		return
	}
	l.log.Info("quota decision", attrs...)
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// logSeconds is s seconds as a duration for the log, rounded to the
// millisecond, or the word that says what a negative value stands for
// (an unbounded wait is stored as -1: "wait=-1ns" said nothing).
func logSeconds(s float64, negative string) any {
	if s < 0 {
		return negative
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// RateText is a rate in msg/s for humans: "unlimited" for +Inf, else
// with at most one decimal ("12.5/s").
func RateText(r float64) string {
	if math.IsInf(r, 1) {
		return "unlimited"
	}
	return strconv.FormatFloat(math.Round(r*10)/10, 'f', -1, 64) + "/s"
}

// EventQuery selects events. Zero fields match everything.
type EventQuery struct {
	// Producer matches events whose Producers include it.
	Producer string
	// Topic and Cluster match the topic's name and cluster, TopicKind its
	// kind ("": any).
	Topic, Cluster string
	TopicKind      lag.Kind
	Kind           EventKind
	// Since and Until bound the events' times (inclusive).
	Since, Until time.Time
	// Limit keeps the newest Limit events; 0: all.
	Limit int
}

// Events returns the matching events, oldest first, and how many events
// the ring dropped since the daemon started (when more than Config.Events
// were logged, the oldest are gone).
func (l *Log) Events(q EventQuery) ([]Event, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []Event{}
	for i := range l.buf {
		e := l.buf[(l.start+i)%len(l.buf)]
		if (q.Producer != "" && !slices.Contains(e.Producers, q.Producer)) || (q.Topic != "" && q.Topic != e.Topic.Name) || (q.TopicKind != "" && q.TopicKind != e.Topic.Kind) ||
			(q.Cluster != "" && q.Cluster != e.Topic.Cluster) || (q.Kind != "" && q.Kind != e.Kind) ||
			(!q.Since.IsZero() && e.At.Before(q.Since)) || (!q.Until.IsZero() && e.At.After(q.Until)) {
			continue
		}
		e.Producers = slices.Clone(e.Producers)
		out = append(out, e)
	}
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[len(out)-q.Limit:]
	}
	return out, l.dropped
}
