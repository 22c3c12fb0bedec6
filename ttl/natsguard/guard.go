// Package natsguard skips dead work in NATS JetStream consumers: messages
// whose lagbridge deadline has passed, or that are older than the target's
// maxAge, are counted, optionally forwarded to a dead-letter subject, and
// terminated (or acknowledged) without reaching the handler; live messages
// reach the handler under a context that ends at their deadline.
//
// With Consume:
//
//	g, err := natsguard.New(natsguard.Config{MaxAge: 2 * time.Second, Metrics: m})
//	...
//	cc, err := consumer.Consume(g.Wrap(ctx, func(ctx context.Context, msg jetstream.Msg) error {
//		if err := work(ctx, msg); err != nil {
//			return err
//		}
//		return msg.Ack()
//	}))
//
// With Fetch or Messages, call [Guard.Handle] per message.
//
// It imports nats.go (core and jetstream messages) and the ttl core; it
// must not import the daemon or the producer SDK, and it uses no
// JetStream management API.
package natsguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/internal/guardcore"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

// Errors. Each is wrapped, with the message's stream and sequence, by the
// error [Guard.Handle] returns.
var (
	// ErrInvalidConfig is wrapped by every error of [Config.Validate] and
	// [New].
	ErrInvalidConfig = errors.New("natsguard: invalid config")
	// ErrDeadLetter: an expired message could not be forwarded; it was
	// negatively acknowledged (with Config.DeadLetter.RetryDelay) so the
	// server delivers it again.
	ErrDeadLetter = errors.New("natsguard: dead-letter forward failed")
	// ErrSettle: acknowledging a message failed (Term or Ack of an expired
	// one, or the Ack of a live one with Config.AutoAck); the server may
	// deliver it again after AckWait.
	ErrSettle = errors.New("natsguard: acknowledging a message failed")
)

