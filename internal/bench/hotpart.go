package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/ttl"
)

// HotOptions configures [RunHot], the hot-partition scenario of issue 17:
// one partition of the topic's six has a consumer much slower than the
// others', and producers offer what the other five absorb easily. Every
// zero field takes the default its doc names.
type HotOptions struct {
	// Duration of each run; zero means 60s.
	Duration time.Duration
	// Offered is the producers' total offer, msg/s; zero means 300.
	Offered float64
	// Capacity is what the consumer of each partition but partition 0
	// processes, msg/s; zero means 2,000.
	Capacity float64
	// Slower: partition 0's consumer is this many times slower than the
	// others (Capacity/Slower msg/s); zero means 100.
	Slower float64
	// SlowAfter: partition 0's consumer runs at Capacity for this long
	// from the start of the run (the daemon sees a healthy group first),
	// then slows down; every figure then counts the records produced
	// from the slowdown on, and the head ages sampled from then on. Zero
	// means slow from the start (a fresh group whose first records meet
	// the slow consumer).
	SlowAfter time.Duration
	// Deadline: a message processed more than Deadline after it was
	// produced is dead work. It is also the quota policy's maxAge and the
	// SDK's message TTL; zero means 2s.
	Deadline time.Duration
	// Interval is the daemon's observation interval; zero means the
	// daemon's default (1s).
	Interval time.Duration
	// CommitEvery is how often the consumer commits what it processed
	// (franz-go's autocommit of marked records, kgo.AutoCommitInterval);
	// zero means 250ms. 5s is franz-go's (and Java's) default interval.
	CommitEvery time.Duration
	// Keys selects the runs by keying: HotKeyless, HotKeyed or HotBoth;
	// empty means HotBoth (keyless, then keyed).
	Keys string
	// Consumer selects the consumer: HotPlain (commits alone tell the
	// daemon where it is) or HotHook (the same consumer with the consumer
	// hook of consumerclient reporting to the run's daemon every 250ms,
	// as a consumer that hands records to a goroutine per partition
	// wires it); empty means HotPlain.
	Consumer string
	// KafkaBrokers, when set, runs on this real cluster (seed addresses)
	// instead of an embedded kfake, with a topic and group of its own per
	// run, deleted at the end.
	KafkaBrokers []string
	// Out receives progress lines and the table; nil means discard.
	Out io.Writer
	// Log receives the daemon's and the SDK's logs; nil discards them.
	Log *slog.Logger
	// Phase is when each run starts its consumer against the daemon's
	// cycles (--phase, as the matrix's runs); the zero value: at once.
	Phase StartPhase
}

// The keyings [HotOptions].Keys selects.
const (
	HotKeyless = "keyless" // keyless records only (franz-go's sticky partitioner)
	HotKeyed   = "keyed"   // keyed records only, keys spread over all partitions
	HotBoth    = "both"    // keyless, then keyed
)

// The consumers [HotOptions].Consumer selects.
const (
	HotPlain = "plain" // commits only
	HotHook  = "hook"  // commits, and the consumer hook reporting to the daemon
)

// keyings is the keyed flag of each keying k runs, in order; nil for an
// unknown k.
func keyings(k string) []bool {
	switch k {
	case HotKeyless:
		return []bool{false}
	case HotKeyed:
		return []bool{true}
	case HotBoth:
		return []bool{false, true}
	}
	return nil
}

