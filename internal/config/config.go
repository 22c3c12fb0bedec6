// Package config loads and validates the daemon's configuration: a YAML
// file, LAGBRIDGE_* environment variables and command-line flags, in that
// order of increasing precedence (viper). Validate reports every problem at
// once, each as `<path>: <problem>`.
//
// Environment variables reach the top-level settings only, not those inside
// lists (kafka[0].sasl.password). Secrets are read from files instead: each
// password and token setting has a <key>File twin (kafka[].sasl.passwordFile,
// nats[].passwordFile, nats[].tokenFile, quota.auth.tokens[].tokenFile,
// quota.auth.adminTokensFile), read by Load and exclusive with the inline
// value; see resolveSecrets.
//
// Only cmd/lagbridge and the daemon's wiring import this package; the
// producer SDK never does.
package config

import (
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/lagbridge/lagbridge/brokers"
	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/enforce"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/internal/servertls"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// Defaults of the top-level settings.
const (
	DefaultListen   = ":9464"
	DefaultInterval = time.Second
)

// Config is the whole daemon configuration. The zero value of each field
// means the default documented on it (applied by Load).
type Config struct {
	// Listen is the HTTP address for the API, metrics and dashboard.
	// Default ":9464". Env LAGBRIDGE_LISTEN, flag --listen.
	Listen string `mapstructure:"listen"`
	// Interval is the observation interval of every cluster. Default 1s,
	// from 100ms to 1m. Env LAGBRIDGE_INTERVAL, flag --interval.
	Interval time.Duration `mapstructure:"interval"`
	// EngagedInterval is the observation interval of a cluster while a
	// policy is engaged on one of its targets whose position moves at
	// least that often (a consumer's fresh reports, a commit cadence that
	// fine, a NATS consumer acking within it: lag.State.MovesWithin) (a
	// target limited, or its wait above the engage threshold), or while
	// a target read from the brokers that is fine by its acks (a NATS
	// consumer acking within it) or by Kafka commits that passed the
	// trial below is unlimited but produced to 90% or more of the highest
	// rate it was seen to consume (NearCapacity; any steady consumer
	// never seen faster counts: its cluster is then read at this cadence
	// all the time, 4x the readings at the defaults, 4x the JetStream API
	// calls for NATS, on every replica without ha.shards), until it has
	// not been for 8 cycles: a drop in the consumers' capacity is then
	// seen in a quarter of the time. A cluster where a target read from
	// commits made about once an interval is engaged, or near its
	// capacity as above (NearCapacity), keeps the interval, but for a
	// trial of a few fast probes, read by the trial alone, when those
	// commits moved at about every reading: a Kafka consumer whose commits
	// move at least every third probe passes it and switches the cluster;
	// one that fails it (a 1 s auto-commit) is tried again after 4
	// interval cycles, then 8, 16, 32 and 64 at most.
	// Never faster than 4 times what the cluster's last observation took.
	// Default max(250ms, interval/4); from 250ms to 1m; equal to or above
	// the interval: off (every cycle at the interval). Env
	// LAGBRIDGE_ENGAGEDINTERVAL. See EngagedCadence.
	EngagedInterval time.Duration `mapstructure:"engagedInterval"`
	// NearCapacity reads a cluster at the engaged cadence while one of
	// its unlimited targets whose position moves within it (a NATS
	// consumer acking within it, a Kafka consumer whose commits passed
	// the engaged cadence's trial; not a consumer that reports) is
	// produced to 90% or more of the highest rate it was seen to consume
	// (see EngagedInterval), and tries a Kafka consumer whose commits
	// moved at about every reading for it: a drop of its consumers'
	// capacity is seen within 250 ms rather than 1 s
	// (nats/ack-each/sync/1s at 5x: p99 3.4-3.7 s -> 0.9-1.5 s,
	// results.md, session 34, nearcap; kafka/commit-per-poll/sync/1s at
	// 5x: 3.9-4.3 s -> 0.9-2.6 s, session 36, nearkafka), at the cost of
	// a standing 4x in readings for a cluster whose consumers keep up
	// (404 JetStream API calls/s instead of 101/s for 50 streams x 20
	// consumers; a Kafka cluster's readings, never more often than 4x
	// what one takes) and, for a Kafka consumer that fails the trial (a
	// 1 s auto-commit), 3-4 probes every 64 s once its waits have
	// grown. false: such a cluster is read at the interval until a
	// policy is engaged; the engaged cadence itself is kept. Default
	// true; true with the engaged cadence off (engagedInterval not
	// shorter than the interval) is refused. Env LAGBRIDGE_NEARCAPACITY.
	// One setting for every cluster, as engagedInterval, whose cadence it
	// chooses when to use; a NATS cluster's JetStream load has a bound of
	// its own, nats[].infoInterval. See NearCapacityOn.
	NearCapacity *bool `mapstructure:"nearCapacity"`
	// ShutdownTimeout bounds the graceful shutdown. Default 10s.
	ShutdownTimeout time.Duration `mapstructure:"shutdownTimeout"`
	Log             Log           `mapstructure:"log"`
	// Rules are the lag status thresholds (see lag.Rules); zero fields take
	// lag.DefaultRules, except StaleAfter which defaults to 3 intervals, at
	// least 3s and at least 3 times the largest NATS infoInterval (see
	// Config.Lag).
	Rules Rules `mapstructure:"rules"`
	// Kafka and NATS list the clusters to watch; at least one in all.
	// Their passwords and tokens may come from files (passwordFile,
	// tokenFile), resolved by Load.
	Kafka []kafka.Config `mapstructure:"kafka"`
	NATS  []nats.Config  `mapstructure:"nats"`
	// Quota configures the quota engine and its publishers. Without
	// policies every producer gets an unlimited lease.
	Quota Quota `mapstructure:"quota"`
	// TTL configures broker-side enforcement of queue age bounds.
	TTL TTL `mapstructure:"ttl"`
	// History sizes the history and the decision log (history.Config).
	History history.Config `mapstructure:"history"`
	// TLS serves the daemon's HTTP (API, quota protocol, metrics,
	// dashboard) over TLS. Zero value: plain HTTP.
	TLS servertls.Config `mapstructure:"tls"`
	// Metrics says what /metrics shows beyond the defaults.
	Metrics Metrics `mapstructure:"metrics"`
	// HA runs several replicas, one leader per cluster (see HA).
	HA HA `mapstructure:"ha"`

	// ignoredEnv is Load's word on the LAGBRIDGE_* variables no setting
	// reads (ignoredEnv), for Warnings.
	ignoredEnv []string
	// authFiles are the token files Load read (ReloadAuth).
	authFiles authFiles
}

// Metrics chooses what /metrics exposes. /metrics needs no token, so what
// it shows, anyone who reaches the daemon sees.
type Metrics struct {
	// ProducerGrants exports lagbridge_quota_grant{cluster,topic,producer},
	// one series per producer and topic: every producer's id and grant.
	// Default false (per-target series and producer counts only; admins
	// see grants at /v1/quotas).
	ProducerGrants bool `mapstructure:"producerGrants"`
}

// TTL opts quota policies into broker-side enforcement (see docs/ttl.md).
type TTL struct {
	// Enforce lists the policies enforced on the brokers; each is a dry
	// run unless apply: true.
	Enforce []enforce.PolicyRule `mapstructure:"enforce"`
	// StreamCheckInterval is how often a NATS stream's configuration is
	// checked against its policy. Default 1m.
	StreamCheckInterval time.Duration `mapstructure:"streamCheckInterval"`
}

// Quota configures how lag becomes quotas and where they are published.
type Quota struct {
	// Policies say what each target's consumers can bear (quota.Policy).
	Policies []quota.Policy `mapstructure:"policies"`
	// LeaseLifetime is how long a producer may keep a lease without
	// reaching the daemon (fail-static). Default 10 intervals; with ha,
	// twice ha.sessionTimeout plus 4 intervals, and never shorter than the
	// session plus two intervals (a lease outlives a failover).
	LeaseLifetime time.Duration `mapstructure:"leaseLifetime"`
	// MaxProducers bounds the producer ids the daemon keeps leases for
	// (those that reported within leaseLifetime); a report from a new id
	// beyond it is answered 503 with Retry-After. Default 20000 (about
	// 1.7 KB of heap each per topic), from 1 to 1000000.
	MaxProducers int `mapstructure:"maxProducers"`
	// Auth turns on bearer tokens for the quota protocol (see
	// quotaserver.Auth). AdminTokens need Tokens: any producer or admin
	// token turns authentication on, for producers too. Without tokens the
	// protocol is open, which Validate accepts only on a loopback listen
	// address or with mode: none (quotaserver.RefuseOpen). Tokens may come
	// from files (tokens[].tokenFile, adminTokensFile, readTokensFile),
	// resolved by Load.
	Auth quotaserver.Auth `mapstructure:"auth"`
	// MaxStreams and MaxLongPolls cap the lease streams open and the
	// long-polls waiting at once; beyond, 503 with Retry-After (5 s) and
	// lagbridge_quota_watchers_refused_total{kind}. Default 1024 each;
	// each costs a connection and about 23 KB.
	MaxStreams   int `mapstructure:"maxStreams"`
	MaxLongPolls int `mapstructure:"maxLongPolls"`
	// NATSKV publishes every lease to a KV bucket on a NATS cluster.
	NATSKV NATSKV `mapstructure:"natsKV"`
	// KafkaClientQuotas tunes the broker-native quotas of policies with
	// kafkaClientQuota: true.
	KafkaClientQuotas KafkaClientQuotas `mapstructure:"kafkaClientQuotas"`
}

// NATSKV names the NATS cluster (one of nats[].cluster) and bucket that
// receive the leases. Empty Cluster: not published. Deployments with
// different ha.name (with or without ha) may share a bucket: each lease
// names the deployment that wrote it, and a daemon deletes and overwrites
// only its own deployment's (internal/publish.KV).
type NATSKV struct {
	Cluster string `mapstructure:"cluster"`
	// Bucket defaults to lagbridge-quotas; NATS allows letters, digits,
	// "-" and "_".
	Bucket string `mapstructure:"bucket"`
}

// KafkaClientQuotas converts message rates into producer_byte_rate.
type KafkaClientQuotas struct {
	// BytesPerMessage, when positive, is the bytes the broker charges a
	// producer per record on every topic (record, batch and request
	// framing), overriding the measurement. Zero (the default): measured
	// per topic from the brokers' log growth, batch sizes and request
	// framing, from the log's tail at the first reading of a topic, and
	// 1024 for a topic whose tail could not be read until it has grown
	// by 100 records.
	BytesPerMessage float64 `mapstructure:"bytesPerMessage"`
}

// Log configures log/slog output on standard error.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `mapstructure:"level"`
	// Format is text or json. Default text.
	Format string `mapstructure:"format"`
}

