package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient"
)

// naiveRetries is how many times the naive producers retry a failed
// message (so up to four attempts).
const naiveRetries = 3

// sender is the producers of one run on one broker, one per class, seen
// through the three ways an application calls them.
type sender interface {
	// async hands one message created at created to producer class
	// without waiting for the outcome. It may block (a full client
	// buffer), never for long.
	async(ctx context.Context, class int, created time.Time)
	// sync sends one message and waits for its outcome.
	sync(ctx context.Context, class int, created time.Time)
	// batch sends one message per created time in one call and waits
	// for every outcome.
	batch(ctx context.Context, class int, created []time.Time)
	// allowed is the total rate the producers enforce now: NaN for naive
	// producers, +Inf when some producer is unlimited.
	allowed() float64
	// close flushes for at most a second, stops every goroutine the
	// sender started and returns the totals.
	close() Totals
}

// naiveKafka: one kgo client per producer with franz-go's retries off and
// three application-level retries per failed record, the way most
// hand-written producers look. No lagbridge anywhere.
type naiveKafka struct {
	w       *world
	rec     *recorder
	clients []*kgo.Client
	retry   chan kretry
	wg      sync.WaitGroup
	stop    context.CancelFunc
	thr     throttles
}

type kretry struct {
	class, attempt int
	r              *kgo.Record
}

func newNaiveKafka(w *world, scn Scenario, rec *recorder) (*naiveKafka, error) {
	ctx, stop := context.WithCancel(context.Background())
	n := &naiveKafka{w: w, rec: rec, retry: make(chan kretry, 100_000), stop: stop}
	for _, c := range scn.Classes {
		cl, err := kgo.NewClient(kgo.SeedBrokers(w.kafkaAddrs...), kgo.ClientID(w.clientID(c.Producer)), kgo.RecordRetries(0), kgo.WithHooks(&n.thr))
		if err != nil {
			n.close()
			return nil, err
		}
		n.clients = append(n.clients, cl)
	}
	n.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case k := <-n.retry:
				n.produce(ctx, k.class, k.r, k.attempt)
			}
		}
	})
	return n, nil
}

func (n *naiveKafka) async(ctx context.Context, class int, created time.Time) {
	r := &kgo.Record{Topic: n.w.topic, Value: encode(created, class), Timestamp: created}
	n.produce(ctx, class, r, 1)
}

func (n *naiveKafka) sync(ctx context.Context, class int, created time.Time) {
	n.batch(ctx, class, []time.Time{created})
}

// batch sends the records with kgo's ProduceSync and sends the failed ones
// again, up to naiveRetries times.
func (n *naiveKafka) batch(ctx context.Context, class int, created []time.Time) {
	rs := make([]*kgo.Record, len(created))
	for i, c := range created {
		rs[i] = &kgo.Record{Topic: n.w.topic, Value: encode(c, class), Timestamp: c}
	}
	for attempt := 1; len(rs) > 0; attempt++ {
		n.rec.attempts.Add(int64(len(rs)))
		if attempt > 1 {
			n.rec.retries.Add(int64(len(rs)))
		}
		var failed []*kgo.Record
		for _, res := range n.clients[class].ProduceSync(ctx, rs...) {
			if res.Err == nil {
				n.rec.ackedAt(class, kafkaAt(res.Record))
				continue
			}
			failed = append(failed, res.Record)
		}
		if attempt > naiveRetries || ctx.Err() != nil {
			n.rec.failed.Add(int64(len(failed)))
			return
		}
		rs = failed
	}
}

func (n *naiveKafka) produce(ctx context.Context, class int, r *kgo.Record, attempt int) {
	n.rec.attempts.Add(1)
	if attempt > 1 {
		n.rec.retries.Add(1)
	}
	n.clients[class].Produce(ctx, r, func(r *kgo.Record, err error) {
		if err == nil {
			n.rec.ackedAt(class, kafkaAt(r))
			return
		}
		if attempt > naiveRetries || ctx.Err() != nil {
			n.rec.failed.Add(1)
			return
		}
		// Producing from inside a promise can block on a full buffer:
		// hand the retry to the retry goroutine.
		select {
		case n.retry <- kretry{class: class, attempt: attempt + 1, r: r}:
		default:
			n.rec.failed.Add(1)
		}
	})
}

