package producerclient

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/testpki"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestLeaseTLS: the lease client reaches a daemon over HTTPS verified by
// a CA made in the test (LoadTLS from PEM files), presents its client
// certificate to a daemon that requires one, and checks the daemon's
// certificate against ServerName when set; each missing piece fails the
// connection, counted as a lease error, and no lease applies.
func TestLeaseTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "lagbridge test CA")
	caFile := testpki.Write(t, dir, "ca.crt", ca.PEM)
	// The daemon's certificate names 127.0.0.1 and localhost.
	scert, skey := ca.Leaf(t, "daemon", true)
	serverCert, err := tls.X509KeyPair(scert, skey)
	if err != nil {
		t.Fatal(err)
	}
	ccert, ckey := ca.Leaf(t, "svc-a", false)
	clientCert, clientKey := testpki.Write(t, dir, "client.crt", ccert), testpki.Write(t, dir, "client.key", ckey)
	d := newFakeDaemonOn(t, func(h http.Handler) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
		s.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool, MinVersion: tls.VersionTLS12}
		s.StartTLS()
		return s
	})
	d.set(leaseSet("svc-a", 2, quotaproto.Lease{Topic: "orders", Rate: ptr(42.0), Signal: "ok", Version: 2, ExpiresAt: time.Now().Add(time.Hour)}))

	load := func(t *testing.T, ca, cert, key, serverName string) *tls.Config {
		cfg, err := LoadTLS(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ServerName = serverName
		return cfg
	}
	for _, tc := range []struct {
		name string
		tls  func(t *testing.T) *tls.Config
		ok   bool
	}{
		// CA and client certificate: leases flow.
		{"mTLS", func(t *testing.T) *tls.Config { return load(t, caFile, clientCert, clientKey, "") }, true},
		// A server name other than the URL's host that the certificate
		// carries.
		{"server name", func(t *testing.T) *tls.Config { return load(t, caFile, clientCert, clientKey, "localhost") }, true},
		// No client certificate: the daemon refuses the handshake.
		{"no client certificate", func(t *testing.T) *tls.Config { return load(t, caFile, "", "", "") }, false},
		// The system roots do not know the test CA.
		{"system roots", func(t *testing.T) *tls.Config { return load(t, "", clientCert, clientKey, "") }, false},
		// The server name is what the certificate is checked against.
		{"wrong server name", func(t *testing.T) *tls.Config { return load(t, caFile, clientCert, clientKey, "lagbridge.invalid") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
				Leases: LeaseConfig{URL: d.srv.URL, TLS: tc.tls(t), MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
			if tc.ok {
				eventually(t, 10*time.Second, "the lease over TLS", func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == 42 })
				return
			}
			eventually(t, 10*time.Second, "failed handshakes counted", func() bool { return p.Stats().LeaseErrors >= 2 })
			if q, _ := p.Quota("orders"); q.FromLease {
				t.Fatalf("a lease applied over a connection that should have failed: %+v", q)
			}
		})
	}
}

// TestLeaseTLSConfigErrors: the TLS settings that cannot work are refused
// at construction, all at once.
func TestLeaseTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		load func() error
	}{
		// A CA file that does not exist.
		{"missing CA file", func() error { _, err := LoadTLS(filepath.Join(dir, "none.pem"), "", ""); return err }},
		// A CA file without a certificate.
		{"CA file without PEM", func() error {
			f := filepath.Join(dir, "empty.pem")
			_ = os.WriteFile(f, []byte("not a certificate"), 0o600)
			_, err := LoadTLS(f, "", "")
			return err
		}},
		// A certificate without its key.
		{"cert without key", func() error { _, err := LoadTLS("", filepath.Join(dir, "c.crt"), ""); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.load(); !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("got %v, want ErrInvalidOption", err)
			}
		})
	}
	// TLS with a plain-http URL, an empty URL, and TLS with an HTTP
	// client: three problems, reported together.
	err := Config{Producer: "p", Leases: LeaseConfig{URL: "http://lagbridge:9464", URLs: []string{"https://b:9464", ""},
		TLS: &tls.Config{}, HTTPClient: http.DefaultClient}}.Validate()
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("got %v, want ErrInvalidOption", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 3 {
		t.Fatalf("%d problems, want 3 (plain http, empty URL, TLS and client): %v", n, err)
	}
}

