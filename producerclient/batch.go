package producerclient

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/ttl"
)

// ProduceBatch sends rs and waits for every outcome, like franz-go's
// ProduceSync: it returns one result per record (nil records and records
// without a topic included), in the order the outcomes arrived, not the
// order of rs. A record's Err is nil once the broker acknowledged it, else
// a *RejectError holding the record (or an error wrapping ErrInvalidOption
// for a nil record or no topic). See ProduceBatchAsync for the semantics.
// Use results.FirstErr() when any failure fails the whole call.
func (p *KafkaProducer) ProduceBatch(ctx context.Context, rs []*kgo.Record, opts ...CallOption) kgo.ProduceResults {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		res = make(kgo.ProduceResults, 0, len(rs))
	)
	wg.Add(len(rs))
	p.produceBatch(ctx, rs, func(r *kgo.Record, err error) {
		mu.Lock()
		res = append(res, kgo.ProduceResult{Record: r, Err: err})
		mu.Unlock()
		wg.Done()
	}, opts, true)
	wg.Wait()
	return res
}

// ProduceBatchAsync sends every record of rs, in order, and calls done
// exactly once per record with the record and its outcome: the same
// semantics as calling ProduceAsync for each record in turn with the same
// context, callback and options (headers stamped, Block or Drop, lease
// signals, retries under the budget, nothing lost quietly), at a fraction
// of the SDK's per-record cost. An empty rs does nothing; a nil record in
// it gets done(nil, err) with err wrapping ErrInvalidOption, and so does a
// record without a topic when the client has no default one. The same
// rules apply to done as for ProduceAsync: it may run before
// ProduceBatchAsync returns or on a franz-go goroutine, must not block, and
// may be nil (failures are then logged and counted as unhandled).
// ProduceBatchAsync does not keep rs (the slice) after it returns; the
// records are franz-go's until their callbacks. It returns how many
// records it refused at call time (their done already ran, each with its
// *RejectError, counted once): 0 means every record was handed to
// franz-go.
//
// The bookkeeping is done per run of consecutive records with the same
// topic and the same lagbridge headers (most batches are one run): one
// clock reading for the whole call (it is also the Timestamp of every
// record without one), one allocation per run (and one more for the
// records that carry their own Context, and one for the deadline headers
// when the run has a deadline), tokens and in-flight slots taken for the
// run in one operation each, counters, retry-budget deposits and the
// acknowledgement accounting added once per run. Sorting a mixed batch by
// topic makes fewer, longer runs.
//
// Admission is exact, as for single records: a run takes as many tokens
// as the bucket holds, up to its length, and never more than
// rate*t+burst over any interval t. When the bucket or the in-flight cap
// admits only a prefix of a run, in Drop mode the rest of the run is
// rejected at once (ErrRateLimited or ErrInFlightLimit, each record in
// its own *RejectError, with the time until a token is due); in Block
// mode the prefix is sent and the next record waits for its token or
// slot, up to the context's deadline or Config.MaxBlock, as in
// ProduceAsync, then the rest is admitted again at once as far as it
// fits. A batch larger than the burst therefore goes out in chunks at
// the quota's rate. A rejection that holds for every record (the
// producer is closed, the context is done, the deadline passed, the lease
// says stop, the quota is unavailable, or a Block wait failed) rejects
// the rest of the run.
//
// A run's in-flight slots are given back when its last record is finally
// done (a record that fails and is retried keeps its own slot until it is
// done), so Stats' in-flight and acknowledgement counts move per run, and
// a run counts against Config.MaxInFlight until its last acknowledgement.
func (p *KafkaProducer) ProduceBatchAsync(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error), opts ...CallOption) (refused int) {
	return p.produceBatch(ctx, rs, done, opts, false)
}

// produceBatch is ProduceBatchAsync; with sync, each run's first attempts
// go out at once and the call returns after their outcomes (see sendRun).
func (p *KafkaProducer) produceBatch(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error), opts []CallOption, sync bool) (refused int) {
	if ctx == nil {
		ctx = context.Background()
	}
	var clk reading
	for i := 0; i < len(rs); {
		r := rs[i]
		name, err := p.recordTopic(r)
		if err != nil {
			p.unhandled(r, done, err)
			refused++
			i++
			continue
		}
		t := p.c.topic(name)
		if rej := p.busyPartition(t, r); rej != nil {
			p.unhandled(r, done, rej)
			refused++
			i++
			continue
		}
		meta, hasCrit, _ := readKafkaMeta(r.Headers)
		j := i + 1
		for j < len(rs) && p.sameRun(rs[j], name, meta, hasCrit) && !p.isAvoided(t, rs[j]) {
			j++
		}
		if !clk.read {
			clk = p.read()
		}
		var n int
		clk, n = p.produceRun(ctx, rs[i:j], t, meta, hasCrit, done, opts, clk, sync)
		refused += n
		i = j
	}
	return refused
}

