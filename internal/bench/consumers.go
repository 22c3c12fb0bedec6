package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/ttl/kafkaguard"
)

// pacer makes a consumer as fast as its capacity: each message takes
// 1/capacity seconds of the consumer's time, dead or alive. Idle time is
// not banked beyond slack, so a consumer that waited for messages does not
// burst through the next ones.
//
// It also measures how the consumer kept its own schedule, for a consumer
// that says whether work was waiting (queued): while it was, a consumer at
// capacity finishes one message every 1/capacity seconds from when the
// work began, whatever the machine does; behind, when set, is told how
// much later than that each message was let go. A machine that stalls the
// consumer, or runs it slower than its capacity, leaves it behind, and a
// queue forms that its capacity alone would not have formed.
type pacer struct {
	next     time.Time
	capacity func(now time.Time) float64
	// queued is set by the consumer after each message: more work was
	// waiting then (a later message of its fetch, or more in the stream).
	queued bool
	// sched is when a consumer at capacity would have finished the
	// current message.
	sched  time.Time
	behind func(finished time.Time, late time.Duration)
}

const pacerSlack = 10 * time.Millisecond

// take waits until the consumer has processed one more message.
func (p *pacer) take(ctx context.Context) error {
	now := time.Now()
	if floor := now.Add(-pacerSlack); p.next.Before(floor) {
		p.next = floor
	}
	per := time.Duration(float64(time.Second) / p.capacity(now))
	p.next = p.next.Add(per)
	if p.queued && !p.sched.IsZero() {
		p.sched = p.sched.Add(per)
	} else {
		p.sched = now.Add(per)
	}
	if d := p.next.Sub(now); d > 2*time.Millisecond {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if p.behind != nil {
		end := time.Now()
		p.behind(end, end.Sub(p.sched))
	}
	return nil
}

// processed records a Kafka record a consumer finished: its class's
// consumption (when its value decodes) and, for the true head age, that it
// is no longer waiting.
func (r *recorder) processed(k *kgo.Record, deadline time.Duration) {
	if created, class, err := decode(k.Value); err == nil {
		r.consumed(class, created, time.Now(), deadline)
	}
	r.done(k.Partition, k.Offset)
}

// capacityAt is the scenario's capacity at the recorder's clock (Normal
// before the run starts).
func capacityAt(scn Scenario, rec *recorder) func(time.Time) float64 {
	return func(now time.Time) float64 {
		if d, ok := rec.elapsed(now); ok {
			return scn.Capacity(d)
		}
		return scn.Normal
	}
}

// consumer runs until Close.
type consumer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	close1 sync.Once
	closeF func()
}

// Close stops the consumer and waits for it. Idempotent.
func (c *consumer) Close() {
	c.close1.Do(func() {
		c.cancel()
		c.wg.Wait()
		if c.closeF != nil {
			c.closeF()
		}
	})
}

// startConsumer starts the consumer of kind on w, processing at the
// scenario's capacity, and returns once it is ready (a Kafka group has
// assigned partitions). daemon is the daemon's base URL, where the Hook
// and Workers consumers report. together starts a group's members at
// once rather than each once the one before is assigned (see
// startKafkaMembers).
func startConsumer(ctx context.Context, w *world, scn Scenario, rec *recorder, kind ConsumerKind, members int, daemon string, log *slog.Logger, together bool) (*consumer, error) {
	switch kind {
	case Marks20ms:
		return startMarksConsumer(ctx, w, scn, rec)
	case AckEach, AckBatch:
		return startNATSConsumer(ctx, w, scn, rec, kind == AckBatch)
	case Workers, workersPlain:
		return startWorkersConsumer(ctx, w, scn, rec, kind == Workers, daemon, log, nil)
	}
	if members <= 1 {
		return startKafkaConsumer(ctx, w, scn, rec, kind, 0, 1, daemon, log)
	}
	return startKafkaMembers(ctx, w, scn, rec, kind, members, daemon, log, together)
}

