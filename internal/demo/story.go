package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/quota"
	"github.com/lagbridge/lagbridge/ttl/kafkaguard"
	"github.com/lagbridge/lagbridge/ttl/natsguard"
)

// StoryProducer is one synthetic service producing at a fixed offered rate
// (open loop: its requests or jobs arrive whether or not the broker keeps
// up) through the SDK.
type StoryProducer struct {
	ID          string
	Criticality producerclient.Criticality
	Rate        float64 // offered messages per second, per broker
	// Requests: a service answering requests, each with one message that
	// a request handler sends and waits for (Produce, Publish), its caller
	// giving up after MessageDeadline. Otherwise a batch job that hands
	// its messages over without waiting (ProduceAsync, PublishAsync).
	Requests bool
}

// StoryProducers are the demo's services: checkout must not be shed, the
// order API is important, the batch export can wait.
var StoryProducers = []StoryProducer{
	{ID: "checkout", Criticality: producerclient.CriticalPlus, Rate: 300, Requests: true},
	{ID: "orders-api", Criticality: producerclient.Critical, Rate: 500, Requests: true},
	{ID: "batch-export", Criticality: producerclient.Sheddable, Rate: 1000},
}

// StoryRate is what StoryProducers offer together, msg/s per broker.
const StoryRate = 1800

// Cast returns StoryProducers with their rates scaled so that together
// they offer total msg/s per broker, each keeping its share (checkout
// 1/6, orders-api 5/18, batch-export 5/9); total <= 0 or not finite:
// StoryRate, the rates as listed.
func Cast(total float64) []StoryProducer {
	cast := slices.Clone(StoryProducers)
	if !(total > 0) || math.IsInf(total, 1) {
		return cast
	}
	for i := range cast {
		cast[i].Rate *= total / StoryRate
	}
	return cast
}

// requestHandlers is how many request handlers each request-answering
// service runs per broker; requestBacklog is how many requests wait for
// one (a server's accept backlog) before the next is turned away.
const (
	requestHandlers = 16
	requestBacklog  = 4096
)

// MessageDeadline is the deadline the demo's consumers really use.
const MessageDeadline = 2 * time.Second

// StoryPolicy is the quota policy the demo daemon runs with.
func StoryPolicy() quota.Policy {
	p := quota.Policy{Name: "demo", MaxAge: MessageDeadline, HardAge: 4 * MessageDeadline}
	for _, sp := range StoryProducers {
		for _, suffix := range []string{"", natsSuffix} {
			p.Producers = append(p.Producers, quota.ProducerSpec{ID: sp.ID + suffix, Criticality: sp.Criticality})
		}
	}
	return p
}

// natsSuffix tells a service's NATS producer from its Kafka one.
const natsSuffix = ".nats"

// Tally counts what happened to one producer's messages on one broker.
// Failed counts errors other than the quota's refusals, and requests that
// found every handler busy and the backlog full.
type Tally struct {
	Offered, Acked, Shed, Failed atomic.Int64
}

// ConsumerTally counts what a consumer did.
type ConsumerTally struct {
	// Good: consumed within the deadline. Dead: consumed after it (dead
	// work). Skipped: expired before consumption, acknowledged without
	// processing (the ttl guard's job), costing no capacity.
	Good, Dead, Skipped atomic.Int64
	// MaxAge is the largest age of a processed message, in nanoseconds.
	MaxAge atomic.Int64
}

// Story runs the SDK producers and the deadline-aware consumers.
type Story struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kcl    []*kgo.Client
	nc     *nats.Conn
	rep    *consumerclient.KafkaReporter
	kp     []*producerclient.KafkaProducer
	np     []*producerclient.NATSProducer
	// Producers, keyed "<id>" (Kafka) and "<id>.nats" (NATS).
	Producers map[string]*Tally
	Kafka     ConsumerTally
	NATS      ConsumerTally
	speed     atomic.Int64 // current consumer speed, msg/s
}

