package quotaserver

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	lbtest "github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// fakeClock is a settable receive clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var ct0 = time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)

// newConsumersServer serves the quota protocol and the consumer reports
// on one mux, with the receive clock clk.
func newConsumersServer(tb testing.TB, auth Auth, cfg ConsumersConfig) (*httptest.Server, *Consumers, *prometheus.Registry) {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	hub := NewHub()
	s := New(hub, &echoEngine{hub: hub}, auth, reg)
	c := NewConsumers(cfg, reg)
	mux := http.NewServeMux()
	s.Register(mux)
	c.Register(mux, s)
	ts := httptest.NewServer(mux)
	tb.Cleanup(func() { hub.Close(); ts.Close() })
	return ts, c, reg
}

// consumerReport is a report body of group on topic "orders" of cluster
// "main"; parts are "partition:position:headTimeMs" or
// "partition:position:idle".
func consumerReport(group string, parts ...string) string {
	var ps []string
	for _, p := range parts {
		f := strings.Split(p, ":")
		if f[2] == "idle" {
			ps = append(ps, fmt.Sprintf(`{"partition":%s,"position":%s,"idle":true}`, f[0], f[1]))
		} else {
			ps = append(ps, fmt.Sprintf(`{"partition":%s,"position":%s,"headTimeMs":%s}`, f[0], f[1], f[2]))
		}
	}
	return fmt.Sprintf(`{"kind":"kafka","cluster":"main","group":%q,"topics":[{"topic":"orders","partitions":[%s]}]}`,
		group, strings.Join(ps, ","))
}

