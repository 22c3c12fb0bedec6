package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

var orders = quota.Topic{Kind: lag.KindKafka, Cluster: "c", Name: "orders"}

func decision(sig quota.Signal, rate float64, rule quota.Rule) quota.TopicDecision {
	return quota.TopicDecision{Policy: "p", Signal: sig, Rate: rate, Rule: rule, Lag: 5000, HeadAge: 3 * time.Second,
		Capacity: 400, CapacityKnown: true, Wait: 12500 * time.Millisecond, TargetWait: time.Second, Reason: "words"}
}

func lease(producer string, rate float64, sig quota.Signal) quota.Lease {
	return quota.Lease{Producer: producer, Topic: orders, Rate: rate, Signal: sig}
}

// TestLogObserve: the log records signal changes and grant changes beyond
// the threshold, with the rule and the inputs, and nothing else.
func TestLogObserve(t *testing.T) {
	inf := math.Inf(1)
	type step struct {
		d      quota.TopicDecision
		leases []quota.Lease
		want   []string // kind producer prev->rate, in order
	}
	cases := []struct {
		name  string
		steps []step
	}{
		// An unconstrained topic and grant log nothing.
		{"quiet", []step{{decision(quota.SignalOK, inf, quota.RuleUnlimited), []quota.Lease{lease("a", inf, quota.SignalOK)}, nil}}},
		// A drain: the signal changes and both producers are cut; the
		// topic event lists them.
		{"drain", []step{
			{decision(quota.SignalOK, inf, quota.RuleUnlimited), []quota.Lease{lease("a", inf, quota.SignalOK), lease("b", inf, quota.SignalOK)}, nil},
			{decision(quota.SignalSlowDown, 0, quota.RuleDrain), []quota.Lease{lease("a", 0, quota.SignalSlowDown), lease("b", 0, quota.SignalSlowDown)},
				[]string{"signal a,b unlimited->0", "cut a unlimited->0", "cut b unlimited->0"}},
		}},
		// Changes within the threshold (20%) of the last logged grant are
		// not logged; they add up until they cross it.
		{"threshold", []step{
			{decision(quota.SignalSlowDown, 100, quota.RuleFollow), []quota.Lease{lease("a", 100, quota.SignalSlowDown)}, []string{"signal a unlimited->100", "cut a unlimited->100"}},
			{decision(quota.SignalSlowDown, 110, quota.RuleProbe), []quota.Lease{lease("a", 110, quota.SignalSlowDown)}, nil},
			{decision(quota.SignalSlowDown, 119, quota.RuleProbe), []quota.Lease{lease("a", 119, quota.SignalSlowDown)}, nil},
			{decision(quota.SignalSlowDown, 121, quota.RuleProbe), []quota.Lease{lease("a", 121, quota.SignalSlowDown)}, []string{"release a 100->121"}},
			{decision(quota.SignalSlowDown, 90, quota.RuleFollow), []quota.Lease{lease("a", 90, quota.SignalSlowDown)}, []string{"cut a 121->90"}},
		}},
		// Back to unlimited: a release and the signal back to ok.
		{"release", []step{
			{decision(quota.SignalStop, 0, quota.RuleHardAge), []quota.Lease{lease("a", 0, quota.SignalStop)}, []string{"signal a unlimited->0", "cut a unlimited->0"}},
			{decision(quota.SignalOK, inf, quota.RuleRelease), []quota.Lease{lease("a", inf, quota.SignalOK)}, []string{"signal a 0->unlimited", "release a 0->unlimited"}},
		}},
		// A lease that expires is forgotten: the producer's next limited
		// grant is a cut from unlimited again, not a change from before.
		{"expired lease", []step{
			{decision(quota.SignalSlowDown, 100, quota.RuleFollow), []quota.Lease{lease("a", 100, quota.SignalSlowDown)}, []string{"signal a unlimited->100", "cut a unlimited->100"}},
			{decision(quota.SignalSlowDown, 100, quota.RuleFollow), nil, nil},
			{decision(quota.SignalSlowDown, 100, quota.RuleFollow), []quota.Lease{lease("a", 100, quota.SignalSlowDown)}, []string{"cut a unlimited->100"}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			reg := prometheus.NewRegistry()
			l := NewLog(Config{}, slog.New(slog.NewJSONHandler(&logs, nil)), reg)
			budget := func(string) time.Duration { return 2 * time.Second }
			total := 0
			for i, s := range c.steps {
				at := t0.Add(time.Duration(i) * time.Second)
				l.Observe(at, map[quota.Topic]quota.TopicDecision{orders: s.d}, s.leases, budget)
				evs, _ := l.Events(EventQuery{Since: at})
				var got []string
				for _, e := range evs {
					got = append(got, string(e.Kind)+" "+strings.Join(e.Producers, ",")+" "+RateText(e.PrevRate)+"->"+RateText(e.Rate))
					if e.Rule != s.d.Rule || e.Inputs.Lag != 5000 || e.Inputs.BudgetSeconds != 2 || e.Inputs.WaitSeconds != 12.5 ||
						e.Inputs.Capacity != 400 || e.Inputs.HeadAgeSeconds != 3 || !e.At.Equal(at) || e.Topic != orders {
						t.Errorf("step %d: event %+v lacks the rule or inputs", i, e)
					}
				}
				if strings.ReplaceAll(strings.Join(got, "|"), "/s", "") != strings.Join(s.want, "|") {
					t.Errorf("step %d: events %q, want %q", i, got, s.want)
				}
				total += len(s.want)
			}
			// One log line per event, and the counter agrees.
			if n := strings.Count(logs.String(), `"msg":"quota decision"`); n != total {
				t.Errorf("%d log lines, want %d:\n%s", n, total, logs.String())
			}
			var counted float64
			for _, k := range []EventKind{KindSignal, KindCut, KindRelease} {
				counted += testutil.ToFloat64(l.counter.WithLabelValues(string(k)))
			}
			if int(counted) != total {
				t.Errorf("counter %v, want %d", counted, total)
			}
		})
	}
}

// TestLogUnboundedWait: a drain whose backlog does not shrink has no
// wait to give (quota's -1); its log line says "unbounded", not -1ns, and
// the event keeps -1 for machines.
func TestLogUnboundedWait(t *testing.T) {
	var logs bytes.Buffer
	l := NewLog(Config{}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	d := decision(quota.SignalSlowDown, 0, quota.RuleDrain)
	d.Wait = lag.Never
	l.Observe(t0, map[quota.Topic]quota.TopicDecision{orders: d}, []quota.Lease{lease("a", 0, quota.SignalSlowDown)},
		func(string) time.Duration { return 2 * time.Second })
	if !strings.Contains(logs.String(), "wait=unbounded") || !strings.Contains(logs.String(), "headAge=3s") || !strings.Contains(logs.String(), "budget=2s") {
		t.Errorf("log lines do not say the wait is unbounded (and the other figures as durations):\n%s", logs.String())
	}
	if evs, _ := l.Events(EventQuery{}); len(evs) == 0 || evs[0].Inputs.WaitSeconds != -1 {
		t.Errorf("events %+v: want the wait stored as -1", evs)
	}
}

// TestLogRing: the ring keeps the newest Events events and counts the
// dropped ones; queries filter by producer, kind, topic and time.
func TestLogRing(t *testing.T) {
	l := NewLog(Config{Events: 100}, slog.New(slog.DiscardHandler), nil)
	for i := range 150 {
		r := 10.0
		if i%2 == 1 {
			r = 100
		}
		l.Observe(t0.Add(time.Duration(i)*time.Second), map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, r, quota.RuleFollow)},
			[]quota.Lease{lease("a", r, quota.SignalSlowDown)}, nil)
	}
	all, dropped := l.Events(EventQuery{})
	// 151 events: the signal, then one grant change a step.
	if len(all) != 100 || dropped != 51 || all[len(all)-1].Seq != 151 {
		t.Fatalf("%d events, %d dropped, newest seq %d", len(all), dropped, all[len(all)-1].Seq)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 {
			t.Fatalf("not in order at %d", i)
		}
	}
	cases := []struct {
		name string
		q    EventQuery
		want int
	}{
		{"producer", EventQuery{Producer: "a"}, 100},
		{"other producer", EventQuery{Producer: "b"}, 0},
		{"kind", EventQuery{Kind: KindRelease}, 50},
		{"topic", EventQuery{Topic: "orders", Cluster: "c"}, 100},
		{"other cluster", EventQuery{Cluster: "x"}, 0},
		{"time range", EventQuery{Since: t0.Add(140 * time.Second), Until: t0.Add(144 * time.Second)}, 5},
		{"limit keeps the newest", EventQuery{Limit: 3}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := l.Events(c.q)
			if len(got) != c.want {
				t.Errorf("%d events, want %d", len(got), c.want)
			}
			if c.q.Limit > 0 && got[len(got)-1].Seq != 151 {
				t.Errorf("limit kept %d as the newest", got[len(got)-1].Seq)
			}
		})
	}
}

