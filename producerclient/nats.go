package producerclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/ttl"
)

// noRetry turns off nats.go's own publish retries (by default it retries
// twice, 250ms apart, when no stream answers): the SDK is the one retry
// layer. Shared, so that passing it allocates nothing.
var noRetry = []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)}

// closeDrain bounds how long Close waits for the acks of async publishes.
const closeDrain = 5 * time.Second

// defaultAckWait bounds the wait for an async ack when the message has no
// deadline (nats.go has no ack timeout unless the JetStream context was
// built with jetstream.WithPublishAsyncTimeout).
const defaultAckWait = 30 * time.Second

// errNoAck is the failure of an async publish whose ack did not come in
// time; whether the message was stored is unknown.
var errNoAck = errors.New("no ack from JetStream in time; the message may or may not be stored")

// NATSProducer publishes to JetStream under lagbridge quotas. The lease key
// ("topic") of a message is its stream, found from the subject. It is
// safe for concurrent use. Create it with NewNATS.
type NATSProducer struct {
	c     *core
	js    jetstream.JetStream
	queue chan *npending

	// qmu orders enqueues against the collector's exit: sendAsync holds
	// it for reading while it puts a message on queue, and the collector,
	// once the producer is closed and queue is empty, takes it for writing,
	// takes what was queued meanwhile and sets qdone. A message that
	// reaches sendAsync after that (a PublishAsync admitted before Close,
	// or a retry) fails with ErrClosed instead of going into a queue that
	// nobody reads.
	qmu   sync.RWMutex
	qdone bool

	mu     sync.RWMutex
	routes map[string]natsRoute // subject -> stream
	ttls   map[string]ttlInfo   // stream -> per-message TTL allowed

	// lookup lets one stream lookup at a time run for a failed publish
	// (see noStreamErr); a failure that finds it taken does not wait: it
	// stays what it was (unavailability).
	lookup chan struct{}
}

// natsRoute is the stream that captures a subject, as JetStream's stream
// list said at checked: found (topic is the stream), missing (no stream
// captures it), or neither (the lookup failed; topic is the subject).
// failed is when a later lookup failed (a found route is kept then).
type natsRoute struct {
	topic   string
	found   bool
	missing bool
	checked time.Time
	failed  time.Time
}

// noStreamFresh is how long a failed publish trusts the route cache's
// verdict on its subject before asking JetStream again: at most one
// lookup a second per subject however many publishes fail.
const noStreamFresh = time.Second

type ttlInfo struct {
	allowed bool
	checked time.Time
	known   bool
}

// routeCacheMax bounds the subject cache; it is cleared when full.
const routeCacheMax = 10_000

// NewNATS wraps js. Every publish passes jetstream.WithRetryAttempts(0), so
// nats.go does not retry under the SDK. NewNATS starts the ack collector
// goroutine and the lease goroutines of cfg.Leases; with
// Leases.KVBucket set and Leases.KV nil, leases are read through js. The
// caller keeps ownership of js and its connection.
func NewNATS(js jetstream.JetStream, cfg Config) (*NATSProducer, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil jetstream.JetStream", ErrInvalidOption)
	}
	c, err := newCore(cfg)
	if err != nil {
		return nil, err
	}
	p := &NATSProducer{c: c, js: js, queue: make(chan *npending, c.cfg.NATS.MaxPendingAcks),
		routes: map[string]natsRoute{}, ttls: map[string]ttlInfo{}, lookup: make(chan struct{}, 1)}
	c.goroutine(p.collect)
	if err := c.start(js); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// npending is one async message in flight.
type npending struct {
	m       msg
	nm      *nats.Msg
	stream  string
	done    func(*nats.Msg, *jetstream.PubAck, error)
	fut     jetstream.PubAckFuture
	counted bool
}

