package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testStore() *Store {
	s := NewStore(map[string]lag.Kind{"c1": lag.KindKafka, "c2": lag.KindNATS})
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "orders", Group: "billing"}
	tr := lag.NewTracker(nil)
	tr.Observe(lag.Sample{Target: tg, At: t0, Members: 1, Partitions: []lag.PartitionSample{{Partition: 0, End: 100, Lag: 10, Committed: 90, HeadTime: t0.Add(-3 * time.Second), HeadKnown: true}}}, t0)
	st := tr.Observe(lag.Sample{Target: tg, At: t0.Add(time.Second), Members: 1, Partitions: []lag.PartitionSample{{Partition: 0, End: 300, Lag: 50, Committed: 250, HeadTime: t0.Add(-2 * time.Second), HeadKnown: true}}}, t0.Add(time.Second))
	s.Update(ClusterStatus{Name: "c1", Kind: lag.KindKafka, LastSuccess: t0, Observed: true}, []lag.State{st})
	return s
}

// TestMetricsExposition pins the metric names and labels of
// ../shared/ARCHITECTURE.md in exposition text.
func TestMetricsExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	NewMetrics(reg, testStore())
	want := `
# HELP lagbridge_consumer_lag_messages Unconsumed messages of a consumer group (Kafka) or consumer (NATS: pending plus ack pending).
# TYPE lagbridge_consumer_lag_messages gauge
lagbridge_consumer_lag_messages{cluster="c1",group="billing",topic="orders"} 50
# HELP lagbridge_head_age_seconds Age of the oldest unconsumed message.
# TYPE lagbridge_head_age_seconds gauge
lagbridge_head_age_seconds{cluster="c1",group="billing",topic="orders"} 3
# HELP lagbridge_produce_rate Smoothed produce rate in messages per second.
# TYPE lagbridge_produce_rate gauge
lagbridge_produce_rate{cluster="c1",group="billing",topic="orders"} 200
# HELP lagbridge_consume_rate Smoothed consume rate in messages per second.
# TYPE lagbridge_consume_rate gauge
lagbridge_consume_rate{cluster="c1",group="billing",topic="orders"} 160
# HELP lagbridge_time_to_drain_seconds Time to consume the backlog at current rates; +Inf when it does not shrink.
# TYPE lagbridge_time_to_drain_seconds gauge
lagbridge_time_to_drain_seconds{cluster="c1",group="billing",topic="orders"} +Inf
# HELP lagbridge_targets Targets watched on a cluster.
# TYPE lagbridge_targets gauge
lagbridge_targets{cluster="c1"} 1
lagbridge_targets{cluster="c2"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_consumer_lag_messages", "lagbridge_head_age_seconds",
		"lagbridge_produce_rate", "lagbridge_consume_rate", "lagbridge_time_to_drain_seconds", "lagbridge_targets"); err != nil {
		t.Fatal(err)
	}
	// A partition without a commit is counted apart, not in the lag.
	st := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "orders", Group: "new"}
	st.Update(ClusterStatus{Name: "c1", Kind: lag.KindKafka, LastSuccess: t0, Observed: true}, []lag.State{lag.NewTracker(nil).Observe(lag.Sample{
		Target: tg, At: t0, Members: 1, Partitions: []lag.PartitionSample{
			{Partition: 0, End: 100, Lag: 10, Committed: 90, HeadTime: t0.Add(-time.Second), HeadKnown: true},
			{Partition: 1, End: 500, Committed: -1}}}, t0)})
	reg2 := prometheus.NewPedanticRegistry()
	NewMetrics(reg2, st)
	if err := testutil.GatherAndCompare(reg2, strings.NewReader(`
