package producerclient

import (
	"math/rand/v2"
	"sort"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// AvoidPartitioner wraps a franz-go partitioner so that records without a
// key skip the partitions their topic's lease says to avoid (signal
// avoid-partitions): a few lagging partitions get no new keyless work
// while the others take it. Records with a key, and records the base
// partitioner must place consistently, keep their partition: moving them
// would break per-key ordering.
//
// Build the client with KafkaClientOpts (which installs one) and hand it
// to NewKafka, which connects the partitioner to the producer's leases.
// Until then, and after the producer's Close, it behaves exactly as base.
// One AvoidPartitioner serves one producer. Safe for concurrent use (the
// avoid list is read with one atomic load per record).
type AvoidPartitioner struct {
	base kgo.Partitioner
	c    atomic.Pointer[core]
}

// NewAvoidPartitioner wraps base; nil means franz-go's default partitioner
// (kgo.UniformBytesPartitioner(64KiB, true, true, nil)).
func NewAvoidPartitioner(base kgo.Partitioner) *AvoidPartitioner {
	if base == nil {
		base = kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	}
	return &AvoidPartitioner{base: base}
}

func (a *AvoidPartitioner) attach(c *core) bool { return a.c.CompareAndSwap(nil, c) }
func (a *AvoidPartitioner) detach(c *core)      { a.c.CompareAndSwap(c, nil) }

// ForTopic implements kgo.Partitioner. The returned partitioner has the
// same optional extensions (OnNewBatch, PartitionByBackup) as base's.
func (a *AvoidPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	tp := a.base.ForTopic(topic)
	at := avoidTopic{a: a, topic: topic, base: tp}
	_, nb := tp.(kgo.TopicPartitionerOnNewBatch)
	_, bk := tp.(kgo.TopicBackupPartitioner)
	switch {
	case nb && bk:
		return &avoidTopicNBBK{avoidTopicBK{at}}
	case bk:
		return &avoidTopicBK{at}
	case nb:
		return &avoidTopicNB{at}
	}
	return &at
}

type avoidTopic struct {
	a     *AvoidPartitioner
	topic string
	base  kgo.TopicPartitioner
	// t caches the producer's state of topic (franz-go calls a topic's
	// partitioner from one goroutine at a time).
	t *topic
	c *core
}

func (t *avoidTopic) RequiresConsistency(r *kgo.Record) bool { return t.base.RequiresConsistency(r) }

func (t *avoidTopic) Partition(r *kgo.Record, n int) int {
	return t.redirect(r, t.base.Partition(r, n), n)
}

// redirect moves a keyless record off an avoided partition i to a random
// partition that is not avoided (i itself when all are).
func (t *avoidTopic) redirect(r *kgo.Record, i, n int) int {
	if r.Key != nil || n <= 1 {
		return i
	}
	avoid := t.avoided()
	if len(avoid) == 0 || !contains(avoid, i) || t.base.RequiresConsistency(r) {
		return i
	}
	start := rand.IntN(n)
	for k := 0; k < n; k++ {
		j := (start + k) % n
		if !contains(avoid, j) {
			return j
		}
	}
	return i
}

// avoided returns the partitions to avoid now, caching the topic state.
func (t *avoidTopic) avoided() []int32 {
	c := t.a.c.Load()
	if c == nil {
		return nil
	}
	if t.c != c || t.t == nil {
		t.c, t.t = c, (*c.topics.Load())[t.topic]
		if t.t == nil {
			return nil
		}
	}
	v := t.t.view.Load()
	if v.advisory {
		return nil
	}
	return v.avoid
}

func contains(sorted []int32, i int) bool {
	k := sort.Search(len(sorted), func(k int) bool { return int(sorted[k]) >= i })
	return k < len(sorted) && int(sorted[k]) == i
}

type avoidTopicNB struct{ avoidTopic }

func (t *avoidTopicNB) OnNewBatch() { t.base.(kgo.TopicPartitionerOnNewBatch).OnNewBatch() }

type avoidTopicBK struct{ avoidTopic }

func (t *avoidTopicBK) PartitionByBackup(r *kgo.Record, n int, it kgo.TopicBackupIter) int {
	return t.redirect(r, t.base.(kgo.TopicBackupPartitioner).PartitionByBackup(r, n, it), n)
}

type avoidTopicNBBK struct{ avoidTopicBK }

func (t *avoidTopicNBBK) OnNewBatch() { t.base.(kgo.TopicPartitionerOnNewBatch).OnNewBatch() }