// startKafkaMembers starts members consumers of kind in one group, each
// with its own client (and hook), processing at 1/members of the
// scenario's capacity, so that the group consumes what one consumer does
// (the Members3 extra). It returns once each has been assigned partitions.
//
// The members start one after the other, each once the one before is
// assigned (a rebalance: about 0.5 s on kfake), or with together all at
// once (--phase: their commit timers then all start at the phase; one
// after the other the third's started about 0.5 s after it, its commits
// 0.9 s after a reading at --phase 450ms, review-phase 2026-12-05).
func startKafkaMembers(ctx context.Context, w *world, scn Scenario, rec *recorder, kind ConsumerKind, members int, daemon string, log *slog.Logger, together bool) (*consumer, error) {
	ms := make([]*consumer, members)
	errs := make([]error, members)
	start := func(i int) {
		ms[i], errs[i] = startKafkaConsumer(ctx, w, scn, rec, kind, i, members, daemon, log.With("member", i))
	}
	if together {
		var wg sync.WaitGroup
		for i := range members {
			wg.Go(func() { start(i) })
		}
		wg.Wait()
	} else {
		for i := range members {
			if start(i); errs[i] != nil {
				break
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, m := range ms {
			if m != nil {
				m.Close()
			}
		}
		return nil, err
	}
	return &consumer{cancel: func() {}, closeF: func() {
		for _, m := range ms {
			m.Close()
		}
	}}, nil
}

// startKafkaConsumer runs the poll loop most franz-go users write: poll,
// process each record in the order returned, and commit as kind says
// (AutoCommit5s: the library's defaults throughout; AutoCommit1s: a 1 s
// autocommit; CommitPerPoll: autocommit off, a synchronous commit after
// each poll; Guard: the same behind the ttl guard's documented loop; Hook:
// AutoCommit5s with the consumer hook of consumerclient reporting to
// daemon, the poll loop unchanged; JavaAutoCommit5s: Java's poll loop, see
// javaPoll). Every other client setting is
// franz-go's and consumerclient's default. It returns once the group has
// assigned partitions.
//
// members is the size of the group the consumer is one member of: it
// processes at 1/members of the scenario's capacity; member is which one
// (from 0), its commits' committer in rec.
func startKafkaConsumer(ctx context.Context, w *world, scn Scenario, rec *recorder, kind ConsumerKind, member, members int, daemon string, log *slog.Logger) (*consumer, error) {
	assigned := make(chan struct{})
	var once sync.Once
	opts := []kgo.Opt{kgo.SeedBrokers(w.kafkaAddrs...), kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.topic),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) })}
	perPoll := kind == CommitPerPoll || kind == Guard
	java := kind == JavaAutoCommit5s
	switch {
	case kind == AutoCommit1s:
		opts = append(opts, kgo.AutoCommitInterval(time.Second))
	case perPoll:
		opts = append(opts, kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	case java:
		// Java's consumer rebalances only inside poll() and, with
		// auto-commit, commits what earlier polls returned (synchronously)
		// before it gives partitions up.
		opts = append(opts, kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
				cl.CommitOffsetsSync(ctx, cl.UncommittedOffsets(), nil)
			}))
	}
	var rep *consumerclient.KafkaReporter
	if kind == Hook {
		var err error
		if rep, err = consumerclient.NewKafkaReporter(consumerclient.Config{URL: daemon, Cluster: w.name, Logger: log}); err != nil {
			return nil, err
		}
		opts = append(opts, kgo.WithHooks(rep.Hook()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		if rep != nil {
			rep.Close()
		}
		return nil, err
	}
	closeF := cl.Close
	if rep != nil {
		closeF = func() {
			cl.Close()
			rep.Close()
		}
	}
	var g *kafkaguard.Guard
	if kind == Guard {
		if g, err = kafkaguard.New(kafkaguard.Config{MaxAge: scn.Deadline, Progress: skips{rec}}); err != nil {
			closeF()
			return nil, err
		}
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cancel: cancel, closeF: closeF}
	p := &pacer{capacity: capacityAt(scn, rec)}
	if members > 1 {
		whole := p.capacity
		p.capacity = func(now time.Time) float64 { return whole(now) / float64(members) }
	}
	process := func(r *kgo.Record) error {
		if err := p.take(cctx); err != nil {
			return err
		}
		rec.processed(r, scn.Deadline)
		return nil
	}
	c.wg.Go(func() {
		// With BlockRebalanceOnPoll, leaving the group on Close waits
		// until the last poll is allowed to rebalance.
		defer cl.AllowRebalance()
		nextCommit := time.Now().Add(javaCommitInterval)
		for cctx.Err() == nil {
			var recs []*kgo.Record
			if java {
				nextCommit = javaPoll(cctx, cl, nextCommit, &recs, func(t time.Time) { rec.committed(member, t) })
			} else {
				recs = cl.PollFetches(cctx).Records()
			}
			if cctx.Err() != nil {
				return
			}
			if g != nil {
				done, err := g.Process(cctx, recs, func(_ context.Context, r *kgo.Record) error { return process(r) })
				if len(done) > 0 && cl.CommitRecords(cctx, done...) == nil {
					rec.committed(member, time.Now())
				}
				if err != nil {
					cl.SetOffsets(kafkaguard.RewindOffsets(recs, done))
				}
				cl.AllowRebalance()
				continue
			}
			for _, r := range recs {
				if process(r) != nil {
					return
				}
			}
			if perPoll {
				if len(recs) > 0 && cl.CommitUncommittedOffsets(cctx) == nil {
					rec.committed(member, time.Now())
				}
				cl.AllowRebalance()
			}
		}
	})
	return waitAssigned(ctx, c, assigned, w.group)
}

// javaCommitInterval and javaMaxPollRecords are the Java consumer's
// defaults, auto.commit.interval.ms (5000) and max.poll.records (500).
const (
	javaCommitInterval = 5 * time.Second
	javaMaxPollRecords = 500
)

// javaPoll is one poll() of Java's KafkaConsumer with enable.auto.commit
// (KafkaConsumer's documentation: offsets are committed automatically
// every auto.commit.interval.ms, the commit made within poll() of the
// positions, which advance past each record poll() returns; the classic
// consumer's ConsumerCoordinator.maybeAutoCommitOffsetsAsync checks the
// interval on each poll and restarts it when it sends a commit, so the
// interval is a lower bound between commits): once nextCommit has passed, it
// commits asynchronously the positions of everything earlier polls
// returned, then rebalances if the group asks and returns up to
// javaMaxPollRecords records into recs. A poll waiting for records wakes
// at the next commit's time to make it, as Java's does; a poll's records
// being processed delay it. It returns the next commit's time. committed,
// when not nil, is told when a commit returned without error.
func javaPoll(ctx context.Context, cl *kgo.Client, nextCommit time.Time, recs *[]*kgo.Record, committed func(time.Time)) time.Time {
	if now := time.Now(); !now.Before(nextCommit) {
		var onDone func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error)
		if committed != nil {
			onDone = func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
				if err == nil {
					committed(time.Now())
				}
			}
		}
		cl.CommitOffsets(ctx, cl.UncommittedOffsets(), onDone)
		nextCommit = now.Add(javaCommitInterval)
	}
	cl.AllowRebalance()
	pctx, cancel := context.WithDeadline(ctx, nextCommit)
	defer cancel()
	*recs = cl.PollRecords(pctx, javaMaxPollRecords).Records()
	return nextCommit
}