// Publish sends m and waits for its ack. It returns the ack, or a
// *RejectError holding m (or an error wrapping ErrInvalidOption for a nil
// message or no subject). Retries happen inside, within the retry budget,
// the context's deadline and the lease's signal; a timed-out publish is
// retried only when m has a Nats-Msg-Id header (the stream then drops a
// duplicate), since otherwise a retry could store it twice.
//
// m gets the lagbridge-deadline and lagbridge-criticality headers (each
// left out for its default, no deadline and CRITICAL, as the ttl format
// allows) and, on a stream that allows it (see NATSConfig.MessageTTL),
// Nats-TTL: the time to the deadline, rounded up to whole seconds.
func (p *NATSProducer) Publish(ctx context.Context, m *nats.Msg, opts ...CallOption) (*jetstream.PubAck, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if m == nil || m.Subject == "" {
		return nil, fmt.Errorf("%w: nil message or empty subject", ErrInvalidOption)
	}
	stream := p.topicOf(ctx, m.Subject)
	t := p.c.topic(stream)
	meta, hasCrit := readNATSMeta(m.Header)
	var ms msg
	p.c.prepare(ctx, &ms, t, opts, meta, hasCrit)
	now := p.c.mono.nanos()
	if rej := p.c.admit(&ms, now); rej != nil {
		rej.Msg = m
		return nil, rej
	}
	p.stamp(ctx, m, &ms, stream)
	for first := true; ; first = false {
		if !first {
			now = p.c.mono.nanos()
		}
		if rej := p.c.beforeSend(&ms, now); rej != nil {
			return nil, p.failSync(&ms, m, rej)
		}
		ack, err := p.js.PublishMsg(ctx, m, noRetry...)
		if err == nil {
			p.c.succeeded(&ms)
			p.c.finish(&ms)
			return ack, nil
		}
		if p.ttlRefused(err, m, stream) {
			continue
		}
		err = p.noStreamErr(ctx, err, m.Subject)
		delay, rej := p.c.failed(&ms, err, classifyNATS(err, m), nil)
		if rej != nil {
			return nil, p.failSync(&ms, m, rej)
		}
		if rej := p.c.waitRetry(&ms, delay, err); rej != nil {
			return nil, p.failSync(&ms, m, rej)
		}
	}
}

func (p *NATSProducer) failSync(ms *msg, m *nats.Msg, rej *RejectError) error {
	rej.Msg = m
	p.c.finish(ms)
	return rej
}

// PublishAsync sends m and calls done exactly once with m and the outcome:
// the ack, or a *RejectError holding m. done may run before PublishAsync
// returns (a local rejection) or on the producer's ack goroutine: it must
// not block. In Block mode PublishAsync waits for quota up to the
// context's deadline; it also blocks while MaxPendingAcks acks are
// outstanding. The ack is awaited until the message's deadline (or 30s
// without one); after that the outcome is unknown and reported as an
// error. A nil done is allowed; failures are then logged and counted.
//
// As KafkaProducer.ProduceAsync, it returns a refusal at call time: when
// the SDK refused m before handing it to nats.go (Drop's refusals, a stop
// lease, a failed Block wait, ...), the very error done received, after
// done returned, counted once; nil when m was published and its outcome
// comes through done only.
func (p *NATSProducer) PublishAsync(ctx context.Context, m *nats.Msg, done func(*nats.Msg, *jetstream.PubAck, error), opts ...CallOption) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if m == nil || m.Subject == "" {
		err := fmt.Errorf("%w: nil message or empty subject", ErrInvalidOption)
		if done != nil {
			done(m, nil, err)
		} else {
			p.c.unhandledFailure(err)
		}
		return err
	}
	stream := p.topicOf(ctx, m.Subject)
	np := &npending{nm: m, stream: stream, done: done}
	meta, hasCrit := readNATSMeta(m.Header)
	p.c.prepare(ctx, &np.m, p.c.topic(stream), opts, meta, hasCrit)
	now := p.c.mono.nanos()
	if rej := p.c.admit(&np.m, now); rej != nil {
		p.finishAsync(np, nil, rej)
		return rej
	}
	np.counted = true
	p.stamp(ctx, m, &np.m, stream)
	if rej := p.sendAsync(np, now); rej != nil {
		return rej
	}
	return nil
}

