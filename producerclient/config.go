package producerclient

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/ttl"
)

// Criticality is a message's importance, carried in the
// lagbridge-criticality header; see the ttl package. The zero value is
// Critical, which the SDK writes by leaving the header out.
type Criticality = ttl.Criticality

// The four criticalities, most important first.
const (
	CriticalPlus  = ttl.CriticalPlus
	Critical      = ttl.Critical
	SheddablePlus = ttl.SheddablePlus
	Sheddable     = ttl.Sheddable
)

// Mode is what a produce call does when the topic is at its quota (no
// token in the bucket, or MaxInFlight outstanding).
type Mode uint8

const (
	// Block (the zero value) waits for capacity until the context's
	// deadline (or Config.MaxBlock when the context has none), then
	// fails with ErrSlowDown. For cooperative internal services: it turns
	// a slower consumer into a slower producer.
	Block Mode = iota
	// Drop fails at once with ErrSlowDown and the message handed back.
	// For the public edge: shed instead of queueing.
	Drop
)

// String returns "block" or "drop".
func (m Mode) String() string {
	if m == Drop {
		return "drop"
	}
	if m == Block {
		return "block"
	}
	return "Mode(?)"
}

// SafeMode is what a producer does on a topic with no valid lease: before
// the first lease arrives, and after a lease expires without a refresh
// (the daemon is unreachable).
type SafeMode uint8

const (
	// SafeOpen (the zero value): no limit from lagbridge (the in-flight cap
	// still applies), so lagbridge is never a new single point of failure.
	SafeOpen SafeMode = iota
	// SafeClosed: refuse messages with ErrQuotaUnavailable.
	SafeClosed
	// SafeRate: a fixed rate (SafeQuota.Rate, SafeQuota.Burst).
	SafeRate
)

// SafeQuota is the quota without a valid lease. The zero value is open.
type SafeQuota struct {
	Mode SafeMode
	// Rate in messages per second, for SafeRate; at least 0.
	Rate float64
	// Burst for SafeRate; zero means max(1, Rate/10) as in the protocol.
	Burst int
}

// LeaseTransport selects how HTTP lease updates are pushed.
type LeaseTransport uint8

const (
	// LongPoll (the zero value) uses GET /v1/leases/watch: plain requests,
	// friendly to every proxy.
	LongPoll LeaseTransport = iota
	// SSE uses GET /v1/leases/stream (server-sent events): one connection,
	// pushes with no request per change.
	SSE
)

