package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// KafkaTopic is the compacted topic of the replicated lease state for the
// election named name ("<name>.leases").
func KafkaTopic(name string) string { return name + ".leases" }

// kafkaChannel is a Channel on a compacted Kafka topic: a value is a
// record under its key, a deletion a tombstone; a reader consumes the
// topic from its start (no group), at read_committed. The leader's sets
// are on partition 0, its decisions record on partition 1 and the plain
// writes on partition 2, where the topic has them (a topic this version
// creates does): see partition.
//
// A write whose context carries a leader's epoch (leader.Fence: the sets
// and the decisions record) is fenced by the broker, as KVFence fences a
// NATS bucket: it is a transaction of a transactional id every replica of
// the deployment shares, one for the sets (TxnID) and one for the
// decisions record (DecisionsTxnID). A leader's first fenced write of
// each, and its first in each higher epoch, starts a new producer of that
// id (InitProducerId): the broker bumps the id's producer epoch, aborts a
// transaction the deposed leader left open and refuses its later produce
// and commit (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH), however late they
// come; readers never see its records. Other writes (reports, presence,
// the shards' records) are plain.
type kafkaChannel struct {
	opts  []kgo.Opt
	topic string
	// done ends when Close is called: it cuts every write in flight
	// short, the end of a transaction included.
	done   context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	cl    *kgo.Client // the writer; nil until the first Put or Delete
	parts int32       // the topic's partitions; 0 until known

	// The fenced writers: the sets (the engine's publishing goroutine)
	// and the decisions record (the decisions goroutine), each with its
	// own producer and lock, so that the leader's sign of life never
	// waits for a publish, however long that takes.
	sets, dec txnWriter
	// shared: the broker refused the decisions record's transactional id
	// (ACLs that name TxnID only): the sets' writer writes it too.
	shared atomic.Bool
	// beforeCommit, when set (tests), runs between a fenced write's
	// produce and its commit: the moment a leader may pause or die.
	beforeCommit func(recs []*kgo.Record)
}

// txnWriter is one transactional producer of the leaders' writes: one
// transaction at a time (mu).
type txnWriter struct {
	id      string
	mu      sync.Mutex
	cl      *kgo.Client // nil until the first fenced write, and after a failure
	epoch   int64       // the leader's epoch cl was last started in
	refused int64       // the highest epoch whose write the broker refused
	// live is cl until it is closed, by the writer or by a Close that
	// found it busy past its bound: whoever swaps it out closes it.
	live atomic.Pointer[kgo.Client]
}

// TxnID is the transactional id of the leaders' writes of the sets to the
// lease state topic: the topic's name. With ACLs, the replicas need Write
// and Describe on it and on DecisionsTxnID (TransactionalId resources; a
// prefixed ACL on the topic's name covers both).
func TxnID(topic string) string { return topic }

// DecisionsTxnID is the transactional id of the leaders' decisions
// records: "<topic>.decisions".
func DecisionsTxnID(topic string) string { return topic + ".decisions" }

// txnTimeout is how long the broker lets a fenced write's transaction run
// before it aborts it (a leader that died or paused in between, whose
// successor has not written yet). Readers at read_committed see nothing
// written to its partition after its start until then: keep it short. A
// transaction is one record, or the sets of one publish, and its commit.
const txnTimeout = 10 * time.Second

// writerMetadataMinAge is the writers' least time between metadata loads
// (franz-go's default: 5 s). A produce the broker answers with a
// retriable error is retried after the next load: with the default, a
// leader's decisions record stalled 4 s under load (Kafka 4.3.1), past
// the followers' silence, and they stood in against it.
const writerMetadataMinAge = 250 * time.Millisecond

// closeAbort bounds the abort of a transaction that Close cut short, and
// a commit after its write's context ended; closeWait bounds Close.
const (
	closeAbort = time.Second
	closeWait  = 2*closeAbort + 500*time.Millisecond
)