func (o HotOptions) withDefaults() HotOptions {
	if o.Keys == "" {
		o.Keys = HotBoth
	}
	if o.Consumer == "" {
		o.Consumer = HotPlain
	}
	if o.Duration == 0 {
		o.Duration = time.Minute
	}
	if o.Offered == 0 {
		o.Offered = 300
	}
	if o.Capacity == 0 {
		o.Capacity = 2000
	}
	if o.Slower == 0 {
		o.Slower = 100
	}
	if o.Deadline == 0 {
		o.Deadline = 2 * time.Second
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.CommitEvery == 0 {
		o.CommitEvery = 250 * time.Millisecond
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem of o (after defaults) at once, each
// wrapping ErrInvalidOptions.
func (o HotOptions) Validate() error {
	o = o.withDefaults()
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: hot partition: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if o.Duration < 0 {
		add("duration must be > 0, got %v", o.Duration)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"offered", o.Offered}, {"capacity", o.Capacity}, {"slower", o.Slower}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			add("%s must be finite and > 0, got %v", f.name, f.v)
		}
	}
	if o.SlowAfter < 0 || o.SlowAfter >= o.Duration {
		add("slow-after must be in [0, duration %v), got %v", o.Duration, o.SlowAfter)
	}
	if keyings(o.Keys) == nil {
		add("keys must be %s, %s or %s, got %q", HotKeyless, HotKeyed, HotBoth, o.Keys)
	}
	if o.Consumer != HotPlain && o.Consumer != HotHook {
		add("consumer must be %s or %s, got %q", HotPlain, HotHook, o.Consumer)
	}
	if o.Deadline < 0 || o.Interval < 0 || o.CommitEvery < 0 {
		add("deadline, interval and commit interval must be > 0, got %v, %v, %v", o.Deadline, o.Interval, o.CommitEvery)
	}
	return errors.Join(errs...)
}

// HotResult is one run of the hot-partition scenario. Partitions are
// indexed by number; partition 0 is the slow one.
type HotResult struct {
	Broker string // the cluster's name: kfake or kafka
	Mode   string // ModeNaive or ModeLagbridge
	Keyed  bool   // records carry keys spread over all partitions
	// Offered is how many records the producers were asked to send;
	// Stored how many the broker acknowledged; Refused how many the SDK
	// refused (never the naive side); Failed how many failed otherwise
	// (a deadline passed, the broker failed them after the retries);
	// Unfinished how many calls the run's end cut short (the handlers
	// stopped, a record still waiting in the SDK or the client): neither
	// refused nor failed; Expired how many waited for a handler past
	// their deadline and were never handed to a producer (every handler
	// busy, as on a machine that stalled): lost, on either side, and no
	// refusal of the SDK.
	Offered, Stored, Refused, Failed, Unfinished, Expired int64
	// StoredBy counts the stored records per partition.
	StoredBy [partitions]int64
	// RefusedBy counts the refused records per partition they were bound
	// for: a keyed record's is its key's; keyless records are bound for
	// none and counted in RefusedAny.
	RefusedBy  [partitions]int64
	RefusedAny int64
	// Processed counts the records the consumer processed per partition,
	// Dead those of them processed more than the deadline after they were
	// produced. Left counts the records still waiting at the end, LeftDead
	// those of them already older than the deadline (dead work to come).
	Processed, Dead, Left, LeftDead [partitions]int64
	// HeadP50 and HeadP99 are the quantiles of each partition's head age
	// (the age of its oldest record not processed yet, 0 when none),
	// sampled every 50ms over the run, seconds.
	HeadP50, HeadP99 [partitions]float64
}

// RefusedShare is the share of the offer the SDK refused.
func (r HotResult) RefusedShare() float64 { return share(r.Refused, r.Offered) }

// ShareTo is the share of the stored records that landed on partition p.
func (r HotResult) ShareTo(p int) float64 { return share(r.StoredBy[p], r.Stored) }

// DeadShare is partition p's dead work: the records processed past the
// deadline, and those left at the end already past it, over all its
// records processed or left.
func (r HotResult) DeadShare(p int) float64 {
	return share(r.Dead[p]+r.LeftDead[p], r.Processed[p]+r.Left[p])
}

// share is a/b, 0 when b is 0.
func share(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// hotID is the one producer id of the scenario.
const hotID = "hot"

// RunHot runs the hot-partition scenario on Kafka (kfake, or
// o.KafkaBrokers): keyless then keyed records (o.Keys), each naive (plain franz-go
// producers, no lagbridge) and through the SDK under the daemon, side by
// side. Six partitions; partition 0's consumer processes
// Capacity/Slower msg/s, the others Capacity; one producer id offers
// Offered msg/s through request handlers that each send one record and
// wait for it (franz-go's defaults: its sticky partitioner for keyless
// records, the murmur2 hash of the key for keyed ones), with the deadline
// as their callers' timeout. It prints progress and the table to o.Out
// and returns the results of the runs that finished; every goroutine it
// starts has stopped when it returns.
func RunHot(ctx context.Context, o HotOptions) ([]HotResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	fmt.Fprintf(o.Out, "lagbridge bench, hot partition: %d partitions, partition 0 processed at %s msg/s (from %s), the others at %s; %s msg/s offered; runs of %s; deadline %s; commits every %s%s\n",
		partitions, num(o.Capacity/o.Slower), dur(o.SlowAfter), num(o.Capacity), num(o.Offered), dur(o.Duration), dur(o.Deadline), dur(o.CommitEvery), hookNote(o))
	id := runID(time.Now())
	var out []HotResult
	n, kk := 0, keyings(o.Keys)
	for _, keyed := range kk {
		for _, mode := range []string{ModeNaive, ModeLagbridge} {
			n++
			fmt.Fprintf(o.Out, "\n[hot %d/%d] %s, %s\n", n, 2*len(kk), keyName(keyed), mode)
			r, err := runHot(ctx, o, keyed, mode, fmt.Sprintf("hot%s-%d", id, n))
			if err != nil {
				return out, fmt.Errorf("hot partition, %s, %s: %w", keyName(keyed), mode, err)
			}
			fmt.Fprintf(o.Out, "  done: %s\n", hotLine(r))
			out = append(out, r)
		}
	}
	fmt.Fprintf(o.Out, "\n%s", HotMarkdown(o, out))
	return out, nil
}

// hookNote says, after the commit interval, that the consumer hook
// reports too (HotHook); empty for HotPlain.
func hookNote(o HotOptions) string {
	if o.Consumer == HotHook {
		return " and the consumer hook reporting what is finished every 250ms"
	}
	return ""
}

func keyName(keyed bool) string {
	if keyed {
		return "keyed"
	}
	return "keyless"
}

func hotLine(r HotResult) string {
	line := fmt.Sprintf("stored %d of %d, refused %s (p0 %d, others %d, keyless %d), share to p0 %s, p0 head age p50 %s p99 %s, p0 dead work %s",
		r.Stored, r.Offered, pct(r.RefusedShare()), r.RefusedBy[0], sum(r.RefusedBy[1:]), r.RefusedAny, pct(r.ShareTo(0)),
		dur(secsDur(r.HeadP50[0])), dur(secsDur(r.HeadP99[0])), pct(r.DeadShare(0)))
	if r.Unfinished > 0 {
		line += fmt.Sprintf(", %d unfinished at the end", r.Unfinished)
	}
	if r.Expired > 0 {
		line += fmt.Sprintf(", %d expired waiting for a handler", r.Expired)
	}
	return line
}

func secsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// runHot is one run: fresh topic, daemon, consumer and producer.
func runHot(ctx context.Context, o HotOptions, keyed bool, mode, id string) (HotResult, error) {
	bo := Options{KafkaBrokers: o.KafkaBrokers, Log: o.Log}
	w, err := startWorld(ctx, bo, Row{Broker: BrokerKafka}, id)
	if err != nil {
		return HotResult{}, err
	}
	defer w.Close()
	scn := Scenario{Deadline: o.Deadline, Classes: []Class{{Producer: hotID, Criticality: ttl.Critical, Share: 1}}}
	d, err := startDaemon(ctx, bo, scn, w, o.Interval, false)
	if err != nil {
		return HotResult{}, err
	}
	defer func() { _ = d.stop() }()
	res := HotResult{Broker: w.name, Mode: mode, Keyed: keyed}
	if phase := o.Phase.pick(o.Interval); phase >= 0 {
		if err := waitPhase(ctx, d, o.Interval, phase); err != nil {
			return res, err
		}
		fmt.Fprintf(o.Out, "  consumer started %s after a daemon cycle (--phase %s)\n", dur(phase), o.Phase)
	}
	c, err := startHotConsumer(ctx, w, o, d.base)
	if err != nil {
		return res, err
	}
	defer c.Close()
	p, err := newHotProducer(o, w, d.base, mode, keyed)
	if err != nil {
		return res, err
	}
	defer p.close()

	start := time.Now()
	from := start.Add(o.SlowAfter)
	p.from = from
	c.from.Store(from.UnixNano())
	rctx, cancel := context.WithDeadline(ctx, start.Add(o.Duration))
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		generate(rctx, start, o.Offered, func(created time.Time, _ time.Duration) {
			if !created.Before(from) {
				p.offered.Add(1)
			}
			select {
			case p.reqs <- created:
			default:
				if !created.Before(from) {
					p.failed.Add(1) // the handlers' queue is full: lost
				}
			}
		})
	})
	heads := make([][]float64, partitions)
	wg.Go(func() {
		every(rctx, 50*time.Millisecond, func(now time.Time) {
			if !now.Before(from) {
				for i, a := range c.headAges(now) {
					heads[i] = append(heads[i], a)
				}
			}
		})
	})
	wg.Go(func() {
		every(rctx, 5*time.Second, func(now time.Time) {
			ages := c.headAges(now)
			fmt.Fprintf(o.Out, "  t=%4.1fs offered %d stored %d refused %d (p0 %d) | p0 head age %.2fs, others max %.2fs%s\n",
				now.Sub(start).Seconds(), p.offered.Load(), p.stored.Load(), p.refused.Load(), p.refusedBy[0].Load(), ages[0], slices.Max(ages[1:]), p.leaseLine())
		})
	})
	<-rctx.Done()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	p.close()
	c.Close()
	p.fill(&res)
	c.fill(&res, time.Now(), o.Deadline)
	for i, h := range heads {
		slices.Sort(h)
		res.HeadP50[i], res.HeadP99[i] = quantile(h, 0.5), quantile(h, 0.99)
	}
	return res, nil
}

