package producerclient

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// returns nil or a rejection (without the message), counted.
func (c *core) admit(m *msg, now int64) *RejectError {
	t := m.t
	c.limits(m, now)
	if r, why := c.admitChecks(m, now); r != nil {
		t.refused.Add(1)
		return c.rejectCount(t, why, r)
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

// admitChecks is admit's checks for one message: gate, then an in-flight
// slot and a token, waiting for them in Block mode. It returns nil, or the
// rejection and its reason, uncounted.
func (c *core) admitChecks(m *msg, now int64) (*RejectError, reason) {
	if _, r, why := c.gate(m, now); r != nil {
		return r, why
	}
	if r, why := c.acquireSlot(m); r != nil {
		return r, why
	}
	m.held = true
	if r, why := c.takeToken(m, now); r != nil {
		c.releaseSlot(m)
		return r, why
	}
	return nil, 0
}

// gate is the part of admission that takes nothing: the producer is open,
// m's context is live, its deadline is after now, and the lease lets it
// through (viewReject). A message of a topic idle at the last report asks
// for a report first (resume). It returns the lease it read, or the
// rejection and its reason, uncounted.
func (c *core) gate(m *msg, now int64) (*quotaView, *RejectError, reason) {
	t := m.t
	c.resume(t)
	if c.closed.Load() {
		return nil, reject(t.name, SignalStop, ErrClosed, "the producer is closed", 0, nil), reasonClosed
	}
	if err := m.ctx.Err(); err != nil {
		return nil, reject(t.name, SignalSlowDown, nil, "context done before sending", 0, err), reasonCanceled
	}
	if m.hasDL && now >= m.dl {
		return nil, reject(t.name, SignalStop, ErrExpired, "the message's deadline passed before it was sent", 0, nil), reasonExpired
	}
	v := t.view.Load()
	r, why := viewReject(t, v)
	return v, r, why
}

// viewReject rejects when the quota says stop or is closed (uncounted).
func viewReject(t *topic, v *quotaView) (*RejectError, reason) {
	switch {
	case v.closed:
		return reject(t.name, SignalSlowDown, ErrQuotaUnavailable, v.reason, v.retryAfter, nil), reasonQuotaUnavailable
	case v.signal == SignalStop && !v.advisory:
		r := reject(t.name, SignalStop, nil, v.reason, 0, nil)
		r.Rule = v.rule
		return r, reasonStop
	}
	return nil, 0
}

// inFlightReject is the rejection of a message of t that found
// MaxInFlight messages outstanding (reason reasonInFlight).
func inFlightReject(t *topic, cause error) *RejectError {
	return reject(t.name, SignalSlowDown, ErrInFlightLimit, t.fullWhy, 0, cause)
}

// rateReject is the rejection of a message of t whose token is due in wait
// nanoseconds under lease v (reason reasonRate): retry when the token is
// due, or after the lease's slow-down hint when that is later. A rate of 0
// has no next token (wait is the bucket's largest interval, 320,255
// hours): only the lease's hint, if any, says when to try again.
func rateReject(t *topic, v *quotaView, wait int64, cause error) *RejectError {
	after := time.Duration(wait)
	if wait >= maxInterval {
		after = 0
	}
	if v.signal == SignalSlowDown && v.retryAfter > after {
		after = v.retryAfter
	}
	r := reject(t.name, SignalSlowDown, ErrRateLimited, v.rateWhy, after, cause)
	r.Rule = v.rule
	return r
}

// acquireSlot takes an in-flight slot for m, waiting for one in Block
// mode until m's limit. It returns nil, or the rejection and its reason,
// uncounted.
func (c *core) acquireSlot(m *msg) (*RejectError, reason) {
	t := m.t
	if t.inflight.tryAcquire() {
		return nil, 0
	}
	if m.mode == Drop {
		return inFlightReject(t, nil), reasonInFlight
	}
	for {
		ch := t.inflight.wait()
		if t.inflight.tryAcquire() {
			t.inflight.done()
			return nil, 0
		}
		wait := time.Duration(m.limit - c.mono.nanos())
		if wait <= 0 {
			t.inflight.done()
			return inFlightReject(t, nil), reasonInFlight
		}
		err := c.sleep(m.ctx, wait, ch)
		t.inflight.done()
		if errors.Is(err, errTimer) {
			if t.inflight.tryAcquire() {
				return nil, 0
			}
			return inFlightReject(t, nil), reasonInFlight
		}
		if err != nil {
			return c.waitErr(t, err, reasonInFlight, func(err error) *RejectError { return inFlightReject(t, err) })
		}
		if t.inflight.tryAcquire() {
			return nil, 0
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
// mode. It returns nil, or the rejection and its reason, uncounted.
func (c *core) takeToken(m *msg, now int64) (*RejectError, reason) {
	t := m.t
	for first := true; ; first = false {
		// The change channel first, then the lease: a change in between
		// wakes the wait below instead of being missed.
		ch := t.changedCh()
		v := t.view.Load()
		if !first {
			now = c.mono.nanos()
		}
		if v.advisory && v.signal == SignalStop {
			// Enforced, a stop refuses every message whatever the
			// rate (viewReject): each is a violation, sent anyway.
			t.advisory.Add(1)
			return nil, 0
		}
		ok, wait := t.bucket.admit(now, m.crit)
		if ok {
			return nil, 0
		}
		if v.advisory {
			t.advisory.Add(1)
			return nil, 0
		}
		if m.mode == Drop || now+wait > m.limit {
			if m.mode == Block && now < m.limit && t.resumed.Load() {
				// The topic was idle at the last report and its
				// report of this message is on the way: its
				// answer may raise the rate (a 0 to its class's
				// share).
				wait = m.limit - now
			} else {
				// Fail at once rather than wait in vain: the
				// token would come after the deadline.
				return rateReject(t, v, wait, nil), reasonRate
			}
		}
		if err := c.sleep(m.ctx, time.Duration(wait), ch); err != nil && !errors.Is(err, errTimer) {
			return c.waitErr(t, err, reasonRate, func(err error) *RejectError { return rateReject(t, v, wait, err) })
		}
		if r, why := viewReject(t, t.view.Load()); r != nil {
			return r, why
		}
	}
}

// admitN admits up to n messages that share m (topic, mode, criticality,
// deadline; m went through limits) at now, without waiting: admit's gate
// once, then up to n in-flight slots in one operation and as many tokens
// in one compare-and-swap. It returns how many, a prefix of the n, now
// hold a slot and a token, and when fewer than n, why the next one was
// not admitted: the rejection, uncounted (countRejects), and its reason,
// reasonRate or reasonInFlight when k > 0 (waiting may help). It counts
// nothing else either: the caller counts admitted and refused.
func (c *core) admitN(m *msg, n int, now int64) (int, *RejectError, reason) {
	t := m.t
	v, r, why := c.gate(m, now)
	if r != nil {
		return 0, r, why
	}
	slots := int(t.inflight.tryAcquireN(int64(n)))
	k, wait := slots, int64(0)
	if v.advisory && v.signal == SignalStop {
		// Every message a violation, as in takeToken.
		t.advisory.Add(uint64(slots))
	} else if k, wait = t.bucket.admitN(now, m.crit, slots); k < slots {
		if v.advisory {
			t.advisory.Add(uint64(slots - k))
			k = slots
		} else {
			t.inflight.releaseN(int64(slots - k))
		}
	}
	switch {
	case k == n:
		return n, nil, 0
	case k < slots:
		return k, rateReject(t, v, wait, nil), reasonRate
	default:
		return k, inFlightReject(t, nil), reasonInFlight
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

// beforeSend is the last local check before an attempt at now: adaptive
// throttling. It counts the attempt and, for a first attempt, the budget
// deposit.
func (c *core) beforeSend(m *msg, now int64) *RejectError {
	t := m.t
	m.sent = now
	ok, p := t.throttle.allow(now)
	if !ok {
		r := throttledReject(t, p)
		r.Attempts = int(m.attempts) // a retry's: the sends before it
		return c.rejectCount(t, reasonThrottled, r)
	}
	if m.attempts == 0 {
		c.budget.request(c.budgetNow(now))
	}
	m.attempts++
	t.attempts.Add(1)
	return nil
}

// throttledReject is the rejection of a message of t the adaptive
// throttle refused with probability p (reason reasonThrottled).
func throttledReject(t *topic, p float64) *RejectError {
	why := fmt.Sprintf("the broker accepted too few recent requests; refusing locally with probability %.2f", p)
	if w := t.lastWhy.Load(); w != nil && *w != "" {
		why += "; the last failure: " + *w
	}
	return reject(t.name, SignalSlowDown, ErrThrottled, why, 0, nil)
}
