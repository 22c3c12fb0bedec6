package producerclient

import "time"

// Clock is the SDK's source of time: token buckets, windows, leases,
// backoffs and waits all read it, so a test can drive them with a fake.
// Implementations must be safe for concurrent use. The zero Config uses
// the system clock.
type Clock interface {
	// Now returns the current time. Durations are computed from the
	// differences of its values, so a fake clock must not go backwards.
	Now() time.Time
	// NewTimer returns a timer that fires once d after Now.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the SDK uses.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether it was still pending.
	Stop() bool
	// Reset makes the timer fire d from now; it reports whether the
	// timer had been pending.
	Reset(d time.Duration) bool
}

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// monotonic turns a Clock into nanoseconds since a fixed epoch, the unit
// of the hot path. For the system clock it reads only the monotonic clock
// (time.Since's fast path), which is about half the cost of time.Now.
type monotonic struct {
	clock  Clock
	epoch  time.Time
	system bool
}

func newMonotonic(c Clock) monotonic {
	_, system := c.(systemClock)
	// The epoch is a second in the past so that a zero "theoretical
	// arrival time" in a fresh bucket is already in the past.
	return monotonic{clock: c, epoch: c.Now().Add(-time.Second), system: system}
}

// nanos is the time since the epoch in nanoseconds.
func (m *monotonic) nanos() int64 {
	if m.system {
		return int64(time.Since(m.epoch))
	}
	return int64(m.clock.Now().Sub(m.epoch))
}

// of converts a time to nanos without reading the clock (t's monotonic
// reading is used when it has one).
func (m *monotonic) of(t time.Time) int64 { return int64(t.Sub(m.epoch)) }

// at converts nanos back to a time.Time.
func (m *monotonic) at(n int64) time.Time { return m.epoch.Add(time.Duration(n)) }
