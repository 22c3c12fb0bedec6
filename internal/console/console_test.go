package console

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// server is a daemon's API (the real handlers) with one target, one cut
// of producer p, four shards, and every path behind a bearer token.
func server(tb testing.TB, token string) string {
	tb.Helper()
	now := time.Now()
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "billing"}
	store := daemon.NewStore(map[string]lag.Kind{"c": lag.KindKafka})
	store.Update(daemon.ClusterStatus{Name: "c", Kind: lag.KindKafka, Observed: true, LastSuccess: now},
		[]lag.State{{Target: tg, Status: lag.StatusLagging, Lag: 3400, HeadAge: 3400 * time.Millisecond, HeadAgeKnown: true, At: now, Uncommitted: 2}})
	h := daemon.NewHandler(store, prometheus.NewRegistry())
	h.Election = func([]string) (string, bool) { return "leader of c (epoch 7)", true }
	h.Shards = func() []daemon.ShardView {
		return []daemon.ShardView{{Cluster: "c", Shard: 0, Owner: "r1"}, {Cluster: "c", Shard: 1, Owner: "r0", Self: true},
			{Cluster: "c", Shard: 2, Owner: "r1"}, {Cluster: "c", Shard: 3}, {Cluster: "c", Shard: 4, Owner: "r1", StandIn: true, Assigned: "r2"}}
	}
	log := history.NewLog(history.Config{}, slog.New(slog.DiscardHandler), nil)
	topic := quota.TopicOf(tg)
	d := quota.TopicDecision{Target: tg, Policy: "orders", Rule: quota.RuleDrain, Signal: quota.SignalSlowDown, Rate: 0, Lag: 3400,
		HeadAge: 3400 * time.Millisecond, Capacity: 400, CapacityKnown: true, Wait: 8500 * time.Millisecond}
	log.Observe(now.Add(-time.Minute), map[quota.Topic]quota.TopicDecision{topic: d},
		[]quota.Lease{{Producer: "p", Topic: topic, Rate: 0, Signal: quota.SignalSlowDown}},
		func(string) time.Duration { return 2 * time.Second })
	(&history.API{Store: history.NewStore(history.Config{}, time.Second, now.Add(-time.Hour)), Log: log}).Register(h.Mux, nil, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer producer-token" {
			http.Error(w, `{"error":"a producer token may not read this"}`, http.StatusForbidden)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token && r.URL.Path != "/readyz" { // /readyz is open, as on the daemon
			http.Error(w, `{"error":"a token is required"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

func TestWhyAndStatus(t *testing.T) {
	base := server(t, "s3cret")
	ctx := context.Background()
	cases := []struct {
		name    string
		token   string
		run     func(c *Client, w *bytes.Buffer) error
		want    []string
		wantErr error
	}{
		// Without the token the daemon refuses, and the error says how to
		// give one.
		{"why without token", "", func(c *Client, w *bytes.Buffer) error { return Why(ctx, c, w, "p", 10*time.Minute) }, nil, ErrUnauthorized},
		{"status without token", "", func(c *Client, w *bytes.Buffer) error { return Status(ctx, c, w) }, nil, ErrUnauthorized},
		// why: the cut with its rule and inputs, and the signal change.
		{"why", "s3cret", func(c *Client, w *bytes.Buffer) error { return Why(ctx, c, w, "p", 10*time.Minute) },
			[]string{"decisions for producer p", "cut     kafka/c/orders  unlimited -> 0/s, slow-down  rule drain: lag 3400, head age 3.40s, capacity 400/s, predicted wait 8.50s, budget 2.00s",
				"signal  kafka/c/orders  signal ok -> slow-down"}, nil},
		// A producer nothing happened to.
		{"why other", "s3cret", func(c *Client, w *bytes.Buffer) error { return Why(ctx, c, w, "q", 10*time.Minute) },
			[]string{"(0)", "no decision cut, released or signalled q"}, nil},
		// status: the target with its status, lag and head age; no
		// quota engine on this API.
		{"status", "s3cret", func(c *Client, w *bytes.Buffer) error { return Status(ctx, c, w) },
			[]string{"readyz: ready: leader of c (epoch 7)", "c/orders/billing", "lagging (2 without commit)", "3400", "3.40s", "quotas: this daemon has no quota engine",
				"shards of c: (unassigned) 3; r0 (this replica) 1; r1 0, 2, 4 (for r2)"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := c.run(&Client{BaseURL: base, Token: c.token}, &out)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	// A token the daemon knows but that may not read (a producer's) is
	// told apart from a missing one: giving "a token" would not help.
	err := Status(ctx, &Client{BaseURL: base, Token: "producer-token"}, &bytes.Buffer{})
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "HTTP 403: the daemon refused this token: status and why need a read or admin token") {
		t.Errorf("status with a producer token: %v", err)
	}
	// A token the daemon does not know (401 with a token given) says
	// so: asking the user to give a token they gave does not help.
	err = Status(ctx, &Client{BaseURL: base, Token: "wrong"}, &bytes.Buffer{})
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "HTTP 401: the daemon does not know this token") ||
		strings.Contains(err.Error(), "give a token") {
		t.Errorf("status with an unknown token: %v", err)
	}
	// Without a token, the error still says how to give one.
	err = Status(ctx, &Client{BaseURL: base}, &bytes.Buffer{})
	if !strings.Contains(err.Error(), "give a token with --token or LAGBRIDGE_TOKEN") {
		t.Errorf("status without a token: %v", err)
	}
	// A missing producer is refused before any request.
	if err := Why(ctx, &Client{BaseURL: base}, &bytes.Buffer{}, "", 0); err == nil {
		t.Error("why without a producer: no error")
	}
}

func TestFormats(t *testing.T) {
	cases := []struct{ got, want string }{
		{rate(math.Inf(1)), "unlimited"},
		{rate(12.345), "12.3/s"},
		{rate(0), "0/s"},
		{secs(0.85), "850ms"},
		{secs(3.4), "3.40s"},
		{secs(125), "2m05s"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestNoDaemonHint: only an address where nothing answers gets the hint
// to point the command at another daemon; a daemon that hangs (a
// timeout) does not, since the address is right.
func TestNoDaemonHint(t *testing.T) {
	const hint = "is a lagbridge daemon running there?"
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name, url string
		hint      bool
	}{
		{"nothing listens", closed.URL, true},
		{"a daemon that hangs", hung.URL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{BaseURL: tc.url, HTTP: &http.Client{Timeout: 200 * time.Millisecond}}
			err := Status(context.Background(), c, &bytes.Buffer{})
			if err == nil {
				t.Fatal("no error")
			}
			if got := strings.Contains(err.Error(), hint); got != tc.hint {
				t.Errorf("hint %v, want %v: %v", got, tc.hint, err)
			}
		})
	}
}

// TestLineHardAge: a stop for the hard age says which hard age and why,
// since its inputs alone (head age 3.46s) look under it; other rules'
// lines stay as they were.
func TestLineHardAge(t *testing.T) {
	reason := "a new message would wait 11.81s + processing, past the hard age 10s (head age 3.46s): backlog over budget"
	e := history.Event{Kind: history.KindSignal, Rule: quota.RuleHardAge, Signal: "stop", Reason: reason,
		Inputs: history.Inputs{HeadAgeSeconds: 3.46, WaitSeconds: 11.81, BudgetSeconds: 2}}
	if got := Line(e); !strings.Contains(got, "("+reason+")") {
		t.Errorf("hard-age line %q lacks the reason", got)
	}
	e.Rule = quota.RuleDrain
	if got := Line(e); strings.Contains(got, reason) {
		t.Errorf("drain line %q carries the reason", got)
	}
}

// TestLineNotServed: why marks a follower's own decision (ha), which its
// producers never got, and no other.
func TestLineNotServed(t *testing.T) {
	e := history.Event{Kind: history.KindCut, Rule: quota.RuleDrain, Rate: 0, PrevRate: 100}
	if got := Line(e); strings.Contains(got, "not served") {
		t.Errorf("served line %q marked", got)
	}
	e.NotServed = true
	if got := Line(e); !strings.HasSuffix(got, " [not served: this replica followed]") {
		t.Errorf("line %q of a decision not served lacks the mark", got)
	}
}

// TestWhyUnknownProducer: an empty why says whether the daemon leases to
// the producer at all, so a misspelt id does not read as a producer
// nothing happened to (before: only "no decision ..."); a known producer
// and a daemon whose /v1/quotas cannot be read get no note.
func TestWhyUnknownProducer(t *testing.T) {
	h := daemon.NewHandler(daemon.NewStore(map[string]lag.Kind{"c": lag.KindKafka}), prometheus.NewRegistry())
	log := history.NewLog(history.Config{}, slog.New(slog.DiscardHandler), nil)
	(&history.API{Store: history.NewStore(history.Config{}, time.Second, time.Now().Add(-time.Hour)), Log: log}).Register(h.Mux, nil, nil)
	h.Mux.HandleFunc("/v1/quotas", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"targets":[],"producers":[{"producer":"checkout","version":1,"leases":[]},{"producer":"batch-export","version":1,"leases":[]}]}`))
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	noQuotas := server(t, "s3cret")
	cases := []struct {
		name, base, token, producer string
		note                        string // "" : no note
	}{
		{"a misspelt id", srv.URL, "", "chekout", "note: the daemon leases nothing to chekout now (producers it leases to: batch-export, checkout); check the id"},
		{"a producer the daemon leases to", srv.URL, "", "checkout", ""},
		{"no quota engine", noQuotas, "s3cret", "chekout", ""},
	}
	// One replica (no election), not observed yet: status says why it
	// is not ready (a ready one, plain "ready", gets no line).
	var st bytes.Buffer
	if err := Status(context.Background(), &Client{BaseURL: srv.URL}, &st); err != nil || !strings.Contains(st.String(), "readyz: not ready: no successful observation yet of c") {
		t.Errorf("status of one replica not observed yet: %v\n%s", err, st.String())
	}
	for _, c := range cases {
		var out bytes.Buffer
		if err := Why(context.Background(), &Client{BaseURL: c.base, Token: c.token}, &out, c.producer, time.Minute); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := out.String()
		if !strings.Contains(got, "no decision cut, released or signalled "+c.producer) {
			t.Errorf("%s: %q", c.name, got)
		}
		if c.note == "" && strings.Contains(got, "note: the daemon leases nothing") || c.note != "" && !strings.Contains(got, c.note) {
			t.Errorf("%s: got %q, want note %q", c.name, got, c.note)
		}
	}
}