// Rules are lag.Rules, under rules: in the file (lagAge, stallAfter,
// staleAfter, rateWindow, abandonAfter, reportFresh); zero fields take
// lag.DefaultRules, except staleAfter (see Config.Lag).
type Rules = lag.Rules

// Lag returns the lag.Rules the loops use.
//
// An unset StaleAfter is 3 intervals, at least 3s, and at least 3 times the
// largest NATS infoInterval: a NATS observer repeats its last readings (and
// their time) between refreshes, so a StaleAfter shorter than infoInterval
// would mark its targets stale between every two refreshes. The default is
// raised rather than a short value rejected because StaleAfter is one rule
// for every cluster while infoInterval is set per cluster: an operator who
// slows one cluster's refreshes need not also work out StaleAfter. An
// explicit StaleAfter that is not longer than a NATS cluster's refresh gap
// is refused by Validate.
func (c Config) Lag() lag.Rules {
	r := c.Rules
	if r.StaleAfter == 0 {
		r.StaleAfter = max(3*c.Interval, 3*time.Second)
		for _, n := range c.ObservedNATS() {
			r.StaleAfter = max(r.StaleAfter, 3*n.WithDefaults().InfoInterval)
		}
	}
	return r
}

// EngagedCadence is the observation interval while a policy is engaged
// (EngagedInterval, its default when unset); the interval when that is not
// shorter (off).
func (c Config) EngagedCadence() time.Duration {
	return min(c.engagedAsked(), c.Interval)
}

