package producerclient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// AvoidPartitioner wraps a franz-go partitioner so that records without a
// key skip the partitions their topic's lease says to avoid (signal
// avoid-partitions): a few lagging partitions get no new keyless work
// while the others take it. An avoided partition the lease gives a share
// (Quota.PartitionShares, protocol 1.1: what its consumer drains, over the
// topic's produce rate) gets that share of the keyless records instead of
// none, drawn record by record (not in runs), so a slow partition is fed
// about what its consumer drains. Records with a key, and records the base
// partitioner must place consistently, keep their partition: moving them
// would break per-key ordering (the producer refuses a keyed record bound
// for an avoided partition instead, see PartitionBusyError). A run of
// keyless records on one partition lasts at most maxRun (25 ms) of their
// timestamps (franz-go's default partitioner stays until 64 KiB went to
// the partition; see bounded).
//
// Build the client with KafkaClientOpts (which installs one) and hand it
// to NewKafka, which connects the partitioner to the producer's leases.
// Until then, and after the producer's Close, it behaves exactly as base.
// One AvoidPartitioner serves one producer. Safe for concurrent use (the
// avoid list is read with one atomic load per record).
//
// franz-go does not hand a partitioner partition numbers: it asks for an
// index into the partitions it may write now, those with a leader (all of
// them when none has one). While every partition has a leader the index
// is the partition number. While some are leaderless, the partitioner
// rebuilds the list from the client's cached metadata (no request) and
// avoids by it; should a metadata update land between franz-go's choice
// of list and that rebuild, a record may still land on an avoided
// partition. With kgo.RackAwarePartitioning, franz-go may restrict the
// list to the partitions led in its rack, which the partitioner cannot
// see: when the list is not one it can rebuild, records keep base's
// choice, so avoid-partitions is not honoured there. The records produced
// to a topic before the client first loaded its metadata are placed
// before the client stores it: for them the index is read as the
// partition, which is wrong if some partition is leaderless just then.
type AvoidPartitioner struct {
	base kgo.Partitioner
	b    atomic.Pointer[avoidBinding]
	// keyed holds a *keyedTopic per topic (see keyedPartition).
	keyed sync.Map
}

// keyedTopic is what an AvoidPartitioner knows of one topic for placing
// keyed records ahead of franz-go: the partition count franz-go last
// partitioned a record of it over that must be placed consistently (0:
// none yet), and a partitioner of base's own for the topic, whose methods
// are not safe for concurrent use (mu).
type keyedTopic struct {
	n  atomic.Int32
	mu sync.Mutex
	tp kgo.TopicPartitioner
}

func (a *AvoidPartitioner) keyedOf(topic string) *keyedTopic {
	if kt, ok := a.keyed.Load(topic); ok {
		return kt.(*keyedTopic)
	}
	kt, _ := a.keyed.LoadOrStore(topic, new(keyedTopic))
	return kt.(*keyedTopic)
}

// keyedPartition returns the partition franz-go will place r, a record of
// topic with a key, on: base's choice for a record it must place
// consistently (franz-go's default partitioner: the murmur2 hash of the
// key over all the topic's partitions, as Kafka's Java client), over the
// partition count franz-go last used for such a record of the topic, or,
// before it placed one, the count in the client's cached metadata (see
// cachedCount). ok is false when neither is known, or base does not place
// r by its key. Should the topic grow partitions, the records checked
// before franz-go places one over the new count are checked against the
// old one.
func (a *AvoidPartitioner) keyedPartition(topic string, r *kgo.Record) (int32, bool) {
	kt := a.keyedOf(topic)
	n := int(kt.n.Load())
	if n <= 0 {
		if n = a.cachedCount(topic); n <= 0 {
			return -1, false
		}
	}
	kt.mu.Lock()
	defer kt.mu.Unlock()
	if kt.tp == nil {
		kt.tp = a.base.ForTopic(topic)
	}
	if !kt.tp.RequiresConsistency(r) {
		return -1, false
	}
	var i int
	if bp, ok := kt.tp.(kgo.TopicBackupPartitioner); ok {
		i = bp.PartitionByBackup(r, n, &noBackup{n: n})
	} else {
		i = kt.tp.Partition(r, n)
	}
	if i < 0 || i >= n {
		return -1, false
	}
	return int32(i), true
}