func (n *naiveKafka) allowed() float64 { return math.NaN() }

func (n *naiveKafka) close() Totals {
	fctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, cl := range n.clients {
		_ = cl.Flush(fctx)
	}
	n.stop()
	n.wg.Wait()
	for _, cl := range n.clients {
		cl.Close()
	}
	n.clients = nil
	return Totals{Attempts: n.rec.attempts.Load(), Retries: n.rec.retries.Load(), Failed: n.rec.failed.Load(), MaxThrottle: n.thr.Longest()}
}

// sdkKafka: one producerclient.KafkaProducer per producer, in Drop mode
// (what does not fit the quota is shed at once, the cheapest rejection),
// with the deadline as message TTL and leases pushed by the daemon over
// server-sent events.
type sdkKafka struct {
	w         *world
	rec       *recorder
	clients   []*kgo.Client
	producers []*producerclient.KafkaProducer
	done      []func(*kgo.Record, error)
}

// sdkConfig is the SDK config of one producer class.
func sdkConfig(o Options, scn Scenario, c Class, topic, base string) producerclient.Config {
	return producerclient.Config{
		Producer: c.Producer, Topics: []string{topic}, Mode: producerclient.Drop, Criticality: c.Criticality,
		MessageTTL: scn.Deadline,
		Leases:     producerclient.LeaseConfig{URL: base, Transport: producerclient.SSE},
		Logger:     o.Log.With("producer", c.Producer),
	}
}

func newSDKKafka(o Options, scn Scenario, w *world, base string, rec *recorder) (*sdkKafka, error) {
	s := &sdkKafka{w: w, rec: rec}
	for i, c := range scn.Classes {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.kafkaAddrs...), kgo.ClientID(c.Producer)}, producerclient.KafkaClientOpts(nil)...)...)
		if err != nil {
			s.close()
			return nil, err
		}
		s.clients = append(s.clients, cl)
		p, err := producerclient.NewKafka(cl, sdkConfig(o, scn, c, w.topic, base))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("producer %s: %w", c.Producer, err)
		}
		s.producers = append(s.producers, p)
		class := i
		s.done = append(s.done, func(r *kgo.Record, err error) { rec.outcome(class, err, kafkaAt(r)) })
	}
	return s, nil
}

func (s *sdkKafka) record(class int, created time.Time) *kgo.Record {
	return &kgo.Record{Topic: s.w.topic, Value: encode(created, class), Timestamp: created}
}

func (s *sdkKafka) async(ctx context.Context, class int, created time.Time) {
	s.producers[class].ProduceAsync(ctx, s.record(class, created), s.done[class])
}

func (s *sdkKafka) sync(ctx context.Context, class int, created time.Time) {
	r := s.record(class, created)
	s.rec.outcome(class, s.producers[class].Produce(ctx, r), kafkaAt(r))
}

func (s *sdkKafka) batch(ctx context.Context, class int, created []time.Time) {
	rs := make([]*kgo.Record, len(created))
	for i, c := range created {
		rs[i] = s.record(class, c)
	}
	for _, res := range s.producers[class].ProduceBatch(ctx, rs) {
		s.rec.outcome(class, res.Err, kafkaAt(res.Record))
	}
}

func (s *sdkKafka) allowed() float64 { return allowedOf(s.producers, s.w.topic) }

func (s *sdkKafka) close() Totals {
	tot := closeAll(s.producers)
	for _, cl := range s.clients {
		cl.Close()
	}
	s.producers, s.clients = nil, nil
	tot.Failed = s.rec.failed.Load()
	return tot
}

// sumQuota adds the producers' enforced rates; a producer on its open safe
// quota or an unlimited lease makes the sum +Inf.
func sumQuota(qs []producerclient.Quota) float64 {
	var sum float64
	for _, q := range qs {
		if q.Closed {
			continue
		}
		sum += q.Rate
	}
	return sum
}

func addStats(t *Totals, st producerclient.Stats) {
	if t.Shed == nil {
		t.Shed = map[string]int64{}
	}
	for _, ts := range st.Topics {
		t.Attempts += int64(ts.Attempts)
		t.Retries += int64(ts.Retries)
		for why, n := range ts.Rejected {
			if why == "broker" || why == "retry_budget" {
				continue // sent and failed: not shed
			}
			t.Shed[why] += int64(n)
		}
	}
}

