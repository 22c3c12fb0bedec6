package producerclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lagbridge/lagbridge/contract"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// quotaView is a topic's effective quota: from a lease, or the safe quota.
// Immutable once published; the lease goroutine replaces it.
type quotaView struct {
	params     *bucketParams
	rate       float64 // +Inf: unlimited
	burst      int
	signal     Signal
	retryAfter time.Duration
	avoid      []int32 // sorted
	// shares: the keyless shares of partitions in avoid (see
	// AvoidPartitioner), sorted by partition.
	shares    []quotaproto.PartitionShare
	advisory  bool
	fromLease bool
	closed    bool // safe quota closed: ErrQuotaUnavailable
	version   uint64
	expires   time.Time
	received  time.Time
	reason    string
	// rule: the lease's rule name (quotaproto.Lease.Rule), "" for the
	// safe quota, or a name that is not one (ruleName).
	rule string
	// rateWhy is rateReason(), built once with the view: a message
	// refused for want of a token costs no formatting.
	rateWhy string
}

// rateReason is the Reason of a rejection for want of a token under v.
func (v *quotaView) rateReason() string {
	var b strings.Builder
	b.WriteString("quota ")
	b.WriteString(strconv.FormatFloat(v.rate, 'g', 6, 64))
	b.WriteString(" msg/s, burst ")
	b.WriteString(strconv.Itoa(v.burst))
	if v.reason != "" {
		b.WriteString(" (")
		b.WriteString(v.reason)
		b.WriteString(")")
	}
	return b.String()
}

// maxRetryAfter bounds a believable slow-down hint; anything longer (or
// negative, or not a number) is garbled and means "no hint".
const maxRetryAfter = time.Hour

// decodedLease is a lease as received, checked, with its garbled hint
// noted.
type decodedLease struct {
	quotaproto.Lease
	garbledHint bool
	// badPlan says why the lease's plan (Then) was dropped; the lease
	// applies without it.
	badPlan string
}

// looseLease decodes a lease whose retryAfterMs may be garbage: the
// shallower field wins over the embedded one in encoding/json.
type looseLease struct {
	quotaproto.Lease
	RetryAfterMs json.RawMessage `json:"retryAfterMs"`
	Then         json.RawMessage `json:"then"`
}

// decodeLease decodes one JSON lease. A garbled retryAfterMs is not an
// error (the lease applies with no hint); anything else malformed is.
func decodeLease(raw []byte) (decodedLease, error) {
	var l looseLease
	if err := json.Unmarshal(raw, &l); err != nil {
		return decodedLease{}, fmt.Errorf("malformed lease: %w", err)
	}
	d := decodedLease{Lease: l.Lease}
	d.RetryAfterMs = 0
	if s := strings.TrimSpace(string(l.RetryAfterMs)); s != "" && s != "null" {
		// Compared in milliseconds: converted first, a huge value would
		// overflow time.Duration and wrap to a believable hint.
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 || ms > maxRetryAfter.Milliseconds() {
			d.garbledHint = true
		} else {
			d.RetryAfterMs = ms
		}
	}
	d.Then, d.badPlan = decodePlan(l.Then)
	var errs []string
	if d.Topic == "" {
		errs = append(errs, "no topic")
	}
	if d.Rate != nil && (bad(*d.Rate) || *d.Rate < 0) {
		errs = append(errs, fmt.Sprintf("rate %v", *d.Rate))
	}
	if d.Burst < 0 {
		errs = append(errs, fmt.Sprintf("burst %d", d.Burst))
	}
	for _, p := range d.AvoidPartitions {
		if p < 0 {
			errs = append(errs, fmt.Sprintf("partition %d", p))
			break
		}
	}
	if len(errs) > 0 {
		return decodedLease{}, fmt.Errorf("invalid lease for topic %q: %s", d.Topic, strings.Join(errs, ", "))
	}
	return d, nil
}

