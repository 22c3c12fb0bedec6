package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/leader"
)

// KafkaTopic is the compacted topic of the replicated lease state for the
// election named name ("<name>.leases").
func KafkaTopic(name string) string { return name + ".leases" }

// kafkaChannel is a Channel on a one-partition compacted Kafka topic: a
// value is a record under its key, a deletion a tombstone; a reader
// consumes the topic from its start (no group), at read_committed.
//
// A write whose context carries a leader's epoch (leader.Fence: the sets
// and the decisions record) is fenced by the broker, as KVFence fences a
// NATS bucket: it is a transaction of the transactional id every replica
// of the deployment shares (the topic's name, see TxnID). A leader's first
// fenced write, and its first in each higher epoch, starts a new producer
// of that id (InitProducerId): the broker bumps the id's producer epoch,
// aborts a transaction the deposed leader left open and refuses its later
// produce and commit (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH), however late
// they come; readers never see its records. Other writes (reports, the
// shards' records) are plain.
type kafkaChannel struct {
	opts  []kgo.Opt
	topic string

	mu sync.Mutex
	cl *kgo.Client // the writer; nil until the first Put or Delete

	// The fenced writer: one transaction at a time (tmu), by the
	// engine's publishing goroutine and the decisions one.
	tmu     sync.Mutex
	tcl     *kgo.Client // nil until the first fenced write, and after a failure
	tepoch  int64       // the leader's epoch tcl was last started in
	refused int64       // the highest epoch whose write the broker refused
	// beforeCommit, when set (tests), runs between a fenced write's
	// produce and its commit: the moment a leader may pause.
	beforeCommit func()
}

// TxnID is the transactional id of the leaders' writes to the lease state
// topic: the topic's name. With ACLs, the replicas need Write and Describe
// on it (TransactionalId resource).
func TxnID(topic string) string { return topic }

// txnTimeout is how long the broker lets a fenced write's transaction run
// before it aborts it (a leader that died or paused in between, whose
// successor has not written yet). Readers at read_committed see nothing
// written after its start until then: keep it short. A transaction is one
// record and its commit.
const txnTimeout = 10 * time.Second

// NewKafka returns a Channel on the compacted topic, created (one
// partition, the broker's replication factor) at its first use; opts
// connect to the cluster (seeds, TLS, SASL). Close releases the writers.
func NewKafka(opts []kgo.Opt, topic string) interface {
	Channel
	Close()
} {
	return &kafkaChannel{opts: opts, topic: topic}
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

func (k *kafkaChannel) create(ctx context.Context, cl *kgo.Client) error {
	r, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, topicConfigs, k.topic)
	if err == nil {
		err = r.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("lease state topic %q: %w", k.topic, err)
	}
	return nil
}

func (k *kafkaChannel) writer(ctx context.Context) (*kgo.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		return k.cl, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...), kgo.DefaultProduceTopic(k.topic))...)
	if err != nil {
		return nil, err
	}
	if err := k.create(ctx, cl); err != nil {
		cl.Close()
		return nil, err
	}
	k.cl = cl
	return cl, nil
}

func (k *kafkaChannel) Put(ctx context.Context, key string, value []byte) error {
	return k.PutAll(ctx, []entry{{key, value}})
}