// sendAsync makes one attempt of np and hands its future to the
// collector. Every path ends in exactly one of: np queued for the
// collector, or np finished (its done called, its slot released). It
// returns the rejection it handed to done when the SDK refused the
// attempt before handing it to nats.go (closed, or the adaptive
// throttle), else nil.
func (p *NATSProducer) sendAsync(np *npending, now int64) *RejectError {
	if p.c.closed.Load() {
		// Admitted before Close but not sent yet: do not send after Close.
		rej := p.c.closedReject(np.m.t, np.m.attempts, nil)
		p.finishAsync(np, nil, rej)
		return rej
	}
	if rej := p.c.beforeSend(&np.m, now); rej != nil {
		p.finishAsync(np, nil, rej)
		return rej
	}
	f, err := p.js.PublishMsgAsync(np.nm, noRetry...)
	if err != nil {
		p.resultAsync(np, nil, err)
		return nil
	}
	np.fut = f
	p.qmu.RLock()
	if !p.qdone {
		// Before Close this may block (MaxPendingAcks outstanding); once
		// the producer is closed the ctx case is ready, so the collector,
		// waiting for qmu, is never held up for long.
		select {
		case p.queue <- np:
			p.qmu.RUnlock()
			return nil
		case <-p.c.ctx.Done():
		}
	}
	p.qmu.RUnlock()
	// The collector has exited or is about to: nobody will await the ack.
	p.finishAsync(np, nil, p.c.closedReject(np.m.t, np.m.attempts, errNoAck))
	return nil
}

// resultAsync handles the outcome of one async attempt.
func (p *NATSProducer) resultAsync(np *npending, ack *jetstream.PubAck, err error) {
	if err == nil {
		p.c.succeeded(&np.m)
		if np.done != nil {
			np.done(np.nm, ack, nil)
		}
		p.c.finish(&np.m)
		return
	}
	if p.ttlRefused(err, np.nm, np.stream) {
		if !p.c.spawn(func() { p.sendAsync(np, p.c.mono.nanos()) }) {
			p.finishAsync(np, nil, p.c.closedReject(np.m.t, np.m.attempts, err))
		}
		return
	}
	if isNoStream(err) {
		// The stream lookup is a request: not on the ack goroutine.
		if !p.c.spawn(func() { p.failedAsync(np, p.noStreamErr(np.m.ctx, err, np.nm.Subject), false) }) {
			p.finishAsync(np, nil, p.c.closedReject(np.m.t, np.m.attempts, err))
		}
		return
	}
	p.failedAsync(np, err, true)
}

// failedAsync decides what follows a failed async attempt: the final
// rejection, or a retry after the backoff (on a new goroutine when spawn
// is set, else on this one, itself spawned).
func (p *NATSProducer) failedAsync(np *npending, err error, spawn bool) {
	delay, rej := p.c.failed(&np.m, err, classifyNATS(err, np.nm), nil)
	if rej != nil {
		p.finishAsync(np, nil, rej)
		return
	}
	retry := func() {
		if rej := p.c.waitRetry(&np.m, delay, err); rej != nil {
			p.finishAsync(np, nil, rej)
			return
		}
		p.sendAsync(np, p.c.mono.nanos())
	}
	if !spawn {
		retry()
		return
	}
	if !p.c.spawn(retry) {
		p.finishAsync(np, nil, p.c.closedReject(np.m.t, np.m.attempts, err))
	}
}

func (p *NATSProducer) finishAsync(np *npending, ack *jetstream.PubAck, rej *RejectError) {
	rej.Msg = np.nm
	if np.done != nil {
		np.done(np.nm, ack, rej)
	} else {
		p.c.unhandledFailure(rej)
	}
	if np.counted {
		p.c.finish(&np.m)
	}
}

