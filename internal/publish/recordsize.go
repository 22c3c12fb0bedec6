package publish

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RecordSizes measures, per topic, the bytes one record costs on the
// brokers: the growth of the topic's log on disk (DescribeLogDirs) over the
// growth of its end offsets (ListOffsets), between calls to Measure. That
// is the record with its batch's framing (a 61-byte header shared by the
// records of a batch), as the producers batch them, which a configured
// guess cannot know.
//
// A topic is sized from its first reading on: the first call that sees
// it reads the newest records (at most SampleRecords) of its partition
// with the highest end offset and takes their batches' bytes over their
// offsets, the same measure as the log's growth, as its first round. A
// daemon that starts, or a replica that takes over leading, knows a
// topic's size at its first publish, not at the first one after
// MinRecords new records were written: the lost leader's measure was
// never read, and DefaultBytesPerMessage, a guess, made the first client
// quotas several times too high for records of a hundred or two bytes.
//
// A partition whose log shrank (retention, compaction) or whose end
// offset went back since the last call is left out of that round. Old
// rounds fade: a round that measured at least MinRecords records weighs
// as much as all the rounds before it (they keep the weight Fade), so
// the size follows the producers' batching and compression within a few
// calls; past MaxRecords accumulated records, the totals are halved. Not
// safe for concurrent use.
type RecordSizes struct {
	// Now is the clock that dates readings for Rate; NewRecordSizes sets
	// time.Now.
	Now       func() time.Time
	adm       *kadm.Client
	opts      []kgo.Opt
	last      map[string]map[int32]logPoint
	acc       map[string]*sizeAcc
	rate      map[string]float64 // records per second between the last two readings
	producers map[string]*producerState
	at        map[string]time.Time
	rounds    int
}

type logPoint struct{ size, end int64 }

type sizeAcc struct {
	bytes, records float64
	// sampled records and batches read from partition tails
	sampledRecords, sampledBatches float64
	// sampleFailed: the last sample read nothing (see SampleEvery)
	sampleFailed bool
}

// Thresholds of RecordSizes: a topic's size is known once MinRecords new
// records were measured; past MaxRecords the totals are halved.
const (
	MinRecords = 100
	MaxRecords = 100_000
)

// Fade is the weight RecordSizes keeps for what it measured before a
// round of at least MinRecords records. A record costs the broker what
// its batch costs over the records in it, and that moves with the
// producers' state: a producer Kafka throttles sends what it buffered
// meanwhile in one large batch, which compresses far better (franz-go
// and Java compress batches by default) than the one or two records of
// an unthrottled request handler's batch; a byte quota computed from the
// old size would let several times the records granted through.
const Fade = 0.5

// SampleEvery is how often, in calls to Measure, RecordSizes reads the
// newest records of a grown partition of each topic (at most
// SampleRecords of them) to count the records per batch, the newest
// sample replacing the one before (batching moves with the producers'
// state, see Fade); a topic without a sample is sampled at the next call
// that sees it grow, unless its last sample read nothing (a tail the
// client may not read, or out of reach within SampleTimeout): that one
// waits for the next SampleEvery-th call.
const (
	SampleEvery   = 5
	SampleRecords = 200
)

// SampleTimeout bounds the samples of one call to Measure, all topics'
// together.
const SampleTimeout = 5 * time.Second

// RequestFraming is the bytes a Produce request carries besides its record
// batch and the names of its client-id and topic (size, header, acks,
// timeout, array lengths, partition index, tags), as Kafka 4 charges it to
// a producer's quota; one request per batch is assumed, the case of a
// producer sending synchronously.
const RequestFraming = 30

// NewRecordSizes measures with cl; the tail samples are read by clients
// built from cl's options (its brokers, TLS and SASL).
func NewRecordSizes(cl *kgo.Client) *RecordSizes {
	return &RecordSizes{Now: time.Now, adm: kadm.NewClient(cl), opts: cl.Opts(), last: map[string]map[int32]logPoint{}, acc: map[string]*sizeAcc{},
		rate: map[string]float64{}, producers: map[string]*producerState{}, at: map[string]time.Time{}}
}

