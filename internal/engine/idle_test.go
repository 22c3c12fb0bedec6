package engine

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/quota"
)

// TestIdleCriticalOverSDK: two CRITICAL_PLUS producers (web in Drop mode,
// checkout in Block mode) configured with a topic they do not use, and a
// SHEDDABLE one (batch) asking for more than the limited topic has, all
// through the SDK against the engine behind the quota protocol's server.
//
//  1. While web and checkout are idle, batch gets the topic's rate. On
//     main (session 32's lead) their reports said 0, read as unknown,
//     and strict priority gave them the whole rate and batch 0 for as
//     long as they stayed idle: red there.
//  2. web's first message after idle (Drop) passes on the idle lease's
//     trickle (one message a refresh; 0 before it, which refused it);
//     the SDK reports at once (not at the refresh, 20 s here), and web
//     gets its class's share within the wait below. Red without the
//     report at the first message (core.resume).
//  3. checkout's first message after idle (Block) is admitted.
//  4. A sparse web (one message every 2 s) has every message admitted:
//     each is a first message after idle (red without the trickle).
func TestIdleCriticalOverSDK(t *testing.T) {
	// The engine's clock is set before the server starts and not moved
	// after: the observation cycles run first.
	c := &clock{now: time.Now()}
	hub := quotaserver.NewHub()
	pol := quota.Policy{Name: "p", MaxAge: 2 * time.Second, Producers: []quota.ProducerSpec{
		{ID: "web", Criticality: quota.CriticalPlus}, {ID: "checkout", Criticality: quota.CriticalPlus},
		{ID: "batch", Criticality: quota.Sheddable}}}
	// A 60 s lifetime: refreshes 20 s apart, so a report sooner is the
	// demand window's or a resume's.
	e, err := New(Config{Policies: []quota.Policy{pol}, Hub: hub, Now: c.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Lease: quota.LeaseConfig{Interval: time.Second, Lifetime: time.Minute, VersionBase: 100, Rand: func() float64 { return 0.5 }}})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 100, consume: 200}
	w.cycles(10)
	w.consume = 80
	w.cycles(2)
	total := e.Decisions()[0].Rate
	if !(total > 0) || total >= 100 {
		t.Fatalf("the topic's rate %v, want limited below the 100/s produced", total)
	}
	mux := http.NewServeMux()
	quotaserver.New(hub, e, quotaserver.Auth{}, prometheus.NewRegistry()).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { hub.Close(); ts.Close() })

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	producer := func(id string, crit producerclient.Criticality, mode producerclient.Mode) *producerclient.KafkaProducer {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, producerclient.KafkaClientOpts(nil)...)...)
		if err != nil {
			t.Fatal(err)
		}
		p, err := producerclient.NewKafka(cl, producerclient.Config{Producer: id, Topics: []string{"orders"}, Criticality: crit, Mode: mode,
			Leases: producerclient.LeaseConfig{URL: ts.URL}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(); cl.Close() })
		return p
	}
	web := producer("web", producerclient.CriticalPlus, producerclient.Drop)
	checkout := producer("checkout", producerclient.CriticalPlus, producerclient.Block)
	batch := producer("batch", producerclient.Sheddable, producerclient.Drop)
	// batch asks for 200/s, twice the topic's rate.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				_ = batch.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte("b")})
			}
		}
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
	rate := func(p *producerclient.KafkaProducer) float64 {
		q, ok := p.Quota("orders")
		if !ok || !q.FromLease {
			return -1
		}
		return q.Rate
	}
	waitRates := func(step string, within time.Duration, ok func(web, checkout, batch float64) bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			w, c, b := rate(web), rate(checkout), rate(batch)
			if ok(w, c, b) {
				t.Logf("%s: web %.1f, checkout %.1f, batch %.1f of %.1f", step, w, c, b, total)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: web %.1f, checkout %.1f, batch %.1f of %.1f after %v", step, w, c, b, total, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// 1. Their second reports (within the 0.5-1.5 s demand window) say
	// they measured no message: batch gets the topic's rate.
	trickle := 3 / time.Minute.Seconds() // one message a refresh (20 s)
	waitRates("idle", 10*time.Second, func(w, c, b float64) bool {
		return near(w, trickle) && near(c, trickle) && b >= total-2*trickle-1e-9 && b <= total
	})

	// 2. web's first message after idle passes on its trickle (one
	// message a refresh), and the report it triggers gives web the
	// class's share.
	admittedAt := time.Now()
	if err := web.Produce(context.Background(), &kgo.Record{Topic: "orders", Value: []byte("w")}); err != nil {
		t.Fatalf("web's first message after idle (Drop, its trickle): %v, want admitted", err)
	}
	waitRates("web resumed", 5*time.Second, func(w, c, b float64) bool { return near(w, total-trickle) && near(c, trickle) && b == 0 })
	t.Logf("web's class share %v after its first message after idle", time.Since(admittedAt))
	// The first message spent the trickle's token; the answer raised the
	// rate, not the tokens, so the next one is due 1/rate after the answer
	// (refused "retry after 14µs" once when produced at once).
	time.Sleep(time.Duration(float64(time.Second) / rate(web)))
	if err := web.Produce(context.Background(), &kgo.Record{Topic: "orders", Value: []byte("w")}); err != nil {
		t.Fatalf("web's message after its report's answer: %v", err)
	}

	// 3. checkout's first message after idle (Block) passes on its
	// trickle too; its report (unknown) shares the class with web.
	pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := checkout.Produce(pctx, &kgo.Record{Topic: "orders", Value: []byte("c")}); err != nil {
		t.Fatalf("checkout's first message after idle (Block): %v", err)
	}
	t.Logf("checkout's first message after idle admitted after %v", time.Since(began))
	waitRates("checkout resumed", 5*time.Second, func(w, c, b float64) bool { return c > 0 && b == 0 })

	// 4. web sends one message every 2 s: each resume report (unknown) is
	// followed within the demand window by a measured one that finds web
	// idle again, so every message meets the idle lease; the trickle lets
	// each pass (on 6bc9bf3, with a lease of 0, 5 of 5 were refused).
	for i := range 3 {
		time.Sleep(2 * time.Second)
		if err := web.Produce(context.Background(), &kgo.Record{Topic: "orders", Value: []byte("w")}); err != nil {
			t.Fatalf("web's sparse message %d (one every 2 s): %v", i, err)
		}
	}
}