// naiveNATS: JetStream async publishes with three application-level
// retries per failure.
type naiveNATS struct {
	w       *world
	rec     *recorder
	pending chan npub
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

type npub struct {
	class, attempt int
	m              *natsgo.Msg
	f              jetstream.PubAckFuture
}

func newNaiveNATS(w *world, rec *recorder) *naiveNATS {
	ctx, stop := context.WithCancel(context.Background())
	n := &naiveNATS{w: w, rec: rec, pending: make(chan npub, 100_000), stop: stop}
	n.wg.Go(func() { n.collect(ctx) })
	return n
}

func (n *naiveNATS) async(ctx context.Context, class int, created time.Time) {
	n.publish(ctx, class, &natsgo.Msg{Subject: n.w.subject, Data: encode(created, class)}, 1)
}

// sync publishes with JetStream's Publish and tries again after a
// failure, up to naiveRetries times.
func (n *naiveNATS) sync(ctx context.Context, class int, created time.Time) {
	n.publishSync(ctx, class, &natsgo.Msg{Subject: n.w.subject, Data: encode(created, class)}, 1)
}

// publishSync is sync from the given attempt on.
func (n *naiveNATS) publishSync(ctx context.Context, class int, m *natsgo.Msg, attempt int) {
	for ; ; attempt++ {
		n.rec.attempts.Add(1)
		if attempt > 1 {
			n.rec.retries.Add(1)
		}
		if ack, err := n.w.js.PublishMsg(ctx, m); err == nil {
			n.rec.ackedAt(class, natsAt(ack, m.Data))
			return
		}
		if attempt > naiveRetries || ctx.Err() != nil {
			n.rec.failed.Add(1)
			return
		}
	}
}

// batch publishes every message asynchronously, then waits for their acks
// (JetStream has no batch publish); a failed one is published again,
// synchronously, up to naiveRetries times.
func (n *naiveNATS) batch(ctx context.Context, class int, created []time.Time) {
	type pub struct {
		m *natsgo.Msg
		f jetstream.PubAckFuture
	}
	pubs := make([]pub, 0, len(created))
	for _, c := range created {
		n.rec.attempts.Add(1)
		m := &natsgo.Msg{Subject: n.w.subject, Data: encode(c, class)}
		f, err := n.w.js.PublishMsgAsync(m)
		if err != nil {
			n.publishSync(ctx, class, m, 2)
			continue
		}
		pubs = append(pubs, pub{m, f})
	}
	for _, p := range pubs {
		select {
		case ack := <-p.f.Ok():
			n.rec.ackedAt(class, natsAt(ack, p.m.Data))
		case <-p.f.Err():
			n.publishSync(ctx, class, p.m, 2)
		case <-ctx.Done():
			n.rec.failed.Add(1)
		}
	}
}

func (n *naiveNATS) publish(ctx context.Context, class int, m *natsgo.Msg, attempt int) {
	for ; ctx.Err() == nil; attempt++ {
		n.rec.attempts.Add(1)
		if attempt > 1 {
			n.rec.retries.Add(1)
		}
		f, err := n.w.js.PublishMsgAsync(m)
		if err == nil {
			select {
			case n.pending <- npub{class: class, attempt: attempt, m: m, f: f}:
			case <-ctx.Done():
			}
			return
		}
		if attempt > naiveRetries {
			n.rec.failed.Add(1)
			return
		}
	}
}

// collect waits for each ack in order and retries failures.
func (n *naiveNATS) collect(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-n.pending:
			select {
			case ack := <-p.f.Ok():
				n.rec.ackedAt(p.class, natsAt(ack, p.m.Data))
			case <-p.f.Err():
				if p.attempt > naiveRetries {
					n.rec.failed.Add(1)
					continue
				}
				n.publish(ctx, p.class, p.m, p.attempt+1)
			case <-ctx.Done():
				n.settle(p)
				return
			}
		}
	}
}

// settle counts p's answer if it has one (stored, or failed), and a
// publish still unanswered as failed: for close, once collect has stopped
// and nothing will be retried.
func (n *naiveNATS) settle(p npub) {
	select {
	case ack := <-p.f.Ok():
		n.rec.ackedAt(p.class, natsAt(ack, p.m.Data))
	default:
		n.rec.failed.Add(1)
	}
}

