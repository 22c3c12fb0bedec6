package producerclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/ttl"
)

// KafkaClientOpts returns the franz-go options a client wrapped by
// NewKafka must be built with; append them after your own:
//
//	cl, err := kgo.NewClient(append(myOpts, producerclient.KafkaClientOpts(nil)...)...)
//
// They are:
//
//   - kgo.RecordRetries(0): franz-go tries a record once and hands a
//     failure back to the SDK, which is the one retry layer (budgeted,
//     throttled, deadline-aware). franz-go still re-sends on its own when
//     it cannot know whether a request was applied (a timeout on an
//     idempotent producer), which keeps ordering and exactly-once intact.
//     A topic whose metadata fails to load (it does not exist yet, or has
//     no leader) also fails its records at the first failed load rather
//     than after franz-go's own retries; the SDK retries them.
//   - kgo.RecordPartitioner(NewAvoidPartitioner(base)): base (nil means
//     franz-go's default partitioner) wrapped so that keyless records skip
//     the partitions a lease says to avoid.
//
// Metadata and other requests keep franz-go's defaults; they are not
// produce traffic.
func KafkaClientOpts(base kgo.Partitioner) []kgo.Opt {
	return []kgo.Opt{kgo.RecordRetries(0), kgo.RecordPartitioner(NewAvoidPartitioner(base))}
}

// KafkaProducer produces Kafka records through a *kgo.Client under
// lagbridge quotas. It is safe for concurrent use. Create it with NewKafka.
type KafkaProducer struct {
	c            *core
	cl           *kgo.Client
	part         *AvoidPartitioner // nil when the client's partitioner is not ours
	defaultTopic string
	promiseFn    func(*kgo.Record, error)
}

// NewKafka wraps cl. It checks that cl was built with KafkaClientOpts: a
// client that retries records on its own (franz-go's default is to retry
// forever) would multiply the SDK's retries, so such a client is refused
// with ErrInvalidOption. A client with another partitioner is accepted,
// but then avoid-partitions leases cannot be honoured (a warning is
// logged once).
//
// NewKafka starts the lease goroutines of cfg.Leases (none when no source
// is configured). The caller keeps ownership of cl and closes it after
// the producer's Close.
func NewKafka(cl *kgo.Client, cfg Config) (*KafkaProducer, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: nil *kgo.Client", ErrInvalidOption)
	}
	if n, ok := cl.OptValue(kgo.RecordRetries).(int64); !ok || n > 0 {
		return nil, fmt.Errorf("%w: the client retries records %v times on its own; build it with producerclient.KafkaClientOpts (kgo.RecordRetries(0)) so the SDK is the only retry layer", ErrInvalidOption, cl.OptValue(kgo.RecordRetries))
	}
	c, err := newCore(cfg)
	if err != nil {
		return nil, err
	}
	p := &KafkaProducer{c: c, cl: cl}
	p.promiseFn = p.promise
	if t, ok := cl.OptValue(kgo.DefaultProduceTopic).(string); ok {
		p.defaultTopic = t
	}
	if ap, ok := cl.OptValue(kgo.RecordPartitioner).(*AvoidPartitioner); ok {
		if !ap.attach(c, cl) {
			c.close()
			return nil, fmt.Errorf("%w: the client's AvoidPartitioner already serves another producer; build one client per producer", ErrInvalidOption)
		}
		p.part = ap
	} else {
		c.cfg.Logger.Warn("lagbridge: the Kafka client's partitioner is not producerclient's AvoidPartitioner; avoid-partitions leases will not be honoured")
	}
	if err := c.start(nil); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// kpending is one Kafka record in flight: 80 bytes (a size class), the
// SDK's only allocation for a record without a deadline. It is the record's Context
// while franz-go holds the record (so the single promise function finds it
// without a closure per record), and it behaves as the context franz-go
// would have used (the record's own, else the call's), so cancellation
// works unchanged. It is never reused: franz-go may still read a record's
// Context after its promise ran.
type kpending struct {
	m       msg
	userCtx context.Context // the record's own Context, restored before the callback
	done    func(*kgo.Record, error)
}

func (kp *kpending) rc() context.Context {
	if kp.userCtx != nil {
		return kp.userCtx
	}
	return kp.m.ctx
}

