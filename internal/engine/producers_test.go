package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// TestUnlistedFloodDoesNotStarveListed reproduces issue 13's attack at the
// engine: on a topic cut to below what its listed CRITICAL producer wants,
// 4,000 anonymous ids report a demand of 1e6 msg/s, for several cycles.
// The listed producer's lease does not move; with the default policy 32
// of the ids get a SHEDDABLE share below it and the rest a stop lease that
// says why.
func TestUnlistedFloodDoesNotStarveListed(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, quota.Policy{Name: "orders", MaxAge: 2 * time.Second,
		Producers: []quota.ProducerSpec{{ID: "checkout", Criticality: quota.Critical}}})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(10) // healthy long enough for the standing wait to be learned
	checkout := func() quotaproto.Report {
		return quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 5000}}}
	}
	if _, err := e.Report(checkout()); err != nil {
		t.Fatal(err)
	}
	// The consumer slows: the topic is limited to less than checkout
	// wants, so checkout alone would get the topic's whole rate.
	w.consume = 800
	w.cycles(2)
	alone := func(step string) {
		t.Helper()
		set, _, _ := hub.Current("checkout")
		d := e.Decisions()[0]
		if got := rateOf(set.Leases[0]); got != d.Rate || !(got > 0) || got > 5000 {
			t.Fatalf("%s: checkout's rate %v, want the topic's %v", step, got, d.Rate)
		}
		// A share of the topic's decision names its rule (protocol 1.4).
		if got := set.Leases[0].Rule; got == "" || got != d.Rule.String() {
			t.Fatalf("%s: checkout's lease names rule %q, the decision %q", step, got, d.Rule)
		}
	}
	alone("before the flood")

	const flood = 4000
	refused, admitted := 0, 0
	for round := range 3 {
		for i := range flood {
			set, err := e.Report(quotaproto.Report{Producer: fmt.Sprintf("anon-%d", i),
				Topics: []quotaproto.TopicDemand{{Topic: "orders", Criticality: "CRITICAL_PLUS", Demand: 1e6}}})
			if err != nil {
				t.Fatal(err)
			}
			if round > 0 {
				continue
			}
			l := set.Leases[0]
			if l.Signal == quotaproto.SignalStop && rateOf(l) == 0 && strings.Contains(l.Reason, "not listed") {
				if l.Rule != "" {
					t.Fatalf("a refused unlisted producer's lease names the topic's rule %q: it is not a share of the decision", l.Rule)
				}
				refused++
			} else {
				admitted++
			}
		}
		if _, err := e.Report(checkout()); err != nil {
			t.Fatal(err)
		}
		alone(fmt.Sprintf("round %d, after the reports", round))
		w.cycles(1)
		alone(fmt.Sprintf("round %d, after a cycle", round))
	}
	if admitted != quota.DefaultMaxUnlisted || refused != flood-quota.DefaultMaxUnlisted {
		t.Fatalf("%d admitted, %d refused; want %d admitted", admitted, refused, quota.DefaultMaxUnlisted)
	}
	// The refused ids are counted, not a grant series each.
	reg := prometheus.NewRegistry()
	NewCollector(reg, e).ProducerGrants = true // opt-in: metrics.producerGrants
	want := fmt.Sprintf(`
# HELP lagbridge_quota_refused_producers Producers a topic's policy does not list that were refused a share (a stop lease).
# TYPE lagbridge_quota_refused_producers gauge
lagbridge_quota_refused_producers{cluster="c1",topic="orders"} %d
`, refused)
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "lagbridge_quota_refused_producers"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "lagbridge_quota_grant"); n != 1+quota.DefaultMaxUnlisted {
		t.Fatalf("%d grant series, want checkout's and the admitted ids'", n)
	}
	// By default no producer's id or grant is on /metrics.
	off := prometheus.NewRegistry()
	NewCollector(off, e)
	if n := testutil.CollectAndCount(off, "lagbridge_quota_grant"); n != 0 {
		t.Fatalf("%d grant series without ProducerGrants, want 0", n)
	}
}