// StartStory starts producers that take their quotas from the daemon at
// daemonURL, and consumers whose speed follows profile. The Kafka consumer
// is a franz-go poll loop on the library's defaults (auto-commit every
// 5 s) with the consumer hook reporting its position to the daemon, behind
// the ttl guard; the NATS consumer acknowledges each message, behind the
// ttl guard. The producers offer offered msg/s per broker together, split
// as StoryProducers (see Cast; 0: StoryRate).
func StartStory(b *Brokers, daemonURL string, profile Profile, offered float64) (*Story, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Story{cancel: cancel, Producers: map[string]*Tally{}}
	fail := func(err error) (*Story, error) { s.Close(); return nil, err }

	nc, err := nats.Connect(b.NATSURL())
	if err != nil {
		return fail(fmt.Errorf("connect to embedded nats: %w", err))
	}
	s.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: NATSStream, Subjects: []string{"events.>"}, AllowDirect: true}); err != nil {
		return fail(fmt.Errorf("create stream: %w", err))
	}
	jc, err := js.CreateOrUpdateConsumer(ctx, NATSStream, jetstream.ConsumerConfig{
		Durable: NATSConsumer, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000,
	})
	if err != nil {
		return fail(fmt.Errorf("create consumer: %w", err))
	}
	// The consumer hook, as the README shows it: auto-commit stays at
	// franz-go's 5 s default, the hook tells the daemon where the poll
	// loop really is.
	s.rep, err = consumerclient.NewKafkaReporter(consumerclient.Config{URL: daemonURL, Cluster: KafkaCluster,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fail(fmt.Errorf("consumer reporter: %w", err))
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddrs()...), kgo.ConsumerGroup(KafkaGroup), kgo.ConsumeTopics(KafkaTopic),
		kgo.WithHooks(s.rep.Hook()))
	if err != nil {
		return fail(err)
	}
	s.kcl = append(s.kcl, cons)
	kg, err := kafkaguard.New(kafkaguard.Config{MaxAge: MessageDeadline, Progress: s.rep})
	if err != nil {
		return fail(err)
	}
	ng, err := natsguard.New(natsguard.Config{MaxAge: MessageDeadline})
	if err != nil {
		return fail(err)
	}
	for _, sp := range Cast(offered) {
		if err := s.startProducers(ctx, b, js, daemonURL, sp); err != nil {
			return fail(err)
		}
	}

	klim := rate.NewLimiter(rate.Limit(profile(0)), 20)
	nlim := rate.NewLimiter(rate.Limit(profile(0)), 20)
	s.speed.Store(int64(profile(0)))
	s.wg.Go(func() { govern(ctx, profile, func(r float64) { s.speed.Store(int64(r)) }, klim, nlim) })
	s.wg.Go(func() { s.consumeKafka(ctx, cons, kg, klim) })
	s.wg.Go(func() { s.consumeNATS(ctx, jc, ng, nlim) })
	return s, nil
}

// startProducers starts sp's SDK producers, on Kafka (a franz-go client
// with the library's defaults and the options the SDK requires) and on
// NATS, and the goroutines that offer them sp's traffic.
func (s *Story) startProducers(ctx context.Context, b *Brokers, js jetstream.JetStream, daemonURL string, sp StoryProducer) error {
	cfg := producerclient.Config{
		Producer: sp.ID, Topics: []string{KafkaTopic}, Mode: producerclient.Drop, Criticality: sp.Criticality,
		MessageTTL: MessageDeadline,
		Leases:     producerclient.LeaseConfig{URL: daemonURL, Transport: producerclient.SSE},
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.KafkaAddrs()...), kgo.DefaultProduceTopic(KafkaTopic)},
		producerclient.KafkaClientOpts(nil)...)...)
	if err != nil {
		return err
	}
	s.kcl = append(s.kcl, cl)
	kp, err := producerclient.NewKafka(cl, cfg)
	if err != nil {
		return fmt.Errorf("sdk producer %s: %w", sp.ID, err)
	}
	s.kp = append(s.kp, kp)
	cfg.Producer, cfg.Topics = sp.ID+natsSuffix, []string{NATSStream}
	np, err := producerclient.NewNATS(js, cfg)
	if err != nil {
		return fmt.Errorf("sdk producer %s: %w", cfg.Producer, err)
	}
	s.np = append(s.np, np)
	kt, nt := &Tally{}, &Tally{}
	s.Producers[sp.ID], s.Producers[sp.ID+natsSuffix] = kt, nt
	if !sp.Requests {
		s.wg.Go(func() { produceAsync(ctx, kp, sp.Rate, kt) })
		s.wg.Go(func() { publishAsync(ctx, np, sp.Rate, nt) })
		return nil
	}
	s.serve(ctx, sp.Rate, kt, func(rctx context.Context) error {
		return kp.Produce(rctx, &kgo.Record{Value: []byte("order")})
	})
	s.serve(ctx, sp.Rate, nt, func(rctx context.Context) error {
		_, err := np.Publish(rctx, nats.NewMsg(NATSSubject))
		return err
	})
	return nil
}

