package quotaserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoEngine grants every reported topic an unlimited lease and publishes
// the set; the real engine is exercised in integration/.
type echoEngine struct {
	hub *Hub
	mu  sync.Mutex
	ver uint64
}

func (e *echoEngine) Report(r quotaproto.Report) (quotaproto.LeaseSet, error) {
	e.mu.Lock()
	e.ver++
	set := quotaproto.LeaseSet{Producer: r.Producer, Version: e.ver, RefreshAfterMs: 1000}
	for _, t := range r.Topics {
		set.Leases = append(set.Leases, quotaproto.Lease{Topic: t.Topic, Signal: quotaproto.SignalOK, Version: e.ver})
	}
	e.mu.Unlock()
	e.hub.Publish(set)
	return set, nil
}

func (e *echoEngine) Quotas() ([]quota.Decision, []quota.Policy) { return []quota.Decision{}, nil }

func newTestServer(tb testing.TB, auth Auth) (*httptest.Server, *Hub) {
	ts, hub, _ := newTestServerS(tb, auth)
	return ts, hub
}

func newTestServerS(tb testing.TB, auth Auth) (*httptest.Server, *Hub, *Server) {
	tb.Helper()
	hub := NewHub()
	s := New(hub, &echoEngine{hub: hub}, auth, prometheus.NewRegistry())
	mux := http.NewServeMux()
	s.Register(mux)
	ts := httptest.NewServer(mux)
	tb.Cleanup(func() { hub.Close(); ts.Close() })
	return ts, hub, s
}

func do(tb testing.TB, method, url, token, body string) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const goodReport = `{"producer":"svc-a","topics":[{"topic":"orders","criticality":"CRITICAL","demand":100}]}`

