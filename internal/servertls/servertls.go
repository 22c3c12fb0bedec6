// Package servertls serves the daemon's own HTTP over TLS: a server
// certificate and key, and optionally a CA for client certificates, read
// from PEM files and read again when the files change, so a renewed
// certificate (cert-manager, a Kubernetes Secret update) is served without
// a restart.
//
// It starts no goroutine: a handshake checks the files' modification times
// when the last check is a second old or more, and reloads what changed.
// A file that fails to load then (a half-written renewal) keeps the
// previous certificate, and the failure is logged once per change.
//
// Only the daemon's wiring (internal/config, internal/app) imports it.
package servertls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Client-certificate modes of Config.ClientAuth.
const (
	// ClientAuthRequire refuses, at the handshake, a client without a
	// certificate signed by ClientCAFile. The default with a ClientCAFile.
	ClientAuthRequire = "require"
	// ClientAuthVerifyIfGiven checks a certificate when the client
	// presents one and lets clients without one connect (Kubernetes
	// probes, for instance).
	ClientAuthVerifyIfGiven = "verifyIfGiven"
)

// Config is TLS on the daemon's HTTP server; the zero value is plain HTTP.
type Config struct {
	// CertFile and KeyFile are the PEM server certificate (with its
	// chain) and private key. Both or neither; neither: plain HTTP.
	CertFile string `mapstructure:"certFile"`
	KeyFile  string `mapstructure:"keyFile"`
	// ClientCAFile is a PEM bundle of the CAs that sign client
	// certificates; set, clients are asked for one (see ClientAuth).
	ClientCAFile string `mapstructure:"clientCAFile"`
	// ClientAuth is require (the default with a ClientCAFile) or
	// verifyIfGiven; see the ClientAuth* constants. Needs ClientCAFile.
	ClientAuth string `mapstructure:"clientAuth"`
	// MinVersion is "1.2" (the default) or "1.3"; older versions are
	// refused at the handshake.
	MinVersion string `mapstructure:"minVersion"`
}

// Enabled reports whether c asks for TLS.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// Validate reports every problem at once, each as `tls.<key>: <problem>`;
// it reads the files, so a certificate that does not load is reported by
// `lagbridge check` rather than at start.
func (c Config) Validate() error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tls.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		add("certFile, tls.keyFile", "set both or neither")
	}
	if !c.Enabled() && (c.ClientCAFile != "" || c.ClientAuth != "" || c.MinVersion != "") {
		add("certFile", "TLS settings are set but no certFile and keyFile: the daemon would serve plain HTTP")
	}
	if _, err := minVersion(c.MinVersion); err != nil {
		add("minVersion", "%v", err)
	}
	switch c.ClientAuth {
	case "", ClientAuthRequire, ClientAuthVerifyIfGiven:
		if c.ClientAuth != "" && c.ClientCAFile == "" {
			add("clientAuth", "%s needs tls.clientCAFile, the CAs that sign client certificates", c.ClientAuth)
		}
	default:
		add("clientAuth", "%q is not %s or %s", c.ClientAuth, ClientAuthRequire, ClientAuthVerifyIfGiven)
	}
	if c.CertFile != "" && c.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			add("certFile", "%v", err)
		}
	}
	if c.ClientCAFile != "" {
		if _, err := loadPool(c.ClientCAFile); err != nil {
			add("clientCAFile", "%v", err)
		}
	}
	return errors.Join(errs...)
}

func minVersion(v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%q is not 1.2 or 1.3 (older versions are not offered)", v)
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// Reloader holds the current certificate and client CAs and serves them
// to each handshake. Safe for concurrent use; it owns no goroutine, so
// there is nothing to close.
type Reloader struct {
	cfg     Config
	minV    uint16
	log     *slog.Logger
	now     func() time.Time
	every   time.Duration // least time between two checks of the files
	mu      sync.Mutex
	checked time.Time // last check of the files
	mods    [3]time.Time
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// New loads c's files (c must be Enabled and valid). log receives a
// warning when a changed file fails to load, and an info line when a
// reload succeeds.
func New(c Config, log *slog.Logger) (*Reloader, error) {
	minV, err := minVersion(c.MinVersion)
	if err != nil {
		return nil, err
	}
	r := &Reloader{cfg: c, minV: minV, log: log, now: time.Now, every: time.Second}
	r.mods = r.stat()
	if err := r.load(); err != nil {
		return nil, err
	}
	r.checked = r.now()
	return r, nil
}

// stat returns the modification times of the cert, key and CA files
// (zero for a file that is unset or cannot be read).
func (r *Reloader) stat() [3]time.Time {
	var out [3]time.Time
	for i, f := range []string{r.cfg.CertFile, r.cfg.KeyFile, r.cfg.ClientCAFile} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			out[i] = fi.ModTime()
		}
	}
	return out
}

// load reads the files; on error the current material stays.
func (r *Reloader) load() error {
	cert, err := tls.LoadX509KeyPair(r.cfg.CertFile, r.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	var pool *x509.CertPool
	if r.cfg.ClientCAFile != "" {
		if pool, err = loadPool(r.cfg.ClientCAFile); err != nil {
			return fmt.Errorf("tls: client CAs: %w", err)
		}
	}
	r.cert, r.pool = &cert, pool
	return nil
}

// current returns the material to serve, reloading it first when the
// files changed since the last check (at most one check per r.every).
func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= r.every {
		r.checked = now
		if mods := r.stat(); mods != r.mods {
			r.mods = mods
			if err := r.load(); err != nil {
				r.log.Warn("tls files changed but do not load; serving the previous certificate", "err", err)
			} else {
				r.log.Info("tls files reloaded", "certFile", r.cfg.CertFile)
			}
		}
	}
	return r.cert, r.pool
}

// TLSConfig returns the server's tls.Config: each handshake gets the
// current certificate and client CAs, TLS 1.2 or later (MinVersion),
// HTTP/2 and HTTP/1.1.
func (r *Reloader) TLSConfig() *tls.Config {
	base := &tls.Config{MinVersion: r.minV, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := r.current()
		c := &tls.Config{MinVersion: r.minV, NextProtos: base.NextProtos, Certificates: []tls.Certificate{*cert}}
		if pool != nil {
			c.ClientCAs = pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
			if r.cfg.ClientAuth == ClientAuthVerifyIfGiven {
				c.ClientAuth = tls.VerifyClientCertIfGiven
			}
		}
		return c, nil
	}
	return base
}