// NewKafka returns a Channel on the compacted topic, created (three
// partitions, the broker's replication factor) at its first use; opts
// connect to the cluster (seeds, TLS, SASL). Close releases the writers.
func NewKafka(opts []kgo.Opt, topic string) interface {
	Channel
	Close()
} {
	done, cancel := context.WithCancel(context.Background())
	return &kafkaChannel{opts: opts, topic: topic, done: done, cancel: cancel,
		sets: txnWriter{id: TxnID(topic)}, dec: txnWriter{id: DecisionsTxnID(topic)}}
}

// topicConfigs are the lease state topic's settings at creation. The
// leader and the shard owners rewrite their records every cycle, and the
// log cleaner never compacts the active segment: with the broker's
// default segment (7 days or 1 GiB) a replica that starts reads every
// rewrite since the segment rolled before it is synced. Rolling every 10
// minutes bounds that read to about 10 minutes of writes plus the
// compacted state. A topic that already exists keeps the settings its
// operator gave it.
var topicConfigs = map[string]*string{
	"cleanup.policy": kadm.StringPtr("compact"),
	"segment.ms":     kadm.StringPtr("600000"),
}

// topicPartitions is the lease state topic's partitions at creation: the
// sets', the decisions record's and the plain writes' (see partition).
const topicPartitions = 3

// create creates the topic if it does not exist and learns its partitions.
func (k *kafkaChannel) create(ctx context.Context, cl *kgo.Client) error {
	k.mu.Lock()
	known := k.parts > 0
	k.mu.Unlock()
	if known {
		return nil
	}
	adm := kadm.NewClient(cl)
	parts := int32(topicPartitions)
	r, err := adm.CreateTopic(ctx, parts, -1, topicConfigs, k.topic)
	if err == nil {
		err = r.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		parts, err = k.listed(ctx, adm)
	}
	if err != nil {
		return fmt.Errorf("lease state topic %q: %w", k.topic, err)
	}
	k.mu.Lock()
	k.parts = parts
	k.mu.Unlock()
	return nil
}

// listed is the number of partitions of the topic another client created.
// Created a moment ago (the replicas' writers and reader all create it at
// a first start, one of them first), Kafka 4.3.1 answers its metadata
// UNKNOWN_TOPIC_OR_PARTITION, or lists it without partitions, until the
// broker hosts them: that is waited out, as endOffsets does, for up to
// newTopicWait, rather than returned, which failed a new leader's first
// write of its sets (TestLeaderServesOnceWrittenKafka/real, 2-3 of 60
// under load) and every other first write that lost the creation.
func (k *kafkaChannel) listed(ctx context.Context, adm *kadm.Client) (int32, error) {
	deadline := time.Now().Add(newTopicWait)
	for {
		ts, err := adm.ListTopics(ctx, k.topic)
		var parts int32
		if err == nil {
			err = ts.Error()
			parts = int32(len(ts[k.topic].Partitions))
			if err == nil && parts == 0 {
				err = errNotListed
			}
		}
		if (!errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, errNotListed)) || time.Now().After(deadline) {
			return parts, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(newTopicPoll):
		}
	}
}

var errNotListed = errors.New("no partitions listed yet")

// The kinds of records that have a partition each (partition).
const (
	partSets      = 0 // the leader's sets and a publish's deletions (TxnID)
	partDecisions = 1 // the leader's decisions record (DecisionsTxnID)
	partPlain     = 2 // reports, presence (their deletions too: splitPlain): every write without an epoch
)

// partition is the partition of a kind of record: its own, or the
// highest the topic has. Readers at read_committed see nothing of a
// partition past a transaction still open on it (the last stable
// offset): on partitions of their own, the decisions record and the
// replicas' reports and presence are read while a publish's transaction
// is slow to commit, or was left open by a leader that died, and the
// plain writes while a decisions record's was. A topic created by an
// earlier version has one partition, which has them all: add two
// (kafka-topics --alter --partitions 3) once every replica runs this
// version.
func (k *kafkaChannel) partition(kind int32) int32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return min(kind, max(k.parts-1, 0))
}