// engagedAsked is engagedInterval as set, or its default at the interval
// when unset, before EngagedCadence bounds it by the interval.
func (c Config) engagedAsked() time.Duration {
	if c.EngagedInterval == 0 {
		return max(250*time.Millisecond, c.Interval/4)
	}
	return c.EngagedInterval
}

// NearCapacityOn reports whether an unlimited target near its capacity
// is read at the engaged cadence (NearCapacity, true when unset).
func (c Config) NearCapacityOn() bool {
	return c.NearCapacity == nil || *c.NearCapacity
}

// ObservedNATS returns the NATS clusters as the daemon observes them: a
// cluster's interval, when unset, is the daemon's, and then its
// infoInterval, when unset, the engaged interval (EngagedCadence): a
// stream's infos are fetched at every cycle, also at the faster cycles
// while a policy is engaged, rather than at every fourth of them (the
// observer repeats its last readings in between); at the interval's
// cycles that is once a cycle, as before. Everything else is the
// observer's own default (nats.Config.WithDefaults).
func (c Config) ObservedNATS() []nats.Config {
	out := make([]nats.Config, len(c.NATS))
	for i, n := range c.NATS {
		if n.Interval == 0 {
			n.Interval = c.Interval
			if n.InfoInterval == 0 {
				n.InfoInterval = c.EngagedCadence()
			}
		}
		out[i] = n
	}
	return out
}

// Flags returns the flag set shared by run, check and demo: --config and the
// top-level settings. Every flag is also settable in the file and as
// LAGBRIDGE_<NAME> (dots and dashes become underscores).
func Flags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.String("config", "", "path of the YAML config file (env LAGBRIDGE_CONFIG)")
	fs.String("listen", DefaultListen, "HTTP listen address for /metrics, /v1/ and the dashboard")
	fs.Duration("interval", DefaultInterval, "observation interval of every cluster")
	fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.String("log-format", "text", "log format: text or json")
	return fs
}

// flagKeys maps flag names to config keys.
var flagKeys = map[string]string{"listen": "listen", "interval": "interval", "log-level": "log.level", "log-format": "log.format"}

// Load reads the file named by --config (or LAGBRIDGE_CONFIG; none is fine
// when env and flags say enough), applies env and flags, fills defaults, and
// validates. The error joins every problem found: unknown keys, values of
// the wrong type, and everything Validate reports.
func Load(fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	v.SetEnvPrefix("LAGBRIDGE")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	v.SetDefault("listen", DefaultListen)
	v.SetDefault("interval", DefaultInterval.String())
	v.SetDefault("engagedInterval", "0s")
	v.SetDefault("shutdownTimeout", "10s")
	v.SetDefault("log.level", "info")
	v.SetDefault("log.format", "text")
	for _, k := range []string{"rules.lagAge", "rules.stallAfter", "rules.staleAfter", "rules.rateWindow", "rules.abandonAfter", "rules.reportFresh"} {
		v.SetDefault(k, "0s")
	}
	v.SetDefault("ha.enabled", false) // and LAGBRIDGE_HA_ID, ... below
	v.SetDefault("ha.id", "")
	v.SetDefault("ha.name", "")
	v.SetDefault("ha.sessionTimeout", "0s")
	v.SetDefault("ha.shards", 0)
	v.SetDefault("ha.ignoreLegacyBuckets", false)
	// Reachable from the environment too (LAGBRIDGE_HISTORY_RECENT, ...).
	for _, k := range []string{"history.recent", "history.retention", "history.resolution", "history.events", "history.grantChange"} {
		v.SetDefault(k, "0")
	}
	// Every setting outside a list is reachable from the environment,
	// also one the file does not set (AutomaticEnv alone reads only the
	// keys viper already knows: those with a default or in the file).
	for _, k := range envKeys() {
		if err := v.BindEnv(k); err != nil {
			return Config{}, err
		}
	}
	if fs != nil {
		for flag, key := range flagKeys {
			if f := fs.Lookup(flag); f != nil {
				if err := v.BindPFlag(key, f); err != nil {
					return Config{}, err
				}
			}
		}
	}
	file := v.GetString("config")
	if fs != nil {
		if f := fs.Lookup("config"); f != nil && f.Changed {
			file = f.Value.String()
		}
	}
	if file != "" {
		v.SetConfigFile(file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("read config %s: %w", file, err)
		}
	}
	// What viper.Unmarshal does, with the secret files read in between.
	settings := v.AllSettings()
	errs, unread, files := resolveSecrets(settings)
	var spelled map[string]string
	if file != "" {
		var twins []error
		twins, spelled = fileKeys(file)
		errs = append(errs, twins...)
	}
	var c Config
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           &c,
		WeaklyTypedInput: true,
		ErrorUnused:      true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			unitlessDurationHook, numberBoolHook, mapstructure.StringToTimeDurationHookFunc(), mapstructure.StringToSliceHookFunc(","),
			mapstructure.TextUnmarshallerHookFunc(), scalarStringHook, intRangeHook, blankUnsetHook),
	})
	if err != nil {
		return Config{}, err
	}
	var undecoded []string
	if err := dec.Decode(settings); err != nil {
		for _, e := range decodeErrors(err, spelled) {
			if path, _, ok := strings.Cut(e.Error(), ": "); ok {
				undecoded = append(undecoded, path)
			}
			errs = append(errs, e)
		}
	}
	c.ignoredEnv = ignoredEnv(os.Environ(), v.AllKeys())
	c.authFiles = files
	for _, e := range split(c.Validate()) {
		// A secret whose file could not be read, or a value that could not
		// be decoded (or a part of it), is reported once, as such, not also
		// as missing.
		path, _, _ := strings.Cut(e.Error(), ": ")
		if unread[path] || slices.ContainsFunc(undecoded, func(u string) bool {
			return path == u || strings.HasPrefix(path, u+".") || strings.HasPrefix(path, u+"[")
		}) {
			continue
		}
		if path == "kafka, nats" && file == "" && len(c.Kafka)+len(c.NATS) == 0 {
			// Environment variables cannot reach lists: without a file
			// there is no cluster, and what is missing is the file.
			e = errors.New("kafka, nats: no cluster to watch, and no config file given: pass --config FILE (or set LAGBRIDGE_CONFIG); clusters are configured in the file only")
		}
		errs = append(errs, e)
	}
	return c, errors.Join(errs...)
}