// Deadline, Done, Err and Value make kpending a context.Context.
func (kp *kpending) Deadline() (time.Time, bool) { return kp.rc().Deadline() }
func (kp *kpending) Done() <-chan struct{}       { return kp.rc().Done() }
func (kp *kpending) Err() error                  { return kp.rc().Err() }
func (kp *kpending) Value(key any) any           { return kp.rc().Value(key) }

// Produce sends r and waits for the outcome: nil once the broker
// acknowledged it, else a *RejectError holding r (or an error wrapping
// ErrInvalidOption for a nil record or no topic). Retries happen inside,
// on the calling goroutine, within the retry budget, the context's
// deadline and the lease's signal.
//
// A record with a key that sends it to a partition the lease says to
// avoid is refused at once, unsent and without taking a token:
// SignalAvoidPartitions with a *PartitionBusyError naming the partition
// (the topic's other partitions are not slowed down). When the lease
// gives that partition a share (Quota.PartitionShares), a record bound
// for it goes anyway with probability share x partitions, so that it
// gets about what its consumer drains. Keyless records are
// placed on another partition instead (see AvoidPartitioner). The same
// holds for ProduceAsync and the batch calls.
//
// Each attempt goes out at once, as with franz-go's own ProduceSync: the
// partition the record lands on stops lingering (kgo.ProducerLinger, 10ms
// by default) instead of waiting for more records, since the caller is
// waiting for this one. Records of concurrent ProduceAsync calls to other
// partitions keep lingering. The first records to a topic whose partitions
// the client has not loaded yet may linger once (kgo.ProduceSync has the
// same limit). Headers, admission and accounting are those of
// ProduceAsync.
func (p *KafkaProducer) Produce(ctx context.Context, r *kgo.Record, opts ...CallOption) error {
	if ctx == nil {
		ctx = context.Background()
	}
	name, err := p.recordTopic(r)
	if err != nil {
		return err
	}
	t := p.c.topic(name)
	if rej := p.busyPartition(t, r); rej != nil {
		return rej
	}
	meta, hasCrit, _ := readKafkaMeta(r.Headers)
	var m msg
	p.c.prepare(ctx, &m, t, opts, meta, hasCrit)
	now := p.now(r)
	if rej := p.c.admit(&m, now); rej != nil {
		rej.Record = r
		return rej
	}
	stampKafka(r, p.c.deadline(&m), m.crit)
	own := r.Context
	for first := true; ; first = false {
		if !first {
			now = p.c.mono.nanos()
		}
		if rej := p.c.beforeSend(&m, now); rej != nil {
			return p.failSync(&m, r, rej)
		}
		// ProduceSync flushes the record's partition at once; franz-go
		// sets a record without a Context to ctx, so it is put back for
		// the next attempt and the caller.
		err := p.cl.ProduceSync(ctx, r).FirstErr()
		r.Context = own
		if err == nil {
			p.c.succeeded(&m)
			p.c.finish(&m)
			return nil
		}
		delay, rej := p.c.failed(&m, err, classifyKafka(err), own)
		if rej != nil {
			return p.failSync(&m, r, rej)
		}
		if rej := p.c.waitRetry(&m, delay, err); rej != nil {
			return p.failSync(&m, r, rej)
		}
	}
}

// failSync ends a synchronous call with rej: r is handed back and its
// slot, if it holds one, goes back.
func (p *KafkaProducer) failSync(m *msg, r *kgo.Record, rej *RejectError) error {
	rej.Record = r
	p.c.finish(m)
	return rej
}

// recordTopic checks r and returns its topic: the record's, or the
// client's default produce topic.
func (p *KafkaProducer) recordTopic(r *kgo.Record) (string, error) {
	if r == nil {
		return "", fmt.Errorf("%w: nil record", ErrInvalidOption)
	}
	name := p.topicOf(r)
	if name == "" {
		return "", fmt.Errorf("%w: record has no topic and the client has no default produce topic", ErrInvalidOption)
	}
	return name, nil
}

