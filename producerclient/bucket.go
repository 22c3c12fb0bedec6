package producerclient

import (
	"math"
	"sync/atomic"

	"github.com/lagbridge/lagbridge/ttl"
)

// bucket is a token bucket in its GCRA form (the generic cell rate
// algorithm): the whole state is one int64, the theoretical arrival time
// (tat) of the next message, in nanoseconds of a monotonic clock. A message
// conforms at now if, after moving tat one interval on, tat is no more than
// the tolerance (burst intervals) ahead of now. Admission is one atomic
// load of the parameters, one of tat, and one compare-and-swap: no lock,
// no allocation, and a rejection is only loads (it writes nothing, so a
// rejected storm does not even contend on the cache line).
//
// Exactness: every admission moves tat one interval on and requires the
// new tat to be at most now+tolerance, and tat starts no earlier than the
// first admission's now. So n admissions between t0 and t1 need
// n*interval <= t1-t0+tolerance, i.e. n <= rate*(t1-t0) + burst, under any
// contention: a lost compare-and-swap retries with the fresh tat.
type bucket struct {
	// p is read on every call and written on lease changes only; tat is
	// written on every admission. Each gets its own cache line, so that
	// admissions on one core do not evict the parameters from the others.
	p   atomic.Pointer[bucketParams]
	_   [cacheLine - 8]byte
	tat atomic.Int64
	_   [cacheLine - 8]byte
}

// cacheLine is the size used to keep hot atomics apart (128 covers the
// adjacent-line prefetcher of x86 and Apple's 128-byte lines).
const cacheLine = 128

// bucketParams are immutable; a lease change swaps the pointer.
type bucketParams struct {
	unlimited bool
	interval  int64 // nanoseconds per token, rounded up: never faster than the rate
	// tol is the tolerance per criticality (indexed by ttl.Criticality):
	// burst*interval for critical traffic, less for sheddable traffic,
	// which must leave part of the burst to critical traffic.
	tol [4]int64
}

// Largest interval and tolerance. Times are nanoseconds since the SDK's
// epoch (under 2^62 for 146 years), so tat+interval cannot overflow.
const (
	maxInterval  = int64(1) << 60
	maxTolerance = int64(1) << 61
)

var unlimitedParams = &bucketParams{unlimited: true}

// reserveFraction is the share of the burst a criticality must leave
// unused: sheddable traffic is refused while critical traffic still fits.
var reserveFraction = [4]float64{
	ttl.Critical:      0,
	ttl.CriticalPlus:  0,
	ttl.SheddablePlus: 0.25,
	ttl.Sheddable:     0.5,
}

// zeroParams admit nothing: every tolerance is below one interval.
var zeroParams = &bucketParams{interval: maxInterval}

// newBucketParams returns the parameters for rate messages per second with
// the given burst (at least 1). A rate of +Inf is unlimited; a rate of 0
// (or negative, or NaN) admits nothing, whatever the burst.
func newBucketParams(rate float64, burst int) *bucketParams {
	if math.IsInf(rate, 1) {
		return unlimitedParams
	}
	if !(rate > 0) {
		// A zero rate admits nothing, not even one message.
		return zeroParams
	}
	if burst < 1 {
		burst = 1
	}
	var iv int64
	switch {
	case rate >= 1e9:
		iv = 1
	default:
		f := math.Ceil(1e9 / rate)
		if f >= float64(maxInterval) {
			iv = maxInterval
		} else {
			iv = int64(f)
		}
	}
	p := &bucketParams{interval: iv}
	full := satMul(iv, int64(burst))
	for c := range p.tol {
		reserve := int64(math.Floor(reserveFraction[c]*float64(burst))) * iv
		t := full - reserve
		if t < iv {
			t = iv // a criticality may always use one token
		}
		p.tol[c] = t
	}
	return p
}

func satMul(a, b int64) int64 {
	if a != 0 && b > maxTolerance/a {
		return maxTolerance
	}
	if r := a * b; r < maxTolerance {
		return r
	}
	return maxTolerance
}

// set installs new parameters at now (nanoseconds). The state carries
// over, except debt the new parameters cannot hold: under one set of
// parameters tat never runs more than the tolerance ahead of now, but a
// slower rate (or a zero rate) leaves tat far ahead, and a lease that
// raises the rate must not stay locked out behind it. So tat is capped at
// now + the new tolerance. Exactness holds per set of parameters.
func (b *bucket) set(p *bucketParams, now int64) {
	b.p.Store(p)
	if p.unlimited {
		return
	}
	limit := now + p.tol[ttl.CriticalPlus]
	for {
		old := b.tat.Load()
		if old <= limit || b.tat.CompareAndSwap(old, limit) {
			return
		}
	}
}

// admit takes one token at now (nanoseconds) for criticality c. It
// returns true, or false and how long until a token would be due for c.
func (b *bucket) admit(now int64, c ttl.Criticality) (bool, int64) {
	p := b.p.Load()
	if p.unlimited {
		return true, 0
	}
	tol := p.tol[c&3]
	for {
		old := b.tat.Load()
		tat := old
		if tat < now {
			tat = now
		}
		next := tat + p.interval
		if over := next - now - tol; over > 0 {
			return false, over
		}
		if b.tat.CompareAndSwap(old, next) {
			return true, 0
		}
	}
}

// admitN takes up to n tokens at once at now for criticality c, in one
// compare-and-swap: as many as fit, a prefix of the n. It returns how many
// it took and, when fewer than n, how long until the next token would be
// due for c. Exactness is that of admit: each token taken moves tat one
// interval on, and the new tat is at most now+tolerance, so n tokens taken
// in one call count exactly as n calls of admit at the same now would.
func (b *bucket) admitN(now int64, c ttl.Criticality, n int) (int, int64) {
	p := b.p.Load()
	if p.unlimited || n <= 0 {
		return n, 0
	}
	tol := p.tol[c&3]
	for {
		old := b.tat.Load()
		tat := old
		if tat < now {
			tat = now
		}
		// room is under 2^62 (now < 2^62, tol <= 2^61): no overflow.
		room := now + tol - tat
		k := int64(n)
		if fit := room / p.interval; fit < k {
			k = fit
		}
		if k <= 0 {
			return 0, tat + p.interval - now - tol
		}
		if b.tat.CompareAndSwap(old, tat+k*p.interval) {
			if int(k) == n {
				return n, 0
			}
			return int(k), tat + (k+1)*p.interval - now - tol
		}
	}
}
