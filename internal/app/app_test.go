package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/internal/servertls"
	"github.com/lagbridge/lagbridge/internal/testpki"
	"github.com/lagbridge/lagbridge/internal/testutil"
)

// testConfig watches an in-process Kafka (kfake) and listens on listen.
func testConfig(tb testing.TB, listen string) config.Config {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return config.Config{Listen: listen, Interval: 250 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Log: config.Log{Level: "info", Format: "text"}, Kafka: []kafka.Config{{Cluster: "k", Brokers: c.ListenAddrs()}}}
}

// start runs the app until the test ends and returns its address.
func start(tb testing.TB, cfg config.Config) string {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("run: %v", err)
		}
	})
	return a.Addr()
}

// TestRefusesOpenProtocol: without tokens the daemon does not start on an
// address beyond loopback unless the configuration says mode: none; the
// bound address is what counts.
func TestRefusesOpenProtocol(t *testing.T) {
	cfg := testConfig(t, "0.0.0.0:0")
	_, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, quotaserver.ErrOpen) || !strings.Contains(err.Error(), "quota.auth.mode: none") {
		t.Fatalf("New on 0.0.0.0 without tokens: %v, want a refusal that says what to do", err)
	}
	cfg.Listen = "127.0.0.1:0"
	start(t, cfg) // loopback: fine
}

// TestServesTLS: the daemon over TLS with client certificates required:
// Go's client and curl reach it with the test CA and a client
// certificate; a client without one is refused at the handshake; plain
// HTTP to the TLS port gets a clear 400.
func TestServesTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "lagbridge-test-ca")
	cert, key := ca.Leaf(t, "lagbridge", true)
	ccert, ckey := ca.Leaf(t, "producer", false)
	cfg := testConfig(t, "127.0.0.1:0")
	cfg.TLS = servertls.Config{CertFile: testpki.Write(t, dir, "tls.crt", cert), KeyFile: testpki.Write(t, dir, "tls.key", key),
		ClientCAFile: testpki.Write(t, dir, "ca.crt", ca.PEM)}
	certFile, keyFile, caFile := testpki.Write(t, dir, "client.crt", ccert), testpki.Write(t, dir, "client.key", ckey), cfg.TLS.ClientCAFile
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	addr := start(t, cfg)
	url := "https://" + addr + "/healthz"

	pair, err := tls.X509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	get := func(c *tls.Config) (int, error) {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(&tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}}); err != nil || code != 200 {
		t.Fatalf("Go client with a client certificate: %d %v", code, err)
	}
	if _, err := get(&tls.Config{RootCAs: ca.Pool}); err == nil {
		t.Fatal("a client without a certificate was served")
	}

	// Plain HTTP to the TLS listener: Go's server answers 400 and says why.
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("plain HTTP: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP: %d %s", resp.StatusCode, body)
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("LAGBRIDGE_REQUIRE_TOOLS") == "1" {
			t.Fatal("curl not found")
		}
		t.Skip("curl not found: Go's client was checked")
	}
	out, err := exec.Command(curl, "-sS", "--max-time", "5", "--cacert", caFile, "--cert", certFile, "--key", keyFile, url).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("curl with the test CA and a client certificate: %v %s", err, out)
	}
	if out, err := exec.Command(curl, "-sS", "--max-time", "5", "--cacert", caFile, url).CombinedOutput(); err == nil {
		t.Fatalf("curl without a client certificate was served: %s", out)
	}
}

// TestRefusesOldNATSForHA: with ha on a NATS older than 2.11 the daemon
// does not start, and says which version it needs and found; without ha
// the same server is fine.
func TestRefusesOldNATSForHA(t *testing.T) {
	cfg := config.Config{Listen: "127.0.0.1:0", Interval: 250 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Log: config.Log{Level: "info", Format: "text"}, NATS: []nats.Config{{Cluster: "n", URLs: []string{embedded.NATSAnnouncing(t, "2.10.29")}}},
		HA: config.HA{Enabled: true, ID: "r0", SessionTimeout: 6 * time.Second}}
	_, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, leader.ErrServerTooOld) || !strings.Contains(err.Error(), "2.10.29") || !strings.Contains(err.Error(), "2.11.0 or later") {
		t.Fatalf("New with ha on nats-server 2.10.29: %v, want a refusal naming both versions", err)
	}
	t.Log(err)
	cfg.HA = config.HA{}
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New without ha: %v", err)
	}
	a.Close()
}