// skips is the guard's Progress in the bench: it counts each record the
// guard skips as expired and marks it processed for the true head age the
// moment the guard skips it (a record skipped early in a poll is no longer
// waiting while the rest of the poll is processed). The records the guard
// hands to the handler are recorded by the handler.
type skips struct{ rec *recorder }

// Finished implements kafkaguard.Progress: nothing to do (see skips).
func (skips) Finished(*kgo.Record) {}

// Skipped implements kafkaguard.Skipper.
func (s skips) Skipped(r *kgo.Record) {
	if _, class, err := decode(r.Value); err == nil {
		s.rec.add(s.rec.skipped, class, time.Now())
	}
	s.rec.done(r.Partition, r.Offset)
}

// marksInterval is how often the Marks20ms consumer commits what it has
// processed (franz-go's autocommit cannot go below 100ms, so a committer
// goroutine commits the marks). The daemon reads a group's progress from
// its committed offsets: with commits every 100ms and observations every
// 250ms, each observation would see two or three commits, a ±20% sawtooth
// in the measured consume rate (docs/quota-control.md, Limits). Every
// 20ms keeps that under ±8% at the bench's 250ms interval.
const marksInterval = 20 * time.Millisecond

// readAhead is how many fetched records a Kafka consumer holds before it
// stops taking more from franz-go.
const readAhead = 1000

// kqueue holds fetched records per partition and hands out the oldest head
// first: the consumer works through the topic as one FIFO queue in
// production order, as a JetStream consumer does through its stream.
// Without it, a consumer slower than its producers drains one partition's
// fetched records while the others' heads age: the head age, which the
// daemon takes over all partitions, would measure the consumer's
// partition skew rather than what the producers do.
type kqueue struct {
	parts map[int32][]*kgo.Record
	n     int
}

func (q *kqueue) push(recs []*kgo.Record) {
	if q.parts == nil {
		q.parts = map[int32][]*kgo.Record{}
	}
	for _, r := range recs {
		q.parts[r.Partition] = append(q.parts[r.Partition], r)
	}
	q.n += len(recs)
}

// pop removes and returns the record with the oldest timestamp among the
// partitions' heads (the lowest partition on a tie); nil when empty.
func (q *kqueue) pop() *kgo.Record {
	best := int32(-1)
	for p, rs := range q.parts {
		if len(rs) == 0 {
			continue
		}
		if best < 0 || rs[0].Timestamp.Before(q.parts[best][0].Timestamp) ||
			(rs[0].Timestamp.Equal(q.parts[best][0].Timestamp) && p < best) {
			best = p
		}
	}
	if best < 0 {
		return nil
	}
	r := q.parts[best][0]
	q.parts[best][0] = nil
	q.parts[best] = q.parts[best][1:]
	q.n--
	return r
}