// collect is the ack goroutine: it awaits the futures in publish order
// (JetStream acks a stream's messages in order) and, once the producer is
// closed, drains what is queued for up to closeDrain in all. Before it
// returns it sets qdone (see qmu), so that no message is queued after it
// is gone.
func (p *NATSProducer) collect() {
	tm := p.c.clock.NewTimer(time.Hour)
	defer tm.Stop()
	var first *npending // the message whose wait Close interrupted
run:
	for {
		select {
		case np := <-p.queue:
			if p.await(np, tm, p.c.ctx.Done(), nil) == awaitClosing {
				first = np
				break run
			}
		case <-p.c.ctx.Done():
			break run
		}
	}
	drain := time.NewTimer(closeDrain)
	defer drain.Stop()
	// The timer ticks once; after that every wait ends at once.
	drainC := drain.C
	await := func(np *npending) {
		if p.await(np, tm, nil, drainC) == awaitDrained {
			drainC = drained
		}
	}
	if first != nil {
		await(first)
	}
	for {
		select {
		case np := <-p.queue:
			await(np)
			continue
		default:
		}
		// Empty: close the queue to senders, then await what they queued
		// in between.
		p.qmu.Lock()
		p.qdone = true
		var late []*npending
		for more := true; more; {
			select {
			case np := <-p.queue:
				late = append(late, np)
			default:
				more = false
			}
		}
		p.qmu.Unlock()
		for _, np := range late {
			await(np)
		}
		return
	}
}

// drained is a closed channel: the drain deadline of Close has passed.
var drained = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// How await ended.
const (
	awaitDone    = iota // np is finished (acked, failed, or retrying)
	awaitClosing        // closing was closed first; np is untouched
	awaitDrained        // drain delivered; np failed with ErrClosed
)

// await waits for np's ack, up to its deadline (defaultAckWait without
// one), until closing is closed (np is then left to the drain), or until
// drain delivers (np then fails with ErrClosed).
func (p *NATSProducer) await(np *npending, tm Timer, closing <-chan struct{}, drain <-chan time.Time) int {
	select {
	case ack := <-np.fut.Ok():
		p.resultAsync(np, ack, nil)
		return awaitDone
	case err := <-np.fut.Err():
		p.resultAsync(np, nil, err)
		return awaitDone
	default:
	}
	wait := defaultAckWait
	if np.m.hasDL {
		wait = time.Duration(np.m.dl - p.c.mono.nanos())
	}
	if wait <= 0 {
		wait = time.Millisecond
	}
	tm.Stop()
	tm.Reset(wait)
	select {
	case ack := <-np.fut.Ok():
		p.resultAsync(np, ack, nil)
	case err := <-np.fut.Err():
		p.resultAsync(np, nil, err)
	case <-tm.C():
		p.resultAsync(np, nil, errNoAck)
	case <-np.m.ctx.Done():
		// The caller gave up on the ack: its decision, not a broker
		// failure (see core.callerEnded).
		p.resultAsync(np, nil, np.m.ctx.Err())
	case <-closing:
		return awaitClosing
	case <-drain:
		p.finishAsync(np, nil, p.c.closedReject(np.m.t, np.m.attempts, errNoAck))
		return awaitDrained
	}
	return awaitDone
}

// Flush waits until every message published so far is finally
// acknowledged or failed (retries included), or ctx ends.
func (p *NATSProducer) Flush(ctx context.Context) error { return p.c.flush(ctx) }

// Close stops the lease goroutines, ends pending retries (their messages
// fail with ErrClosed), and waits up to 5s for the acks of async messages
// already published (those still unacknowledged then fail with ErrClosed:
// stored or not, unknown). Later publishes fail with ErrClosed, and so does
// a PublishAsync admitted before Close whose message had not reached the
// ack goroutine by then: its done gets ErrClosed, possibly after Close
// returns (if it was sent, whether it was stored is unknown). It does not
// close the NATS connection. Idempotent; it waits for every goroutine the
// producer started and always returns nil.
func (p *NATSProducer) Close() error {
	p.c.close()
	return nil
}