// TestListenInUse: an address another process holds (a second daemon, the
// demo on its default 127.0.0.1:9464) is refused with what to do; before,
// the error was Go's "bind: address already in use" alone.
func TestListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = New(context.Background(), testConfig(t, ln.Addr().String()), slog.New(slog.DiscardHandler))
	want := ln.Addr().String() + " is in use (another lagbridge, or its demo?): give a free address with --listen (or listen in the file)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("err %v, want one saying %q and matching EADDRINUSE", err, want)
	}
}

// TestReloadsTokenFiles: a token file rewritten while the daemon runs (as
// a Kubernetes Secret update swaps it) is in force within a few periods:
// the new admin token reads /v1/quotas, the old one gets 401; before, the
// files were read at start only (the old token 200, the new one 401 until
// a restart). What a bad file does is config's TestReloadAuth (an error,
// the loaded tokens) and reloadTokens' (nothing applied on an error).
func TestReloadsTokenFiles(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dir := t.TempDir()
	swap := func(name, body string) string { // write and rename, as the kubelet swaps a Secret
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	prod, admins := swap("producer-token", "producer-token-0123456\n"), swap("admin-tokens", "admin-token-old-012345\n")
	file := filepath.Join(dir, "lagbridge.yaml")
	body := fmt.Sprintf("listen: 127.0.0.1:0\ninterval: 250ms\nkafka: [{cluster: k, brokers: [%q]}]\nquota:\n  auth:\n    tokens: [{tokenFile: %q, producers: [svc-a]}]\n    adminTokensFile: %q\n",
		c.ListenAddrs()[0], prod, admins)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfigFile(t, file)
	url := "http://" + start(t, cfg) + "/v1/quotas"
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("admin-token-old-012345"); code != 200 {
		t.Fatalf("old admin token before the swap: %d", code)
	}
	swap("admin-tokens", "admin-token-new-012345\n")
	deadline := time.Now().Add(30 * time.Second)
	for get("admin-token-new-012345") != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the new admin token is still refused 30 s after its file changed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := get("admin-token-old-012345"); code != 401 {
		t.Errorf("old admin token after the reload: %d, want 401", code)
	}
}

// TestTokenReloadWaitsForTwoReads: a token file caught mid-write (the new
// admin token cut after 20 of its 26 characters: still a valid token) is
// not put in force; the change is applied when two reads in a row agree,
// and logged once.
func TestTokenReloadWaitsForTwoReads(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return testpki.Write(t, dir, name, []byte(body)) }
	prod, admins := write("producer-token", "producer-token-0123456\n"), write("admin-tokens", "admin-token-old-0123456789\n")
	file := write("lagbridge.yaml", fmt.Sprintf("listen: 127.0.0.1:0\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\nquota:\n  auth:\n    tokens: [{tokenFile: %q, producers: [svc-a]}]\n    adminTokensFile: %q\n", prod, admins))
	cfg := loadConfigFile(t, file)
	var logs strings.Builder
	qs := quotaserver.New(quotaserver.NewHub(), nil, cfg.Quota.Auth, prometheus.NewRegistry())
	r := tokenReload{cur: cfg, qs: qs, log: slog.New(slog.NewTextHandler(&logs, nil))}
	guarded := qs.ClosedReadGuard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	code := func(token string) int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		guarded.ServeHTTP(w, req)
		return w.Code
	}
	const old, partial, full = "admin-token-old-0123456789", "admin-token-new-0123", "admin-token-new-0123456789"
	steps := []struct {
		name, body       string
		old, partial, nw int
	}{
		{"caught mid-write", partial, 200, 401, 401},
		{"written, read once", full + "\n", 200, 401, 401},
		{"read twice", full + "\n", 401, 401, 200},
		{"unchanged", full + "\n", 401, 401, 200},
		{"unchanged, read again", full + "\n", 401, 401, 200},
	}
	for _, s := range steps {
		write("admin-tokens", s.body)
		r.step()
		if got := [3]int{code(old), code(partial), code(full)}; got != [3]int{s.old, s.partial, s.nw} {
			t.Errorf("%s: old, cut, new token: %v, want %v", s.name, got, [3]int{s.old, s.partial, s.nw})
		}
	}
	if n := strings.Count(logs.String(), "quota token files reloaded"); n != 1 {
		t.Errorf("logged the reload %d times, want once:\n%s", n, logs.String())
	}
	for _, tok := range []string{old, partial, "producer-token-0123456"} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("a token in the log:\n%s", logs.String())
		}
	}
}