// PutAll implements batchPutter: a leader's entries are one transaction.
func (k *kafkaChannel) PutAll(ctx context.Context, es []entry) error {
	recs := make([]*kgo.Record, len(es))
	for i, e := range es {
		recs[i] = &kgo.Record{Key: []byte(e.key), Value: e.value}
	}
	if epoch, ok := leader.EpochOf(ctx); ok {
		return k.fenced(ctx, epoch, recs)
	}
	cl, err := k.writer(ctx)
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

func (k *kafkaChannel) Delete(ctx context.Context, key string) error {
	return k.Put(ctx, key, nil)
}

// fenced writes recs for the leader of epoch in a transaction of TxnID. A
// write of an epoch below the one the writer was last started in is
// refused (this replica led again since), as is one of an epoch the
// broker refused. Refused by the broker (another replica started a
// producer of the id since), it returns ErrFenced, unless the lease of the
// write (leader.LeaseOf) still runs: no other replica may lead yet, so the
// one that took the id over is a deposed leader whose start came late, and
// the write is tried once more with a new producer.
func (k *kafkaChannel) fenced(ctx context.Context, epoch int64, recs []*kgo.Record) error {
	k.tmu.Lock()
	defer k.tmu.Unlock()
	if epoch < k.tepoch || epoch <= k.refused {
		return fmt.Errorf("%w: lease state topic %q: epoch %d, after this replica wrote in epoch %d (refused in %d)", leader.ErrFenced, k.topic, epoch, k.tepoch, k.refused)
	}
	for try := 0; ; try++ {
		if k.tcl == nil || epoch > k.tepoch {
			if err := k.startTxn(ctx, epoch); err != nil {
				return err
			}
		}
		err := k.txn(ctx, recs, k.beforeCommit)
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
			return fmt.Errorf("lease state topic %q: %w", k.topic, err)
		}
		k.closeTxn()
		if until, ok := leader.LeaseOf(ctx); try > 0 || !ok || !time.Now().Before(until) {
			k.refused = epoch
			return fmt.Errorf("%w: lease state topic %q: epoch %d: another replica writes as transactional id %q: %w", leader.ErrFenced, k.topic, epoch, TxnID(k.topic), err)
		}
	}
}

// startTxn replaces the fenced writer with a new producer of TxnID (its
// producer id is initialized at its first write, which fences the
// previous producer of the id).
func (k *kafkaChannel) startTxn(ctx context.Context, epoch int64) error {
	k.closeTxn()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...), kgo.DefaultProduceTopic(k.topic),
		kgo.TransactionalID(TxnID(k.topic)), kgo.TransactionTimeout(txnTimeout))...)
	if err != nil {
		return err
	}
	if err := k.create(ctx, cl); err != nil {
		cl.Close()
		return err
	}
	k.tcl, k.tepoch = cl, epoch
	return nil
}

// txn writes recs in a transaction and commits it, unless the write's
// context (its lease) ended meanwhile; on failure the transaction is
// aborted (the writer closed if that fails too: the next write starts a
// new one, and the broker aborts the open transaction).
func (k *kafkaChannel) txn(ctx context.Context, recs []*kgo.Record, beforeCommit func()) error {
	if err := k.tcl.BeginTransaction(); err != nil {
		k.closeTxn()
		return err
	}
	err := k.tcl.ProduceSync(ctx, recs...).FirstErr()
	if err == nil && beforeCommit != nil {
		beforeCommit()
	}
	if err == nil {
		err = context.Cause(ctx) // the lease ran out: no commit
	}
	// Ending a transaction is never cut short (franz-go: its outcome
	// would be unknown); bounded apart from the lease.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnTimeout)
	defer cancel()
	if err == nil {
		if err = k.tcl.EndTransaction(ectx, kgo.TryCommit); err == nil {
			return nil
		}
	}
	_ = k.tcl.AbortBufferedRecords(ectx) // the abort below says
	if aerr := k.tcl.EndTransaction(ectx, kgo.TryAbort); aerr != nil {
		k.closeTxn()
	}
	return err
}

func (k *kafkaChannel) closeTxn() {
	if k.tcl != nil {
		k.tcl.Close()
		k.tcl = nil
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
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, k.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("lease state topic %q: end offset: %w", k.topic, err)
	}
	end := int64(0)
	ends.Each(func(o kadm.ListedOffset) { end = max(end, o.Offset) })
	done := end == 0
	if done {
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
				if !done && r.Offset+1 >= end {
					done = true
					synced()
				}
				return
			}
			var v []byte
			if len(r.Value) > 0 {
				v = r.Value
			}
			f(string(r.Key), v)
			if !done && r.Offset+1 >= end {
				done = true
				synced()
			}
		})
	}
}

// Close closes the writers. Idempotent.
func (k *kafkaChannel) Close() {
	k.tmu.Lock()
	k.closeTxn()
	k.tmu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		k.cl.Close()
		k.cl = nil
	}
}