func (p *KafkaProducer) topicOf(r *kgo.Record) string {
	if r.Topic != "" {
		return r.Topic
	}
	return p.defaultTopic
}

// sameRun reports whether r can share a run with topic name and headers
// that say meta and hasCrit.
func (p *KafkaProducer) sameRun(r *kgo.Record, name string, meta ttl.Meta, hasCrit bool) bool {
	if r == nil || p.topicOf(r) != name {
		return false
	}
	if len(r.Headers) == 0 {
		return !hasCrit && !meta.HasDeadline()
	}
	m, hc, _ := readKafkaMeta(r.Headers)
	return hc == hasCrit && m.Criticality == meta.Criticality && m.Deadline.Equal(meta.Deadline)
}

// reading is one clock reading of a batch: now in monotonic nanoseconds,
// and for the system clock the wall time it came from, which becomes the
// Timestamp of records without one (franz-go would read the clock again
// for each).
type reading struct {
	now  int64
	ts   time.Time
	read bool
}

func (p *KafkaProducer) read() reading {
	if p.c.mono.system {
		ts := time.Now()
		return reading{now: p.c.mono.of(ts), ts: ts, read: true}
	}
	return reading{now: p.c.mono.nanos(), read: true}
}

// produceRun admits and sends rs, records of topic t whose headers say
// meta and hasCrit, and returns the clock reading to go on with (a new one
// after a wait), and how many records it refused before handing them to
// franz-go. sync is sendRun's.
func (p *KafkaProducer) produceRun(ctx context.Context, rs []*kgo.Record, t *topic, meta ttl.Meta, hasCrit bool, done func(*kgo.Record, error), opts []CallOption, clk reading, sync bool) (_ reading, refused int) {
	c := p.c
	var m msg
	c.prepare(ctx, &m, t, opts, meta, hasCrit)
	c.limits(&m, clk.now)
	for len(rs) > 0 {
		k, rej, why := c.admitN(&m, len(rs), clk.now)
		if k > 0 {
			t.admitted.Add(uint64(k))
			refused += p.sendRun(&m, rs[:k], done, clk, sync)
			rs = rs[k:]
		}
		if rej == nil {
			break
		}
		waitable := why == reasonRate || why == reasonInFlight
		if !waitable || m.mode == Drop {
			p.rejectRun(t, rs, rej, why, done)
			refused += len(rs)
			break
		}
		// Block: the next record waits for its slot and token as
		// ProduceAsync would (the checks run again after the wait).
		head := m
		if r, why := c.admitChecks(&head, c.mono.nanos()); r != nil {
			p.rejectRun(t, rs, r, why, done)
			refused += len(rs)
			break
		}
		t.admitted.Add(1)
		clk = p.read()
		refused += p.sendRun(&head, rs[:1], done, clk, sync)
		rs = rs[1:]
	}
	return clk, refused
}

// rejectRun hands rej to every record of rs, each in its own copy, and
// counts them as refused at admission and rejected under why.
func (p *KafkaProducer) rejectRun(t *topic, rs []*kgo.Record, rej *RejectError, why reason, done func(*kgo.Record, error)) {
	t.refused.Add(uint64(len(rs)))
	p.c.countRejects(t, why, len(rs))
	base := *rej // copied before any callback can see rej
	for i, r := range rs {
		e := rej
		if i > 0 {
			cp := base
			e = &cp
		}
		e.Record = r
		if done != nil {
			done(r, e)
		} else {
			p.c.unhandledFailure(e)
		}
	}
}

// kbatch is the state of a run of records sent together: their shared
// msg (first attempt) and the countdown of records still with the run.
// It is the Context of each of its records that had none while franz-go
// holds them (as kpending is for a single record), so the promise finds
// it without an allocation per record; kbrec stands in for records that
// had their own Context. A record that fails leaves the run for a
// kpending of its own (which takes its in-flight slot over); when the
// countdown reaches zero the run counts its successes and gives back
// their slots in one go.
type kbatch struct {
	m    msg
	done func(*kgo.Record, error)
	n    int64        // records sent under the run
	left atomic.Int64 // records whose outcome is not in yet
	out  atomic.Int64 // records that left the run early (their slots are theirs)
}

// Deadline, Done, Err and Value make kbatch the call's context.
func (b *kbatch) Deadline() (time.Time, bool) { return b.m.ctx.Deadline() }
func (b *kbatch) Done() <-chan struct{}       { return b.m.ctx.Done() }
func (b *kbatch) Err() error                  { return b.m.ctx.Err() }
func (b *kbatch) Value(key any) any           { return b.m.ctx.Value(key) }