// decodePlan decodes a lease's plan (protocol 1.2). A plan that is not
// one (malformed, no time, a negative rate or burst) is dropped, and why
// is returned: the lease still applies, as from a daemon without plans.
func decodePlan(raw json.RawMessage) (*quotaproto.LeasePlan, string) {
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return nil, ""
	}
	var p quotaproto.LeasePlan
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, "malformed: " + err.Error()
	}
	switch {
	case p.At.IsZero():
		return nil, "no time"
	case bad(p.Rate) || p.Rate < 0:
		return nil, fmt.Sprintf("rate %v", p.Rate)
	case p.Burst < 0:
		return nil, fmt.Sprintf("burst %d", p.Burst)
	}
	return &p, ""
}

// looseSet decodes a LeaseSet lease by lease, so that one bad lease does
// not cost the others.
type looseSet struct {
	Producer       string            `json:"producer"`
	Version        uint64            `json:"version"`
	Leases         []json.RawMessage `json:"leases"`
	RefreshAfterMs json.RawMessage   `json:"refreshAfterMs"`
}

// decodedSet is a LeaseSet as received.
type decodedSet struct {
	version uint64
	leases  []decodedLease
	refresh time.Duration // 0: none (or garbled)
}

// decodeSet decodes a LeaseSet. It fails only when the JSON is not a set
// at all; bad leases are skipped and reported in problems.
func decodeSet(b []byte, producer string) (decodedSet, []error, error) {
	var ls looseSet
	if err := json.Unmarshal(b, &ls); err != nil {
		return decodedSet{}, nil, fmt.Errorf("malformed lease set: %w", err)
	}
	if ls.Producer != "" && ls.Producer != producer {
		return decodedSet{}, nil, fmt.Errorf("lease set is for producer %q, not %q", ls.Producer, producer)
	}
	ds := decodedSet{version: ls.Version}
	if ms, err := strconv.ParseInt(strings.TrimSpace(string(ls.RefreshAfterMs)), 10, 64); err == nil && ms > 0 && ms <= int64(time.Hour/time.Millisecond) {
		ds.refresh = time.Duration(ms) * time.Millisecond
	}
	var problems []error
	for _, raw := range ls.Leases {
		d, err := decodeLease(raw)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		ds.leases = append(ds.leases, d)
	}
	return ds, problems, nil
}

// loopback reports whether host (a URL's host name) is this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// leaseUpdate is what the source goroutines send to the owner.
type leaseUpdate struct {
	leases  []decodedLease
	deleted []string // topics whose lease was withdrawn (KV deletes)
	version uint64   // the set's version (HTTP); 0 for KV
	isSet   bool
	// resumed are the topics whose resume (core.resume) the report this
	// set answers carried: applied, their Block waits decide on the lease
	// in place (release).
	resumed []*topic
}

// activeLease is a lease the owner trusts until expiry. plan, when set,
// is what the lease allows from plan.At on (see planned), unless a newer
// lease replaces it first.
type activeLease struct {
	view   *quotaView
	expiry time.Time
	lease  decodedLease
	plan   *quotaproto.LeasePlan
}

// leaseOwner is the one goroutine that owns lease state: it applies
// updates from the sources (HTTP reporter and watcher, or the KV watcher),
// expires leases into the safe quota, and publishes each topic's view.
type leaseOwner struct {
	c       *core
	updates chan leaseUpdate
	version atomic.Uint64 // last applied set version (the watcher's ?version=)

	// endpoints are the daemons' base URLs (LeaseConfig.endpoints);
	// current indexes the one the HTTP sources talk to (see retryWait).
	endpoints []string
	current   atomic.Int32
	client    *http.Client
	failovers atomic.Uint64

	// reRegister asks the reporter to report now (the daemon forgot us).
	reRegister chan struct{}
	// registered is closed after the first successful report.
	registered chan struct{}
	regOnce    atomic.Bool
	// carried are the topics the last report built said resumed (see
	// core.resume), kept until a report with them is answered; the
	// reporter's.
	carried []*topic

	noLease *quotaView // the safe view before any lease

	// owned by the run goroutine
	active map[string]*activeLease
	// setHeld is how long the last applied set (version) outranks an older
	// one: until the latest expiry among its leases.
	setHeld time.Time

	// counters for metrics
	errorsTotal   atomic.Uint64
	malformed     atomic.Uint64
	garbledHints  atomic.Uint64
	expiredTotal  atomic.Uint64
	appliedTotal  atomic.Uint64
	plannedTotal  atomic.Uint64 // plans that took effect
	lastErrorUnix atomic.Int64
}