// startMarksConsumer is the Marks20ms consumer: it joins w's group and
// processes records oldest first across partitions (see kqueue), marking
// each finished record, and commits the marks every marksInterval. It
// returns once the group has assigned partitions.
func startMarksConsumer(ctx context.Context, w *world, scn Scenario, rec *recorder) (*consumer, error) {
	assigned := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.kafkaAddrs...),
		kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.topic),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Second), kgo.FetchMaxWait(100*time.Millisecond),
		// Small fetches (franz-go's default is 1 MiB a partition), so the
		// records held cover every partition.
		kgo.FetchMaxPartitionBytes(16<<10), kgo.FetchMaxBytes(128<<10),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) }),
	)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cancel: cancel, closeF: cl.Close}
	p := &pacer{capacity: capacityAt(scn, rec)}
	var marked atomic.Bool // a record was marked since the last commit
	c.wg.Go(func() {
		t := time.NewTicker(marksInterval)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				if marked.Swap(false) {
					if cl.CommitMarkedOffsets(cctx) == nil {
						rec.committed(0, time.Now())
					} else {
						marked.Store(true) // retried at the next tick, as before the recording
					}
				}
			}
		}
	})
	// The poller hands batches to the processor; the processor keeps up
	// to readAhead records and processes them oldest first across
	// partitions (see kqueue).
	batches := make(chan []*kgo.Record, 2)
	c.wg.Go(func() {
		for cctx.Err() == nil {
			recs := cl.PollRecords(cctx, 100).Records()
			if len(recs) == 0 {
				continue
			}
			select {
			case batches <- recs:
			case <-cctx.Done():
				return
			}
		}
	})
	c.wg.Go(func() {
		q := kqueue{}
		for {
			// Top up without blocking; block only when empty.
			for q.n < readAhead {
				if q.n == 0 {
					select {
					case b := <-batches:
						q.push(b)
						continue
					case <-cctx.Done():
						return
					}
				}
				select {
				case b := <-batches:
					q.push(b)
					continue
				default:
				}
				break
			}
			r := q.pop()
			if p.take(cctx) != nil {
				return
			}
			rec.processed(r, scn.Deadline)
			cl.MarkCommitRecords(r)
			marked.Store(true)
		}
	})
	return waitAssigned(ctx, c, assigned, w.group)
}

// waitAssigned returns c once assigned is closed, or closes c and fails
// after 60 s or when ctx ends.
func waitAssigned(ctx context.Context, c *consumer, assigned <-chan struct{}, group string) (*consumer, error) {
	select {
	case <-assigned:
		return c, nil
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	c.Close()
	return nil, fmt.Errorf("consumer group %s: no partitions assigned within 60s", group)
}

// startNATSConsumer creates a durable pull consumer on w's stream and
// processes messages at the scenario's capacity, fetching batches of up to
// 100 (waiting at most 200 ms for a batch to fill): acking each message
// when it is processed (AckExplicit), or with batchAck acking the last
// message of each batch once the batch is processed (AckAll).
func startNATSConsumer(ctx context.Context, w *world, scn Scenario, rec *recorder, batchAck bool) (*consumer, error) {
	policy := jetstream.AckExplicitPolicy
	if batchAck {
		policy = jetstream.AckAllPolicy
	}
	jc, err := w.js.CreateOrUpdateConsumer(ctx, w.topic, jetstream.ConsumerConfig{
		Durable: w.group, AckPolicy: policy, MaxAckPending: 1000, AckWait: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", w.group, err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cancel: cancel}
	p := &pacer{capacity: capacityAt(scn, rec), behind: rec.consumerLate}
	c.wg.Go(func() {
		for cctx.Err() == nil {
			batch, err := jc.Fetch(100, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
					return
				}
				continue
			}
			var last jetstream.Msg
			for m := range batch.Messages() {
				if p.take(cctx) != nil {
					break
				}
				if created, class, err := decode(m.Data()); err == nil {
					rec.consumed(class, created, time.Now(), scn.Deadline)
				}
				md, err := m.Metadata()
				if err == nil {
					rec.done(0, int64(md.Sequence.Stream))
				}
				// More waits: the stream's messages not delivered yet when
				// this one was (the rest of the fetch among them).
				p.queued = err == nil && md.NumPending > 0
				if batchAck {
					last = m
					continue
				}
				if m.Ack() == nil {
					rec.committed(0, time.Now())
				}
			}
			if last != nil && last.Ack() == nil {
				rec.committed(0, time.Now())
			}
		}
	})
	return c, nil
}