// ProduceAsync sends r and calls done exactly once with r and the outcome
// (nil, or a *RejectError holding r). done may run before ProduceAsync
// returns (for a local rejection) or on a franz-go goroutine: it must not
// block. In Block mode ProduceAsync itself waits for quota, up to the
// context's deadline.
//
// It also returns a refusal at call time: when the SDK refused r before
// handing it to franz-go (Drop's ErrRateLimited or ErrInFlightLimit, a
// stop lease, ErrQuotaUnavailable, ErrThrottled, ErrExpired, ErrClosed, a
// failed Block wait, a keyed record bound for an avoided partition
// (PartitionBusyError), or an invalid record), it returns the very error
// done received, after done returned; the rejection is counted once. nil
// means r was handed to franz-go and its outcome comes through done only.
// The return value is for callers that branch at once (shed the request,
// answer 429) without a round trip through the callback; ignoring it is
// fine.
//
// A nil done is allowed but then failures cannot be handed back: each is
// logged at Warn and counted in lagbridge_client_unhandled_failures_total.
//
// The record gets the lagbridge-deadline and lagbridge-criticality headers
// (see the ttl package), the latter only when the criticality is not
// CRITICAL: the format reads a record without it as CRITICAL, so default
// traffic without a deadline carries no header bytes. A deadline header
// already on the record is kept when it is earlier than the context's
// deadline; a criticality header already on it is kept unless
// WithCriticality is given (and is then overwritten, CRITICAL included). A
// record without headers and without a deadline may get a header slice
// shared between records (capped, so an append copies it): do not modify
// header values in place.
func (p *KafkaProducer) ProduceAsync(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error), opts ...CallOption) error {
	if ctx == nil {
		ctx = context.Background()
	}
	name, err := p.recordTopic(r)
	if err != nil {
		p.unhandled(r, done, err)
		return err
	}
	t := p.c.topic(name)
	if rej := p.busyPartition(t, r); rej != nil {
		p.unhandled(r, done, rej)
		return rej
	}
	meta, hasCrit, _ := readKafkaMeta(r.Headers)
	kp := new(kpending)
	p.c.prepare(ctx, &kp.m, t, opts, meta, hasCrit)
	kp.done = done
	now := p.now(r)
	if rej := p.c.admit(&kp.m, now); rej != nil {
		p.finishReject(kp, r, rej)
		return rej
	}
	stampKafka(r, p.c.deadline(&kp.m), kp.m.crit)
	kp.userCtx = r.Context
	if rej := p.send(kp, r, now); rej != nil {
		return rej
	}
	return nil
}

// busyPartition refuses r, a record of t, when it has a key that sends it
// to a partition t's lease says to avoid (see PartitionBusyError): the
// rejection holds r and is counted; nil otherwise. It costs an atomic load
// for a record without a key or a topic without an avoid list.
func (p *KafkaProducer) busyPartition(t *topic, r *kgo.Record) *RejectError {
	part, v, ok := p.avoidedBy(t, r)
	if !ok || p.letThrough(t, v, part) {
		return nil
	}
	rej := reject(t.name, SignalAvoidPartitions, nil, fmt.Sprintf("the record's key sends it to partition %d, which the lease says to avoid (%s)", part, v.reason),
		v.retryAfter, &PartitionBusyError{Topic: t.name, Partition: part})
	rej.Record = r
	if v.rule == "avoid-partitions" {
		// The lease's rule is the one behind its rate and signal; the
		// partitions to avoid may come from another consumer group's
		// decision, so only this rule explains a partition's refusal.
		rej.Rule = v.rule
	}
	t.refused.Add(1)
	return p.c.rejectCount(t, reasonPartition, rej)
}

// letThrough draws whether a keyed record bound for part, a partition v
// says to avoid, goes anyway: with probability share·n when v gives part a
// keyless share (see AvoidPartitioner) over a topic of n partitions, so
// that of records spread by their keys the partition gets about what its
// keyless share would send it, what its consumer drains.
func (p *KafkaProducer) letThrough(t *topic, v *quotaView, part int32) bool {
	share := 0.0
	for _, s := range v.shares {
		if s.Partition == part {
			share = s.Share
		}
	}
	if share <= 0 {
		return false
	}
	n := p.part.partitionCount(t.name)
	return n > 0 && rand.Float64() < share*float64(n)
}

// avoidedBy returns the partition r's key sends it to and the lease of t
// that says to avoid it; ok is false when r is not refused for its
// partition (no key, no avoid list, an advisory lease, a partition not
// listed or not known, or a client whose partitioner is not ours).
func (p *KafkaProducer) avoidedBy(t *topic, r *kgo.Record) (part int32, v *quotaView, ok bool) {
	if p.part == nil || r == nil || r.Key == nil {
		return -1, nil, false
	}
	v = t.view.Load()
	if len(v.avoid) == 0 || v.advisory {
		return -1, nil, false
	}
	part, ok = p.part.keyedPartition(t.name, r)
	return part, v, ok && contains(v.avoid, int(part))
}