// Handler handles one live message. ctx ends at the message's effective
// deadline (the earlier of its lagbridge-deadline header and its stream
// timestamp plus maxAge) when it has one. The handler acknowledges the
// message itself, as with plain JetStream, unless Config.AutoAck is set.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// HandlerError is returned by [Guard.Handle] when the handler fails.
type HandlerError struct {
	Stream   string
	Sequence uint64 // stream sequence; 0 when the message has no JetStream metadata
	Err      error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("natsguard: handler failed on %s#%d: %v", e.Stream, e.Sequence, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// Publisher publishes a message and waits for the stream's ack;
// jetstream.JetStream implements it.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// DeadLetter says where expired messages go. Each forward is a copy (data
// and headers) with the ttl.HeaderExpiredReason, ttl.HeaderExpiredAt,
// ttl.HeaderOriginStream, ttl.HeaderOriginSequence,
// ttl.HeaderOriginSubject and ttl.HeaderOriginTimestamp headers added. The
// copy drops the original's server headers ("Nats-*": a Nats-TTL would
// expire the copy, Nats-Expected-* would fail the publish, Nats-Rollup
// would purge the destination) and carries Nats-Msg-Id
// "lagbridge-ttl.<stream>.<seq>" instead, so that a forward repeated after a
// crash is dropped by the destination's duplicate window. The destination
// must be a subject of a JetStream stream: the forward waits for its ack
// before the original is acknowledged. A message that already carries
// lagbridge-expired-reason (a forward itself) is never forwarded again, so
// a destination inside the consumed stream cannot loop.
type DeadLetter struct {
	// Publisher publishes the forwards. Required.
	Publisher Publisher
	// Subject receives every expired message. Either Subject or SubjectFor
	// is required.
	Subject string
	// SubjectFor, when set, overrides Subject: it names the dead-letter
	// subject for a message of stream published on subject, or "" to not
	// forward it. Must be safe for concurrent use.
	SubjectFor func(stream, subject string) string
	// Timeout bounds one forward when ctx has no earlier deadline. Zero:
	// 5s. Must be >= 0.
	Timeout time.Duration
	// RetryDelay is the NakWithDelay delay after a failed forward. Zero:
	// 1s. Must be >= 0.
	RetryDelay time.Duration
}

// Config configures a [Guard]. The zero value is valid: messages are judged
// by their deadline header only, expired ones are terminated with a reason,
// nothing is forwarded, no metrics.
type Config struct {
	// MaxAge is the age bound of the messages (the policy's maxAge): a
	// message stored MaxAge or more before now is dead work. Zero: no age
	// bound. Must be >= 0.
	MaxAge time.Duration
	// DeadLetter, when set, forwards expired messages first.
	DeadLetter *DeadLetter
	// AckExpired acknowledges expired messages with Ack instead of
	// TermWithReason. Term is the default because its advisory
	// ($JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED) carries the reason;
	// servers older than 2.10.4 ignore TermWithReason, use Ack there.
	AckExpired bool
	// AutoAck acknowledges live messages whose handler returned nil and
	// negatively acknowledges those whose handler failed. False (default):
	// the handler acknowledges, as with plain JetStream.
	AutoAck bool
	// OnError receives every error of a message handled through
	// [Guard.Wrap] (Consume callbacks cannot return one). Nil: handler
	// errors are logged at debug level, the others at warn level by the
	// guard itself. Called on the consume goroutine.
	OnError func(msg jetstream.Msg, err error)
	// Metrics receives the lagbridge_ttl_* counters (topic = stream). Nil:
	// none.
	Metrics *ttlmetrics.Metrics
	// Logger: nil discards.
	Logger *slog.Logger
	// Now is the clock that judges messages. Nil: time.Now. (Handler
	// contexts' deadlines are absolute times and run on the real clock,
	// as every context does.)
	Now func() time.Time
	// Progress, when set, is told of every message [Guard.Handle] starts
	// and finishes (handled, failed or expired), so that a consumer
	// reporter can tell the lagbridge daemon where the consumer really
	// is; consumerclient.NATSReporter implements it. Nil: nobody.
	Progress Progress
}

// Progress follows the messages a [Guard] has in hand. Its methods are
// called on the handling goroutine, concurrently when messages are handled
// in parallel; they must be safe for that and fast.
type Progress interface {
	// Received: the guard starts on msg.
	Received(msg jetstream.Msg)
	// Done: the guard is finished with msg.
	Done(msg jetstream.Msg)
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
	if dl := c.DeadLetter; dl != nil {
		if dl.Publisher == nil {
			add("deadLetter.publisher is required")
		}
		if dl.Subject == "" && dl.SubjectFor == nil {
			add("deadLetter needs subject or subjectFor")
		}
		if dl.Timeout < 0 {
			add("deadLetter.timeout must be >= 0, got %v", dl.Timeout)
		}
		if dl.RetryDelay < 0 {
			add("deadLetter.retryDelay must be >= 0, got %v", dl.RetryDelay)
		}
	}
	return errors.Join(errs...)
}

// Guard judges, counts and routes JetStream messages. It is safe for
// concurrent use and starts no goroutines.
type Guard struct {
	rule       ttl.Rule
	dl         *DeadLetter
	dlTimeout  time.Duration
	retryDelay time.Duration
	ackExpired bool
	autoAck    bool
	onError    func(jetstream.Msg, error)
	progress   Progress
	core       guardcore.Core
	// dlOutages holds the dead-letter subjects whose last forward failed:
	// an outage of a destination (no stream captures it, its stream is
	// gone) is warned of once, not once per message, and its first
	// forward that succeeds again says so. At most maxOutages subjects
	// (SubjectFor may name many); past that a failure warns each time.
	dlMu      sync.Mutex
	dlOutages map[string]struct{}
}

// maxOutages bounds Guard.dlOutages.
const maxOutages = 1024

// New returns a guard for cfg, or the errors of cfg.Validate.
func New(cfg Config) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{rule: ttl.Rule{MaxAge: cfg.MaxAge}, dl: cfg.DeadLetter, ackExpired: cfg.AckExpired,
		autoAck: cfg.AutoAck, onError: cfg.OnError, progress: cfg.Progress, dlTimeout: 5 * time.Second, retryDelay: time.Second}
	if g.dl != nil {
		if g.dl.Timeout > 0 {
			g.dlTimeout = g.dl.Timeout
		}
		if g.dl.RetryDelay > 0 {
			g.retryDelay = g.dl.RetryDelay
		}
	}
	g.core.Init(cfg.Now, cfg.Metrics, cfg.Logger)
	return g, nil
}

// Stats returns what the guard has done so far (see ttl.Stats for the
// invariant Received == Processed + Failed + Expired).
func (g *Guard) Stats() ttl.Stats { return g.core.Stats() }

// Check judges msg at now without counting or acknowledging anything. The
// age bound uses the stream timestamp of the message's [Origin] (read from
// its ack reply subject without allocating); a message without one (not a
// JetStream message) has no age bound. A malformed lagbridge header is
// reported in the verdict's HeaderErr and judged as absent. It never
// panics.
func (g *Guard) Check(msg jetstream.Msg, now time.Time) (ttl.Verdict, Origin) {
	h := msg.Headers()
	d, hasD := first(h, ttl.HeaderDeadline)
	c, hasC := first(h, ttl.HeaderCriticality)
	o := origin(msg)
	return g.rule.CheckHeaders(d, hasD, c, hasC, o.Timestamp, now), o
}

func first(h nats.Header, key string) (string, bool) {
	if v, ok := h[key]; ok && len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// Handle judges msg at the guard's clock and then:
//
//   - expired: counts it by reason, forwards it to the dead-letter subject
//     when configured, and terminates it (TermWithReason
//     "lagbridge-ttl: expired (<reason>)", or Ack with Config.AckExpired);
//     a failed forward naks it for redelivery instead;
//   - live: calls h under a context bounded by its effective deadline.
//
// It returns nil, a [*HandlerError], or an error wrapping [ErrDeadLetter]
// or [ErrSettle]. Every message is counted in exactly one of the
// Processed, Failed and Expired stats.
func (g *Guard) Handle(ctx context.Context, msg jetstream.Msg, h Handler) error {
	if g.progress != nil {
		g.progress.Received(msg)
		defer g.progress.Done(msg)
	}
	now := g.core.Now()
	v, o := g.Check(msg, now)
	tm := g.core.Metrics.Topic(o.Stream)
	g.core.Receive(tm, o.Stream, v)
	if v.Expired() {
		return g.expire(ctx, msg, o, v, now, tm)
	}
	hctx, cancel := guardcore.Context(ctx, v)
	err := h(hctx, msg)
	cancel()
	end := now // only read the clock again when lateness can matter
	if !v.Deadline.IsZero() {
		end = g.core.Now()
	}
	g.core.Handled(tm, v, err, end)
	if err != nil {
		if g.autoAck {
			_ = msg.Nak() // redelivery is the point; a lost nak only delays it to AckWait
		}
		return &HandlerError{Stream: o.Stream, Sequence: o.Sequence, Err: err}
	}
	if g.autoAck {
		if aerr := msg.Ack(); aerr != nil && !errors.Is(aerr, jetstream.ErrMsgAlreadyAckd) {
			return fmt.Errorf("%w: %s#%d: %w", ErrSettle, o.Stream, o.Sequence, aerr)
		}
	}
	return nil
}

// Wrap returns a jetstream.MessageHandler for Consume that runs h through
// [Guard.Handle] with ctx as the handlers' parent context and reports
// errors to Config.OnError.
func (g *Guard) Wrap(ctx context.Context, h Handler) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		err := g.Handle(ctx, msg, h)
		if err == nil {
			return
		}
		if g.onError != nil {
			g.onError(msg, err)
			return
		}
		var he *HandlerError
		if errors.As(err, &he) {
			g.core.Log.Debug("ttl: handler failed", "err", err)
		}
	}
}