func newLeaseOwner(c *core) *leaseOwner {
	o := &leaseOwner{
		c:          c,
		endpoints:  c.cfg.Leases.endpoints(),
		client:     httpClientFor(c.cfg.Leases),
		updates:    make(chan leaseUpdate, 16),
		reRegister: make(chan struct{}, 1),
		registered: make(chan struct{}),
		active:     map[string]*activeLease{},
	}
	o.noLease = o.makeSafe("no lease yet")
	if t := c.cfg.Leases.TLS; t != nil && t.InsecureSkipVerify {
		c.cfg.Logger.Warn("lagbridge: leases TLS does not verify the daemon's certificate (InsecureSkipVerify); anyone on the path can hand out leases")
	}
	if c.cfg.Leases.Token != "" {
		for _, raw := range o.endpoints {
			if u, err := url.Parse(raw); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) {
				c.cfg.Logger.Warn("lagbridge: the lease token travels in clear text over plain http; use https", "url", raw)
			}
		}
	}
	return o
}

// safeView returns the view of the safe quota: the shared "no lease yet"
// view, or one saying when the last lease expired.
func (o *leaseOwner) safeView(expired time.Time) *quotaView {
	if expired.IsZero() {
		return o.noLease
	}
	return o.makeSafe("lease expired at " + expired.UTC().Format(time.RFC3339) + " without a refresh (daemon unreachable?)")
}

func (o *leaseOwner) makeSafe(why string) *quotaView {
	s := o.c.cfg.Leases.Safe
	v := &quotaView{signal: SignalOK}
	switch s.Mode {
	case SafeClosed:
		v.closed = true
		v.rate, v.params = 0, newBucketParams(0, 1)
		v.retryAfter = o.c.cfg.Leases.MinBackoff
		v.reason = why + "; the safe quota is closed"
	case SafeRate:
		v.rate, v.burst = s.Rate, s.Burst
		if v.burst == 0 {
			v.burst = int(math.Max(1, s.Rate/10))
		}
		v.params = newBucketParams(v.rate, v.burst)
		v.reason = why + "; safe quota " + strconv.FormatFloat(s.Rate, 'g', 6, 64) + " msg/s"
	default:
		v.rate, v.params = math.Inf(1), unlimitedParams
		v.reason = why + "; the safe quota is open"
	}
	v.rateWhy = v.rateReason()
	return v
}

// viewOf turns a lease received at now into a view.
func viewOf(d decodedLease, now time.Time, expiry time.Time) *quotaView {
	v := &quotaView{fromLease: true, version: d.Version, expires: expiry, received: now, reason: d.Reason, rule: ruleName(d.Rule), advisory: d.Advisory}
	if d.Rate == nil {
		v.rate, v.params = math.Inf(1), unlimitedParams
	} else {
		v.rate, v.burst = *d.Rate, d.Burst
		if v.burst == 0 {
			v.burst = int(math.Max(1, v.rate/10))
		}
		v.params = newBucketParams(v.rate, v.burst)
	}
	// ok, and signals this SDK does not know yet (SignalOK with an
	// error): the rate still applies.
	v.signal, _ = contract.ParseSignal(d.Signal)
	v.retryAfter = time.Duration(d.RetryAfterMs) * time.Millisecond
	if len(d.AvoidPartitions) > 0 {
		v.avoid = append([]int32(nil), d.AvoidPartitions...)
		sort.Slice(v.avoid, func(i, j int) bool { return v.avoid[i] < v.avoid[j] })
		v.shares = validShares(d.PartitionShares, v.avoid)
	}
	v.rateWhy = v.rateReason()
	return v
}