// BusiestSlack is how much longer than a quota window [RecordSizes.Busiest]
// looks back: a Kafka quota sample starts at a client's first record after
// the one before ended, not on the second, and a reading dates what a
// producer wrote up to a second late, so bytes stay in the broker's window
// longer than the window's span after the reading that saw them. On Kafka
// 4.3.1 a bound over the span alone fell from 23 to 3 kB/s while the
// broker's window still held a producer's burst, which it then held 43 s.
const BusiestSlack = 2 * time.Second

// Busiest returns the records per second the busiest single producer of
// topic sent over the last span (the records it wrote in the last span
// and BusiestSlack, per second of span), as the brokers' producer state tells
// (DescribeProducers: an idempotent or transactional producer's last
// sequence number on a partition grows by the records it wrote), and
// whether it is known: two readings that saw the topic's producers, the
// last one successful (a broker that refuses the request leaves it
// unknown; producers that are neither idempotent nor transactional are
// not described). Over a span longer than the readings cover, the rate
// over what they cover. A producer is one producer ID: a client-id that
// several processes share sends the sum of theirs.
func (r *RecordSizes) Busiest(topic string, span time.Duration) (float64, bool) {
	ps, ok := r.producers[topic]
	if !ok || ps.since.IsZero() || !ps.at.After(ps.since) {
		return 0, false
	}
	from := ps.at.Add(-span - BusiestSlack)
	covered := span
	if ps.since.After(from) {
		from, covered = ps.since, min(span, ps.at.Sub(ps.since))
	}
	var top float64
	for _, ss := range ps.sent {
		var n float64
		for _, x := range ss {
			if x.at.After(from) {
				n += x.records
			}
		}
		top = max(top, n)
	}
	return top / covered.Seconds(), true
}

// Rate returns the records per second topic's end offsets grew by between
// the last two readings that saw it (the rate every producer together
// sent, unsmoothed: a producer that starts or bursts shows at once), and
// whether two readings saw it.
func (r *RecordSizes) Rate(topic string) (float64, bool) {
	v, ok := r.rate[topic]
	return v, ok
}

// Measure takes one reading of topics' log sizes and end offsets and adds
// the growth since the last reading. A replica's size is the largest any
// broker reports for the partition (the leader's, usually). It returns
// the first request error; a topic missing from an answer is skipped.
func (r *RecordSizes) Measure(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	// End offsets first: they name the partitions to describe (a
	// DescribeLogDirs topic without partitions describes none).
	ends, err := r.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	// The end offsets' time, for Rate: not the time after the tail
	// samples below, which would count their time as the topics'.
	at := r.Now()
	set := kadm.TopicsSet{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			set.Add(o.Topic, o.Partition)
		}
	})
	if len(set) == 0 {
		return nil
	}
	producers, perr := r.adm.DescribeProducers(ctx, set)
	dirs, err := r.adm.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return fmt.Errorf("describe log dirs: %w", err)
	}
	sizes := map[string]map[int32]int64{}
	for _, broker := range dirs {
		broker.EachPartition(func(p kadm.DescribedLogDirPartition) {
			if p.IsFuture {
				return
			}
			if sizes[p.Topic] == nil {
				sizes[p.Topic] = map[int32]int64{}
			}
			sizes[p.Topic][p.Partition] = max(sizes[p.Topic][p.Partition], p.Size)
		})
	}
	// The samples of one call share SampleTimeout: a publish is not held
	// for it once per topic whose tail cannot be read.
	sctx, cancel := context.WithTimeout(ctx, SampleTimeout)
	defer cancel()
	for _, topic := range topics {
		now := map[int32]logPoint{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic != topic || o.Err != nil {
				return
			}
			if s, ok := sizes[topic][o.Partition]; ok {
				now[o.Partition] = logPoint{size: s, end: o.Offset}
			}
		})
		if len(now) == 0 {
			continue
		}
		a := r.acc[topic]
		if a == nil {
			a = &sizeAcc{}
			r.acc[topic] = a
		}
		var grown int32 = -1
		var growth int64
		var bytes, records float64
		for p, cur := range now {
			prev, ok := r.last[topic][p]
			if !ok || cur.size < prev.size || cur.end < prev.end {
				continue
			}
			bytes += float64(cur.size - prev.size)
			records += float64(cur.end - prev.end)
			if d := cur.end - prev.end; d > growth {
				grown, growth = p, d
			}
		}
		if records >= MinRecords {
			a.bytes, a.records = a.bytes*Fade, a.records*Fade
		}
		a.bytes += bytes
		a.records += records
		if a.records > MaxRecords {
			a.bytes, a.records = a.bytes/2, a.records/2
		}
		r.sampleTail(sctx, topic, a, now, grown)
		prevAt, seen := r.at[topic]
		if seen && at.After(prevAt) {
			r.rate[topic] = records / at.Sub(prevAt).Seconds()
		}
		r.readProducers(topic, producers, perr, prevAt, seen && at.After(prevAt), at)
		r.at[topic] = at
		r.last[topic] = now
	}
	r.rounds++
	return nil
}

