package nats

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/lagbridge/lagbridge/brokers"
)

// Defaults applied by [Config] to zero-valued fields.
const (
	DefaultInterval       = time.Second
	DefaultJitter         = 0.2
	DefaultRequestTimeout = 5 * time.Second
	DefaultReconnectWait  = time.Second
	DefaultMaxListPages   = 64
	DefaultConcurrency    = 4
)

// Config configures an [Observer]. The zero value of every optional field
// means its documented default; [Config.Validate] reports every problem at
// once. A Config is a plain value: safe to copy, not mutated by New.
type Config struct {
	// Cluster names this NATS deployment in lag.Target.Cluster. Required.
	Cluster string `mapstructure:"cluster"`
	// URLs are the server URLs to connect to (nats://, tls://, ws://,
	// wss:// or bare host:port). At least one is required.
	URLs []string `mapstructure:"urls"`
	// Domain is the JetStream domain, empty for the default API prefix
	// ($JS.API.); with a domain the prefix is $JS.<domain>.API.
	Domain string `mapstructure:"domain"`

	// Streams selects the streams to watch by name; Consumers selects the
	// consumers (by consumer name, on every watched stream). The zero
	// Filter watches everything.
	Streams   Filter `mapstructure:"streams"`
	Consumers Filter `mapstructure:"consumers"`

	// TLS configures transport security. The zero value uses whatever the
	// URL scheme implies (tls:// turns TLS on with the system roots).
	TLS TLS `mapstructure:"tls"`

	// At most one authentication method may be set: CredsFile (a .creds
	// file with JWT and seed), NKeyFile (a file holding an nkey seed), User
	// and Password, or Token. None set means no authentication.
	CredsFile string `mapstructure:"credsFile"`
	NKeyFile  string `mapstructure:"nkeyFile"`
	User      string `mapstructure:"user"`
	Password  string `mapstructure:"password"`
	Token     string `mapstructure:"token"`

	// Interval is the daemon's observation interval, how often it calls
	// Observe. Zero means DefaultInterval (1s). It only serves to size the
	// scheduling slack (see InfoInterval).
	Interval time.Duration `mapstructure:"interval"`
	// InfoInterval bounds the JetStream API load: a stream's consumer infos
	// (and its stream info) are fetched at most once per InfoInterval,
	// minus a slack of min(Interval, InfoInterval)/4 that absorbs tick
	// scheduling noise, so that InfoInterval == Interval refreshes every
	// cycle instead of every other one. Between refreshes Observe repeats
	// the last readings (same At, so that the core reads no new
	// observation into them): a repeated reading is up to about
	// (1+Jitter)*InfoInterval old. The core judges staleness by that age,
	// so its staleAfter must be longer, or targets turn stale between
	// refreshes. Zero means Interval.
	InfoInterval time.Duration `mapstructure:"infoInterval"`
	// Jitter, a fraction in [0, 1] of InfoInterval, spreads the refreshes
	// of different streams over the interval: a stream's second refresh is
	// delayed by a stable per-stream share of Jitter*InfoInterval, after
	// which it keeps that phase. Zero means DefaultJitter (0.2); a negative
	// value disables jitter.
	Jitter float64 `mapstructure:"jitter"`
	// RequestTimeout bounds each JetStream API request and the initial
	// connect. Zero means DefaultRequestTimeout (5s).
	RequestTimeout time.Duration `mapstructure:"requestTimeout"`
	// ReconnectWait is the pause between reconnect attempts; reconnects are
	// unlimited. Zero means DefaultReconnectWait (1s).
	ReconnectWait time.Duration `mapstructure:"reconnectWait"`
	// MaxListPages bounds the number of pages one listing (stream list, or
	// the consumer list of one stream) may take. The page size is fixed by
	// the server: 256 entries for stream and consumer info lists; the
	// client cannot choose it. Zero means DefaultMaxListPages (64, i.e.
	// 16,384 streams or consumers per stream).
	MaxListPages int `mapstructure:"maxListPages"`
	// Concurrency is how many streams are refreshed in parallel within one
	// Observe call. Zero means DefaultConcurrency (4).
	Concurrency int `mapstructure:"concurrency"`
	// Now is the observer's clock: the time of each reading
	// (lag.Sample.At) and of the refresh schedule. Nil means time.Now; it
	// must be safe for concurrent use. Not a setting of the config file.
	Now func() time.Time `mapstructure:"-"`
	// Log receives the observer's warnings (an advisory subscription
	// refused, a server too old to say why a consumer terminated a
	// message). Nil means slog.Default(). Not a setting of the config
	// file.
	Log *slog.Logger `mapstructure:"-"`
}

// Filter selects names by anchored regular expressions (brokers.Filter; Go
// RE2 syntax; "orders" matches only "orders", "orders\..*" its dotted
// children). The zero value selects every name.
type Filter = brokers.Filter

// TLS configures the client side of TLS (brokers.TLS). The zero value
// leaves TLS to the URL scheme (tls:// turns it on with the system roots);
// Enabled, or any other field set, turns it on for every URL.
type TLS = brokers.TLS

// ErrInvalidConfig is wrapped by every problem [Config.Validate] reports:
// brokers.ErrInvalidConfig, shared with the Kafka observer.
var ErrInvalidConfig = brokers.ErrInvalidConfig

