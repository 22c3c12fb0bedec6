package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Defaults applied by [New] to zero-valued [Config] fields.
const (
	DefaultRequestTimeout          = 5 * time.Second
	DefaultClientID                = "lagbridge"
	DefaultHeadFetchPartitionBytes = 64 << 10 // 64 KiB
	DefaultHeadFetchMaxBytes       = 8 << 20  // 8 MiB
)

// SASL mechanisms accepted in [SASL.Mechanism].
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// internalTopics are never watched, whatever the filters say. Topics that
// the broker flags as internal in metadata are skipped as well.
var internalTopics = map[string]bool{
	"__consumer_offsets":  true,
	"__transaction_state": true,
	"__share_group_state": true,
}

// ErrInvalidConfig is wrapped by every problem [Config.Validate] reports.
var ErrInvalidConfig = errors.New("invalid kafka config")

// ConfigError is one problem found by [Config.Validate]. Its message has the
// one shape `kafka.<field>: <problem>`; it matches [ErrInvalidConfig] with
// errors.Is.
type ConfigError struct {
	// Field is the path of the offending field below "kafka.", in the
	// config file's spelling (for example "tls.caFile" or "brokers[1]").
	Field string
	// Problem says what is wrong, in lower case.
	Problem string
}

func (e *ConfigError) Error() string { return "kafka." + e.Field + ": " + e.Problem }

// Unwrap returns [ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Filter selects names with Go regular expressions. Each pattern is anchored
// for you (a pattern "orders" matches only "orders"; use "orders.*" for a
// prefix). A name is selected when it matches some Include pattern (or
// Include is empty) and no Exclude pattern. The zero value selects every
// name.
type Filter struct {
	Include []string
	Exclude []string
}

// TLS configures transport encryption. The zero value is plaintext.
type TLS struct {
	// Enabled turns TLS on. The other fields are only valid with it.
	Enabled bool
	// CAFile is a PEM bundle of CAs to trust instead of the system pool.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key for
	// mutual TLS; both or neither.
	CertFile string
	KeyFile  string
	// ServerName overrides the name verified in the broker certificate;
	// empty means the host of the address dialled.
	ServerName string
	// InsecureSkipVerify disables certificate verification. For tests only.
	InsecureSkipVerify bool
}

// SASL configures authentication. The zero value (empty Mechanism) is none.
type SASL struct {
	// Mechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512"
	// (case-insensitive).
	Mechanism string
	Username  string
	Password  string
}

// Config configures an [Observer]. Fields whose zero value is documented as
// a default get it in [New]; Cluster and Brokers are required.
type Config struct {
	// Cluster names the cluster in lag.Target.Cluster and in metrics
	// labels. Required.
	Cluster string
	// Brokers are the seed brokers, host:port. Required, at least one.
	Brokers []string
	// Groups selects the consumer groups to watch; the zero value watches
	// all groups.
	Groups Filter
	// Topics selects the topics to watch; the zero value watches all.
	// Internal topics (__consumer_offsets, __transaction_state, ...) are
	// never watched.
	Topics Filter
	// TLS, zero value plaintext.
	TLS TLS
	// SASL, zero value no authentication.
	SASL SASL
	// RequestTimeout bounds each phase of a cycle (one round of requests,
	// retries included); one attempt of a request, and one dial, gets a
	// third of it. Zero means DefaultRequestTimeout (5s). A cycle has five
	// sequential phases, so it takes at most 5x RequestTimeout whatever the
	// brokers do; a broker that does not answer ListGroups is not asked
	// again in that cycle, so one hung broker costs about one
	// RequestTimeout.
	RequestTimeout time.Duration
	// ClientID is the Kafka client.id the observer presents. Empty means
	// DefaultClientID ("lagbridge").
	ClientID string
	// HeadFetchPartitionBytes is the per-partition byte limit of the head
	// fetches (Kafka's max.partition.fetch.bytes for these requests). It
	// must hold the record batch that contains a head for that head's
	// timestamp to be decoded exactly; a larger batch falls back to the
	// batch header's timestamp where the broker returns a truncated batch,
	// and to an unknown head where it returns nothing. Zero means
	// DefaultHeadFetchPartitionBytes (64 KiB).
	HeadFetchPartitionBytes int32
	// HeadFetchMaxBytes is the byte limit of one head fetch response
	// (Kafka's fetch.max.bytes); partitions that do not fit wait for a
	// later cycle. Zero means DefaultHeadFetchMaxBytes (8 MiB).
	HeadFetchMaxBytes int32
}

func (c Config) withDefaults() Config {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.HeadFetchPartitionBytes == 0 {
		c.HeadFetchPartitionBytes = DefaultHeadFetchPartitionBytes
	}
	if c.HeadFetchMaxBytes == 0 {
		c.HeadFetchMaxBytes = DefaultHeadFetchMaxBytes
	}
	return c
}