func (n *naiveNATS) allowed() float64 { return math.NaN() }

func (n *naiveNATS) close() Totals {
	select {
	case <-n.w.js.PublishAsyncComplete():
	case <-time.After(time.Second):
	}
	n.stop()
	n.wg.Wait()
	// The publishes collect had not reached: their acks came in while it
	// waited on earlier ones (or before it stopped) and count as stored.
	for len(n.pending) > 0 {
		n.settle(<-n.pending)
	}
	return Totals{Attempts: n.rec.attempts.Load(), Retries: n.rec.retries.Load(), Failed: n.rec.failed.Load()}
}

// sdkNATS: one producerclient.NATSProducer per producer, Drop mode.
type sdkNATS struct {
	w         *world
	rec       *recorder
	producers []*producerclient.NATSProducer
	done      []func(*natsgo.Msg, *jetstream.PubAck, error)
}

func newSDKNATS(o Options, scn Scenario, w *world, base string, rec *recorder) (*sdkNATS, error) {
	s := &sdkNATS{w: w, rec: rec}
	for i, c := range scn.Classes {
		cfg := sdkConfig(o, scn, c, w.topic, base)
		stream := w.topic
		cfg.NATS.Topic = func(string) string { return stream }
		p, err := producerclient.NewNATS(w.js, cfg)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("producer %s: %w", c.Producer, err)
		}
		s.producers = append(s.producers, p)
		class := i
		s.done = append(s.done, func(m *natsgo.Msg, ack *jetstream.PubAck, err error) { rec.outcome(class, err, natsMsgAt(m, ack)) })
	}
	return s, nil
}

// natsMsgAt is natsAt for a callback's message, which may be nil.
func natsMsgAt(m *natsgo.Msg, ack *jetstream.PubAck) at {
	if m == nil {
		return at{part: -1}
	}
	return natsAt(ack, m.Data)
}

func (s *sdkNATS) msg(class int, created time.Time) *natsgo.Msg {
	return &natsgo.Msg{Subject: s.w.subject, Data: encode(created, class), Header: natsgo.Header{}}
}

func (s *sdkNATS) async(ctx context.Context, class int, created time.Time) {
	s.producers[class].PublishAsync(ctx, s.msg(class, created), s.done[class])
}

func (s *sdkNATS) sync(ctx context.Context, class int, created time.Time) {
	m := s.msg(class, created)
	ack, err := s.producers[class].Publish(ctx, m)
	s.rec.outcome(class, err, natsAt(ack, m.Data))
}

// batch publishes every message asynchronously and waits for every
// outcome (the SDK has no NATS batch call; this is how one is written).
func (s *sdkNATS) batch(ctx context.Context, class int, created []time.Time) {
	var wg sync.WaitGroup
	wg.Add(len(created))
	for _, c := range created {
		s.producers[class].PublishAsync(ctx, s.msg(class, c), func(m *natsgo.Msg, ack *jetstream.PubAck, err error) {
			s.rec.outcome(class, err, natsMsgAt(m, ack))
			wg.Done()
		})
	}
	wg.Wait()
}

func (s *sdkNATS) allowed() float64 { return allowedOf(s.producers, s.w.topic) }

func (s *sdkNATS) close() Totals {
	tot := closeAll(s.producers)
	s.producers = nil
	tot.Failed = s.rec.failed.Load()
	return tot
}

// generate calls send rate times a second (open loop: a slow send makes
// the next ones come in a burst, not fewer) until ctx ends. Message k
// (from 1) is due k/rate after start; send gets the time it is sent and
// how late that is.
func generate(ctx context.Context, start time.Time, rate float64, send func(created time.Time, late time.Duration)) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int(now.Sub(start).Seconds()*rate) - sent
			for range due {
				if ctx.Err() != nil {
					return
				}
				sent++
				created := time.Now()
				send(created, max(0, created.Sub(start.Add(time.Duration(float64(sent)/rate*float64(time.Second))))))
			}
		}
	}
}

// syncHandlers is how many request handlers each producer of a Sync row
// runs: each takes the next request, sends its one message and waits.
const syncHandlers = 16

// batchEvery is how often a Batch row's producers send what arrived since
// the last batch.
const batchEvery = 100 * time.Millisecond

