package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// startKillableApp runs the daemon like startApp and also returns a kill
// function that stops it (idempotent; the test's cleanup calls it too).
func startKillableApp(tb testing.TB, cfg config.Config) (string, func()) {
	tb.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Log = config.Log{Level: "info", Format: "text"}
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, testLogger(tb))
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	kill := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("daemon stopped with %v", err)
			}
		})
	}
	tb.Cleanup(kill)
	base := "http://" + a.Addr()
	poll(tb, 30*time.Second, func() (bool, string) {
		code, body := get(tb, base+"/readyz")
		return code == 200, body
	})
	return base, kill
}

// tally counts what happened to one SDK producer's messages.
type tally struct {
	offered, acked, slowDown, stop, other, notHandedBack atomic.Int64
}

func (t *tally) count(err error, handedBack bool) {
	var re *producerclient.RejectError
	switch {
	case err == nil:
		t.acked.Add(1)
		return
	case errors.Is(err, producerclient.ErrStop):
		t.stop.Add(1)
	case errors.Is(err, producerclient.ErrSlowDown):
		t.slowDown.Add(1)
	default:
		t.other.Add(1)
	}
	if !errors.As(err, &re) || !handedBack {
		t.notHandedBack.Add(1)
	}
}

// sdkProducer is one SDK producer of the test, on either broker.
type sdkProducer struct {
	name  string
	topic string // lease key: Kafka topic or NATS stream
	crit  producerclient.Criticality
	rate  float64 // offered msg/s
	t     tally
	quota func() (producerclient.Quota, bool)
	stats func() producerclient.Stats
	send  func(ctx context.Context)
}

// pace calls send at rate r until ctx ends.
func pace(ctx context.Context, r float64, send func()) {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	start, sent := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			for due := int(time.Since(start).Seconds()*r) - sent; due > 0; due-- {
				send()
				sent++
			}
		}
	}
}

// grantWatch checks that a producer is held to its grant: it samples the
// enforced quota and the admitted count every few milliseconds and, over
// the intervals that start and end under a limited lease, accumulates the
// admitted messages and the most the token bucket may admit: rate x time
// (the higher of the interval's two rates), plus a burst whenever a
// limited stretch starts and at every lease change.
type grantWatch struct {
	have     bool
	limited  bool
	rate     float64
	version  uint64
	admitted uint64
	at       time.Time

	inGrant    float64       // admitted during limited intervals
	bound      float64       // what the grants allowed in them
	limitedFor time.Duration // total length of those intervals

	// Over the intervals under a limited lease that is not stop (the
	// quota binds but admits, so criticality decides who gets it; under
	// stop everyone is refused alike): messages asked and refused.
	stopped          bool
	asked, refused   uint64
	bindingFor       time.Duration
	lastAsked, lastR uint64
}

// refusedShare is the share of what the producer asked for that was
// refused, over the intervals under a binding, non-stop lease.
func (g *grantWatch) refusedShare() float64 {
	if g.asked == 0 {
		return 0
	}
	return float64(g.refused) / float64(g.asked)
}

func (g *grantWatch) sample(q producerclient.Quota, s producerclient.TopicStats, now time.Time) {
	limited := q.FromLease && !math.IsInf(q.Rate, 1)
	stopped := q.Signal == producerclient.SignalStop
	asked := s.Admitted + s.RejectedTotal()
	refused := s.Rejected["rate"] + s.Rejected["stop"] + s.Rejected["throttled"] + s.Rejected["in_flight"]
	if g.have && g.limited && !g.stopped && limited && !stopped {
		g.asked += asked - g.lastAsked
		g.refused += refused - g.lastR
		g.bindingFor += now.Sub(g.at)
	}
	g.stopped, g.lastAsked, g.lastR = stopped, asked, refused
	if g.have && g.limited && limited {
		g.inGrant += float64(s.Admitted - g.admitted)
		g.bound += math.Max(g.rate, q.Rate) * now.Sub(g.at).Seconds()
		g.limitedFor += now.Sub(g.at)
		if q.Version != g.version {
			g.bound += float64(q.Burst) + 1
		}
	}
	if limited && (!g.have || !g.limited) {
		g.bound += float64(q.Burst) + 1 // a fresh bucket may hold a burst
	}
	g.have, g.limited, g.rate, g.version, g.admitted, g.at = true, limited, q.Rate, q.Version, s.Admitted, now
}