// now reads the clock once for a record. With the system clock and no
// timestamp on the record, the reading also becomes the record's
// timestamp, which franz-go would otherwise read the clock for.
func (p *KafkaProducer) now(r *kgo.Record) int64 {
	if p.c.mono.system && r.Timestamp.IsZero() {
		ts := time.Now()
		r.Timestamp = ts
		return p.c.mono.of(ts)
	}
	return p.c.mono.nanos()
}

// send makes one attempt of kp's record; it returns the rejection it
// handed to done when the adaptive throttle refused the attempt, else nil
// (the record is franz-go's).
func (p *KafkaProducer) send(kp *kpending, r *kgo.Record, now int64) *RejectError {
	if rej := p.c.beforeSend(&kp.m, now); rej != nil {
		p.finishReject(kp, r, rej)
		return rej
	}
	r.Context = kp
	p.cl.Produce(kp.m.ctx, r, p.promiseFn)
	return nil
}

// promise is the one franz-go promise of the producer.
func (p *KafkaProducer) promise(r *kgo.Record, err error) {
	switch x := r.Context.(type) {
	case *kbatch:
		r.Context = nil
		p.batchPromise(x, nil, r, err)
		return
	case *kbrec:
		r.Context = x.Context
		p.batchPromise(x.b, x.Context, r, err)
		return
	}
	kp, ok := r.Context.(*kpending)
	if !ok {
		return // not ours (cannot happen: only send passes this promise)
	}
	r.Context = kp.userCtx
	if err == nil {
		p.c.succeeded(&kp.m)
		if kp.done != nil {
			kp.done(r, nil)
		}
		p.c.finish(&kp.m)
		return
	}
	p.failedAttempt(kp, r, err)
}

// failedAttempt follows a failed attempt of kp's record: a retry on an
// owned goroutine, or the final rejection.
func (p *KafkaProducer) failedAttempt(kp *kpending, r *kgo.Record, err error) {
	delay, rej := p.c.failed(&kp.m, err, classifyKafka(err), kp.userCtx)
	if rej != nil {
		p.finishReject(kp, r, rej)
		return
	}
	if !p.c.spawn(func() {
		if rej := p.c.waitRetry(&kp.m, delay, err); rej != nil {
			p.finishReject(kp, r, rej)
			return
		}
		p.send(kp, r, p.c.mono.nanos())
	}) {
		p.finishReject(kp, r, p.c.closedReject(kp.m.t, kp.m.attempts, err))
	}
}

func (p *KafkaProducer) finishReject(kp *kpending, r *kgo.Record, rej *RejectError) {
	rej.Record = r
	if r.Context == kp {
		r.Context = kp.userCtx
	}
	if kp.done != nil {
		kp.done(r, rej)
	} else {
		p.c.unhandledFailure(rej)
	}
	// The slot, if the record holds one (admitted), goes back.
	p.c.finish(&kp.m)
}

func (p *KafkaProducer) unhandled(r *kgo.Record, done func(*kgo.Record, error), err error) {
	if done != nil {
		done(r, err)
		return
	}
	p.c.unhandledFailure(err)
}

// Flush waits until every record produced so far is finally acknowledged
// or failed (retries included), or ctx ends.
func (p *KafkaProducer) Flush(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return err
	}
	return p.c.flush(ctx)
}

// Close stops the lease goroutines and ends pending retries (their records
// fail with ErrClosed); later produce calls fail with ErrClosed. It does
// not close the *kgo.Client: records the client already holds still reach
// their callbacks. Close is idempotent, waits for every goroutine the
// producer started, and always returns nil.
func (p *KafkaProducer) Close() error {
	p.c.close()
	if p.part != nil {
		p.part.detach(p.c)
	}
	return nil
}

// Client returns the wrapped client (for consuming, admin requests, or
// producing without quota).
func (p *KafkaProducer) Client() *kgo.Client { return p.cl }

// Quota returns the quota the producer currently enforces on topic; false
// for a topic it has not seen.
func (p *KafkaProducer) Quota(topic string) (Quota, bool) { return p.c.quota(topic) }

// Stats returns the producer's counters.
func (p *KafkaProducer) Stats() Stats { return p.c.stats() }