// every calls f with the time of each tick of period d until ctx ends.
func every(ctx context.Context, d time.Duration, f func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// hotKeys are keys spread over all partitions: hotKeysPer keys per
// partition, each with the partition franz-go's default partitioner
// sends it to (the murmur2 hash of the key, as Kafka's Java client).
type hotKeys struct {
	keys [][]byte
	part []int32
}

const hotKeysPer = 50

func newHotKeys() hotKeys {
	var k hotKeys
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("")
	count := make([]int, partitions)
	for i := 0; len(k.keys) < hotKeysPer*partitions; i++ {
		key := []byte("key-" + strconv.Itoa(i))
		p := tp.Partition(&kgo.Record{Key: key}, partitions)
		if count[p] == hotKeysPer {
			continue
		}
		count[p]++
		k.keys, k.part = append(k.keys, key), append(k.part, int32(p))
	}
	return k
}

// hotProducer is the run's producer: request handlers that each send one
// record and wait for it, naive (a plain franz-go client, naiveRetries
// retries) or through the SDK (Drop mode, leases pushed by the daemon).
type hotProducer struct {
	w      *world
	keyed  bool
	keys   hotKeys
	cl     *kgo.Client
	sdk    *producerclient.KafkaProducer
	reqs   chan time.Time
	from   time.Time // records created before are not counted
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed bool

	offered, stored, refused, failed, refusedAny, unfinished, expired atomic.Int64
	storedBy, refusedBy                                               [partitions]atomic.Int64
}

func newHotProducer(o HotOptions, w *world, base, mode string, keyed bool) (*hotProducer, error) {
	ctx, stop := context.WithCancel(context.Background())
	p := &hotProducer{w: w, keyed: keyed, keys: newHotKeys(), reqs: make(chan time.Time, 4096), ctx: ctx, stop: stop}
	opts := []kgo.Opt{kgo.SeedBrokers(w.kafkaAddrs...), kgo.ClientID(hotID)}
	if mode == ModeLagbridge {
		opts = append(opts, producerclient.KafkaClientOpts(nil)...)
	} else {
		opts = append(opts, kgo.RecordRetries(0))
	}
	var err error
	if p.cl, err = kgo.NewClient(opts...); err != nil {
		stop()
		return nil, err
	}
	if mode == ModeLagbridge {
		cfg := producerclient.Config{
			Producer: hotID, Topics: []string{w.topic}, Mode: producerclient.Drop, MessageTTL: o.Deadline,
			Leases: producerclient.LeaseConfig{URL: base, Transport: producerclient.SSE},
			Logger: o.Log.With("producer", hotID),
		}
		if p.sdk, err = producerclient.NewKafka(p.cl, cfg); err != nil {
			p.cl.Close()
			stop()
			return nil, err
		}
		if err := waitQuotas(ctx, []func() (producerclient.Quota, bool){func() (producerclient.Quota, bool) { return p.sdk.Quota(w.topic) }}, 10*time.Second); err != nil {
			fmt.Fprintf(o.Out, "  warning: %v; starting anyway\n", err)
		}
	}
	for range syncHandlers {
		p.wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case created := <-p.reqs:
					if time.Since(created) >= o.Deadline {
						// Its caller gave up while it waited for a
						// handler (see fleet.handle).
						if !created.Before(p.from) {
							p.expired.Add(1)
						}
						continue
					}
					rctx, cancel := context.WithDeadline(ctx, created.Add(o.Deadline))
					p.send(rctx, created)
					cancel()
				}
			}
		})
	}
	return p, nil
}