// TestSDKAgainstDaemon runs SDK producers of two criticalities on kfake and
// on the embedded nats-server against the real daemon, offering five times
// what the consumers can take:
//
//  1. each producer is held to its grant (admitted <= the bucket's bound
//     over the grants it was given), slow-down reaches the caller as a
//     typed error with the message handed back, and sheddable traffic is
//     refused before critical traffic;
//  2. the consumers stop: stop reaches the caller as ErrStop;
//  3. the daemon is killed: every producer keeps its last lease until it
//     expires, then runs on its safe quota.
//
// A NATS producer that reads its leases from the daemon's KV bucket takes
// part too.
func TestSDKAgainstDaemon(t *testing.T) {
	b, err := demo.StartBrokers(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx := ctxT(t, 3*time.Minute)

	// The NATS stream and consumer exist before anyone publishes.
	nc, err := nats.Connect(b.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: demo.NATSStream, Subjects: []string{"events.>"}}); err != nil {
		t.Fatal(err)
	}
	jc, err := js.CreateOrUpdateConsumer(ctx, demo.NATSStream, jetstream.ConsumerConfig{Durable: demo.NATSConsumer, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000})
	if err != nil {
		t.Fatal(err)
	}

	// Consumers at a fixed 200 msg/s on each broker.
	const speed = 200.0
	consCtx, stopConsumers := context.WithCancel(ctx)
	var consWG sync.WaitGroup
	kcons := client(t, b.KafkaAddrs()[0], kgo.ConsumerGroup(demo.KafkaGroup), kgo.ConsumeTopics(demo.KafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(200*time.Millisecond))
	consWG.Add(2)
	go func() {
		defer consWG.Done()
		defer kcons.Close() // leaves the group: no members
		pace(consCtx, speed, func() {
			pctx, cancel := context.WithTimeout(consCtx, 50*time.Millisecond)
			kcons.PollRecords(pctx, 1)
			cancel()
		})
	}()
	go func() {
		defer consWG.Done()
		pace(consCtx, speed, func() {
			batch, err := jc.Fetch(1, jetstream.FetchMaxWait(50*time.Millisecond))
			if err != nil {
				return
			}
			for m := range batch.Messages() {
				_ = m.Ack()
			}
		})
	}()
	t.Cleanup(func() { stopConsumers(); consWG.Wait() })

	// The daemon: one policy, critical-plus and sheddable producers.
	const interval, lifetime = 250 * time.Millisecond, 5 * time.Second
	cfg := demo.Config(b, "", interval)
	cfg.Rules.StallAfter = 2 * time.Second
	// HardAge: once a new message would wait longer than 2 s (the consumers
	// stopped), the signal is stop.
	pol := quota.Policy{Name: "sdk", MaxAge: time.Second, HardAge: 2 * time.Second}
	for _, id := range []string{"svc-a", "svc-a.nats", "svc-kv.nats"} {
		pol.Producers = append(pol.Producers, quota.ProducerSpec{ID: id, Criticality: quota.CriticalPlus})
	}
	for _, id := range []string{"batch", "batch.nats"} {
		pol.Producers = append(pol.Producers, quota.ProducerSpec{ID: id, Criticality: quota.Sheddable})
	}
	cfg.Quota = config.Quota{LeaseLifetime: lifetime, Policies: []quota.Policy{pol}, NATSKV: config.NATSKV{Cluster: "demo-nats"}}
	base, kill := startKillableApp(t, cfg)

	// SDK producers: Drop mode, a 2 s deadline per message, a safe quota
	// of 50 msg/s once leases expire.
	safe := producerclient.SafeQuota{Mode: producerclient.SafeRate, Rate: 50}
	var producers []*sdkProducer
	for _, spec := range []struct {
		id   string
		crit producerclient.Criticality
	}{{"svc-a", producerclient.CriticalPlus}, {"batch", producerclient.Sheddable}} {
		cl := client(t, b.KafkaAddrs()[0], producerclient.KafkaClientOpts(nil)...)
		kp, err := producerclient.NewKafka(cl, producerclient.Config{Producer: spec.id, Topics: []string{demo.KafkaTopic},
			Mode: producerclient.Drop, Criticality: spec.crit, Leases: producerclient.LeaseConfig{URL: base, Transport: producerclient.SSE, Safe: safe}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kp.Close() })
		sp := &sdkProducer{name: spec.id + "@kafka", topic: demo.KafkaTopic, crit: spec.crit, rate: 2.5 * speed,
			quota: func() (producerclient.Quota, bool) { return kp.Quota(demo.KafkaTopic) }, stats: kp.Stats}
		sp.send = func(ctx context.Context) {
			mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			kp.ProduceAsync(mctx, &kgo.Record{Topic: demo.KafkaTopic, Value: []byte("x")}, func(r *kgo.Record, err error) {
				cancel()
				sp.t.count(err, errorRecord(err) == r)
			})
		}
		producers = append(producers, sp)

		np, err := producerclient.NewNATS(js, producerclient.Config{Producer: spec.id + ".nats", Topics: []string{demo.NATSStream},
			Mode: producerclient.Drop, Criticality: spec.crit, Leases: producerclient.LeaseConfig{URL: base, Safe: safe}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = np.Close() })
		sn := &sdkProducer{name: spec.id + "@nats", topic: demo.NATSStream, crit: spec.crit, rate: 2.5 * speed,
			quota: func() (producerclient.Quota, bool) { return np.Quota(demo.NATSStream) }, stats: np.Stats}
		sn.send = func(ctx context.Context) {
			mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			np.PublishAsync(mctx, nats.NewMsg(demo.NATSSubject), func(m *nats.Msg, _ *jetstream.PubAck, err error) {
				cancel()
				sn.t.count(err, errorMsg(err) == m)
			})
		}
		producers = append(producers, sn)
	}
	// A NATS producer whose leases come from the KV bucket (it reports its
	// demand over HTTP, as the daemon needs it to allocate).
	kvp, err := producerclient.NewNATS(js, producerclient.Config{Producer: "svc-kv.nats", Topics: []string{demo.NATSStream},
		Mode: producerclient.Drop, Leases: producerclient.LeaseConfig{URL: base, KVBucket: quotaproto.DefaultKVBucket, Safe: safe}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kvp.Close() })

	prodCtx, stopProducers := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	for _, p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			pace(prodCtx, p.rate, func() { p.t.offered.Add(1); p.send(prodCtx) })
		}()
	}
	t.Cleanup(func() { stopProducers(); prodWG.Wait() })

	// Phase 1: held to the grants. Sample every 10 ms until every producer
	// has spent 3 s under limited leases.
	watches := make([]grantWatch, len(producers))
	deadline := time.Now().Add(90 * time.Second)
	for {
		now := time.Now()
		done := true
		for i, p := range producers {
			q, _ := p.quota()
			watches[i].sample(q, p.stats().Topics[p.topic], now)
			done = done && watches[i].limitedFor >= 3*time.Second && watches[i].bindingFor >= 2*time.Second
		}
		if done {
			break
		}
		if now.After(deadline) {
			t.Fatalf("not every producer was limited for 3s: %+v", watches)
		}
		time.Sleep(10 * time.Millisecond) // sampling period, not a wait for a result
	}
	for i, p := range producers {
		w := &watches[i]
		q, _ := p.quota()
		t.Logf("%-12s %-14s admitted %5.0f of at most %7.1f in %v under limited grants; lease now %.1f msg/s %v; offered %d, acked %d, slow-down %d, stop %d",
			p.name, p.crit, w.inGrant, w.bound, w.limitedFor.Round(time.Millisecond), q.Rate, q.Signal, p.t.offered.Load(), p.t.acked.Load(), p.t.slowDown.Load(), p.t.stop.Load())
		if w.inGrant > w.bound {
			t.Errorf("%s admitted %.0f, more than its grants allow (%.1f)", p.name, w.inGrant, w.bound)
		}
		if offered := p.rate * w.limitedFor.Seconds(); w.inGrant > 0.6*offered {
			t.Errorf("%s admitted %.0f of about %.0f offered under limited grants: not held back", p.name, w.inGrant, offered)
		}
		if p.t.slowDown.Load()+p.t.stop.Load() == 0 {
			t.Errorf("%s: no slow-down or stop reached the caller", p.name)
		}
		if n := p.t.notHandedBack.Load() + p.t.other.Load(); n > 0 {
			t.Errorf("%s: %d failures were not a RejectError handing the message back", p.name, n)
		}
	}
	// Criticality: per broker, while the quota binds (limited, not stop),
	// the sheddable producer is refused a larger share of what it offers
	// than the critical-plus one.
	for i := 0; i < 2; i++ {
		crit := producers[i]
		rc := watches[i].refusedShare()
		rs := watches[i+2].refusedShare()
		t.Logf("%s: refused share under a binding lease (%v, %v of it) critical-plus %.2f, sheddable %.2f", crit.topic,
			watches[i].bindingFor.Round(time.Millisecond), watches[i+2].bindingFor.Round(time.Millisecond), rc, rs)
		if rs <= rc {
			t.Errorf("%s: sheddable traffic refused %.2f, critical-plus %.2f: sheddable must go first", crit.topic, rs, rc)
		}
	}
	poll(t, 30*time.Second, func() (bool, string) {
		q, _ := kvp.Quota(demo.NATSStream)
		return q.FromLease && q.Version > 0, fmt.Sprintf("KV producer quota %+v", q)
	})

	// Phase 2: the consumers stop; stop reaches every caller as ErrStop.
	stopConsumers()
	consWG.Wait()
	poll(t, 60*time.Second, func() (bool, string) {
		for _, p := range producers {
			if p.t.stop.Load() == 0 {
				q, _ := p.quota()
				return false, fmt.Sprintf("%s: no ErrStop yet (quota %v %s)", p.name, q.Signal, q.Reason)
			}
		}
		return true, ""
	})
	// The stop names the daemon's rule (protocol 1.4), through the
	// daemon's real lease path, for programs that match on it.
	for _, p := range producers {
		if q, _ := p.quota(); q.Signal == producerclient.SignalStop && q.Rule == "" {
			t.Errorf("%s: a stop lease without its rule: %+v", p.name, q)
		}
	}

	// Phase 3: the daemon dies. Leases are kept until they expire
	// (fail-static), then the safe quota applies.
	type held struct {
		version uint64
		expires time.Time
	}
	last := make([]held, len(producers))
	for i, p := range producers {
		q, _ := p.quota()
		last[i] = held{q.Version, q.ExpiresAt}
	}
	kill()
	killedAt := time.Now()
	for i, p := range producers {
		q, _ := p.quota()
		if !q.FromLease || q.Version != last[i].version {
			t.Errorf("%s: lease dropped at once when the daemon died: %+v", p.name, q)
		}
		if !last[i].expires.After(killedAt) {
			t.Errorf("%s: the last lease had already expired (%v)", p.name, last[i].expires)
		}
	}
	poll(t, 2*lifetime+5*time.Second, func() (bool, string) {
		for i, p := range producers {
			q, _ := p.quota()
			if q.FromLease {
				if time.Now().After(last[i].expires.Add(time.Second)) {
					t.Fatalf("%s: still on its lease a second after it expired at %v", p.name, last[i].expires)
				}
				return false, p.name + " still on its lease"
			}
			if q.Rate != safe.Rate {
				return false, fmt.Sprintf("%s: rate %v, want the safe %v", p.name, q.Rate, safe.Rate)
			}
		}
		return true, ""
	})
	t.Logf("leases kept %v after the daemon died, then the safe quota", time.Since(killedAt).Round(100*time.Millisecond))
	// On the safe quota messages flow again (the brokers are up).
	acked := make([]int64, len(producers))
	for i, p := range producers {
		acked[i] = p.t.acked.Load()
	}
	poll(t, 10*time.Second, func() (bool, string) {
		for i, p := range producers {
			if p.t.acked.Load() == acked[i] {
				return false, p.name + " delivers nothing on the safe quota"
			}
		}
		return true, ""
	})
}

func errorRecord(err error) *kgo.Record {
	var re *producerclient.RejectError
	if errors.As(err, &re) {
		return re.Record
	}
	return nil
}

func errorMsg(err error) *nats.Msg {
	var re *producerclient.RejectError
	if errors.As(err, &re) {
		return re.Msg
	}
	return nil
}