// Quota returns the quota the producer currently enforces on stream;
// false for a stream it has not seen.
func (p *NATSProducer) Quota(stream string) (Quota, bool) { return p.c.quota(stream) }

// Stats returns the producer's counters.
func (p *NATSProducer) Stats() Stats { return p.c.stats() }

// topicOf returns the lease key of subject: NATSConfig.Topic's answer, or
// the stream that captures the subject (cached), or the subject itself
// when no stream does (the publish will then fail on its own).
func (p *NATSProducer) topicOf(ctx context.Context, subject string) string {
	if f := p.c.cfg.NATS.Topic; f != nil {
		if t := f(subject); t != "" {
			return t
		}
		return subject
	}
	p.mu.RLock()
	r, ok := p.routes[subject]
	p.mu.RUnlock()
	if ok && r.found {
		return r.topic
	}
	if ok && p.c.clock.Now().Sub(r.checked) < 10*time.Second {
		return r.topic
	}
	return p.route(ctx, subject).topic
}

// route asks JetStream which stream captures subject (up to 5 s) and
// caches the answer.
func (p *NATSProducer) route(ctx context.Context, subject string) natsRoute {
	now := p.c.clock.Now()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	defer context.AfterFunc(p.c.ctx, cancel)() // Close does not wait for it
	r := natsRoute{topic: subject, checked: now}
	name, err := p.js.StreamNameBySubject(lctx, subject)
	switch {
	case err == nil && name != "":
		r.topic, r.found = name, true
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// The stream list answered, and no stream captures subject.
		r.missing = true
	}
	p.mu.Lock()
	if len(p.routes) >= routeCacheMax {
		p.routes = map[string]natsRoute{}
	}
	if old, ok := p.routes[subject]; ok && old.found && !r.found && !r.missing {
		// A failed lookup (no meta leader) says nothing new: keep the
		// stream as the lease key, and note the failure.
		old.failed = now
		r = old
	} else if !r.found && !r.missing {
		r.failed = now
	}
	p.routes[subject] = r
	p.mu.Unlock()
	return r
}