// leaseLine is the SDK's lease of the topic as the progress lines show
// it: its signal, the partitions it avoids and partition 0's keyless
// share; empty for the naive producer.
func (p *hotProducer) leaseLine() string {
	if p.sdk == nil {
		return ""
	}
	q, ok := p.sdk.Quota(p.w.topic)
	if !ok {
		return ""
	}
	line := fmt.Sprintf(" | lease %s", q.Signal)
	if !math.IsInf(q.Rate, 1) {
		line += fmt.Sprintf(" %.0f/s", q.Rate)
	}
	if len(q.AvoidPartitions) > 0 {
		line += fmt.Sprintf(" avoid %v", q.AvoidPartitions)
	}
	for _, s := range q.PartitionShares {
		line += fmt.Sprintf(" p%d share %.1f%%", s.Partition, 100*s.Share)
	}
	return line
}

// send sends one record created at created and counts its outcome.
func (p *hotProducer) send(ctx context.Context, created time.Time) {
	r := &kgo.Record{Topic: p.w.topic, Value: encode(created, 0), Timestamp: created}
	bound := int32(-1)
	if p.keyed {
		i := rand.IntN(len(p.keys.keys))
		r.Key, bound = p.keys.keys[i], p.keys.part[i]
	}
	var err error
	defer func() {
		if !created.Before(p.from) {
			p.count(r, bound, err)
		}
	}()
	if p.sdk != nil {
		err = p.sdk.Produce(ctx, r)
	} else {
		for attempt := 0; ; attempt++ {
			if err = p.cl.ProduceSync(ctx, r).FirstErr(); err == nil || attempt == naiveRetries || ctx.Err() != nil {
				break
			}
		}
	}
}

