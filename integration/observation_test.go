package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"

	natsobs "github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// metricFamilies reads the daemon's /metrics.
func metricFamilies(tb testing.TB, base string) map[string]*dto.MetricFamily {
	tb.Helper()
	code, body := get(tb, base+"/metrics")
	if code != 200 {
		tb.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.Label))
	for _, lp := range m.Label {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// cycles returns how many observation cycles cluster has completed, from
// /metrics.
func cycles(tb testing.TB, base, cluster string) float64 {
	tb.Helper()
	return cyclesIn(metricFamilies(tb, base), cluster)
}

// cyclesIn is cycles read from one scrape.
func cyclesIn(fams map[string]*dto.MetricFamily, cluster string) float64 {
	for _, m := range fams["lagbridge_observe_duration_seconds"].GetMetric() {
		if labelsOf(m)["cluster"] == cluster {
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

// targetOf returns the /v1/lag view of cluster/topic/group, or false.
func targetOf(r daemon.LagResponse, cluster, topic, group string) (daemon.TargetView, bool) {
	for _, tg := range r.Targets {
		if tg.Cluster == cluster && tg.Topic == topic && tg.Group == group {
			return tg, true
		}
	}
	return daemon.TargetView{}, false
}

// decisionOf returns the /v1/quotas decision of cluster/topic/group.
func decisionOf(tb testing.TB, base, cluster, topic, group string) (quota.Decision, bool) {
	tb.Helper()
	code, body := get(tb, base+quotaproto.PathQuotas)
	if code != 200 {
		tb.Fatalf("/v1/quotas: %d %s", code, body)
	}
	var q struct {
		Targets []quota.Decision `json:"targets"`
	}
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		tb.Fatal(err)
	}
	for _, d := range q.Targets {
		if d.Target.Cluster == cluster && d.Target.Topic == topic && d.Target.Group == group {
			return d, true
		}
	}
	return quota.Decision{}, false
}

// firstSight polls /v1/lag and /v1/quotas until cluster/topic/group shows
// in both, and returns the first view and the first decision seen of it.
func firstSight(tb testing.TB, base, cluster, topic, group string) (daemon.TargetView, quota.Decision) {
	tb.Helper()
	var (
		view     daemon.TargetView
		dec      quota.Decision
		okV, okD bool
	)
	poll(tb, 60*time.Second, func() (bool, string) {
		if !okV {
			view, okV = targetOf(lagAPI(tb, base), cluster, topic, group)
		}
		if !okD {
			dec, okD = decisionOf(tb, base, cluster, topic, group)
		}
		return okV && okD, fmt.Sprintf("in /v1/lag %v, in /v1/quotas %v", okV, okD)
	})
	return view, dec
}

// wantAbandonedAtOnce fails unless the first view and the first decision
// of cluster/topic/group (see firstSight) show it abandoned since first
// seen (rule never-live) and binding no producer.
func wantAbandonedAtOnce(tb testing.TB, base, cluster, topic, group string) {
	tb.Helper()
	view, dec := firstSight(tb, base, cluster, topic, group)
	if view.Status != lag.StatusAbandoned || view.Rule != "never-live" || view.Live != lag.LiveNo {
		tb.Errorf("%s/%s/%s first view: %s (%s: %s) live %s, want abandoned (never-live), idle", cluster, topic, group, view.Status, view.Rule, view.Reason, view.Live)
	}
	if dec.Rule != quota.RuleAbandoned || !dec.IsUnlimited() {
		tb.Errorf("%s/%s/%s first decision: %s rate %v (%s), want abandoned, unlimited", cluster, topic, group, dec.Rule, dec.Rate, dec.Reason)
	}
}

// goneWithin waits until target is absent from /v1/lag and from the lag
// metric, and fails when that took more than two cycles of the cluster
// after start (plus the one that may have been in flight at start).
func goneWithin(tb testing.TB, base, cluster, topic, group string, start float64) {
	tb.Helper()
	k := cluster + "/" + topic + "/" + group
	// The cycles are counted in the scrape that first lacks the target,
	// not after the poll notices: on a loaded machine the poll's own pause
	// and requests span cycles of their own.
	left := -1.0
	poll(tb, 20*time.Second, func() (bool, string) {
		fams := metricFamilies(tb, base)
		_, inMetrics := valuesIn(fams, "lagbridge_consumer_lag_messages")[k]
		if !inMetrics && left < 0 {
			left = cyclesIn(fams, cluster)
		}
		_, inAPI := targetOf(lagAPI(tb, base), cluster, topic, group)
		return !inAPI && !inMetrics, fmt.Sprintf("%s still in /v1/lag (%v) or /metrics (%v)", k, inAPI, inMetrics)
	})
	if n := left - start; n > 3 {
		tb.Fatalf("%s left after %.0f cycles, want within two (plus one in flight)", k, n)
	} else {
		tb.Logf("%s gone after %.0f cycles", k, n)
	}
}

// TestVanishedTargetsLeave: a deleted Kafka topic (kfake) and an
// ephemeral NATS consumer expired by the server leave /v1/lag and /metrics
// within two cycles of the deletion, while the targets that remain stay.
func TestVanishedTargetsLeave(t *testing.T) {
	b, err := demo.StartBrokers(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.KafkaAddrs()[0]
	createTopic(t, addr, "doomed", 1, nil)
	createTopic(t, addr, "kept", 1, nil)
	prod := client(t, addr)
	produce(t, prod, "doomed", 0, 10, func(int) time.Time { return time.Now() })
	produce(t, prod, "kept", 0, 10, func(int) time.Time { return time.Now() })
	adm := kadm.NewClient(prod)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "doomed", Partition: 0, At: 5, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "kept", Partition: 0, At: 5, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctxT(t, 10*time.Second), "g", offs); err != nil {
		t.Fatal(err)
	}

	js := jsStream(t, b.NATSURL(), "EV", "ev")
	if _, err := js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), "EV", jetstream.ConsumerConfig{Durable: "stays"}); err != nil {
		t.Fatal(err)
	}
	eph, err := js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), "EV", jetstream.ConsumerConfig{InactiveThreshold: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ephName := eph.CachedInfo().Name

	base := startApp(t, demo.Config(b, "", 250*time.Millisecond))
	poll(t, 20*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		_, k := targetOf(r, "demo-kafka", "doomed", "g")
		_, n := targetOf(r, "demo-nats", "EV", ephName)
		return k && n, fmt.Sprintf("%+v", r.Targets)
	})

	if _, err := adm.DeleteTopics(ctxT(t, 10*time.Second), "doomed"); err != nil {
		t.Fatal(err)
	}
	goneWithin(t, base, "demo-kafka", "doomed", "g", cycles(t, base, "demo-kafka"))

	// The server deletes the ephemeral consumer 2 s after its last use.
	var start float64
	poll(t, 20*time.Second, func() (bool, string) {
		_, err := js.Consumer(ctxT(t, 5*time.Second), "EV", ephName)
		start = cycles(t, base, "demo-nats")
		return errors.Is(err, jetstream.ErrConsumerNotFound), fmt.Sprintf("consumer %s: %v", ephName, err)
	})
	goneWithin(t, base, "demo-nats", "EV", ephName, start)

	r := lagAPI(t, base)
	for _, want := range [][3]string{{"demo-kafka", "kept", "g"}, {"demo-nats", "EV", "stays"}} {
		if _, ok := targetOf(r, want[0], want[1], want[2]); !ok {
			t.Fatalf("%v left with the others: %+v", want, r.Targets)
		}
	}
}