// sampleTail reads the tail of one of topic's partitions (now, this
// call's readings; grown, the partition that grew most since the last
// call, or -1) into a when it is time to: on a topic's first reading, to
// size it at once (the partition with the highest end offset, its last
// SampleRecords records, which count as a round); on the first growth of
// a topic without a sample, and every SampleEvery calls, to count the
// records per batch (the records the partition grew by, at most
// SampleRecords). A failed sample is not retried before the next
// SampleEvery-th call: each attempt can take SampleTimeout of the publish
// (and none is made once the earlier ones took it).
func (r *RecordSizes) sampleTail(ctx context.Context, topic string, a *sizeAcc, now map[int32]logPoint, grown int32) {
	if ctx.Err() != nil {
		return
	}
	p, from, first := grown, int64(0), r.last[topic] == nil
	switch {
	case first:
		var end int64
		for q, pt := range now {
			if pt.end > end || (pt.end == end && q < p) {
				p, end = q, pt.end
			}
		}
		if end == 0 {
			return // nothing written yet
		}
		from = max(end-SampleRecords, 0)
	case grown >= 0 && ((a.sampledBatches == 0 && !a.sampleFailed) || r.rounds%SampleEvery == 0):
		from = max(now[grown].end-SampleRecords, r.last[topic][grown].end)
	default:
		return
	}
	tl := r.sample(ctx, topic, p, from, now[p].end)
	a.sampleFailed = tl.batches == 0
	if tl.batches > 0 {
		// The newest sample replaces the ones before: batching moves
		// with the producers' state (see Fade).
		a.sampledRecords, a.sampledBatches = tl.records, tl.batches
	}
	if first && tl.offsets > 0 {
		// The first round: the growth of the log up to its tail.
		a.bytes += tl.bytes
		a.records += tl.offsets
	}
}

// RecordBatchOverhead is the bytes of a Kafka record batch (magic 2)
// besides its records: the log stores each batch with this header.
const RecordBatchOverhead = 61

// batchCounter counts the batches a client reads, their records (markers
// included) and their bytes as the log stores them.
type batchCounter struct{ records, batches, bytes atomic.Int64 }

func (b *batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	b.records.Add(int64(m.NumRecords))
	b.batches.Add(1)
	b.bytes.Add(int64(m.CompressedBytes + RecordBatchOverhead))
}

// tail is what a sample read: the records and batches producers wrote
// (transaction markers left out), and the bytes and offsets of every batch
// read, markers included (the log's growth counts them too: its bytes
// over its offsets are the measure of RecordSizes).
type tail struct{ records, batches, bytes, offsets float64 }

// sample reads partition p of topic from offset from up to end (until ctx
// is done) and returns what it read. A failed read counts nothing.
// Transaction markers (control batches of one control record each,
// written by the broker, charged to no producer) are read, so that a
// transactional topic's tail, which ends with one, is read to its end,
// and left out of the records and batches. The first batch may begin
// before from: it is counted whole.
func (r *RecordSizes) sample(ctx context.Context, topic string, p int32, from, end int64) tail {
	if from >= end || len(r.opts) == 0 {
		return tail{}
	}
	var n batchCounter
	cl, err := kgo.NewClient(append(slices.Clip(r.opts), kgo.WithHooks(&n), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}))...)
	if err != nil {
		return tail{}
	}
	defer cl.Close()
	last, control := int64(-1), int64(0)
	for last < end-1 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			last = max(last, rec.Offset)
			if rec.Attrs.IsControl() {
				control++
			}
		})
	}
	if last < end-1 {
		return tail{}
	}
	return tail{records: float64(n.records.Load() - control), batches: float64(n.batches.Load() - control),
		bytes: float64(n.bytes.Load()), offsets: float64(n.records.Load())}
}