// isNoStream reports whether err is a publish that no stream answered:
// none captures the subject, or the one that does has no leader (or the
// server's interest in it has not reached the client's server yet).
func isNoStream(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// noStreamErr tells the two apart when no stream answered a publish to
// subject: when JetStream's stream list has no stream that captures
// subject, it returns an error naming the subject that matches
// jetstream.ErrStreamNotFound (classifyNATS: a stop, the request's own)
// and err; otherwise (a stream captures it, or the lookup failed) err
// unchanged. Every verdict, a failed lookup's too, is cached
// (noStreamFresh, routeCacheMax), a failed lookup never replaces a found
// stream, and one lookup at a time runs: a failure that finds one running
// does not wait for it and keeps err (unavailability).
func (p *NATSProducer) noStreamErr(ctx context.Context, err error, subject string) error {
	if !isNoStream(err) {
		return err
	}
	fresh := func() (natsRoute, bool) {
		p.mu.RLock()
		r, ok := p.routes[subject]
		p.mu.RUnlock()
		now := p.c.clock.Now()
		return r, ok && ((r.found || r.missing) && now.Sub(r.checked) < noStreamFresh ||
			!r.failed.IsZero() && now.Sub(r.failed) < noStreamFresh)
	}
	r, ok := fresh()
	if !ok {
		select {
		case p.lookup <- struct{}{}:
		default:
			// Another lookup runs: do not queue behind it.
			return err
		}
		if r, ok = fresh(); !ok {
			r = p.route(ctx, subject)
		}
		<-p.lookup
	}
	if !r.missing {
		return err
	}
	return &noStreamError{subject: subject, err: err}
}

// noStreamError is a publish to a subject that no stream captures.
type noStreamError struct {
	subject string
	err     error // the publish's own error (no responders)
}

func (e *noStreamError) Error() string {
	return fmt.Sprintf("no stream captures subject %q: %v", e.subject, e.err)
}

// Unwrap returns jetstream.ErrStreamNotFound and the publish's error.
func (e *noStreamError) Unwrap() []error { return []error{jetstream.ErrStreamNotFound, e.err} }

// ttlAllowed reports whether stream takes Nats-TTL headers.
func (p *NATSProducer) ttlAllowed(ctx context.Context, stream string) bool {
	switch p.c.cfg.NATS.MessageTTL {
	case TTLNever:
		return false
	case TTLAlways:
		return true
	}
	p.mu.RLock()
	ti, ok := p.ttls[stream]
	p.mu.RUnlock()
	if ok && ti.known {
		return ti.allowed
	}
	now := p.c.clock.Now()
	if ok && now.Sub(ti.checked) < 10*time.Second {
		return ti.allowed
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ti = ttlInfo{checked: now}
	if s, err := p.js.Stream(lctx, stream); err == nil {
		ti.allowed, ti.known = s.CachedInfo().Config.AllowMsgTTL, true
	}
	p.mu.Lock()
	if len(p.ttls) >= routeCacheMax {
		p.ttls = map[string]ttlInfo{}
	}
	p.ttls[stream] = ti
	p.mu.Unlock()
	return ti.allowed
}

// ttlRefused handles a stream that refused Nats-TTL (its config changed
// since it was cached): it drops the header, remembers, and reports true
// so the message is sent again at once, outside the retry budget (this is
// the SDK's mistake, not the broker's pushback).
func (p *NATSProducer) ttlRefused(err error, m *nats.Msg, stream string) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != jsErrMsgTTLDisabled || m.Header.Get(jetstream.MsgTTLHeader) == "" {
		return false
	}
	m.Header.Del(jetstream.MsgTTLHeader)
	p.mu.Lock()
	p.ttls[stream] = ttlInfo{allowed: false, known: true, checked: p.c.clock.Now()}
	p.mu.Unlock()
	return true
}

// stamp sets the lagbridge headers (and Nats-TTL) on m. As on Kafka, the
// criticality header is left out for CRITICAL unless m already has one
// (the format reads a missing header as CRITICAL): a default message
// without a deadline keeps a nil header and goes out as a plain PUB.
func (p *NATSProducer) stamp(ctx context.Context, m *nats.Msg, ms *msg, stream string) {
	if m.Header == nil {
		if !ms.hasDL && ms.crit == ttl.Critical {
			return
		}
		m.Header = nats.Header{}
	}
	if ms.hasDL {
		m.Header.Set(ttl.HeaderDeadline, ttl.FormatDeadline(p.c.deadline(ms)))
		if m.Header.Get(jetstream.MsgTTLHeader) == "" && p.ttlAllowed(ctx, stream) {
			m.Header.Set(jetstream.MsgTTLHeader, ttl.NATSTTL(time.Duration(ms.dl-p.c.mono.nanos())))
		}
	} else {
		m.Header.Del(ttl.HeaderDeadline)
	}
	if ms.crit != ttl.Critical || m.Header.Get(ttl.HeaderCriticality) != "" {
		m.Header.Set(ttl.HeaderCriticality, ms.crit.String())
	}
}

// readNATSMeta reads the lagbridge headers already on a message; a
// malformed value counts as absent.
func readNATSMeta(h nats.Header) (m ttl.Meta, hasCrit bool) {
	if h == nil {
		return m, false
	}
	if v := h.Get(ttl.HeaderDeadline); v != "" {
		if d, err := ttl.ParseDeadline(v); err == nil {
			m.Deadline = d
		}
	}
	if v := h.Get(ttl.HeaderCriticality); v != "" {
		if c, err := ttl.ParseCriticality(v); err == nil {
			m.Criticality, hasCrit = c, true
		}
	}
	return m, hasCrit
}

// JetStream error codes the SDK branches on (nats-server's
// jetstream_errors_generated.go).
const (
	jsErrStreamStoreFailed  = 10077 // "maximum messages exceeded", "maximum bytes exceeded", ...
	jsErrAccountResources   = 10002 // 400 "resource limits exceeded for account": the account's store is full
	jsErrMsgTTLInvalid      = 10165
	jsErrMsgTTLDisabled     = 10166
	jsErrWrongLastSequence  = 10071
	jsErrWrongLastSequence2 = 10164
)

// classifyNATS maps a publish failure to a signal and whether a retry may
// help. A refusal of the message itself (too large, a wrong expected
// sequence, no such stream, any other 4xx) is the request's own fault
// (ownFault): it counts toward neither the adaptive throttle nor the retry
// budget, and so is a publish to a subject no stream captures (a
// *noStreamError, from noStreamErr's look at the stream list; a
// slow-down, since a mapped or imported subject's stream without a leader
// reads the same). "No stream
// answered" otherwise (a stream without a leader, or a failed lookup)
// still counts, as unavailability.
func classifyNATS(err error, m *nats.Msg) errClass {
	var ns *noStreamError
	if errors.As(err, &ns) {
		// A misspelt subject, or a stream not created yet: not overload,
		// not retried, except once the first time the producer hears it
		// for the subject (firstRetry: a stream created a moment ago,
		// whose interest has not reached the client's server, or that the
		// cached verdict predates). A slow-down, not a stop as Kafka's
		// missing topic: the stream list holds only the streams' own
		// subjects, so a subject an account mapping, an import or another
		// domain leads to a stream without a leader reads the same
		// (review-sdkerr: a three-server cluster with a mapping), and
		// that stream's messages are not to be dropped for good.
		return errClass{signal: SignalSlowDown, ownFault: true, firstRetry: true, why: "JetStream's stream list has no stream for the subject"}
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case jsErrStreamStoreFailed, jsErrAccountResources:
			return errClass{signal: SignalSlowDown, retriable: true, why: "the stream refused the message: " + api.Description}
		case jetstream.JSErrCodeStreamMessageExceedsMaximum, jetstream.JSErrCodeStreamNotFound,
			jsErrWrongLastSequence, jsErrWrongLastSequence2, jsErrMsgTTLInvalid, jsErrMsgTTLDisabled:
			return errClass{signal: SignalStop, ownFault: true, why: "the stream refused the message for good: " + api.Description}
		}
		if api.Code >= 500 || api.Code == 429 {
			return errClass{signal: SignalSlowDown, retriable: true, why: "JetStream is unavailable: " + api.Description}
		}
		// A 4xx: the request's own (as classifyKafka's ownFault).
		return errClass{signal: SignalStop, ownFault: true, why: "JetStream refused the message: " + api.Description}
	}
	switch {
	case isNoStream(err):
		return errClass{signal: SignalSlowDown, retriable: true, why: "no stream answered (it has no leader, or the stream list could not be read)"}
	case errors.Is(err, nats.ErrMaxPayload):
		return errClass{signal: SignalStop, ownFault: true, why: "the message exceeds the server's max payload"}
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return errClass{signal: SignalStop, why: "the NATS connection is closed"}
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, errNoAck):
		if m != nil && m.Header.Get(jetstream.MsgIDHeader) != "" {
			return errClass{signal: SignalSlowDown, retriable: true, why: "no ack in time (retried: Nats-Msg-Id deduplicates)"}
		}
		return errClass{signal: SignalSlowDown, why: "no ack in time; not retried, since without a Nats-Msg-Id a retry could store the message twice"}
	}
	return errClass{signal: SignalSlowDown, retriable: true, why: "publish failed"}
}