# HELP lagbridge_consumer_lag_messages Unconsumed messages of a consumer group (Kafka) or consumer (NATS: pending plus ack pending).
# TYPE lagbridge_consumer_lag_messages gauge
lagbridge_consumer_lag_messages{cluster="c1",group="new",topic="orders"} 10
# HELP lagbridge_partitions_without_commit Partitions of the target without a committed offset (Kafka): their lag is unknown and counted nowhere else.
# TYPE lagbridge_partitions_without_commit gauge
lagbridge_partitions_without_commit{cluster="c1",group="new",topic="orders"} 1
`), "lagbridge_consumer_lag_messages", "lagbridge_partitions_without_commit"); err != nil {
		t.Fatal(err)
	}
	if v := ViewOf(st.States()[0], t0, false); v.UncommittedPartitions != 1 || v.Lag != 10 {
		t.Fatalf("view: uncommitted %d lag %d, want 1 and 10", v.UncommittedPartitions, v.Lag)
	}
	if n := testutil.CollectAndCount(NewMetrics(prometheus.NewRegistry(), testStore()), "lagbridge_target_status"); n != 5 {
		t.Fatalf("status series: %d, want one per status", n)
	}
}

func TestHTTP(t *testing.T) {
	store := testStore()
	h := NewHandler(store, prometheus.NewRegistry(), func() time.Time { return t0.Add(2 * time.Second) })
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	cases := []struct {
		name, path string
		code       int
		body       string
	}{
		// c2 never observed: not ready, and the answer says which.
		{"readyz names missing cluster", "/readyz", 503, "c2"},
		{"healthz", "/healthz", 200, "ok"},
		{"lag", "/v1/lag", 200, `"headAgeSeconds": 3`},
		{"lag filter", "/v1/lag?group=nope", 200, `"targets": []`},
		// A typo in a query parameter is an error, not an empty answer.
		{"unknown param", "/v1/lag?grup=x", 400, "unknown query parameter"},
		{"bad partitions", "/v1/lag?partitions=maybe", 400, "true or false"},
		{"metrics", "/metrics", 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := get(c.path)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.body) {
				t.Fatalf("%s: %d %s", c.path, rec.Code, rec.Body)
			}
		})
	}
	store.Update(ClusterStatus{Name: "c2", Kind: lag.KindNATS, Observed: true}, nil)
	if rec := get("/readyz"); rec.Code != 200 {
		t.Fatalf("readyz after all observed: %d", rec.Code)
	}
	var resp LagResponse
	if err := json.Unmarshal(get("/v1/lag?partitions=false").Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Targets) != 1 || resp.Targets[0].Partitions != nil || resp.Targets[0].TimeToDrainSeconds != nil {
		t.Fatalf("resp %+v", resp.Targets)
	}
}

// fakeSource plays a broker adapter: what no real component can play here
// is an error at an exact cycle.
type fakeSource struct {
	mu    sync.Mutex
	calls int
	fail  func(call int) bool
}

func (f *fakeSource) Observe(ctx context.Context) ([]lag.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil && f.fail(f.calls) {
		return nil, errors.New("broker unreachable")
	}
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	return []lag.Sample{{Target: tg, At: time.Now(), Partitions: []lag.PartitionSample{{End: int64(f.calls), Lag: 1, Committed: int64(f.calls) - 1}}}}, nil
}

// TestLoopReadyAfterSuccess: a failing first cycle does not make the daemon
// ready; the first success does; errors are counted; Run returns on cancel.
func TestLoopReadyAfterSuccess(t *testing.T) {
	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, store)
	src := &fakeSource{fail: func(n int) bool { return n <= 2 }}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: 10 * time.Millisecond, Store: store, Metrics: m}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	updates, unsub := store.Subscribe()
	defer unsub()
	deadline := time.After(10 * time.Second)
	for ready := false; !ready; {
		select {
		case <-updates:
			ready, _ = store.Ready()
		case <-deadline:
			t.Fatal("never ready")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if got := testutil.ToFloat64(m.observeErrors.WithLabelValues("c1")); got != 2 {
		t.Fatalf("errors counted: %v, want 2", got)
	}
	if st := store.States(); len(st) != 1 || st[0].Lag != 1 {
		t.Fatalf("states %+v", st)
	}
}

// TestLoopOverlaysConsumerReports: a consumer's report, received over the
// quota protocol, reaches the target's partition in the store while it is
// fresh, and leaves it once it is not.
func TestLoopOverlaysConsumerReports(t *testing.T) {
	var (
		mu  sync.Mutex
		clk = t0
	)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	reg := prometheus.NewRegistry()
	consumers := quotaserver.NewConsumers(quotaserver.ConsumersConfig{Fresh: 2 * time.Second, Now: now}, reg)
	hub := quotaserver.NewHub()
	defer hub.Close()
	mux := http.NewServeMux()
	consumers.Register(mux, quotaserver.New(hub, nil, quotaserver.Auth{}, reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	head := t0.Add(-700 * time.Millisecond)
	body := fmt.Sprintf(`{"kind":"kafka","cluster":"c1","group":"g","topics":[{"topic":"t","partitions":[{"partition":0,"position":5,"headTimeMs":%d}]}]}`, head.UnixMilli())
	resp, err := http.Post(srv.URL+quotaproto.PathConsumerReport, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("report: %d", resp.StatusCode)
	}

	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: &fakeSource{}, Interval: 10 * time.Millisecond, Store: store, Now: now, Reports: consumers}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	updates, unsub := store.Subscribe()
	defer unsub()
	// waitFor polls the store, one cycle at a time, until the reported
	// value of partition 0 is want.
	waitFor := func(want lag.Report) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case <-updates:
				if st := store.States(); len(st) == 1 && len(st[0].Partitions) == 1 && st[0].Partitions[0].Reported == want {
					return
				}
			case <-deadline:
				t.Fatalf("partition 0 never reported %+v: %+v", want, store.States())
			}
		}
	}
	waitFor(lag.Report{At: t0, Position: 5, HeadTime: time.UnixMilli(head.UnixMilli())})
	mu.Lock()
	clk = clk.Add(2*time.Second + time.Millisecond)
	mu.Unlock()
	waitFor(lag.Report{})
}