// Speed is the consumers' current speed in messages per second.
func (s *Story) Speed() int64 { return s.speed.Load() }

// serve runs a service answering requests at rate r: requestHandlers
// handlers each take the next request, send its one message with send and
// wait, under a context that ends when the request's caller gives up
// (MessageDeadline after it arrived). A request that finds the backlog
// full is turned away and counted as failed. When ctx ends no request
// arrives any more, and the handlers answer those already waiting, each
// within its own deadline, before they return: the demo's end cuts no
// request short, so every offered one is counted acked, shed or failed.
func (s *Story) serve(ctx context.Context, r float64, t *Tally, send func(context.Context) error) {
	reqs := make(chan time.Time, requestBacklog)
	for range requestHandlers {
		s.wg.Go(func() {
			for arrived := range reqs {
				rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), arrived.Add(MessageDeadline))
				t.count(send(rctx))
				cancel()
			}
		})
	}
	s.wg.Go(func() {
		defer close(reqs)
		pace(ctx, r, func(n int) {
			now := time.Now()
			for range n {
				t.Offered.Add(1)
				select {
				case reqs <- now:
				default:
					t.Failed.Add(1)
				}
			}
		})
	})
}

// produceAsync and publishAsync offer r msg/s until ctx ends. Each record
// is produced under a context the demo's end does not cancel, and Close
// flushes the producers before closing them: a record in flight at the end
// is delivered, or fails for a reason of its own, not for the end.
func produceAsync(ctx context.Context, p *producerclient.KafkaProducer, r float64, t *Tally) {
	pctx := context.WithoutCancel(ctx)
	pace(ctx, r, func(n int) {
		for range n {
			t.Offered.Add(1)
			p.ProduceAsync(pctx, &kgo.Record{Value: []byte("order")}, func(_ *kgo.Record, err error) { t.count(err) })
		}
	})
}

func publishAsync(ctx context.Context, p *producerclient.NATSProducer, r float64, t *Tally) {
	pctx := context.WithoutCancel(ctx)
	pace(ctx, r, func(n int) {
		for range n {
			t.Offered.Add(1)
			p.PublishAsync(pctx, nats.NewMsg(NATSSubject), func(_ *nats.Msg, _ *jetstream.PubAck, err error) { t.count(err) })
		}
	})
}

// count files one outcome: acked, shed by the quota (a typed rejection the
// caller chose to drop), or failed otherwise.
func (t *Tally) count(err error) {
	var rej *producerclient.RejectError
	switch {
	case err == nil:
		t.Acked.Add(1)
	case errors.As(err, &rej) && !errors.Is(err, producerclient.ErrClosed):
		t.Shed.Add(1)
	default:
		t.Failed.Add(1)
	}
}

// work is the consumers' handler of a live message, which the ttl guard
// gives it under hctx, a context that ends at the message's deadline: it
// takes capacity (waiting on lim under ctx, the consumer's own context)
// and counts the message as good, or as dead work if its deadline passed
// by the time it was done.
func work(ctx, hctx context.Context, lim *rate.Limiter, c *ConsumerTally, produced time.Time) error {
	if err := lim.Wait(ctx); err != nil {
		return err
	}
	now := time.Now()
	if age := now.Sub(produced); age > time.Duration(c.MaxAge.Load()) {
		c.MaxAge.Store(int64(age))
	}
	if deadline, ok := hctx.Deadline(); ok && now.After(deadline) {
		c.Dead.Add(1)
	} else {
		c.Good.Add(1)
	}
	return nil
}

