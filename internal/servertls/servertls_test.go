package servertls

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/testpki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is the reloader's clock in tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// serve serves "ok" over TLS with r on a loopback port until the test
// ends; it returns the address.
func serve(tb testing.TB, r *Reloader) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		TLSConfig: r.TLSConfig(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ServeTLS(ln, "", "") }()
	tb.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String()
}

// handshake connects with cfg and returns the server certificate's CN.
func handshake(addr string, cfg *tls.Config) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// With TLS 1.3 a refused client certificate shows at the first read.
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return "", err
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestReload: a changed certificate is served from the first handshake
// after the next check; a broken file keeps the previous one.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "ca")
	cert, key := ca.Leaf(t, "first", true)
	cfg := Config{CertFile: testpki.Write(t, dir, "tls.crt", cert), KeyFile: testpki.Write(t, dir, "tls.key", key)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	r.now, r.checked = clock.now, clock.now()
	addr := serve(t, r)
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
	expect := func(want string) {
		t.Helper()
		if cn, err := handshake(addr, client); err != nil || cn != want {
			t.Fatalf("served %q (%v), want %q", cn, err, want)
		}
	}
	expect("first")
	// Renew: new files, a newer modification time (as a Secret update).
	cert, key = ca.Leaf(t, "second", true)
	later := time.Now().Add(time.Minute)
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key} {
		testpki.Write(t, dir, name, b)
		if err := os.Chtimes(filepath.Join(dir, name), later, later); err != nil {
			t.Fatal(err)
		}
	}
	expect("first") // checked less than a second ago
	clock.add(time.Second)
	expect("second")
	// A half-written renewal does not take the daemon down.
	testpki.Write(t, dir, "tls.crt", []byte("garbage"))
	later = later.Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "tls.crt"), later, later); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Second)
	expect("second")
}

// TestClientCertificates: require refuses a client without a certificate
// and one signed by another CA; verifyIfGiven lets the former in.
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, other := testpki.NewCA(t, "ca"), testpki.NewCA(t, "other")
	cert, key := ca.Leaf(t, "server", true)
	good, goodKey := ca.Leaf(t, "producer", false)
	bad, badKey := other.Leaf(t, "stranger", false)
	pair := func(c, k []byte) []tls.Certificate {
		p, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{p}
	}
	base := Config{CertFile: testpki.Write(t, dir, "tls.crt", cert), KeyFile: testpki.Write(t, dir, "tls.key", key),
		ClientCAFile: testpki.Write(t, dir, "ca.crt", ca.PEM)}
	cases := []struct {
		name       string
		clientAuth string
		certs      []tls.Certificate
		maxVersion uint16
		ok         bool
	}{
		{"require, no certificate", "", nil, 0, false},
		{"require, certificate of the CA", ClientAuthRequire, pair(good, goodKey), 0, true},
		{"require, certificate of another CA", ClientAuthRequire, pair(bad, badKey), 0, false},
		{"require, over TLS 1.2", ClientAuthRequire, pair(good, goodKey), tls.VersionTLS12, true},
		{"verifyIfGiven, no certificate", ClientAuthVerifyIfGiven, nil, 0, true},
		{"verifyIfGiven, certificate of another CA", ClientAuthVerifyIfGiven, pair(bad, badKey), 0, false},
		{"TLS 1.1 refused", ClientAuthVerifyIfGiven, nil, tls.VersionTLS11, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			cfg.ClientAuth = c.clientAuth
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			r, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, r)
			client := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", MaxVersion: c.maxVersion}
			if c.certs != nil {
				// Sent whatever the server's acceptable CAs are (Go's
				// client would otherwise leave a foreign one out).
				client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.certs[0], nil }
			}
			_, err = handshake(addr, client)
			if (err == nil) != c.ok {
				t.Fatalf("handshake: %v, want ok %v", err, c.ok)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("refused by a timeout, not by the handshake: %v", err)
			}
		})
	}
}
