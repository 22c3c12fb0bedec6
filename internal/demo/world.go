// Package demo builds the self-contained world of `lagbridge demo`: an
// embedded Kafka (kfake) and an embedded nats-server with JetStream, a
// synthetic producer on each, and consumers whose speed follows a profile
// (normal, slowed, recovered), so that lag and head age rise and fall.
//
// Everything listens on 127.0.0.1 and stops with Close.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/internal/embedded"
)

// Names of the demo's clusters, topics, groups, streams and consumers.
const (
	KafkaCluster = "demo-kafka"
	NATSCluster  = "demo-nats"
	KafkaTopic   = "orders"
	KafkaGroup   = "billing"
	NATSStream   = "EVENTS"
	NATSSubject  = "events.created"
	NATSConsumer = "processor"
	partitions   = 6
)

// Brokers are the embedded brokers.
type Brokers struct {
	Kafka    *kfake.Cluster
	NATS     *server.Server
	storeDir string
}

// KafkaAddrs returns the kfake listen addresses.
func (b *Brokers) KafkaAddrs() []string { return b.Kafka.ListenAddrs() }

// NATSURL returns the embedded server's client URL.
func (b *Brokers) NATSURL() string { return b.NATS.ClientURL() }

// StartBrokers starts kfake (one topic, six partitions) and a JetStream
// nats-server storing in storeDir (a temporary folder the caller removes).
func StartBrokers(storeDir string) (*Brokers, error) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, KafkaTopic))
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	ns, err := StartNATS(storeDir)
	if err != nil {
		kc.Close()
		return nil, err
	}
	return &Brokers{Kafka: kc, NATS: ns, storeDir: storeDir}, nil
}

// StartNATS starts an embedded nats-server with JetStream on a free
// loopback port (see package embedded).
func StartNATS(storeDir string) (*server.Server, error) { return embedded.NATS(storeDir) }

// Close stops both brokers.
func (b *Brokers) Close() {
	b.Kafka.Close()
	b.NATS.Shutdown()
	b.NATS.WaitForShutdown()
}

// Profile gives the consumers' speed in messages per second at elapsed time
// d since the start.
type Profile func(d time.Duration) float64

// StepProfile is the demo's story in thirds of total: normal speed, a slow
// middle (the bad query plan), and recovery.
func StepProfile(total time.Duration, normal, slow float64) Profile {
	return func(d time.Duration) float64 {
		if d >= total/4 && d < total*3/5 {
			return slow
		}
		return normal
	}
}

// Workload runs the synthetic producers and consumers.
type Workload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kcl    []*kgo.Client
	rep    *consumerclient.KafkaReporter // nil without a daemon to report to
	nc     *nats.Conn
	mu     sync.Mutex
	err    error
	// Counters, read with Stats.
	stats Stats
}

// Stats counts what the workload did.
type Stats struct {
	KafkaProduced, KafkaConsumed, NATSProduced, NATSConsumed int64
}

// StartWorkload produces at produceRate msg/s to both brokers and consumes
// at the profile's speed until Close. Its clients run on their libraries'
// defaults: the Kafka consumer is a franz-go poll loop that auto-commits
// every 5 s, the NATS consumer acknowledges each message. It starts five
// goroutines (two producers, two consumers, one speed governor); Close
// stops them.
func StartWorkload(b *Brokers, produceRate float64, profile Profile) (*Workload, error) {
	return startWorkload(b, produceRate, profile, "")
}

// StartReportingWorkload is StartWorkload with the consumer hook of
// consumerclient on the Kafka consumer, reporting its position to the
// daemon at daemonURL (auto-commit stays at 5 s), as the README tells
// users to run a consumer whose deadline is seconds.
func StartReportingWorkload(b *Brokers, produceRate float64, profile Profile, daemonURL string) (*Workload, error) {
	return startWorkload(b, produceRate, profile, daemonURL)
}

