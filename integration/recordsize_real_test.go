package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// produceBytes counts the bytes of the Produce requests a client writes:
// what the broker charges the client's producer_byte_rate with.
type produceBytes struct{ n atomic.Int64 }

func (p *produceBytes) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, written int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // Produce
		p.n.Add(int64(written))
	}
}

// sizedTopic creates a topic of partitions partitions named from prefix,
// waits until the broker lists its logs, and returns it with a producer
// client-id and a producer whose Produce request bytes hook counts.
func sizedTopic(tb testing.TB, addr, prefix string, partitions int32) (topic, id string, prod *kgo.Client, hook *produceBytes) {
	tb.Helper()
	topic, id, hook = unique(prefix), unique("legacy"), &produceBytes{}
	createTopic(tb, addr, topic, partitions, nil)
	prod = client(tb, addr, kgo.DefaultProduceTopic(topic), kgo.WithHooks(hook), kgo.ClientID(id))
	adm := kadm.NewClient(client(tb, addr))
	set := kadm.TopicsSet{}
	for p := range partitions {
		set.Add(topic, p)
	}
	poll(tb, 30*time.Second, func() (bool, string) { // the new topic's logs appear on the broker
		n := 0
		dirs, err := adm.DescribeAllLogDirs(ctxT(tb, 10*time.Second), set)
		for _, d := range dirs {
			d.EachPartition(func(kadm.DescribedLogDirPartition) { n++ })
		}
		return err == nil && n == int(partitions), fmt.Sprintf("%d of %d partitions in the log dirs (%v)", n, partitions, err)
	})
	return topic, id, prod, hook
}

// TestRealKafkaRecordSizeMatchesBroker: the bytes per record lagbridge
// measures from the brokers (log growth over offset growth) are within
// 10% of the bytes the broker charges the producer's quota with, for a
// producer that sends one record per request (as a request handler does)
// and for one that sends batches.
func TestRealKafkaRecordSizeMatchesBroker(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	cases := []struct {
		name      string
		perCall   int
		valueSize int
	}{
		{"one 72-byte record per request", 1, 72},
		{"batches of 16 records of 1 KiB", 16, 1024},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			topic, id, prod, hook := sizedTopic(t, addr, "recsize", 3)
			sizes := publish.NewRecordSizes(client(t, addr))
			if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
				t.Fatal(err)
			}
			val := make([]byte, c.valueSize)
			_, _ = rand.Read(val) // incompressible, as most payloads nearly are
			const records = 480
			for sent := 0; sent < records; sent += c.perCall {
				recs := make([]*kgo.Record, c.perCall)
				for i := range recs {
					recs[i] = &kgo.Record{Value: val}
				}
				if err := prod.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
				t.Fatal(err)
			}
			got, ok := sizes.Charged(topic, id)
			if !ok {
				t.Fatalf("no size measured for %s", topic)
			}
			charged := float64(hook.n.Load()) / records
			t.Logf("measured %.1f B per record; the broker charged %.1f B per record (%.0f%%)", got, charged, 100*got/charged)
			if got < 0.9*charged || got > 1.1*charged {
				t.Errorf("measured %.1f B per record, the broker charged %.1f (off by more than 10%%)", got, charged)
			}
		})
	}
}