// LeaseConfig says where leases come from. The zero value means none: every
// topic runs on the Safe quota (open by default), which makes the SDK a
// plain rate/in-flight/retry wrapper.
type LeaseConfig struct {
	// URL is the daemon's base URL (for example http://lagbridge:9464).
	// With it the producer reports its topics and demand (POST
	// /v1/leases) and watches for pushes.
	URL string
	// URLs are the base URLs of several daemons serving the same leases
	// (replicas), after URL when both are set; duplicates are dropped.
	// The SDK talks to one at a time and stays with it while it works.
	// On a connection error, a timeout, a 5xx answer (503 included) or
	// an answer that is not a lease set, it moves to the next, after a
	// short jittered pause (up to MinBackoff) while the round of daemons
	// is not through, and after the backoff (or the daemon's
	// Retry-After) once every daemon failed in turn. Sets keep their
	// versions across daemons: a replica's set with the version already
	// applied is the same set, an older one is ignored as from one
	// daemon. A 4xx answer (a wrong token, say) moves nowhere.
	URLs []string
	// HTTPClient for the daemon; nil means a client with a 10s dial and
	// header timeout (no overall timeout: long-polls are long). Each
	// request carries its own deadline.
	HTTPClient *http.Client
	// TLS configures HTTPS to the daemon for the SDK's own client: the CA
	// pool that verifies the daemon (RootCAs; nil means the system's),
	// a client certificate for daemons that require one (Certificates or
	// GetClientCertificate), and the name the daemon's certificate must
	// carry (ServerName; empty means the URL's host). LoadTLS builds one
	// from PEM files. nil means Go's defaults for https URLs. It is
	// cloned when the producer is built. Set it or HTTPClient, not both
	// (give your own client's transport the TLS config instead); every
	// URL must then be https. InsecureSkipVerify is honoured and logged
	// as a warning: anyone on the path can then hand out leases.
	TLS *tls.Config
	// Token is sent as "Authorization: Bearer <Token>" when not empty.
	// Over plain http to a host other than loopback it travels in clear
	// text: the producer logs a warning at construction.
	Token string
	// Transport is LongPoll (zero) or SSE.
	Transport LeaseTransport
	// WatchWait is the long-poll's ?timeout=; zero means 30s, at most 60s.
	WatchWait time.Duration

	// KVBucket, when set, reads leases from this NATS KV bucket instead
	// of HTTP (key quotaproto.KVKey(producer, topic), value a JSON
	// quotaproto.Lease); see quotaproto.DefaultKVBucket. URL may still be
	// set to report demand; pushes then come from the bucket only.
	KVBucket string
	// KV is the JetStream context for KVBucket; nil means the NATS
	// producer's own (a Kafka producer must set it to use KVBucket).
	KV jetstream.JetStream

	// Safe is the quota without a valid lease; the zero value is open.
	Safe SafeQuota
	// DefaultLeaseTTL is how long a lease without expiresAt is trusted;
	// zero means 30s, or MaxLeaseTTL when that is shorter. At most
	// MaxLeaseTTL.
	DefaultLeaseTTL time.Duration
	// MaxLeaseTTL is the longest the SDK trusts a lease after it arrives:
	// a later expiresAt is clamped to arrival plus MaxLeaseTTL, so no
	// answer, however far in the future it says it holds, keeps a
	// producer on it longer without a refresh (the daemon refreshes its
	// leases every interval; its lifetime is 10 intervals by default).
	// Zero means DefaultMaxLeaseTTL (10m).
	MaxLeaseTTL time.Duration
	// RequestTimeout bounds each request to the daemon, answer body
	// included: a report, and a long-poll beyond its WatchWait. A daemon
	// that trickles its answer fails the request after it. A report is
	// also bounded by the daemon's refreshAfterMs (at least 1s) once one
	// answered: a paused daemon is failed over while its leases last.
	// Zero means 15s.
	RequestTimeout time.Duration
	// StreamIdle is how long an SSE stream may go without a complete
	// event or a keepalive before it is dropped and reconnected (the
	// daemon sends a keepalive every 15s; a trickle of bytes that never
	// completes an event does not count). Zero means 45s.
	StreamIdle time.Duration
	// ReportInterval is how often demand is reported when the daemon sets
	// no refreshAfterMs; zero means 10s. Reports are jittered by ±10%.
	ReportInterval time.Duration
	// MinBackoff and MaxBackoff bound the reconnect backoff (exponential
	// with jitter); zero means 200ms and 5s. The cap is short because a
	// producer without a lease runs unlimited: started before the daemon
	// (a rollout in any order), it gets its first lease within MaxBackoff
	// of the daemon coming up. A Retry-After header from the daemon is
	// honoured when it parses; a garbled one is no hint.
	MinBackoff, MaxBackoff time.Duration
}