// TestNATSDurableNeverFetchingIsAbandoned: on the embedded nats-server a
// durable consumer that never fetches beside one that consumes. The first
// was never live since the daemon started: from its first reading, well
// inside the default rules.abandonAfter (2m), it is abandoned in /v1/lag
// and lagbridge_target_status, and its first decision binds no producer
// (rule abandoned, unlimited), while the live one stays measured.
func TestNATSDurableNeverFetchingIsAbandoned(t *testing.T) {
	ns, js := embeddedJS(t, "ORD", "ord")
	if _, err := js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), "ORD", jetstream.ConsumerConfig{Durable: "forgotten", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	worker, err := js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), "ORD", jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := worker.Consume(func(m jetstream.Msg) { _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	for i := range 50 {
		if _, err := js.Publish(ctxT(t, 10*time.Second), "ord", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	cfg := config.Config{
		Interval: 250 * time.Millisecond,
		NATS:     []natsobs.Config{{Cluster: "js", URLs: []string{ns.ClientURL()}}},
		Quota:    config.Quota{Policies: []quota.Policy{{Name: "ord", MaxAge: time.Second, Match: quota.Match{Topic: "ORD"}}}},
	}
	base := startApp(t, cfg)
	wantAbandonedAtOnce(t, base, "js", "ORD", "forgotten")
	poll(t, 20*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		f, ok1 := targetOf(r, "js", "ORD", "forgotten")
		w, ok2 := targetOf(r, "js", "ORD", "worker")
		d, ok3 := decisionOf(t, base, "js", "ORD", "forgotten")
		return ok1 && ok2 && ok3 && f.Status == lag.StatusAbandoned && f.Live == lag.LiveNo && f.Lag == 50 &&
				w.Status != lag.StatusAbandoned && w.Live == lag.LiveYes && d.Rule == quota.RuleAbandoned && d.IsUnlimited(),
			fmt.Sprintf("forgotten %s (%s) live %s lag %d; worker %s live %s; decision %s %v", f.Status, f.Reason, f.Live, f.Lag, w.Status, w.Live, d.Rule, d.Rate)
	})
	st := statusMetric(t, base, "js/ORD/forgotten")
	if st["abandoned"] != 1 {
		t.Fatalf("lagbridge_target_status of the forgotten consumer: %v", st)
	}
}

// embeddedJS starts the embedded nats-server with a stream of one subject
// and returns it with a JetStream client.
func embeddedJS(tb testing.TB, stream, subject string) (*server.Server, jetstream.JetStream) {
	tb.Helper()
	ns, err := demo.StartNATS(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Shutdown)
	return ns, jsStream(tb, ns.ClientURL(), stream, subject)
}

// jsStream connects a JetStream client to url for the test and creates a
// stream of one subject.
func jsStream(tb testing.TB, url, stream, subject string) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := js.CreateStream(ctxT(tb, 10*time.Second), jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		tb.Fatal(err)
	}
	return js
}

// statusMetric reads lagbridge_target_status of one target, by status.
func statusMetric(tb testing.TB, base, target string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for _, m := range metricFamilies(tb, base)["lagbridge_target_status"].GetMetric() {
		if l := labelsOf(m); l["cluster"]+"/"+l["topic"]+"/"+l["group"] == target {
			out[l["status"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestStaleTargetNamesItsCause: the NATS server goes away; once the
// target is stale, /v1/lag's error and reason name why ("nats: not
// connected"), not "no error reported".
func TestStaleTargetNamesItsCause(t *testing.T) {
	ns, js := embeddedJS(t, "S", "s")
	if _, err := js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), "S", jetstream.ConsumerConfig{Durable: "d"}); err != nil {
		t.Fatal(err)
	}
	base := startApp(t, config.Config{NATS: []natsobs.Config{{Cluster: "js", URLs: []string{ns.ClientURL()}, ReconnectWait: 100 * time.Millisecond}}})
	poll(t, 20*time.Second, func() (bool, string) {
		_, ok := targetOf(lagAPI(t, base), "js", "S", "d")
		return ok, "target not observed yet"
	})
	ns.Shutdown()
	poll(t, 30*time.Second, func() (bool, string) {
		tg, _ := targetOf(lagAPI(t, base), "js", "S", "d")
		return tg.Status == lag.StatusStale && strings.Contains(tg.Err, "not connected") && strings.Contains(tg.Reason, "not connected"),
			fmt.Sprintf("status %s err %q reason %q", tg.Status, tg.Err, tg.Reason)
	})
}