// TestTLSHandshakeLog: a TCP connection to the TLS port closed without a
// handshake (a load balancer's TCP check, a tcpSocket probe) is logged at
// DEBUG, not WARN as every such check was (session 30); a handshake that
// fails for a reason (TLS 1.1 offered) stays at WARN.
func TestTLSHandshakeLog(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "lagbridge-test-ca")
	cert, key := ca.Leaf(t, "lagbridge", true)
	cfg := testConfig(t, "127.0.0.1:0")
	cfg.TLS = servertls.Config{CertFile: testpki.Write(t, dir, "tls.crt", cert), KeyFile: testpki.Write(t, dir, "tls.key", key)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	c, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// A reset before a word (SetLinger(0): an RST, as some load balancers
	// end their checks): DEBUG too.
	rst, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := rst.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	rst.Close()
	// Half a ClientHello, then the end: a client that gave up mid-way
	// ("unexpected EOF") stays at WARN.
	half, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := half.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x10, 1, 2}); err != nil {
		t.Fatal(err)
	}
	half.Close()
	old, err := tls.Dial("tcp", a.Addr(), &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err == nil {
		old.Close()
		t.Fatal("TLS 1.1 served")
	}
	line := func(sub string) string {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "TLS handshake error") && strings.Contains(l, sub) {
				return l
			}
		}
		return ""
	}
	deadline := time.Now().Add(10 * time.Second)
	for (line(": EOF") == "" || line("unsupported versions") == "" || line("reset by peer") == "" || line("unexpected EOF") == "") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the log the server writes
	}
	if l := line(": EOF"); !strings.Contains(l, "level=DEBUG") {
		t.Errorf("the closed TCP connection's line: %q, want it at DEBUG", l)
	}
	if l := line("reset by peer"); !strings.Contains(l, "level=DEBUG") {
		t.Errorf("the reset TCP connection's line: %q, want it at DEBUG", l)
	}
	if l := line("unexpected EOF"); !strings.Contains(l, "level=WARN") {
		t.Errorf("the half ClientHello's line: %q, want it at WARN", l)
	}
	if l := line("unsupported versions"); !strings.Contains(l, "level=WARN") {
		t.Errorf("TLS 1.1's line: %q, want it at WARN", l)
	}
}

// loadConfigFile loads the daemon's config as `--config file` does.
func loadConfigFile(t *testing.T, file string) config.Config {
	t.Helper()
	fs := config.Flags("test")
	if err := fs.Parse([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fs)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestNearCapacityOff: with nearCapacity: false no loop has a
// NearCapacity hook, so none asks whether a target is near its capacity
// (daemon.Loop asks a set hook only; TestLoopNearCapacity); by default
// every loop has one.
func TestNearCapacityOff(t *testing.T) {
	off := false
	for _, c := range []struct {
		name string
		near *bool
		want bool
	}{{"unset", nil, true}, {"false", &off, false}} {
		cfg := testConfig(t, "127.0.0.1:0")
		cfg.NearCapacity = c.near
		a, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		if len(a.loops) == 0 {
			t.Fatalf("%s: no loop", c.name)
		}
		for _, l := range a.loops {
			if got := l.NearCapacity != nil; got != c.want {
				t.Errorf("%s: loop %s has a NearCapacity hook: %v, want %v", c.name, l.Name, got, c.want)
			}
		}
	}
}