// fleet is the producers of one run as the application drives them: per
// request (Sync: a pool of handlers per producer, each request with the
// deadline of its caller), fire and forget (Async), or in batches. It owns
// the goroutines it starts; close stops them, then the sender.
type fleet struct {
	kind     ProducerKind
	s        sender
	rec      *recorder
	deadline time.Duration
	reqs     []chan time.Time
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// newFleet starts the handlers (Sync) or batchers (Batch) of s, one set
// per producer class.
func newFleet(kind ProducerKind, s sender, scn Scenario, rec *recorder) *fleet {
	ctx, stop := context.WithCancel(context.Background())
	f := &fleet{kind: kind, s: s, rec: rec, deadline: scn.Deadline, ctx: ctx, stop: stop}
	if kind == Async {
		return f
	}
	for class := range scn.Classes {
		// A queue of a second of the whole offer at 10x: what a
		// server's accept backlog holds before it refuses requests.
		ch := make(chan time.Time, 4096)
		f.reqs = append(f.reqs, ch)
		switch kind {
		case Sync, Legacy:
			for range syncHandlers {
				f.wg.Go(func() { f.handle(class, ch) })
			}
		case Batch:
			f.wg.Go(func() { f.batches(class, ch) })
		}
	}
	return f
}

// send is one request of producer class arriving at created. It never
// blocks: a Sync or Batch request that finds the queue full is lost and
// counted as overflow.
func (f *fleet) send(ctx context.Context, class int, created time.Time) {
	if f.kind == Async {
		f.s.async(ctx, class, created)
		return
	}
	select {
	case f.reqs[class] <- created:
	default:
		f.rec.overflow.Add(1)
	}
}

// handle is one request handler: its caller waits until the request's
// deadline at most.
func (f *fleet) handle(class int, ch <-chan time.Time) {
	for {
		select {
		case <-f.ctx.Done():
			return
		case created := <-ch:
			if time.Since(created) >= f.deadline {
				// Its caller gave up while it waited for a handler:
				// nothing the producer did, so it is not handed to it
				// (the SDK would report a done context as a refusal,
				// a naive client as a failure).
				f.rec.expired.Add(1)
				continue
			}
			rctx, cancel := context.WithDeadline(f.ctx, created.Add(f.deadline))
			f.s.sync(rctx, class, created)
			cancel()
		}
	}
}

// batches sends what arrived every batchEvery, in one call, and waits for
// its outcome before the next.
func (f *fleet) batches(class int, ch <-chan time.Time) {
	t := time.NewTicker(batchEvery)
	defer t.Stop()
	var pending []time.Time
	for {
		select {
		case <-f.ctx.Done():
			return
		case created := <-ch:
			pending = append(pending, created)
		case <-t.C:
			if len(pending) == 0 {
				continue
			}
			rctx, cancel := context.WithDeadline(f.ctx, pending[0].Add(f.deadline))
			f.s.batch(rctx, class, pending)
			cancel()
			pending = pending[:0]
		}
	}
}

func (f *fleet) allowed() float64 { return f.s.allowed() }

// close stops the handlers (a call in progress ends with its context),
// then closes the sender and returns its totals.
func (f *fleet) close() Totals {
	f.stop()
	f.wg.Wait()
	tot := f.s.close()
	tot.Overflow, tot.Expired = f.rec.overflow.Load(), f.rec.expired.Load()
	return tot
}

// sdkProducer is what the bench needs of the SDK's Kafka and NATS producers.
type sdkProducer interface {
	Quota(topic string) (producerclient.Quota, bool)
	Flush(ctx context.Context) error
	Stats() producerclient.Stats
	Close() error
}

// allowedOf sums the producers' current quotas on topic.
func allowedOf[P sdkProducer](ps []P, topic string) float64 {
	qs := make([]producerclient.Quota, 0, len(ps))
	for _, p := range ps {
		q, _ := p.Quota(topic)
		qs = append(qs, q)
	}
	return sumQuota(qs)
}

// closeAll flushes (for up to a second), counts and closes the producers.
func closeAll[P sdkProducer](ps []P) Totals {
	fctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var tot Totals
	for _, p := range ps {
		_ = p.Flush(fctx)
		addStats(&tot, p.Stats())
		_ = p.Close()
	}
	return tot
}
