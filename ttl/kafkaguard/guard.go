// Package kafkaguard skips dead work in franz-go consumers: records whose
// lagbridge deadline has passed, or that are older than the topic's maxAge,
// are counted, optionally forwarded to a dead-letter topic, and committed
// past without reaching the handler; live records reach the handler under a
// context that ends at their deadline.
//
// Typical loop (manual commits: kgo.DisableAutoCommit, and with a consumer
// group kgo.BlockRebalanceOnPoll):
//
//	g, err := kafkaguard.New(kafkaguard.Config{MaxAge: 2 * time.Second, Metrics: m})
//	...
//	for {
//		fs := cl.PollFetches(ctx)
//		recs := fs.Records()
//		done, err := g.Process(ctx, recs, handle)
//		if cerr := cl.CommitRecords(ctx, done...); cerr != nil { ... }
//		if err != nil {
//			// A handler or dead-letter error, or ctx ended: consume
//			// the records that are not finished again.
//			cl.SetOffsets(kafkaguard.RewindOffsets(recs, done))
//			...
//		}
//		cl.AllowRebalance()
//	}
//
// The rewind is what brings a failed record back: franz-go's PollFetches
// continues after the last record it returned, so without it the next
// commit would pass the failed record and it would be lost.
//
// With Config.Progress set to a consumerclient.KafkaReporter (the hook that
// reports the consumer's position to the lagbridge daemon), the reporter is
// also told of each record skipped as expired ([Skipper]) and its reports
// carry each partition's running count (protocol 1.5): the daemon takes
// those skips out of the consumption it reads as the consumer's capacity,
// serves them as skipped in /v1/lag and lagbridge_consumer_skipped_total,
// and does not read a backlog skipped in one go as a fast consumer.
//
// It imports franz-go's kgo and the ttl core; it must not import kadm, the
// daemon or the producer SDK.
package kafkaguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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
// record is not finished: it is not in done, and [RewindOffsets] points its
// partition back at it.
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
// forwards the record again on redelivery. A failed forward is retried
// only by consuming the record again (see [RewindOffsets]). A record that
// already carries lagbridge-expired-reason (a forward itself) is never
// forwarded again.
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
	// Progress, when set, is told of every record [Guard.Process]
	// finishes, the moment it is handled or skipped, so that a consumer
	// reporter can tell the lagbridge daemon where the consumer really is
	// between polls; consumerclient.KafkaReporter implements it (and
	// [Skipper]: it counts the records skipped as expired). Nil: nobody.
	Progress Progress
}

// Progress follows the records a [Guard] finishes. Finished is called on
// the goroutine that runs Process, concurrently when several do; it must
// be safe for that and fast.
type Progress interface {
	// Finished: r has been handled successfully or skipped as expired
	// (an expired record's dead-letter forward may still be under way).
	Finished(r *kgo.Record)
}

// Skipper is a [Progress] that is also told which records the guard
// skipped as expired, before their Finished: a consumer reporter counts
// them (consumerclient.KafkaReporter), so that the daemon does not read a
// backlog the guard skipped in one go as the consumer's capacity. Optional:
// a Progress without it is told Finished only.
type Skipper interface {
	Skipped(r *kgo.Record)
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
	progress Progress
	core     guardcore.Core

	// ahead holds, per partition and in increasing order, the offsets of
	// records that are finished but were left out of done because an
	// earlier record of their partition was not finished (see Process).
	// nAhead is its number of offsets, read without aheadMu so that
	// Process looks nothing up while it is empty.
	aheadMu sync.Mutex
	ahead   map[partition][]int64
	nAhead  atomic.Int64
}

// partition names a topic partition.
type partition struct {
	topic string
	part  int32
}