// ConfigError is one configuration problem (brokers.ConfigError, Section
// "nats"). Its message has the shape "nats.<field>: <problem>"; it unwraps
// to [ErrInvalidConfig].
type ConfigError = brokers.ConfigError

// Validate reports every problem of c at once, joined with errors.Join; each
// is a *[ConfigError] wrapping [ErrInvalidConfig]. It reads the files the
// config names (TLS, credsFile, nkeyFile), as kafka's Validate does, so that
// `lagbridge check` names one that is missing or unreadable; New reads them
// again.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Section: "nats", Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(c.Cluster) == "" {
		bad("cluster", "required")
	}
	if len(c.URLs) == 0 {
		bad("urls", "at least one server URL is required")
	}
	for i, u := range c.URLs {
		if p := checkURL(u); p != "" {
			bad(fmt.Sprintf("urls[%d]", i), "%s", p)
		}
	}
	if strings.ContainsAny(c.Domain, " \t.*>") {
		bad("domain", "must be a single subject token, got %q", c.Domain)
	}
	errs = append(errs, c.Streams.Check("nats", "streams")...)
	errs = append(errs, c.Consumers.Check("nats", "consumers")...)
	if err := c.TLS.CheckPair("nats"); err != nil {
		errs = append(errs, err)
	} else if c.TLS.Set() {
		_, tlsErrs := c.TLS.Load("nats")
		errs = append(errs, tlsErrs...)
	}
	if c.CredsFile != "" {
		if err := readable(c.CredsFile); err != nil {
			bad("credsFile", "%v", err)
		}
	}
	if c.NKeyFile != "" {
		if _, err := natsgo.NkeyOptionFromSeed(c.NKeyFile); err != nil {
			bad("nkeyFile", "%v", err)
		}
	}

	var methods []string
	if c.CredsFile != "" {
		methods = append(methods, "credsFile")
	}
	if c.NKeyFile != "" {
		methods = append(methods, "nkeyFile")
	}
	if c.User != "" || c.Password != "" {
		methods = append(methods, "user/password")
		if c.User == "" {
			bad("user", "required when password is set")
		}
	}
	if c.Token != "" {
		methods = append(methods, "token")
	}
	if len(methods) > 1 {
		bad("auth", "at most one authentication method may be set, got %s", strings.Join(methods, ", "))
	}

	nonNeg := func(field string, d time.Duration) {
		if d < 0 {
			bad(field, "must not be negative, got %v", d)
		}
	}
	nonNeg("interval", c.Interval)
	nonNeg("infoInterval", c.InfoInterval)
	nonNeg("requestTimeout", c.RequestTimeout)
	nonNeg("reconnectWait", c.ReconnectWait)
	if c.Jitter > 1 {
		bad("jitter", "must be at most 1 (a fraction of infoInterval), got %v", c.Jitter)
	}
	if c.MaxListPages < 0 {
		bad("maxListPages", "must not be negative, got %d", c.MaxListPages)
	}
	if c.Concurrency < 0 {
		bad("concurrency", "must not be negative, got %d", c.Concurrency)
	}
	return errors.Join(errs...)
}

// checkURL says why raw would not dial, read the way the observer's client
// reads it (nats.go's Options.Servers: one URL per entry, nats:// when no
// scheme is given, the scheme's default port when none is), or "" when it
// would. url.Parse alone accepts some that never dial, such as "::::".
func checkURL(raw string) string {
	if strings.TrimSpace(raw) == "" {
		return "empty URL"
	}
	s := raw
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	shown := redactURL(raw) // a problem never quotes a password
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // its text quotes the URL
			err = ue.Err
		}
		return fmt.Sprintf("%q is not a URL: %v", shown, err)
	}
	// Two URLs in one entry; a comma in a password is fine.
	if strings.Contains(u.Host, ",") {
		return fmt.Sprintf("%q holds a comma: give each URL its own entry", shown)
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Sprintf("unsupported scheme %q in %q (want nats, tls, ws or wss)", u.Scheme, shown)
	}
	hostPort := u.Host
	if u.Port() == "" {
		hostPort = strings.TrimSuffix(hostPort, ":") + ":4222" // any valid port: only the form is checked
	}
	if err := brokers.CheckHostPort(hostPort); err != nil {
		return fmt.Sprintf("%q: %v", shown, err)
	}
	return ""
}

// WithDefaults returns c with every zero optional field set to its default,
// as New applies them: the effective values, for callers that size things
// by them (the daemon's staleAfter).
func (c Config) WithDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.InfoInterval == 0 {
		c.InfoInterval = c.Interval
	}
	switch {
	case c.Jitter == 0:
		c.Jitter = DefaultJitter
	case c.Jitter < 0:
		c.Jitter = 0
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = DefaultReconnectWait
	}
	if c.MaxListPages == 0 {
		c.MaxListPages = DefaultMaxListPages
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// MaxReadingAge is the longest age a reading of an observer built from c
// reaches before a fresh one replaces it: a stream's refresh comes up to
// (1+Jitter) x InfoInterval after the last, and is seen at the next
// Observe, an Interval later. Zero fields take their defaults. A consumer of
// the readings that judges staleness by their age must allow more.
func (c Config) MaxReadingAge() time.Duration {
	c = c.WithDefaults()
	return time.Duration(float64(c.InfoInterval)*(1+c.Jitter)) + c.Interval
}

// readable reports why path is not a file this process can read: missing,
// a directory, or unreadable (permissions), so that check names it
// before the daemon fails to connect with it.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}