// TestProducerCap: the engine keeps at most MaxProducers ids; a new id
// beyond gets a BusyError (ErrTooManyProducers, a retry-after of one
// interval) while known ids keep reporting; the cycles evict ids that
// stopped reporting, which makes room again.
func TestProducerCap(t *testing.T) {
	c := &clock{now: t0}
	hubE, hub := newEngine(t, c, quota.Policy{Name: "orders", MaxAge: 2 * time.Second})
	e := hubE
	e.maxProducers = 100
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	report := func(id string) error {
		_, err := e.Report(quotaproto.Report{Producer: id, Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1}, {Topic: "unobserved"}}})
		return err
	}
	for i := range 150 {
		err := report(fmt.Sprintf("p-%d", i))
		var busy *BusyError
		switch {
		case i < 100 && err != nil:
			t.Fatalf("p-%d: %v", i, err)
		case i >= 100 && (!errors.Is(err, ErrTooManyProducers) || !errors.As(err, &busy) || busy.RetryAfter() != time.Second || busy.Max != 100):
			t.Fatalf("p-%d: %v, want a BusyError", i, err)
		}
	}
	if _, _, ok := hub.Current("p-120"); ok {
		t.Fatal("a refused id has a lease set")
	}
	// A known id keeps reporting; the others stop. Past the lease
	// lifetime the cycles evict them, and a new id finds room.
	for range 11 {
		w.cycles(1)
		if err := report("p-0"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.producers); n != 1 {
		t.Fatalf("%d producers kept after eviction, want 1", n)
	}
	if err := report("p-120"); err != nil {
		t.Fatalf("after eviction: %v", err)
	}
	if _, _, ok := hub.Current("p-7"); ok {
		t.Fatal("an evicted producer still has a lease set")
	}
}

// TestReportPushesWhatItChanges: a report that changes other producers'
// leases (a small topic, re-allocated at once) pushes their new sets, and
// only theirs.
func TestReportPushesWhatItChanges(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, quota.Policy{Name: "orders", MaxAge: 2 * time.Second,
		Producers: []quota.ProducerSpec{{ID: "a"}, {ID: "b"}, {ID: "other"}}})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(10) // healthy long enough for the standing wait to be learned
	w.consume = 800
	w.cycles(2)
	for _, id := range []string{"a", "other"} {
		topic := "orders"
		if id == "other" {
			topic = "unobserved"
		}
		if _, err := e.Report(quotaproto.Report{Producer: id, Topics: []quotaproto.TopicDemand{{Topic: topic}}}); err != nil {
			t.Fatal(err)
		}
	}
	_, aChanged, _ := hub.Current("a")
	_, otherChanged, _ := hub.Current("other")
	set, err := e.Report(quotaproto.Report{Producer: "b", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}})
	if err != nil || rateOf(set.Leases[0]) <= 0 {
		t.Fatalf("b: %+v, %v", set, err)
	}
	select {
	case <-aChanged:
	default:
		t.Fatal("a's share halved without a push")
	}
	select {
	case <-otherChanged:
		t.Fatal("a producer of another topic was pushed")
	default:
	}
	a, _, _ := hub.Current("a")
	if rateOf(a.Leases[0]) != rateOf(set.Leases[0]) {
		t.Fatalf("a %v and b %v do not share equally", rateOf(a.Leases[0]), rateOf(set.Leases[0]))
	}
}

// TestBusyOverHTTP: the quota protocol answers a report the engine has no
// room for with 503, a Retry-After of one interval and the reason.
func TestBusyOverHTTP(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c)
	e.maxProducers = 1
	mux := http.NewServeMux()
	quotaserver.New(hub, e, quotaserver.Auth{}, prometheus.NewRegistry()).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { hub.Close(); ts.Close() })
	post := func(id string) *http.Response {
		t.Helper()
		resp, err := http.Post(ts.URL+quotaproto.PathLeases, "application/json",
			strings.NewReader(`{"producer":"`+id+`","topics":[{"topic":"orders","demand":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if resp := post("first"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %s", resp.Status)
	}
	resp := post("second")
	var body quotaproto.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body.Error, "at most 1 producers") {
		t.Fatalf("second: %s, Retry-After %q, %q", resp.Status, resp.Header.Get("Retry-After"), body.Error)
	}
	reg := prometheus.NewRegistry()
	NewCollector(reg, e)
	want := `
# HELP lagbridge_quota_known_producers Producer ids the daemon keeps leases for (at most quota.maxProducers).
# TYPE lagbridge_quota_known_producers gauge
lagbridge_quota_known_producers 1
# HELP lagbridge_quota_reports_busy_total Reports from new producer ids refused because the daemon keeps quota.maxProducers already (answered 503).
# TYPE lagbridge_quota_reports_busy_total counter
lagbridge_quota_reports_busy_total 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "lagbridge_quota_known_producers", "lagbridge_quota_reports_busy_total"); err != nil {
		t.Fatal(err)
	}
}

// TestNamedBeforeObservedJoinsAtFirstCycle: producers that report a topic
// name before the daemon observes that topic hold the open lease of an
// unknown name. The cycle at which the topic becomes known joins them to
// it, so the first decision that limits the topic reaches them at that
// cycle, not at their next report (up to a refresh interval, Lifetime/3,
// later: the bench's 10x rows admitted 4,000/s for 0.2-0.3 s after their
// first cut).
func TestNamedBeforeObservedJoinsAtFirstCycle(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, twoProducers)
	for _, id := range []string{"checkout", "batch"} {
		set, err := e.Report(quotaproto.Report{Producer: id, Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1500}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(set.Leases) != 1 || rateOf(set.Leases[0]) != -1 {
			t.Fatalf("%s before any observation: %+v, want the open lease of an unknown name", id, set)
		}
	}
	// No report from here on: the consumer takes 1,000/s of 3,000/s.
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 3000, consume: 1000}
	for cycle := 1; ; cycle++ {
		if cycle > 8 {
			t.Fatal("no decision limited the topic in 8 cycles")
		}
		w.cycles(1)
		d := e.Decisions()[0]
		if math.IsInf(d.Rate, 1) {
			continue
		}
		sum := 0.0
		for _, id := range []string{"checkout", "batch"} {
			set, _, _ := hub.Current(id)
			if len(set.Leases) != 1 || rateOf(set.Leases[0]) < 0 {
				t.Fatalf("cycle %d: the topic is limited to %v/s, %s still holds %+v", cycle, d.Rate, id, set.Leases)
			}
			sum += rateOf(set.Leases[0])
		}
		if sum > d.Rate+1 {
			t.Fatalf("cycle %d: leases sum to %v/s, the decision is %v/s", cycle, sum, d.Rate)
		}
		return
	}
}