// count counts the outcome err of r, bound for partition bound (-1: none).
func (p *hotProducer) count(r *kgo.Record, bound int32, err error) {
	var rej *producerclient.RejectError
	switch {
	case err == nil:
		p.stored.Add(1)
		if r.Partition >= 0 && r.Partition < partitions {
			p.storedBy[r.Partition].Add(1)
		}
	case p.ctx.Err() != nil && errors.Is(err, context.Canceled):
		// The run ended (close cancels the handlers' contexts) with the
		// record still waiting: the SDK reports "context done before
		// sending", which is no refusal by a quota.
		p.unfinished.Add(1)
	case errors.As(err, &rej) && rej.Attempts == 0:
		// Refused before it was sent.
		p.refused.Add(1)
		if bound >= 0 {
			p.refusedBy[bound].Add(1)
		} else {
			p.refusedAny.Add(1)
		}
	default:
		p.failed.Add(1)
	}
}

// close stops the handlers and the producer. Idempotent.
func (p *hotProducer) close() {
	if p.closed {
		return
	}
	p.closed = true
	p.stop()
	p.wg.Wait()
	if p.sdk != nil {
		_ = p.sdk.Close()
	}
	p.cl.Close()
}

func (p *hotProducer) fill(r *HotResult) {
	r.Offered, r.Stored, r.Refused, r.Failed, r.RefusedAny = p.offered.Load(), p.stored.Load(), p.refused.Load(), p.failed.Load(), p.refusedAny.Load()
	r.Unfinished, r.Expired = p.unfinished.Load(), p.expired.Load()
	for i := range partitions {
		r.StoredBy[i], r.RefusedBy[i] = p.storedBy[i].Load(), p.refusedBy[i].Load()
	}
}