// kbrec is the Context of a batched record that had its own: that one.
type kbrec struct {
	context.Context
	b *kbatch
}

// sendRun sends rs, admitted under m at clk (each holds a slot and a
// token): the adaptive throttle decides per record, headers are stamped,
// and the records go to franz-go under one kbatch. With sync (a
// synchronous call) they go through franz-go's ProduceSync, which sends
// their partitions at once instead of lingering, and sendRun returns
// after their first attempts' outcomes were handled. It returns how many
// records the adaptive throttle refused before their first send.
func (p *KafkaProducer) sendRun(m *msg, rs []*kgo.Record, done func(*kgo.Record, error), clk reading, sync bool) (throttled int) {
	c, t := p.c, m.t
	b := &kbatch{m: *m, done: done, n: int64(len(rs))}
	b.m.held = false
	b.m.sent, b.m.attempts = clk.now, 1
	b.left.Store(int64(len(rs)))
	var pr float64
	if t.throttle != nil {
		pr = t.throttle.cached(clk.now)
	}
	dl := c.deadline(m)
	// The storage handed out below is sized first: appends never move it.
	var (
		own  []kbrec
		blks []hdrBlock
		out  []*kgo.Record // sync: the records to send
	)
	if sync {
		out = make([]*kgo.Record, 0, len(rs))
	}
	if nOwn, nBare := count(rs, !dl.IsZero()); nOwn > 0 || nBare > 0 {
		own = make([]kbrec, 0, nOwn)
		blks = make([]hdrBlock, 0, nBare)
	}
	sent := 0
	for _, r := range rs {
		if pr > 0 && rand.Float64() < pr {
			p.throttledInRun(b, r, pr, clk.now)
			throttled++
			continue
		}
		if !dl.IsZero() && (len(r.Headers) == 0 || sharedHeaders(r.Headers)) {
			blks = append(blks, hdrBlock{})
			stampBlock(r, &blks[len(blks)-1], dl, m.crit)
		} else {
			stampKafka(r, dl, m.crit)
		}
		if p.c.mono.system && r.Timestamp.IsZero() {
			r.Timestamp = clk.ts
		}
		if r.Context != nil {
			own = append(own, kbrec{Context: r.Context, b: b})
			r.Context = &own[len(own)-1]
		} else {
			r.Context = b
		}
		sent++
		if sync {
			out = append(out, r)
			continue
		}
		p.cl.Produce(m.ctx, r, p.promiseFn)
	}
	c.sentN(&b.m, sent, clk.now)
	if len(out) > 0 {
		for _, res := range p.cl.ProduceSync(m.ctx, out...) {
			p.promise(res.Record, res.Err)
		}
	}
	return throttled
}

// count returns how many records of rs have their own Context, and when
// bare counts, how many have no headers (they get a hdrBlock each).
func count(rs []*kgo.Record, bare bool) (own, blocks int) {
	for _, r := range rs {
		if r.Context != nil {
			own++
		}
		if bare && (len(r.Headers) == 0 || sharedHeaders(r.Headers)) {
			blocks++
		}
	}
	return own, blocks
}

// throttledInRun rejects r, refused locally by the adaptive throttle with
// probability pr before its first send; it leaves the run.
func (p *KafkaProducer) throttledInRun(b *kbatch, r *kgo.Record, pr float64, now int64) {
	t := b.m.t
	t.throttle.w.add(now, countA)
	rej := p.c.rejectCount(t, reasonThrottled, throttledReject(t, pr))
	kp := &kpending{m: b.m, userCtx: r.Context, done: b.done}
	kp.m.held, kp.m.attempts = true, 0
	b.out.Add(1)
	p.finishReject(kp, r, rej)
	p.leaveRun(b)
}

// batchPromise is the promise's part for a record of a run; uc is the
// record's own Context (restored already).
func (p *KafkaProducer) batchPromise(b *kbatch, uc context.Context, r *kgo.Record, err error) {
	if err == nil {
		if b.done != nil {
			b.done(r, nil)
		}
		p.leaveRun(b)
		return
	}
	// The record leaves the run with its slot, to be retried or
	// rejected as a single record.
	kp := &kpending{m: b.m, userCtx: uc, done: b.done}
	kp.m.held = true
	b.out.Add(1)
	p.leaveRun(b)
	p.failedAttempt(kp, r, err)
}

// leaveRun counts one record of b done; the last one settles the run.
func (p *KafkaProducer) leaveRun(b *kbatch) {
	if b.left.Add(-1) == 0 {
		p.c.succeededN(&b.m, b.n-b.out.Load())
	}
}