// numberBoolHook refuses a number for a boolean setting but the whole
// numbers 1 and 0: mapstructure's weak decoding reads any number but 0 as
// true, so `nearCapacity: 0.8`, written as the fraction it is not, would
// turn it on with nothing said. 1 and 0 are read as true and false, as
// they are from the environment (text is scalarStringHook's: "1" and "0"
// are strconv.ParseBool's), and as they were before this hook: a file
// with `enabled: 1` still loads.
func numberBoolHook(from, to reflect.Value) (any, error) {
	if !from.IsValid() || !to.IsValid() || to.Kind() != reflect.Bool {
		return from.Interface(), nil
	}
	var n float64
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n = float64(from.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n = float64(from.Uint())
	case reflect.Float32, reflect.Float64:
		n = from.Float()
	default:
		return from.Interface(), nil
	}
	if n == 0 || n == 1 {
		return n == 1, nil
	}
	return nil, fmt.Errorf("%v is not true or false", from.Interface())
}

// unitlessDurationHook refuses a number without a unit, or a boolean, for
// a duration setting: YAML reads `requestTimeout: 5` as the integer 5 (and
// `requestTimeout: true` as a boolean), which mapstructure would take for
// 5 nanoseconds (or 1: every Kafka request would then time out, with
// nothing said). A bare 0 passes here: where 0 means the default it is
// accepted, and where it is not allowed Validate says so.
func unitlessDurationHook(from, to reflect.Value) (any, error) {
	if !from.IsValid() || !to.IsValid() || to.Type() != reflect.TypeFor[time.Duration]() || from.Type() == to.Type() {
		return from.Interface(), nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if !from.IsZero() {
			return nil, fmt.Errorf("%v has no unit: write a duration such as %vs or %vms", from.Interface(), from.Interface(), from.Interface())
		}
	case reflect.Bool:
		return nil, fmt.Errorf("%v is not a duration: write one such as 5s or 500ms", from.Interface())
	case reflect.String:
		// Text (any environment variable, a quoted YAML value): said
		// with its value, as the number above, not as time's "missing
		// unit in duration".
		raw := strings.TrimSpace(from.String())
		if _, err := time.ParseDuration(raw); err == nil || raw == "" {
			return from.Interface(), nil
		}
		if f, err := strconv.ParseFloat(raw, 64); err == nil && f != 0 {
			return nil, fmt.Errorf("%q has no unit: write a duration such as %ss or %sms", raw, raw, raw)
		}
		return nil, fmt.Errorf("%q is not a duration: write one such as 5s or 500ms", raw)
	}
	return from.Interface(), nil
}

// scalarStringHook parses a string given for a number or a boolean (a
// YAML value such as `lots`, or any environment variable) and, when it is
// not one, says so with the value: mapstructure's own message, "cannot parse
// value as 'int': strconv.ParseInt: invalid syntax", shows neither. Types
// that parse text themselves are decoded by the hooks before this one.
func scalarStringHook(from, to reflect.Value) (any, error) {
	if !from.IsValid() || !to.IsValid() || from.Kind() != reflect.String {
		return from.Interface(), nil
	}
	raw := from.String()
	s := strings.TrimSpace(raw)
	if s == "" {
		return raw, nil // mapstructure's weak decoding: the zero value
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, err := strconv.ParseInt(s, 0, 64); err != nil {
			return nil, fmt.Errorf("%q is not a whole number", raw)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if _, err := strconv.ParseUint(s, 0, 64); err != nil {
			return nil, fmt.Errorf("%q is not a whole number >= 0", raw)
		}
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return nil, fmt.Errorf("%q is not a number", raw)
		}
	case reflect.Bool:
		if _, err := strconv.ParseBool(s); err != nil {
			return nil, fmt.Errorf("%q is not true or false", raw)
		}
	}
	return raw, nil
}