// hotConsumer is the run's consumer group member: a worker per partition,
// each processing its partition's records in order at its own capacity
// (partition 0's is Capacity/Slower), marking each record done; the marks
// are committed every CommitEvery. The poller reads ahead without bound
// (a run is short): what the daemon sees is the committed position, which
// moves only as records are processed.
type hotConsumer struct {
	cl *kgo.Client
	// rep is the consumer hook's reporter (HotHook), nil without.
	rep *consumerclient.KafkaReporter
	// from is when partition 0 slows down, UnixNano (0: not set yet):
	// records created before are not counted.
	from   atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	parts  [partitions]*hotPart
}

// hotPart is one partition's queue and counts.
type hotPart struct {
	mu   sync.Mutex
	q    []*kgo.Record // fetched, not processed yet; q[0] is in progress
	wake chan struct{}
	done int64
	dead int64
}

func startHotConsumer(ctx context.Context, w *world, o HotOptions, daemon string) (*hotConsumer, error) {
	assigned := make(chan struct{})
	var once sync.Once
	opts := []kgo.Opt{kgo.SeedBrokers(w.kafkaAddrs...), kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.topic),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(o.CommitEvery),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) })}
	var rep *consumerclient.KafkaReporter
	if o.Consumer == HotHook {
		// The workers poll on while a partition's records wait in its
		// queue: they stay in hand until the worker finishes each one.
		var err error
		if rep, err = consumerclient.NewKafkaReporter(consumerclient.Config{URL: daemon, Cluster: w.name, Logger: o.Log.With("consumer", w.group), KeepUntilFinished: true}); err != nil {
			return nil, err
		}
		// The bench's one member is revoked only when it closes, after
		// the run is measured: the callback replaces franz-go's commit on
		// revoke, so it commits the marks itself.
		revoke := func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			rep.Revoked(m)
			_ = cl.CommitMarkedOffsets(ctx)
		}
		opts = append(opts, kgo.WithHooks(rep.Hook()), kgo.OnPartitionsRevoked(revoke), kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { rep.Revoked(m) }))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		if rep != nil {
			rep.Close()
		}
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &hotConsumer{cl: cl, rep: rep, cancel: cancel}
	for i := range c.parts {
		c.parts[i] = &hotPart{wake: make(chan struct{}, 1)}
	}
	c.wg.Go(func() {
		for cctx.Err() == nil {
			recs := cl.PollRecords(cctx, 1000).Records()
			for _, r := range recs {
				if r.Partition < 0 || int(r.Partition) >= partitions {
					continue
				}
				hp := c.parts[r.Partition]
				hp.mu.Lock()
				hp.q = append(hp.q, r)
				hp.mu.Unlock()
				select {
				case hp.wake <- struct{}{}:
				default:
				}
			}
		}
	})
	for i, hp := range c.parts {
		pc := &pacer{capacity: func(now time.Time) float64 {
			if from := c.from.Load(); i == 0 && (o.SlowAfter == 0 || (from != 0 && now.UnixNano() >= from)) {
				return o.Capacity / o.Slower
			}
			return o.Capacity
		}}
		c.wg.Go(func() { c.work(cctx, hp, pc, o.Deadline) })
	}
	select {
	case <-assigned:
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		c.Close()
		return nil, fmt.Errorf("group %s: no partitions assigned within 30s", w.group)
	}
}

