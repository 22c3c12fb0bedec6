package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/dashboard/chromium"
	"github.com/lagbridge/lagbridge/internal/importcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestImports: the dashboard speaks the daemon's JSON and imports none of
// its packages.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".")
	importcheck.Only(t, "chromium")
}

func TestHandlerRoutes(t *testing.T) {
	srv := httptest.NewServer(Handler())
	t.Cleanup(srv.Close)
	cases := []struct {
		name, method, path string
		code               int
		ctype, contains    string
	}{
		// The page itself, at / and /index.html.
		{"root", "GET", "/", 200, "text/html; charset=utf-8", `<script src="ui/app.js" defer>`},
		{"index", "GET", "/index.html", 200, "text/html; charset=utf-8", "<title>lagbridge</title>"},
		// Assets under /ui/ with their own types, not the host's mime.types.
		{"script", "GET", "/ui/app.js", 200, "text/javascript; charset=utf-8", "v1/quotas"},
		{"style", "GET", "/ui/style.css", 200, "text/css; charset=utf-8", ".badge"},
		{"icon", "GET", "/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		// HEAD works like GET without a body.
		{"head", "HEAD", "/", 200, "text/html; charset=utf-8", ""},
		// A mistyped API path is a 404, not the page.
		{"unknown path", "GET", "/v1/lagg", 404, "", ""},
		{"unknown asset", "GET", "/ui/nope.js", 404, "", ""},
		// The page is not an asset: /ui/index.html is not served twice.
		{"page as asset", "GET", "/ui/index.html", 404, "", ""},
		// Directory listing of /ui/ is not offered.
		{"asset dir", "GET", "/ui/", 404, "", ""},
		// Writes are refused.
		{"post", "POST", "/", 405, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.code)
			}
			if c.code != 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); got != c.ctype {
				t.Errorf("Content-Type %q, want %q", got, c.ctype)
			}
			if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no strict CSP: %q", resp.Header.Get("Content-Security-Policy"))
			}
			if resp.Header.Get("ETag") == "" || resp.Header.Get("Cache-Control") != "no-cache" {
				t.Errorf("caching headers: %v", resp.Header)
			}
			if !strings.Contains(string(body), c.contains) {
				t.Errorf("body lacks %q", c.contains)
			}
		})
	}
	// A conditional GET with the ETag is answered 304.
	resp, _ := srv.Client().Get(srv.URL + "/ui/app.js")
	resp.Body.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/ui/app.js", nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp2, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %d, want 304", resp2.StatusCode)
	}
}