func (g *Guard) expire(ctx context.Context, msg jetstream.Msg, o Origin, v ttl.Verdict, now time.Time, tm *ttlmetrics.Topic) error {
	if g.dl != nil {
		dst, err := g.forward(ctx, msg, o, v, now, tm)
		if err != nil {
			g.core.DeadLetterFailed(tm)
			err = fmt.Errorf("%w: %s#%d: %w", ErrDeadLetter, o.Stream, o.Sequence, err)
			if nerr := msg.NakWithDelay(g.retryDelay); nerr != nil {
				err = errors.Join(err, fmt.Errorf("nak: %w", nerr))
			}
			if g.outage(dst, true) {
				g.core.Log.Warn("ttl: dead-letter forwards fail; expired messages are delivered again until a forward succeeds "+
					"(each failure counted in lagbridge_ttl_deadletter_errors_total and logged at debug)", "subject", dst, "err", err)
			} else {
				g.core.Log.Debug("ttl: dead-letter forward failed; the message will be delivered again", "subject", dst, "err", err)
			}
			return err
		}
		if dst != "" && g.outage(dst, false) {
			g.core.Log.Info("ttl: dead-letter forwards succeed again", "subject", dst)
		}
	}
	var err error
	if g.ackExpired {
		err = msg.Ack()
	} else {
		err = msg.TermWithReason("lagbridge-ttl: expired (" + v.Reason.String() + ")")
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		g.core.SettleFailed(tm)
		err = fmt.Errorf("%w: %s#%d: %w", ErrSettle, o.Stream, o.Sequence, err)
		g.core.Log.Warn("ttl: acknowledging an expired message failed", "err", err)
		return err
	}
	return nil
}

