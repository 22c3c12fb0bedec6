package producerclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/ttl"
)

// Wrap a franz-go client: build it with KafkaClientOpts (the SDK is then
// the only retry layer, and keyless records can avoid lagging partitions),
// produce with a deadline, and branch on the typed errors.
func ExampleNewKafka() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(3, "orders")) // an in-process Kafka
	defer cluster.Close()

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
		producerclient.KafkaClientOpts(nil)...)...)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	p, err := producerclient.NewKafka(cl, producerclient.Config{
		Producer: "checkout",
		// Without a daemon (Leases.URL), the safe quota applies: here a
		// fixed 100 msg/s (the default is open).
		Leases: producerclient.LeaseConfig{Safe: producerclient.SafeQuota{Mode: producerclient.SafeRate, Rate: 100, Burst: 10}},
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	// The context's deadline travels with the record.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: "orders", Value: []byte(`{"order":42}`)}
	switch err := p.Produce(ctx, rec, producerclient.WithCriticality(producerclient.CriticalPlus)); {
	case err == nil:
		crit := ""
		for _, h := range rec.Headers {
			if h.Key == ttl.HeaderCriticality {
				crit = string(h.Value)
			}
		}
		fmt.Println("delivered,", crit)
	case errors.Is(err, producerclient.ErrStop):
		fmt.Println("do not retry:", err)
	case errors.Is(err, producerclient.ErrSlowDown):
		var re *producerclient.RejectError
		errors.As(err, &re)
		fmt.Println("retry after", re.RetryAfter, "the record is in re.Record")
	}
	// Output: delivered, CRITICAL_PLUS
}

// Drop mode at the public edge: over the quota, the message comes back at
// once with the time until a token is due.
func ExampleRejectError() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "clicks"))
	defer cluster.Close()
	cl, _ := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, producerclient.KafkaClientOpts(nil)...)...)
	defer cl.Close()
	p, _ := producerclient.NewKafka(cl, producerclient.Config{
		Producer: "edge",
		Mode:     producerclient.Drop,
		Leases:   producerclient.LeaseConfig{Safe: producerclient.SafeQuota{Mode: producerclient.SafeRate, Rate: 1, Burst: 1}},
	})
	defer p.Close()

	ctx := context.Background()
	_ = p.Produce(ctx, &kgo.Record{Topic: "clicks", Value: []byte("1")}) // takes the only token
	err := p.Produce(ctx, &kgo.Record{Topic: "clicks", Value: []byte("2")})
	var re *producerclient.RejectError
	if errors.As(err, &re) {
		fmt.Println(errors.Is(err, producerclient.ErrSlowDown), errors.Is(err, producerclient.ErrRateLimited))
		fmt.Println(re.Topic, re.Signal, re.RetryAfter.Round(time.Second), string(re.Record.Value))
	}
	// Output:
	// true true
	// clicks slow-down 1s 2
}

// Produce many records in one call: the quota, the headers and the
// bookkeeping are handled once per batch instead of once per record, and
// each record still gets its own callback. In Drop mode a batch larger
// than the tokens available sends the prefix that fits and hands the rest
// back, each record in its own *RejectError.
func ExampleKafkaProducer_ProduceBatchAsync() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(2, "events"))
	defer cluster.Close()
	cl, _ := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, producerclient.KafkaClientOpts(nil)...)...)
	defer cl.Close()
	p, _ := producerclient.NewKafka(cl, producerclient.Config{
		Producer: "ingest",
		Mode:     producerclient.Drop,
		Leases:   producerclient.LeaseConfig{Safe: producerclient.SafeQuota{Mode: producerclient.SafeRate, Rate: 1, Burst: 3}},
	})
	defer p.Close()

	batch := make([]*kgo.Record, 5)
	for i := range batch {
		batch[i] = &kgo.Record{Topic: "events", Value: []byte(fmt.Sprint(i))}
	}
	var mu sync.Mutex
	var delivered, limited []string
	p.ProduceBatchAsync(context.Background(), batch, func(r *kgo.Record, err error) {
		mu.Lock() // callbacks run on franz-go's goroutine and on this one
		defer mu.Unlock()
		switch {
		case err == nil:
			delivered = append(delivered, string(r.Value))
		case errors.Is(err, producerclient.ErrRateLimited):
			limited = append(limited, string(r.Value)) // err is a *RejectError holding r
		}
	})
	_ = p.Flush(context.Background()) // every callback has run
	sort.Strings(delivered)
	fmt.Println("delivered", delivered, "rate-limited", limited)

	// The synchronous form returns franz-go's ProduceResults.
	res := p.ProduceBatch(context.Background(), []*kgo.Record{{Topic: "events", Value: []byte("5")}})
	fmt.Println(errors.Is(res.FirstErr(), producerclient.ErrSlowDown))
	// Output:
	// delivered [0 1 2] rate-limited [3 4]
	// true
}

// Wrap a JetStream context: the lease key is the stream the subject
// belongs to; on a stream that allows per-message TTLs the message also
// gets Nats-TTL, so the broker drops it when nobody can use it any more.
func ExampleNewNATS() {
	dir := tempDir()
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	setup, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	_, _ = js.CreateStream(setup, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, AllowMsgTTL: true})

	p, err := producerclient.NewNATS(js, producerclient.Config{Producer: "billing", Criticality: producerclient.Sheddable})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	// Whoever uses this event gives up after 5s: so does the broker.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := &nats.Msg{Subject: "events.created", Data: []byte("hello")}
	ack, err := p.Publish(ctx, m)
	if err != nil {
		panic(err)
	}
	fmt.Println(ack.Stream, m.Header.Get(ttl.HeaderCriticality), m.Header.Get(jetstream.MsgTTLHeader))
	// Output: EVENTS SHEDDABLE 5
}

// Leases from the daemon: the producer reports its topics and demand and
// gets pushed a lease per topic. This stand-in daemon answers every
// producer with a stop on "orders".
func ExampleLeaseConfig() {
	set := quotaproto.LeaseSet{Producer: "svc-a", Version: 1, RefreshAfterMs: 10_000, Leases: []quotaproto.Lease{{
		Topic: "orders", Rate: new(float64), Signal: quotaproto.SignalStop, Version: 1,
		ExpiresAt: time.Now().Add(time.Minute), Reason: "consumer billing stopped"}}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+quotaproto.PathLeases, func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(set) })
	mux.HandleFunc("GET "+quotaproto.PathWatch, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // nothing changes
	})
	daemon := httptest.NewServer(mux)
	defer daemon.Close()

	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	defer cluster.Close()
	cl, _ := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, producerclient.KafkaClientOpts(nil)...)...)
	defer cl.Close()
	p, _ := producerclient.NewKafka(cl, producerclient.Config{
		Producer: "svc-a",
		Topics:   []string{"orders"},
		Leases:   producerclient.LeaseConfig{URL: daemon.URL},
	})
	defer p.Close()

	for q, _ := p.Quota("orders"); !q.FromLease; q, _ = p.Quota("orders") {
		time.Sleep(5 * time.Millisecond) // the first report is on its way
	}
	err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	fmt.Println(errors.Is(err, producerclient.ErrStop))
	fmt.Println(err)
	// Output:
	// true
	// producerclient: orders: stop: consumer billing stopped
}

// tempDir is a fresh directory for the example's JetStream store.
func tempDir() string {
	d, err := os.MkdirTemp("", "producerclient-example")
	if err != nil {
		panic(err)
	}
	return d
}