// consumeKafka is the poll loop: the guard skips expired records at no
// cost and hands the live ones to work, telling the reporter of each
// record it finishes; franz-go commits what the previous poll returned
// every 5 s.
func (s *Story) consumeKafka(ctx context.Context, cl *kgo.Client, g *kafkaguard.Guard, lim *rate.Limiter) {
	for ctx.Err() == nil {
		if err := processKafka(ctx, g, cl.PollFetches(ctx).Records(), lim, &s.Kafka); err != nil {
			return // work fails only when ctx is done
		}
	}
}

// processKafka hands one poll's records to the guard, and the live ones
// to work, counting in c. Skipped counts the records the guard finished
// without work (expired): not a record work gave back unfinished when ctx
// ended, which the guard does not count as done either (counted as
// handled, it made the report's skipped count -1 at the end of a run).
func processKafka(ctx context.Context, g *kafkaguard.Guard, recs []*kgo.Record, lim *rate.Limiter, c *ConsumerTally) error {
	handled := 0
	done, err := g.Process(ctx, recs, func(hctx context.Context, r *kgo.Record) error {
		if err := work(ctx, hctx, lim, c, r.Timestamp); err != nil {
			return err
		}
		handled++
		return nil
	})
	c.Skipped.Add(int64(len(done) - handled))
	return err
}

// consumeNATS pulls messages one at a time through the guard, which
// terminates the expired ones unprocessed; the handler acknowledges each
// live message once it is done.
func (s *Story) consumeNATS(ctx context.Context, c jetstream.Consumer, g *natsguard.Guard, lim *rate.Limiter) {
	_ = pullEach(ctx, c, func(m jetstream.Msg) bool {
		var produced time.Time
		if md, _ := m.Metadata(); md != nil {
			produced = md.Timestamp
		}
		handled := false
		// The error is ctx's (work stops with it) or a failed
		// settlement, which the server answers by delivering the
		// message again.
		_ = g.Handle(ctx, m, func(hctx context.Context, m jetstream.Msg) error {
			handled = true
			if err := work(ctx, hctx, lim, &s.NATS, produced); err != nil {
				return err
			}
			_ = m.Ack()
			return nil
		})
		if !handled {
			s.NATS.Skipped.Add(1)
		}
		return ctx.Err() == nil
	})
}

// flushWait bounds how long Close waits for the records in flight at the
// end to be acknowledged.
const flushWait = 10 * time.Second

// Close stops producers and consumers and waits for them: the offering
// stops, the requests already waiting are answered (each within its
// deadline while the brokers answer; a broker that takes requests and
// never answers holds Close in franz-go's send, which ignores the context
// of a record already sent), the records in flight are flushed (for up to
// flushWait), then everything closes. Idempotent.
func (s *Story) Close() {
	s.cancel()
	s.wg.Wait()
	fctx, cancel := context.WithTimeout(context.Background(), flushWait)
	defer cancel()
	for _, p := range s.kp {
		_ = p.Flush(fctx) // what is still in flight after it fails at Close, counted
	}
	for _, p := range s.np {
		_ = p.Flush(fctx)
	}
	for _, p := range s.kp {
		p.Close()
	}
	for _, p := range s.np {
		p.Close()
	}
	s.kp, s.np = nil, nil
	for _, c := range s.kcl {
		c.Close()
	}
	s.kcl = nil
	if s.rep != nil {
		s.rep.Close()
		s.rep = nil
	}
	if s.nc != nil {
		s.nc.Close()
		s.nc = nil
	}
}

// KafkaQuotas returns each service's current quota on Kafka, as its SDK
// producer sees it, in StoryProducers order.
func (s *Story) KafkaQuotas() []producerclient.Quota {
	out := make([]producerclient.Quota, len(s.kp))
	for i, p := range s.kp {
		out[i], _ = p.Quota(KafkaTopic)
	}
	return out
}