// TestRealKafkaRecordSizeFollowsBatching: a request handler's producer
// sends one record per request until Kafka throttles it, then what it
// buffered in large batches that compress far better; the bytes per record
// lagbridge measures follow within a few readings (the older rounds fade),
// so a byte quota does not let several times the records granted through.
func TestRealKafkaRecordSizeFollowsBatching(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, id, prod, hook := sizedTopic(t, addr, "recsize-batching", 1)
	sizes := publish.NewRecordSizes(client(t, addr))
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sizes.Now = func() time.Time { return clock }
	measure := func() {
		t.Helper()
		clock = clock.Add(time.Second) // one reading a second
		if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(records, perCall int) {
		t.Helper()
		for sent := 0; sent < records; sent += perCall {
			recs := make([]*kgo.Record, perCall)
			for i := range recs {
				recs[i] = &kgo.Record{Value: make([]byte, 128)} // compressible, as the bench's are
			}
			if err := prod.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	measure()
	send(480, 1) // unthrottled: one record per request
	measure()
	single, _ := sizes.PerRecord(topic)
	if rate, ok := sizes.Rate(topic); !ok || rate != 480 {
		t.Errorf("rate %v (%v), want the 480 records of the last second", rate, ok)
	}
	const rounds, records, perCall = 6, 480, 48 // throttled: what was buffered, in one batch
	var logged int64
	for range rounds {
		before := hook.n.Load()
		send(records, perCall)
		logged = hook.n.Load() - before
		measure()
	}
	got, _ := sizes.Charged(topic, id)
	batched := float64(logged) / records // what the broker charged per record in the last round
	t.Logf("one per request: %.1f B per record in the log; in batches of %d: charged %.1f B per record measured, %.1f by the requests", single, perCall, got, batched)
	if got < 0.9*batched || got > 1.1*batched {
		t.Errorf("after %d rounds of batches measured %.1f B per record; the batches' requests cost %.1f (one per request: %.1f in the log)", rounds, got, batched, single)
	}
}

// TestRealKafkaTakeoverQuotaSized: a replica that takes over leading, or
// a daemon that restarts, writes its first client quota for a topic
// within 10% of the one the lost leader wrote for the same rate: it sizes
// the topic's records at its first publish (from the log's tail), not by
// DefaultBytesPerMessage until it measured MinRecords new records (4.8
// times too high here, for the 72-byte records a request handler sends
// one per request). Both start with a fresh publisher: a follower's publisher
// never published (it is gated). Steering is left out (no Interval): the
// bytes per record are what this test is about.
func TestRealKafkaTakeoverQuotaSized(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, id, prod, _ := sizedTopic(t, addr, "takeover-bpm", 3)
	pols, err := quota.NewPolicies([]quota.Policy{{Name: "legacy", MaxAge: 2 * time.Second, KafkaClientQuota: true,
		Producers: []quota.ProducerSpec{{ID: id}}}})
	if err != nil {
		t.Fatal(err)
	}
	qt := quota.Topic{Kind: lag.KindKafka, Cluster: "real", Name: topic}
	const rate = 1000 // msg/s granted: the producer here is not throttled
	snap := publish.Snapshot{Policies: pols,
		Topics: map[quota.Topic]quota.TopicDecision{qt: {Policy: "legacy", Rate: rate, ProduceRate: 2 * rate}},
		Leases: []quota.Lease{{Producer: id, Topic: qt, Rate: rate}}}
	publisher := func() *publish.ClientQuotaPublisher {
		return &publish.ClientQuotaPublisher{Cluster: "real", Quotas: publish.NewClientQuotas(client(t, addr), testLogger(t)),
			Sizes: publish.NewRecordSizes(client(t, addr)), Log: testLogger(t)}
	}
	val := make([]byte, 72)
	_, _ = rand.Read(val)
	send := func(records int) {
		t.Helper()
		for range records {
			if err := prod.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Value: val}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	stored := func() float64 {
		t.Helper()
		cur, err := publish.NewClientQuotas(client(t, addr), testLogger(t)).Current(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return cur[id]
	}
	lost := publisher()
	for range 3 { // the lost leader measured the topic as it grew
		if err := lost.Publish(ctxT(t, 30*time.Second), snap); err != nil {
			t.Fatal(err)
		}
		send(240)
	}
	if err := lost.Publish(ctxT(t, 30*time.Second), snap); err != nil {
		t.Fatal(err)
	}
	before, want := stored(), lost.Want(snap)[id]
	// A graceful stop clears the quota; a lost leader leaves it, which
	// the new leader leaves alone when it wants the same within 2%: clear
	// it, so that the value read back is the one the new leader wrote.
	if err := lost.Clear(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	send(20) // a few records more between the leaders, fewer than MinRecords
	next := publisher()
	if err := next.Publish(ctxT(t, 30*time.Second), snap); err != nil {
		t.Fatal(err)
	}
	var after float64
	poll(t, 10*time.Second, func() (bool, string) {
		after = stored()
		return after > 0, "no client quota stored by the new leader"
	})
	t.Logf("lost leader: %.0f B/s wanted, %.0f stored; new leader's first: %.0f B/s wanted, %.0f stored (%.0f%%)",
		want, before, next.Want(snap)[id], after, 100*after/before)
	if after < 0.9*before || after > 1.1*before {
		t.Errorf("the new leader's first client quota is %.0f B/s, the lost leader's %.0f (off by more than 10%%)", after, before)
	}
}

// TestRealKafkaClientQuotaClearedOnStop: the daemon sets a client quota
// for a group that fell behind; a graceful stop removes it from the
// broker within one observation interval, so no producer stays throttled
// by a daemon that no longer runs.
func TestRealKafkaClientQuotaClearedOnStop(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group, clientID := unique("cqstop"), unique("cqstop-g"), unique("legacy-producer")
	createTopic(t, addr, topic, 1, nil)
	old := time.Now().Add(-time.Minute)
	produce(t, client(t, addr), topic, 0, 200, func(int) time.Time { return old })
	consumeAndCommit(t, addr, group, topic, 1)              // a commit,
	member(t, addr, group, false, kgo.ConsumeTopics(topic)) // then a live member that never commits

	const interval = time.Second
	cfg := config.Config{
		Listen: "127.0.0.1:0", Interval: interval, ShutdownTimeout: 5 * time.Second, Log: config.Log{Level: "info", Format: "text"},
		Kafka: []kafka.Config{{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group}}}},
		Quota: config.Quota{Policies: []quota.Policy{{
			Name: "cq", MaxAge: 2 * time.Second, KafkaClientQuota: true,
			Producers: []quota.ProducerSpec{{ID: clientID}},
		}}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.New(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	q := publish.NewClientQuotas(client(t, addr), testLogger(t))
	poll(t, 30*time.Second, func() (bool, string) {
		cur, err := q.Current(ctxT(t, 10*time.Second))
		v, ok := cur[clientID]
		return err == nil && ok && publish.IsOurs(v), fmt.Sprintf("quotas %v err %v", cur, err)
	})

	stop := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("daemon stopped with %v", err)
	}
	// The broker's metadata cache follows the controller's a moment
	// later: poll, and measure from the stop.
	poll(t, 10*time.Second, func() (bool, string) {
		cur, err := q.Current(ctxT(t, 10*time.Second))
		_, ok := cur[clientID]
		return err == nil && !ok, fmt.Sprintf("quotas %v err %v", cur, err)
	})
	if took := time.Since(stop); took > interval {
		t.Fatalf("the quota was gone %v after the stop, more than one interval (%v)", took, interval)
	} else {
		t.Logf("the quota was gone %v after the stop", took)
	}
}

// TestRealKafkaQuotaWindow: the daemon reads the broker's quota window
// (Kafka's defaults here: 11 samples of 1 s).
func TestRealKafkaQuotaWindow(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	w, err := publish.NewClientQuotas(client(t, addr), testLogger(t)).Window(ctxT(t, 10*time.Second))
	if err != nil || w != publish.DefaultWindow {
		t.Fatalf("window %+v (%v), want %+v", w, err, publish.DefaultWindow)
	}
}