// TestAPI: /v1/history and /v1/events answer with data and their bounds,
// round-trip unlimited rates, and refuse bad parameters with a clear 400.
func TestAPI(t *testing.T) {
	s := NewStore(Config{}, time.Second, t0)
	l := NewLog(Config{}, slog.New(slog.DiscardHandler), nil)
	tg := target(1)
	now := t0.Add(10 * time.Second)
	for i := range 10 {
		s.Record(t0.Add(time.Duration(i+1)*time.Second), []lag.State{state(tg, int64(i), time.Second, lag.StatusOK)},
			map[lag.Target]quota.Decision{tg: {Rate: math.Inf(1)}})
	}
	l.Observe(now, map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalStop, 0, quota.RuleHardAge)}, []quota.Lease{lease("a", 0, quota.SignalStop)}, nil)
	l.Observe(now, map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalOK, math.Inf(1), quota.RuleRelease)}, []quota.Lease{lease("a", math.Inf(1), quota.SignalOK)}, nil)
	mux := http.NewServeMux()
	guarded := 0
	count := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { guarded++; h.ServeHTTP(w, r) })
	}
	(&API{Store: s, Log: l, Now: func() time.Time { return now }}).Register(mux, count, count)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(path string, v any) int {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	var h HistoryResponse
	if code := get("/v1/history?topic="+tg.Topic+"&since=5s", &h); code != 200 {
		t.Fatalf("history: %d", code)
	}
	if len(h.Targets) != 1 || len(h.Targets[0].Points) != 6 || !h.Targets[0].Points[0].Unlimited || h.DataSince == nil ||
		!h.DataSince.Equal(t0.Add(time.Second)) || !h.StartedAt.Equal(t0) || h.RecentSeconds != 900 || h.IntervalSeconds != 1 {
		t.Errorf("history answer: %+v", h)
	}
	var ev EventsResponse
	if code := get("/v1/events?producer=a&kind=release&since="+t0.Format(time.RFC3339), &ev); code != 200 {
		t.Fatalf("events: %d", code)
	}
	if len(ev.Events) != 1 || !math.IsInf(ev.Events[0].Rate, 1) || ev.Events[0].PrevRate != 0 || ev.Events[0].Rule != quota.RuleRelease {
		t.Errorf("events answer: %+v", ev)
	}
	// The topic as `lagbridge why`, the log and /v1/quotas name it
	// (kind/cluster/name) selects its events like its name does; before,
	// it matched nothing, without a word.
	for _, q := range []string{"topic=orders", "topic=" + orders.String(), "topic=" + orders.String() + "&cluster=c"} {
		var all EventsResponse
		if code := get("/v1/events?"+q, &all); code != 200 || len(all.Events) != 4 {
			t.Errorf("events?%s: %d, %d events, want 200 and 4", q, code, len(all.Events))
		}
	}
	bad := []string{
		"/v1/events?topic=nats/c/orders&cluster=d", // two clusters
		"/v1/events?topic=rabbit/c/orders",         // not a kind
		"/v1/events?topic=kafka/orders",            // no cluster
		"/v1/history?targt=x",                      // unknown parameter
		"/v1/history?since=yesterday",              // neither a time nor a duration
		"/v1/history?since=1m&until=2m",            // until before since
		"/v1/history?points=5",                     // too few points to draw
		"/v1/history?kind=kafak",                   // unknown kind
		"/v1/events?limit=0",                       // not positive
		"/v1/events?kind=boost",                    // unknown kind
		"/v1/events?since=-5m",                     // a negative duration
	}
	for _, p := range bad {
		var e map[string]string
		if code := get(p, &e); code != 400 || e["error"] == "" {
			t.Errorf("%s: %d %v, want 400 with an error", p, code, e)
		}
	}
	if guarded != 5+len(bad) {
		t.Errorf("guard ran %d times, want every request (%d)", guarded, 5+len(bad))
	}
}

