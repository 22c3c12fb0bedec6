package producerclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// succeeded counts a delivered message; the caller calls finish after
// the message's callback ran (so that Flush returns after the callbacks).
// The outcome is counted at the attempt's send time: the throttling
// window's slots are seconds wide, and this saves a clock read.
func (c *core) succeeded(m *msg) {
	m.t.throttle.outcome(m.sent, true)
	m.t.accepted.Add(1)
	c.budget.outcome(true)
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
// classification of err (a failure that is the request's own,
// class.ownFault, is kept out of the adaptive throttle and the retry
// budget, and class.leaderMoved out of the throttle);
// own is the message's own context besides the call's (a Kafka
// record's Context), or nil.
func (c *core) failed(m *msg, err error, class errClass, own context.Context) (time.Duration, *RejectError) {
	if r := c.callerEnded(m, own, err); r != nil {
		return 0, r
	}
	t := m.t
	t.brokerErrs.Add(1)
	if w := t.lastWhy.Load(); w == nil || *w != class.why {
		why := class.why
		t.lastWhy.Store(&why)
	}
	if !class.ownFault {
		if !class.leaderMoved {
			t.throttle.outcome(m.sent, false)
		}
		c.budget.outcome(false)
	}
	final := func(rsn reason, sig Signal, extra error, why string, after time.Duration) *RejectError {
		r := reject(t.name, sig, ErrBrokerRejected, why, after, err)
		r.extra = extra
		r.Attempts = int(m.attempts)
		return c.rejectCount(t, rsn, r)
	}
	if errors.Is(err, ErrClosed) || c.closed.Load() {
		return 0, c.closedReject(t, m.attempts, err)
	}
	if m.ctx.Err() != nil {
		return 0, final(reasonCanceled, SignalSlowDown, nil, "context done", 0)
	}
	if class.firstRetry && m.attempts == 1 && !t.missingRetried.Swap(true) {
		class.retriable = true
	}
	if !class.retriable {
		return 0, final(reasonBroker, class.signal, nil, class.why, 0)
	}
	v := t.view.Load()
	if v.signal == SignalStop && !v.advisory {
		return 0, final(reasonStop, SignalStop, nil, "the quota says stop: "+v.reason, 0)
	}
	if int(m.attempts) >= c.cfg.Retry.MaxAttempts {
		// The count itself is RejectError.Attempts (its message says
		// "after N attempt(s)"); the reason says why the retries ended.
		return 0, final(reasonBroker, class.signal, nil, class.why+"; Retry.MaxAttempts reached", 0)
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
	if !class.firstRetry && !c.budget.tryRetry() {
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
			r.Attempts, r.Rule = int(m.attempts), v.rule
			return c.rejectCount(t, reasonStop, r)
		}
		err := c.sleep(m.ctx, wait, ch)
		if errors.Is(err, errTimer) {
			break
		}
		if err != nil {
			r, why := c.waitErr(t, err, reasonCanceled, func(err error) *RejectError {
				return reject(t.name, SignalSlowDown, ErrBrokerRejected, "context done while waiting to retry", 0, err)
			})
			if r.Err != cause && cause != nil && !errors.Is(r, ErrClosed) {
				r.Err = errors.Join(r.Err, cause)
			}
			r.Attempts = int(m.attempts)
			return c.rejectCount(t, why, r)
		}
	}
	if r, why := viewReject(t, t.view.Load()); r != nil {
		r.Err, r.Attempts = cause, int(m.attempts)
		return c.rejectCount(t, why, r)
	}
	if r, why := c.takeToken(m, c.mono.nanos()); r != nil {
		r.Err = errors.Join(r.Err, cause)
		r.Attempts = int(m.attempts)
		return c.rejectCount(t, why, r)
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
