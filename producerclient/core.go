package producerclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/ttl"
)

// CallOption overrides a producer default for one call. It is a small
// value (no allocation).
type CallOption struct {
	set  uint8
	mode Mode
	crit Criticality
}

const (
	setMode = 1 << iota
	setCrit
)

// WithMode makes this call Block or Drop regardless of Config.Mode.
func WithMode(m Mode) CallOption { return CallOption{set: setMode, mode: m} }

// WithCriticality sets this message's criticality, overriding both
// Config.Criticality and a lagbridge-criticality header already on the
// message.
func WithCriticality(c Criticality) CallOption { return CallOption{set: setCrit, crit: c} }

// Reasons of rejections, the label values of lagbridge_client_rejected_total.
const (
	reasonRate = iota
	reasonInFlight
	reasonThrottled
	reasonStop
	reasonQuotaUnavailable
	reasonClosed
	reasonExpired
	reasonBroker
	reasonRetryBudget
	reasonCanceled
	numReasons
)

var reasonNames = [numReasons]string{
	reasonRate:             "rate",
	reasonInFlight:         "in_flight",
	reasonThrottled:        "throttled",
	reasonStop:             "stop",
	reasonQuotaUnavailable: "quota_unavailable",
	reasonClosed:           "closed",
	reasonExpired:          "expired",
	reasonBroker:           "broker",
	reasonRetryBudget:      "retry_budget",
	reasonCanceled:         "canceled",
}

// topic is the SDK's state for one lease key (Kafka topic or NATS stream).
// Producers read it lock-free; only the lease goroutine writes the view.
//
// Fields are grouped by who writes them, each group on its own cache lines,
// so that the producing goroutines and the broker client's completion
// goroutine do not fight over lines they do not share.
type topic struct {
	// Read-mostly.
	name     string
	throttle *throttler // nil when disabled
	view     atomic.Pointer[quotaView]
	changed  atomic.Pointer[chan struct{}] // closed at the next view change
	bucket   bucket                        // pads itself
	inflight inflight                      // written on both sides
	_        [cacheLine]byte

	// Written by producing goroutines. Demand (messages asked) is
	// admitted + refused; reportedDemand is that sum at the last report.
	admitted       atomic.Uint64
	attempts       atomic.Uint64
	refused        atomic.Uint64 // rejected at admission (before any send)
	advisory       atomic.Uint64 // over an advisory lease's rate
	reportedDemand atomic.Uint64
	_              [cacheLine]byte

	// Written on completion.
	accepted   atomic.Uint64
	brokerErrs atomic.Uint64
	retries    atomic.Uint64
	rejected   [numReasons]atomic.Uint64
}

// changedCh returns a channel closed at the next change of t's view.
func (t *topic) changedCh() <-chan struct{} { return *t.changed.Load() }

// setView installs v at now (monotonic nanoseconds) and wakes everything
// waiting on the old one. Only the lease goroutine (and topic creation)
// calls it.
func (t *topic) setView(v *quotaView, now int64) {
	t.view.Store(v)
	t.bucket.set(v.params, now)
	ch := make(chan struct{})
	if old := t.changed.Swap(&ch); old != nil {
		close(*old)
	}
}

// core is what the Kafka and NATS producers share: topics, quotas, the
// retry budget, throttling, the lease goroutines and Close.
type core struct {
	cfg    Config
	clock  Clock
	mono   monotonic
	budget *RetryBudget

	topicsMu sync.Mutex // serialises topic creation
	topics   atomic.Pointer[map[string]*topic]
	last     atomic.Pointer[topic] // the topic looked up last
	// topicAdded wakes the lease reporter when a topic appears.
	topicAdded chan struct{}

	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	closed    atomic.Bool
	closeOnce sync.Once
	spawnMu   sync.RWMutex   // orders spawn against Close
	wg        sync.WaitGroup // every goroutine the producer starts

	leases    *leaseOwner
	collector *collector

	// Flush waits on idle, broadcast when a message finishes while
	// flushers > 0.
	flushers atomic.Int32
	idle     notifier

	// budgetOffset converts the producer's monotonic nanoseconds to the
	// retry budget's (they share a clock unless budgetOwnClock).
	budgetOffset   int64
	budgetOwnClock bool

	unhandled atomic.Uint64 // async failures with no callback
}