// TestBadRequests: every malformed request gets a 4xx that says what is
// wrong.
func TestBadRequests(t *testing.T) {
	ts, _ := newTestServer(t, Auth{})
	cases := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"not json", "POST", "/v1/leases", "{", 400, "malformed"},
		{"empty body", "POST", "/v1/leases", "", 400, "malformed"},
		// The strict decoding the spec promises (additionalProperties:
		// false, required, no null): encoding/json alone lets these by.
		{"key in the wrong case", "POST", "/v1/leases", `{"Producer":"a","topics":[]}`, 400, `keys are case-sensitive: \"producer\"`},
		{"duplicate key", "POST", "/v1/leases", `{"producer":"a","producer":"b","topics":[]}`, 400, "producer: key given twice"},
		{"duplicate nested key", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t","demand":1,"demand":2}]}`, 400, "topics[].demand: key given twice"},
		{"missing topics", "POST", "/v1/leases", `{"producer":"a"}`, 400, "topics: required"},
		{"missing producer", "POST", "/v1/leases", `{"topics":[]}`, 400, "producer: required"},
		{"missing topic", "POST", "/v1/leases", `{"producer":"a","topics":[{"demand":1}]}`, 400, "topics[].topic: required"},
		{"null demand", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t","demand":null}]}`, 400, "topics[].demand: must not be null"},
		{"null topics", "POST", "/v1/leases", `{"producer":"a","topics":null}`, 400, "topics: must not be null"},
		{"array body", "POST", "/v1/leases", `[]`, 400, "malformed"},
		{"wrong type", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t","demand":"1"}]}`, 400, "malformed"},
		{"NUL in topic", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t\u0000x"}]}`, 400, "control characters"},
		{"newline in topic", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t\nx"}]}`, 400, "control characters"},
		{"C1 control in topic", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t\u0085"}]}`, 400, "control characters"},
		{"invalid UTF-8", "POST", "/v1/leases", "{\"producer\":\"a\",\"topics\":[{\"topic\":\"t\xff\"}]}", 400, "not valid UTF-8"},
		{"demand above the maximum", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t","demand":1.5e12}]}`, 400, "demand"},
		{"unknown query parameter", "GET", "/v1/leases/watch?producer=a&versoin=1", "", 400, "unknown query parameter"},
		{"repeated query parameter", "GET", "/v1/leases/stream?producer=a&producer=b", "", 400, "given 2 times"},
		// A typo'd field is an error, not silently ignored.
		{"unknown field", "POST", "/v1/leases", `{"producer":"a","topcs":[]}`, 400, "unknown field"},
		{"trailing data", "POST", "/v1/leases", goodReport + "{}", 400, "trailing"},
		{"bad producer", "POST", "/v1/leases", `{"producer":"a b","topics":[]}`, 400, "producer"},
		{"bad criticality", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t","criticality":"URGENT"}]}`, 400, "criticality"},
		{"negative demand", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t","demand":-1}]}`, 400, "demand"},
		{"duplicate topic", "POST", "/v1/leases", `{"producer":"a","topics":[{"topic":"t"},{"topic":"t"}]}`, 400, "twice"},
		{"oversized", "POST", "/v1/leases", `{"producer":"a","topics":[],"x":"` + strings.Repeat("x", quotaproto.MaxBodyBytes) + `"}`, 413, "exceeds"},
		{"watch unknown producer", "GET", "/v1/leases/watch?producer=nobody", "", 404, "POST /v1/leases first"},
		{"watch bad version", "GET", "/v1/leases/watch?producer=a&version=x", "", 400, "version"},
		{"watch long timeout", "GET", "/v1/leases/watch?producer=a&timeout=10m", "", 400, "timeout"},
		{"stream no producer", "GET", "/v1/leases/stream", "", 400, "producer"},
		{"wrong method", "GET", "/v1/leases", "", 405, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(t, c.method, ts.URL+c.path, "", c.body)
			if code != c.code || !strings.Contains(body, c.msg) {
				t.Fatalf("%d %s, want %d containing %q", code, body, c.code, c.msg)
			}
		})
	}
}

// TestAuth: a token acts only for its producers, and for at most maxIds
// ids its patterns match; /v1/quotas needs an admin token.
func TestAuth(t *testing.T) {
	auth := Auth{
		Tokens: []Token{{Token: "token-of-svc-a-0123", Producers: []string{"svc-a"}}, {Token: "token-of-everyone-01", Producers: []string{"*"}, MaxIDs: 2},
			{Token: "token-of-batches-01", Producers: []string{"svc-a", "batch-*"}, MaxIDs: 1}},
		AdminTokens: []string{"admin-token-0123456"},
	}
	if err := auth.Validate(); err != nil {
		t.Fatal(err)
	}
	ts, _ := newTestServer(t, auth)
	other := strings.Replace(goodReport, "svc-a", "svc-b", 1)
	cases := []struct {
		name, method, path, token, body string
		code                            int
	}{
		{"no token", "POST", "/v1/leases", "", goodReport, 401},
		// Authentication before any other work, on every endpoint: a
		// stranger's bad parameters, size or content type get 401.
		{"no token, bad watch parameters", "GET", "/v1/leases/watch?producer=a%20b&version=x", "", "", 401},
		{"no token, bad stream parameters", "GET", "/v1/leases/stream?junk=1", "", "", 401},
		{"quotas without token", "GET", "/v1/quotas", "", "", 401},
		// Refused before the body is read: a bad body does not turn it
		// into a 400 that tells a stranger about the protocol.
		{"no token, bad body", "POST", "/v1/leases", "", `{"junk":1}`, 401},
		{"unknown token", "POST", "/v1/leases", "guess-guess-guess-1", goodReport, 401},
		{"own producer", "POST", "/v1/leases", "token-of-svc-a-0123", goodReport, 200},
		// svc-a's token cannot alter svc-b's demand ...
		{"other producer", "POST", "/v1/leases", "token-of-svc-a-0123", other, 403},
		{"wildcard token", "POST", "/v1/leases", "token-of-everyone-01", other, 200},
		{"wildcard token, its second id", "POST", "/v1/leases", "token-of-everyone-01", strings.Replace(goodReport, "svc-a", "svc-c", 1), 200},
		{"wildcard token, the same id again", "POST", "/v1/leases", "token-of-everyone-01", other, 200},
		// Beyond maxIds, a pattern matches no new id.
		{"wildcard token, a third id", "POST", "/v1/leases", "token-of-everyone-01", strings.Replace(goodReport, "svc-a", "svc-d", 1), 403},
		{"prefix token, its id", "POST", "/v1/leases", "token-of-batches-01", strings.Replace(goodReport, "svc-a", "batch-1", 1), 200},
		{"prefix token, a second id", "POST", "/v1/leases", "token-of-batches-01", strings.Replace(goodReport, "svc-a", "batch-2", 1), 403},
		{"prefix token, a listed id beside", "POST", "/v1/leases", "token-of-batches-01", goodReport, 200},
		{"prefix token, no match", "POST", "/v1/leases", "token-of-batches-01", other, 403},
		// ... nor read its grant.
		{"watch other", "GET", "/v1/leases/watch?producer=svc-b&timeout=0s", "token-of-svc-a-0123", "", 403},
		{"watch own", "GET", "/v1/leases/watch?producer=svc-a&timeout=0s", "token-of-svc-a-0123", "", 200},
		{"quotas without admin", "GET", "/v1/quotas", "token-of-everyone-01", "", 403},
		{"quotas with admin", "GET", "/v1/quotas", "admin-token-0123456", "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if code, body := do(t, c.method, ts.URL+c.path, c.token, c.body); code != c.code {
				t.Fatalf("%d %s, want %d", code, body, c.code)
			}
		})
	}
	// The 403 names a producer as one (a consumer report's names a group).
	for _, path := range []string{"/v1/leases", "/v1/leases/watch?producer=svc-b&timeout=0s"} {
		method, body := "POST", other
		if strings.Contains(path, "watch") {
			method, body = "GET", ""
		}
		if _, got := do(t, method, ts.URL+path, "token-of-svc-a-0123", body); !strings.Contains(got, `may not act for producer \"svc-b\"`) {
			t.Errorf("%s %s with svc-a's token: %s, want it to name producer svc-b", method, path, got)
		}
	}
	bad := Auth{Tokens: []Token{{Token: "short", Producers: []string{"a b"}}, {Token: "long-enough-token-1"}, {Token: "long-enough-token-2", Producers: []string{"*"}}}}
	err := bad.Validate()
	for _, want := range []string{"tokens[0].token", "tokens[0].producers[0]", "tokens[1].producers", "tokens[2].maxIds"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %s", err, want)
		}
	}
}

// TestSlowReportBodyIsCut: a client that sends a report's headers and
// then trickles its body is cut off after bodyTimeout instead of holding a
// connection (and graceful shutdown) for as long as it likes.
func TestSlowReportBodyIsCut(t *testing.T) {
	ts, _, srv := newTestServerS(t, Auth{})
	srv.bodyTimeout = 300 * time.Millisecond
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // keep trickling, one byte every 50ms
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", resp.StatusCode)
		}
		// The error says what happened, not the connection's addresses.
		if strings.Contains(string(b), "127.0.0.1") || !strings.Contains(string(b), "did not arrive within") {
			t.Fatalf("error body %s", b)
		}
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the trickling client was not cut off within 5s")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("cut off after %v, want about 300ms", took)
	}
}

// TestWatch: a long-poll answers at once when the client is behind, and
// wakes on a publish otherwise.
func TestWatch(t *testing.T) {
	ts, hub, srv := newTestServerS(t, Auth{})
	if code, _ := do(t, "POST", ts.URL+"/v1/leases", "", goodReport); code != 200 {
		t.Fatal(code)
	}
	set, _, _ := hub.Current("svc-a")
	code, body := do(t, "GET", ts.URL+"/v1/leases/watch?producer=svc-a&version=0", "", "")
	if code != 200 || !strings.Contains(body, fmt.Sprintf(`"version":%d`, set.Version)) {
		t.Fatalf("behind client: %d %s", code, body)
	}
	got := make(chan string, 1)
	go func() {
		_, body := do(t, "GET", fmt.Sprintf("%s/v1/leases/watch?producer=svc-a&version=%d&timeout=20s", ts.URL, set.Version), "", "")
		got <- body
	}()
	waitWatchers(t, srv, 1)
	set.Version++
	hub.Publish(set)
	select {
	case body := <-got:
		if !strings.Contains(body, fmt.Sprintf(`"version":%d`, set.Version)) {
			t.Fatalf("woken with %s", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by publish")
	}
}

// waitWatchers polls the server's lagbridge_quota_watchers gauge until n
// long-polls are waiting.
func waitWatchers(tb testing.TB, s *Server, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if testutil.ToFloat64(s.watchers) >= float64(n) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("never %d watchers", n)
}

// sseClient reads lease events from a stream.
func sseClient(tb testing.TB, url string) (<-chan quotaproto.LeaseSet, func()) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		tb.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan quotaproto.LeaseSet, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var set quotaproto.LeaseSet
				if json.Unmarshal([]byte(d), &set) == nil && set.Producer != "" {
					ch <- set
				}
			}
		}
	})
	return ch, func() { resp.Body.Close(); wg.Wait() }
}