// partitionCount is how many partitions of topic keyed records are placed
// over: the count franz-go last used for one, else the client's cached
// metadata's; 0 when neither is known.
func (a *AvoidPartitioner) partitionCount(topic string) int {
	if n := int(a.keyedOf(topic).n.Load()); n > 0 {
		return n
	}
	return a.cachedCount(topic)
}

// maxCachedCount bounds cachedCount's walk.
const maxCachedCount = 1 << 16

// cachedCount is how many partitions of topic the client's cached
// metadata holds (PartitionLeader reads the cache, no request): the first
// partition number it knows nothing of, leaderless partitions (which come
// with their error) included. 0 when the topic is not loaded or its last
// load failed (PartitionLeader then answers every partition number it
// does not hold with that error, which cannot be told from a leaderless
// partition's).
func (a *AvoidPartitioner) cachedCount(topic string) int {
	b := a.b.Load()
	if b == nil {
		return 0
	}
	if _, _, err := b.cl.PartitionLeader(topic, math.MaxInt32); err != nil {
		return 0
	}
	n := 0
	for ; n < maxCachedCount; n++ {
		if leader, _, err := b.cl.PartitionLeader(topic, int32(n)); leader == -1 && err == nil {
			break
		}
	}
	return n
}

// noBackup is a kgo.TopicBackupIter over n partitions with nothing
// buffered: a consistent placement does not look at it.
type noBackup struct{ i, n int }

func (b *noBackup) Next() (int, int64) {
	b.i++
	return b.i - 1, 0
}

func (b *noBackup) Rem() int { return b.n - b.i }

// PartitionBusyError is the cause ([RejectError].Err) of a keyed Kafka
// record the producer refused because its key sends it to a partition
// its topic's lease says to avoid (signal avoid-partitions): that
// partition's consumer is late, the topic's other partitions are fine. The
// RejectError's Signal is SignalAvoidPartitions (errors.Is(err,
// ErrAvoidPartitions)); errors.As finds the PartitionBusyError. The record
// was not sent and took no token. Only keyed records placed by their key
// are refused this way; keyless records go to another partition instead
// (see AvoidPartitioner), and the rest of the topic is not slowed down.
// The partition is listed until its consumer is back inside the deadline
// for a few observations ([Quota].AvoidPartitions shows the list); the
// RejectError's RetryAfter is the lease's hint, 0 when it gives none.
type PartitionBusyError struct {
	// Topic is the record's topic.
	Topic string
	// Partition is the partition its key sends it to.
	Partition int32
}

// Error says which partition is busy.
func (e *PartitionBusyError) Error() string {
	return fmt.Sprintf("producerclient: partition %d of %s is late (the lease says to avoid it); the topic's other partitions are not", e.Partition, e.Topic)
}

// Unwrap returns ErrAvoidPartitions.
func (e *PartitionBusyError) Unwrap() error { return ErrAvoidPartitions }

// avoidBinding is the producer an AvoidPartitioner serves: its leases, and
// the client whose metadata says which partitions franz-go may write.
type avoidBinding struct {
	c  *core
	cl *kgo.Client
}

// NewAvoidPartitioner wraps base; nil means franz-go's default partitioner
// (kgo.UniformBytesPartitioner(64KiB, true, true, nil)).
func NewAvoidPartitioner(base kgo.Partitioner) *AvoidPartitioner {
	if base == nil {
		base = kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	}
	return &AvoidPartitioner{base: base}
}

func (a *AvoidPartitioner) attach(c *core, cl *kgo.Client) bool {
	return a.b.CompareAndSwap(nil, &avoidBinding{c: c, cl: cl})
}

func (a *AvoidPartitioner) detach(c *core) {
	if b := a.b.Load(); b != nil && b.c == c {
		a.b.CompareAndSwap(b, nil)
	}
}

// ForTopic implements kgo.Partitioner. The returned partitioner has the
// same optional extensions (OnNewBatch, PartitionByBackup) as base's.
func (a *AvoidPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	tp := a.base.ForTopic(topic)
	at := avoidTopic{a: a, topic: topic, base: tp, kt: a.keyedOf(topic)}
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
	t  *topic
	b  *avoidBinding
	kt *keyedTopic
	// The keyless run in progress (see bounded): base's choice, the
	// partition count, the index given and the timestamp it was given
	// from; order is the cycle the runs go through, and runIdx the
	// position of runPick in it.
	runBase, runN, runPick, runIdx int
	runAt                          time.Time
	order                          []int
	// writable is scratch space for the rebuilt list of writable
	// partitions (see mapping).
	writable []int32
}

