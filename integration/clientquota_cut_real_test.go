package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// longestThrottle records the longest throttle_time_ms the broker gave
// its clients (kgo.HookBrokerThrottle), and when each throttle of 2 s or
// more came, in seconds since t0 (unix nanoseconds, set at the first
// publish): where in a cut the longest holds come (the first cut, the
// step down about 11 s after it, the trickle).
type longestThrottle struct {
	ns   atomic.Int64
	t0   atomic.Int64
	mu   sync.Mutex
	long []string
}

func (m *longestThrottle) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d >= 2*time.Second {
		at := time.Since(time.Unix(0, m.t0.Load())).Seconds()
		m.mu.Lock()
		m.long = append(m.long, fmt.Sprintf("t=%.1fs: throttled %s", at, d))
		m.mu.Unlock()
	}
	for cur := m.ns.Load(); int64(d) > cur && !m.ns.CompareAndSwap(cur, int64(d)); cur = m.ns.Load() {
	}
}

// TestRealKafkaClientQuotaCutBounded: a cut to 0 msg/s steered onto a
// policy's client.id holds its producers under issue 17's 10 s at a
// response, never minutes, for the producers the broker's producer list does not
// describe as one: a non-idempotent producer (librdkafka's default, Java
// before 3.0: never listed) and a client.id three idempotent processes
// share (each listed on its own). Kafka's throttle has no upper bound: a
// quota set too low is a hold of minutes (session 23's young-window cap,
// reverted: 3 m 3 s and 24 s at one response; before and after it 1.05 s
// and 3.6 s). Legacy producers: 16 records of 256 B a request, a 2 s
// context each, as a request handler sends.
func TestRealKafkaClientQuotaCutBounded(t *testing.T) {
	cases := []struct {
		name   string
		procs  int
		opts   []kgo.Opt
		mature time.Duration // producing before the first quota
		steps  int           // publishes a second apart, the first 4 unlimited
	}{
		{"non-idempotent", 1, []kgo.Opt{kgo.DisableIdempotentWrite()}, 0, 14},
		{"shared client.id", 3, nil, 12 * time.Second, 16},
		// Past Kafka's 11 s window: the burst a throttle's end lets
		// through is then in the window the next value is taken from
		// (main held it 22 to 37 s at one response).
		{"shared client.id, 30 s cut", 3, nil, 12 * time.Second, 34},
		// Past ~45 s of cut the stored value fell below one request
		// a producer releases at a throttle's end (main held it 14 to
		// 21 s at one response, 57-59 s into the cut).
		{"shared client.id, 60 s cut", 3, nil, 12 * time.Second, 64},
	}
	addr := kafkatest.Bootstrap(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			topic, id := unique("quotacut"), unique("legacy")
			createTopic(t, addr, topic, 1, nil)
			m := &longestThrottle{}
			var prods []*kgo.Client
			for range c.procs {
				opts := append([]kgo.Opt{kgo.ClientID(id), kgo.DefaultProduceTopic(topic), kgo.WithHooks(m)}, c.opts...)
				prods = append(prods, client(t, addr, opts...))
			}
			pols, err := quota.NewPolicies([]quota.Policy{{Name: "legacy", MaxAge: 2 * time.Second, KafkaClientQuota: true,
				Producers: []quota.ProducerSpec{{ID: id}}}})
			if err != nil {
				t.Fatal(err)
			}
			qt := quota.Topic{Kind: lag.KindKafka, Cluster: "real", Name: topic}
			// produced is the topic's produce rate as the daemon measures it
			// (its growth since the last publish): the publisher reads the
			// window a client-id filled from it until it has measured the
			// topic's record sizes itself.
			var produced float64
			snap := func(rate float64) publish.Snapshot {
				return publish.Snapshot{Policies: pols,
					Topics: map[quota.Topic]quota.TopicDecision{qt: {Policy: "legacy", Rate: rate, ProduceRate: produced}},
					Leases: []quota.Lease{{Producer: id, Topic: qt, Rate: rate}}}
			}
			p := &publish.ClientQuotaPublisher{Cluster: "real", Quotas: publish.NewClientQuotas(client(t, addr), testLogger(t)),
				Sizes: publish.NewRecordSizes(client(t, addr)), Log: testLogger(t), Interval: time.Second}
			t.Cleanup(func() { _ = p.Clear(ctxT(t, 30*time.Second)) })
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var stored atomic.Int64
			for _, prod := range prods {
				wg.Go(func() {
					for ctx.Err() == nil {
						recs := make([]*kgo.Record, 16)
						for i := range recs {
							v := make([]byte, 256)
							_, _ = rand.Read(v)
							recs[i] = &kgo.Record{Value: v}
						}
						rc, done := context.WithTimeout(ctx, 2*time.Second)
						if prod.ProduceSync(rc, recs...).FirstErr() == nil {
							stored.Add(16)
						}
						done()
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			defer func() { cancel(); wg.Wait() }()
			time.Sleep(c.mature)
			var atCut int64
			m.t0.Store(time.Now().UnixNano())
			last, lastAt := stored.Load(), time.Now()
			if c.mature > 0 {
				produced = float64(last) / c.mature.Seconds()
			}
			for i := range c.steps {
				rate := 1e6
				if i >= 4 {
					rate = 0
				}
				if i == 4 {
					atCut = stored.Load()
				}
				if i > 0 {
					now := stored.Load()
					produced, last, lastAt = float64(now-last)/time.Since(lastAt).Seconds(), now, time.Now()
				}
				if err := p.Publish(ctxT(t, 30*time.Second), snap(rate)); err != nil {
					t.Fatal(err)
				}
				cur, _ := publish.NewClientQuotas(client(t, addr), testLogger(t)).Current(ctxT(t, 10*time.Second))
				// The step and its time since t0, the clock of the throttles
				// listed below (the steps drift from whole seconds: each
				// publish takes its time, more under load).
				t.Logf("step %2d, t=%4.1fs, rate %g: stored %.0f B/s; records stored so far %d; longest throttle %s",
					i, time.Since(time.Unix(0, m.t0.Load())).Seconds(), rate, cur[id], stored.Load(), time.Duration(m.ns.Load()))
				time.Sleep(time.Second)
			}
			m.mu.Lock()
			t.Logf("throttles of 2 s or more: %v", m.long)
			m.mu.Unlock()
			t.Logf("records stored during the %d s cut: %d", c.steps-4, stored.Load()-atCut)
			// Bound: issue 17's longest throttle, under 10 s. The reverted
			// cap held 3 m and 24 s; a fresh-clone CI run of the code
			// before and after it held the shared client.id 7.4 s once
			// (3.6 s in the other runs): the steps down to 0 reach
			// quotas Kafka's rule turns into holds of several intervals.
			// CI at 600ceeb held the 60 s case 10.164 s 11 s after a
			// burst, as the burst left the steering's span while Kafka
			// still counted it (Steering.mayHoldFloor, cutflake37).
			if l := time.Duration(m.ns.Load()); l >= 10*time.Second {
				t.Errorf("%d producer(s) of one client.id cut to 0 were throttled %s at one response, want under 10 s (issue 17)", c.procs, l)
			}
		})
	}
}
