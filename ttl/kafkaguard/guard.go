// Package kafkaguard skips dead work in franz-go consumers: records whose
// lagbridge deadline has passed, or that are older than the topic's maxAge,
// are counted, optionally forwarded to a dead-letter topic, and committed
// past without reaching the handler; live records reach the handler under a
// context that ends at their deadline.
//
// Typical loop (manual commits):
//
//	g, err := kafkaguard.New(kafkaguard.Config{MaxAge: 2 * time.Second, Metrics: m})
//	...
//	for {
//		fs := cl.PollFetches(ctx)
//		done, err := g.Process(ctx, fs.Records(), handle)
//		if cerr := cl.CommitRecords(ctx, done...); cerr != nil { ... }
//		if err != nil { ... } // a handler or dead-letter error: done stops before it
//	}
//
// It imports franz-go's kgo and the ttl core; it must not import kadm, the
// daemon or the producer SDK.
package kafkaguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/internal/guardcore"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

// ErrInvalidConfig is wrapped by every error of [Config.Validate] and [New].
var ErrInvalidConfig = errors.New("kafkaguard: invalid config")

// ErrDeadLetter is wrapped by the error [Guard.Process] returns when an
// expired record could not be forwarded to its dead-letter topic. Such a
// record is not committed past: the returned prefix stops before it.
var ErrDeadLetter = errors.New("kafkaguard: dead-letter forward failed")

// Handler handles one live record. ctx ends at the record's effective
// deadline (the earlier of its lagbridge-deadline header and its timestamp
// plus maxAge) when it has one. A non-nil error stops [Guard.Process].
type Handler func(ctx context.Context, r *kgo.Record) error

// HandlerError is returned (possibly joined with other errors) by
// [Guard.Process] when the handler fails; use errors.As to get the record.
type HandlerError struct {
	Record *kgo.Record
	Err    error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("kafkaguard: handler failed on %s[%d]@%d: %v", e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// DeadLetter says where expired records go. Each forwarded record is a copy
// (key, value, headers) with the ttl.HeaderExpiredReason,
// ttl.HeaderExpiredAt, ttl.HeaderOriginTopic, ttl.HeaderOriginPartition,
// ttl.HeaderOriginOffset and ttl.HeaderOriginTimestamp headers added, a
// fresh timestamp, and partitioned by Client's partitioner.
//
// Forwarding is at least once: a crash between the forward and the commit
// forwards the record again on redelivery. A record that already carries
// lagbridge-expired-reason (a forward itself) is never forwarded again.
type DeadLetter struct {
	// Client produces the forwarded records. Required; it may be the
	// consuming client.
	Client *kgo.Client
	// Topic receives the expired records of every source topic. Either
	// Topic or TopicFor is required.
	Topic string
	// TopicFor, when set, overrides Topic: it names the dead-letter topic
	// of a source topic, or "" to not forward that topic's records. It
	// must be safe for concurrent use. A record is never forwarded to its
	// own topic (that is a forward failure).
	TopicFor func(source string) string
}

// Config configures a [Guard]. The zero value is valid: records are judged
// by their deadline header only, nothing is forwarded, no metrics.
type Config struct {
	// MaxAge is the age bound of every topic's records (the policy's
	// maxAge): a record whose timestamp is MaxAge or more before now is
	// dead work. Zero: no age bound. Must be >= 0.
	MaxAge time.Duration
	// TopicMaxAge overrides MaxAge per topic (zero entries disable the age
	// bound of that topic). Values must be >= 0. Read-only after New.
	TopicMaxAge map[string]time.Duration
	// DeadLetter, when set, forwards expired records. Nil: they are only
	// counted and committed past.
	DeadLetter *DeadLetter
	// Metrics receives the lagbridge_ttl_* counters. Nil: none.
	Metrics *ttlmetrics.Metrics
	// Logger receives debug lines for malformed headers and warnings for
	// failed forwards. Nil: discard.
	Logger *slog.Logger
	// Now is the clock that judges messages. Nil: time.Now. (Handler
	// contexts' deadlines are absolute times and run on the real clock,
	// as every context does.)
	Now func() time.Time
}

// Validate returns every problem of c at once (errors.Join), each wrapping
// [ErrInvalidConfig]; nil when c is valid.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.MaxAge < 0 {
		add("maxAge must be >= 0, got %v", c.MaxAge)
	}
	for t, d := range c.TopicMaxAge {
		if d < 0 {
			add("topicMaxAge[%q] must be >= 0, got %v", t, d)
		}
	}
	if dl := c.DeadLetter; dl != nil {
		if dl.Client == nil {
			add("deadLetter.client is required")
		}
		if dl.Topic == "" && dl.TopicFor == nil {
			add("deadLetter needs topic or topicFor")
		}
	}
	return errors.Join(errs...)
}

// Guard judges, counts and routes fetched records. It is safe for
// concurrent use (e.g. one Process call per partition goroutine). It starts
// no goroutines; its only background work is the dead-letter client's own
// producing, which Process waits for.
type Guard struct {
	rule     ttl.Rule
	perTopic map[string]ttl.Rule
	dl       *DeadLetter
	core     guardcore.Core
}

// New returns a guard for cfg, or the errors of cfg.Validate.
func New(cfg Config) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{rule: ttl.Rule{MaxAge: cfg.MaxAge}, dl: cfg.DeadLetter}
	if len(cfg.TopicMaxAge) > 0 {
		g.perTopic = make(map[string]ttl.Rule, len(cfg.TopicMaxAge))
		for t, d := range cfg.TopicMaxAge {
			g.perTopic[t] = ttl.Rule{MaxAge: d}
		}
	}
	g.core.Init(cfg.Now, cfg.Metrics, cfg.Logger)
	return g, nil
}

// Stats returns what the guard has done so far (see ttl.Stats for the
// invariant Received == Processed + Failed + Expired).
func (g *Guard) Stats() ttl.Stats { return g.core.Stats() }

// Check judges r at now without counting anything. It reads the first
// lagbridge-deadline and lagbridge-criticality headers; a malformed one is
// reported in the verdict's HeaderErr and judged as absent. It never panics
// and does not allocate for well-formed headers.
func (g *Guard) Check(r *kgo.Record, now time.Time) ttl.Verdict {
	var d, c string
	var hasD, hasC bool
	for i := range r.Headers {
		h := &r.Headers[i]
		switch {
		case !hasD && h.Key == ttl.HeaderDeadline:
			d, hasD = bytesString(h.Value), true
		case !hasC && h.Key == ttl.HeaderCriticality:
			c, hasC = bytesString(h.Value), true
		}
	}
	rule := g.rule
	if g.perTopic != nil {
		if tr, ok := g.perTopic[r.Topic]; ok {
			rule = tr
		}
	}
	return rule.CheckHeaders(d, hasD, c, hasC, r.Timestamp, now)
}

// bytesString views b as a string without copying. The header parsers
// only read their input during the call (errors quote a copy), and record
// header values are not modified while a record is judged.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Process judges recs in order at the guard's clock, one record at a time
// (a record can expire while earlier ones are handled):
//
//   - an expired record is counted by reason, forwarded to the dead-letter
//     topic when configured, and not handled;
//   - a live record is handled by h under a context bounded by its
//     effective deadline; if h returns an error, Process stops there.
//
// It returns done, the longest prefix of recs that is finished (handled
// successfully, or expired and, when configured, forwarded): commit it with
// cl.CommitRecords(ctx, done...) or cl.MarkCommitRecords(done...). Records
// after done were not finished (not handled, or not counted at all) and must
// be consumed again. Because done is a prefix and a fetch lists each
// partition's records in offset order, its last record per partition is a
// correct commit point.
//
// The error is nil, or joins a [*HandlerError], errors wrapping
// [ErrDeadLetter] (after waiting for every forward of this call), and the
// context's error when ctx ended before all records were judged. Expired
// records before done count as processed for the commit: that is the point.
func (g *Guard) Process(ctx context.Context, recs []*kgo.Record, h Handler) (done []*kgo.Record, err error) {
	var (
		end      = len(recs)
		stopErr  error
		dl       *forwards
		topic    string
		tm       *ttlmetrics.Topic
		resolved bool
		now      = g.core.Now()
	)
	for i, r := range recs {
		if cerr := ctx.Err(); cerr != nil {
			end = i
			stopErr = fmt.Errorf("kafkaguard: stopped before %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, context.Cause(ctx))
			break
		}
		if !resolved || r.Topic != topic {
			topic, tm, resolved = r.Topic, g.core.Metrics.Topic(r.Topic), true
		}
		v := g.Check(r, now)
		g.core.Receive(tm, r.Topic, v)
		if v.Expired() {
			if g.dl != nil {
				dl = g.forward(ctx, dl, i, r, v, now, tm)
			}
			continue
		}
		hctx, cancel := guardcore.Context(ctx, v)
		herr := h(hctx, r)
		cancel()
		now = g.core.Now()
		g.core.Handled(tm, v, herr, now)
		if herr != nil {
			end = i
			stopErr = &HandlerError{Record: r, Err: herr}
			break
		}
	}
	var dlErr error
	if dl != nil {
		dl.wg.Wait()
		if dl.first >= 0 && dl.first < end {
			end = dl.first
		}
		if dl.err != nil {
			dlErr = fmt.Errorf("%w: %d record(s), first: %w", ErrDeadLetter, dl.failed, dl.err)
		}
	}
	return recs[:end], errors.Join(stopErr, dlErr)
}

// isDeadLetter reports whether r is itself a forward (it carries
// lagbridge-expired-reason): it is never forwarded again, which breaks
// loops through a dead-letter topic that is also consumed with a guard.
func isDeadLetter(r *kgo.Record) bool {
	for i := range r.Headers {
		if r.Headers[i].Key == ttl.HeaderExpiredReason {
			return true
		}
	}
	return false
}

// forwards tracks the dead-letter produces of one Process call.
type forwards struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	first  int // index of the first failed record, -1 when none
	failed int
	err    error // the error of the first failed record
}

func (f *forwards) fail(i int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed++
	if f.first < 0 || i < f.first {
		f.first, f.err = i, err
	}
}

func (g *Guard) forward(ctx context.Context, f *forwards, i int, r *kgo.Record, v ttl.Verdict, now time.Time, tm *ttlmetrics.Topic) *forwards {
	dst := g.dl.Topic
	if g.dl.TopicFor != nil {
		dst = g.dl.TopicFor(r.Topic)
	}
	if dst == "" || isDeadLetter(r) {
		return f
	}
	if f == nil {
		f = &forwards{first: -1}
	}
	fail := func(err error) {
		err = fmt.Errorf("%s[%d]@%d -> %s: %w", r.Topic, r.Partition, r.Offset, dst, err)
		g.core.DeadLetterFailed(tm)
		g.core.Log.Warn("ttl: dead-letter forward failed; the record will be consumed again", "err", err)
		f.fail(i, err)
	}
	if dst == r.Topic {
		fail(errors.New("refusing to forward a record to its own topic"))
		return f
	}
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+6)
	hs = append(hs, r.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: ttl.HeaderExpiredReason, Value: []byte(v.Reason.String())},
		kgo.RecordHeader{Key: ttl.HeaderExpiredAt, Value: []byte(ttl.FormatTime(now))},
		kgo.RecordHeader{Key: ttl.HeaderOriginTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: ttl.HeaderOriginPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: ttl.HeaderOriginOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: ttl.HeaderOriginTimestamp, Value: []byte(ttl.FormatTime(r.Timestamp))},
	)
	out := &kgo.Record{Topic: dst, Key: r.Key, Value: r.Value, Headers: hs}
	reason := v.Reason
	f.wg.Add(1)
	g.dl.Client.Produce(ctx, out, func(_ *kgo.Record, err error) {
		defer f.wg.Done()
		if err != nil {
			fail(err)
			return
		}
		g.core.DeadLettered(tm, reason)
	})
	return f
}
