package bench

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient"
)

// Series is what one run recorded, in bins of Bin from the start of the
// run. Counters are per producer class (index into Scenario.Classes) and
// per bin; the sampled fields hold the daemon's and the SDK's view at the
// end of each bin (NaN when unknown). It is a plain value once the run is
// over; [Analyze] and [Chart] read it.
type Series struct {
	// Bin is the width of one bin.
	Bin time.Duration
	// Offered: messages the producers were asked to send (first tries).
	Offered [][]int64
	// Acked: messages the broker acknowledged (once each, whatever the
	// number of attempts).
	Acked [][]int64
	// Refused: messages the SDK refused before sending them (Drop mode:
	// what does not fit the quota, the lease's stop signal), counted in
	// the bin of the refusal. Always zero for the naive producers.
	Refused [][]int64
	// RefusedAbove: of Refused, the refusals by the SDK's token bucket
	// (producerclient.ErrRateLimited) while the producer's rate in force
	// was at least what its class offers (the run's load times the
	// class's share): the bucket's burst, not the controller's rate.
	RefusedAbove [][]int64
	// Good: messages processed within their deadline; Dead: processed
	// after it (dead work); Skipped: expired messages a ttl guard skipped
	// without processing them. Counted in the bin they were consumed in.
	Good, Dead, Skipped [][]int64
	// HeadAge is the daemon's head age (seconds) of the consumer group,
	// as last observed; Lag its lag (messages). For a consumer that
	// reports what it holds, the daemon's head age is the first record
	// of the poll in hand, up to a poll's work above TrueHeadAge.
	HeadAge, Lag []float64
	// TrueHeadAge is the bench's own measure (seconds) at the end of each
	// bin: the age of the oldest record the broker acknowledged to a
	// producer and the consumers have not processed (or skipped) yet, 0
	// when there is none (see heads). NaN when not measured.
	TrueHeadAge []float64
	// Allowed is the total rate the SDK producers enforce (msg/s; +Inf
	// unlimited; NaN for the naive producers); Decided is the daemon's
	// decision for the target (what lagbridge allows, obeyed or not).
	Allowed, Decided []float64
	// Capacity, Wait and Reason trace the daemon's decision: its
	// capacity estimate (msg/s), the predicted wait of a new message
	// (seconds) and its reason in words.
	Capacity, Wait []float64
	Reason         []string
	// Rule is the name of the rule behind that decision ("" none).
	Rule []string
	// Behind is how late the load generator sent a message at worst in
	// each bin, after the time its schedule said (seconds; 0 on time). It
	// is open loop: a machine that stalls it makes it send late, and the
	// late ones go out together when it resumes.
	Behind []float64
	// ConsumerBehind is how late the consumer let a message go at worst
	// in each bin, after a consumer at its capacity with the same work
	// waiting would have (seconds; 0 on time; see pacer). Measured for
	// the NATS consumers, whose messages say whether more wait in the
	// stream; 0 for the Kafka ones.
	ConsumerBehind []float64
	// Cycles are the times of the daemon's observations of the run's
	// consumer group (when each cycle's readings ended), from the start
	// of the run.
	Cycles []time.Duration
	// Ages is the histogram of the age of processed messages when their
	// processing ended, in buckets of AgeBucket (the last bucket holds
	// everything older).
	Ages []int64
	// Commits are the times, from the start of the run, at which the
	// consumer made its progress visible to the broker: a Kafka commit
	// that returned without error, a NATS ack. One list per committer
	// (a member of the group); none for the consumers whose commits the
	// bench does not see (franz-go's autocommit; see
	// ConsumerKind.recordsCommits).
	Commits [][]time.Duration
}

// AgeBucket is the resolution of Series.Ages.
const AgeBucket = 10 * time.Millisecond

// ageBuckets covers two minutes.
const ageBuckets = 12_001

// Bins is the number of bins.
func (s *Series) Bins() int { return len(s.HeadAge) }

// recorder collects a Series while a run goes on. The counters are atomic
// (producers, ack callbacks and consumers add concurrently); the sampled
// fields are written by the sampler goroutine only and read after it has
// stopped.
type recorder struct {
	start   atomic.Int64 // unix nanoseconds of the run's start; 0 before begin
	bin     time.Duration
	n       int
	offered [][]atomic.Int64
	acked   [][]atomic.Int64
	good    [][]atomic.Int64
	dead    [][]atomic.Int64
	skipped [][]atomic.Int64
	refused [][]atomic.Int64
	// refusedAbove counts Series.RefusedAbove; rateOf (set before the
	// run starts, nil for the naive producers) is a class's rate in
	// force, offer its offered rate.
	refusedAbove [][]atomic.Int64
	rateOf       func(class int) float64
	offer        []float64
	ages         []atomic.Int64
	// heads measures the true head age from the acks and the
	// processing.
	heads heads
	// behind is Series.Behind, consumerBehind Series.ConsumerBehind, in
	// nanoseconds.
	behind, consumerBehind []atomic.Int64
	// Totals the bins do not need.
	attempts, retries, failed, overflow, expired atomic.Int64
	// sampled: written by the sampler, read by the progress printer,
	// under mu.
	mu                             sync.Mutex
	headAge, lag, allowed, decided []float64
	trueHeadAge                    []float64
	capacity, wait                 []float64
	reason, rule                   []string
	cycles                         []time.Duration
	// commits is Series.Commits, under commitMu.
	commitMu sync.Mutex
	commits  [][]time.Duration
}

