package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/lag"
)

// runApp validates cfg and runs the daemon until the test ends; it returns
// the address the daemon listens on (cfg.Listen as bound), at once.
func runApp(tb testing.TB, cfg config.Config) string {
	tb.Helper()
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
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("daemon stopped with %v", err)
		}
	})
	return a.Addr()
}

// startApp runs the daemon for cfg until the test ends and returns its base
// URL once /readyz answers 200.
func startApp(tb testing.TB, cfg config.Config) string {
	tb.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Log = config.Log{Level: "info", Format: "text"}
	base := "http://" + runApp(tb, cfg)
	poll(tb, 30*time.Second, func() (bool, string) {
		code, body := get(tb, base+"/readyz")
		return code == 200, body
	})
	return base
}

func get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// poll retries cond against a running server until it holds or d passes.
func poll(tb testing.TB, d time.Duration, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("condition not met in %s; last: %s", d, last)
}

func lagAPI(tb testing.TB, base string) daemon.LagResponse {
	tb.Helper()
	code, body := get(tb, base+"/v1/lag")
	if code != 200 {
		tb.Fatalf("/v1/lag: %d %s", code, body)
	}
	var r daemon.LagResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		tb.Fatal(err)
	}
	return r
}

// metricValues reads one gauge from /metrics, keyed by cluster/topic/group.
func metricValues(tb testing.TB, base, name string) map[string]float64 {
	tb.Helper()
	return valuesIn(metricFamilies(tb, base), name)
}

// valuesIn is metricValues read from one scrape.
func valuesIn(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fams[name].GetMetric() {
		l := labelsOf(m)
		out[l["cluster"]+"/"+l["topic"]+"/"+l["group"]] = m.GetGauge().GetValue()
	}
	return out
}

func key(t lag.Target) string { return t.Cluster + "/" + t.Topic + "/" + t.Group }

// TestDaemonEmbedded: the daemon against kfake and the embedded nats-server
// with a consumer slower than its producer. Lag and head age grow on both
// brokers, and /v1/lag and /metrics tell the same numbers.
func TestDaemonEmbedded(t *testing.T) {
	b, err := demo.StartBrokers(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	w, err := demo.StartWorkload(b, 500, func(time.Duration) float64 { return 200 })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	base := startApp(t, demo.Config(b, "", 250*time.Millisecond))

	poll(t, 30*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		n := 0
		for _, tg := range r.Targets {
			if tg.Lag > 100 && tg.HeadAgeSeconds > 0.3 && tg.RatesKnown {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%+v", r.Targets)
	})
	// The API and the metrics read one store: for a target whose cycle is
	// the same in the /v1/lag answers read before and after one scrape,
	// they agree exactly. Each cluster cycles on its own clock, so each
	// target is checked in an attempt its own cluster did not cycle
	// through (on a loaded machine few attempts fit between both).
	agreed := map[string]bool{}
	poll(t, 30*time.Second, func() (bool, string) {
		before := lagAPI(t, base)
		// /v1/lag's lag and head age are at the best known position,
		// as the estimated series; the committed ones are the broker's.
		fams := metricFamilies(t, base)
		lags := valuesIn(fams, "lagbridge_estimated_lag_messages")
		ages := valuesIn(fams, "lagbridge_estimated_head_age_seconds")
		committed := valuesIn(fams, "lagbridge_consumer_lag_messages")
		after := map[string]daemon.TargetView{}
		for _, tg := range lagAPI(t, base).Targets {
			after[key(tg.Target)] = tg
		}
		for _, tg := range before.Targets {
			k := key(tg.Target)
			if a, ok := after[k]; !ok || a.Lag != tg.Lag || !a.ObservedAt.Equal(tg.ObservedAt) {
				continue // a cycle of its cluster passed in between
			}
			if lags[k] != float64(tg.Lag) || committed[k] != float64(tg.CommittedLag) {
				return false, fmt.Sprintf("%s: metric lag %v (committed %v), api %d (committed %d)",
					k, lags[k], committed[k], tg.Lag, tg.CommittedLag)
			}
			// Head age is computed at read time: the metric is read
			// later, so it is older by at most the gap between reads.
			if d := ages[k] - tg.HeadAgeSeconds; d < 0 || d > 2 {
				return false, fmt.Sprintf("%s: metric head age %v, api %v", k, ages[k], tg.HeadAgeSeconds)
			}
			agreed[k] = true
		}
		return len(before.Targets) == 2 && len(agreed) == 2, fmt.Sprintf("%d targets; checked between two cycles: %v", len(before.Targets), agreed)
	})
}

// TestDaemonRealKafka: the daemon against the real broker agrees with
// kafka-consumer-groups, and reports the group's head age.
func TestDaemonRealKafka(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group := unique("daemon"), unique("daemon-g")
	createTopic(t, addr, topic, 2, nil)
	prod := client(t, addr)
	old := time.Now().Add(-30 * time.Second)
	produce(t, prod, topic, 0, 60, func(int) time.Time { return old })
	consumeAndCommit(t, addr, group, topic, 20)
	// A live member that never commits: the group binds (a group never
	// seen live would be abandoned), and its lag stays the committed one.
	member(t, addr, group, false, kgo.ConsumeTopics(topic))

	base := startApp(t, config.Config{Kafka: []kafka.Config{{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group}}}}})
	rows, err := kafkatest.GroupsDescribe(t, group)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 20*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		if len(r.Targets) != 1 {
			return false, fmt.Sprintf("%+v", r.Targets)
		}
		tg := r.Targets[0]
		return tg.Lag == kafkatest.TotalLag(rows) && tg.HeadAgeSeconds >= 30 && tg.Status == lag.StatusLagging,
			fmt.Sprintf("api lag %d head %.1fs status %s; kafka-consumer-groups lag %d", tg.Lag, tg.HeadAgeSeconds, tg.Status, kafkatest.TotalLag(rows))
	})
}

// TestDaemonStartsBeforeNATS: the daemon starts while its NATS server is
// not up yet, answers /readyz 503 saying which cluster it waits for, and
// turns ready by itself once the server comes.
func TestDaemonStartsBeforeNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := config.Config{Listen: "127.0.0.1:0", Interval: 250 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Log:  config.Log{Level: "info", Format: "text"},
		NATS: []nats.Config{{Cluster: "late", URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}, ReconnectWait: 100 * time.Millisecond}}}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatalf("daemon refused to start without NATS: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	base := "http://" + a.Addr()
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "late") {
		t.Fatalf("readyz before NATS: %d %s", code, body)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	poll(t, 30*time.Second, func() (bool, string) {
		code, body := get(t, base+"/readyz")
		return code == 200, body
	})
}

// testLogger discards the daemon's logs unless LAGBRIDGE_TEST_LOGS is set.
func testLogger(tb testing.TB) *slog.Logger {
	if os.Getenv("LAGBRIDGE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