func startWorkload(b *Brokers, produceRate float64, profile Profile, daemonURL string) (*Workload, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{cancel: cancel}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddrs()...), kgo.DefaultProduceTopic(KafkaTopic))
	if err != nil {
		cancel()
		return nil, err
	}
	w.kcl = []*kgo.Client{prod}
	opts := []kgo.Opt{kgo.SeedBrokers(b.KafkaAddrs()...), kgo.ConsumerGroup(KafkaGroup), kgo.ConsumeTopics(KafkaTopic)}
	if daemonURL != "" {
		w.rep, err = consumerclient.NewKafkaReporter(consumerclient.Config{URL: daemonURL, Cluster: KafkaCluster,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("consumer reporter: %w", err)
		}
		opts = append(opts, kgo.WithHooks(w.rep.Hook()))
	}
	cons, err := kgo.NewClient(opts...)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.kcl = append(w.kcl, cons)
	nc, err := nats.Connect(b.NATSURL())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	w.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		w.Close()
		return nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: NATSStream, Subjects: []string{"events.>"}, AllowDirect: true}); err != nil {
		w.Close()
		return nil, fmt.Errorf("create stream: %w", err)
	}
	jc, err := js.CreateOrUpdateConsumer(ctx, NATSStream, jetstream.ConsumerConfig{
		Durable: NATSConsumer, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "events.>", MaxAckPending: 1000,
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("create consumer: %w", err)
	}

	klim := rate.NewLimiter(rate.Limit(profile(0)), 50)
	nlim := rate.NewLimiter(rate.Limit(profile(0)), 50)
	w.wg.Add(5)
	go func() { defer w.wg.Done(); govern(ctx, profile, nil, klim, nlim) }()
	go func() { defer w.wg.Done(); w.produceKafka(ctx, prod, produceRate) }()
	go func() { defer w.wg.Done(); w.produceNATS(ctx, js, produceRate) }()
	go func() { defer w.wg.Done(); w.consumeKafka(ctx, cons, klim) }()
	go func() { defer w.wg.Done(); w.consumeNATS(ctx, jc, nlim) }()
	return w, nil
}

// govern sets the limiters' rate to the profile's speed every 100 ms until
// ctx is done; onSet, when not nil, sees each speed.
func govern(ctx context.Context, profile Profile, onSet func(float64), lims ...*rate.Limiter) {
	start := time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r := profile(time.Since(start))
			if onSet != nil {
				onSet(r)
			}
			for _, l := range lims {
				l.SetLimit(rate.Limit(r))
			}
		}
	}
}

// pace calls fn with the number of messages due every 10 ms for rate r.
func pace(ctx context.Context, r float64, fn func(n int)) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	start, sent := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			due := int(time.Since(start).Seconds()*r) - sent
			if due > 0 {
				fn(due)
				sent += due
			}
		}
	}
}

func (w *Workload) produceKafka(ctx context.Context, cl *kgo.Client, r float64) {
	pace(ctx, r, func(n int) {
		for range n {
			cl.Produce(ctx, &kgo.Record{Value: []byte("order")}, func(_ *kgo.Record, err error) {
				if err == nil {
					w.add(&w.stats.KafkaProduced)
				} else if ctx.Err() == nil {
					w.fail(err)
				}
			})
		}
	})
}

func (w *Workload) produceNATS(ctx context.Context, js jetstream.JetStream, r float64) {
	pace(ctx, r, func(n int) {
		for range n {
			if _, err := js.PublishAsync(NATSSubject, []byte("event")); err != nil {
				if ctx.Err() == nil {
					w.fail(err)
				}
				return
			}
			w.add(&w.stats.NATSProduced)
		}
	})
}

func (w *Workload) consumeKafka(ctx context.Context, cl *kgo.Client, lim *rate.Limiter) {
	for ctx.Err() == nil {
		for range cl.PollFetches(ctx).Records() {
			if lim.Wait(ctx) != nil {
				return
			}
			w.add(&w.stats.KafkaConsumed)
		}
	}
}

func (w *Workload) consumeNATS(ctx context.Context, c jetstream.Consumer, lim *rate.Limiter) {
	err := pullEach(ctx, c, func(m jetstream.Msg) bool {
		if lim.Wait(ctx) != nil {
			return false
		}
		if m.Ack() == nil {
			w.add(&w.stats.NATSConsumed)
		}
		return true
	})
	if err != nil && ctx.Err() == nil {
		w.fail(err)
	}
}

// pullEach hands c's messages to fn, one at a time, until fn returns false
// or ctx is done. It keeps pull requests in flight while fn works
// (Messages, not Fetch: a Fetch waits a round trip to the server for each
// batch, which on a busy machine holds the consumer below its profile's
// speed and its backlog never drains). It returns the consumer's error
// when the pull ends otherwise; a missed heartbeat it rides over.
func pullEach(ctx context.Context, c jetstream.Consumer, fn func(jetstream.Msg) bool) error {
	it, err := c.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return fmt.Errorf("pull from consumer: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		m, err := it.Next()
		switch {
		case ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return nil
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			continue
		case err != nil:
			return fmt.Errorf("pull from consumer: %w", err)
		case !fn(m):
			return nil
		}
	}
}

func (w *Workload) add(p *int64) {
	w.mu.Lock()
	*p++
	w.mu.Unlock()
}

func (w *Workload) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// Stats returns the counters so far and the first error seen.
func (w *Workload) Stats() (Stats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats, w.err
}

// Close stops the goroutines and waits for them, then closes the clients.
// It is idempotent.
func (w *Workload) Close() {
	w.cancel()
	w.wg.Wait()
	for _, c := range w.kcl {
		c.Close()
	}
	w.kcl = nil
	if w.rep != nil {
		w.rep.Close()
		w.rep = nil
	}
	if w.nc != nil {
		w.nc.Close()
		w.nc = nil
	}
}