// TestUntrustedCAHint: a daemon serving HTTPS with a certificate of a
// private CA (cert-manager's, one made with openssl) is refused by status
// and why, which have no CA flag; the error says how to give the CA (Go
// reads SSL_CERT_FILE). A daemon that is not there keeps its own hint.
func TestUntrustedCAHint(t *testing.T) {
	const hint = "SSL_CERT_FILE="
	private := httptest.NewTLSServer(http.NotFoundHandler())
	defer private.Close()
	c := &Client{BaseURL: private.URL, HTTP: &http.Client{Timeout: 5 * time.Second}}
	err := Status(context.Background(), c, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), hint) {
		t.Errorf("a private CA: %v, want the hint %q", err, hint)
	}
	// The server's own client trusts it: no hint, no error of that kind.
	c.HTTP = private.Client()
	if err := Status(context.Background(), c, &bytes.Buffer{}); err != nil && strings.Contains(err.Error(), hint) {
		t.Errorf("a trusted CA: %v", err)
	}
}

// quotaEngine is the quota server's engine for a test: the controller's
// decisions and the policies, as /v1/quotas shows them; no producer
// reports.
type quotaEngine struct {
	targets  []quota.Decision
	policies []quota.Policy
}

func (e quotaEngine) Report(quotaproto.Report) (quotaproto.LeaseSet, error) {
	return quotaproto.LeaseSet{}, errors.New("no reports here")
}

