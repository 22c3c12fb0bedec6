package integration

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/quota"
)

// producer sends 1 KiB records synchronously, in batches of 16, as one
// client-id; second measures the bytes it gets through in one second. Each
// record is fresh random bytes: franz-go compresses batches by default, and
// the broker's quota counts the bytes it receives, so records that compress
// (zeros, or one value repeated) would be held to many times the quota in
// the bytes this side counts.
type producer struct {
	tb testing.TB
	cl *kgo.Client
}

func newProducer(tb testing.TB, addr, topic, id string) *producer {
	return &producer{tb: tb, cl: client(tb, addr, kgo.ClientID(id), kgo.DefaultProduceTopic(topic))}
}

func (p *producer) second() float64 {
	var sent float64
	start := time.Now()
	for time.Since(start) < time.Second {
		recs := make([]*kgo.Record, 16)
		for i := range recs {
			val := make([]byte, 1024)
			rand.Read(val)
			recs[i] = &kgo.Record{Value: val}
		}
		if err := p.cl.ProduceSync(ctxT(p.tb, 30*time.Second), recs...).FirstErr(); err != nil {
			p.tb.Fatalf("produce: %v", err)
		}
		sent += float64(len(recs) * 1024)
	}
	return sent / time.Since(start).Seconds()
}

// TestRealKafkaClientQuotaThrottles: a producer that never imported the SDK
// is slowed to the broker-native quota lagbridge sets for its client-id,
// side by side with an unthrottled client-id; the quota is removed when the
// pressure is gone.
func TestRealKafkaClientQuotaThrottles(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic := unique("quota")
	createTopic(t, addr, topic, 1, nil)
	throttled, freeID := unique("plain-producer"), unique("free-producer")
	const quota = 64 << 10 // 64 KiB/s

	q := publish.NewClientQuotas(client(t, addr), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Owns only its own client-id: quotas other tests (or runs) left on a
	// shared broker are theirs to clear.
	q.Owns = func(id string) bool { return id == throttled }
	if _, err := q.Apply(ctxT(t, 30*time.Second), map[string]float64{throttled: quota}); err != nil {
		t.Fatal(err)
	}
	// Apply returns once the controller took the quota; the broker applies
	// it from its metadata a moment later (0.5 s on a loaded machine, and
	// the first quota on a broker also switches its quota accounting on).
	// Produce only once the broker answers with it.
	poll(t, 10*time.Second, func() (bool, string) {
		cur, err := q.Current(ctxT(t, 10*time.Second))
		_, ok := cur[throttled]
		return err == nil && ok, fmt.Sprintf("quota not on the broker yet: %v (%v)", cur, err)
	})
	// The broker measures over a sliding window and lets a first burst
	// through (longer on a loaded machine) before it throttles, then holds
	// the client below the quota until the burst is repaid. Poll the real
	// broker until three consecutive seconds stay within the quota.
	slow := newProducer(t, addr, topic, throttled)
	var series []int
	held := 0
	var heldSum float64
	for i := 0; held < 3; i++ {
		if i == 20 {
			t.Fatalf("not throttled to %d B/s within 20 s; KiB per second: %v", quota, series)
		}
		r := slow.second()
		series = append(series, int(r/1024))
		if r <= quota*1.2 {
			held++
			heldSum += r
		} else {
			held, heldSum = 0, 0
		}
	}
	slowRate := heldSum / 3
	fast := newProducer(t, addr, topic, freeID)
	freeRate := (fast.second() + fast.second()) / 2
	t.Logf("throttled client, KiB per second: %v; held at %.0f KiB/s (quota %d KiB/s); unthrottled client in the same run: %.0f KiB/s, %.0fx faster",
		series, slowRate/1024, quota>>10, freeRate/1024, freeRate/slowRate)
	if freeRate < 10*slowRate {
		t.Errorf("unthrottled %.0f B/s is not well above throttled %.0f B/s", freeRate, slowRate)
	}

	res, err := q.Apply(ctxT(t, 30*time.Second), nil)
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != throttled {
		t.Fatalf("clear: %+v %v", res, err)
	}
	// The broker's metadata cache follows the controller's a moment later.
	poll(t, 10*time.Second, func() (bool, string) {
		cur, err := q.Current(ctxT(t, 30*time.Second))
		_, ok := cur[throttled]
		return err == nil && !ok, fmt.Sprintf("quota still set after clearing: %v (%v)", cur, err)
	})
}

// TestRealKafkaEngineSetsAndClearsClientQuota: the daemon itself, on the
// real broker, with a policy that opts into client quotas: a group that
// fell behind (a live member stuck, head far past its deadline) gets the
// listed producer's client-id throttled by the broker; once the group
// catches up, lagbridge lifts it back to the ceiling it keeps on listed
// client-ids (which throttles no one and makes the broker measure them).
func TestRealKafkaEngineSetsAndClearsClientQuota(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group, clientID := unique("cq"), unique("cq-g"), unique("legacy-producer")
	createTopic(t, addr, topic, 1, nil)
	prod := client(t, addr)
	old := time.Now().Add(-time.Minute)
	produce(t, prod, topic, 0, 200, func(int) time.Time { return old })
	consumeAndCommit(t, addr, group, topic, 1)                       // a commit,
	stuck := member(t, addr, group, false, kgo.ConsumeTopics(topic)) // then a live member that never commits

	cfg := config.Config{
		Kafka: []kafka.Config{{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group}}}},
		Quota: config.Quota{Policies: []quota.Policy{{
			Name: "cq", MaxAge: 2 * time.Second, KafkaClientQuota: true,
			Producers: []quota.ProducerSpec{{ID: clientID}},
		}}},
	}
	startApp(t, cfg)
	q := publish.NewClientQuotas(client(t, addr), slog.New(slog.NewTextHandler(io.Discard, nil)))
	poll(t, 30*time.Second, func() (bool, string) {
		cur, err := q.Current(ctxT(t, 10*time.Second))
		v, ok := cur[clientID]
		return err == nil && ok && publish.IsOurs(v) && v < publish.Ceiling, fmt.Sprintf("quotas %v err %v", cur, err)
	})
	t.Logf("behind: the broker holds client-id %s to a lagbridge quota", clientID)

	stuck()                                      // it leaves (seen live: the grace keeps the group binding)
	consumeAndCommit(t, addr, group, topic, 199) // caught up
	poll(t, 60*time.Second, func() (bool, string) {
		cur, err := q.Current(ctxT(t, 10*time.Second))
		return err == nil && cur[clientID] >= publish.Ceiling, fmt.Sprintf("quotas %v err %v", cur, err)
	})
	t.Logf("recovered: the quota is lifted to the ceiling")
}