// intRangeHook reports a number that does not fit the integer setting it
// is decoded into (headFetchMaxBytes is an int32), where mapstructure would
// silently wrap it (4294967296 would become 0, which means the default)
// or truncate a fraction. Strings are left to mapstructure, which parses
// them with the setting's size.
func intRangeHook(from, to reflect.Value) (any, error) {
	if !from.IsValid() || !to.IsValid() {
		return nil, nil
	}
	data := from.Interface()
	signed := false
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		signed = true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	bits := to.Type().Bits()
	var fits bool
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i := from.Int()
		fits = (signed && !to.OverflowInt(i)) || (!signed && i >= 0 && !to.OverflowUint(uint64(i)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := from.Uint()
		fits = (signed && u <= math.MaxInt64 && !to.OverflowInt(int64(u))) || (!signed && !to.OverflowUint(u))
	case reflect.Float32, reflect.Float64:
		f := from.Float()
		if f != math.Trunc(f) {
			return nil, fmt.Errorf("%v is not a whole number", f)
		}
		if signed {
			fits = f >= -math.Ldexp(1, bits-1) && f < math.Ldexp(1, bits-1)
		} else {
			fits = f >= 0 && f < math.Ldexp(1, bits)
		}
	default:
		return data, nil
	}
	if fits {
		return data, nil
	}
	if signed {
		return nil, fmt.Errorf("%v is out of range: must be from %d to %d", data, -(int64(1) << (bits - 1)), int64(uint64(1)<<(bits-1)-1))
	}
	return nil, fmt.Errorf("%v is out of range: must be from 0 to %d", data, uint64(math.MaxUint64)>>(64-bits))
}

// blankUnsetHook leaves a pointer setting unset for an empty string, so
// that it keeps its default, as an empty string does for every other
// setting (the zero value means the default): mapstructure would decode
// `nearCapacity: ""` (a template given no value) as a pointer to false,
// turning off what is on by default, with nothing said. Last of the
// hooks: the ones before it cannot take the nil it returns.
func blankUnsetHook(from, to reflect.Value) (any, error) {
	if !from.IsValid() {
		return nil, nil
	}
	if to.IsValid() && to.Kind() == reflect.Pointer && from.Kind() == reflect.String && from.String() == "" {
		return nil, nil
	}
	return from.Interface(), nil
}

// decodeErrors splits mapstructure's error into one `path: problem` line
// per problem, in the shape Validate uses. An unknown key is named as the
// file spells it (spelled, from fileKeys), or lowercased when the file
// does not have it.
func decodeErrors(err error, spelled map[string]string) []error {
	var errs []error
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line == "" || strings.HasPrefix(line, "decoding failed due to") || strings.HasSuffix(line, "error(s) decoding:") {
			continue
		}
		if m := invalidKeys.FindStringSubmatch(line); m != nil {
			for _, k := range strings.Split(m[2], ", ") {
				path := k
				if m[1] != "" {
					path = fileSpelling(m[1]) + "." + k
				}
				if as, ok := spelled[strings.ToLower(path)]; ok {
					path = strings.TrimSuffix(path, k) + as
					k = as
				}
				hint := ""
				if near := nearestKey(k, keysAt(m[1])); near != "" {
					hint = fmt.Sprintf("; did you mean %q?", near)
				}
				errs = append(errs, fmt.Errorf("%s: unknown key (misspelt, or not a setting of this version)%s", path, hint))
			}
			continue
		}
		if m := quotedPath.FindStringSubmatch(line); m != nil {
			path, problem := fileSpelling(m[1]), m[2]
			if strings.HasPrefix(problem, "expected a map or struct, got ") {
				problem = "expected a map (key: value), got " + strings.Trim(strings.TrimPrefix(problem, "expected a map or struct, got "), `"`)
				if producerEntry.MatchString(path) {
					problem += ": a producer is written {id: NAME, criticality: CRITICAL}"
				}
			}
			errs = append(errs, fmt.Errorf("%s: %s", path, problem))
			continue
		}
		errs = append(errs, errors.New("config: "+line))
	}
	if len(errs) == 0 {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	return errs
}

// fileSpelling turns the Go field names in a decoder path into the config
// file's spelling, as the Validate messages have them: the settings of
// kafka.Config have no mapstructure tags, so mapstructure names them
// kafka[0].HeadFetchMaxBytes, kafka[0].TLS.CAFile; they become
// kafka[0].headFetchMaxBytes, kafka[0].tls.caFile.
func fileSpelling(path string) string {
	segs := strings.Split(path, ".")
	for i, s := range segs {
		n := 0
		for n < len(s) && s[n] >= 'A' && s[n] <= 'Z' {
			n++
		}
		if n > 1 && n < len(s) && s[n] >= 'a' && s[n] <= 'z' {
			n-- // the last capital starts the next word: CAFile -> caFile
		}
		segs[i] = strings.ToLower(s[:n]) + s[n:]
	}
	return strings.Join(segs, ".")
}

// keysAt returns the settings of the place a decoder path names ("" for
// the top level, "kafka[0]", "quota.policies[1]") as the file spells them;
// nil when the path leads nowhere known.
func keysAt(path string) []string {
	t := reflect.TypeFor[Config]()
	if path != "" {
		for _, seg := range strings.Split(path, ".") {
			name, _, _ := strings.Cut(seg, "[")
			f, ok := settingOf(elemType(t), name)
			if !ok {
				return nil
			}
			t = f.Type
		}
	}
	var keys []string
	eachSetting(elemType(t), func(key string, _ reflect.StructField) bool {
		keys = append(keys, key)
		return true
	})
	return keys
}

// envKeys returns the key of every setting of Config outside a list or a
// map ("quota.maxProducers", "metrics.producerGrants", ...): the settings
// LAGBRIDGE_<KEY> reaches (dots become underscores).
func envKeys() []string {
	keys, _ := envSettings()
	return keys
}

// envSettings returns the keys of Config's settings outside a list or a
// map (envKeys), and those of its lists and maps ("quota.policies",
// "kafka"), which the environment does not reach.
func envSettings() (keys, lists []string) {
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		eachSetting(t, func(key string, f reflect.StructField) bool {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Slice, ft.Kind() == reflect.Array, ft.Kind() == reflect.Map:
				lists = append(lists, prefix+key)
			case ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshaler):
				walk(ft, prefix+key+".")
			default:
				keys = append(keys, prefix+key)
			}
			return true
		})
	}
	walk(reflect.TypeFor[Config](), "")
	return keys, lists
}