func (e quotaEngine) Quotas() ([]quota.Decision, []quota.Policy) { return e.targets, e.policies }

// TestStopShown: a stop's rate is the policy's minRate, carried by the
// leases, but the SDK admits nothing under stop (producerclient's ErrStop):
// only a Kafka client quota lets that rate through, to producers without
// the SDK. status and why say 0/s and name the client quota where the
// policy sets one (newuser7, session 37: before, "ALLOWED 20/s ... stop"
// and "unlimited -> 20/s, stop" while the SDK producer delivered nothing
// for 41 s). The decisions are the controller's, for two stopped
// consumers under minRate: 20; the API is the daemon's handlers.
func TestStopShown(t *testing.T) {
	now := time.Now()
	kt := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "billing"}
	nt := lag.Target{Kind: lag.KindNATS, Cluster: "n", Topic: "EVENTS", Group: "worker"}
	pols := []quota.Policy{
		{Name: "orders", MaxAge: 2 * time.Second, MinRate: 20, KafkaClientQuota: true, Producers: []quota.ProducerSpec{{ID: "p"}}},
		{Name: "events", MaxAge: 2 * time.Second, MinRate: 20, Producers: []quota.ProducerSpec{{ID: "q"}}},
	}
	ctl, err := quota.NewController(quota.ControllerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	store := daemon.NewStore(map[string]lag.Kind{"c": lag.KindKafka, "n": lag.KindNATS})
	var ds []quota.Decision
	for i, tg := range []lag.Target{kt, nt} {
		st := lag.State{Target: tg, Status: lag.StatusStopped, Lag: 5000, HeadAge: 16 * time.Second, HeadAgeKnown: true, At: now, RatesKnown: true}
		store.Update(daemon.ClusterStatus{Name: tg.Cluster, Kind: tg.Kind, Observed: true, LastSuccess: now}, []lag.State{st})
		d := ctl.Step(st, pols[i], now)
		if d.Signal != quota.SignalStop || d.Rate != 20 {
			t.Fatalf("%s: the controller decided %s at %v/s, want stop at minRate 20", tg, d.Signal, d.Rate)
		}
		ds = append(ds, d)
	}
	leases := []quota.Lease{
		{Producer: "p", Topic: quota.TopicOf(kt), Rate: 20, Signal: quota.SignalStop},
		{Producer: "q", Topic: quota.TopicOf(nt), Rate: 20, Signal: quota.SignalStop},
	}
	h := daemon.NewHandler(store, prometheus.NewRegistry())
	log := history.NewLog(history.Config{}, slog.New(slog.DiscardHandler), nil)
	log.Observe(now, map[quota.Topic]quota.TopicDecision{quota.TopicOf(kt): quota.TopicDecision(ds[0]), quota.TopicOf(nt): quota.TopicDecision(ds[1])},
		leases, func(string) time.Duration { return 2 * time.Second })
	(&history.API{Store: history.NewStore(history.Config{}, time.Second, now.Add(-time.Hour)), Log: log}).Register(h.Mux, nil, nil)
	hub := quotaserver.NewHub()
	defer hub.Close()
	for _, l := range leases {
		hub.Publish(publish.Set(l.Producer, []quota.Lease{l}, nil, now, time.Minute))
	}
	quotaserver.New(hub, quotaEngine{ds, pols}, quotaserver.Auth{}, prometheus.NewRegistry()).Register(h.Mux)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx, c := context.Background(), &Client{BaseURL: srv.URL}

	var st bytes.Buffer
	if err := Status(ctx, c, &st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^c/orders/billing +stopped .* 0/s \(client quota 20/s\) +stop +consumer-stopped$`,
		`(?m)^n/EVENTS/worker +stopped .* 0/s +stop +consumer-stopped$`,
		`(?m)^p +orders +0/s \(client quota 20/s\) +stop `,
		`(?m)^q +EVENTS +0/s +stop `,
	} {
		if !regexp.MustCompile(want).MatchString(st.String()) {
			t.Errorf("status lacks %s:\n%s", want, st.String())
		}
	}
	for producer, wants := range map[string][]string{
		"p": {"signal  kafka/c/orders  signal ok -> stop, allowed 0/s (client quota 20/s)  rule consumer-stopped",
			"cut     kafka/c/orders  unlimited -> 0/s (client quota 20/s), stop  rule consumer-stopped"},
		"q": {"signal  nats/n/EVENTS  signal ok -> stop, allowed 0/s  rule consumer-stopped",
			"cut     nats/n/EVENTS  unlimited -> 0/s, stop  rule consumer-stopped"},
	} {
		var out bytes.Buffer
		if err := Why(ctx, c, &out, producer, time.Minute); err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(out.String(), want) {
				t.Errorf("why %s lacks %q:\n%s", producer, want, out.String())
			}
		}
	}
	// Line, without the policies, says a client quota may be set.
	e := history.Event{Kind: history.KindCut, Topic: quota.TopicOf(kt), Policy: "orders", Signal: "stop", PrevSignal: "ok", Rate: 20, PrevRate: math.Inf(1)}
	if got := Line(e); !strings.Contains(got, "unlimited -> 0/s (client quota, if set: 20/s), stop") {
		t.Errorf("line without the policies: %q", got)
	}
}

// stopServer is the daemon's API (the real handlers) with targets[i]'s
// consumer stopped under pols[i] (the controller's decisions), each
// signalled and cut in the decision log, and producer's leases on them.
func stopServer(tb testing.TB, pols []quota.Policy, targets []lag.Target, producer string) string {
	tb.Helper()
	now := time.Now()
	ctl, err := quota.NewController(quota.ControllerConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	kinds := map[string]lag.Kind{}
	for _, tg := range targets {
		kinds[tg.Cluster] = tg.Kind
	}
	store := daemon.NewStore(kinds)
	var ds []quota.Decision
	states := map[string][]lag.State{}
	for i, tg := range targets {
		st := lag.State{Target: tg, Status: lag.StatusStopped, Lag: 5000, HeadAge: 16 * time.Second, HeadAgeKnown: true, At: now, RatesKnown: true}
		states[tg.Cluster] = append(states[tg.Cluster], st)
		ds = append(ds, ctl.Step(st, pols[i], now))
	}
	for cl, sts := range states {
		store.Update(daemon.ClusterStatus{Name: cl, Kind: kinds[cl], Observed: true, LastSuccess: now}, sts)
	}
	tds := map[quota.Topic]quota.TopicDecision{}
	var leases []quota.Lease
	for _, td := range quota.CombineTopics(ds) {
		tds[td.Topic()] = td
		leases = append(leases, quota.Lease{Producer: producer, Topic: td.Topic(), Rate: td.Rate, Signal: td.Signal, Advisory: td.Advisory})
	}
	h := daemon.NewHandler(store, prometheus.NewRegistry())
	log := history.NewLog(history.Config{}, slog.New(slog.DiscardHandler), nil)
	log.Observe(now, tds, leases, func(string) time.Duration { return 2 * time.Second })
	(&history.API{Store: history.NewStore(history.Config{}, time.Second, now.Add(-time.Hour)), Log: log}).Register(h.Mux, nil, nil)
	hub := quotaserver.NewHub()
	tb.Cleanup(hub.Close)
	hub.Publish(publish.Set(producer, leases, nil, now, time.Minute))
	quotaserver.New(hub, quotaEngine{ds, pols}, quotaserver.Auth{}, prometheus.NewRegistry()).Register(h.Mux)
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL
}

// TestStopShownCases: what TestStopShown leaves out. A client quota is
// named only where the daemon sets one (internal/publish's
// ClientQuotaPublisher.quoted: Kafka, kafkaClientQuota, not advise, the
// producer listed), and a lease's name on two clusters that disagree says
// it may be.
func TestStopShownCases(t *testing.T) {
	kt := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "billing"}
	nt := lag.Target{Kind: lag.KindNATS, Cluster: "n", Topic: "orders", Group: "worker"}
	at := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "audit", Group: "billing"}
	pol := func(name string, cq bool, mode quota.Mode, ids ...string) quota.Policy {
		p := quota.Policy{Name: name, MaxAge: 2 * time.Second, MinRate: 20, KafkaClientQuota: cq, Mode: mode}
		for _, id := range ids {
			p.Producers = append(p.Producers, quota.ProducerSpec{ID: id})
		}
		return p
	}
	cases := []struct {
		name     string
		pols     []quota.Policy
		targets  []lag.Target
		producer string
		want     []string // regexps over status, then why's output
	}{
		// kafkaClientQuota on a NATS stream sets nothing (config check
		// warns): 0/s, no client quota.
		{"nats", []quota.Policy{pol("orders", true, "", "p")}, []lag.Target{nt}, "p", []string{
			`(?m)^n/orders/worker .* 0/s +stop `, `(?m)^p +orders +0/s +stop `, `unlimited -> 0/s, stop`}},
		// Advise sets no client quota.
		{"advise", []quota.Policy{pol("orders", true, quota.ModeAdvise, "p")}, []lag.Target{kt}, "p", []string{
			`(?m)^c/orders/billing .* 0/s +stop `, `(?m)^p +orders +0/s +stop .* advise$`, `unlimited -> 0/s, stop`}},
		// A producer the policy does not list gets no client quota.
		{"unlisted", []quota.Policy{pol("orders", true, "", "p")}, []lag.Target{kt}, "u", []string{
			`(?m)^u +orders +0/s +stop `, `unlimited -> 0/s, stop`}},
		// Another topic's client quota is not this one's.
		{"other topic", []quota.Policy{pol("orders", true, "", "p"), pol("audit", false, "", "p")}, []lag.Target{kt, at}, "p", []string{
			`(?m)^p +orders +0/s \(client quota 20/s\) +stop `, `(?m)^p +audit +0/s +stop `}},
		// orders on Kafka c (client quota) and NATS n (none): the
		// lease is one of the two, which is not known.
		{"two clusters", []quota.Policy{pol("orders", true, "", "p"), pol("events", false, "", "p")}, []lag.Target{kt, nt}, "p", []string{
			`(?m)^c/orders/billing .* 0/s \(client quota 20/s\) +stop `, `(?m)^n/orders/worker .* 0/s +stop `,
			`(?m)^p +orders +0/s \(client quota, if set: 20/s\) +stop `,
			`kafka/c/orders  unlimited -> 0/s \(client quota 20/s\), stop`, `nats/n/orders  unlimited -> 0/s, stop`}},
		// Two groups of orders under two policies: the topic's decision
		// is the stricter group's (quota.CombineTopic), whose policy
		// sets no client quota, so the daemon sets none for either.
		{"two groups", []quota.Policy{pol("orders", true, "", "p"), {Name: "plain", MaxAge: 2 * time.Second, MinRate: 10, Producers: []quota.ProducerSpec{{ID: "p"}}}},
			[]lag.Target{kt, {Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "audit"}}, "p", []string{
				`(?m)^c/orders/audit .* 0/s +stop `, `(?m)^c/orders/billing .* 0/s +stop `, `(?m)^p +orders +0/s +stop `}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, c := context.Background(), &Client{BaseURL: stopServer(t, tc.pols, tc.targets, tc.producer)}
			var out bytes.Buffer
			if err := Status(ctx, c, &out); err != nil {
				t.Fatal(err)
			}
			if err := Why(ctx, c, &out, tc.producer, time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !regexp.MustCompile(want).MatchString(out.String()) {
					t.Errorf("lacks %s:\n%s", want, out.String())
				}
			}
		})
	}
	// Line without the policies: a NATS topic never has a client quota.
	e := history.Event{Kind: history.KindCut, Topic: quota.TopicOf(nt), Policy: "orders", Signal: "stop", PrevSignal: "ok", Rate: 20, PrevRate: math.Inf(1)}
	if got := Line(e); !strings.Contains(got, "unlimited -> 0/s, stop") {
		t.Errorf("a NATS line without the policies: %q", got)
	}
}
