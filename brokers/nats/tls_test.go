package nats

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
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
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lagbridge test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		must(err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		must(err)
		return writePEM(name+".pem", "CERTIFICATE", der), writePEM(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	p := testPKI{caFile: writePEM("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
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
	o, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New with mTLS: %v", err)
	}
	defer o.Close()
	if _, err := o.Observe(ctxT(t)); err != nil {
		t.Fatalf("Observe over TLS: %v", err)
	}

	cfg = base
	cfg.TLS = TLS{CAFile: pki.caFile}
	if o2, err := New(context.Background(), cfg); err == nil {
		o2.Close()
		t.Error("New without client certificate succeeded")
	}

	cfg = base
	cfg.TLS = TLS{CAFile: filepath.Join(t.TempDir(), "missing.pem")}
	if _, err := New(context.Background(), cfg); !errors.Is(err, os.ErrNotExist) {
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