// committed records that committer (a member of the group, from 0) made
// a commit or an ack at t. Commits before the run's start are not kept.
func (r *recorder) committed(committer int, t time.Time) {
	d, ok := r.elapsed(t)
	if !ok || d < 0 || committer < 0 {
		return
	}
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	for len(r.commits) <= committer {
		r.commits = append(r.commits, nil)
	}
	r.commits[committer] = append(r.commits[committer], d)
}

// setSample records the view at bin i, and the true head age (seconds).
func (r *recorder) setSample(i int, v view, allowed, trueAge float64) {
	r.mu.Lock()
	r.headAge[i], r.lag[i], r.decided[i], r.allowed[i] = v.headAge, v.lag, v.decided, allowed
	r.trueHeadAge[i] = trueAge
	r.capacity[i], r.wait[i], r.reason[i], r.rule[i] = v.capacity, v.wait, v.reason, v.rule
	r.mu.Unlock()
}

// late records a message the load generator sent at created, late after
// its schedule.
func (r *recorder) late(created time.Time, late time.Duration) {
	r.worst(r.behind, created, late)
}

// consumerLate records a message the consumer let go at finished, late
// after its capacity's schedule.
func (r *recorder) consumerLate(finished time.Time, late time.Duration) {
	r.worst(r.consumerBehind, finished, late)
}

// worst raises bins[i] to late for the bin i of t.
func (r *recorder) worst(bins []atomic.Int64, t time.Time, late time.Duration) {
	i := r.index(t)
	if i < 0 {
		return
	}
	for {
		old := bins[i].Load()
		if int64(late) <= old || bins[i].CompareAndSwap(old, int64(late)) {
			return
		}
	}
}

// setCycles records the times of the daemon's observation cycles.
func (r *recorder) setCycles(at []time.Time) {
	start := time.Unix(0, r.start.Load())
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cycles = r.cycles[:0]
	for _, t := range at {
		r.cycles = append(r.cycles, t.Sub(start))
	}
}

// lastSample returns the latest daemon's head age and allowed rate, and
// the latest true head age, sampled before bin i (NaN when none in the ten
// bins before).
func (r *recorder) lastSample(i int) (headAge, allowed, trueAge float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	headAge, allowed, trueAge = math.NaN(), math.NaN(), math.NaN()
	for b := min(i, r.n) - 1; b >= 0 && b >= i-10; b-- {
		if math.IsNaN(trueAge) {
			trueAge = r.trueHeadAge[b]
		}
		if math.IsNaN(headAge) && !math.IsNaN(r.headAge[b]) {
			headAge, allowed = r.headAge[b], r.allowed[b]
		}
	}
	return headAge, allowed, trueAge
}

func newRecorder(classes int, d, bin time.Duration) *recorder {
	n := int((d + bin - 1) / bin)
	r := &recorder{bin: bin, n: n, ages: make([]atomic.Int64, ageBuckets), behind: make([]atomic.Int64, n),
		consumerBehind: make([]atomic.Int64, n)}
	mk := func() [][]atomic.Int64 {
		out := make([][]atomic.Int64, classes)
		for i := range out {
			out[i] = make([]atomic.Int64, n)
		}
		return out
	}
	r.offered, r.acked, r.good, r.dead, r.skipped, r.refused, r.refusedAbove = mk(), mk(), mk(), mk(), mk(), mk(), mk()
	nan := func() []float64 {
		f := make([]float64, n)
		for i := range f {
			f[i] = math.NaN()
		}
		return f
	}
	r.headAge, r.lag, r.allowed, r.decided, r.trueHeadAge = nan(), nan(), nan(), nan(), nan()
	r.capacity, r.wait, r.reason, r.rule = nan(), nan(), make([]string, n), make([]string, n)
	return r
}

// begin starts the run's clock at t.
func (r *recorder) begin(t time.Time) { r.start.Store(t.UnixNano()) }

// elapsed is the time from the start of the run to t; false before begin.
func (r *recorder) elapsed(t time.Time) (time.Duration, bool) {
	s := r.start.Load()
	if s == 0 {
		return 0, false
	}
	return time.Duration(t.UnixNano() - s), true
}

// index is the bin of t, or -1 outside the run.
func (r *recorder) index(t time.Time) int {
	d, ok := r.elapsed(t)
	if !ok || d < 0 {
		return -1
	}
	i := int(d / r.bin)
	if i >= r.n {
		return -1
	}
	return i
}

func (r *recorder) add(c [][]atomic.Int64, class int, t time.Time) {
	if i := r.index(t); i >= 0 && class >= 0 && class < len(c) {
		c[class][i].Add(1)
	}
}

// at is where the broker stored a record: its partition and offset (a
// NATS stream's sequence, in partition 0) and the record's creation time.
// A negative partition is unknown.
type at struct {
	part    int32
	off     int64
	created time.Time
}

// kafkaAt is where r was stored (franz-go sets its partition and offset
// when the broker acknowledges it).
func kafkaAt(r *kgo.Record) at {
	if r == nil {
		return at{part: -1}
	}
	created, _, err := decode(r.Value)
	if err != nil {
		return at{part: -1}
	}
	return at{part: r.Partition, off: r.Offset, created: created}
}

// natsAt is where the message with payload data was stored, from its ack.
func natsAt(ack *jetstream.PubAck, data []byte) at {
	created, _, err := decode(data)
	if ack == nil || err != nil {
		return at{part: -1}
	}
	return at{part: 0, off: int64(ack.Sequence), created: created}
}

// ackedAt records that the broker acknowledged a message of class to its
// producer, stored at a.
func (r *recorder) ackedAt(class int, a at) {
	r.add(r.acked, class, time.Now())
	r.heads.stored(a.part, a.off, a.created)
}

// done records that the consumers processed (or skipped) the record at
// offset off of partition part.
func (r *recorder) done(part int32, off int64) { r.heads.processed(part, off) }

// outcome records what the SDK said about one message of class: acked
// (err nil; a is where it was stored), refused before any send (a
// *RejectError with no attempt), or failed after trying the broker.
func (r *recorder) outcome(class int, err error, a at) {
	now := time.Now()
	var re *producerclient.RejectError
	switch {
	case err == nil:
		r.ackedAt(class, a)
	case errors.As(err, &re) && re.Attempts == 0:
		r.add(r.refused, class, now)
		if r.rateOf != nil && errors.Is(err, producerclient.ErrRateLimited) && r.rateOf(class) >= r.offer[class] {
			r.add(r.refusedAbove, class, now)
		}
	default:
		r.failed.Add(1)
	}
}

// consumed records a processed message of class created at created whose
// processing ended at now.
func (r *recorder) consumed(class int, created, now time.Time, deadline time.Duration) {
	age := now.Sub(created)
	if age <= deadline {
		r.add(r.good, class, now)
	} else {
		r.add(r.dead, class, now)
	}
	if r.index(now) < 0 {
		return
	}
	b := int(age / AgeBucket)
	b = max(0, min(b, ageBuckets-1))
	r.ages[b].Add(1)
}

// series copies the recorded values out.
func (r *recorder) series() *Series {
	cp := func(c [][]atomic.Int64) [][]int64 {
		out := make([][]int64, len(c))
		for i := range c {
			out[i] = make([]int64, r.n)
			for j := range c[i] {
				out[i][j] = c[i][j].Load()
			}
		}
		return out
	}
	ages := make([]int64, len(r.ages))
	for i := range r.ages {
		ages[i] = r.ages[i].Load()
	}
	secs := func(c []atomic.Int64) []float64 {
		out := make([]float64, r.n)
		for i := range out {
			out[i] = time.Duration(c[i].Load()).Seconds()
		}
		return out
	}
	r.commitMu.Lock()
	commits := make([][]time.Duration, len(r.commits))
	for i, c := range r.commits {
		commits[i] = slices.Clone(c)
	}
	r.commitMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Series{Commits: commits, Bin: r.bin, Offered: cp(r.offered), Acked: cp(r.acked), Good: cp(r.good), Dead: cp(r.dead),
		Skipped: cp(r.skipped), Refused: cp(r.refused), RefusedAbove: cp(r.refusedAbove), HeadAge: r.headAge, TrueHeadAge: r.trueHeadAge, Lag: r.lag, Allowed: r.allowed, Decided: r.decided,
		Capacity: r.capacity, Wait: r.wait, Reason: r.reason, Rule: r.rule, Behind: secs(r.behind), ConsumerBehind: secs(r.consumerBehind), Cycles: slices.Clone(r.cycles), Ages: ages}
}

// payloadSize is the size of every message value: the creation time, the
// class, and random bytes up to a typical small event. Random, not zeros:
// a real event (an id, a timestamp, JSON fields) compresses a little, a
// run of zeros ten times over, and a producer's batches are compressed
// (franz-go and Java compress by default), so a padding of zeros made a
// record cost 14 B in a large batch and 120 B alone, and the bytes per
// record a Kafka client quota counts moved tenfold with the batching.
const payloadSize = 128

// errPayload is returned for a message that is not one of the bench's.
var errPayload = errors.New("bench: not a bench message")

// encode returns a message value carrying created and class.
func encode(created time.Time, class int) []byte {
	b := make([]byte, payloadSize)
	binary.BigEndian.PutUint64(b, uint64(created.UnixNano()))
	b[8] = byte(class)
	for i := 9; i < payloadSize; i += 8 {
		var r [8]byte
		binary.LittleEndian.PutUint64(r[:], rand.Uint64())
		copy(b[i:], r[:])
	}
	return b
}

// decode reads what encode wrote.
func decode(b []byte) (created time.Time, class int, err error) {
	if len(b) < 9 {
		return time.Time{}, 0, errPayload
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), int(b[8]), nil
}
