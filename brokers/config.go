// Package brokers holds the configuration pieces the two observers share
// (brokers/kafka and brokers/nats): name filters, client TLS, server versions, and the error
// every configuration problem is reported as. Each observer's package
// re-exports them under its own name (kafka.Filter is brokers.Filter), so
// callers need not import this package.
//
// It imports only the standard library, starts no goroutines, and does I/O
// only where a doc says so (TLS.Load reads the files it names). Every value
// is safe to copy and for concurrent use once built.
package brokers

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
)

// ErrInvalidConfig is wrapped by every [*ConfigError]: match it with
// errors.Is to tell a configuration problem from a failure to connect.
// kafka.ErrInvalidConfig and nats.ErrInvalidConfig are this value.
var ErrInvalidConfig = errors.New("invalid broker config")

// ConfigError is one configuration problem. Its message has the one shape
// `<section>.<field>: <problem>`; it matches [ErrInvalidConfig] with
// errors.Is, and its cause (Err) too when it has one.
type ConfigError struct {
	// Section is where the config sits: "kafka" or "nats" as the
	// observers' Validate reports it, "kafka[1]" once [InSection] placed
	// it in a list of clusters.
	Section string
	// Field is the path of the offending field below Section, in the
	// config file's spelling ("tls.caFile", "brokers[1]").
	Field string
	// Problem says what is wrong, in lower case.
	Problem string
	// Err is the cause, when there is one (a TLS file that cannot be
	// read matches fs.ErrNotExist), or nil.
	Err error
}

func (e *ConfigError) Error() string { return e.Section + "." + e.Field + ": " + e.Problem }

// Is reports whether target is [ErrInvalidConfig], which every
// ConfigError matches.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns the cause, or [ErrInvalidConfig] when there is none. (One
// error, not a list: code that flattens joined errors keeps a ConfigError
// whole.)
func (e *ConfigError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrInvalidConfig
}

// InSection returns err with the Section of every [*ConfigError] it holds
// (directly or joined with errors.Join) set to section, for a caller that
// knows where the config sits ("kafka[1]"). Other errors are kept as they
// are; InSection(nil, s) is nil.
func InSection(err error, section string) error {
	var ce *ConfigError
	if errors.As(err, &ce) && err == error(ce) {
		moved := *ce
		moved.Section = section
		return &moved
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = InSection(e, section)
		}
		return errors.Join(out...)
	}
	return err
}

// CheckHostPort returns why hp is not a broker address host:port (a host,
// and a port from 1 to 65535; an IPv6 host in brackets), or nil.
func CheckHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("not host:port (an IPv6 host in brackets: [::1]:port): %w", err)
	}
	if host == "" {
		return errors.New("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// Filter selects names with Go regular expressions (RE2 syntax). Each
// pattern is anchored for you: "orders" matches only "orders"; use
// "orders.*" for a prefix. A name is selected when it matches some Include
// pattern (or Include is empty) and no Exclude pattern. The zero value
// selects every name.
type Filter struct {
	Include []string `mapstructure:"include"`
	Exclude []string `mapstructure:"exclude"`
}

// Check returns one [*ConfigError] per pattern of f that does not compile,
// as field.include[i] or field.exclude[i] of section; nil when all do.
func (f Filter) Check(section, field string) []error {
	var errs []error
	for _, list := range []struct {
		name string
		pats []string
	}{{"include", f.Include}, {"exclude", f.Exclude}} {
		for i, p := range list.pats {
			if _, err := compileAnchored(p); err != nil {
				errs = append(errs, &ConfigError{Section: section, Field: fmt.Sprintf("%s.%s[%d]", field, list.name, i), Problem: err.Error()})
			}
		}
	}
	return errs
}

// Compile compiles f's patterns; the error is the first pattern's that does
// not compile (see [Filter.Check] for all of them).
func (f Filter) Compile() (Matcher, error) {
	var m Matcher
	for _, p := range f.Include {
		re, err := compileAnchored(p)
		if err != nil {
			return Matcher{}, err
		}
		m.include = append(m.include, re)
	}
	for _, p := range f.Exclude {
		re, err := compileAnchored(p)
		if err != nil {
			return Matcher{}, err
		}
		m.exclude = append(m.exclude, re)
	}
	return m, nil
}

// compileAnchored compiles p anchored as ^(?:p)$. p must compile on its
// own first: "a)|(b" does not, but anchored it would, as "^(?:a)|(b)$",
// which selects every name starting with a or ending with b; and the
// error then quotes p as written.
func compileAnchored(p string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(p); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + p + `)$`)
}

// Matcher is a compiled [Filter]. The zero value selects every name. Safe
// for concurrent use.
type Matcher struct{ include, exclude []*regexp.Regexp }

// Match reports whether the filter selects name.
func (m Matcher) Match(name string) bool {
	if len(m.include) > 0 {
		ok := false
		for _, re := range m.include {
			if re.MatchString(name) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, re := range m.exclude {
		if re.MatchString(name) {
			return false
		}
	}
	return true
}

// TLS configures the client side of TLS to the brokers. When TLS is on is
// each observer's rule (Kafka: Enabled; NATS: Enabled, any field set, or a
// tls:// URL); the zero value is plaintext.
type TLS struct {
	// Enabled turns TLS on.
	Enabled bool `mapstructure:"enabled"`
	// CAFile is a PEM bundle of CAs to trust instead of the system pool.
	CAFile string `mapstructure:"caFile"`
	// CertFile and KeyFile are a PEM client certificate and its key for
	// mutual TLS; both or neither.
	CertFile string `mapstructure:"certFile"`
	KeyFile  string `mapstructure:"keyFile"`
	// ServerName overrides the name verified in the broker certificate;
	// empty means the host of the address dialled.
	ServerName string `mapstructure:"serverName"`
	// InsecureSkipVerify disables certificate verification. For tests
	// only.
	InsecureSkipVerify bool `mapstructure:"insecureSkipVerify"`
}

// Set reports whether any field of t is set.
func (t TLS) Set() bool { return t != TLS{} }

// CheckPair returns the problem of a certificate without its key or a key
// without its certificate, as a [*ConfigError] of section; nil otherwise.
// It does no I/O.
func (t TLS) CheckPair(section string) error {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return &ConfigError{Section: section, Field: "tls.keyFile", Problem: "required with " + section + ".tls.certFile"}
	case t.CertFile == "" && t.KeyFile != "":
		return &ConfigError{Section: section, Field: "tls.certFile", Problem: "required with " + section + ".tls.keyFile"}
	}
	return nil
}

// Load reads the files t names and returns the client configuration: TLS
// 1.2 at least, the CA pool (the system's when CAFile is empty), the client
// certificate, ServerName and InsecureSkipVerify. It returns every problem
// found, each a [*ConfigError] of section (a file that cannot be read keeps
// its cause: errors.Is(err, fs.ErrNotExist)).
func (t TLS) Load(section string) (*tls.Config, []error) {
	var errs []error
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // explicit opt-in, documented as test-only
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		switch {
		case err != nil:
			errs = append(errs, &ConfigError{Section: section, Field: "tls.caFile", Problem: err.Error(), Err: err})
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, &ConfigError{Section: section, Field: "tls.caFile", Problem: fmt.Sprintf("%s: no PEM certificate found", t.CAFile)})
			}
			cfg.RootCAs = pool
		}
	}
	if err := t.CheckPair(section); err != nil {
		errs = append(errs, err)
	} else if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			errs = append(errs, &ConfigError{Section: section, Field: "tls.certFile", Problem: err.Error(), Err: err})
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errs
}