// work processes hp's records in order, each taking the pacer's time.
func (c *hotConsumer) work(ctx context.Context, hp *hotPart, pc *pacer, deadline time.Duration) {
	for {
		hp.mu.Lock()
		var r *kgo.Record
		if len(hp.q) > 0 {
			r = hp.q[0]
		}
		hp.mu.Unlock()
		if r == nil {
			select {
			case <-ctx.Done():
				return
			case <-hp.wake:
				continue
			}
		}
		if pc.take(ctx) != nil {
			return
		}
		created, _, err := decode(r.Value)
		hp.mu.Lock()
		hp.q[0] = nil
		hp.q = hp.q[1:]
		if err == nil && c.counted(created) {
			hp.done++
			if time.Since(created) > deadline {
				hp.dead++
			}
		}
		hp.mu.Unlock()
		c.cl.MarkCommitRecords(r)
		if c.rep != nil {
			c.rep.Done(r)
		}
	}
}

// doneOf is how many counted records partition p's worker processed.
func (c *hotConsumer) doneOf(p int) int64 {
	hp := c.parts[p]
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return hp.done
}

// counted reports whether a record created at created counts: it was
// created from the slowdown on.
func (c *hotConsumer) counted(created time.Time) bool {
	from := c.from.Load()
	return from != 0 && created.UnixNano() >= from
}

// headAges returns each partition's head age at now, seconds: the age of
// its oldest record not processed yet, 0 when none.
func (c *hotConsumer) headAges(now time.Time) []float64 {
	ages := make([]float64, partitions)
	for i, hp := range c.parts {
		hp.mu.Lock()
		if len(hp.q) > 0 {
			if created, _, err := decode(hp.q[0].Value); err == nil {
				ages[i] = max(now.Sub(created).Seconds(), 0)
			}
		}
		hp.mu.Unlock()
	}
	return ages
}

// Close stops the consumer and waits for it. Idempotent.
func (c *hotConsumer) Close() {
	c.once.Do(func() {
		c.cancel()
		c.wg.Wait()
		c.cl.Close()
		if c.rep != nil {
			c.rep.Close()
		}
	})
}

// fill counts what was processed and what is left at now.
func (c *hotConsumer) fill(r *HotResult, now time.Time, deadline time.Duration) {
	for i, hp := range c.parts {
		hp.mu.Lock()
		r.Processed[i], r.Dead[i] = hp.done, hp.dead
		for _, rec := range hp.q {
			if created, _, err := decode(rec.Value); err == nil && c.counted(created) {
				r.Left[i]++
				if now.Sub(created) > deadline {
					r.LeftDead[i]++
				}
			}
		}
		hp.mu.Unlock()
	}
}

