// Package guardcore is the accounting shared by the consumer-side TTL
// guards (ttl/kafkaguard, ttl/natsguard): per-delivery counters, metrics
// and the handler context. It starts no goroutines and does no I/O; it
// must not import broker clients.
package guardcore

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

// Core counts what a guard does. Its methods are safe for concurrent use;
// the exported fields are set once before use.
type Core struct {
	Now     func() time.Time
	Metrics *ttlmetrics.Metrics
	Log     *slog.Logger

	received, processed, failed, expired, late, malformed atomic.Uint64
	deadLettered, deadLetterFailed, settleFailed          atomic.Uint64
	expiredBy                                             [ttl.NumReasons]atomic.Uint64
}

// Init fills the defaults: time.Now and a logger that discards.
func (c *Core) Init(now func() time.Time, m *ttlmetrics.Metrics, log *slog.Logger) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c.Now, c.Metrics, c.Log = now, m, log
}

// Receive counts one delivered message and its verdict (received,
// malformed header, expired by reason).
func (c *Core) Receive(tm *ttlmetrics.Topic, topic string, v ttl.Verdict) {
	c.received.Add(1)
	tm.Consumed()
	if v.HeaderErr != nil {
		c.malformed.Add(1)
		tm.Malformed()
		if c.Log.Enabled(context.Background(), slog.LevelDebug) {
			c.Log.Debug("ttl: malformed lagbridge header, judged as absent", "topic", topic, "err", v.HeaderErr)
		}
	}
	if v.Expired() {
		c.expired.Add(1)
		c.expiredBy[v.Reason].Add(1)
		tm.Expired(v.Reason)
	}
}

// Handled counts the end of a live message's handler: processed or failed,
// and late when end is at or after the message's effective deadline.
func (c *Core) Handled(tm *ttlmetrics.Topic, v ttl.Verdict, err error, end time.Time) {
	if err != nil {
		c.failed.Add(1)
		tm.HandlerError()
	} else {
		c.processed.Add(1)
	}
	if !v.Deadline.IsZero() && !end.Before(v.Deadline) {
		c.late.Add(1)
		tm.Late()
	}
}

// DeadLettered counts one successful forward.
func (c *Core) DeadLettered(tm *ttlmetrics.Topic, r ttl.Reason) {
	c.deadLettered.Add(1)
	tm.DeadLettered(r)
}

// DeadLetterFailed counts one failed forward.
func (c *Core) DeadLetterFailed(tm *ttlmetrics.Topic) {
	c.deadLetterFailed.Add(1)
	tm.DeadLetterFailed()
}

// SettleFailed counts one failed acknowledgement.
func (c *Core) SettleFailed(tm *ttlmetrics.Topic) {
	c.settleFailed.Add(1)
	tm.SettleFailed()
}

// Stats returns a snapshot of the counters. Counters are read one by one,
// so a snapshot taken while messages are in flight may be unbalanced.
func (c *Core) Stats() ttl.Stats {
	s := ttl.Stats{
		Received:         c.received.Load(),
		Processed:        c.processed.Load(),
		Failed:           c.failed.Load(),
		Expired:          c.expired.Load(),
		Late:             c.late.Load(),
		Malformed:        c.malformed.Load(),
		DeadLettered:     c.deadLettered.Load(),
		DeadLetterFailed: c.deadLetterFailed.Load(),
		SettleFailed:     c.settleFailed.Load(),
	}
	for i := range s.ExpiredBy {
		s.ExpiredBy[i] = c.expiredBy[i].Load()
	}
	return s
}

func noop() {}

// Context returns the handler context of a live message: ctx itself when
// the verdict has no deadline (no allocation), else ctx bounded by the
// effective deadline. The cancel func must be called when the handler
// returns.
func Context(ctx context.Context, v ttl.Verdict) (context.Context, context.CancelFunc) {
	if v.Deadline.IsZero() {
		return ctx, noop
	}
	if d, ok := ctx.Deadline(); ok && !v.Deadline.Before(d) {
		return ctx, noop // the caller's deadline is already the tighter one
	}
	return context.WithDeadline(ctx, v.Deadline)
}
