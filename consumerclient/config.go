package consumerclient

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// ErrInvalidConfig is wrapped by every error of [Config.Validate] and of
// the constructors.
var ErrInvalidConfig = errors.New("consumerclient: invalid config")

// Defaults and limits of [Config].
const (
	DefaultInterval = 250 * time.Millisecond
	DefaultTimeout  = time.Second
	// MinInterval and MaxInterval bound Config.Interval: the daemon
	// trusts a report for 3 s, so reports further apart than 1 s would
	// let a missed one or two drop the consumer back to commits.
	MinInterval = 10 * time.Millisecond
	MaxInterval = time.Second
	MaxTimeout  = 10 * time.Second
)

// Config configures a reporter. URL or URLs is required; the zero value
// of every other field is its default.
type Config struct {
	// URL is the daemon's base URL (for example https://lagbridge:9464).
	URL string
	// URLs are the base URLs of every replica of a daemon with ha, after
	// URL when both are set (duplicates dropped): each report goes to
	// each of them, at once (a replica that does not answer holds back
	// only its own reports). A replica uses only the reports it received,
	// and only the leading replica's decisions count, so a reporter that
	// reaches one replica (a Service in front of them) helps only while
	// that one leads.
	URLs []string
	// Token is sent as "Authorization: Bearer <Token>" when not empty.
	// With tokens configured on the daemon, it must list the group (or
	// "*"). A token is refused with an http:// URL whose host is not a
	// loopback address (it would cross the network in clear) unless
	// AllowPlaintextToken is set.
	Token string
	// AllowPlaintextToken lets Token go over http:// to another host (a
	// network you trust, a service mesh that encrypts). Default false.
	AllowPlaintextToken bool
	// TLS configures HTTPS to the daemon when HTTPClient is nil; nil
	// means the system roots. Ignored for http:// URLs.
	TLS *tls.Config
	// HTTPClient sends the reports; nil means a client of the reporter's
	// own (TLS as above). Each request carries the Timeout deadline.
	HTTPClient *http.Client
	// Cluster is the daemon's name of the cluster (the cluster name of
	// its config). Empty: the reports apply to the group on every cluster
	// of its kind that the daemon watches.
	Cluster string
	// Group is the Kafka consumer group or NATS consumer name reported
	// on. Empty means the Kafka client's kgo.ConsumerGroup, or the
	// consumer name in each NATS message's metadata.
	Group string
	// KeepUntilFinished (Kafka only; default false) keeps a polled record
	// in hand until the consumer calls KafkaReporter.Done for it or
	// Finished for it or a later record of its partition, instead of until
	// the next poll: for a consumer that hands records to other goroutines
	// and polls on. The position is then a count of the records finished,
	// in any order (see KafkaReporter.Done). Every record polled must be
	// finished, or its partition given to KafkaReporter.Revoked: one left
	// unfinished stays the partition's head, its age growing, and counts
	// as lag. The reports then say each partition is finished at its own
	// pace (ownPace, protocol 1.6): the daemon reads a partition's moves
	// as its own consumer's drain, not one poll loop's, and lists a slow
	// partition by its own wait while the whole target keeps up (workers
	// sharing a capacity that is short drain each partition by its share). The NATS reporter keeps each message
	// until Done anyway and ignores it.
	KeepUntilFinished bool
	// Member names this instance in its reports (1-128 characters of
	// A-Z a-z 0-9 . _ : -). The instances of one NATS consumer need
	// distinct names; empty means a random one per reporter.
	Member string
	// Interval is how often a report is sent, from MinInterval to
	// MaxInterval; zero means DefaultInterval (250ms).
	Interval time.Duration
	// Timeout bounds each request, at most MaxTimeout; zero means
	// DefaultTimeout (1s). A report that takes longer is dropped.
	Timeout time.Duration
	// Registerer receives lagbridge_client_consumer_reports_total
	// {kind,url,outcome} (url: each replica's); nil means no metrics. Two reporters of the same
	// kind need two registries (or prometheus.WrapRegistererWith).
	Registerer prometheus.Registerer
	// Logger receives a warning when the daemon refuses a report (a
	// configuration problem: token, group) and when sending starts or
	// stops failing; nil means slog.Default().
	Logger *slog.Logger
}

// Validate returns every problem of c at once (errors.Join), each wrapping
// [ErrInvalidConfig]; nil when c is valid.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	urls := c.urls()
	if len(urls) == 0 {
		add("url %q must be an http:// or https:// URL with a host", c.URL)
	}
	for _, raw := range urls {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("url %q must be an http:// or https:// URL with a host", raw)
		} else if c.Token != "" && u.Scheme == "http" && !c.AllowPlaintextToken && !loopback(u.Hostname()) {
			add("a token over http:// to %s would cross the network in clear: use https://, or set Config.AllowPlaintextToken", u.Host)
		}
	}
	if c.Group != "" && !quotaproto.ValidGroup(c.Group) {
		add("group %q must be 1-255 characters without control characters", c.Group)
	}
	if c.Member != "" && !quotaproto.ValidProducer(c.Member) {
		add("member %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", c.Member)
	}
	if c.Interval != 0 && (c.Interval < MinInterval || c.Interval > MaxInterval) {
		add("interval %v must be from %v to %v", c.Interval, MinInterval, MaxInterval)
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeout {
		add("timeout %v must be from 0 (default %v) to %v", c.Timeout, DefaultTimeout, MaxTimeout)
	}
	if len(c.Cluster) > 128 {
		add("cluster must be at most 128 characters")
	}
	return errors.Join(errs...)
}

// urls returns URL and URLs without trailing slashes, the empty ones and
// duplicates ("http://x" and "http://x/" are one) dropped.
func (c *Config) urls() []string {
	var out []string
	for _, u := range append([]string{c.URL}, c.URLs...) {
		if u = strings.TrimRight(u, "/"); u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// loopback reports whether host names this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Member == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.Member = "r-" + hex.EncodeToString(b[:])
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