func (t *avoidTopic) RequiresConsistency(r *kgo.Record) bool { return t.base.RequiresConsistency(r) }

func (t *avoidTopic) Partition(r *kgo.Record, n int) int {
	return t.redirect(r, t.base.Partition(r, n), n)
}

// redirect places a keyless record of a bound producer: base's sticky run
// ended after maxRun (bounded), and off an avoided partition. i is base's
// choice among the n partitions franz-go offers, an index into its list of
// writable partitions. It returns a random index whose partition is not
// avoided (i itself when all are, or when the list cannot be known).
func (t *avoidTopic) redirect(r *kgo.Record, i, n int) int {
	if t.base.RequiresConsistency(r) {
		// Placed over all the topic's partitions: note how many, for
		// keyedPartition.
		if int(t.kt.n.Load()) != n {
			t.kt.n.Store(int32(n))
		}
		return i
	}
	if r.Key != nil || n <= 1 || t.a.b.Load() == nil {
		return i
	}
	i = t.bounded(r, i, n)
	avoid, shares := t.avoided()
	if len(avoid) == 0 {
		return i
	}
	parts, ok := t.mapping(n)
	if !ok {
		return i
	}
	part := func(k int) int {
		if parts == nil {
			return k
		}
		return int(parts[k])
	}
	if j, ok := shared(shares, parts, n); ok {
		return j
	}
	if !contains(avoid, part(i)) {
		return i
	}
	start := rand.IntN(n)
	for k := 0; k < n; k++ {
		j := (start + k) % n
		if !contains(avoid, part(j)) {
			return j
		}
	}
	return i
}

// maxRun is how long a run of keyless records may stay on one partition,
// by the records' timestamps (see bounded): 2.5 times franz-go's default
// linger (kgo.ProducerLinger, 10ms), so that a run still fills its
// batches, and short enough that a partition's records come about evenly
// (a run every 150 ms of six partitions).
const maxRun = 25 * time.Millisecond

// bounded ends base's sticky runs of keyless records after maxRun: i is
// base's choice among n; while base stays on it, the records go to the
// partition given last, and, once that one has taken records for maxRun,
// to the next in a cycle of the n (a random order, drawn once per
// partition count), so that each partition gets one run in every n.
// franz-go's default partitioner stays on a partition until 64 KiB went
// to it: at a few hundred small records a second that is seconds of
// records on one partition, which a slow consumer of that partition (one
// the daemon has not seen late yet, or one freed from avoidance on
// probation) turns into a backlog far past the deadline before any lease
// can say to avoid it. Bounded by time, a run holds what the producer
// sends in maxRun; drawn at random, the next run went to the same
// partition as the one before last one time in n-1, and a partition that
// had just slowed down got two runs within 0.3 s (lagbridge bench
// --hot-partition on kfake: 57 records, 2.9 s of its consumer's work,
// before the daemon could list it). In runs of 100 ms through the cycle,
// a partition took 30 records at once, and the next 30 0.6 s later: one
// whose consumer had slowed to 20 msg/s was listed 0.85 s after its
// slowdown, by when the second run's last records waited more than 2 s
// (lagbridge bench --hot-partition --hot-interval 250ms on kfake); in
// runs of 25 ms it gets its 50 msg/s about evenly, and its backlog
// reaches 2 s of its work 1.3 s after its slowdown, not 0.6 s
// (TestKafkaKeylessRunsSmooth). Batching is
// unchanged while runs outlast the linger (kgo.ProducerLinger, 10ms by
// default) or fill 64 KiB first, which they do at any rate where batches
// fill. Records without a timestamp start a new run with base's choice
// (the SDK stamps every record it sends without one), and so do
// timestamps that go back further than maxRun (a record stamped a little
// before the run started, from concurrent callers, joins it).
func (t *avoidTopic) bounded(r *kgo.Record, i, n int) int {
	ts := r.Timestamp
	switch {
	case ts.IsZero():
		return i
	case i != t.runBase || n != t.runN || ts.Before(t.runAt.Add(-maxRun)):
		if len(t.order) != n {
			t.order = rand.Perm(n)
		}
		t.runBase, t.runN, t.runPick, t.runAt = i, n, i, ts
		t.runIdx = max(slices.Index(t.order, i), 0)
	case ts.Sub(t.runAt) >= maxRun:
		t.runIdx = (t.runIdx + 1) % n
		t.runPick, t.runAt = t.order[t.runIdx], ts
	}
	return t.runPick
}

