package kafka

import (
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
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	valid := Config{Cluster: "c", Brokers: []string{"localhost:9092"}}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   []string // every problem, in order
	}{
		// The valid base config has no problem.
		{"valid", func(*Config) {}, nil},
		// A zero config misses both required fields.
		{"zero", func(c *Config) { *c = Config{} }, []string{
			"kafka.cluster: required",
			"kafka.brokers: at least one seed broker (host:port) is required",
		}},
		// Every broker address is checked, each with its index.
		{"bad brokers", func(c *Config) { c.Brokers = []string{"ok:1", "nohost", ":9092", "h:0", "h:x"} }, []string{
			`kafka.brokers[1]: "nohost": not host:port (an IPv6 host in brackets: [::1]:port): address nohost: missing port in address`,
			`kafka.brokers[2]: ":9092": no host`,
			`kafka.brokers[3]: "h:0": port "0" is not a number from 1 to 65535`,
			`kafka.brokers[4]: "h:x": port "x" is not a number from 1 to 65535`,
		}},
		// Patterns of both filters, include and exclude, are compiled.
		{"bad patterns", func(c *Config) {
			c.Groups = Filter{Include: []string{"ok", "("}}
			c.Topics = Filter{Exclude: []string{"[z-a]"}}
		}, []string{
			"kafka.groups.include[1]: error parsing regexp: missing closing ): `(`",
			"kafka.topics.exclude[0]: error parsing regexp: invalid character class range: `z-a`",
		}},
		// Negative durations and sizes.
		{"negative numbers", func(c *Config) {
			c.RequestTimeout = -time.Second
			c.HeadFetchPartitionBytes = -1
			c.HeadFetchMaxBytes = -2
		}, []string{
			"kafka.requestTimeout: must not be negative, got -1s",
			"kafka.headFetchPartitionBytes: must not be negative, got -1",
			"kafka.headFetchMaxBytes: must not be negative, got -2",
		}},
		// TLS fields without TLS enabled are a mistake, each reported.
		{"tls fields while disabled", func(c *Config) { c.TLS = TLS{CAFile: "ca.pem", InsecureSkipVerify: true} }, []string{
			"kafka.tls.caFile: set while kafka.tls.enabled is false",
			"kafka.tls.insecureSkipVerify: set while kafka.tls.enabled is false",
		}},
		// Files that do not exist, and a cert without its key.
		{"tls files", func(c *Config) {
			c.TLS = TLS{Enabled: true, CAFile: "/nonexistent/ca.pem", CertFile: "/nonexistent/c.pem"}
		}, []string{
			"kafka.tls.caFile: open /nonexistent/ca.pem: no such file or directory",
			"kafka.tls.keyFile: required with kafka.tls.certFile",
		}},
		// An unknown mechanism.
		{"sasl mechanism", func(c *Config) { c.SASL = SASL{Mechanism: "GSSAPI", Username: "u", Password: "p"} }, []string{
			`kafka.sasl.mechanism: "GSSAPI" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`,
		}},
		// A mechanism without credentials.
		{"sasl credentials", func(c *Config) { c.SASL = SASL{Mechanism: "scram-sha-512"} }, []string{
			"kafka.sasl.username: required with mechanism SCRAM-SHA-512",
			"kafka.sasl.password: required with mechanism SCRAM-SHA-512",
		}},
		// Credentials without a mechanism.
		{"sasl without mechanism", func(c *Config) { c.SASL = SASL{Username: "u"} }, []string{
			"kafka.sasl.username: set while kafka.sasl.mechanism is empty",
		}},
		// Everything at once: every problem is reported, not the first.
		{"all at once", func(c *Config) {
			*c = Config{Groups: Filter{Exclude: []string{"*"}}, SASL: SASL{Mechanism: "X"}}
		}, []string{
			"kafka.cluster: required",
			"kafka.brokers: at least one seed broker (host:port) is required",
			"kafka.groups.exclude[0]: error parsing regexp: missing argument to repetition operator: `*`",
			`kafka.sasl.mechanism: "X" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.mutate(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is no *ConfigError", err)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("problems:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			// New refuses the same config with the same error.
			if _, nerr := New(cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Fatalf("New: %v", nerr)
			}
		})
	}
}

// TestSASL runs a real SASL round trip against kfake for each mechanism,
// and checks that wrong credentials fail the cycle.
func TestSASL(t *testing.T) {
	t.Parallel()
	c := newCluster(t,
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "pass256"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "pass512"),
	)
	admin := newClient(t, c, kgo.SASL(SASL{Mechanism: "PLAIN", Username: "plain-user", Password: "plain-pass"}.mechanism()))
	adm := kadm.NewClient(admin)
	createTopic(t, adm, "secure", 1, nil)
	produceN(t, admin, "secure", 0, 3, 0)
	commit(t, adm, "auth", "secure", map[int32]int64{0: 1})

	cases := []struct {
		name string
		sasl SASL
		ok   bool
	}{
		// PLAIN with the right password.
		{"plain", SASL{Mechanism: "PLAIN", Username: "plain-user", Password: "plain-pass"}, true},
		// SCRAM-SHA-256, mechanism spelled in lower case.
		{"scram-sha-256", SASL{Mechanism: "scram-sha-256", Username: "scram256", Password: "pass256"}, true},
		// SCRAM-SHA-512.
		{"scram-sha-512", SASL{Mechanism: "SCRAM-SHA-512", Username: "scram512", Password: "pass512"}, true},
		// A wrong password observes nothing.
		{"wrong password", SASL{Mechanism: "SCRAM-SHA-256", Username: "scram256", Password: "nope"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newObserver(t, c, func(cfg *Config) { cfg.SASL = tc.sasl; cfg.RequestTimeout = time.Second })
			got, err := o.Observe(ctxT(t))
			if !tc.ok {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err %v, want ErrUnavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantPart(t, mustFind(t, got, "auth", "secure"), 0, 0, 3, 1, 2, 1)
		})
	}
}

// TestTLS observes a kfake cluster over TLS with a CA file, and with a
// client certificate when the broker requires one.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test-ca", true)
	srv, srvKey := newCert(t, ca, caKey, "127.0.0.1", false)
	cli, cliKey := newCert(t, ca, caKey, "client", false)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", cli.Raw)
	writeKey(t, filepath.Join(dir, "client-key.pem"), cliKey)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	serverCfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	c := newCluster(t, kfake.TLS(serverCfg))
	clientCert := tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey}
	admin := newClient(t, c, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{clientCert}}))
	adm := kadm.NewClient(admin)
	createTopic(t, adm, "tls", 1, nil)
	produceN(t, admin, "tls", 0, 2, 7)
	commit(t, adm, "tls-group", "tls", map[int32]int64{0: 0})

	cases := []struct {
		name string
		tls  TLS
		ok   bool
	}{
		// CA file and client certificate: mutual TLS.
		{"mtls", TLS{Enabled: true, CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem")}, true},
		// Without the client certificate the broker refuses us.
		{"no client cert", TLS{Enabled: true, CAFile: filepath.Join(dir, "ca.pem")}, false},
		// Without the CA the broker certificate is not trusted.
		{"untrusted", TLS{Enabled: true, CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newObserver(t, c, func(cfg *Config) { cfg.TLS = tc.tls; cfg.RequestTimeout = time.Second })
			got, err := o.Observe(ctxT(t))
			if !tc.ok {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err %v, want ErrUnavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantPart(t, mustFind(t, got, "tls-group", "tls"), 0, 0, 2, 0, 2, 7)
		})
	}
}

func newCert(tb testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert, key
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}

func writeKey(tb testing.TB, path string, key *ecdsa.PrivateKey) {
	tb.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	writePEM(tb, path, "EC PRIVATE KEY", der)
}

func TestSASLMechanism(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mechanism string
		want      string // the mechanism name kgo announces; "" for none
	}{
		{"", ""},                           // no SASL
		{"PLAIN", "PLAIN"},                 // upper case
		{"plain", "PLAIN"},                 // case-insensitive
		{"SCRAM-SHA-256", "SCRAM-SHA-256"}, // SCRAM 256
		{"Scram-Sha-512", "SCRAM-SHA-512"}, // SCRAM 512, mixed case
	}
	for _, tc := range cases {
		m := SASL{Mechanism: tc.mechanism, Username: "u", Password: "p"}.mechanism()
		switch {
		case tc.want == "" && m != nil:
			t.Errorf("%q: got mechanism %s", tc.mechanism, m.Name())
		case tc.want != "" && (m == nil || m.Name() != tc.want):
			t.Errorf("%q: got %v, want %s", tc.mechanism, m, tc.want)
		}
	}
	// The options built from a valid config carry the defaults.
	cfg := Config{Cluster: "c", Brokers: []string{"h:1"}, SASL: SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}}.withDefaults()
	if cfg.RequestTimeout != DefaultRequestTimeout || cfg.ClientID != DefaultClientID ||
		cfg.HeadFetchPartitionBytes != DefaultHeadFetchPartitionBytes || cfg.HeadFetchMaxBytes != DefaultHeadFetchMaxBytes {
		t.Fatalf("defaults: %+v", cfg)
	}
	opts, err := cfg.clientOpts()
	if err != nil || len(opts) != 6 { // seeds, client id, dial, retry, overhead, sasl
		t.Fatalf("opts %d, err %v", len(opts), err)
	}
}
