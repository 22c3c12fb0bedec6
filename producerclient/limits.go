package producerclient

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// notifier lets goroutines park until the next broadcast. Register with
// wait, re-check the condition, then select on the channel; call done
// after. broadcast costs one atomic load when nobody waits.
type notifier struct {
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.waiters.Add(1)
	n.mu.Lock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	ch := n.ch
	n.mu.Unlock()
	return ch
}

func (n *notifier) done() { n.waiters.Add(-1) }

func (n *notifier) broadcast() {
	if n.waiters.Load() > 0 {
		n.mu.Lock()
		if n.ch != nil {
			close(n.ch)
			n.ch = nil
		}
		n.mu.Unlock()
	}
}

// inflight caps the messages of one topic that are outstanding (admitted
// and not yet finally acknowledged or failed, retries included).
//
// Acquires and releases are counted apart, on their own cache lines: the
// producing goroutines write acq, the broker client's completion
// goroutine writes rel, and neither reads the other's line per message.
// An acquire compares against relSnap, a snapshot of rel refreshed only
// when the cap seems reached; a snapshot is never ahead of rel, so the
// check overestimates what is in flight and the cap is never exceeded.
// Waiters (Block mode) park on the notifier, which releases wake.
//
// An acquire counts itself in acq before it checks, and backs out when
// over the cap: while it is counted, a concurrent acquire may fail
// against a slot that is in fact free. So a back-out that leaves a slot
// free wakes the waiters too (see backOut); otherwise a waiter that woke
// and failed in that window would sleep until its deadline with the slot
// free.
type inflight struct {
	acq     atomic.Int64
	_       [cacheLine - 8]byte
	rel     atomic.Int64
	_       [cacheLine - 8]byte
	relSnap atomic.Int64
	limit   int64 // <= 0: unlimited (still counted, for the metric)
	notifier
}

func (f *inflight) tryAcquire() bool {
	n := f.acq.Add(1)
	if f.limit <= 0 || n-f.relSnap.Load() <= f.limit {
		return true
	}
	r := f.rel.Load()
	f.relSnap.Store(r) // racing refreshes store values of rel: all valid snapshots
	if n-r <= f.limit {
		return true
	}
	f.backOut(1)
	return false
}

// backOut takes back k slots counted in acq by an acquire the cap refused,
// and wakes the waiters when that leaves a slot free. The cost is on the
// refusal path only: an atomic load when nobody waits.
func (f *inflight) backOut(k int64) {
	a := f.acq.Add(-k)
	if f.waiters.Load() > 0 && a-f.rel.Load() < f.limit {
		f.broadcast()
	}
}

func (f *inflight) release() {
	f.rel.Add(1)
	f.broadcast()
}

// tryAcquireN acquires up to n slots at once and returns how many (n
// when the cap allows). It keeps tryAcquire's guarantee: every check
// counts the slots other callers hold or are about to give back, so the
// cap is never exceeded; a partial grant gives back only the excess.
func (f *inflight) tryAcquireN(n int64) int64 {
	a := f.acq.Add(n)
	if f.limit <= 0 || a-f.relSnap.Load() <= f.limit {
		return n
	}
	r := f.rel.Load()
	f.relSnap.Store(r)
	over := a - r - f.limit
	if over <= 0 {
		return n
	}
	if over > n {
		over = n
	}
	f.backOut(over)
	return n - over
}

// releaseN gives back n slots.
func (f *inflight) releaseN(n int64) {
	if n <= 0 {
		return
	}
	f.rel.Add(n)
	f.broadcast()
}

// count is the number in flight now.
func (f *inflight) count() int64 { return f.acq.Load() - f.rel.Load() }

// window counts two quantities over a sliding window of time split into
// slots; it is the memory of the retry budget (deposits, withdrawals) and
// of adaptive throttling (requests, accepts). Both counts are packed in one
// int64 (low and high 32 bits), per slot and in a running total, so that
// adding is two atomic adds and reading is one atomic load; the slot that
// falls out of the window is subtracted from the total under a mutex, once
// per slot period. The packing bounds each count to 2^32-1 per window
// (35 million events a second over a two-minute window).
type window struct {
	slotNanos int64
	n         int64
	head      atomic.Int64 // newest slot epoch folded into total
	total     atomic.Int64 // packed sum of the live slots
	mu        sync.Mutex
	slots     []atomic.Int64
}

const (
	countA = int64(1)       // packs one of the first count
	countB = int64(1) << 32 // packs one of the second count
)

func newWindow(length int64, slots int) *window {
	sn := length / int64(slots)
	if sn < 1 {
		sn = 1
	}
	return &window{slotNanos: sn, n: int64(slots), slots: make([]atomic.Int64, slots)}
}

// add adds the packed delta d (k*countA + j*countB) at now.
func (w *window) add(now int64, d int64) {
	e := now / w.slotNanos
	if e > w.head.Load() {
		w.advance(e)
	}
	w.slots[e%w.n].Add(d)
	w.total.Add(d)
}

// advance expires the slots between the head and e. An adder of epoch e
// calls it before adding, so it never races the expiry of its own slot.
func (w *window) advance(e int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.head.Load()
	if e <= h {
		return
	}
	if e-h > w.n {
		h = e - w.n // older slots are all expired by the loop below
	}
	for h < e {
		h++
		if old := w.slots[h%w.n].Swap(0); old != 0 {
			w.total.Add(-old)
		}
	}
	w.head.Store(e)
}

// sums returns both counts over the window ending at now.
func (w *window) sums(now int64) (a, b int64) {
	if e := now / w.slotNanos; e > w.head.Load() {
		w.advance(e)
	}
	v := w.total.Load()
	return v & (countB - 1), v >> 32
}

// throttler is the SRE book's client-side adaptive throttling: over a
// window it counts requests (the window's first count) and accepts
// (acknowledged by the broker, the second count), and
// refuses a request locally with probability
// max(0, (requests - K*accepts) / (requests + 1)).
//
// A request is counted when its outcome is known (acknowledged, failed, or
// refused here), not when it is sent: an async producer has thousands of
// messages in flight, and counting them before their acks arrive would
// read as a broker rejecting everything. In steady state the two counts
// are the same.
//
// allow reads a cached probability, recomputed at most every
// throttleRefresh, so that producing goroutines do not read the counters
// the completion goroutine writes for every message.
type throttler struct {
	k   float64
	w   *window
	p   atomic.Uint64 // math.Float64bits of the cached probability
	pAt atomic.Int64  // when p was computed (0: never)
}

// throttleRefresh is how stale the cached probability may be.
const throttleRefresh = int64(10 * time.Millisecond)

// probability is the current local rejection probability at now.
func (t *throttler) probability(now int64) float64 {
	if t == nil {
		return 0
	}
	req, acc := t.w.sums(now)
	p := (float64(req) - t.k*float64(acc)) / float64(req+1)
	if p < 0 {
		return 0
	}
	return p
}

// cached returns the probability, recomputed when older than
// throttleRefresh.
func (t *throttler) cached(now int64) float64 {
	if at := t.pAt.Load(); at != 0 && now-at < throttleRefresh && now >= at {
		return math.Float64frombits(t.p.Load())
	}
	p := t.probability(now)
	t.p.Store(math.Float64bits(p))
	t.pAt.Store(now)
	return p
}

// allow decides whether a request may go to the broker; a refusal counts
// as a request at once.
func (t *throttler) allow(now int64) (bool, float64) {
	if t == nil {
		return true, 0
	}
	p := t.cached(now)
	if p <= 0 || rand.Float64() >= p {
		return true, p
	}
	t.w.add(now, countA)
	return false, p
}

// outcomeN counts n accepted requests sent at now.
func (t *throttler) outcomeN(now int64, n int64) {
	if t == nil || n <= 0 {
		return
	}
	t.w.add(now, n*(countA+countB))
}

// outcome counts a request whose broker outcome is known.
func (t *throttler) outcome(now int64, accepted bool) {
	if t == nil {
		return
	}
	if accepted {
		t.w.add(now, countA+countB)
	} else {
		t.w.add(now, countA)
	}
}
