package kafka

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/lagbridge/lagbridge/brokers"
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

// ErrInvalidConfig is wrapped by every problem [Config.Validate] reports:
// brokers.ErrInvalidConfig, shared with the NATS observer.
var ErrInvalidConfig = brokers.ErrInvalidConfig

// ConfigError is one problem found by [Config.Validate] (brokers.ConfigError,
// Section "kafka"). Its message has the one shape `kafka.<field>: <problem>`;
// it matches [ErrInvalidConfig] with errors.Is.
type ConfigError = brokers.ConfigError

// Filter selects names with Go regular expressions, anchored for you (a
// pattern "orders" matches only "orders"; use "orders.*" for a prefix): see
// brokers.Filter. The zero value selects every name.
type Filter = brokers.Filter

// TLS configures transport encryption (brokers.TLS). The zero value is
// plaintext; Enabled turns TLS on, and the other fields are only valid with
// it.
type TLS = brokers.TLS

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
	// Now is the observer's clock: the time of each reading
	// (lag.Sample.At) and the age of cached heads. Nil means time.Now; it
	// must be safe for concurrent use. Not a setting of the config file.
	Now func() time.Time `mapstructure:"-"`
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
	if c.Now == nil {
		c.Now = time.Now
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
		errs = append(errs, &ConfigError{Section: "kafka", Field: field, Problem: fmt.Sprintf(format, args...)})
	}

	if strings.TrimSpace(c.Cluster) == "" {
		add("cluster", "required")
	}
	if len(c.Brokers) == 0 {
		add("brokers", "at least one seed broker (host:port) is required")
	}
	for i, b := range c.Brokers {
		if err := brokers.CheckHostPort(b); err != nil {
			add(fmt.Sprintf("brokers[%d]", i), "%q: %v", b, err)
		}
	}
	errs = append(errs, c.Groups.Check("kafka", "groups")...)
	errs = append(errs, c.Topics.Check("kafka", "topics")...)
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
		if _, tlsErrs := t.Load("kafka"); len(tlsErrs) > 0 {
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
		cfg, errs := c.TLS.Load("kafka")
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

// ClientOpts returns the kgo options that connect to the cluster as the
// observer does (seeds, client id, timeouts, TLS, SASL), for other clients
// of the same cluster. The config must be valid.
func (c Config) ClientOpts() ([]kgo.Opt, error) { return c.withDefaults().clientOpts() }