// ruleName is rule when it reads as a rule's name (1 to 40 of a-z, 0-9
// and '-', as every name the daemon gives), "" otherwise: a name is for
// programs to match on, and a garbled one matches nothing.
func ruleName(rule string) string {
	if len(rule) == 0 || len(rule) > 40 {
		return ""
	}
	for i := 0; i < len(rule); i++ {
		if c := rule[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return ""
		}
	}
	return rule
}

// validShares keeps the shares of ss that apply: of a partition in avoid
// (sorted), in (0, 1], the first of each partition, while their sum stays
// at most 1. A share that breaks these is dropped: its partition is then
// avoided outright, as by an SDK that does not know shares.
func validShares(ss []quotaproto.PartitionShare, avoid []int32) []quotaproto.PartitionShare {
	var out []quotaproto.PartitionShare
	sum := 0.0
	for _, s := range ss {
		if !(s.Share > 0 && s.Share <= 1) || !contains(avoid, int(s.Partition)) || sum+s.Share > 1 ||
			slices.ContainsFunc(out, func(o quotaproto.PartitionShare) bool { return o.Partition == s.Partition }) {
			continue
		}
		sum += s.Share
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b quotaproto.PartitionShare) int { return int(a.Partition) - int(b.Partition) })
	return out
}

// deliver hands an update to the owner; false when the producer closed.
func (o *leaseOwner) deliver(u leaseUpdate) bool {
	select {
	case o.updates <- u:
		return true
	case <-o.c.ctx.Done():
		return false
	}
}

// run is the owner goroutine.
func (o *leaseOwner) run() {
	c := o.c
	tm := c.clock.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case u := <-o.updates:
			// Apply first, then release: a Block wait released on
			// the old lease would be refused by a 0 the answer raises
			// (TestResumeAnswerAppliedBeforeRelease).
			o.apply(u)
			release(u.resumed)
		case <-tm.C():
			o.expire()
			o.due()
		}
		tm.Stop()
		if next, ok := o.nextExpiry(); ok {
			d := next.Sub(c.clock.Now())
			if d < 0 {
				d = 0
			}
			tm.Reset(d)
		} else {
			tm.Reset(time.Hour)
		}
	}
}