// envName is the environment variable that reaches setting key:
// LAGBRIDGE_ and the key in capitals, dots and dashes as underscores.
func envName(key string) string {
	return "LAGBRIDGE_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// notSettings are the LAGBRIDGE_* variables that lagbridge reads and that
// are no setting of the daemon: the CLI's (status, why, ...), and those of
// the tests, the bench and integration/kafka/kafka.sh. TestNotSettingsKnown
// keeps the list whole.
var notSettings = []string{
	"LAGBRIDGE_URL", "LAGBRIDGE_TOKEN",
	"LAGBRIDGE_KAFKA_BOOTSTRAP", "LAGBRIDGE_KAFKA_HOME", "LAGBRIDGE_KAFKA_RUN", "LAGBRIDGE_KAFKA_SH", "LAGBRIDGE_KAFKA_MVN_ARGS",
	"LAGBRIDGE_REQUIRE_KAFKA", "LAGBRIDGE_REQUIRE_CHROMIUM", "LAGBRIDGE_REQUIRE_TOOLS", "LAGBRIDGE_CHROMIUM",
	"LAGBRIDGE_TEST_LOGS", "LAGBRIDGE_UPDATE", "LAGBRIDGE_ARTIFACTS", "LAGBRIDGE_BENCH_BROKER",
	"LAGBRIDGE_HA_TRACE", "LAGBRIDGE_HA_AA", "LAGBRIDGE_HA_COMMIT", "LAGBRIDGE_HA_NO_CLIENT_QUOTAS",
	"LAGBRIDGE_SIM_SPREAD", "LAGBRIDGE_SIM_SPREAD_TRACE", "LAGBRIDGE_STARTUP_TRACE",
	"LAGBRIDGE_NEWTOPIC_CALLS", "LAGBRIDGE_NEWTOPIC_PARTITIONS", "LAGBRIDGE_NEWTOPIC_PAR",
}

// ignoredEnv returns, one sentence each, the LAGBRIDGE_* variables of
// environ (KEY=value) that no setting reads and that are not notSettings:
// viper passes over them without a word, so LAGBRIDGE_LISTN=:9000 would
// leave the daemon on :9464. A name within a letter or two of a setting's
// is said with it; one under a list's name (LAGBRIDGE_QUOTA_POLICIES_0_MAXAGE)
// is said to be out of the environment's reach.
//
// read are the keys viper knows (from the file, defaults, bindings):
// AutomaticEnv lets LAGBRIDGE_<KEY> override each of them, lists and
// <key>File secrets the file sets included, so those are not ignored.
func ignoredEnv(environ, read []string) []string {
	keys, lists := envSettings()
	names := []string{"LAGBRIDGE_CONFIG"}
	for _, k := range keys {
		names = append(names, envName(k))
	}
	names = append(names, notSettings...)
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	for _, k := range read {
		known[envName(k)] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LAGBRIDGE_") || known[name] {
			continue
		}
		msg := fmt.Sprintf("environment: %s is not a setting and is ignored", name)
		if i := slices.IndexFunc(lists, func(l string) bool { return name == envName(l) || strings.HasPrefix(name, envName(l)+"_") }); i >= 0 {
			msg += fmt.Sprintf(": %s is a list, which only the config file sets", lists[i])
		} else if near := nearestKey(strings.TrimPrefix(name, "LAGBRIDGE_"), suffixes(names)); near != "" {
			msg += fmt.Sprintf(" (did you mean LAGBRIDGE_%s?)", near)
		}
		out = append(out, msg)
	}
	slices.Sort(out)
	return out
}

// suffixes returns names without their LAGBRIDGE_ prefix, so that a hint
// is a letter or two from the part the user typed, not from the prefix.
func suffixes(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.TrimPrefix(n, "LAGBRIDGE_")
	}
	return out
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// elemType is t without the pointers, slices, arrays and maps around it.
func elemType(t reflect.Type) reflect.Type {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		default:
			return t
		}
	}
}

// settingOf returns the field of struct t whose setting is name (keys are
// not case-sensitive).
func settingOf(t reflect.Type, name string) (reflect.StructField, bool) {
	var found reflect.StructField
	ok := false
	eachSetting(t, func(key string, f reflect.StructField) bool {
		if strings.EqualFold(key, name) {
			found, ok = f, true
		}
		return !ok
	})
	return found, ok
}

// eachSetting calls fn with the key and field of each setting of struct t
// (the mapstructure tag's name, else the field's name in the file's
// spelling; squashed structs' settings as their own), until fn returns
// false. It reports whether it went through all of them.
func eachSetting(t reflect.Type, fn func(key string, f reflect.StructField) bool) bool {
	if t.Kind() != reflect.Struct {
		return true
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && strings.Contains(opts, "squash") {
			if !eachSetting(elemType(f.Type), fn) {
				return false
			}
			continue
		}
		if tag == "" {
			tag = fileSpelling(f.Name)
		}
		if !fn(tag, f) {
			return false
		}
	}
	return true
}

// nearestKey returns the one key of keys within a letter or two of key
// (case aside: at most a quarter of key's letters, and at least one,
// added, dropped or changed), or "" when none or several are.
func nearestKey(key string, keys []string) string {
	best, bestD, tie := "", max(1, len(key)/4)+1, false
	for _, k := range keys {
		switch d := editDistance(strings.ToLower(key), strings.ToLower(k)); {
		case d < bestD:
			best, bestD, tie = k, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the number of letters added, dropped, changed or swapped
// with their neighbour that turn a into b (the optimal string alignment
// distance), in bytes: "kafak" is one from "kafka".
func editDistance(a, b string) int {
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(a); i++ {
		pp, prev, cur := rows[(i+2)%3], rows[i%3], rows[(i+1)%3] // rows i-2, i-1, i
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pp[j-2]+1)
			}
		}
	}
	return rows[(len(a)+1)%3][len(b)]
}

var (
	producerEntry = regexp.MustCompile(`^quota\.policies\[\d+\]\.producers\[\d+\]$`)
	invalidKeys   = regexp.MustCompile(`^'([^']*)' has invalid keys: (.+)$`)
	quotedPath    = regexp.MustCompile(`^'([^']+)' (.+)$`)
)