// clientOpts are the options of a writer: records go to the partition
// they name, and a retried produce waits for metadata no longer than
// writerMetadataMinAge.
func (k *kafkaChannel) clientOpts(more ...kgo.Opt) []kgo.Opt {
	return append(append(append([]kgo.Opt{}, k.opts...), kgo.DefaultProduceTopic(k.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(writerMetadataMinAge)), more...)
}

func (k *kafkaChannel) writer(ctx context.Context) (*kgo.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		return k.cl, nil
	}
	if k.done.Err() != nil {
		return nil, fmt.Errorf("lease state topic %q: closed", k.topic)
	}
	cl, err := kgo.NewClient(k.clientOpts()...)
	if err != nil {
		return nil, err
	}
	k.mu.Unlock()
	err = k.create(ctx, cl)
	k.mu.Lock()
	if err != nil {
		cl.Close()
		return nil, err
	}
	if k.cl != nil || k.done.Err() != nil { // another write, or Close, meanwhile
		cl.Close()
		if k.cl == nil {
			return nil, fmt.Errorf("lease state topic %q: closed", k.topic)
		}
		return k.cl, nil
	}
	k.cl = cl
	return cl, nil
}

func (k *kafkaChannel) Put(ctx context.Context, key string, value []byte) error {
	return k.PutAll(ctx, []entry{{key, value}})
}

// PutAll implements batchPutter: a leader's entries are one transaction.
// Writes end when Close is called.
func (k *kafkaChannel) PutAll(ctx context.Context, es []entry) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(k.done, cancel)()
	recs := make([]*kgo.Record, len(es))
	for i, e := range es {
		recs[i] = &kgo.Record{Key: []byte(e.key), Value: e.value}
	}
	if epoch, ok := leader.EpochOf(ctx); ok {
		if len(es) == 1 && es[0].key == decisionsKey && !k.shared.Load() {
			err := k.fenced(ctx, &k.dec, epoch, recs)
			if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
				return err
			}
			k.shared.Store(true)
		}
		var later []*kgo.Record
		recs, later = splitPlain(recs)
		if len(recs) > 0 {
			if err := k.fenced(ctx, &k.sets, epoch, recs); err != nil || len(later) == 0 {
				return err
			}
		}
		recs = later
	}
	cl, err := k.writer(ctx)
	if err != nil {
		return err
	}
	return k.plain(ctx, cl, recs)
}

// splitPlain splits a leader's records into those of its transaction
// and those of the kinds plain writes carry (reports, presence: the
// deletions of a producer gone, deleteGone). The latter are written plain,
// after the transaction commits: on the partition of their kind's records,
// which a tombstone on the sets' partition would never compact away (the
// report of every producer gone would stay for good, and be read by every
// replica that starts), and outside the transaction, which would hold that
// partition's reads (the presence records) while it is open.
func splitPlain(recs []*kgo.Record) (txn, plain []*kgo.Record) {
	for _, r := range recs {
		kind, _, err := quotaproto.ParseKVKey(string(r.Key))
		if err == nil && (kind == kindReport || kind == kindPresence) {
			plain = append(plain, r)
		} else {
			txn = append(txn, r)
		}
	}
	return txn, plain
}

// plain writes recs, not waiting past ctx: an idempotent producer's
// record once sent is never failed by its context (it is retried until
// it lands, or the writer is closed), and a write that waits for one
// (the topic deleted meanwhile) would hold its caller, and the daemon's
// stop, for good.
func (k *kafkaChannel) plain(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	errs := make(chan error, len(recs))
	for _, r := range recs {
		r.Partition = k.partition(partPlain)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
	}
	var first error
	for range recs {
		select {
		case err := <-errs:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return fmt.Errorf("lease state topic %q: %w", k.topic, context.Cause(ctx))
		}
	}
	return first
}