// apply installs an update. A lease set older than the last one applied
// is dropped: the reporter (POST) and the watcher or stream deliver sets
// concurrently, so a report's answer can arrive after a newer push, and
// applying it would undo that push (a stop lifted by the ok before it).
// The daemon's set versions increase, across its restarts too (they start
// from the wall clock); should a daemon ever answer with lower versions
// (a clock stepped back), its sets apply again once every lease of the
// newer set has expired. The KV source delivers single leases from one
// ordered stream, with versions that number a lease's content, not its
// place in time (a topic's lease may move to an older version when
// another cluster's lease becomes the strictest): those are applied in
// the order they come.
//
// Two guards keep a hostile or broken answer from holding a producer: a
// lease's expiry is clamped to its arrival plus MaxLeaseTTL, and a set
// version beyond what a daemon can have made (garbledVersion) ranks as
// version 0: it applies only when no set is held, and holds back no later
// set, so a version of 2^64-1 cannot freeze the leases that follow.
func (o *leaseOwner) apply(u leaseUpdate) {
	c := o.c
	now := c.clock.Now()
	version := u.version
	if u.isSet {
		if garbledVersion(version, now) {
			o.malformed.Add(1)
			c.cfg.Logger.Warn("lagbridge lease set version is beyond the wall-clock range; it ranks as the oldest", "version", version)
			version = 0
		}
		if last := o.version.Load(); version < last && now.Before(o.setHeld) {
			c.cfg.Logger.Debug("lagbridge lease set older than the one applied; ignored", "version", version, "applied", last)
			return
		}
		o.setHeld = now
	}
	for _, d := range u.leases {
		if d.garbledHint {
			o.garbledHints.Add(1)
			c.cfg.Logger.Warn("lagbridge lease has a garbled retry-after; treating it as no hint", "topic", d.Topic)
		}
		expiry := d.ExpiresAt
		if expiry.IsZero() {
			expiry = now.Add(c.cfg.Leases.DefaultLeaseTTL)
		}
		if latest := now.Add(c.cfg.Leases.MaxLeaseTTL); expiry.After(latest) {
			expiry = latest
		}
		t, ok := o.leaseTopic(d.Topic)
		if !ok {
			o.malformed.Add(1)
			c.cfg.Logger.Warn("lagbridge lease for a topic this producer has not written to, beyond the protocol's topics per producer; skipped", "topic", d.Topic, "max", quotaproto.MaxTopics)
			continue
		}
		if !expiry.After(now) {
			// Already expired on arrival (stale, or clocks apart): not
			// trusted; the safe quota applies.
			o.expiredTotal.Add(1)
			c.cfg.Logger.Warn("lagbridge lease arrived expired (a key a stopped daemon left in the KV bucket, or clocks apart: check clock sync); the safe quota applies",
				"topic", d.Topic, "expiresAt", expiry)
			delete(o.active, d.Topic)
			t.setView(o.safeView(expiry), c.mono.nanos())
			continue
		}
		if u.isSet && expiry.After(o.setHeld) {
			o.setHeld = expiry
		}
		a := &activeLease{view: viewOf(d, now, expiry), expiry: expiry, lease: d, plan: o.checkPlan(d, expiry)}
		o.active[d.Topic] = a
		if a.plan != nil && !a.plan.At.After(now) {
			// Due already (it arrived late, through a failover): the
			// lease says what holds from then on.
			o.planned(d.Topic, a, now)
		}
		t.setView(a.view, c.mono.nanos())
		o.appliedTotal.Add(1)
	}
	for _, name := range u.deleted {
		if _, ok := o.active[name]; ok {
			delete(o.active, name)
			c.topic(name).setView(o.makeSafe("lease withdrawn by the daemon"), c.mono.nanos())
		}
	}
	if u.isSet {
		o.version.Store(version)
	}
}

// leaseTopic returns the topic a lease is for. A lease may come before
// the producer's first message to its topic (a KV bucket holds the leases
// of an earlier run), so the topic is created, but only while the producer
// knows fewer than quotaproto.MaxTopics topics, the most one report names:
// a daemon has no lease to give beyond those, and a hostile one must not
// grow the producer's topics (each a view, a throttle window and a line in
// every report) without bound. false: skip the lease.
func (o *leaseOwner) leaseTopic(name string) (*topic, bool) {
	c := o.c
	topics := *c.topics.Load()
	if t := topics[name]; t != nil {
		return t, true
	}
	if len(topics) >= quotaproto.MaxTopics {
		return nil, false
	}
	return c.topic(name), true
}

// maxVersionLead is how far a set version may run ahead of the wall clock
// in microseconds. The daemon starts its versions from the wall clock
// (Unix microseconds) and adds one per change, far fewer than one per
// microsecond; a week allows for years of changes and for clocks apart.
const maxVersionLead = 7 * 24 * time.Hour

// garbledVersion reports whether a set version is beyond what a daemon
// can have made by now: more than maxVersionLead ahead of now in Unix
// microseconds (2^64-1, for one). Versions of a daemon that does not
// start from the wall clock are small, never garbled.
func garbledVersion(v uint64, now time.Time) bool {
	us := now.UnixMicro()
	if us < 0 {
		return false
	}
	return v > uint64(us)+uint64(maxVersionLead/time.Microsecond)
}