// Validate reports every problem at once, joined; nil when c is valid.
func (c Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen", "%q is not host:port: %v", c.Listen, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		add("listen", "port %q is not a number from 0 to 65535", port)
	}
	if c.Interval < 100*time.Millisecond || c.Interval > time.Minute {
		add("interval", "must be from 100ms to 1m, got %v", c.Interval)
	}
	// Not under 250 ms: a consumer's fresh report qualifies a target for
	// the engaged cadence (lag.State.MovesWithin) and reporters send one
	// every 250 ms (consumerclient.DefaultInterval); over shorter spans a
	// reported position reads as moved by a whole poll or not at all
	// (daemon's minEarlySpan).
	if c.EngagedInterval != 0 && (c.EngagedInterval < 250*time.Millisecond || c.EngagedInterval > time.Minute) {
		add("engagedInterval", "must be from 250ms to 1m (equal to the interval or more: off), got %v", c.EngagedInterval)
	}
	if c.NearCapacity != nil && *c.NearCapacity && c.EngagedCadence() >= c.Interval && c.Interval >= 100*time.Millisecond {
		e, set := c.engagedAsked(), ""
		if c.EngagedInterval == 0 {
			set = " (its default at this interval)"
		}
		add("nearCapacity", "true needs the engaged cadence, which is off: engagedInterval %v%s is not shorter than the interval %v; set a shorter engagedInterval, or leave nearCapacity unset",
			e, set, c.Interval)
	}
	if c.ShutdownTimeout <= 0 {
		add("shutdownTimeout", "must be positive, got %v", c.ShutdownTimeout)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Log.Level)); err != nil {
		add("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		add("log.format", "%q is not text or json", c.Log.Format)
	}
	for name, d := range map[string]time.Duration{"lagAge": c.Rules.LagAge, "stallAfter": c.Rules.StallAfter, "staleAfter": c.Rules.StaleAfter, "rateWindow": c.Rules.RateWindow,
		"abandonAfter": c.Rules.AbandonAfter, "reportFresh": c.Rules.ReportFresh} {
		if d < 0 {
			add("rules."+name, "must not be negative, got %v", d)
		}
	}
	if sa := c.Rules.StaleAfter; sa > 0 {
		for _, n := range c.ObservedNATS() {
			if gap := n.MaxReadingAge(); sa <= gap {
				add("rules.staleAfter", "%v is not longer than NATS cluster %q's longest gap between fresh readings (%v: infoInterval plus its jitter, plus a cycle): its targets would turn stale between refreshes; set more than %v, or leave staleAfter unset (its default covers it)",
					sa, n.Cluster, gap, gap)
			}
		}
	}
	if len(c.Kafka)+len(c.NATS) == 0 {
		add("kafka, nats", "no cluster to watch: configure at least one")
	}
	seen := map[string]string{}
	cluster := func(path, name string) {
		if name == "" {
			return
		}
		if prev, ok := seen[name]; ok {
			add(path+".cluster", "%q is already the name of %s; cluster names must be unique", name, prev)
		}
		seen[name] = path
	}
	for i, k := range c.Kafka {
		path := fmt.Sprintf("kafka[%d]", i)
		cluster(path, k.Cluster)
		errs = append(errs, split(brokers.InSection(k.Validate(), path))...)
	}
	for i, n := range c.NATS {
		path := fmt.Sprintf("nats[%d]", i)
		cluster(path, n.Cluster)
		errs = append(errs, split(brokers.InSection(n.Validate(), path))...)
	}
	errs = append(errs, c.Quota.validate(c)...)
	errs = append(errs, c.HA.validate(c)...)
	if err := enforce.ValidateRules(c.TTL.Enforce, c.Quota.Policies); err != nil {
		errs = append(errs, split(err)...)
	}
	if c.TTL.StreamCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("ttl.streamCheckInterval: must not be negative"))
	}
	if err := c.History.Validate(); err != nil {
		errs = append(errs, split(err)...)
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, split(err)...)
	}
	return errors.Join(errs...)
}

// kvBucket is what NATS accepts as a KV bucket name.
var kvBucket = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (q Quota) validate(c Config) []error {
	var errs []error
	if _, err := quota.NewPolicies(q.Policies); err != nil {
		errs = append(errs, split(quota.PrefixFields(err, "quota."))...)
	}
	if q.LeaseLifetime < 0 || (q.LeaseLifetime > 0 && q.LeaseLifetime < 2*c.Interval) {
		errs = append(errs, fmt.Errorf("quota.leaseLifetime: must be at least two intervals (%v), got %v", 2*c.Interval, q.LeaseLifetime))
	}
	if q.MaxProducers < 0 || q.MaxProducers > 1000000 {
		errs = append(errs, fmt.Errorf("quota.maxProducers: must be from 1 to 1000000 (0 means %d), got %d", engine.DefaultMaxProducers, q.MaxProducers))
	}
	if err := q.Auth.Validate(); err != nil {
		for _, e := range split(err) {
			errs = append(errs, fmt.Errorf("quota.%w", e))
		}
	}
	// Any token turns authentication on for every endpoint: admin tokens
	// alone would refuse every producer's report (401), and producers would
	// silently fall back to their safe quota.
	if len(q.Auth.AdminTokens) > 0 && len(q.Auth.Tokens) == 0 {
		errs = append(errs, fmt.Errorf("quota.auth.adminTokens: set without quota.auth.tokens, which would turn authentication on and refuse every producer; add producer tokens (producers: [\"*\"] with maxIds: N lets a token act for any N producers at once) or remove adminTokens"))
	}
	if err := quotaserver.RefuseOpen(c.Listen, q.Auth); err != nil {
		errs = append(errs, fmt.Errorf("quota.auth: %w", err))
	}
	if q.MaxStreams < 0 {
		errs = append(errs, fmt.Errorf("quota.maxStreams: must not be negative (0: the default, %d)", quotaserver.DefaultMaxStreams))
	}
	if q.MaxLongPolls < 0 {
		errs = append(errs, fmt.Errorf("quota.maxLongPolls: must not be negative (0: the default, %d)", quotaserver.DefaultMaxLongPolls))
	}
	if q.NATSKV.Bucket != "" && !kvBucket.MatchString(q.NATSKV.Bucket) {
		errs = append(errs, fmt.Errorf("quota.natsKV.bucket: %q is not a NATS KV bucket name (letters, digits, - and _)", q.NATSKV.Bucket))
	}
	if q.NATSKV.Cluster != "" && !slices.ContainsFunc(c.NATS, func(n nats.Config) bool { return n.Cluster == q.NATSKV.Cluster }) {
		errs = append(errs, fmt.Errorf("quota.natsKV.cluster: %q is not the name of a nats cluster", q.NATSKV.Cluster))
	}
	if q.KafkaClientQuotas.BytesPerMessage < 0 {
		errs = append(errs, fmt.Errorf("quota.kafkaClientQuotas.bytesPerMessage: must not be negative"))
	}
	return errs
}