// classifyKafka maps a franz-go failure to a signal and whether a retry
// may help, and which failures are the request's own (ownFault): a wrong
// request or a missing topic says nothing about the broker's load, so it
// counts toward neither the adaptive throttle nor the retry budget, which
// shed load when the broker rejects for overload or is unavailable.
func classifyKafka(err error) errClass {
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		return errClass{signal: SignalStop, why: "the Kafka client is closed"}
	case errors.Is(err, kgo.ErrMaxBuffered):
		return errClass{signal: SignalSlowDown, retriable: true, why: "the Kafka client's buffer is full"}
	case errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries):
		return errClass{signal: SignalSlowDown, retriable: true, why: "the broker did not take the record in time"}
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch:
			// The leader moved, or the partition is not led yet (Kafka
			// 4.3.1 answered NOT_LEADER_FOR_PARTITION to half the
			// produces right after CreateTopics of 8 partitions, for up
			// to 3 attempts): the retry, after franz-go's metadata load,
			// finds the leader. Not the downstream's overload: kept out
			// of the adaptive throttle (leaderMoved).
			return errClass{signal: SignalAvoidPartitions, retriable: true, leaderMoved: true, why: "the partition is unavailable: " + ke.Message}
		case kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.KafkaStorageError,
			kerr.ReplicaNotAvailable, kerr.PreferredLeaderNotAvailable:
			return errClass{signal: SignalAvoidPartitions, retriable: true, why: "the partition is unavailable: " + ke.Message}
		case kerr.ThrottlingQuotaExceeded:
			return errClass{signal: SignalSlowDown, retriable: true, why: "the broker's quota is exceeded"}
		case kerr.UnknownTopicOrPartition, kerr.UnknownTopicID:
			// A misspelt or deleted topic: not retried. A retry would
			// wait for franz-go's next metadata load of the topic (up
			// to its MetadataMinAge, 5 s: 15 s a call over 3 attempts
			// on Kafka 4.3.1) to hear the same, and a deleted topic's id
			// stays unknown to the client. A topic created a moment ago
			// (Kafka 4.3.1 under load listed one 111-116 ms after
			// CreateTopics returned: 30 of 120 calls) is retried once, the first time the producer hears it
			// for the topic (firstRetry): a typo pays one metadata load.
			return errClass{signal: SignalStop, ownFault: true, firstRetry: true, why: "the topic does not exist: " + ke.Message}
		case kerr.UnknownServerError:
			// The broker failed on its own: not the request's fault.
			return errClass{signal: SignalStop, why: "the broker refused the record for good: " + ke.Message}
		}
		if ke.Retriable {
			return errClass{signal: SignalSlowDown, retriable: true, why: "the broker refused the record for now: " + ke.Message}
		}
		// Too large, not authorized, an invalid record or topic name, a
		// policy: the request's own.
		return errClass{signal: SignalStop, ownFault: true, why: "the broker refused the record for good: " + ke.Message}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errClass{signal: SignalSlowDown, retriable: true, why: "network error"}
	}
	return errClass{signal: SignalSlowDown, retriable: true, why: "produce failed"}
}

// errClass is what a broker failure means for the retry decision.
type errClass struct {
	signal     Signal
	retriable  bool
	why        string
	retryAfter time.Duration // a broker-given minimum delay; 0: none
	// ownFault: the failure is the request's own (a wrong request, a
	// missing topic), not the broker's load: it counts toward neither the
	// adaptive throttle nor the retry budget.
	ownFault bool
	// firstRetry: not retriable, except once per topic, the first time
	// (a topic created a moment ago that the broker's metadata does not
	// list yet).
	firstRetry bool
	// leaderMoved: the partition's leader moved or is not elected yet,
	// which says nothing about the downstream's load: it does not count
	// toward the adaptive throttle. It is retried (another partition may
	// do: avoid-partitions) and counts toward the retry budget, which
	// bounds the retries of a partition that stays without a leader.
	leaderMoved bool
}

// Headers.

var critValues = func() [4][]byte {
	var v [4][]byte
	for c := range v {
		v[c] = []byte(ttl.Criticality(c).String())
	}
	return v
}()