// HotMarkdown renders the results of [RunHot] as a markdown table, naive
// and lagbridge side by side per keying, and the done-when checks of
// issue 17 for the lagbridge runs.
func HotMarkdown(o HotOptions, rs []HotResult) string {
	o = o.withDefaults()
	var b strings.Builder
	slow := "from the start"
	if o.SlowAfter > 0 {
		slow = "from " + dur(o.SlowAfter) + " on (at " + num(o.Capacity) + " before; the figures count the records produced from then on)"
	}
	started := ""
	if o.Phase.Set {
		started = "; each run's consumer started " + o.Phase.String() + " after a daemon cycle (--phase)"
	}
	fmt.Fprintf(&b, "Hot partition: %d partitions, partition 0's consumer at %s msg/s %s, the others at %s; %s msg/s offered; %s per run; deadline %s; commits every %s%s; observed every %s%s.\n\n",
		partitions, num(o.Capacity/o.Slower), slow, num(o.Capacity), num(o.Offered), dur(o.Duration), dur(o.Deadline), dur(o.CommitEvery), hookNote(o), dur(o.Interval), started)
	b.WriteString("| broker | keys | mode | refused (% of offered) | refused per partition p0..p5 (keyless) | share to p0 | p0 head age p50 / p99 | p0 dead work | others: head age p99 (max), dead work |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		per := make([]string, partitions)
		for i := range partitions {
			per[i] = strconv.FormatInt(r.RefusedBy[i], 10)
		}
		var odead, oall int64
		for i := 1; i < partitions; i++ {
			odead += r.Dead[i] + r.LeftDead[i]
			oall += r.Processed[i] + r.Left[i]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s (%s) | %s (%d) | %s | %s / %s | %s | %s, %s |\n",
			r.Broker, keyName(r.Keyed), r.Mode, num(float64(r.Refused)), pct(r.RefusedShare()), strings.Join(per, " / "), r.RefusedAny,
			pct(r.ShareTo(0)), dur(secsDur(r.HeadP50[0])), dur(secsDur(r.HeadP99[0])), pct(r.DeadShare(0)),
			dur(secsDur(slices.Max(r.HeadP99[1:]))), pct(share(odead, oall)))
	}
	for _, r := range rs {
		if r.Mode != ModeLagbridge {
			continue
		}
		if miss := HotMisses(o, r); len(miss) > 0 {
			fmt.Fprintf(&b, "\n%s %s lagbridge misses: %s", r.Broker, keyName(r.Keyed), strings.Join(miss, "; "))
		} else {
			fmt.Fprintf(&b, "\n%s %s lagbridge meets issue 17's targets", r.Broker, keyName(r.Keyed))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// HotMisses lists the targets of issue 17 a lagbridge run misses. Keyless:
// refused <= 5% of offered, partition 0's head age p99 <= the deadline, its
// dead work <= 1%, and the other partitions unaffected (no dead work,
// head age p99 within the deadline). Keyed: only records bound for
// partition 0 are refused, and the others are unaffected.
func HotMisses(o HotOptions, r HotResult) []string {
	o = o.withDefaults()
	var miss []string
	if !r.Keyed {
		if s := r.RefusedShare(); s > 0.05 {
			miss = append(miss, fmt.Sprintf("refused %s of the offer (> 5%%)", pct(s)))
		}
		if p99 := secsDur(r.HeadP99[0]); p99 > o.Deadline {
			miss = append(miss, fmt.Sprintf("p0 head age p99 %s (> %s)", dur(p99), dur(o.Deadline)))
		}
		if s := r.DeadShare(0); s > 0.01 {
			miss = append(miss, fmt.Sprintf("p0 dead work %s (> 1%%)", pct(s)))
		}
	} else if other := sum(r.RefusedBy[1:]); other > 0 {
		miss = append(miss, fmt.Sprintf("%d records bound for partitions other than p0 refused", other))
	}
	for i := 1; i < partitions; i++ {
		if r.DeadShare(i) > 0 || secsDur(r.HeadP99[i]) > o.Deadline {
			miss = append(miss, fmt.Sprintf("p%d affected: dead work %s, head age p99 %s", i, pct(r.DeadShare(i)), dur(secsDur(r.HeadP99[i]))))
		}
	}
	return miss
}
