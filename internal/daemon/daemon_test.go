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
	if n := testutil.CollectAndCount(NewMetrics(prometheus.NewRegistry(), testStore()), "lagbridge_target_status"); n != len(allStatuses) {
		t.Fatalf("status series: %d, want one per status", n)
	}
}

func TestHTTP(t *testing.T) {
	store := testStore()
	h := NewHandler(store, prometheus.NewRegistry())
	h.Now = func() time.Time { return t0.Add(2 * time.Second) }
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
		// So is a status no target can have (a typo, or a capital).
		{"bad status", "/v1/lag?status=Lagging", 400, "not one of ok, lagging"},
		{"status filter", "/v1/lag?status=stalled", 200, `"targets": []`},
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

// TestEstimateMetrics pins the names of the committed, estimated and
// cadence series, and the abandoned status.
func TestEstimateMetrics(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "orders", Group: "billing"}
	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	store.Update(ClusterStatus{Name: "c1", Kind: lag.KindKafka, Observed: true}, []lag.State{{
		Target: tg, Status: lag.StatusAbandoned, Source: lag.SourceEstimate, Live: lag.LiveNo,
		Lag: 500, HeadAge: 500 * time.Millisecond, CommittedLag: 4700, CommittedHeadAge: 4700 * time.Millisecond,
		CommitInterval: 5 * time.Second, Uncertainty: 3 * time.Second,
	}})
	reg := prometheus.NewPedanticRegistry()
	NewMetrics(reg, store)
	want := `
# HELP lagbridge_commit_interval_seconds Learned time between moves of the consumer's committed offsets (the longest over its partitions); 0 while unknown.
# TYPE lagbridge_commit_interval_seconds gauge
lagbridge_commit_interval_seconds{cluster="c1",group="billing",topic="orders"} 5
# HELP lagbridge_consumer_lag_messages Unconsumed messages of a consumer group (Kafka) or consumer (NATS: pending plus ack pending).
# TYPE lagbridge_consumer_lag_messages gauge
lagbridge_consumer_lag_messages{cluster="c1",group="billing",topic="orders"} 4700
# HELP lagbridge_consumer_live 1 when a consumer is attached to the target, 0 when none is, -1 when the broker does not say.
# TYPE lagbridge_consumer_live gauge
lagbridge_consumer_live{cluster="c1",group="billing",topic="orders"} 0
# HELP lagbridge_estimated_head_age_seconds Age of the oldest unconsumed message at the consumer's best known position.
# TYPE lagbridge_estimated_head_age_seconds gauge
lagbridge_estimated_head_age_seconds{cluster="c1",group="billing",topic="orders"} 0.5
# HELP lagbridge_estimated_lag_messages Unconsumed messages at the consumer's best known position (its fresh report, else its commits advanced by the measured rate between commits); what the status and the quotas use.
# TYPE lagbridge_estimated_lag_messages gauge
lagbridge_estimated_lag_messages{cluster="c1",group="billing",topic="orders"} 500
# HELP lagbridge_head_age_seconds Age of the oldest unconsumed message.
# TYPE lagbridge_head_age_seconds gauge
lagbridge_head_age_seconds{cluster="c1",group="billing",topic="orders"} 4.7
# HELP lagbridge_lag_source 1 for where the estimated figures come from (commits, estimate, consumer, first-seen), 0 for the others.
# TYPE lagbridge_lag_source gauge
lagbridge_lag_source{cluster="c1",group="billing",source="commits",topic="orders"} 0
lagbridge_lag_source{cluster="c1",group="billing",source="consumer",topic="orders"} 0
lagbridge_lag_source{cluster="c1",group="billing",source="estimate",topic="orders"} 1
lagbridge_lag_source{cluster="c1",group="billing",source="first-seen",topic="orders"} 0
# HELP lagbridge_position_uncertainty_seconds How old the exact knowledge behind the estimated figures is (time since the commit or report they extrapolate from); 0 when exact.
# TYPE lagbridge_position_uncertainty_seconds gauge
lagbridge_position_uncertainty_seconds{cluster="c1",group="billing",topic="orders"} 3
`
	names := []string{"lagbridge_commit_interval_seconds", "lagbridge_consumer_lag_messages", "lagbridge_consumer_live",
		"lagbridge_estimated_head_age_seconds", "lagbridge_estimated_lag_messages", "lagbridge_head_age_seconds",
		"lagbridge_lag_source", "lagbridge_position_uncertainty_seconds"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP lagbridge_target_status 1 for the target's current status (ok, lagging, stalled, stopped, stale, abandoned), 0 for the others.
# TYPE lagbridge_target_status gauge
lagbridge_target_status{cluster="c1",group="billing",status="abandoned",topic="orders"} 1
lagbridge_target_status{cluster="c1",group="billing",status="lagging",topic="orders"} 0
lagbridge_target_status{cluster="c1",group="billing",status="ok",topic="orders"} 0
lagbridge_target_status{cluster="c1",group="billing",status="stale",topic="orders"} 0
lagbridge_target_status{cluster="c1",group="billing",status="stalled",topic="orders"} 0
lagbridge_target_status{cluster="c1",group="billing",status="stopped",topic="orders"} 0
`), "lagbridge_target_status"); err != nil {
		t.Fatal(err)
	}
}

// scriptSource plays a broker adapter through a script of cycles: what
// no real component can play here is a listing or an error at an exact
// cycle. Past the script it repeats the last entry.
type scriptSource struct {
	mu     sync.Mutex
	calls  int
	script []func() ([]lag.Sample, error)
}

func (f *scriptSource) Observe(ctx context.Context) ([]lag.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.script[min(f.calls, len(f.script))-1]()
}

// TestLoopTargetsLeave: a target the adapter stops listing leaves the store
// and the metrics at that cycle; a cycle that fails keeps the others with
// its error as their err and, once stale, in their reason.
func TestLoopTargetsLeave(t *testing.T) {
	a := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "kept", Group: "g"}
	b := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "deleted", Group: "g"}
	listing := func(tgs ...lag.Target) func() ([]lag.Sample, error) {
		return func() ([]lag.Sample, error) {
			var out []lag.Sample
			for _, tg := range tgs {
				out = append(out, lag.Sample{Target: tg, At: time.Now(), Partitions: []lag.PartitionSample{{End: 10, Committed: 10}}})
			}
			return out, nil
		}
	}
	fail := func() ([]lag.Sample, error) { return nil, errors.New("metadata: broker 1: EOF") }
	src := &scriptSource{script: []func() ([]lag.Sample, error){listing(a, b), listing(a), fail}}
	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg, store)
	var (
		mu     sync.Mutex
		cycles [][]lag.State
	)
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: 10 * time.Millisecond, Store: store, Metrics: m,
		Rules: func(lag.Target) lag.Rules { return lag.Rules{StaleAfter: time.Millisecond} },
		OnCycle: func(_ time.Time, st []lag.State) {
			mu.Lock()
			cycles = append(cycles, st)
			mu.Unlock()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(cycles)
		mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fewer than 4 cycles in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(cycles[0]) != 2 || len(cycles[1]) != 1 || cycles[1][0].Target != a {
		t.Fatalf("cycle 1: %d targets, cycle 2: %+v; want 2, then only %v", len(cycles[0]), cycles[1], a)
	}
	st := cycles[3][0]
	if st.Err != "metadata: broker 1: EOF" || st.Status != lag.StatusStale || !strings.HasSuffix(st.Reason, "metadata: broker 1: EOF") {
		t.Fatalf("after a failed cycle: err %q status %s reason %q", st.Err, st.Status, st.Reason)
	}
	if n := testutil.CollectAndCount(m, "lagbridge_consumer_lag_messages"); n != 1 {
		t.Fatalf("lag series: %d, want 1 (the deleted topic's gone)", n)
	}
}

// TestMethodNotAllowed: a wrong method on an API path is 405 with Allow,
// even with a catch-all "/" (the dashboard) mounted; other paths still
// reach the catch-all; ReadAccess guards /v1/lag.
// TestUnknownAPIPath: a path under /v1/ that no endpoint serves (a typo,
// or an endpoint of a newer daemon) gets a JSON 404 with an error, as
// docs/quota-protocol.yaml says of every error answer; before, it went to
// the dashboard's catch-all, which answered text/plain "404 page not
// found" that a client decoding the error could not read. Paths outside
// /v1/ still go to the catch-all.
func TestUnknownAPIPath(t *testing.T) {
	h := NewHandler(testStore(), prometheus.NewRegistry())
	h.Mux.HandleFunc("GET /v1/leases/watch", func(w http.ResponseWriter, _ *http.Request) {})
	h.Mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	cases := []struct {
		name, method, path string
		code               int
		json               bool
	}{
		{"a typo", "GET", "/v1/leases/wacth", 404, true},
		{"a newer endpoint", "POST", "/v1/leases/batch", 404, true},
		{"the namespace itself", "GET", "/v1/", 404, true},
		// Served paths, and paths outside the API, are unchanged.
		{"served", "GET", "/v1/leases/watch", 200, false},
		{"the page's assets", "GET", "/app.js", http.StatusTeapot, false},
		{"outside the API", "GET", "/v1", http.StatusTeapot, false},
		// An unclean path is still redirected to its clean form.
		{"unclean", "GET", "/v1//leases/watch", http.StatusTemporaryRedirect, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
			var body struct {
				Error string `json:"error"`
			}
			isJSON := strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") &&
				json.Unmarshal(rec.Body.Bytes(), &body) == nil && strings.Contains(body.Error, c.path)
			if rec.Code != c.code || isJSON != c.json {
				t.Fatalf("%s %s: %d %q %s, want %d, JSON error naming the path %v", c.method, c.path, rec.Code,
					rec.Header().Get("Content-Type"), rec.Body, c.code, c.json)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	h := NewHandler(testStore(), prometheus.NewRegistry())
	h.Mux.HandleFunc("POST /v1/leases", func(w http.ResponseWriter, _ *http.Request) {})
	h.Mux.HandleFunc("GET /v1/leases/watch", func(w http.ResponseWriter, _ *http.Request) {})
	h.Mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	cases := []struct {
		name, method, path string
		code               int
		allow              string
	}{
		{"GET on a POST path", "GET", "/v1/leases", 405, "POST"},
		{"DELETE on a POST path", "DELETE", "/v1/leases", 405, "POST"},
		{"TRACE on a GET path", "TRACE", "/v1/leases/watch", 405, "GET, HEAD"},
		{"OPTIONS on /v1/lag", "OPTIONS", "/v1/lag", 405, "GET, HEAD"},
		{"POST on /metrics", "POST", "/metrics", 405, "GET, HEAD"},
		{"PUT on /healthz", "PUT", "/healthz", 405, "GET, HEAD"},
		{"the right method", "GET", "/healthz", 200, ""},
		// Paths no API pattern serves go to the catch-all.
		{"unknown path", "DELETE", "/nothing", http.StatusTeapot, ""},
		{"the page", "GET", "/", http.StatusTeapot, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
			if rec.Code != c.code || rec.Header().Get("Allow") != c.allow {
				t.Fatalf("%d Allow %q, want %d Allow %q", rec.Code, rec.Header().Get("Allow"), c.code, c.allow)
			}
		})
	}
	h.ReadAccess = func(w http.ResponseWriter, _ *http.Request) bool {
		httpError(w, http.StatusUnauthorized, "no")
		return false
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/lag", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("guarded /v1/lag: %d", rec.Code)
	}
}

// slowSource takes slow[call] to observe (0 when absent) and records when
// each reading was taken (its samples' At: the end of Observe).
type slowSource struct {
	mu    sync.Mutex
	slow  map[int]time.Duration
	reads []time.Time
	// report: the target's consumer reports its position (fresh at each
	// reading); commits: its commit moves at every reading. Neither: the
	// commit never moves.
	report, commits bool
	// coarse: a second target, t2, whose commit never moves.
	coarse bool
}

func (f *slowSource) Observe(ctx context.Context) ([]lag.Sample, error) {
	f.mu.Lock()
	d := f.slow[len(f.reads)]
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(d): // a cycle that runs late (a slow broker, a starved process)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	at := time.Now()
	f.reads = append(f.reads, at)
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	p := lag.PartitionSample{End: 100, Lag: 1, Committed: 99}
	if f.commits {
		n := int64(len(f.reads))
		p = lag.PartitionSample{End: 100 * (n + 1), Lag: 50, Committed: 100*(n+1) - 50, HeadKnown: true, HeadTime: at.Add(-time.Millisecond)}
	}
	if f.report {
		p.Reported = lag.Report{At: at, Position: p.Committed}
	}
	out := []lag.Sample{{Target: tg, At: at, Members: 1, Partitions: []lag.PartitionSample{p}}}
	if f.coarse {
		t2 := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t2", Group: "g"}
		out = append(out, lag.Sample{Target: t2, At: at, Members: 1, Partitions: []lag.PartitionSample{{End: 100, Lag: 1, Committed: 99}}})
	}
	return out, nil
}

// TestLoopLateCycleSpacing: a cycle that runs past the interval is not
// followed by one a few milliseconds later (a time.Ticker's buffered
// tick): successive readings stay at least half an interval apart, so no
// rate is read over a span much shorter than the interval.
func TestLoopLateCycleSpacing(t *testing.T) {
	const interval = 100 * time.Millisecond
	src := &slowSource{slow: map[int]time.Duration{1: 140 * time.Millisecond, 4: 190 * time.Millisecond}}
	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: interval, Store: store}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		src.mu.Lock()
		n := len(src.reads)
		src.mu.Unlock()
		if n >= 8 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.reads) < 8 {
		t.Fatalf("%d readings in 10s", len(src.reads))
	}
	for i := 1; i < len(src.reads); i++ {
		if gap := src.reads[i].Sub(src.reads[i-1]); gap < interval/2 {
			t.Errorf("reading %d came %v after the one before (a late cycle's follower), want at least half the interval %v", i, gap, interval/2)
		}
	}
}

// TestSkippedMetricWhileCounted: lagbridge_consumer_skipped_total is
// served for a NATS target whose skips are counted, and left out for
// one whose are not (no permission to the advisories, an old server),
// where a 0 would read as none skipped; /v1/lag says which.
func TestSkippedMetricWhileCounted(t *testing.T) {
	counted := lag.Target{Kind: lag.KindNATS, Cluster: "js", Topic: "S", Group: "counted"}
	off := lag.Target{Kind: lag.KindNATS, Cluster: "js", Topic: "S", Group: "off"}
	store := NewStore(map[string]lag.Kind{"js": lag.KindNATS})
	store.Update(ClusterStatus{Name: "js", Kind: lag.KindNATS, Observed: true}, []lag.State{
		{Target: counted, Status: lag.StatusOK, Skipped: 7, SkipsCounted: true},
		{Target: off, Status: lag.StatusOK},
	})
	reg := prometheus.NewPedanticRegistry()
	NewMetrics(reg, store)
	want := `
# HELP lagbridge_consumer_skipped_total Messages the consumer skipped as expired (the ttl guard's skips: counted from NATS MSG_TERMINATED advisories, or from the counts a Kafka consumer's hook reports) since the daemon first saw the target: part of the consumption, no measure of the consumer's capacity. Absent while the skips are not counted.
# TYPE lagbridge_consumer_skipped_total counter
lagbridge_consumer_skipped_total{cluster="js",group="counted",topic="S"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_consumer_skipped_total"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if v := ViewOf(lag.State{Target: counted, SkipsCounted: true}, now, false); !v.SkipsCounted {
		t.Errorf("/v1/lag of a counted target: skipsCounted false")
	}
	if v := ViewOf(lag.State{Target: off}, now, false); v.SkipsCounted {
		t.Errorf("/v1/lag of a target not counted: skipsCounted true")
	}
}

// TestEarlyCyclesFromZero: lagbridge_observe_early_cycles_total has every
// observed cluster at 0 from its first cycle, as
// lagbridge_observe_errors_total has, so that rate() and increase() see
// the first early cycle.
func TestEarlyCyclesFromZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testStore())
	m.observed("c1", time.Millisecond, nil)
	want := `
# HELP lagbridge_observe_early_cycles_total Observation cycles of a cluster run before the interval was up because a consumer's own report showed a target late (the message in hand older than the engage threshold).
# TYPE lagbridge_observe_early_cycles_total counter
lagbridge_observe_early_cycles_total{cluster="c1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_observe_early_cycles_total"); err != nil {
		t.Error(err)
	}
}

// TestReadyz: /readyz waits for every cluster's first cycles, then answers
// ready while at least one cluster is observed, naming each one never
// observed (not its error: /readyz is open to anyone); the elections (ha)
// hear which. A cluster counts as never observed only once its failed
// cycles are at least unreachedCycles over at least unreachedGrace: red
// with either bound dropped ("failing briefly" turns ready).
func TestReadyz(t *testing.T) {
	type cl struct {
		name     string
		observed bool
		cycles   int // cycles ended, 2 s apart (6 s with slow)
		err      string
		slow     bool
	}
	const waiting = "not ready: no successful observation yet of c2 (first cycles running or failing for under 5s)\n"
	cases := []struct {
		name     string
		clusters []cl
		code     int
		body     string
		// heard is what Election was given ("-": not asked).
		heard string
	}{
		// c2's first cycle has not ended: not ready yet.
		{"starting", []cl{{"c1", true, 1, "", false}, {"c2", false, 0, "", false}}, 503, waiting, "-"},
		// c2 failed twice (a metadata timeout, a server up late): not yet.
		{"failing briefly", []cl{{"c1", true, 1, "", false}, {"c2", false, 2, "timeout", false}}, 503, waiting, "-"},
		// Three failed cycles within 4 s: not yet either.
		{"failing for 4 s", []cl{{"c1", true, 1, "", false}, {"c2", false, 3, "timeout", false}}, 503, waiting, "-"},
		// Two slow cycles (timeouts) 6 s apart: not yet, two are too few.
		{"two slow cycles", []cl{{"c1", true, 1, "", false}, {"c2", false, 2, "timeout", true}}, 503, waiting, "-"},
		// c2 failed every cycle for 6 s: ready for c1, c2 named without
		// its error (it names hosts; /v1/lag and the log have it).
		{"one unreached", []cl{{"c1", true, 1, "", false}, {"c2", false, 4, "dial tcp 10.0.0.7:9092:\nconnection refused", false}}, 200,
			"ready: leader of c1; never observed c2 since start (its error: /v1/lag, the log)\n", "c2"},
		// Nothing observed: nothing to serve.
		{"none reached", []cl{{"c1", false, 4, "e1", false}, {"c2", false, 4, "e2", false}}, 503,
			"not ready: no cluster observed yet; never observed c1 since start (its error: /v1/lag, the log); never observed c2 since start (its error: /v1/lag, the log)\n", "-"},
		// Observed once and failing now: still ready (its targets go stale).
		{"observed, failing now", []cl{{"c1", true, 1, "gone", false}}, 200, "ready: leader of c1\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kinds := map[string]lag.Kind{}
			for _, x := range c.clusters {
				kinds[x.name] = lag.KindKafka
			}
			store := NewStore(kinds)
			for _, x := range c.clusters {
				st := ClusterStatus{Name: x.name, Kind: lag.KindKafka, Observed: x.observed, Err: x.err}
				if x.cycles == 0 {
					store.Update(st, nil)
				}
				for k := range x.cycles {
					every := 2 * time.Second
					if x.slow {
						every = 6 * time.Second
					}
					st.LastCycle = t0.Add(time.Duration(k) * every)
					store.Update(st, nil)
				}
			}
			h := NewHandler(store, prometheus.NewRegistry())
			heard := "-"
			h.Election = func(unreached []string) (string, bool) {
				heard = strings.Join(unreached, ",")
				return "leader of c1", true
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != c.code || rec.Body.String() != c.body || heard != c.heard {
				t.Errorf("%d %q (election heard %q), want %d %q (%q)", rec.Code, rec.Body, heard, c.code, c.body, c.heard)
			}
		})
	}
}
