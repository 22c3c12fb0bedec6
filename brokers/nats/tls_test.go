package nats

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/lagbridge/lagbridge/internal/testpki"
)

// testPKI is a throwaway CA with a server and a client certificate, all
// written as PEM files in a temp dir.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
	pool                                                 *x509.CertPool
}

func newTestPKI(tb testing.TB) testPKI {
	tb.Helper()
	dir := tb.TempDir()
	ca := testpki.NewCA(tb, "lagbridge test CA")
	p := testPKI{caFile: testpki.Write(tb, dir, "ca.pem", ca.PEM), pool: ca.Pool}
	cert, key := ca.Leaf(tb, "server", true)
	p.serverCert, p.serverKey = testpki.Write(tb, dir, "server.pem", cert), testpki.Write(tb, dir, "server-key.pem", key)
	cert, key = ca.Leaf(tb, "client", false)
	p.clientCert, p.clientKey = testpki.Write(tb, dir, "client.pem", cert), testpki.Write(tb, dir, "client-key.pem", key)
	return p
}

// TestTLS: mutual TLS against a server that requires and verifies client
// certificates; without the client certificate the connect fails.
func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	cert, err := tls.LoadX509KeyPair(pki.serverCert, pki.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(o *server.Options) {
		o.TLS, o.TLSVerify = true, true
		o.TLSTimeout = 2
		o.TLSConfig = &tls.Config{
			MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
			ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert,
		}
	})
	base := Config{Cluster: "tls", URLs: []string{s.ClientURL()}, RequestTimeout: 2 * time.Second}

	cfg := base
	cfg.TLS = TLS{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}
	o, err := New(cfg)
	if err != nil {
		t.Fatalf("New with mTLS: %v", err)
	}
	defer o.Close()
	if _, err := o.Observe(ctxT(t)); err != nil {
		t.Fatalf("Observe over TLS: %v", err)
	}

	cfg = base
	cfg.TLS = TLS{CAFile: pki.caFile}
	if o2, err := New(cfg); err == nil {
		o2.Close()
		t.Error("New without client certificate succeeded")
	}

	cfg = base
	cfg.TLS = TLS{CAFile: filepath.Join(t.TempDir(), "missing.pem")}
	if _, err := New(cfg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA file: %v, want os.ErrNotExist", err)
	}
}

// TestNKeyAuth: an nkey seed file authenticates against a server that
// lists the public key.
func TestNKeyAuth(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	o := newObserver(t, s, func(c *Config) { c.NKeyFile = seedFile })
	if _, err := o.Observe(ctxT(t)); err != nil {
		t.Fatalf("Observe with nkey: %v", err)
	}
}

// TestCloseDuringObserve: Close stops a running Observe, which returns
// ErrClosed, and then closes the connection.
func TestCloseDuringObserve(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, newStreamCfg("SLOW"))
	o := newObserver(t, s, nil)
	entered := make(chan struct{})
	o.testHookRefresh = func(string) error {
		close(entered)
		<-o.closeCtx.Done()
		return o.closeCtx.Err()
	}
	errc := make(chan error, 1)
	go func() {
		_, err := o.Observe(context.Background())
		errc <- err
	}()
	<-entered
	o.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("Observe: %v, want ErrClosed", err)
	}
	if !o.Conn().IsClosed() {
		t.Error("connection not closed")
	}
}