func (k *kafkaChannel) Delete(ctx context.Context, key string) error {
	return k.Put(ctx, key, nil)
}

// fenced writes recs for the leader of epoch in a transaction of w. A
// write of an epoch below the one w was last started in is refused (this
// replica led again since), as is one of an epoch the broker refused.
// Refused by the broker (another replica started a producer of the id
// since), it returns ErrFenced, unless the lease of the write
// (leader.LeaseOf) still runs: no other replica may lead yet, so the one
// that took the id over is a deposed leader whose start came late, and
// the write is tried once more with a new producer.
func (k *kafkaChannel) fenced(ctx context.Context, w *txnWriter, epoch int64, recs []*kgo.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if epoch < w.epoch || epoch <= w.refused {
		return fmt.Errorf("%w: lease state topic %q: epoch %d, after this replica wrote in epoch %d (refused in %d)", leader.ErrFenced, k.topic, epoch, w.epoch, w.refused)
	}
	for try := 0; ; try++ {
		if w.cl == nil || epoch > w.epoch {
			if err := k.startTxn(ctx, w, epoch); err != nil {
				return err
			}
		}
		part := k.partition(partSets)
		if w == &k.dec {
			part = k.partition(partDecisions)
		}
		for _, r := range recs {
			r.Partition = part
		}
		err := k.txn(ctx, w, recs)
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
			return fmt.Errorf("lease state topic %q: %w", k.topic, err)
		}
		w.close()
		if until, ok := leader.LeaseOf(ctx); try > 0 || !ok || !time.Now().Before(until) {
			w.refused = epoch
			return fmt.Errorf("%w: lease state topic %q: epoch %d: another replica writes as transactional id %q: %w", leader.ErrFenced, k.topic, epoch, w.id, err)
		}
	}
}

// startTxn replaces w's producer with a new producer of its id (its
// producer id is initialized at its first write, which fences the
// previous producer of the id).
func (k *kafkaChannel) startTxn(ctx context.Context, w *txnWriter, epoch int64) error {
	w.close()
	if k.done.Err() != nil {
		return fmt.Errorf("lease state topic %q: closed", k.topic)
	}
	cl, err := kgo.NewClient(k.clientOpts(kgo.TransactionalID(w.id), kgo.TransactionTimeout(txnTimeout))...)
	if err != nil {
		return err
	}
	if err := k.create(ctx, cl); err != nil {
		cl.Close()
		return err
	}
	w.cl, w.epoch = cl, epoch
	w.live.Store(cl)
	return nil
}

// txn writes recs in a transaction of w and commits it, unless the
// write's context (its lease, the daemon, Close) ended meanwhile; on
// failure the transaction is aborted (the writer closed if that fails
// too: the next write starts a new one, and the broker aborts the open
// transaction). Ending a transaction is bounded by txnTimeout, and by
// closeAbort once the write's context ended (commitCtx), as is the
// abort then.
func (k *kafkaChannel) txn(ctx context.Context, w *txnWriter, recs []*kgo.Record) error {
	if err := w.cl.BeginTransaction(); err != nil {
		w.close()
		return err
	}
	err := w.cl.ProduceSync(ctx, recs...).FirstErr()
	if err == nil && k.beforeCommit != nil {
		k.beforeCommit(recs)
	}
	if err == nil {
		err = context.Cause(ctx) // the lease ran out, or Close: no commit
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnTimeout)
	defer cancel()
	if err == nil {
		cctx, ccancel := commitCtx(ctx, ectx)
		err = w.cl.EndTransaction(cctx, kgo.TryCommit)
		ccancel()
		if err == nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		// The abort too is bounded short: the broker aborts what it
		// leaves open (txnTimeout), or the next leader's first write.
		var acancel context.CancelFunc
		ectx, acancel = context.WithTimeout(context.WithoutCancel(ctx), closeAbort)
		defer acancel()
	}
	_ = w.cl.AbortBufferedRecords(ectx) // the abort below says
	if aerr := w.cl.EndTransaction(ectx, kgo.TryAbort); aerr != nil {
		w.close()
	}
	return err
}