// TestSelfContained: nothing in the embedded files loads from another
// origin (no CDN, no web font): the machine the daemon runs on may have no
// internet access, and the CSP would block it anyway.
func TestSelfContained(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(\s*['"]?https?:`)
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := static.ReadFile(p)
		for _, m := range external.FindAllString(string(b), -1) {
			if m == "http://www.w3.org" { // the SVG namespace, an identifier, not a fetch
				continue
			}
			t.Errorf("%s refers to another origin: %q", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fakeAPI serves the dashboard with a canned daemon behind it: two targets
// whose head age and lag grow by one step per /v1/lag call, a decision in
// stop on one, slow-down on the other, and two producers' leases. With
// quotas false, /v1/quotas answers 404 like a daemon without quotas.
func fakeAPI(tb testing.TB, quotas bool) *httptest.Server {
	tb.Helper()
	var calls atomic.Int64
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mux := http.NewServeMux()
	mux.Handle("/", Handler())
	mux.HandleFunc("GET /v1/lag", func(w http.ResponseWriter, _ *http.Request) {
		n := calls.Add(1)
		now := start.Add(time.Duration(n) * time.Second)
		head := float64(n) * 0.5
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"generatedAt": %q,
 "clusters": [{"name":"main","kind":"kafka","observed":true,"lastCycle":%[1]q,"lastSuccess":%[1]q,"targets":1},
              {"name":"js","kind":"nats","observed":true,"lastCycle":%[1]q,"lastSuccess":%[1]q,"targets":1}],
 "targets": [
  {"kind":"kafka","cluster":"main","topic":"orders","group":"billing","status":"lagging","rule":"over-age","reason":"head age %.1fs > 2s",
   "members":3,"lag":%d,"headAgeSeconds":%.1f,"headAgeKnown":true,"produceRate":1000,"consumeRate":400,"timeToDrainSeconds":null,
   "observedAt":%[1]q,"stale":false,"ratesKnown":true, "uncommittedPartitions":1,
   "partitions":[{"partition":0,"committed":10,"lag":3,"headKnown":true,"headAgeSeconds":0.4},
                 {"partition":1,"committed":-1,"lag":0,"headKnown":false,"headAgeSeconds":0},
                 {"partition":2,"committed":50,"lag":900,"headKnown":true,"headAgeSeconds":7.5},
                 {"partition":5,"committed":7,"lag":0,"headKnown":true,"headAgeSeconds":0}]},
  {"kind":"nats","cluster":"js","topic":"EVENTS","group":"<img src=x onerror=alert(1)>","status":"ok","rule":"within-age","reason":"fine",
   "members":-1,"lag":12,"headAgeSeconds":0.2,"headAgeKnown":true,"produceRate":500,"consumeRate":510,"timeToDrainSeconds":1.2,
   "observedAt":%[1]q,"stale":false,"ratesKnown":true}]}`,
			now.Format(time.RFC3339Nano), head, 600*n, head)
	})
	mux.HandleFunc("GET /v1/quotas", func(w http.ResponseWriter, r *http.Request) {
		if !quotas {
			http.NotFound(w, r)
			return
		}
		exp := start.Add(time.Duration(calls.Load())*time.Second + 8*time.Second).Format(time.RFC3339Nano)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"producers": [
  {"producer":"checkout","version":4,"refreshAfterMs":1000,"leases":[{"topic":"orders","rate":300,"burst":30,"signal":"stop","version":4,"expiresAt":%q,"reason":"dead on arrival"},
    {"topic":"EVENTS","rate":50,"signal":"stop","version":4,"expiresAt":%[1]q},{"topic":"ledger","rate":60,"signal":"stop","version":4,"expiresAt":%[1]q},
    {"topic":"journal","rate":70,"signal":"stop","advisory":true,"version":4,"expiresAt":%[1]q}]},
  {"producer":"guest","version":1,"refreshAfterMs":1000,"leases":[{"topic":"orders","rate":20,"signal":"stop","version":1,"expiresAt":%[1]q}]},
  {"producer":"audit","version":2,"refreshAfterMs":1000,"leases":[{"topic":"orders","rate":100,"signal":"slow-down","retryAfterMs":1500,"avoidPartitions":[2,5],"advisory":true,"version":2,"expiresAt":%[1]q}]}],
 "policies": [{"name":"orders","maxAge":5000000000,"minRate":300,"kafkaClientQuota":true,"producers":[{"id":"checkout"}]},
  {"name":"advised","maxAge":5000000000,"minRate":70,"kafkaClientQuota":true,"mode":"advise","producers":[{"id":"checkout"}]}],
 "targets": [
  {"target":{"kind":"kafka","cluster":"main","topic":"orders","group":"billing"},"policy":"orders","signal":"stop","rate":400,
   "capacity":400,"capacityKnown":true,"wait":2000000000,"targetWait":2500000000,"headAge":1000000000,"lag":10,"reason":"over budget",
   "avoidPartitions":[2,5]},
  {"target":{"kind":"nats","cluster":"js","topic":"EVENTS","group":""},"policy":"events","signal":"ok","unlimited":true,
   "capacity":510,"wait":0,"targetWait":1000000000,"headAge":0,"lag":12,"reason":"keeps up"},
  {"target":{"kind":"kafka","cluster":"main","topic":"ledger","group":"books"},"policy":"orders","signal":"stop","rate":60},
  {"target":{"kind":"nats","cluster":"js","topic":"ledger","group":"books"},"policy":"orders","signal":"stop","rate":60},
  {"target":{"kind":"kafka","cluster":"main","topic":"journal","group":"books"},"policy":"advised","signal":"stop","rate":70,"advisory":true}]}`, exp)
	})
	// History: the minute before the first /v1/lag answer, a point every
	// 5s, lag rising to 1,200; and one downsampled point before it.
	mux.HandleFunc("GET /v1/history", func(w http.ResponseWriter, r *http.Request) {
		historyAsked.Store(r.URL.Query().Get("since"))
		var pts []string
		first := start.Add(-60 * time.Second)
		pts = append(pts, fmt.Sprintf(`{"t":%d,"spanSeconds":59,"lag":5,"headAgeSeconds":0.1,"produceRate":900,"consumeRate":900,"allowed":null,"unlimited":true,"signal":"ok","status":"ok"}`,
			first.Add(-time.Minute).UnixMilli()))
		for i := range 12 {
			pts = append(pts, fmt.Sprintf(`{"t":%d,"lag":%d,"headAgeSeconds":%.1f,"produceRate":1000,"consumeRate":400,"allowed":250,"signal":"slow-down","status":"lagging"}`,
				first.Add(time.Duration(i)*5*time.Second).UnixMilli(), 100*i, 0.25*float64(i)))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"generatedAt":%q,"startedAt":%q,"dataSince":%q,"intervalSeconds":1,"recentSeconds":900,"resolutionSeconds":60,"retentionSeconds":7200,
 "targets":[{"kind":"kafka","cluster":"main","topic":"orders","group":"billing","points":[%s]}]}`,
			start.Format(time.RFC3339Nano), first.Add(-time.Minute).Format(time.RFC3339Nano), first.Add(-time.Minute).Format(time.RFC3339Nano), strings.Join(pts, ","))
	})
	// Events: the topic's signal went to stop and checkout was cut 10s
	// before the first /v1/lag answer.
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, _ *http.Request) {
		at := start.Add(-10 * time.Second).Format(time.RFC3339Nano)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"generatedAt":%q,"startedAt":%q,"dropped":0,"events":[
  {"seq":1,"at":%q,"kind":"signal","topic":{"kind":"kafka","cluster":"main","name":"orders"},"policy":"orders","rule":"hard-age",
   "signal":"stop","prevSignal":"slow-down","producers":["audit","checkout"],"rate":0,"prevRate":250,
   "inputs":{"lag":900,"headAgeSeconds":7.5,"capacity":400,"capacityKnown":true,"waitSeconds":9.5,"targetWaitSeconds":1,"budgetSeconds":5},"reason":"dead on arrival"},
  {"seq":2,"at":%[3]q,"kind":"cut","topic":{"kind":"kafka","cluster":"main","name":"orders"},"policy":"orders","rule":"hard-age",
   "signal":"stop","prevSignal":"slow-down","producers":["checkout"],"rate":300,"prevRate":350,
   "inputs":{"lag":900,"headAgeSeconds":7.5,"capacity":400,"capacityKnown":true,"waitSeconds":9.5,"targetWaitSeconds":1,"budgetSeconds":5},"reason":"dead on arrival"}]}`,
			start.Format(time.RFC3339Nano), start.Add(-2*time.Minute).Format(time.RFC3339Nano), at)
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

// historyAsked is the since of the fake API's newest /v1/history request.
var historyAsked atomic.Value

// pageState is what the tests read back from the page.
type pageState struct {
	Ready     string           `json:"ready"`
	Polls     int              `json:"polls"`
	Cards     int              `json:"cards"`
	Points    map[string]int   `json:"points"`
	Producers int              `json:"producers"`
	Text      string           `json:"text"`
	Injected  int              `json:"injected"`
	From      map[string]int64 `json:"from"`
	Markers   map[string]int   `json:"markers"`
	Timeline  []string         `json:"timeline"`
	Parts     []string         `json:"parts"`
	Leases    []string         `json:"leases"`
	History   string           `json:"history"`
}

const readPage = `(() => {
  const points = {}, from = {}, markers = {};
  for (const c of document.querySelectorAll('[data-chart]')) {
    const k = c.closest('[data-key]').dataset.key + ' ' + c.dataset.chart;
    points[k] = +c.dataset.points;
    from[k] = +(c.dataset.from || 0);
    markers[k] = +(c.dataset.markers || 0);
  }
  for (const d of document.querySelectorAll('details.parts')) d.open = true;
  const t = document.querySelector('#producers table');
  return {ready: document.body.dataset.ready, polls: +document.body.dataset.polls,
    cards: document.querySelectorAll('article.target').length, points, from, markers,
    producers: t ? +t.dataset.rows : 0, text: document.body.innerText,
    injected: document.querySelectorAll('img[src=x]').length,
    timeline: [...document.querySelectorAll('#timeline tr[data-kind]')].map((r) => r.dataset.kind + ' ' + r.dataset.rule),
    parts: [...document.querySelectorAll('[data-key^="kafka/"] tr[data-partition]')].map((r) => r.innerText.replace(/\s+/g, ' ').trim()),
    leases: [...document.querySelectorAll('#producers tr[data-producer]')].map((r) => r.innerText.replace(/\s+/g, ' ').trim()),
    history: document.body.dataset.history};
})()`

// waitPage polls the page until cond holds or d passes.
func waitPage(tb testing.TB, b *chromium.Browser, d time.Duration, cond func(pageState) bool) pageState {
	tb.Helper()
	return chromium.Wait(tb, b, d, readPage, cond)
}

func minPoints(st pageState) int {
	m := -1
	for _, n := range st.Points {
		if m < 0 || n < m {
			m = n
		}
	}
	return m
}

// TestBrowserFakeAPI runs the page in real headless Chromium against a
// canned daemon: charts fill, quotas and producers show, values from the
// API are text (never HTML), there is no script error and no CSP
// violation; and against a daemon without quotas (404) the page says so
// and still draws.
func TestBrowserFakeAPI(t *testing.T) {
	b := chromium.Start(t, 1400, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	full := fakeAPI(t, true)
	if err := b.Navigate(ctx, full.URL+"/?refresh=100ms&window=30s"); err != nil {
		t.Fatal(err)
	}
	st := waitPage(t, b, 20*time.Second, func(s pageState) bool { return s.Cards == 2 && minPoints(s) >= 5 && s.Producers == 6 })
	if len(st.Points) != 6 {
		t.Errorf("want 3 charts per target, got %v", st.Points)
	}
	// Under stop the SDK admits nothing whatever the rate: the card and
	// the lease say 0/s and name the Kafka client quota the policy sets
	// from the rate (before: "allowed 400/s", session 37).
	for _, want := range []string{"stop", "slow-down", "checkout", "audit", "advise", "allowed 0/s (client quota 400/s)", "unlimited",
		"0/s (client quota 300/s)", "policy orders", "5.00s" /* max age from the policy */, "2, 5" /* avoided partitions */, "max age"} {
		if !strings.Contains(st.Text, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// A stop lease's client quota is its topic's: none on the NATS stream
	// EVENTS; on ledger, a Kafka and a NATS target, it may be (the lease
	// is one of the two; status says the same); none in mode advise
	// (journal) nor for a producer the policy does not list (guest). The
	// rates chart's allowed line reads 0 under stop, not the decision's 400.
	// (A row: producer, topic, signal, allowed rate, burst, ...)
	for _, want := range []string{"checkout EVENTS stop 0/s 5 ", "checkout ledger stop 0/s (client quota, if set: 60/s) 6 ",
		"checkout journal stop 0/s 7 ", "checkout orders stop 0/s (client quota 300/s) 30 ", "guest orders stop 0/s 2 "} {
		if !slices.ContainsFunc(st.Leases, func(r string) bool { return strings.HasPrefix(r, want) }) {
			t.Errorf("no lease row %q in %q", want, st.Leases)
		}
	}
	if strings.Contains(st.Text, "allowed 400") {
		t.Errorf("the page shows the stop's 400/s as allowed:\n%s", st.Text)
	}
	if st.Injected != 0 || !strings.Contains(st.Text, "<img src=x onerror=alert(1)>") {
		t.Errorf("a group name was rendered as HTML (injected %d)", st.Injected)
	}
	// The history backfilled the Kafka target's charts from before the
	// page opened (the first live point is at start+1s). The fake's clock
	// moves a second per /v1/lag answer, ten a second at this refresh, so
	// the 30 s window forgets the history's oldest points within a second
	// or two: any point before the first live one is the history's (the
	// since asked is checked below).
	st = waitPage(t, b, 10*time.Second, func(s pageState) bool { return len(s.Parts) == 4 })
	kafka := "kafka/main/orders/billing"
	firstLive := time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC).UnixMilli()
	for _, ch := range []string{"head-age", "lag", "rates"} {
		k := kafka + " " + ch
		if st.History != "true" || st.From[k] == 0 || st.From[k] >= firstLive {
			t.Errorf("%s: first point at %d, want history from before %d (history %q)", k, st.From[k], firstLive, st.History)
		}
		// Both events are at one instant: one marker on each chart.
		if st.Markers[k] != 1 {
			t.Errorf("%s: %d markers, want 1", k, st.Markers[k])
		}
	}
	// The timeline lists both decisions, newest first, with their rule.
	if strings.Join(st.Timeline, "|") != "cut hard-age|signal hard-age" {
		t.Errorf("timeline rows %q", st.Timeline)
	}
	// A cut to a stop at checkout's share: the client quota it sets.
	for _, want := range []string{"350/s → 0/s (client quota 300/s)", "slow-down → stop", "budget 5.00s", "predicted wait 9.50s"} {
		if !strings.Contains(st.Text, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	// Partitions: the worst first (head age 7.5s, lag 900), the one
	// without a commit marked and last, the avoided ones flagged.
	wantParts := []string{"2 900 7.50s committed avoid", "0 3 400ms committed –", "5 0 0 committed avoid", "1 unknown unknown no commit –"}
	if strings.Join(st.Parts, "|") != strings.Join(wantParts, "|") {
		t.Errorf("partition rows\n%q\nwant\n%q", st.Parts, wantParts)
	}
	if !strings.Contains(st.Text, "Partitions: 4 · worst 2: lag 900, head age 7.50s · 1 without commit · 2 avoided") {
		t.Errorf("partition summary missing: %s", st.Text)
	}
	// The timeline's filter keeps the rows that mention a word.
	var filtered []string
	if err := b.Eval(ctx, `(() => { const f = document.getElementById('tl-filter'); f.value = 'cut checkout';
		f.dispatchEvent(new Event('input')); return [...document.querySelectorAll('#timeline tr[data-kind]')].map((r) => r.dataset.kind); })()`, &filtered); err != nil {
		t.Fatal(err)
	}
	if strings.Join(filtered, ",") != "cut" {
		t.Errorf("filtered timeline %q, want the cut only", filtered)
	}
	// A wider window is backfilled from the daemon at once.
	if got := historyAsked.Load(); got != "30s" {
		t.Errorf("first history request since=%v, want the 30s window", got)
	}
	var picked string
	if err := b.Eval(ctx, `(() => { const s = document.getElementById('window'); s.value = String(15 * 60000);
		s.dispatchEvent(new Event('change')); return location.search; })()`, &picked); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for historyAsked.Load() != "900s" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling the fake server for the page's request
	}
	if got := historyAsked.Load(); got != "900s" || !strings.Contains(picked, "window=900s") {
		t.Errorf("after choosing 15 min: history since=%v, address %q; want 900s", got, picked)
	}
	shot, err := b.Screenshot(ctx, 1400, 1000)
	if err != nil {
		t.Fatal(err)
	}
	chromium.WriteArtifact(t, "dashboard-fake.png", shot)

	none := fakeAPI(t, false)
	if err := b.Navigate(ctx, none.URL+"/?refresh=100ms"); err != nil {
		t.Fatal(err)
	}
	st = waitPage(t, b, 20*time.Second, func(s pageState) bool { return s.Cards == 2 && minPoints(s) >= 2 })
	if !strings.Contains(st.Text, "no quotas configured") || st.Producers != 0 {
		t.Errorf("without quotas the page should say so: %q", st.Text)
	}
	for _, p := range b.Problems() {
		// The 404 of v1/quotas is logged by the browser as a failed
		// resource; that is the degradation under test, not a fault.
		if p.Kind == "log/network" && strings.Contains(p.URL, "/v1/quotas") {
			continue
		}
		t.Errorf("page problem: %s", p)
	}
}

// TestBrowserWithoutToken: a daemon that needs a read token, opened
// without #token=: the page says what to do and does not claim there are
// no quotas (its Producers section kept the placeholder "no quotas
// configured" while every API call was refused: a new user's pass,
// session 29).
func TestBrowserWithoutToken(t *testing.T) {
	b := chromium.Start(t, 1400, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mux := http.NewServeMux()
	mux.Handle("/", Handler())
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"a read or admin bearer token is required"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if err := b.Navigate(ctx, srv.URL+"/?refresh=100ms"); err != nil {
		t.Fatal(err)
	}
	st := waitPage(t, b, 20*time.Second, func(s pageState) bool { return strings.Contains(s.Text, "needs a read or admin token") })
	if strings.Contains(st.Text, "no quotas configured") {
		t.Errorf("refused every call, the page says there are no quotas: %q", st.Text)
	}
}

// The fake API's JSON must stay valid JSON as it is edited.
func TestFakeAPIIsJSON(t *testing.T) {
	srv := fakeAPI(t, true)
	for _, p := range []string{"/v1/lag", "/v1/quotas"} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
