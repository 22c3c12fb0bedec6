package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/quota"
	"github.com/lagbridge/lagbridge/ttl"
)

// StoryProducer is one synthetic service producing at a fixed offered rate
// (open loop: like a service answering requests) through the SDK.
type StoryProducer struct {
	ID          string
	Criticality producerclient.Criticality
	Rate        float64 // offered messages per second, per broker
}

// StoryProducers are the demo's services: checkout must not be shed, the
// order API is important, the batch export can wait.
var StoryProducers = []StoryProducer{
	{ID: "checkout", Criticality: producerclient.CriticalPlus, Rate: 300},
	{ID: "orders-api", Criticality: producerclient.Critical, Rate: 500},
	{ID: "batch-export", Criticality: producerclient.Sheddable, Rate: 1000},
}

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
	kp     []*producerclient.KafkaProducer
	np     []*producerclient.NATSProducer
	// Producers, keyed "<id>" (Kafka) and "<id>.nats" (NATS).
	Producers map[string]*Tally
	Kafka     ConsumerTally
	NATS      ConsumerTally
	speed     atomic.Int64 // current consumer speed, msg/s
}

// StartStory starts producers that take their quotas from the daemon at
// daemonURL, and consumers whose speed follows profile.
func StartStory(b *Brokers, daemonURL string, profile Profile) (*Story, error) {
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
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddrs()...), kgo.ConsumerGroup(KafkaGroup), kgo.ConsumeTopics(KafkaTopic),
		kgo.AutoCommitInterval(200*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fail(err)
	}
	s.kcl = append(s.kcl, cons)

	for _, sp := range StoryProducers {
		cfg := producerclient.Config{
			Producer: sp.ID, Topics: []string{KafkaTopic}, Mode: producerclient.Drop, Criticality: sp.Criticality,
			MessageTTL: MessageDeadline,
			Leases:     producerclient.LeaseConfig{URL: daemonURL, Transport: producerclient.SSE},
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.KafkaAddrs()...), kgo.DefaultProduceTopic(KafkaTopic),
			kgo.ProducerLinger(5 * time.Millisecond)}, producerclient.KafkaClientOpts(nil)...)...)
		if err != nil {
			return fail(err)
		}
		s.kcl = append(s.kcl, cl)
		kp, err := producerclient.NewKafka(cl, cfg)
		if err != nil {
			return fail(fmt.Errorf("sdk producer %s: %w", sp.ID, err))
		}
		s.kp = append(s.kp, kp)
		cfg.Producer, cfg.Topics = sp.ID+natsSuffix, []string{NATSStream}
		np, err := producerclient.NewNATS(js, cfg)
		if err != nil {
			return fail(fmt.Errorf("sdk producer %s: %w", cfg.Producer, err))
		}
		s.np = append(s.np, np)
		kt, nt := &Tally{}, &Tally{}
		s.Producers[sp.ID], s.Producers[sp.ID+natsSuffix] = kt, nt
		s.wg.Go(func() { s.produceKafka(ctx, kp, sp.Rate, kt) })
		s.wg.Go(func() { s.produceNATS(ctx, np, sp.Rate, nt) })
	}

	klim := rate.NewLimiter(rate.Limit(profile(0)), 20)
	nlim := rate.NewLimiter(rate.Limit(profile(0)), 20)
	s.speed.Store(int64(profile(0)))
	s.wg.Go(func() { govern(ctx, profile, func(r float64) { s.speed.Store(int64(r)) }, klim, nlim) })
	s.wg.Go(func() { s.consumeKafka(ctx, cons, klim) })
	s.wg.Go(func() { s.consumeNATS(ctx, jc, nlim) })
	return s, nil
}

// Speed is the consumers' current speed in messages per second.
func (s *Story) Speed() int64 { return s.speed.Load() }

func (s *Story) produceKafka(ctx context.Context, p *producerclient.KafkaProducer, r float64, t *Tally) {
	pace(ctx, r, func(n int) {
		for range n {
			t.Offered.Add(1)
			p.ProduceAsync(ctx, &kgo.Record{Value: []byte("order")}, func(_ *kgo.Record, err error) { t.count(err) })
		}
	})
}

func (s *Story) produceNATS(ctx context.Context, p *producerclient.NATSProducer, r float64, t *Tally) {
	pace(ctx, r, func(n int) {
		for range n {
			t.Offered.Add(1)
			p.PublishAsync(ctx, nats.NewMsg(NATSSubject), func(_ *nats.Msg, _ *jetstream.PubAck, err error) { t.count(err) })
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

// process applies the consumer's deadline: an expired message is skipped
// at no cost; a live one takes capacity and counts as good, or as dead work
// if it was late by the time it was done.
func process(ctx context.Context, lim *rate.Limiter, c *ConsumerTally, deadlineHeader string, produced time.Time) bool {
	deadline, err := ttl.ParseDeadline(deadlineHeader)
	if err == nil && time.Now().After(deadline) {
		c.Skipped.Add(1)
		return true
	}
	if lim.Wait(ctx) != nil {
		return false
	}
	now := time.Now()
	if age := now.Sub(produced); age > time.Duration(c.MaxAge.Load()) {
		c.MaxAge.Store(int64(age))
	}
	if err == nil && now.After(deadline) {
		c.Dead.Add(1)
	} else {
		c.Good.Add(1)
	}
	return true
}

func (s *Story) consumeKafka(ctx context.Context, cl *kgo.Client, lim *rate.Limiter) {
	for ctx.Err() == nil {
		for _, r := range cl.PollRecords(ctx, 50).Records() {
			var dl string
			for _, h := range r.Headers {
				if h.Key == ttl.HeaderDeadline {
					dl = string(h.Value)
				}
			}
			if !process(ctx, lim, &s.Kafka, dl, r.Timestamp) {
				return
			}
		}
	}
}

func (s *Story) consumeNATS(ctx context.Context, c jetstream.Consumer, lim *rate.Limiter) {
	_ = pullEach(ctx, c, func(m jetstream.Msg) bool {
		md, _ := m.Metadata()
		var produced time.Time
		if md != nil {
			produced = md.Timestamp
		}
		if !process(ctx, lim, &s.NATS, m.Headers().Get(ttl.HeaderDeadline), produced) {
			return false
		}
		_ = m.Ack()
		return true
	})
}

// Close stops producers and consumers and waits for them. Idempotent.
func (s *Story) Close() {
	s.cancel()
	s.wg.Wait()
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
