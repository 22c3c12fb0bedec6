package producerclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// topic is the SDK's state for one lease key (Kafka topic or NATS stream).
// Producers read it lock-free; only the lease goroutine writes the view.
//
// Fields are grouped by who writes them, each group on its own cache lines,
// so that the producing goroutines and the broker client's completion
// goroutine do not fight over lines they do not share.
type topic struct {
	// Read-mostly.
	name     string
	added    time.Time  // c.clock's time at creation: its demand is counted from then
	fullWhy  string     // the Reason of an in-flight rejection, built once
	throttle *throttler // nil when disabled
	view     atomic.Pointer[quotaView]
	changed  atomic.Pointer[chan struct{}] // closed at the next view change
	// idle: the last report said this topic's demand was a measured 0
	// (protocol 1.7: no message asked over its window, none in flight),
	// so the daemon gives it only what nobody asked for. The first
	// message after it sets resumed and wakes the reporter (core.resume):
	// the next report says the demand is unknown, its class's share, and
	// until its answer is in, a Block wait that the rate would fail at
	// once waits for it (takeToken).
	idle, resumed atomic.Bool
	bucket        bucket   // pads itself
	inflight      inflight // written on both sides
	_             [cacheLine]byte

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
	lastWhy    atomic.Pointer[string] // the last broker failure's classification
	// missingRetried: a missing-topic answer was already retried once on
	// this topic (errClass.firstRetry).
	missingRetried atomic.Bool
	retries        atomic.Uint64
	rejected       [numReasons]atomic.Uint64
}

// changedCh returns a channel closed at the next change of t's view.
func (t *topic) changedCh() <-chan struct{} { return *t.changed.Load() }

// setView installs v at now (monotonic nanoseconds) and wakes everything
// waiting on the old one. Only the lease goroutine (and topic creation)
// calls it.
func (t *topic) setView(v *quotaView, now int64) {
	t.view.Store(v)
	t.bucket.set(v.params, now)
	t.wake()
}

// wake wakes t's waits (changedCh) to look at its view again.
func (t *topic) wake() {
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
	// topicAdded wakes the lease reporter when a topic appears;
	// topicResumed when a topic idle at the last report gets a message.
	topicAdded, topicResumed chan struct{}

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
	c := &core{cfg: cfg, clock: cfg.Clock, mono: newMonotonic(cfg.Clock), topicAdded: make(chan struct{}, 1), topicResumed: make(chan struct{}, 1)}
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
	t := &topic{name: name, added: c.clock.Now()}
	if c.cfg.MaxInFlight > 0 {
		t.inflight.limit = int64(c.cfg.MaxInFlight)
		t.fullWhy = fmt.Sprintf("%d messages in flight on %s", t.inflight.limit, name)
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

// resume notes a message of t, a topic idle at the last report: the
// first one after that report asks the reporter for a report (see
// leaseOwner.reporter), which says t's demand is unknown, so that the
// daemon gives t its class's share within a round trip instead of at the
// next refresh. It costs an atomic load while t is not idle.
func (c *core) resume(t *topic) {
	if t.idle.Load() && t.idle.CompareAndSwap(true, false) {
		t.resumed.Store(true)
		select {
		case c.topicResumed <- struct{}{}:
		default:
		}
	}
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

// budgetNow converts now to the retry budget's time base.
func (c *core) budgetNow(now int64) int64 {
	if c.budgetOwnClock {
		return c.budget.mono.nanos()
	}
	return now + c.budgetOffset
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

// waitErr turns a failed wait into a rejection and its reason, uncounted:
// the producer closed (reasonClosed), or the context ended: mk(err) under
// why.
func (c *core) waitErr(t *topic, err error, why reason, mk func(error) *RejectError) (*RejectError, reason) {
	if errors.Is(err, errClosedWait) {
		return reject(t.name, SignalStop, ErrClosed, "the producer closed while the message waited", 0, nil), reasonClosed
	}
	return mk(err), why
}