// outage records whether dst's last forward failed and reports whether
// that changed: a failure that starts an outage, a success that ends one.
func (g *Guard) outage(dst string, failed bool) bool {
	g.dlMu.Lock()
	defer g.dlMu.Unlock()
	_, was := g.dlOutages[dst]
	switch {
	case failed && !was:
		if len(g.dlOutages) < maxOutages {
			if g.dlOutages == nil {
				g.dlOutages = map[string]struct{}{}
			}
			g.dlOutages[dst] = struct{}{}
		}
		return true
	case !failed && was:
		delete(g.dlOutages, dst)
		return true
	}
	return false
}

// forward publishes the dead-letter copy to the subject it returns; it is
// a no-op, returning "", when the destination is "" for this message or
// the message is a forward itself. It counts successes itself.
func (g *Guard) forward(ctx context.Context, msg jetstream.Msg, o Origin, v ttl.Verdict, now time.Time, tm *ttlmetrics.Topic) (string, error) {
	dst := g.dl.Subject
	if g.dl.SubjectFor != nil {
		dst = g.dl.SubjectFor(o.Stream, msg.Subject())
	}
	if _, forwarded := msg.Headers()[ttl.HeaderExpiredReason]; dst == "" || forwarded {
		return "", nil // a forward itself is never forwarded again: no loops
	}
	out := nats.NewMsg(dst)
	out.Data = msg.Data()
	for k, vs := range msg.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	out.Header.Set(ttl.HeaderExpiredReason, v.Reason.String())
	out.Header.Set(ttl.HeaderExpiredAt, ttl.FormatTime(now))
	out.Header.Set(ttl.HeaderOriginSubject, msg.Subject())
	if o.Stream != "" {
		seq := strconv.FormatUint(o.Sequence, 10)
		out.Header.Set(ttl.HeaderOriginStream, o.Stream)
		out.Header.Set(ttl.HeaderOriginSequence, seq)
		out.Header.Set(ttl.HeaderOriginTimestamp, ttl.FormatTime(o.Timestamp))
		out.Header.Set(jetstream.MsgIDHeader, "lagbridge-ttl."+o.Stream+"."+seq)
	}
	pctx, cancel := context.WithTimeout(ctx, g.dlTimeout)
	defer cancel()
	if _, err := g.dl.Publisher.PublishMsg(pctx, out); err != nil {
		return dst, fmt.Errorf("publish to %s: %w", dst, err)
	}
	g.core.DeadLettered(tm, v.Reason)
	return dst, nil
}