// TestLogNotServed: with Served saying no for a topic (a follower, whose
// producers are served the leader's decisions), its events are kept marked
// NotServed, logged at DEBUG with served=false and not counted; once it
// says yes (this replica leads, or stands in), they are logged at INFO and
// counted, unmarked, as without Served. Red before the mark: every event
// at INFO and counted.
func TestLogNotServed(t *testing.T) {
	var logs bytes.Buffer
	l := NewLog(Config{}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry())
	serving := false
	l.Served = func(tp quota.Topic, _ string) bool {
		if tp != orders {
			t.Errorf("Served asked about %v", tp)
		}
		return serving
	}
	budget := func(string) time.Duration { return 2 * time.Second }
	l.Observe(t0, map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, 100, quota.RuleFollow)},
		[]quota.Lease{lease("a", 100, quota.SignalSlowDown)}, budget)
	serving = true
	l.Observe(t0.Add(time.Second), map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, 50, quota.RuleDrain)},
		[]quota.Lease{lease("a", 50, quota.SignalSlowDown)}, budget)
	// Served on: the same decision again says nothing; following again
	// and back states it again (review-lead32: the leader between may
	// have served another rate, see TestLogRetakeOver).
	l.Observe(t0.Add(2*time.Second), map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, 50, quota.RuleDrain)},
		[]quota.Lease{lease("a", 50, quota.SignalSlowDown)}, budget)
	serving = false
	l.Observe(t0.Add(3*time.Second), map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, 50, quota.RuleDrain)},
		[]quota.Lease{lease("a", 50, quota.SignalSlowDown)}, budget)
	serving = true
	l.Observe(t0.Add(4*time.Second), map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, 50, quota.RuleDrain)},
		[]quota.Lease{lease("a", 50, quota.SignalSlowDown)}, budget)
	evs, _ := l.Events(EventQuery{})
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s->%s notServed=%v", e.Kind, RateText(e.PrevRate), RateText(e.Rate), e.NotServed))
	}
	// Taking over states what it now serves against what it last served
	// (nothing: unlimited), not against its own decision while it
	// followed (review-opsha: no INFO line at a takeover with the same
	// decision, red before the served baselines).
	want := []string{"signal unlimited->100/s notServed=true", "cut unlimited->100/s notServed=true",
		"signal unlimited->50/s notServed=false", "cut unlimited->50/s notServed=false",
		"signal unlimited->50/s notServed=false", "cut unlimited->50/s notServed=false"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want %q", got, want)
	}
	var levels []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		levels = append(levels, fmt.Sprintf("%v served=%v", m["level"], m["served"]))
	}
	if want := []string{"DEBUG served=false", "DEBUG served=false", "INFO served=<nil>", "INFO served=<nil>", "INFO served=<nil>", "INFO served=<nil>"}; strings.Join(levels, "|") != strings.Join(want, "|") {
		t.Errorf("log lines %q, want %q:\n%s", levels, want, logs.String())
	}
	if n := testutil.ToFloat64(l.counter.WithLabelValues(string(KindCut))) + testutil.ToFloat64(l.counter.WithLabelValues(string(KindSignal))); n != 4 {
		t.Errorf("counted %v events, want the 4 served ones", n)
	}
	// JSON: notServed only where true.
	b, _ := json.Marshal(evs)
	if c := strings.Count(string(b), `"notServed":true`); c != 2 || strings.Contains(string(b), `"notServed":false`) {
		t.Errorf("JSON has %d notServed:true (want 2) or a notServed:false: %s", c, b)
	}
}