// TestLeaseFailover: with three daemons, the producer talks to the first;
// killed, it moves to the second and stays there while it works (the
// third sees nothing), telling it the version it holds (?version=,
// Last-Event-ID); a second answering 503 moves it to the third. The
// sets carry the same versions everywhere, as replicas serve them; each
// move keeps the leases flowing.
func TestLeaseFailover(t *testing.T) {
	for _, tr := range []struct {
		name string
		t    LeaseTransport
	}{{"long-poll", LongPoll}, {"sse", SSE}} {
		t.Run(tr.name, func(t *testing.T) {
			ds := []*fakeDaemon{newFakeDaemon(t), newFakeDaemon(t), newFakeDaemon(t)}
			exp := time.Now().Add(time.Hour)
			publish := func(v uint64, rate float64) {
				for _, d := range ds {
					d.set(leaseSet("svc-a", v, quotaproto.Lease{Topic: "orders", Rate: ptr(rate), Signal: "ok", Version: v, ExpiresAt: exp}))
				}
			}
			publish(2, 10)
			p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
				Leases: LeaseConfig{URL: ds[0].srv.URL, URLs: []string{ds[1].srv.URL, ds[2].srv.URL, ds[0].srv.URL},
					Transport: tr.t, ReportInterval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
			rate := func(r float64) func() bool {
				return func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == r }
			}
			eventually(t, 10*time.Second, "the first daemon's lease", rate(10))
			if s := p.Stats(); s.LeaseURL != ds[0].srv.URL || ds[1].requests.Load()+ds[2].requests.Load() != 0 {
				t.Fatalf("on %s, %d and %d requests to the others", s.LeaseURL, ds[1].requests.Load(), ds[2].requests.Load())
			}

			ds[0].kill()
			publish(3, 20)
			eventually(t, 10*time.Second, "the second daemon's lease", rate(20))
			// It told the second the version it held (a replica that
			// has not read that set serves one above it).
			if h := ds[1].held.Load(); h != 2 && h != 3 {
				t.Errorf("the second daemon was told version %d is held, want 2 (or 3)", h)
			}
			// Sticky: more sets come from the second; the third is never asked.
			publish(4, 30)
			eventually(t, 10*time.Second, "the next set from the second daemon", rate(30))
			if s := p.Stats(); s.LeaseURL != ds[1].srv.URL || s.LeaseFailovers != 1 || ds[2].requests.Load() != 0 {
				t.Fatalf("on %s after %d failovers, %d requests to the third", s.LeaseURL, s.LeaseFailovers, ds[2].requests.Load())
			}

			// The second answers 503 from now on (its open requests are
			// cut): on to the third, which has a newer set.
			ds[1].inject(1<<30, http.StatusServiceUnavailable, "1")
			ds[2].set(leaseSet("svc-a", 5, quotaproto.Lease{Topic: "orders", Rate: ptr(40.0), Signal: "ok", Version: 5, ExpiresAt: exp}))
			ds[1].srv.CloseClientConnections()
			eventually(t, 10*time.Second, "the third daemon's lease", rate(40))
			if s := p.Stats(); s.LeaseURL != ds[2].srv.URL {
				t.Fatalf("on %s, want the third daemon", s.LeaseURL)
			}
		})
	}
}