// readKafkaMeta reads the lagbridge headers already on a record. A
// malformed value is ignored (no deadline, no criticality).
func readKafkaMeta(hs []kgo.RecordHeader) (m ttl.Meta, hasCrit bool, bad int) {
	for i := range hs {
		switch hs[i].Key {
		case ttl.HeaderDeadline:
			if d, err := ttl.ParseDeadline(string(hs[i].Value)); err == nil {
				m.Deadline = d
			} else {
				bad++
			}
		case ttl.HeaderCriticality:
			if c, err := ttl.ParseCriticality(string(hs[i].Value)); err == nil && len(hs[i].Value) > 0 {
				m.Criticality, hasCrit = c, true
			} else {
				bad++
			}
		}
	}
	return m, hasCrit, bad
}

// hdrBlock is the storage of the lagbridge headers of a record that had
// none: one allocation.
type hdrBlock struct {
	h [2]kgo.RecordHeader
	b [20]byte
}

// critOnly are the shared header slices of records without headers and
// without a deadline (length and capacity 1: an append copies). Critical
// has none in use: the default is written by leaving the header out.
var critOnly = func() [4][]kgo.RecordHeader {
	var v [4][]kgo.RecordHeader
	for c := range v {
		v[c] = []kgo.RecordHeader{{Key: ttl.HeaderCriticality, Value: critValues[c]}}
	}
	return v
}()

// sharedHeaders reports whether hs is one of the critOnly slices (a record
// produced through the SDK before): it must be replaced, never written.
func sharedHeaders(hs []kgo.RecordHeader) bool {
	if len(hs) != 1 || cap(hs) != 1 {
		return false
	}
	for c := range critOnly {
		if &hs[0] == &critOnly[c][0] {
			return true
		}
	}
	return false
}

// stampBlock gives r, a record without headers of its own, the lagbridge
// headers stored in blk: the deadline, and the criticality unless it is
// the default (see stampKafka).
func stampBlock(r *kgo.Record, blk *hdrBlock, deadline time.Time, crit ttl.Criticality) {
	blk.h[0] = kgo.RecordHeader{Key: ttl.HeaderDeadline, Value: ttl.AppendDeadline(blk.b[:0], deadline)}
	if crit == ttl.Critical {
		r.Headers = blk.h[:1:1]
		return
	}
	blk.h[1] = kgo.RecordHeader{Key: ttl.HeaderCriticality, Value: critValues[crit&3]}
	r.Headers = blk.h[:2:2]
}

// stampKafka sets (or replaces) the lagbridge headers of r. The ttl
// format reads a record without lagbridge-criticality as CRITICAL, so
// that header is written only for the other criticalities, or over a
// criticality header the record already has; a record of the default
// criticality without a deadline gets no header at all (and costs the
// broker and consumers no header bytes). A record without headers costs
// at most one allocation (none without a deadline).
func stampKafka(r *kgo.Record, deadline time.Time, crit ttl.Criticality) {
	cv := critValues[crit&3]
	if len(r.Headers) == 0 || sharedHeaders(r.Headers) {
		switch {
		case !deadline.IsZero():
			stampBlock(r, new(hdrBlock), deadline, crit)
		case crit == ttl.Critical:
			r.Headers = nil
		default:
			r.Headers = critOnly[crit&3][:1:1]
		}
		return
	}
	var dv []byte
	if !deadline.IsZero() {
		dv = ttl.AppendDeadline(make([]byte, 0, 20), deadline)
	}
	di, ci := -1, -1
	for i := range r.Headers {
		switch r.Headers[i].Key {
		case ttl.HeaderDeadline:
			di = i
		case ttl.HeaderCriticality:
			ci = i
		}
	}
	if dv != nil {
		if di >= 0 {
			r.Headers[di].Value = dv
		} else {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: ttl.HeaderDeadline, Value: dv})
		}
	} else if di >= 0 {
		// A malformed deadline header is dropped rather than passed on.
		r.Headers = append(r.Headers[:di], r.Headers[di+1:]...)
		if ci > di {
			ci--
		}
	}
	switch {
	case ci >= 0:
		r.Headers[ci].Value = cv
	case crit != ttl.Critical:
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: ttl.HeaderCriticality, Value: cv})
	}
}

// isAvoided reports whether busyPartition might refuse r (without
// counting it, and without its draw for a partition with a share: such a
// record starts a run of its own, and busyPartition draws once for it).
func (p *KafkaProducer) isAvoided(t *topic, r *kgo.Record) bool {
	_, _, ok := p.avoidedBy(t, r)
	return ok
}