// TestStreamPushes: the stream sends the current set at once and every
// change after; closing the hub ends it (shutdown does not hang on it).
func TestStreamPushes(t *testing.T) {
	ts, hub := newTestServer(t, Auth{})
	do(t, "POST", ts.URL+"/v1/leases", "", goodReport)
	ch, stop := sseClient(t, ts.URL+"/v1/leases/stream?producer=svc-a")
	defer stop()
	first := <-ch
	for i := 1; i <= 3; i++ {
		s := first
		s.Version += uint64(i)
		hub.Publish(s)
		select {
		case got := <-ch:
			if got.Version != s.Version {
				t.Fatalf("got version %d, want %d", got.Version, s.Version)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no push")
		}
	}
	hub.Close()
	select {
	case _, open := <-ch:
		if open {
			t.Fatal("unexpected event after close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream not ended by hub close")
	}
}

// BenchmarkPushLatency measures publish-to-receive latency over a real
// loopback SSE connection and reports p50/p99 (the protocol's target:
// p99 <= 100 ms).
func BenchmarkPushLatency(b *testing.B) {
	ts, hub := newTestServer(b, Auth{})
	do(b, "POST", ts.URL+"/v1/leases", "", goodReport)
	ch, stop := sseClient(b, ts.URL+"/v1/leases/stream?producer=svc-a")
	defer stop()
	set := <-ch
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		set.Version++
		start := time.Now()
		hub.Publish(set)
		for got := range ch {
			if got.Version == set.Version {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkRejectOversized: rejecting an oversized report costs a header
// read.
func BenchmarkRejectOversized(b *testing.B) {
	hub := NewHub()
	s := New(hub, &echoEngine{hub: hub}, Auth{}, prometheus.NewRegistry())
	mux := http.NewServeMux()
	s.Register(mux)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/leases", strings.NewReader(""))
		req.ContentLength = 1 << 30
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != 413 {
			b.Fatal(rec.Code)
		}
	}
}

// TestReadTokens: with read tokens, /v1/quotas (and ReadAccess, which
// guards /v1/lag) needs a read or admin token; a producer token is
// refused; without read tokens and with auth off, both are open.
func TestReadTokens(t *testing.T) {
	const prod, admin, read = "token-of-svc-a-0123", "admin-token-0123456", "read-token-01234567"
	guarded := func(tb testing.TB, auth Auth) *httptest.Server {
		hub := NewHub()
		s := New(hub, &echoEngine{hub: hub}, auth, prometheus.NewRegistry())
		mux := http.NewServeMux()
		s.Register(mux)
		mux.HandleFunc("GET /v1/lag", func(w http.ResponseWriter, r *http.Request) {
			if s.ReadAccess(w, r) {
				fmt.Fprintln(w, "{}")
			}
		})
		ts := httptest.NewServer(mux)
		tb.Cleanup(func() { hub.Close(); ts.Close() })
		return ts
	}
	withTokens := guarded(t, Auth{Tokens: []Token{{Token: prod, Producers: []string{"svc-a"}}}, AdminTokens: []string{admin}, ReadTokens: []string{read}})
	readOnly := guarded(t, Auth{Mode: AuthNone, ReadTokens: []string{read}})
	open := guarded(t, Auth{Mode: AuthNone})
	cases := []struct {
		name  string
		ts    *httptest.Server
		path  string
		token string
		code  int
	}{
		{"lag, no token", withTokens, "/v1/lag", "", 401},
		{"lag, producer token", withTokens, "/v1/lag", prod, 403},
		{"lag, read token", withTokens, "/v1/lag", read, 200},
		{"lag, admin token", withTokens, "/v1/lag", admin, 200},
		{"quotas, read token", withTokens, "/v1/quotas", read, 200},
		{"quotas, unknown token", withTokens, "/v1/quotas", "guess-guess-guess-1", 401},
		// A read token reads; it does not act for producers.
		{"watch with a read token", withTokens, "/v1/leases/watch?producer=svc-a", read, 403},
		{"watch with an admin token", withTokens, "/v1/leases/watch?producer=svc-a", admin, 403},
		// Mode none with read tokens: the data is closed, the protocol open.
		{"open protocol, lag without token", readOnly, "/v1/lag", "", 401},
		{"open protocol, quotas with read token", readOnly, "/v1/quotas", read, 200},
		{"open protocol, watch without token", readOnly, "/v1/leases/watch?producer=nobody", "", 404},
		// Nothing configured: open, as before.
		{"open, lag", open, "/v1/lag", "", 200},
		{"open, quotas", open, "/v1/quotas", "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if code, body := do(t, "GET", c.ts.URL+c.path, c.token, ""); code != c.code {
				t.Fatalf("%d %s, want %d", code, body, c.code)
			}
		})
	}
}

// TestWatcherCaps: streams and waiting long-polls beyond their caps get
// 503 with Retry-After and are counted; a freed slot is taken again, and a
// long-poll whose answer is ready never needs a slot.
func TestWatcherCaps(t *testing.T) {
	hub := NewHub()
	reg := prometheus.NewRegistry()
	s := New(hub, &echoEngine{hub: hub}, Auth{}, reg, WithLimits(Limits{MaxStreams: 2, MaxLongPolls: 1}))
	mux := http.NewServeMux()
	s.Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { hub.Close(); ts.Close() })
	if code, _ := do(t, "POST", ts.URL+"/v1/leases", "", goodReport); code != 200 {
		t.Fatal(code)
	}
	set, _, _ := hub.Current("svc-a")
	streamURL := ts.URL + "/v1/leases/stream?producer=svc-a"
	_, stop1 := sseClient(t, streamURL)
	_, stop2 := sseClient(t, streamURL)
	refused := func(url string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "5" {
			t.Fatalf("%d Retry-After %q %s, want 503 with Retry-After 5", resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	// slots polls until n holds want (a slot is freed when its handler
	// returns, after the client went away).
	slots := func(n *atomic.Int64, want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d slots taken, want %d", n.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	refused(streamURL)
	stop1()
	slots(&s.streams, 1)
	_, stop3 := sseClient(t, streamURL)
	stop2()
	stop3()
	slots(&s.streams, 0)

	pollURL := fmt.Sprintf("%s/v1/leases/watch?producer=svc-a&version=%d&timeout=20s", ts.URL, set.Version)
	done := make(chan int, 1)
	go func() {
		code, _ := do(t, "GET", pollURL, "", "")
		done <- code
	}()
	slots(&s.polls, 1)
	refused(pollURL)
	// A poll that is behind is answered at once, cap or not.
	if code, _ := do(t, "GET", ts.URL+"/v1/leases/watch?producer=svc-a&version=0", "", ""); code != 200 {
		t.Fatalf("behind poll: %d", code)
	}
	set.Version++
	hub.Publish(set)
	if code := <-done; code != 200 {
		t.Fatalf("waiting poll: %d", code)
	}
	want := `
# HELP lagbridge_quota_watchers_refused_total Streams and long-polls answered 503 because their cap (quota.maxStreams, quota.maxLongPolls) was reached.
# TYPE lagbridge_quota_watchers_refused_total counter
lagbridge_quota_watchers_refused_total{kind="long-poll"} 1
lagbridge_quota_watchers_refused_total{kind="stream"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_quota_watchers_refused_total"); err != nil {
		t.Fatal(err)
	}
	// The refusals are requests of their endpoint, like any other answer.
	for _, ep := range []string{"watch", "stream"} {
		if n := testutil.ToFloat64(s.requests.WithLabelValues(ep, "503")); n != 1 {
			t.Errorf("lagbridge_quota_requests_total{endpoint=%q,code=\"503\"} = %v, want 1", ep, n)
		}
	}
}

// TestRefuseOpen: the refusal rule, on configured and bound addresses.
func TestRefuseOpen(t *testing.T) {
	tokens := Auth{Tokens: []Token{{Token: "token-of-svc-a-0123", Producers: []string{"svc-a"}}}}
	cases := []struct {
		name   string
		listen string
		auth   Auth
		refuse bool
	}{
		{"all interfaces, no tokens", ":9464", Auth{}, true},
		{"0.0.0.0, no tokens", "0.0.0.0:9464", Auth{}, true},
		{"[::], no tokens", "[::]:9464", Auth{}, true},
		{"a LAN address, no tokens", "10.1.2.3:9464", Auth{}, true},
		// A host name may resolve anywhere; the bound address is checked
		// again at start.
		{"a host name, no tokens", "lagbridge.internal:9464", Auth{}, true},
		{"read tokens only", ":9464", Auth{ReadTokens: []string{"read-token-01234567"}}, true},
		{"loopback v4", "127.0.0.1:9464", Auth{}, false},
		{"loopback v4, other address", "127.0.0.2:0", Auth{}, false},
		{"loopback v6", "[::1]:9464", Auth{}, false},
		{"localhost", "localhost:9464", Auth{}, false},
		{"explicit none", ":9464", Auth{Mode: AuthNone}, false},
		{"tokens", ":9464", tokens, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := RefuseOpen(c.listen, c.auth)
			if (err != nil) != c.refuse || (err != nil && !errors.Is(err, ErrOpen)) {
				t.Fatalf("RefuseOpen(%q) = %v, want refused %v", c.listen, err, c.refuse)
			}
			if err != nil && !strings.Contains(err.Error(), "quota.auth.mode: none") {
				t.Fatalf("the message does not say how to proceed: %v", err)
			}
		})
	}
}

// TestAuthModes: Validate refuses contradictions between mode and tokens.
func TestAuthModes(t *testing.T) {
	tok := []Token{{Token: "token-of-svc-a-0123", Producers: []string{"svc-a"}}}
	cases := []struct {
		name string
		auth Auth
		want string // "" for valid
	}{
		{"unset", Auth{}, ""},
		{"none", Auth{Mode: AuthNone}, ""},
		{"none with read tokens", Auth{Mode: AuthNone, ReadTokens: []string{"read-token-01234567"}}, ""},
		{"tokens", Auth{Mode: AuthTokens, Tokens: tok}, ""},
		{"tokens without tokens", Auth{Mode: AuthTokens}, "no token is set"},
		{"none with tokens", Auth{Mode: AuthNone, Tokens: tok}, "mode: none, but tokens"},
		{"unknown mode", Auth{Mode: "open"}, `"open" is not none or tokens`},
		{"short read token", Auth{ReadTokens: []string{"short"}}, "readTokens[0]: must be at least 16"},
		// A producer token is one caller: listed twice, only one entry's
		// producers would count; as an admin or read token too, it would
		// read every producer's grant.
		{"a token listed twice", Auth{Tokens: append(tok, Token{Token: "token-of-svc-a-0123", Producers: []string{"svc-b"}})}, "tokens[1].token: the same as auth.tokens[0].token"},
		{"a producer token also an admin token", Auth{Tokens: tok, AdminTokens: []string{"token-of-svc-a-0123"}}, "adminTokens[0]: the same as auth.tokens[0].token"},
		{"a producer token also a read token", Auth{Tokens: tok, ReadTokens: []string{"token-of-svc-a-0123"}}, "readTokens[0]: the same as auth.tokens[0].token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.auth.Validate()
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Validate = %v, want %q", err, c.want)
			}
		})
	}
}

// TestDecodeStrictIntegers: JSON Schema's integers (5.0, 5e0) are
// integers for integer fields; fractions, out-of-range values and other
// kinds are still refused, and floats are left alone.
func TestDecodeStrictIntegers(t *testing.T) {
	type part struct {
		Partition int32   `json:"partition"`
		Position  int64   `json:"position"`
		Rate      float64 `json:"rate"`
	}
	cases := []struct {
		name, body string
		want       part
		err        string
	}{
		{"plain", `{"partition":3,"position":9007199254740993,"rate":0.5}`, part{3, 9007199254740993, 0.5}, ""},
		{"zero fraction", `{"partition":3.0,"position":9007199254740993.0,"rate":2}`, part{3, 9007199254740993, 2}, ""},
		{"exponent", `{"partition":3e0,"position":1.5e3,"rate":1e-3}`, part{3, 1500, 0.001}, ""},
		{"fraction", `{"partition":3.5,"position":0,"rate":0}`, part{}, "cannot unmarshal number 3.5"},
		{"out of range", `{"partition":3e10,"position":0,"rate":0}`, part{}, "cannot unmarshal number 30000000000"},
		{"huge exponent", `{"partition":1e999999999,"position":0,"rate":0}`, part{}, "cannot unmarshal number 1e999999999"},
		{"object for a number", `{"partition":{"a":[1]},"position":0,"rate":0}`, part{}, "cannot unmarshal object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got part
			err := DecodeStrict([]byte(c.body), &got, "partition")
			if c.err == "" && (err != nil || got != c.want) {
				t.Fatalf("got %+v %v, want %+v", got, err, c.want)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("err %v, want %q", err, c.err)
			}
		})
	}
}

// TestSetAuth: rotated tokens are in force at once: the old one gets 401,
// the new one acts for the same entry's producers and keeps the places its
// patterns hold (maxIds); admin and read tokens rotate alike. Changes that
// would open or close an endpoint, or change the entries, are refused.
func TestSetAuth(t *testing.T) {
	auth := Auth{
		Tokens:      []Token{{Token: "token-of-svc-a-0123", Producers: []string{"svc-a"}}, {Token: "token-of-any-one-01", Producers: []string{"*"}, MaxIDs: 1}},
		AdminTokens: []string{"admin-token-0123456"},
		ReadTokens:  []string{"read-token-01234567"},
	}
	ts, _, s := newTestServerS(t, auth)
	other := strings.Replace(goodReport, "svc-a", "svc-b", 1)
	third := strings.Replace(goodReport, "svc-a", "svc-c", 1)
	for _, c := range []struct{ token, body string }{{"token-of-svc-a-0123", goodReport}, {"token-of-any-one-01", other}} {
		if code, body := do(t, "POST", ts.URL+"/v1/leases", c.token, c.body); code != 200 {
			t.Fatalf("before: %d %s", code, body)
		}
	}
	rotated := auth
	rotated.Tokens = []Token{{Token: "token-of-svc-a-NEW1", Producers: []string{"svc-a"}}, {Token: "token-of-any-one-NEW", Producers: []string{"*"}, MaxIDs: 1}}
	rotated.AdminTokens = []string{"admin-token-NEW4567"}
	rotated.ReadTokens = []string{"read-token-NEW34567"}
	if err := s.SetAuth(rotated); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, token, body string
		code                            int
	}{
		{"old producer token", "POST", "/v1/leases", "token-of-svc-a-0123", goodReport, 401},
		{"new producer token", "POST", "/v1/leases", "token-of-svc-a-NEW1", goodReport, 200},
		// The new token has its entry's producers, no more.
		{"new token, other producer", "POST", "/v1/leases", "token-of-svc-a-NEW1", other, 403},
		// The pattern token's one place is still held by svc-b: svc-c
		// does not get it (a fresh scope would give it), svc-b keeps it.
		{"pattern token, a second id", "POST", "/v1/leases", "token-of-any-one-NEW", third, 403},
		{"pattern token, held id", "POST", "/v1/leases", "token-of-any-one-NEW", other, 200},
		{"old admin token", "GET", "/v1/quotas", "admin-token-0123456", "", 401},
		{"new admin token", "GET", "/v1/quotas", "admin-token-NEW4567", "", 200},
		{"old read token", "GET", "/v1/quotas", "read-token-01234567", "", 401},
		{"new read token", "GET", "/v1/quotas", "read-token-NEW34567", "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if code, body := do(t, c.method, ts.URL+c.path, c.token, c.body); code != c.code {
				t.Fatalf("%d %s, want %d", code, body, c.code)
			}
		})
	}
	// Opening the protocol, dropping the read tokens (opening /v1/lag),
	// or another number of producer entries takes a restart.
	noRead := rotated
	noRead.ReadTokens = nil
	fewer := rotated
	fewer.Tokens = rotated.Tokens[:1]
	for name, a := range map[string]Auth{"open": {}, "no read tokens": noRead, "fewer entries": fewer} {
		if err := s.SetAuth(a); !errors.Is(err, ErrAuthMode) {
			t.Errorf("%s: %v, want ErrAuthMode", name, err)
		}
	}
	if code, _ := do(t, "POST", ts.URL+"/v1/leases", "token-of-svc-a-NEW1", goodReport); code != 200 {
		t.Errorf("after the refused changes the rotated token gets %d, want 200", code)
	}
}

// TestWatchersRefusedFromZero: lagbridge_quota_watchers_refused_total has
// both kinds at 0 from the start, so that rate() and increase() see the
// first refusal (a series born at 1 reads as no increase).
func TestWatchersRefusedFromZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(NewHub(), &echoEngine{}, Auth{}, reg)
	want := `
# HELP lagbridge_quota_watchers_refused_total Streams and long-polls answered 503 because their cap (quota.maxStreams, quota.maxLongPolls) was reached.
# TYPE lagbridge_quota_watchers_refused_total counter
lagbridge_quota_watchers_refused_total{kind="long-poll"} 0
lagbridge_quota_watchers_refused_total{kind="stream"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_quota_watchers_refused_total"); err != nil {
		t.Error(err)
	}
}

// TestSetAuthEndsRevokedStreams: a stream opened with a producer token
// that a rotation takes out of force ends (the client reconnects and gets
// 401); a stream of a token still in force goes on and gets its pushes.
func TestSetAuthEndsRevokedStreams(t *testing.T) {
	auth := Auth{Tokens: []Token{{Token: "token-of-svc-a-0123", Producers: []string{"svc-a"}}, {Token: "token-of-svc-b-0123", Producers: []string{"svc-b"}}}}
	ts, _, s := newTestServerS(t, auth)
	other := strings.Replace(goodReport, "svc-a", "svc-b", 1)
	open := func(producer, token string) <-chan string {
		if code, body := do(t, "POST", ts.URL+"/v1/leases", token, strings.Replace(goodReport, "svc-a", producer, 1)); code != 200 {
			t.Fatalf("report: %d %s", code, body)
		}
		req, _ := http.NewRequest("GET", ts.URL+"/v1/leases/stream?producer="+producer, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		lines := make(chan string, 100)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		return lines
	}
	next := func(lines <-chan string, prefix string) (string, bool) {
		deadline := time.After(10 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return "", false
				}
				if strings.HasPrefix(l, prefix) {
					return l, true
				}
			case <-deadline:
				t.Fatalf("no %q line nor end in 10 s", prefix)
			}
		}
	}
	a, b := open("svc-a", "token-of-svc-a-0123"), open("svc-b", "token-of-svc-b-0123")
	next(a, "data: ")
	next(b, "data: ")
	rotated := auth
	rotated.Tokens = []Token{{Token: "token-of-svc-a-NEW1", Producers: []string{"svc-a"}}, auth.Tokens[1]}
	if err := s.SetAuth(rotated); err != nil {
		t.Fatal(err)
	}
	if l, ok := next(a, "data: "); ok {
		t.Errorf("the revoked token's stream goes on: %s", l)
	}
	if code, body := do(t, "POST", ts.URL+"/v1/leases", "token-of-svc-b-0123", other); code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	if _, ok := next(b, "data: "); !ok {
		t.Error("the stream of a token still in force ended")
	}
}