// commitCtx is the context of a commit: ectx, cut short closeAbort after
// the write's context ended (its lease ran out, the daemon stops, Close):
// a commit so late would land after the lease, and stopping waits for
// none long.
func commitCtx(ctx, ectx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(ectx)
	var mu sync.Mutex
	var t *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		t = time.AfterFunc(closeAbort, cancel)
		mu.Unlock()
	})
	return cctx, func() {
		stop()
		mu.Lock()
		if t != nil {
			t.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// close closes the producer; called with mu held.
func (w *txnWriter) close() {
	w.cl = nil
	w.kill()
}

// kill closes the producer, in flight or not: a write in flight fails.
func (w *txnWriter) kill() {
	if cl := w.live.Swap(nil); cl != nil {
		cl.Close()
	}
}

func (k *kafkaChannel) Watch(ctx context.Context, f func(string, []byte), synced func()) error {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...),
		kgo.ConsumeTopics(k.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A fenced leader's records are never read; the commit markers
		// are, so that the read of the state ends at the last stable
		// offset whatever its last record is.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := k.create(ctx, cl); err != nil {
		return err
	}
	listed, err := k.endOffsets(ctx, cl)
	if err != nil {
		return fmt.Errorf("lease state topic %q: end offset: %w", k.topic, err)
	}
	// Synced once every partition was read to its end (the last stable
	// offset when the read began).
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			ends[o.Partition] = o.Offset
		}
	})
	read := func(r *kgo.Record) {
		if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
			delete(ends, r.Partition)
			if len(ends) == 0 {
				synced()
			}
		}
	}
	if len(ends) == 0 {
		synced()
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			// A fetch error is retried by the client; a fatal one ends here.
			var fe *kgo.ErrFirstReadEOF
			if !errors.As(err, &fe) && !kerr.IsRetriable(err) {
				return fmt.Errorf("lease state topic %q: %w", k.topic, err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.IsControl() {
				read(r)
				return
			}
			var v []byte
			if len(r.Value) > 0 {
				v = r.Value
			}
			f(string(r.Key), v)
			read(r)
		})
	}
}

// newTopicWait bounds how long endOffsets waits for the partitions of a
// topic the broker does not host yet; newTopicPoll is its poll.
const (
	newTopicWait = 10 * time.Second
	newTopicPoll = 50 * time.Millisecond
)

// endOffsets lists the topic's last stable offsets. A topic created a
// moment ago (by create, at a replica's first start) is answered
// UNKNOWN_TOPIC_OR_PARTITION until the broker hosts its partitions (Kafka
// 4.3.1: tens of milliseconds on loopback): that is waited out, for up to
// newTopicWait, rather than returned, which logged a warning at every
// first start and read the state an interval later.
func (k *kafkaChannel) endOffsets(ctx context.Context, cl *kgo.Client) (kadm.ListedOffsets, error) {
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(newTopicWait)
	for {
		listed, err := adm.ListCommittedOffsets(ctx, k.topic)
		if err == nil {
			err = listed.Error()
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().After(deadline) {
			return listed, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(newTopicPoll):
		}
	}
}

// Close ends the writes in flight (a commit gets closeAbort to finish,
// then the transaction is aborted, for up to closeAbort: see txn) and
// closes the writers. It
// returns within about closeWait however slow the broker: a writer still
// busy then (a produce the broker does not answer) has its producer
// closed under it. Idempotent.
func (k *kafkaChannel) Close() {
	k.cancel()
	deadline := time.Now().Add(closeWait)
	for _, w := range []*txnWriter{&k.sets, &k.dec} {
		locked := w.mu.TryLock()
		for !locked && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			locked = w.mu.TryLock()
		}
		if !locked {
			w.kill()
			continue
		}
		w.close()
		w.mu.Unlock()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		k.cl.Close()
		k.cl = nil
	}
}