// expire moves the topics whose lease expired to the safe quota, and asks
// the reporter for a fresh answer: the daemon's current set may have been
// ignored while a newer-versioned set was held.
func (o *leaseOwner) expire() {
	now := o.c.clock.Now()
	expired := false
	for name, a := range o.active {
		if !a.expiry.After(now) {
			delete(o.active, name)
			o.expiredTotal.Add(1)
			o.c.cfg.Logger.Warn("lagbridge lease expired without a refresh; using the safe quota", "topic", name)
			o.c.topic(name).setView(o.safeView(a.expiry), o.c.mono.nanos())
			expired = true
		}
	}
	if expired {
		o.askReport()
	}
}

// nextExpiry is the next time a lease expires or a plan is due.
func (o *leaseOwner) nextExpiry() (time.Time, bool) {
	var next time.Time
	for _, a := range o.active {
		if next.IsZero() || a.expiry.Before(next) {
			next = a.expiry
		}
		if a.plan != nil && a.plan.At.Before(next) {
			next = a.plan.At
		}
	}
	return next, !next.IsZero()
}

// checkPlan returns d's plan when it can apply: one that decoded well and
// is due before the lease expires (expiry, as clamped). Otherwise nil,
// saying why in the log.
func (o *leaseOwner) checkPlan(d decodedLease, expiry time.Time) *quotaproto.LeasePlan {
	why := d.badPlan
	if why == "" && d.Then != nil && !d.Then.At.Before(expiry) {
		why = "due at " + d.Then.At.UTC().Format(time.RFC3339Nano) + ", not before the lease expires at " + expiry.UTC().Format(time.RFC3339Nano)
	}
	if why != "" {
		o.malformed.Add(1)
		o.c.cfg.Logger.Warn("lagbridge lease has an invalid plan (then); the lease applies without it", "topic", d.Topic, "problem", why)
		return nil
	}
	return d.Then
}

// due applies the plans whose time came: no newer lease replaced theirs
// by then (the daemon's next decision did not come: a leader lost).
func (o *leaseOwner) due() {
	now := o.c.clock.Now()
	for name, a := range o.active {
		if a.plan != nil && !a.plan.At.After(now) {
			o.planned(name, a, now)
			o.c.topic(name).setView(a.view, o.c.mono.nanos())
		}
	}
}

// planned makes a's view its lease's plan, as of now: the plan's rate and
// burst, everything else the lease's, until the lease expires. The caller
// publishes the view.
func (o *leaseOwner) planned(name string, a *activeLease, now time.Time) {
	d := a.lease
	r := a.plan.Rate
	d.Rate, d.Burst, d.Then = &r, a.plan.Burst, nil
	d.Reason = "planned from " + a.plan.At.UTC().Format(time.RFC3339Nano) + " (no newer lease by then)"
	if a.lease.Reason != "" {
		d.Reason += ": " + a.lease.Reason
	}
	o.c.cfg.Logger.Info("lagbridge lease plan took effect: no newer lease came by its time", "topic", name, "rate", r, "at", a.plan.At)
	a.view, a.plan = viewOf(d, now, a.expiry), nil
	o.plannedTotal.Add(1)
}

// leaseError records a source error for metrics and logs.
func (o *leaseOwner) leaseError(msg string, err error) {
	o.errorsTotal.Add(1)
	o.lastErrorUnix.Store(o.c.clock.Now().Unix())
	o.c.cfg.Logger.Warn(msg, "error", err)
}

// errNoLeaseSource is returned by start for a KV configuration without a
// JetStream context.
var errNoLeaseSource = errors.New("leases from a KV bucket need LeaseConfig.KV (a JetStream context)")