// mapping returns the partition numbers of the n partitions franz-go
// offers the partitioner, index by index: nil when index k is partition k,
// and ok false when the list cannot be known.
//
// franz-go offers the topic's writable partitions (those whose metadata
// has no error, so with a leader), in partition order, or all of them
// when none is writable, or (kgo.RackAwarePartitioning) the writable ones
// led in the client's rack. It read that list before calling the
// partitioner, and a topic's partitions only ever grow in the client's
// metadata (a partition missing from a later response is kept), so when
// the client knows partitions 0 to n-1 and no partition n now, the topic
// had n partitions when franz-go chose and the n it offered are all of
// them: index k is partition k. (The one exception to "read before" is
// the topic's first metadata: the records produced before it arrived are
// placed before it is stored, when the cache has no partition yet; the
// index is then taken as the partition, which is right unless a partition
// is leaderless at that moment.) Otherwise the writable partitions are rebuilt from the
// client's cache (PartitionLeader reads it without a request); when there
// are n of them they are the list offered (a rack subset of the same size
// is the same list). That rebuild costs one cache read per partition, and
// happens only for keyless records under an avoid list while some
// partition is leaderless.
func (t *avoidTopic) mapping(n int) ([]int32, bool) {
	cl := t.b.cl
	if leader, _, _ := cl.PartitionLeader(t.topic, int32(n)); leader == -1 {
		if last, _, _ := cl.PartitionLeader(t.topic, int32(n-1)); last != -1 {
			return nil, true // exactly n partitions: the list is all of them
		}
		if first, _, _ := cl.PartitionLeader(t.topic, 0); first == -1 {
			// None known: the client is placing the records produced
			// before its first metadata of the topic, which it stores
			// only afterwards. Nothing tells the list; it is all
			// partitions unless some are leaderless at that moment.
			return nil, true
		}
		return nil, false // fewer than n known: not the list franz-go read
	}
	t.writable = t.writable[:0]
	for k := int32(0); ; k++ {
		leader, _, err := cl.PartitionLeader(t.topic, k)
		if leader == -1 {
			break // past the last partition
		}
		if err == nil && leader >= 0 {
			t.writable = append(t.writable, k)
		}
	}
	if len(t.writable) != n {
		return nil, false
	}
	return t.writable, true
}

// avoided returns the partitions to avoid now and the keyless shares of
// some of them, caching the topic state.
func (t *avoidTopic) avoided() ([]int32, []quotaproto.PartitionShare) {
	b := t.a.b.Load()
	if b == nil {
		return nil, nil
	}
	if t.b != b || t.t == nil {
		t.b, t.t = b, (*b.c.topics.Load())[t.topic]
		if t.t == nil {
			return nil, nil
		}
	}
	v := t.t.view.Load()
	if v.advisory {
		return nil, nil
	}
	return v.avoid, v.shares
}

// shared draws whether a keyless record goes to one of the avoided
// partitions that keep a share (shares, see validShares): partition p with
// probability its share, one record at a time, so that a slow partition
// is fed about what its consumer drains, spread out rather than in runs.
// It returns p's index among the n franz-go offers (parts: their
// partitions, nil when index k is partition k); ok is false when the draw
// picks none, or a partition not offered now.
func shared(shares []quotaproto.PartitionShare, parts []int32, n int) (int, bool) {
	if len(shares) == 0 {
		return 0, false
	}
	u, sum := rand.Float64(), 0.0
	for _, s := range shares {
		if sum += s.Share; u >= sum {
			continue
		}
		if parts == nil {
			return int(s.Partition), int(s.Partition) < n
		}
		k := slices.Index(parts, s.Partition)
		return k, k >= 0
	}
	return 0, false
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