// Validate reports every problem in c at once, joined with errors.Join; each
// is a *[ConfigError] wrapping [ErrInvalidConfig]. It returns nil for a valid
// config. It reads the TLS files named in c to check them; it does not
// contact any broker.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}

	if strings.TrimSpace(c.Cluster) == "" {
		add("cluster", "required")
	}
	if len(c.Brokers) == 0 {
		add("brokers", "at least one seed broker (host:port) is required")
	}
	for i, b := range c.Brokers {
		if err := checkHostPort(b); err != nil {
			add(fmt.Sprintf("brokers[%d]", i), "%q: %v", b, err)
		}
	}
	for _, f := range []struct {
		name string
		pats []string
	}{
		{"groups.include", c.Groups.Include},
		{"groups.exclude", c.Groups.Exclude},
		{"topics.include", c.Topics.Include},
		{"topics.exclude", c.Topics.Exclude},
	} {
		for i, p := range f.pats {
			if _, err := compileAnchored(p); err != nil {
				add(fmt.Sprintf("%s[%d]", f.name, i), "%v", err)
			}
		}
	}
	if c.RequestTimeout < 0 {
		add("requestTimeout", "must not be negative, got %v", c.RequestTimeout)
	}
	if c.HeadFetchPartitionBytes < 0 {
		add("headFetchPartitionBytes", "must not be negative, got %d", c.HeadFetchPartitionBytes)
	}
	if c.HeadFetchMaxBytes < 0 {
		add("headFetchMaxBytes", "must not be negative, got %d", c.HeadFetchMaxBytes)
	}

	t := c.TLS
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"tls.caFile", t.CAFile != ""},
			{"tls.certFile", t.CertFile != ""},
			{"tls.keyFile", t.KeyFile != ""},
			{"tls.serverName", t.ServerName != ""},
			{"tls.insecureSkipVerify", t.InsecureSkipVerify},
		} {
			if f.set {
				add(f.name, "set while kafka.tls.enabled is false")
			}
		}
	} else {
		if _, tlsErrs := t.build(); len(tlsErrs) > 0 {
			errs = append(errs, tlsErrs...)
		}
	}

	s := c.SASL
	switch strings.ToUpper(s.Mechanism) {
	case "":
		if s.Username != "" {
			add("sasl.username", "set while kafka.sasl.mechanism is empty")
		}
		if s.Password != "" {
			add("sasl.password", "set while kafka.sasl.mechanism is empty")
		}
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		if s.Username == "" {
			add("sasl.username", "required with mechanism %s", strings.ToUpper(s.Mechanism))
		}
		if s.Password == "" {
			add("sasl.password", "required with mechanism %s", strings.ToUpper(s.Mechanism))
		}
	default:
		add("sasl.mechanism", "%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", s.Mechanism)
	}
	return errors.Join(errs...)
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("missing host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}

func compileAnchored(p string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + p + `)$`)
}

// build loads the TLS material. It returns every problem found.
func (t TLS) build() (*tls.Config, []error) {
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
			errs = append(errs, &ConfigError{Field: "tls.caFile", Problem: err.Error()})
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, &ConfigError{Field: "tls.caFile", Problem: fmt.Sprintf("%s: no PEM certificate found", t.CAFile)})
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		errs = append(errs, &ConfigError{Field: "tls.keyFile", Problem: "required with kafka.tls.certFile"})
	case t.CertFile == "" && t.KeyFile != "":
		errs = append(errs, &ConfigError{Field: "tls.certFile", Problem: "required with kafka.tls.keyFile"})
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			errs = append(errs, &ConfigError{Field: "tls.certFile", Problem: err.Error()})
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errs
}

// mechanism returns the SASL mechanism, nil for none. s must be valid.
func (s SASL) mechanism() sasl.Mechanism {
	switch strings.ToUpper(s.Mechanism) {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case MechanismSCRAMSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// attemptTimeout bounds one attempt of a request, a third of a phase, so
// that a request sent to a hung broker can be retried on another one (kgo
// rotates brokers for requests that any broker can answer) within the
// phase.
func (c Config) attemptTimeout() time.Duration { return c.RequestTimeout / 3 }

// clientOpts turns a valid, defaulted config into kgo options.
func (c Config) clientOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.DialTimeout(c.attemptTimeout()),
		kgo.RetryTimeout(c.RequestTimeout),
		kgo.RequestTimeoutOverhead(c.attemptTimeout()),
	}
	if c.TLS.Enabled {
		cfg, errs := c.TLS.build()
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if m := c.SASL.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// filter is a compiled Filter.
type filter struct{ include, exclude []*regexp.Regexp }

func (f Filter) compile() (filter, error) {
	var out filter
	for _, p := range f.Include {
		re, err := compileAnchored(p)
		if err != nil {
			return filter{}, err
		}
		out.include = append(out.include, re)
	}
	for _, p := range f.Exclude {
		re, err := compileAnchored(p)
		if err != nil {
			return filter{}, err
		}
		out.exclude = append(out.exclude, re)
	}
	return out, nil
}

func (f filter) match(name string) bool {
	if len(f.include) > 0 {
		ok := false
		for _, re := range f.include {
			if re.MatchString(name) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, re := range f.exclude {
		if re.MatchString(name) {
			return false
		}
	}
	return true
}

// ClientOpts returns the kgo options that connect to the cluster as the
// observer does (seeds, client id, timeouts, TLS, SASL), for other clients
// of the same cluster. The config must be valid.
func (c Config) ClientOpts() ([]kgo.Opt, error) { return c.withDefaults().clientOpts() }