// Charged returns the bytes a Kafka broker charges to clientID's
// producer_byte_rate for one record on topic: the record's share of the
// log ([RecordSizes.PerRecord]) plus its share of a Produce request's
// framing, RequestFraming plus the client-id and topic names, over the
// records per batch sampled (one, until a sample was read). ok is
// PerRecord's.
func (r *RecordSizes) Charged(topic, clientID string) (bytes float64, ok bool) {
	b, ok := r.PerRecord(topic)
	if !ok {
		return 0, false
	}
	perBatch := 1.0
	if a := r.acc[topic]; a.sampledBatches > 0 {
		perBatch = max(a.sampledRecords/a.sampledBatches, 1)
	}
	return b + float64(RequestFraming+len(clientID)+len(topic))/perBatch, true
}

// PerRecord returns topic's measured bytes per record, and whether at
// least MinRecords records were measured, the tail read at the topic's
// first reading included (if not, it returns 0, false).
func (r *RecordSizes) PerRecord(topic string) (float64, bool) {
	a := r.acc[topic]
	if a == nil || a.records < MinRecords || a.bytes <= 0 {
		return 0, false
	}
	return a.bytes / a.records, true
}

// producerPart is one producer (its ID) on one partition.
type producerPart struct {
	id        int64
	partition int32
}

type producerSeq struct {
	epoch int16
	seq   int32
	at    int64 // the producer's last write, ms since the epoch
}

// producerState is what RecordSizes remembers of a topic's producers:
// their last sequences, and the records each wrote between readings
// (the readings since since, at most ProducerMemory back).
type producerState struct {
	seqs      map[producerPart]producerSeq
	sent      map[int64][]producerSent // by producer ID
	since, at time.Time
}

type producerSent struct {
	at      time.Time
	records float64
}

// ProducerMemory is how far back RecordSizes keeps what each producer
// wrote: more than a Kafka quota window (11 s by default).
const ProducerMemory = time.Minute

// readProducers takes, from one DescribeProducers answer (ps, err), the
// records each producer wrote to topic since the last reading, at prev
// (ok: there was one), dated at. A producer's last sequence on a
// partition grows by the records it wrote; one not described at the last
// reading, or under a new epoch, that wrote since starts at sequence 0;
// a producer's epochs count as one producer. A sequence that went back
// within an epoch (a wrap) counts nothing. A failed request forgets the topic's
// producers: Busiest is unknown until two readings succeed again.
func (r *RecordSizes) readProducers(topic string, ps kadm.DescribedProducersTopics, err error, prev time.Time, ok bool, at time.Time) {
	if err != nil {
		delete(r.producers, topic)
		return
	}
	cur := map[producerPart]producerSeq{}
	if t, found := ps[topic]; found {
		for _, p := range t.Partitions {
			if p.Err != nil {
				continue
			}
			for _, d := range p.ActiveProducers {
				cur[producerPart{d.ProducerID, d.Partition}] = producerSeq{d.ProducerEpoch, d.LastSequence, d.LastTimestamp}
			}
		}
	}
	st := r.producers[topic]
	if st == nil || !ok {
		r.producers[topic] = &producerState{seqs: cur, sent: map[int64][]producerSent{}, at: at}
		return
	}
	wrote := map[int64]float64{}
	for k, c := range cur {
		was, found := st.seqs[k]
		switch {
		case found && c.epoch == was.epoch && c.seq >= was.seq:
			wrote[k.id] += float64(c.seq - was.seq)
		case (!found || c.epoch != was.epoch) && c.at >= prev.UnixMilli():
			// New on the partition, or a new epoch (franz-go bumps it
			// after failed records): its sequence started at 0.
			wrote[k.id] += float64(c.seq) + 1
		}
	}
	if st.since.IsZero() {
		st.since = st.at
	}
	st.seqs, st.at = cur, at
	st.since = later(st.since, at.Add(-ProducerMemory))
	for id, n := range wrote {
		st.sent[id] = append(st.sent[id], producerSent{at, n})
	}
	for id, ss := range st.sent {
		for len(ss) > 0 && !ss[0].at.After(st.since) {
			ss = ss[1:]
		}
		if len(ss) == 0 {
			delete(st.sent, id)
			continue
		}
		st.sent[id] = ss
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