// TestLeaseFailoverAllDown: with every daemon down the producer keeps
// its lease until it expires (fail-static) and tries them in turn with
// backoff, never faster than the jittered pause.
func TestLeaseFailoverAllDown(t *testing.T) {
	ds := []*fakeDaemon{newFakeDaemon(t), newFakeDaemon(t)}
	for _, d := range ds {
		d.set(leaseSet("svc-a", 2, quotaproto.Lease{Topic: "orders", Rate: ptr(10.0), Signal: "ok", Version: 2, ExpiresAt: time.Now().Add(time.Hour)}))
	}
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
		Leases: LeaseConfig{URLs: []string{ds[0].srv.URL, ds[1].srv.URL}, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}})
	eventually(t, 10*time.Second, "the lease", func() bool { q, _ := p.Quota("orders"); return q.FromLease })
	start := time.Now()
	for _, d := range ds {
		d.kill()
	}
	eventually(t, 10*time.Second, "both daemons tried", func() bool { return p.Stats().LeaseFailovers >= 2 })
	eventually(t, 10*time.Second, "several rounds", func() bool { return p.Stats().LeaseErrors >= 10 })
	// Two goroutines (reporter and watcher) each wait at least 5ms (half
	// of MinBackoff) between requests, and at least the growing backoff
	// after every round: 10 errors cannot come in less than ~25ms.
	if el := time.Since(start); el < 25*time.Millisecond {
		t.Fatalf("10 failed requests in %v: no backoff", el)
	}
	if q, _ := p.Quota("orders"); !q.FromLease || q.Rate != 10 {
		t.Fatalf("lease lost while every daemon is down: %+v", q)
	}
}

// TestTokenOverPlainHTTPWarns: a token sent over plain http to a host
// other than this machine is logged as a warning at construction.
func TestTokenOverPlainHTTPWarns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		url   string
		token string
		warn  bool
	}{
		// The token in clear text across the network.
		{"http, remote", "http://lagbridge.invalid:9464", "secret", true},
		// Loopback does not leave the machine.
		{"http, loopback", "http://127.0.0.1:1", "secret", false},
		{"http, localhost", "http://localhost:1", "secret", false},
		// https carries it encrypted.
		{"https", "https://lagbridge.invalid:9464", "secret", false},
		// No token, nothing to leak.
		{"no token", "http://lagbridge.invalid:9464", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf syncBuffer
			newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)),
				Leases: LeaseConfig{URL: tc.url, Token: tc.token}})
			if got := strings.Contains(buf.String(), "clear text"); got != tc.warn {
				t.Fatalf("warned %v, want %v: %s", got, tc.warn, buf.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLeaseWatchFailoverTellsApplied: the watch tells the next daemon the
// newest set the producer applied, also one the report brought. The first
// daemon answers the report with version 2 and its watches with version 1
// (a replica behind); killed, the producer moves to the second, which must
// hear version 2, not the 1 the watch last handed over (nor the 0 of a
// watcher that started before the owner applied the report's set, the
// TestLeaseFailover flake).
func TestLeaseWatchFailoverTellsApplied(t *testing.T) {
	ds := []*fakeDaemon{newFakeDaemon(t), newFakeDaemon(t)}
	exp := time.Now().Add(time.Hour)
	set := func(v uint64, rate float64) quotaproto.LeaseSet {
		return leaseSet("svc-a", v, quotaproto.Lease{Topic: "orders", Rate: ptr(rate), Signal: "ok", Version: v, ExpiresAt: exp})
	}
	for _, d := range ds {
		d.set(set(2, 10))
	}
	behind := set(1, 5)
	ds[0].watchSet = &behind
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
		Leases: LeaseConfig{URLs: []string{ds[0].srv.URL, ds[1].srv.URL}, Transport: LongPoll,
			ReportInterval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
	eventually(t, 10*time.Second, "version 2 applied and watches on the first daemon", func() bool {
		return p.c.leases.version.Load() == 2 && len(ds[0].watches()) > 1
	})
	if q, _ := p.Quota("orders"); q.Rate != 10 {
		t.Fatalf("rate %v: the older set from the watch was applied over version 2", q.Rate)
	}
	// Answered at once with an older set, the watch pauses as after an
	// error (MinBackoff 10 ms) instead of spinning.
	n := len(ds[0].watches())
	time.Sleep(300 * time.Millisecond)
	if k := len(ds[0].watches()) - n; k > 60 {
		t.Fatalf("%d watches in 300ms against a daemon behind: the watch spins", k)
	}
	ds[0].kill()
	eventually(t, 10*time.Second, "a watch on the second daemon", func() bool { return len(ds[1].watches()) > 0 })
	if got := ds[1].watches()[0]; got != 2 {
		t.Fatalf("the second daemon was first told version %d is held, want 2", got)
	}
}