// TestConsumerReportRequests: every malformed or unauthorised report gets
// the 4xx that says what is wrong, and nothing of it is stored; a good one
// is stored.
func TestConsumerReportRequests(t *testing.T) {
	auth := Auth{Tokens: []Token{
		{Token: "token-of-billing-01", Producers: []string{"billing"}},
		{Token: "token-of-everyone-01", Producers: []string{"*"}, MaxIDs: 10},
	}, AdminTokens: []string{"admin-token-0123456"}}
	ts, c, reg := newConsumersServer(t, auth, ConsumersConfig{})
	const path = quotaproto.PathConsumerReport
	good := consumerReport("billing", "0:10:1764560000000")
	cases := []struct {
		name, method, token, ctype, body string
		code                             int
		msg                              string
	}{
		{"no token", "POST", "", "", good, 401, "bearer token is required"},
		// Refused before the body is read.
		{"no token, bad body", "POST", "", "", `{"junk":1}`, 401, "bearer"},
		{"unknown token", "POST", "guess-guess-guess-1", "", good, 401, "unknown token"},
		// A token speaks for the groups it lists only; the answer names
		// a group as one (it said "producer", session 29).
		{"other group", "POST", "token-of-billing-01", "", consumerReport("shipping", "0:1:idle"), 403, `may not act for consumer group \"shipping\"`},
		// An admin token reads; it reports for no group (it said "may
		// not act for producers").
		{"admin token", "POST", "admin-token-0123456", "", good, 403, "may not report for consumer groups"},
		{"not json", "POST", "token-of-billing-01", "", "{", 400, "malformed"},
		{"unknown field", "POST", "token-of-billing-01", "", strings.Replace(good, `"kind"`, `"knd"`, 1), 400, "unknown field"},
		{"trailing data", "POST", "token-of-billing-01", "", good + "{}", 400, "trailing"},
		{"invalid", "POST", "token-of-billing-01", "", consumerReport("billing", "0:-1:idle", "0:3:idle"), 400, "position -1"},
		{"wrong type", "POST", "token-of-billing-01", "", strings.Replace(good, `"position":10`, `"position":"10"`, 1), 400, "malformed"},
		{"text body", "POST", "token-of-billing-01", "text/plain", good, 415, "application/json"},
		{"oversized", "POST", "token-of-billing-01", "", `{"x":"` + strings.Repeat("x", quotaproto.MaxBodyBytes) + `"}`, 413, "exceeds"},
		{"wrong method", "GET", "token-of-billing-01", "", "", 405, ""},
		{"own group", "POST", "token-of-billing-01", "", good, 204, ""},
		{"wildcard token", "POST", "token-of-everyone-01", "", consumerReport("shipping", "0:1:idle"), 204, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+path, strings.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body := string(b)
			if resp.StatusCode != tc.code || !strings.Contains(body, tc.msg) {
				t.Fatalf("%d %s, want %d containing %q", resp.StatusCode, body, tc.code, tc.msg)
			}
		})
	}
	// Only the two accepted reports were stored.
	c.mu.Lock()
	n := c.n
	c.mu.Unlock()
	if n != 2 {
		t.Errorf("%d partitions stored, want 2", n)
	}
	for code, want := range map[string]float64{"401": 3, "403": 2, "400": 5, "415": 1, "413": 1, "204": 2} {
		if got := testutil.ToFloat64(c.total.WithLabelValues(code)); got != want {
			t.Errorf("lagbridge_consumer_reports_total{code=%q} = %v, want %v", code, got, want)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// post sends body to the consumer report endpoint without a token and
// returns the status code.
func post(tb testing.TB, ts *httptest.Server, body string) int {
	tb.Helper()
	code, _ := do(tb, "POST", ts.URL+quotaproto.PathConsumerReport, "", body)
	return code
}

func sampleOf(cluster string, parts ...int32) lag.Sample {
	s := lag.Sample{Target: lag.Target{Kind: lag.KindKafka, Cluster: cluster, Topic: "orders", Group: "billing"}}
	for _, p := range parts {
		s.Partitions = append(s.Partitions, lag.PartitionSample{Partition: p})
	}
	return s
}

// TestConsumerReportOverlay: the newest fresh report of a partition is
// what the sample carries, stamped with the daemon's receive time; a report
// that is no longer fresh is not.
func TestConsumerReportOverlay(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Fresh: 2 * time.Second, Now: clk.Now})
	head := ct0.Add(-1500 * time.Millisecond).UnixMilli()
	if code := post(t, ts, consumerReport("billing", fmt.Sprintf("0:100:%d", head), "1:50:idle")); code != 204 {
		t.Fatalf("report: %d", code)
	}
	clk.Add(500 * time.Millisecond)
	// A second member reports partition 1 later: newest wins.
	if code := post(t, ts, consumerReport("billing", "1:60:idle")); code != 204 {
		t.Fatalf("report: %d", code)
	}
	type want struct {
		at       time.Time
		position int64
		head     time.Time
	}
	check := func(t *testing.T, s lag.Sample, wants map[int32]want) {
		t.Helper()
		for _, p := range s.Partitions {
			w := wants[p.Partition]
			r := p.Reported
			if !r.At.Equal(w.at) || r.Position != w.position || !r.HeadTime.Equal(w.head) {
				t.Errorf("partition %d: reported %+v, want %+v", p.Partition, r, w)
			}
		}
	}
	cases := []struct {
		name   string
		sample lag.Sample
		now    time.Time
		wants  map[int32]want
	}{
		{"both fresh", sampleOf("main", 0, 1, 2), ct0.Add(time.Second), map[int32]want{
			0: {ct0, 100, time.UnixMilli(head)},
			1: {ct0.Add(500 * time.Millisecond), 60, time.Time{}},
			// Partition 2 was never reported on.
		}},
		// Exactly Fresh old is still fresh.
		{"first at the edge", sampleOf("main", 0), ct0.Add(2 * time.Second), map[int32]want{0: {ct0, 100, time.UnixMilli(head)}}},
		{"first too old", sampleOf("main", 0, 1), ct0.Add(2*time.Second + time.Millisecond), map[int32]want{
			1: {ct0.Add(500 * time.Millisecond), 60, time.Time{}},
		}},
		// A report received after the cycle's clock read (while the
		// brokers were being read) counts, as of that clock.
		{"received during the cycle", sampleOf("main", 0, 1), ct0.Add(-time.Millisecond), map[int32]want{
			0: {ct0.Add(-time.Millisecond), 100, time.UnixMilli(head)},
			1: {ct0.Add(-time.Millisecond), 60, time.Time{}},
		}},
		// Reports name cluster "main"; another cluster's sample of the
		// same group and topic gets nothing.
		{"other cluster", sampleOf("other", 0, 1), ct0.Add(time.Second), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.Overlay(&tc.sample, tc.now)
			check(t, tc.sample, tc.wants)
		})
	}
	// A report without a cluster applies to every cluster of its kind,
	// unless one naming the cluster is newer.
	clk.Add(500 * time.Millisecond) // ct0+1s
	if code := post(t, ts, strings.Replace(consumerReport("billing", "0:200:idle"), `"cluster":"main",`, "", 1)); code != 204 {
		t.Fatalf("report: %d", code)
	}
	s := sampleOf("other", 0)
	c.Overlay(&s, ct0.Add(time.Second))
	check(t, s, map[int32]want{0: {ct0.Add(time.Second), 200, time.Time{}}})
	s = sampleOf("main", 0)
	c.Overlay(&s, ct0.Add(time.Second))
	check(t, s, map[int32]want{0: {ct0.Add(time.Second), 200, time.Time{}}})
	clk.Add(100 * time.Millisecond)
	if code := post(t, ts, consumerReport("billing", "0:210:idle")); code != 204 {
		t.Fatalf("report: %d", code)
	}
	s = sampleOf("main", 0)
	c.Overlay(&s, ct0.Add(1100*time.Millisecond))
	check(t, s, map[int32]want{0: {ct0.Add(1100 * time.Millisecond), 210, time.Time{}}})
}