// TestMeasuredIdleTakesNothing: a CRITICAL_PLUS producer idle on a limited
// topic (it measured no message over its window: demand 0, measured,
// protocol 1.7) takes nothing from the SHEDDABLE producer that is
// producing; it gets what nobody asked for, and its class's share again
// when it reports a demand. An unmeasured 0 (an older client, or the
// SDK's first report) keeps its meaning: unknown, the class's whole
// share. Red with demandOf reading every 0 as unknown (main before
// protocol 1.7, session 32's lead): batch got 0 of the topic's rate for
// as long as checkout stayed idle.
func TestMeasuredIdleTakesNothing(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, twoProducers)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(10) // healthy long enough for the standing wait to be learned
	w.consume = 800
	w.cycles(2)
	report := func(id string, td quotaproto.TopicDemand) {
		t.Helper()
		td.Topic = "orders"
		if _, err := e.Report(quotaproto.Report{Producer: id, Topics: []quotaproto.TopicDemand{td}}); err != nil {
			t.Fatal(err)
		}
	}
	rates := func() (total, checkout, batch float64) {
		t.Helper()
		ck, _, _ := hub.Current("checkout")
		bt, _, _ := hub.Current("batch")
		return e.Decisions()[0].Rate, rateOf(ck.Leases[0]), rateOf(bt.Leases[0])
	}
	report("batch", quotaproto.TopicDemand{Demand: 5000})
	report("checkout", quotaproto.TopicDemand{Measured: true})
	total, ck, bt := rates()
	trickle := 3 / e.lifetime.Seconds() // one message a refresh
	if !(total > 0) || total >= 1000 {
		t.Fatalf("the topic's rate %v, want limited below the 1,000/s produced", total)
	}
	// Idle, and batch wants more than the topic has: batch takes it all
	// but checkout's trickle (its lease kept within the 1% material change).
	if !near(ck, trickle) || bt < total-trickle-1e-9 || bt > total {
		t.Fatalf("checkout idle (measured 0): checkout %v, batch %v of %v; want %v and the rest", ck, bt, total, trickle)
	}
	// batch wants less than the topic has: the rest is headroom, half
	// each (equal weights).
	want := total / 4
	report("batch", quotaproto.TopicDemand{Demand: want})
	if _, ck, bt := rates(); !near(ck, trickle+(total-want-trickle)/2) || !near(bt, want+(total-want-trickle)/2) {
		t.Fatalf("checkout idle, batch wants %v of %v: checkout %v, batch %v; want the headroom shared", want, total, ck, bt)
	}
	// checkout reports an unmeasured 0 (an older client): unknown, the
	// whole rate under strict priority, as before protocol 1.7.
	report("batch", quotaproto.TopicDemand{Demand: 5000})
	report("checkout", quotaproto.TopicDemand{})
	if _, ck, bt := rates(); ck != total || bt != 0 {
		t.Fatalf("checkout unknown: checkout %v, batch %v of %v; want all and 0", ck, bt, total)
	}
	// checkout produces again: its demand first.
	report("checkout", quotaproto.TopicDemand{Demand: total / 2})
	if _, ck, bt := rates(); !near(ck, total/2) || !near(bt, total/2) {
		t.Fatalf("checkout at %v: checkout %v, batch %v of %v", total/2, ck, bt, total)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }
