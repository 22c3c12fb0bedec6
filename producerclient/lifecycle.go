package producerclient

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// start launches the lease goroutines (after the producer-specific setup);
// js is the NATS producer's JetStream context, nil for Kafka.
func (c *core) start(js jetstream.JetStream) error { return c.leases.start(js) }

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
