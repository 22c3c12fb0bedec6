package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsobs "github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/quota"
	"github.com/lagbridge/lagbridge/ttl/natsguard"
)

// TestDaemonNATSGuardSkips, end to end on the embedded nats-server: a pull
// consumer behind ttl/natsguard (its default: expired messages terminated
// with the guard's reason) is given 30 messages already past their
// deadline and 10 live ones. The daemon's observer counts the guard's
// terms from the server's MSG_TERMINATED advisories: /v1/lag shows 30
// skipped on the consumer's target (and on its partition), and /metrics
// lagbridge_consumer_skipped_total 30; the live messages the handler acked
// are not skips.
func TestDaemonNATSGuardSkips(t *testing.T) {
	ns, js := embeddedJS(t, "SKP", "skp")
	cons, err := js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), "SKP", jetstream.ConsumerConfig{Durable: "guarded", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{
		Interval: 250 * time.Millisecond,
		NATS:     []natsobs.Config{{Cluster: "js", URLs: []string{ns.ClientURL()}}},
		Quota:    config.Quota{Policies: []quota.Policy{{Name: "skp", MaxAge: 300 * time.Millisecond, Match: quota.Match{Topic: "SKP"}}}},
	}
	base := startApp(t, cfg)
	publish := func(n int) {
		for i := range n {
			if _, err := js.Publish(ctxT(t, 10*time.Second), "skp", fmt.Appendf(nil, "m%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(30)
	time.Sleep(500 * time.Millisecond) // all 30 past the guard's 300 ms
	g, err := natsguard.New(natsguard.Config{MaxAge: 300 * time.Millisecond, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cc, err := cons.Consume(g.Wrap(ctx, func(context.Context, jetstream.Msg) error {
		handled <- struct{}{}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	poll(t, 20*time.Second, func() (bool, string) {
		st := g.Stats()
		return st.Expired == 30, fmt.Sprintf("guard stats %+v", st)
	})
	publish(10)
	for range 10 {
		select {
		case <-handled:
		case <-time.After(20 * time.Second):
			t.Fatal("the live messages were not handled")
		}
	}
	poll(t, 20*time.Second, func() (bool, string) {
		tg, ok := targetOf(lagAPI(t, base), "js", "SKP", "guarded")
		skipped := metricCounters(t, base, "lagbridge_consumer_skipped_total")["js/SKP/guarded"]
		return ok && tg.Lag == 0 && tg.Skipped == 30 && skipped == 30 && len(tg.Partitions) == 1,
			fmt.Sprintf("found %v: lag %d, %d skipped (metric %v), partitions %+v", ok, tg.Lag, tg.Skipped, skipped, tg.Partitions)
	})
	// And no more: the acks of the live messages count nothing.
	time.Sleep(time.Second)
	if tg, _ := targetOf(lagAPI(t, base), "js", "SKP", "guarded"); tg.Skipped != 30 {
		t.Fatalf("%d skipped a second later, want 30", tg.Skipped)
	}
}

// metricCounters reads one counter from /metrics, keyed by
// cluster/topic/group.
func metricCounters(tb testing.TB, base, name string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for _, m := range metricFamilies(tb, base)[name].GetMetric() {
		l := labelsOf(m)
		out[l["cluster"]+"/"+l["topic"]+"/"+l["group"]] = m.GetCounter().GetValue()
	}
	return out
}