// New returns a guard for cfg, or the errors of cfg.Validate.
func New(cfg Config) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{rule: ttl.Rule{MaxAge: cfg.MaxAge}, dl: cfg.DeadLetter, progress: cfg.Progress}
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
// A record is finished when it was handled successfully, or expired and
// (when configured) forwarded, or finished in an earlier call (below).
// Process returns done, the records of recs (in their order) that are
// finished and that every earlier record of their partition in recs is
// finished too: per partition, everything before its first unfinished
// record. So its last record per partition is a correct commit point:
// commit it with cl.CommitRecords(ctx, done...) or
// cl.MarkCommitRecords(done...). done is all of recs exactly when err is
// nil.
//
// Every other record must be consumed again: franz-go does not do that by
// itself, so after an error seek the client back with
// cl.SetOffsets([RewindOffsets](recs, done)) (from the polling goroutine;
// with a consumer group, kgo.BlockRebalanceOnPoll makes sure no revoke
// runs in between). A record past an unfinished one can itself be finished
// already (handled while an earlier record's forward was failing): the
// guard remembers it, and when it is consumed again Process puts it in done
// without handling or counting it again. It forgets such a record once it
// sees a later offset of that partition instead.
//
// The error is nil, or joins a [*HandlerError], errors wrapping
// [ErrDeadLetter] (after waiting for every forward of this call), and the
// context's error when ctx ended before all records were judged. Expired
// records in done count as processed for the commit: that is the point.
func (g *Guard) Process(ctx context.Context, recs []*kgo.Record, h Handler) (done []*kgo.Record, err error) {
	var (
		end      = len(recs)
		stopErr  error
		dl       *forwards
		topic    string
		tm       *ttlmetrics.Topic
		resolved bool
		now      = g.core.Now()
		ahead    = g.nAhead.Load() > 0
	)
	for i, r := range recs {
		if cerr := ctx.Err(); cerr != nil {
			end = i
			stopErr = fmt.Errorf("kafkaguard: stopped before %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, context.Cause(ctx))
			break
		}
		if ahead && g.takeAhead(r) {
			if g.progress != nil {
				g.progress.Finished(r)
			}
			continue // finished in an earlier call
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
			if s, ok := g.progress.(Skipper); ok {
				s.Skipped(r)
			}
			if g.progress != nil {
				g.progress.Finished(r)
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
		if g.progress != nil {
			g.progress.Finished(r)
		}
	}
	var (
		dlErr  error
		failed []int // indexes of the records whose forward failed
	)
	if dl != nil {
		dl.wg.Wait()
		failed = dl.failedAt
		if dl.err != nil {
			dlErr = fmt.Errorf("%w: %d record(s), first: %w", ErrDeadLetter, len(failed), dl.err)
			// One warning per call, not per record: a missing
			// dead-letter topic fails every forward of every poll.
			g.core.Log.Warn("ttl: dead-letter forward failed; the records are not finished (consume them again: RewindOffsets)",
				"failed", len(failed), "first", dl.err)
		}
	}
	if end == len(recs) && len(failed) == 0 {
		return recs, errors.Join(stopErr, dlErr)
	}
	return g.finished(recs[:end], failed), errors.Join(stopErr, dlErr)
}

// finished returns the records of judged (all judged, every one finished
// except those at the indexes in failed) that precede their partition's
// first unfinished record, and remembers the other finished ones. Records
// after judged are unfinished, but no later record is finished either, so
// they need not be looked at.
func (g *Guard) finished(judged []*kgo.Record, failed []int) []*kgo.Record {
	slices.Sort(failed)
	done := make([]*kgo.Record, 0, len(judged))
	var (
		blocked map[partition]bool
		later   []*kgo.Record
	)
	for i, r := range judged {
		p := partition{r.Topic, r.Partition}
		if _, bad := slices.BinarySearch(failed, i); bad {
			if blocked == nil {
				blocked = make(map[partition]bool)
			}
			blocked[p] = true
			continue
		}
		if blocked[p] {
			later = append(later, r)
			continue
		}
		done = append(done, r)
	}
	if len(later) > 0 {
		g.remember(later)
	}
	return done
}

// remember records recs (finished, not in done) in g.ahead.
func (g *Guard) remember(recs []*kgo.Record) {
	g.aheadMu.Lock()
	defer g.aheadMu.Unlock()
	if g.ahead == nil {
		g.ahead = make(map[partition][]int64)
	}
	for _, r := range recs {
		p := partition{r.Topic, r.Partition}
		offs := g.ahead[p]
		if i, ok := slices.BinarySearch(offs, r.Offset); !ok {
			g.ahead[p] = slices.Insert(offs, i, r.Offset)
			g.nAhead.Add(1)
		}
	}
}

// takeAhead reports whether r finished in an earlier call, and forgets it.
// It also forgets the offsets of r's partition below r's: consumption
// moved past them without them coming back.
func (g *Guard) takeAhead(r *kgo.Record) bool {
	g.aheadMu.Lock()
	defer g.aheadMu.Unlock()
	p := partition{r.Topic, r.Partition}
	offs, ok := g.ahead[p]
	if !ok {
		return false
	}
	i, found := slices.BinarySearch(offs, r.Offset)
	n := i
	if found {
		n++
	}
	if n == 0 {
		return false
	}
	if n == len(offs) {
		delete(g.ahead, p)
	} else {
		g.ahead[p] = offs[n:]
	}
	g.nAhead.Add(-int64(n))
	return found
}

// RewindOffsets returns, for each partition of recs with a record that is
// not in done, the offset of its first such record, for cl.SetOffsets: the
// client then fetches that partition again from there, so the records
// Process did not finish are consumed again (and forwarded or handled
// then). done must be what [Guard.Process] returned for recs. It returns
// nil when every record is in done; cl.SetOffsets(nil) does nothing.
func RewindOffsets(recs, done []*kgo.Record) map[string]map[int32]kgo.EpochOffset {
	var out map[string]map[int32]kgo.EpochOffset
	j := 0
	for _, r := range recs {
		if j < len(done) && done[j] == r {
			j++
			continue
		}
		parts := out[r.Topic]
		if _, ok := parts[r.Partition]; ok {
			continue
		}
		if parts == nil {
			if out == nil {
				out = make(map[string]map[int32]kgo.EpochOffset)
			}
			parts = make(map[int32]kgo.EpochOffset)
			out[r.Topic] = parts
		}
		parts[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
	}
	return out
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
	wg       sync.WaitGroup
	mu       sync.Mutex
	failedAt []int // indexes of the failed records, in completion order
	first    int   // the lowest of failedAt, -1 when none
	err      error // the error of the record at first
}

func (f *forwards) fail(i int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failedAt = append(f.failedAt, i)
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