// TestConsumerReportStoreCap: a full store refuses new partitions (503)
// but keeps updating the ones it knows, and makes room by dropping reports
// that are no longer fresh.
func TestConsumerReportStoreCap(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Fresh: time.Second, MaxReports: 2, Now: clk.Now})
	if code := post(t, ts, consumerReport("billing", "0:1:idle", "1:1:idle")); code != 204 {
		t.Fatalf("report: %d", code)
	}
	code, body := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", consumerReport("billing", "1:2:idle", "2:1:idle"))
	if code != 503 || !strings.Contains(body, "1 new partitions refused") {
		t.Fatalf("%d %s, want 503 refusing 1 partition", code, body)
	}
	s := sampleOf("main", 1, 2)
	c.Overlay(&s, clk.Now())
	if s.Partitions[0].Reported.Position != 2 || !s.Partitions[1].Reported.IsZero() {
		t.Fatalf("known partition not updated or new one stored: %+v", s.Partitions)
	}
	clk.Add(1500 * time.Millisecond)
	// Partition 0 is no longer fresh: it makes room for partition 2.
	if code := post(t, ts, consumerReport("billing", "1:3:idle", "2:1:idle")); code != 204 {
		t.Fatalf("report after the first went stale: %d", code)
	}
}

// TestConsumerReportAgeMetric pins the age metric's exposition: the age of
// the newest report per target, gone once reports are older than Keep.
func TestConsumerReportAgeMetric(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, _, reg := newConsumersServer(t, Auth{}, ConsumersConfig{Fresh: time.Second, Keep: 10 * time.Second, Now: clk.Now})
	post(t, ts, consumerReport("billing", "0:1:idle"))
	clk.Add(2 * time.Second)
	post(t, ts, consumerReport("billing", "1:1:idle"))
	post(t, ts, consumerReport("shipping", "0:1:idle"))
	clk.Add(1500 * time.Millisecond)
	want := `
# HELP lagbridge_consumer_report_age_seconds Seconds since the daemon received the newest consumer report about a target (any partition); absent when none in the last 5 minutes.
# TYPE lagbridge_consumer_report_age_seconds gauge
lagbridge_consumer_report_age_seconds{cluster="main",group="billing",topic="orders"} 1.5
lagbridge_consumer_report_age_seconds{cluster="main",group="shipping",topic="orders"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_consumer_report_age_seconds"); err != nil {
		t.Fatal(err)
	}
	clk.Add(9 * time.Second)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "lagbridge_consumer_report_age_seconds"); err != nil {
		t.Fatal(err)
	}
}

// FuzzConsumerReport: whatever the body, the endpoint answers 204, 400 or
// 413 and never panics.
func FuzzConsumerReport(f *testing.F) {
	f.Add(consumerReport("billing", "0:10:1764560000000", "1:3:idle"))
	f.Add(`{"kind":"nats","group":"g","topics":[{"topic":"S","partitions":[{"partition":0,"position":9223372036854775807,"headTimeMs":1}]}]}`)
	f.Add(`{"kind":"kafka","group":"g","topics":[{"topic":"t","partitions":[{"partition":2147483648}]}]}`)
	f.Add(`[]`)
	f.Add(`null`)
	c := NewConsumers(ConsumersConfig{}, prometheus.NewRegistry())
	hub := NewHub()
	defer hub.Close()
	s := New(hub, &echoEngine{hub: hub}, Auth{}, prometheus.NewRegistry())
	mux := http.NewServeMux()
	c.Register(mux, s)
	f.Fuzz(func(t *testing.T, body string) {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("POST", quotaproto.PathConsumerReport, strings.NewReader(body))
		mux.ServeHTTP(w, req)
		switch w.Code {
		case 204, 400, 413:
		default:
			t.Fatalf("body %q: status %d %s", body, w.Code, w.Body)
		}
		ls := sampleOf("main", 0, 1, 2)
		c.Overlay(&ls, time.Now())
	})
}

// TestConsumerReportNATSMembers: the members of a NATS consumer share its
// stream, so their reports combine; a Kafka partition's newest report wins.
func TestConsumerReportNATSMembers(t *testing.T) {
	nats := func(member, part string) string {
		return strings.NewReplacer(`"kind":"kafka"`, `"kind":"nats"`, `"group":"billing"`, `"group":"billing","member":"`+member+`"`).
			Replace(consumerReport("billing", part))
	}
	h1, h2 := ct0.Add(-3*time.Second).UnixMilli(), ct0.Add(-time.Second).UnixMilli()
	cases := []struct {
		name    string
		reports []string // received 1ms apart, in this order
		want    lag.Report
	}{
		// Member a works on 95 while b is idle past 100: the consumer's
		// oldest work is a's.
		{"one in hand", []string{nats("a", fmt.Sprintf("0:95:%d", h1)), nats("b", "0:100:idle")},
			lag.Report{Position: 95, HeadTime: time.UnixMilli(h1)}},
		// The smallest position in hand, with its own head time.
		{"two in hand", []string{nats("a", fmt.Sprintf("0:97:%d", h2)), nats("b", fmt.Sprintf("0:95:%d", h1))},
			lag.Report{Position: 95, HeadTime: time.UnixMilli(h1)}},
		// All idle: the furthest position; b's 90 is only where b's own
		// last message ended.
		{"all idle", []string{nats("a", "0:100:idle"), nats("b", "0:90:idle")}, lag.Report{Position: 100}},
		// The same member's newer report replaces its older one.
		{"member moves on", []string{nats("a", fmt.Sprintf("0:95:%d", h1)), nats("a", "0:96:idle")}, lag.Report{Position: 96}},
		// Kafka: the newest wins, even with the old owner's work in hand.
		{"kafka newest wins", []string{consumerReport("billing", fmt.Sprintf("0:50:%d", h1)), strings.Replace(consumerReport("billing", "0:80:idle"), `"group"`, `"member":"new-owner","group"`, 1)},
			lag.Report{Position: 80}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: ct0}
			ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Now: clk.Now})
			for _, r := range tc.reports {
				clk.Add(time.Millisecond)
				if code, body := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", r); code != 204 {
					t.Fatalf("%s: %d %s", r, code, body)
				}
			}
			s := sampleOf("main", 0)
			if strings.Contains(tc.reports[0], `"nats"`) {
				s.Target.Kind = lag.KindNATS
			}
			c.Overlay(&s, clk.Now())
			tc.want.At = clk.Now()
			if got := s.Partitions[0].Reported; !got.At.Equal(tc.want.At) || got.Position != tc.want.Position || !got.HeadTime.Equal(tc.want.HeadTime) {
				t.Fatalf("reported %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestConsumerReportMembersBounded: a partition remembers at most
// maxMembers members; a new one replaces the one not heard from longest.
func TestConsumerReportMembersBounded(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Now: clk.Now})
	for i := range maxMembers + 1 {
		clk.Add(time.Millisecond)
		body := strings.Replace(consumerReport("billing", fmt.Sprintf("0:%d:idle", i)), `"group"`, fmt.Sprintf(`"member":"m%d","group"`, i), 1)
		if code := post(t, ts, body); code != 204 {
			t.Fatalf("member %d: %d", i, code)
		}
	}
	c.mu.Lock()
	ms := c.reports[lag.Target{Kind: lag.KindKafka, Cluster: "main", Topic: "orders", Group: "billing"}][0]
	n := c.n
	c.mu.Unlock()
	if len(ms) != maxMembers || n != maxMembers {
		t.Fatalf("%d members (%d counted), want %d", len(ms), n, maxMembers)
	}
	for _, m := range ms {
		if m.member == "m0" {
			t.Fatal("the member not heard from longest is still there")
		}
	}
	s := sampleOf("main", 0)
	c.Overlay(&s, clk.Now())
	if got := s.Partitions[0].Reported.Position; got != maxMembers {
		t.Errorf("newest report position %d, want %d", got, maxMembers)
	}
}

// BenchmarkOverlay is the observation loop's cost per cycle for a target
// of 1,000 partitions, every one reported on by one member.
func BenchmarkOverlay(b *testing.B) {
	c := NewConsumers(ConsumersConfig{}, prometheus.NewRegistry())
	now := time.Now()
	rep := quotaproto.ConsumerReport{Kind: quotaproto.KindKafka, Cluster: "main", Group: "billing"}
	s := lag.Sample{Target: lag.Target{Kind: lag.KindKafka, Cluster: "main", Topic: "orders", Group: "billing"}}
	for p := range int32(1000) {
		if p%quotaproto.MaxReportPartitions == 0 {
			rep.Topics = append(rep.Topics[:0], quotaproto.ConsumerTopic{Topic: "orders"})
		}
		rep.Topics[0].Partitions = append(rep.Topics[0].Partitions, quotaproto.ConsumerPartition{Partition: p, Position: 5, Idle: true})
		c.put(rep, now)
		s.Partitions = append(s.Partitions, lag.PartitionSample{Partition: p})
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Overlay(&s, now)
	}
}

// TestConsumerReportHeld: the messages a consumer says it holds, and for
// how long, reach the sample through the endpoint (a report without them
// carries none, as before); a bad count is refused with what is wrong; a
// NATS consumer's one member keeps its count; the merged report of
// several members counts none (one member's count bounds only that
// member).
func TestConsumerReportHeld(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Now: clk.Now})
	head := ct0.Add(-time.Second).UnixMilli()
	body := fmt.Sprintf(`{"kind":"kafka","cluster":"main","group":"billing","topics":[{"topic":"orders","partitions":[`+
		`{"partition":0,"position":100,"headTimeMs":%d,"held":500,"heldMs":750},`+
		`{"partition":1,"position":7,"headTimeMs":%d},{"partition":2,"position":9,"idle":true}]}]}`, head, head)
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", body); code != 204 {
		t.Fatalf("report with held: %d %s", code, msg)
	}
	s := sampleOf("main", 0, 1, 2)
	c.Overlay(&s, ct0)
	want := []lag.Report{
		{At: ct0, Position: 100, HeadTime: time.UnixMilli(head), Held: 500, HeldFor: 750 * time.Millisecond},
		{At: ct0, Position: 7, HeadTime: time.UnixMilli(head)},
		{At: ct0, Position: 9},
	}
	for i, p := range s.Partitions {
		if r := p.Reported; !r.At.Equal(want[i].At) || r.Position != want[i].Position || !r.HeadTime.Equal(want[i].HeadTime) ||
			r.Held != want[i].Held || r.HeldFor != want[i].HeldFor {
			t.Errorf("partition %d: reported %+v, want %+v", p.Partition, r, want[i])
		}
	}
	for _, bad := range []struct{ part, msg string }{
		{fmt.Sprintf(`{"partition":0,"position":1,"headTimeMs":%d,"held":-1}`, head), "partitions[0].held -1 must be from 0"},
		{`{"partition":0,"position":1,"idle":true,"held":3}`, "partitions[0].held 3 needs headTimeMs"},
		{fmt.Sprintf(`{"partition":0,"position":1,"headTimeMs":%d,"heldMs":20}`, head), "partitions[0].heldMs 20 needs held"},
		{fmt.Sprintf(`{"partition":0,"position":1,"headTimeMs":%d,"held":2,"heldMs":86400001}`, head), "partitions[0].heldMs 86400001"},
		{fmt.Sprintf(`{"partition":0,"position":1,"headTimeMs":%d,"held":"2"}`, head), "malformed"},
	} {
		body := `{"kind":"kafka","group":"billing","topics":[{"topic":"orders","partitions":[` + bad.part + `]}]}`
		if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", body); code != 400 || !strings.Contains(msg, bad.msg) {
			t.Errorf("%s: %d %s, want 400 saying %q", bad.part, code, msg, bad.msg)
		}
	}
	// One member of a NATS consumer: its count, as a Kafka partition's.
	solo := fmt.Sprintf(`{"kind":"nats","group":"billing","member":"a","topics":[{"topic":"SOLO","partitions":[`+
		`{"partition":0,"position":40,"headTimeMs":%d,"held":3,"heldMs":1200}]}]}`, head)
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", solo); code != 204 {
		t.Fatalf("nats report: %d %s", code, msg)
	}
	ss := lag.Sample{Target: lag.Target{Kind: lag.KindNATS, Cluster: "main", Topic: "SOLO", Group: "billing"},
		Partitions: []lag.PartitionSample{{Partition: 0}}}
	c.Overlay(&ss, ct0)
	if r := ss.Partitions[0].Reported; r.Position != 40 || r.Held != 3 || r.HeldFor != 1200*time.Millisecond {
		t.Errorf("a NATS consumer's one member reported %+v, want position 40 holding 3 for 1.2s", r)
	}
	// Two members of a NATS consumer with messages in hand: the merged
	// report is the oldest work, with no count.
	for i, m := range []string{"a", "b"} {
		body := fmt.Sprintf(`{"kind":"nats","group":"billing","member":%q,"topics":[{"topic":"EVENTS","partitions":[`+
			`{"partition":0,"position":%d,"headTimeMs":%d,"held":10,"heldMs":300}]}]}`, m, 50+i, head)
		if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", body); code != 204 {
			t.Fatalf("nats report: %d %s", code, msg)
		}
	}
	ns := lag.Sample{Target: lag.Target{Kind: lag.KindNATS, Cluster: "main", Topic: "EVENTS", Group: "billing"},
		Partitions: []lag.PartitionSample{{Partition: 0}}}
	c.Overlay(&ns, ct0)
	if r := ns.Partitions[0].Reported; r.Position != 50 || r.Held != 0 || r.HeldFor != 0 {
		t.Errorf("merged NATS report %+v, want position 50 and no count", r)
	}
}

// TestConsumerReportSkipped: a Kafka report's running skip count and its
// member reach the sample (lag.Report.Skipped, Member), so that lag/ can
// take the growth between readings out of the consumption; a negative
// count is refused naming the field.
func TestConsumerReportSkipped(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Now: clk.Now})
	head := ct0.Add(-time.Second).UnixMilli()
	body := fmt.Sprintf(`{"kind":"kafka","cluster":"main","group":"billing","member":"m1","topics":[{"topic":"orders","partitions":[`+
		`{"partition":0,"position":100,"headTimeMs":%d,"skipped":1275},{"partition":1,"position":9,"idle":true}]}]}`, head)
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", body); code != 204 {
		t.Fatalf("report with skipped: %d %s", code, msg)
	}
	s := sampleOf("main", 0, 1)
	c.Overlay(&s, ct0)
	if r := s.Partitions[0].Reported; r.Skipped != 1275 || !r.SkipsGiven || r.Member != "m1" {
		t.Errorf("partition 0: reported %+v, want skipped 1275 by m1", r)
	}
	if r := s.Partitions[1].Reported; r.Skipped != 0 || r.SkipsGiven {
		t.Errorf("partition 1: reported %+v, want no count (absent is not 0)", r)
	}
	// Given as 0: a count (none skipped yet), not absent.
	zero := `{"kind":"kafka","cluster":"main","group":"billing","member":"m1","topics":[{"topic":"orders","partitions":[{"partition":1,"position":9,"idle":true,"skipped":0}]}]}`
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", zero); code != 204 {
		t.Fatalf("report with skipped 0: %d %s", code, msg)
	}
	s = sampleOf("main", 0, 1)
	c.Overlay(&s, ct0)
	if r := s.Partitions[1].Reported; r.Skipped != 0 || !r.SkipsGiven {
		t.Errorf("partition 1 with skipped 0: reported %+v, want a count of 0", r)
	}
	// Given as null: not given, as absent (docs/quota-protocol.yaml
	// allows null; the conformance run sends it).
	null := `{"kind":"kafka","cluster":"main","group":"billing","member":"m1","topics":[{"topic":"orders","partitions":[{"partition":1,"position":9,"idle":true,"skipped":null}]}]}`
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", null); code != 204 {
		t.Fatalf("report with skipped null: %d %s", code, msg)
	}
	s = sampleOf("main", 0, 1)
	c.Overlay(&s, ct0)
	if r := s.Partitions[1].Reported; r.SkipsGiven {
		t.Errorf("partition 1 with skipped null: reported %+v, want no count", r)
	}
	// The bound: MaxSkipped is taken, one more refused naming the field.
	for n, want := range map[int64]int{quotaproto.MaxSkipped: 204, quotaproto.MaxSkipped + 1: 400} {
		b := fmt.Sprintf(`{"kind":"kafka","group":"billing","topics":[{"topic":"orders","partitions":[{"partition":0,"position":1,"idle":true,"skipped":%d}]}]}`, n)
		if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", b); code != want || want == 400 && !strings.Contains(msg, "skipped 9007199254740993 must be from 0") {
			t.Errorf("skipped %d: %d %s, want %d", n, code, msg, want)
		}
	}
	bad := `{"kind":"kafka","group":"billing","topics":[{"topic":"orders","partitions":[{"partition":0,"position":1,"idle":true,"skipped":-1}]}]}`
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", bad); code != 400 || !strings.Contains(msg, "partitions[0].skipped -1 must be from 0") {
		t.Errorf("negative skipped: %d %s, want 400 naming it", code, msg)
	}
}

// TestConsumerReportOwnPace: a Kafka partition reported at its own pace
// (ownPace, protocol 1.6) says so in its Reported; one without the field
// does not.
func TestConsumerReportOwnPace(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Now: clk.Now})
	head := ct0.Add(-time.Second).UnixMilli()
	body := fmt.Sprintf(`{"kind":"kafka","cluster":"main","group":"billing","topics":[{"topic":"orders","partitions":[`+
		`{"partition":0,"position":100,"headTimeMs":%d,"held":40,"heldMs":50,"ownPace":true},{"partition":1,"position":9,"idle":true}]}]}`, head)
	if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", body); code != 204 {
		t.Fatalf("report with ownPace: %d %s", code, msg)
	}
	s := sampleOf("main", 0, 1)
	c.Overlay(&s, ct0)
	if r := s.Partitions[0].Reported; !r.OwnPace || r.Position != 100 || r.Held != 40 {
		t.Errorf("partition 0: reported %+v, want at its own pace at 100", r)
	}
	if r := s.Partitions[1].Reported; r.OwnPace || r.IsZero() {
		t.Errorf("partition 1: reported %+v, want reported, not at its own pace", r)
	}
}

// TestConsumerReportHeldMembers: the one-member rule's edges. A member
// with messages in hand and a member that is idle are two: no count (one
// instance's stall must not bound a consumer whose other instance can take
// more). A member whose last report is no longer fresh is not counted: the
// one left reporting keeps its count. Before, only the cases "one alone"
// and "two both in hand" were tested.
func TestConsumerReportHeldMembers(t *testing.T) {
	clk := &fakeClock{t: ct0}
	ts, c, _ := newConsumersServer(t, Auth{}, ConsumersConfig{Now: clk.Now})
	post := func(topic, member, part string) {
		t.Helper()
		body := fmt.Sprintf(`{"kind":"nats","group":"billing","member":%q,"topics":[{"topic":%q,"partitions":[%s]}]}`, member, topic, part)
		if code, msg := do(t, "POST", ts.URL+quotaproto.PathConsumerReport, "", body); code != 204 {
			t.Fatalf("nats report of %s on %s: %d %s", member, topic, code, msg)
		}
	}
	overlay := func(topic string) lag.Report {
		s := lag.Sample{Target: lag.Target{Kind: lag.KindNATS, Cluster: "main", Topic: topic, Group: "billing"},
			Partitions: []lag.PartitionSample{{Partition: 0}}}
		c.Overlay(&s, clk.Now())
		return s.Partitions[0].Reported
	}
	head := ct0.Add(-time.Second).UnixMilli()
	inHand := fmt.Sprintf(`{"partition":0,"position":40,"headTimeMs":%d,"held":3,"heldMs":1200}`, head)

	post("MIXED", "a", inHand)
	post("MIXED", "b", `{"partition":0,"position":60,"idle":true}`)
	if r := overlay("MIXED"); r.Position != 40 || r.Held != 0 || r.HeldFor != 0 {
		t.Errorf("a in hand, b idle: reported %+v, want position 40 and no count", r)
	}

	post("STALE", "b", fmt.Sprintf(`{"partition":0,"position":30,"headTimeMs":%d,"held":5,"heldMs":400}`, head))
	clk.Add(DefaultReportFresh + time.Second)
	post("STALE", "a", inHand)
	if r := overlay("STALE"); r.Position != 40 || r.Held != 3 || r.HeldFor != 1200*time.Millisecond {
		t.Errorf("b's report stale, a in hand: reported %+v, want position 40 holding 3 for 1.2s", r)
	}
}

// TestConsumerReportUnknownCluster: a reporter whose Cluster names no
// cluster the daemon watches (the README's "main" copied into a
// deployment whose cluster is "local", found in a new user's trial on
// real Kafka) is still answered 204, as the protocol says, but its
// reports apply to no target; the daemon now warns, once per cluster
// name, naming the clusters it watches. Before, nothing said why the
// target stayed on commits (source "commits" in /v1/lag, reports counted
// 204).
func TestConsumerReportUnknownCluster(t *testing.T) {
	var logs lbtest.Buffer
	ts, _, _ := newConsumersServer(t, Auth{}, ConsumersConfig{
		Clusters: map[lag.Kind][]string{lag.KindKafka: {"local"}, lag.KindNATS: {"main"}},
		Log:      slog.New(slog.NewTextHandler(&logs, nil))})
	main := consumerReport("billing", "0:10:idle")
	for _, body := range []string{
		main, main, // a Kafka report naming "main", which is a NATS cluster here: warned once
		strings.Replace(main, `"cluster":"main"`, `"cluster":"local"`, 1), // known
		strings.Replace(main, `"cluster":"main",`, ``, 1),                 // no cluster: every cluster of its kind
	} {
		if code := post(t, ts, body); code != http.StatusNoContent {
			t.Fatalf("%d, want 204 for %s", code, body)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "cluster=main") ||
		!strings.Contains(out, "watched=[local]") || !strings.Contains(out, "group=billing") {
		t.Fatalf("want one warning naming cluster main and the watched kafka clusters; got:\n%s", out)
	}
}