func newCore(cfg Config) (*core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &core{cfg: cfg, clock: cfg.Clock, mono: newMonotonic(cfg.Clock), topicAdded: make(chan struct{}, 1)}
	c.budget = cfg.Retry.Shared
	if c.budget == nil {
		b, err := NewRetryBudget(cfg.Retry.Budget, cfg.Clock)
		if err != nil {
			return nil, err
		}
		c.budget = b
	}
	if c.budget.mono.clock == c.clock {
		c.budgetOffset = int64(c.mono.epoch.Sub(c.budget.mono.epoch))
	} else {
		c.budgetOwnClock = true
	}
	m := map[string]*topic{}
	c.topics.Store(&m)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.leases = newLeaseOwner(c)
	for _, t := range cfg.Topics {
		c.topic(t)
	}
	if cfg.Registerer != nil {
		c.collector = newCollector(c)
		if err := cfg.Registerer.Register(c.collector); err != nil {
			c.cancel()
			return nil, fmt.Errorf("%w: register metrics: %w", ErrInvalidOption, err)
		}
	}
	return c, nil
}

// start launches the lease goroutines (after the producer-specific setup);
// js is the NATS producer's JetStream context, nil for Kafka.
func (c *core) start(js jetstream.JetStream) error { return c.leases.start(js) }

// topic returns the state of name, creating it on first use.
func (c *core) topic(name string) *topic {
	// Most producers write one topic: check the last one first.
	if t := c.last.Load(); t != nil && t.name == name {
		return t
	}
	if t := (*c.topics.Load())[name]; t != nil {
		c.last.Store(t)
		return t
	}
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	old := *c.topics.Load()
	if t := old[name]; t != nil {
		return t
	}
	t := &topic{name: name}
	if c.cfg.MaxInFlight > 0 {
		t.inflight.limit = int64(c.cfg.MaxInFlight)
	}
	if !c.cfg.Throttle.Disabled {
		t.throttle = &throttler{k: c.cfg.Throttle.K, w: newWindow(int64(c.cfg.Throttle.Window), 24)}
	}
	t.setView(c.leases.safeView(time.Time{}), c.mono.nanos())
	m := make(map[string]*topic, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = t
	c.topics.Store(&m)
	select {
	case c.topicAdded <- struct{}{}:
	default:
	}
	return t
}

// msg is the per-message state that lives across attempts. It is kept
// small: the Kafka producer allocates one per record. Times are monotonic
// nanoseconds of c.mono.
type msg struct {
	t        *topic
	ctx      context.Context
	dl       int64 // the message's deadline (valid when hasDL)
	limit    int64 // Block waits give up at this time (the context's deadline until admit)
	sent     int64 // when the current attempt was sent
	attempts int32
	mode     Mode
	crit     Criticality
	hasDL    bool
	held     bool // holds an in-flight slot
}

// deadline is the message's deadline as a time (zero when none).
func (c *core) deadline(m *msg) time.Time {
	if !m.hasDL {
		return time.Time{}
	}
	return c.mono.at(m.dl)
}

// prepare resolves the call options and the deadline of a message, without
// reading the clock. hdr is what the message's own headers already say: the
// earlier deadline wins, and an explicit criticality option wins over the
// header's.
func (c *core) prepare(ctx context.Context, m *msg, t *topic, opts []CallOption, hdr ttl.Meta, hasHdrCrit bool) {
	m.t, m.ctx = t, ctx
	m.mode = c.cfg.Mode
	m.crit = c.cfg.Criticality
	if hasHdrCrit {
		m.crit = hdr.Criticality
	}
	for _, o := range opts {
		if o.set&setMode != 0 {
			m.mode = o.mode
		}
		if o.set&setCrit != 0 && o.crit.Valid() {
			m.crit = o.crit
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		m.limit = c.mono.of(dl)
		m.dl, m.hasDL = m.limit, true
	}
	if hdr.HasDeadline() {
		if h := c.mono.of(hdr.Deadline); !m.hasDL || h < m.dl {
			m.dl, m.hasDL = h, true
		}
	}
}

// admit runs the local checks for a new message at now (one clock read
// per message, shared by every check): closed, deadline, lease signal,
// in-flight cap, token bucket. A message without a deadline gets
// Config.MessageTTL. On success the message holds an in-flight slot. It
// returns nil or a rejection (without the message).
func (c *core) admit(m *msg, now int64) *RejectError {
	t := m.t
	c.limits(m, now)
	if r := c.admitChecks(m, now); r != nil {
		t.refused.Add(1)
		return r
	}
	t.admitted.Add(1)
	return nil
}

// limits completes m's deadline and Block limit at now, its first
// admission: Config.MessageTTL for a message without a deadline, and
// Config.MaxBlock for a wait without a context deadline.
func (c *core) limits(m *msg, now int64) {
	if !m.hasDL && c.cfg.MessageTTL > 0 {
		m.dl, m.hasDL = now+int64(c.cfg.MessageTTL), true
	}
	// Block waits end at the context's deadline, or after MaxBlock; and
	// never after the message's own deadline.
	if m.limit == 0 {
		m.limit = now + int64(c.cfg.MaxBlock)
	}
	if m.hasDL && m.dl < m.limit {
		m.limit = m.dl
	}
}

func (c *core) admitChecks(m *msg, now int64) *RejectError {
	t := m.t
	if c.closed.Load() {
		return c.rejectCount(t, reasonClosed, reject(t.name, SignalStop, ErrClosed, "the producer is closed", 0, nil))
	}
	if err := m.ctx.Err(); err != nil {
		return c.rejectCount(t, reasonCanceled, reject(t.name, SignalSlowDown, nil, "context done before sending", 0, err))
	}
	if m.hasDL && now >= m.dl {
		return c.rejectCount(t, reasonExpired, reject(t.name, SignalStop, ErrExpired, "the message's deadline passed before it was sent", 0, nil))
	}
	v := t.view.Load()
	if r := c.checkView(t, v); r != nil {
		return r
	}
	if r := c.acquireSlot(m); r != nil {
		return r
	}
	m.held = true
	if r := c.takeToken(m, now); r != nil {
		c.releaseSlot(m)
		return r
	}
	return nil
}

// checkView rejects when the quota says stop or is closed.
func (c *core) checkView(t *topic, v *quotaView) *RejectError {
	if r := viewReject(t, v); r != nil {
		return c.rejectCount(t, int(r.reason), r)
	}
	return nil
}

// viewReject is checkView's rejection, not counted.
func viewReject(t *topic, v *quotaView) *RejectError {
	switch {
	case v.closed:
		return uncounted(reasonQuotaUnavailable, reject(t.name, SignalSlowDown, ErrQuotaUnavailable, v.reason, v.retryAfter, nil))
	case v.signal == SignalStop && !v.advisory:
		return uncounted(reasonStop, reject(t.name, SignalStop, nil, v.reason, 0, nil))
	}
	return nil
}

func (c *core) acquireSlot(m *msg) *RejectError {
	t := m.t
	if t.inflight.tryAcquire() {
		return nil
	}
	full := func(err error) *RejectError {
		return c.rejectCount(t, reasonInFlight, reject(t.name, SignalSlowDown, ErrInFlightLimit,
			fmt.Sprintf("%d messages in flight on %s", t.inflight.limit, t.name), 0, err))
	}
	if m.mode == Drop {
		return full(nil)
	}
	for {
		ch := t.inflight.wait()
		if t.inflight.tryAcquire() {
			t.inflight.done()
			return nil
		}
		wait := time.Duration(m.limit - c.mono.nanos())
		if wait <= 0 {
			t.inflight.done()
			return full(nil)
		}
		err := c.sleep(m.ctx, wait, ch)
		t.inflight.done()
		if errors.Is(err, errTimer) {
			if t.inflight.tryAcquire() {
				return nil
			}
			return full(nil)
		}
		if err != nil {
			return c.waitErr(t, err, full)
		}
		if t.inflight.tryAcquire() {
			return nil
		}
	}
}

func (c *core) releaseSlot(m *msg) {
	if m.held {
		m.held = false
		m.t.inflight.release()
	}
}

// takeToken takes a token from the bucket for m at now, waiting in Block
// mode.
func (c *core) takeToken(m *msg, now int64) *RejectError {
	t := m.t
	for first := true; ; first = false {
		// The change channel first, then the lease: a change in between
		// wakes the wait below instead of being missed.
		ch := t.changedCh()
		v := t.view.Load()
		if !first {
			now = c.mono.nanos()
		}
		ok, wait := t.bucket.admit(now, m.crit)
		if ok {
			return nil
		}
		if v.advisory {
			t.advisory.Add(1)
			return nil
		}
		after := time.Duration(wait)
		if v.signal == SignalSlowDown && v.retryAfter > after {
			after = v.retryAfter
		}
		limited := func(err error) *RejectError {
			return c.rejectCount(t, reasonRate, reject(t.name, SignalSlowDown, ErrRateLimited, v.rateReason(), after, err))
		}
		if m.mode == Drop || now+wait > m.limit {
			// Fail at once rather than wait in vain: the token would
			// come after the deadline.
			return limited(nil)
		}
		if err := c.sleep(m.ctx, time.Duration(wait), ch); err != nil && !errors.Is(err, errTimer) {
			return c.waitErr(t, err, limited)
		}
		if r := c.checkView(t, t.view.Load()); r != nil {
			return r
		}
	}
}

// admitN admits up to n messages that share m (topic, mode, criticality,
// deadline; m went through limits) at now, without waiting: admit's checks
// once, then up to n in-flight slots in one operation and as many tokens
// in one compare-and-swap. It returns how many, a prefix of the n, now
// hold a slot and a token, and when fewer than n, why the next one was
// not admitted; the rejection is not counted (countRejects), and its
// reason is reasonRate or reasonInFlight when k > 0 (waiting may help).
// It counts nothing else either: the caller counts admitted and refused.
func (c *core) admitN(m *msg, n int, now int64) (int, *RejectError) {
	t := m.t
	if c.closed.Load() {
		return 0, uncounted(reasonClosed, reject(t.name, SignalStop, ErrClosed, "the producer is closed", 0, nil))
	}
	if err := m.ctx.Err(); err != nil {
		return 0, uncounted(reasonCanceled, reject(t.name, SignalSlowDown, nil, "context done before sending", 0, err))
	}
	if m.hasDL && now >= m.dl {
		return 0, uncounted(reasonExpired, reject(t.name, SignalStop, ErrExpired, "the message's deadline passed before it was sent", 0, nil))
	}
	v := t.view.Load()
	if r := viewReject(t, v); r != nil {
		return 0, r
	}
	slots := int(t.inflight.tryAcquireN(int64(n)))
	k, wait := t.bucket.admitN(now, m.crit, slots)
	if k < slots {
		if v.advisory {
			t.advisory.Add(uint64(slots - k))
			k = slots
		} else {
			t.inflight.releaseN(int64(slots - k))
		}
	}
	switch {
	case k == n:
		return n, nil
	case k < slots:
		after := time.Duration(wait)
		if v.signal == SignalSlowDown && v.retryAfter > after {
			after = v.retryAfter
		}
		return k, uncounted(reasonRate, reject(t.name, SignalSlowDown, ErrRateLimited, v.rateReason(), after, nil))
	default:
		return k, uncounted(reasonInFlight, reject(t.name, SignalSlowDown, ErrInFlightLimit,
			fmt.Sprintf("%d messages in flight on %s", t.inflight.limit, t.name), 0, nil))
	}
}

// sentN is beforeSend's bookkeeping for n first attempts sent at now
// under m (the adaptive throttle's decision is the caller's, per message).
func (c *core) sentN(m *msg, n int, now int64) {
	if n <= 0 {
		return
	}
	c.budget.requestN(c.budgetNow(now), int64(n))
	m.t.attempts.Add(uint64(n))
}

// succeededN is succeeded and finish for n messages of one batch sent
// under m, after their callbacks ran.
func (c *core) succeededN(m *msg, n int64) {
	if n > 0 {
		t := m.t
		t.throttle.outcomeN(m.sent, n)
		t.accepted.Add(uint64(n))
		c.budget.outcomeN(true, n)
		t.inflight.releaseN(n)
	}
	if c.flushers.Load() > 0 {
		c.idle.broadcast()
	}
}

// beforeSend is the last local check before an attempt at now: adaptive
// throttling. It counts the attempt and, for a first attempt, the budget
// deposit.
func (c *core) beforeSend(m *msg, now int64) *RejectError {
	t := m.t
	m.sent = now
	ok, p := t.throttle.allow(now)
	if !ok {
		return c.rejectCount(t, reasonThrottled, reject(t.name, SignalSlowDown, ErrThrottled,
			fmt.Sprintf("the broker accepted too few recent requests; refusing locally with probability %.2f", p), 0, nil))
	}
	if m.attempts == 0 {
		c.budget.request(c.budgetNow(now))
	}
	m.attempts++
	t.attempts.Add(1)
	return nil
}

// budgetNow converts now to the retry budget's time base.
func (c *core) budgetNow(now int64) int64 {
	if c.budgetOwnClock {
		return c.budget.mono.nanos()
	}
	return now + c.budgetOffset
}

// succeeded counts a delivered message; the caller calls finish after
// the message's callback ran (so that Flush returns after the callbacks).
// The outcome is counted at the attempt's send time: the throttling
// window's slots are seconds wide, and this saves a clock read.
func (c *core) succeeded(m *msg) {
	m.t.throttle.outcome(m.sent, true)
	m.t.accepted.Add(1)
	c.budget.outcome(true)
}

// finish releases a message's slot (delivered, or finally failed after
// admission) and wakes Flush.
func (c *core) finish(m *msg) {
	c.releaseSlot(m)
	if c.flushers.Load() > 0 {
		c.idle.broadcast()
	}
}

// failed decides what follows a failed attempt: a retry after the
// returned delay, or the final rejection. class is the broker-specific
// classification of err; own is the message's own context besides the
// call's (a Kafka record's Context), or nil.
func (c *core) failed(m *msg, err error, class errClass, own context.Context) (time.Duration, *RejectError) {
	if r := c.callerEnded(m, own, err); r != nil {
		return 0, r
	}
	t := m.t
	t.brokerErrs.Add(1)
	t.throttle.outcome(m.sent, false)
	c.budget.outcome(false)
	final := func(reason int, sig Signal, extra error, why string, after time.Duration) *RejectError {
		r := reject(t.name, sig, ErrBrokerRejected, why, after, err)
		r.extra = extra
		r.Attempts = int(m.attempts)
		return c.rejectCount(t, reason, r)
	}
	if errors.Is(err, ErrClosed) || c.closed.Load() {
		return 0, c.closedReject(t, m.attempts, err)
	}
	if m.ctx.Err() != nil {
		return 0, final(reasonCanceled, SignalSlowDown, nil, "context done", 0)
	}
	if !class.retriable {
		return 0, final(reasonBroker, class.signal, nil, class.why, 0)
	}
	v := t.view.Load()
	if v.signal == SignalStop && !v.advisory {
		return 0, final(reasonStop, SignalStop, nil, "the quota says stop: "+v.reason, 0)
	}
	if int(m.attempts) >= c.cfg.Retry.MaxAttempts {
		return 0, final(reasonBroker, class.signal, nil, fmt.Sprintf("%s; gave up after %d attempts", class.why, m.attempts), 0)
	}
	delay := c.backoff(int(m.attempts))
	if v.signal == SignalSlowDown && v.retryAfter > delay {
		delay = v.retryAfter
	}
	if class.retryAfter > delay {
		delay = class.retryAfter
	}
	if m.hasDL && c.mono.nanos()+int64(delay) >= m.dl {
		return 0, final(reasonBroker, class.signal, nil, class.why+"; the deadline comes before the next retry", delay)
	}
	if !c.budget.tryRetry() {
		return 0, final(reasonRetryBudget, class.signal, ErrRetryBudgetExhausted, class.why, delay)
	}
	t.retries.Add(1)
	return delay, nil
}

// callerEnded returns the rejection of an attempt that failed because the
// caller's context ended while the broker client held the message: the
// call's context, or own (a Kafka record's own Context; nil for none).
// That is the caller's decision, not the broker's answer: the message is
// rejected at once (reason canceled, as when the context ends before the
// send; the error matches the context's), and neither the adaptive
// throttle, the retry budget nor the broker error count sees it. A missing
// JetStream ack (errNoAck) counts too when the context had ended by then:
// the wait for it ends with the context. It returns nil for any other
// failure.
func (c *core) callerEnded(m *msg, own context.Context, err error) *RejectError {
	ctxErr := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	if !ctxErr && !errors.Is(err, errNoAck) {
		return nil
	}
	var ended error
	switch {
	case m.ctx.Err() != nil:
		ended = m.ctx.Err()
	case own != nil && own.Err() != nil:
		ended = own.Err()
	case !ctxErr && c.deadlinePassed(m.ctx):
		// The ack wait ended at the context's deadline, a moment
		// before the context's own timer marked it done.
		ended = context.DeadlineExceeded
	default:
		return nil
	}
	if !ctxErr {
		err = fmt.Errorf("%w (%w)", ended, err)
	}
	t := m.t
	r := reject(t.name, SignalSlowDown, nil, "context done while the broker client held the message", 0, err)
	r.Attempts = int(m.attempts)
	return c.rejectCount(t, reasonCanceled, r)
}

// deadlinePassed reports whether ctx has a deadline that is not after now.
func (c *core) deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !c.clock.Now().Before(dl)
}

// waitRetry waits delay before a retry, ending at once when the quota
// turns to stop, the context ends or the producer closes. Then it re-runs
// the quota checks a retry must pass (signal, bucket). It returns nil to
// go ahead.
func (c *core) waitRetry(m *msg, delay time.Duration, cause error) *RejectError {
	t := m.t
	end := c.mono.nanos() + int64(delay)
	for {
		wait := time.Duration(end - c.mono.nanos())
		if wait <= 0 {
			break
		}
		// Take the change channel before looking at the lease: a stop
		// that lands in between closes this channel and wakes the sleep,
		// instead of being missed for the whole backoff.
		ch := t.changedCh()
		if v := t.view.Load(); v.signal == SignalStop && !v.advisory {
			// A stop ends the retry at once.
			r := reject(t.name, SignalStop, ErrBrokerRejected, "the quota says stop: "+v.reason, 0, cause)
			r.Attempts = int(m.attempts)
			return c.rejectCount(t, reasonStop, r)
		}
		err := c.sleep(m.ctx, wait, ch)
		if errors.Is(err, errTimer) {
			break
		}
		if err != nil {
			r := c.waitErr(t, err, func(err error) *RejectError {
				return reject(t.name, SignalSlowDown, ErrBrokerRejected, "context done while waiting to retry", 0, err)
			})
			if r.Err != cause && cause != nil && !errors.Is(r, ErrClosed) {
				r.Err = errors.Join(r.Err, cause)
			}
			r.Attempts = int(m.attempts)
			return r
		}
	}
	if r := c.checkView(t, t.view.Load()); r != nil {
		r.Err, r.Attempts = cause, int(m.attempts)
		return r
	}
	if r := c.takeToken(m, c.mono.nanos()); r != nil {
		r.Err = errors.Join(r.Err, cause)
		r.Attempts = int(m.attempts)
		return r
	}
	return nil
}

// backoff is the delay before retry number attempts (1-based):
// Backoff*2^(attempts-1) capped at MaxBackoff, with "equal jitter" (half
// fixed, half random) so that a delay is never near zero.
func (c *core) backoff(attempts int) time.Duration {
	return jitter(expo(c.cfg.Retry.Backoff, c.cfg.Retry.MaxBackoff, attempts))
}

func expo(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// errTimer is sleep's result when the full duration passed.
var errTimer = errors.New("timer")

// errClosedWait is sleep's result when the producer closed.
var errClosedWait = errors.New("closed")

// sleep waits d (on the Clock), or until wake is closed (nil error), ctx
// ends (its error) or the producer closes (errClosedWait).
func (c *core) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	tm := c.clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return errTimer
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return errClosedWait
	}
}

// waitErr turns a failed wait into a rejection: closed, or the context's
// error under the reason make builds.
func (c *core) waitErr(t *topic, err error, mk func(error) *RejectError) *RejectError {
	if errors.Is(err, errClosedWait) {
		return c.rejectCount(t, reasonClosed, reject(t.name, SignalStop, ErrClosed, "the producer closed while the message waited", 0, nil))
	}
	r := mk(err)
	if !r.counted {
		r = c.rejectCount(t, reasonCanceled, r)
	}
	return r
}

func (c *core) rejectCount(t *topic, reason int, r *RejectError) *RejectError {
	if !r.counted {
		t.rejected[reason].Add(1)
		r.counted, r.reason = true, uint8(reason)
	}
	return r
}

// uncounted marks r with its reason without counting it yet (see
// countRejects): a batch counts a rejection once per message it ends up
// handed to.
func uncounted(reason int, r *RejectError) *RejectError {
	r.reason = uint8(reason)
	return r
}

// countRejects counts r for n messages: n, or n-1 more when r was counted
// once already.
func (c *core) countRejects(t *topic, r *RejectError, n int) {
	if r.counted {
		n--
	}
	if n > 0 {
		t.rejected[r.reason].Add(uint64(n))
	}
	r.counted = true
}

// outstanding is the number of messages admitted and not finally done.
func (c *core) outstanding() int64 {
	var n int64
	for _, t := range *c.topics.Load() {
		n += t.inflight.count()
	}
	return n
}

// flush waits until every admitted message is finally done.
func (c *core) flush(ctx context.Context) error {
	c.flushers.Add(1)
	defer c.flushers.Add(-1)
	for {
		if c.outstanding() <= 0 {
			return nil
		}
		ch := c.idle.wait()
		if c.outstanding() <= 0 {
			c.idle.done()
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			c.idle.done()
			return ctx.Err()
		}
		c.idle.done()
	}
}

// close stops the lease goroutines and every wait; it is idempotent and
// waits for the goroutines the producer started.
func (c *core) close() {
	c.closeOnce.Do(func() {
		c.spawnMu.Lock()
		c.closed.Store(true)
		c.spawnMu.Unlock()
		c.cancel()
		c.wg.Wait()
		if c.collector != nil {
			c.cfg.Registerer.Unregister(c.collector)
		}
	})
}

// goroutine runs f as a goroutine owned by the producer (Close waits).
// For the goroutines started at construction.
func (c *core) goroutine(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// spawn runs f as an owned goroutine unless the producer is closing (then
// it returns false): a retry started concurrently with Close is either
// waited for or never started.
func (c *core) spawn(f func()) bool {
	c.spawnMu.RLock()
	defer c.spawnMu.RUnlock()
	if c.closed.Load() {
		return false
	}
	c.goroutine(f)
	return true
}

// closedReject is the rejection of a message caught by Close.
func (c *core) closedReject(t *topic, attempts int32, cause error) *RejectError {
	r := reject(t.name, SignalStop, ErrClosed, "the producer closed before the message was acknowledged", 0, cause)
	r.Attempts = int(attempts)
	return c.rejectCount(t, reasonClosed, r)
}

// unhandledFailure reports a failure nobody can be handed (no callback).
func (c *core) unhandledFailure(err error) {
	c.unhandled.Add(1)
	c.cfg.Logger.Warn("lagbridge: message failed and the caller passed no callback", "error", err)
}

// Quota is a topic's current quota as the producer enforces it.
type Quota struct {
	Topic string
	// Rate in messages per second; +Inf when unlimited.
	Rate float64
	// Burst is the bucket size (0 when unlimited).
	Burst int
	// Signal of the lease (SignalTryElsewhere for avoid-partitions).
	Signal Signal
	// RetryAfter is the slow-down hint; 0 for none (also when the lease's
	// hint was garbled).
	RetryAfter time.Duration
	// AvoidPartitions lists partitions keyless Kafka records avoid.
	AvoidPartitions []int32
	// Advisory leases are reported, not enforced.
	Advisory bool
	// FromLease is false when the safe quota applies (no lease yet, or the
	// last one expired); Closed is true when that safe quota is closed.
	FromLease, Closed bool
	// Version and ExpiresAt of the lease (zero for the safe quota);
	// Received is when it arrived.
	Version   uint64
	ExpiresAt time.Time
	Received  time.Time
	// Reason is the lease's reason in words.
	Reason string
}

// quota returns topic's current quota; ok is false for a topic the
// producer has not seen.
func (c *core) quota(name string) (Quota, bool) {
	t := (*c.topics.Load())[name]
	if t == nil {
		return Quota{}, false
	}
	v := t.view.Load()
	q := Quota{Topic: name, Rate: v.rate, Burst: v.burst, Signal: v.signal, RetryAfter: v.retryAfter,
		AvoidPartitions: v.avoid, Advisory: v.advisory, FromLease: v.fromLease, Closed: v.closed,
		Version: v.version, ExpiresAt: v.expires, Received: v.received, Reason: v.reason}
	if math.IsInf(q.Rate, 1) {
		q.Burst = 0
	}
	return q, true
}