// endpoints returns the daemon URLs in the order they are tried: URL,
// then URLs, without empties and duplicates.
func (l LeaseConfig) endpoints() []string {
	var out []string
	for _, u := range append([]string{l.URL}, l.URLs...) {
		if u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// LoadTLS returns a TLS config for LeaseConfig.TLS from PEM files: caFile
// holds the CA certificates that verify the daemon (empty means the
// system's roots), certFile and keyFile a client certificate and its key
// (both empty for none; the daemon may require one). TLS 1.2 is the
// minimum. Set ServerName on the result when the daemon's certificate
// names another host than the URL. Errors wrap ErrInvalidOption.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %w", ErrInvalidOption, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrInvalidOption, caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both certFile and keyFile", ErrInvalidOption)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", ErrInvalidOption, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// DefaultMaxLeaseTTL is LeaseConfig.MaxLeaseTTL's default: the longest a
// lease is trusted after it arrives without a refresh.
const DefaultMaxLeaseTTL = 10 * time.Minute

// RetryConfig configures the SDK's retries, the only retry layer between
// the caller and the broker (the wrapped clients' own retries are turned
// off or bounded; see NewKafka and NewNATS).
type RetryConfig struct {
	// MaxAttempts per message, the first included; zero means 3, at most
	// 5 (gRPC's cap). 1 disables retries.
	MaxAttempts int
	// Backoff is the first retry's base delay, doubled per attempt up to
	// MaxBackoff, with jitter (a delay is between half and all of its
	// base, never near zero); zero means 100ms and 5s. A lease's
	// slow-down hint (retryAfterMs) overrides a shorter delay.
	Backoff, MaxBackoff time.Duration
	// Budget configures this producer's own retry budget; ignored when
	// Shared is set.
	Budget RetryBudgetConfig
	// Shared is a budget shared with other producers of the same client
	// application (one budget across every retry layer); nil means a
	// budget of the producer's own.
	Shared *RetryBudget
}

// ThrottleConfig configures adaptive throttling (SRE book, "Handling
// Overload"): per topic, requests and broker accepts are counted over
// Window, and a request is refused locally with probability
// max(0, (requests - K*accepts) / (requests + 1)). The zero value is on,
// with K = 2 over 2 minutes.
type ThrottleConfig struct {
	// Disabled turns adaptive throttling off.
	Disabled bool
	// K is the multiplier; zero means 2. Lower is stricter (1.1 rejects
	// once more than ~10% fail); at least 1.
	K float64
	// Window is the counting window; zero means 2m, at least 1s.
	Window time.Duration
}

// TTLMode says when a NATS message gets the per-message TTL header
// (Nats-TTL, ADR-43) besides the lagbridge-deadline header.
type TTLMode uint8

const (
	// TTLAuto (the zero value): when the stream allows per-message TTLs
	// (StreamConfig.AllowMsgTTL), looked up once per stream and cached.
	TTLAuto TTLMode = iota
	// TTLNever: never.
	TTLNever
	// TTLAlways: always (the server rejects it on streams that do not
	// allow it).
	TTLAlways
)

// NATSConfig holds the options only the NATS producer reads.
type NATSConfig struct {
	// MessageTTL says when to set Nats-TTL; zero is TTLAuto.
	MessageTTL TTLMode
	// Topic maps a subject to the lease key (the stream name); nil means
	// the stream is looked up by subject (one JetStream API request per
	// new subject, cached, up to 10,000 subjects).
	Topic func(subject string) string
	// MaxPendingAcks bounds async publishes awaiting their ack; a full
	// queue blocks PublishAsync (after admission). Zero means 4096.
	MaxPendingAcks int
}

// Config configures a producer. The zero value is not valid (Producer is
// required); every other field has a documented default. Config is read
// once by the constructors; later changes have no effect.
type Config struct {
	// Producer is this producer's stable id, 1-128 characters of
	// [A-Za-z0-9._:-] (quotaproto.ValidProducer). Required.
	Producer string
	// Topics are reported to the daemon at start. Topics produced to later
	// are added (and reported) on first use.
	Topics []string
	// Mode is the default for calls without Block() or Drop(); zero is
	// Block.
	Mode Mode
	// MaxBlock bounds a Block wait when the context has no deadline; zero
	// means 1s.
	MaxBlock time.Duration
	// Criticality of messages without WithCriticality and without a
	// lagbridge-criticality header; zero is Critical. Reported to the
	// daemon per topic.
	Criticality Criticality
	// MessageTTL gives messages whose context has no deadline a deadline
	// MessageTTL after the produce call; zero means such messages carry no
	// deadline header.
	MessageTTL time.Duration
	// MaxInFlight caps outstanding messages per topic (retries included);
	// zero means 10,000, negative means no cap.
	MaxInFlight int

	Leases   LeaseConfig
	Retry    RetryConfig
	Throttle ThrottleConfig
	NATS     NATSConfig

	// Registerer receives the lagbridge_client_* metrics; nil means no
	// metrics. Registration fails (ErrInvalidOption) if another producer
	// with the same Producer id is registered on it.
	Registerer prometheus.Registerer
	// Clock is the time source; nil means the system clock.
	Clock Clock
	// Logger receives lease errors and warnings; nil means none.
	Logger *slog.Logger
}

// Validate reports every problem of c at once, each wrapping
// ErrInvalidOption.
func (c Config) Validate() error {
	var p problems
	if !quotaproto.ValidProducer(c.Producer) {
		p.add("producer %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", c.Producer)
	}
	if len(c.Topics) > quotaproto.MaxTopics {
		p.add("%d topics, at most %d", len(c.Topics), quotaproto.MaxTopics)
	}
	for i, t := range c.Topics {
		if !quotaproto.ValidTopic(t) {
			p.add("topics[%d] %q must be 1-249 characters of valid UTF-8 without control characters", i, t)
		}
	}
	if c.Mode > Drop {
		p.add("mode %d is not Block or Drop", c.Mode)
	}
	if c.MaxBlock < 0 {
		p.add("max block %v must not be negative", c.MaxBlock)
	}
	if !c.Criticality.Valid() {
		p.add("criticality %d is not one of the four", c.Criticality)
	}
	if c.MessageTTL < 0 {
		p.add("message TTL %v must not be negative", c.MessageTTL)
	}
	c.Leases.validate(&p)
	c.Retry.validate(&p)
	c.Throttle.validate(&p)
	c.NATS.validate(&p)
	return p.err()
}

// validate adds l's problems to p (Config.Validate).
func (l LeaseConfig) validate(p *problems) {
	for _, raw := range l.endpoints() {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("leases URL %q must be an absolute http(s) URL", raw)
		} else if l.TLS != nil && u.Scheme != "https" {
			p.add("leases URL %q is plain http but a TLS config is set", raw)
		}
	}
	for i, raw := range l.URLs {
		if raw == "" {
			p.add("leases URLs[%d] is empty", i)
		}
	}
	if l.TLS != nil && l.HTTPClient != nil {
		p.add("set leases TLS or HTTPClient, not both (give the client's transport the TLS config)")
	}
	if l.Transport > SSE {
		p.add("lease transport %d is not LongPoll or SSE", l.Transport)
	}
	if l.WatchWait < 0 || l.WatchWait > quotaproto.MaxWatchWait {
		p.add("watch wait %v must be between 0 and %v", l.WatchWait, quotaproto.MaxWatchWait)
	}
	if l.Safe.Mode > SafeRate {
		p.add("safe quota mode %d is not SafeOpen, SafeClosed or SafeRate", l.Safe.Mode)
	}
	if bad(l.Safe.Rate) || l.Safe.Rate < 0 || l.Safe.Burst < 0 {
		p.add("safe quota rate %v and burst %d must be finite and not negative", l.Safe.Rate, l.Safe.Burst)
	}
	if l.DefaultLeaseTTL < 0 || l.MaxLeaseTTL < 0 || l.ReportInterval < 0 || l.MinBackoff < 0 || l.MaxBackoff < 0 ||
		l.RequestTimeout < 0 || l.StreamIdle < 0 {
		p.add("lease durations must not be negative")
	}
	if maxTTL := cmp.Or(l.MaxLeaseTTL, DefaultMaxLeaseTTL); l.DefaultLeaseTTL > maxTTL {
		p.add("default lease TTL %v exceeds the max lease TTL %v", l.DefaultLeaseTTL, maxTTL)
	}
	if l.MinBackoff > 0 && l.MaxBackoff > 0 && l.MinBackoff > l.MaxBackoff {
		p.add("lease min backoff %v exceeds max backoff %v", l.MinBackoff, l.MaxBackoff)
	}
}

// validate adds r's problems to p (Config.Validate); the budget's only
// when r has no shared one.
func (r RetryConfig) validate(p *problems) {
	if r.MaxAttempts < 0 || r.MaxAttempts > 5 {
		p.add("max attempts %d must be 1 to 5 (0 for the default 3)", r.MaxAttempts)
	}
	if r.Backoff < 0 || r.MaxBackoff < 0 {
		p.add("retry backoffs must not be negative")
	}
	if r.Backoff > 0 && r.MaxBackoff > 0 && r.Backoff > r.MaxBackoff {
		p.add("retry backoff %v exceeds max backoff %v", r.Backoff, r.MaxBackoff)
	}
	if r.Shared == nil {
		if err := r.Budget.Validate(); err != nil {
			*p = append(*p, err)
		}
	}
}

// validate adds t's problems to p (Config.Validate).
func (t ThrottleConfig) validate(p *problems) {
	if bad(t.K) || (t.K != 0 && t.K < 1) {
		p.add("throttle K %v must be at least 1 (0 for the default 2)", t.K)
	}
	if t.Window != 0 && t.Window < time.Second {
		p.add("throttle window %v must be at least 1s (0 for the default 2m)", t.Window)
	}
}

// validate adds n's problems to p (Config.Validate).
func (n NATSConfig) validate(p *problems) {
	if n.MessageTTL > TTLAlways {
		p.add("NATS message TTL mode %d is not TTLAuto, TTLNever or TTLAlways", n.MessageTTL)
	}
	if n.MaxPendingAcks < 0 {
		p.add("NATS max pending acks %d must not be negative", n.MaxPendingAcks)
	}
}

// withDefaults fills in the documented defaults of a valid config.
func (c Config) withDefaults() Config {
	if c.MaxBlock == 0 {
		c.MaxBlock = time.Second
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 10_000
	}
	l := &c.Leases
	if l.WatchWait == 0 {
		l.WatchWait = quotaproto.DefaultWatchWait
	}
	if l.MaxLeaseTTL == 0 {
		l.MaxLeaseTTL = DefaultMaxLeaseTTL
	}
	if l.DefaultLeaseTTL == 0 {
		l.DefaultLeaseTTL = min(30*time.Second, l.MaxLeaseTTL)
	}
	if l.RequestTimeout == 0 {
		l.RequestTimeout = 15 * time.Second
	}
	if l.StreamIdle == 0 {
		l.StreamIdle = 45 * time.Second
	}
	if l.ReportInterval == 0 {
		l.ReportInterval = 10 * time.Second
	}
	if l.MinBackoff == 0 {
		l.MinBackoff = 200 * time.Millisecond
	}
	if l.MaxBackoff == 0 {
		l.MaxBackoff = 5 * time.Second
	}
	if l.MinBackoff > l.MaxBackoff {
		l.MinBackoff = l.MaxBackoff
	}
	r := &c.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 3
	}
	if r.Backoff == 0 {
		r.Backoff = 100 * time.Millisecond
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = 5 * time.Second
	}
	if r.Backoff > r.MaxBackoff {
		r.Backoff = r.MaxBackoff
	}
	if c.Throttle.K == 0 {
		c.Throttle.K = 2
	}
	if c.Throttle.Window == 0 {
		c.Throttle.Window = 2 * time.Minute
	}
	if c.NATS.MaxPendingAcks == 0 {
		c.NATS.MaxPendingAcks = 4096
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func joinErrs(errs []error) error { return errors.Join(errs...) }