// unreportableIDs warns about each producer policy p (quota.policies[i])
// lists whose id the quota protocol refuses (quotaproto.ValidProducer:
// 1-128 characters of A-Z a-z 0-9 . _ : -): no SDK and no report can
// use it, so the entry serves nobody, unless the policy sets Kafka client
// quotas, where it is the client.id of a plain Kafka client.
func unreportableIDs(i int, p quota.Policy) []string {
	var out []string
	for j, pr := range p.Producers {
		if pr.ID == "" || quotaproto.ValidProducer(pr.ID) {
			continue
		}
		what := "so this entry serves nobody"
		if p.KafkaClientQuota {
			what = "so it reaches only a plain Kafka client with this client.id, through its client quota"
		}
		out = append(out, fmt.Sprintf("quota.policies[%d].producers[%d].id: %q is not a producer id the SDK or the quota protocol accepts (1-128 characters of A-Z a-z 0-9 . _ : -), %s",
			i, j, pr.ID, what))
	}
	return out
}

// split flattens a joined error.
func split(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, split(e)...)
		}
		return out
	}
	return []error{err}
}

// Logger builds the slog logger c.Log asks for, writing to w.
func (c Config) Logger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// clustersMatched counts the Kafka and the NATS clusters of c that p's
// match.kind and match.cluster select (its topic and group patterns aside).
func (c Config) clustersMatched(p quota.Policy) (kafkaHits, natsHits int) {
	// The match's kind and cluster alone, so that a policy with a problem
	// elsewhere (a hardAge below its maxAge) is still told it matches no
	// cluster: `lagbridge check` prints warnings beside the problems.
	m := quota.Policy{Name: p.Name, Match: quota.Match{Kind: p.Match.Kind, Cluster: p.Match.Cluster}, MaxAge: time.Second}
	ps, err := quota.NewPolicies([]quota.Policy{m})
	if err != nil {
		return -1, -1 // invalid: Validate says why
	}
	for _, k := range c.Kafka {
		if _, ok := ps.Match(lag.Target{Kind: lag.KindKafka, Cluster: k.Cluster}); ok {
			kafkaHits++
		}
	}
	for _, n := range c.NATS {
		if _, ok := ps.Match(lag.Target{Kind: lag.KindNATS, Cluster: n.Cluster}); ok {
			natsHits++
		}
	}
	return kafkaHits, natsHits
}

// clusterList names c's clusters with their kinds: "kafka main, nats js".
func (c Config) clusterList() string {
	var names []string
	name := func(kind, cluster string) string {
		if cluster == "" {
			cluster = "(unnamed)" // an entry that failed to decode, said above
		}
		return kind + " " + cluster
	}
	for _, k := range c.Kafka {
		names = append(names, name("kafka", k.Cluster))
	}
	for _, n := range c.NATS {
		names = append(names, name("nats", n.Cluster))
	}
	return strings.Join(names, ", ")
}

// Warnings returns what is valid but unsafe in c, one sentence each, for
// `lagbridge check` to print and `lagbridge run` to log at start: broker
// certificates not verified, an open quota protocol beyond loopback,
// bearer tokens over plain HTTP beyond loopback, producer grants on
// /metrics, a policy that lists nobody (also one asking for Kafka client
// quotas, which go by the listed producers' client.ids), a listed id
// that no SDK or report may use, a policy that matches none of the
// clusters (or asks for Kafka client quotas and matches no Kafka cluster),
// and, for a Config from Load, a LAGBRIDGE_* variable that no setting reads
// (misspelt, or naming a list's element). Nil when there is nothing to say.
func (c Config) Warnings() []string {
	out := slices.Clone(c.ignoredEnv)
	for i, k := range c.Kafka {
		if k.TLS.InsecureSkipVerify {
			out = append(out, fmt.Sprintf("kafka[%d].tls.insecureSkipVerify: the certificates of cluster %q are not verified: anyone on the network path can pose as the brokers; for tests only", i, k.Cluster))
		}
	}
	for i, n := range c.NATS {
		if n.TLS.InsecureSkipVerify {
			out = append(out, fmt.Sprintf("nats[%d].tls.insecureSkipVerify: the certificates of cluster %q are not verified: anyone on the network path can pose as the servers; for tests only", i, n.Cluster))
		}
	}
	loopback := quotaserver.Loopback(c.Listen)
	a := c.Quota.Auth
	if a.Mode == quotaserver.AuthNone && !loopback {
		out = append(out, fmt.Sprintf("quota.auth.mode: none on %s: anyone who can reach it may report demand for any producer id and read its grant", c.Listen))
	}
	if (!a.Open() || len(a.ReadTokens) > 0) && !c.TLS.Enabled() && !loopback {
		out = append(out, fmt.Sprintf("tls: bearer tokens travel in clear text to %s: set tls.certFile and tls.keyFile, or terminate TLS in front of the daemon", c.Listen))
	}
	if c.Metrics.ProducerGrants {
		out = append(out, "metrics.producerGrants: every producer's id and grant is on /metrics, which needs no token")
	}
	for i, p := range c.Quota.Policies {
		if len(p.Producers) == 0 && p.Unlisted == (quota.Unlisted{}) {
			out = append(out, fmt.Sprintf("quota.policies[%d].producers: policy %q lists nobody, so every producer of its topics is unlisted: the first %d per topic share it at SHEDDABLE and later ones are stopped; list the producers (and their criticality) it should serve, or set unlisted to say so",
				i, p.Name, p.Unlisted.Limit()))
		}
		kafkaHits, natsHits := c.clustersMatched(p)
		if kafkaHits+natsHits == 0 {
			out = append(out, fmt.Sprintf("quota.policies[%d].match: policy %q matches none of the clusters this config watches (%s), so it limits no producer: check its match.cluster (an anchored regexp) and match.kind",
				i, p.Name, c.clusterList()))
		} else if p.KafkaClientQuota && kafkaHits == 0 {
			out = append(out, fmt.Sprintf("quota.policies[%d].kafkaClientQuota: policy %q matches no Kafka cluster of this config, so it sets no Kafka client quota",
				i, p.Name))
		}
		if p.KafkaClientQuota && len(p.Producers) == 0 {
			out = append(out, fmt.Sprintf("quota.policies[%d].kafkaClientQuota: policy %q lists no producer, so it sets no Kafka client quota: the broker throttles by the client.id of each producer a policy lists",
				i, p.Name))
		}
		out = append(out, unreportableIDs(i, p)...)
	}
	return out
}
