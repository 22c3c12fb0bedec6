// Package quotaproto is the wire format of lagbridge's quota protocol:
// plain JSON types and path names shared by the daemon (which serves it) and
// the producer SDK (which speaks it). The full description, with every
// status code, is docs/quota-protocol.yaml (OpenAPI 3.1).
//
// It imports only the standard library, so any Go producer can speak the
// protocol without the SDK and the SDK never depends on the daemon.
//
// The protocol in three calls:
//
//	POST /v1/leases          a producer reports its topics and demand and
//	                         receives its LeaseSet (register and refresh)
//	GET  /v1/leases/watch    long-poll: returns as soon as the producer's
//	                         LeaseSet version differs from ?version=, or
//	                         after ?timeout= with the same set (200 either way)
//	GET  /v1/leases/stream   server-sent events: one "leases" event with the
//	                         LeaseSet at once and at every change
//
// Consumers have a call of their own, POST /v1/consumers/report
// ([ConsumerReport]): where they really are, per partition.
//
// A producer identifies itself with ?producer= (watch, stream) or in the
// body (report). When the daemon requires bearer tokens, a token may only
// act for the producers it is configured for.
package quotaproto

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Paths of the protocol, relative to the daemon's base URL.
const (
	PathLeases = "/v1/leases"
	PathWatch  = "/v1/leases/watch"
	PathStream = "/v1/leases/stream"
	// PathQuotas is the operators' view of every current grant.
	PathQuotas = "/v1/quotas"
)

// Limits the daemon enforces on requests; requests beyond them get 400 or
// 413 before any other work is done.
const (
	MaxBodyBytes     = 64 << 10
	MaxTopics        = 256
	MaxWatchWait     = 60 * time.Second
	DefaultWatchWait = 30 * time.Second
)

// Signals a lease carries: the three a rejection should carry, and ok.
// These are the wire names of package contract's Signal values (the one
// definition of the signals, whose String returns them).
const (
	// SignalOK: produce within Rate.
	SignalOK = "ok"
	// SignalSlowDown: the queue is over its deadline; produce at most at
	// Rate and retry rejected messages no sooner than RetryAfterMs.
	SignalSlowDown = "slow-down"
	// SignalStop: retrying will not help (messages would be dead on
	// arrival, or the consumer is stopped). Fail fast; do not retry.
	SignalStop = "stop"
	// SignalAvoidPartitions (try elsewhere): a few partitions are behind
	// while the rest are fine; records without a key should go elsewhere.
	SignalAvoidPartitions = "avoid-partitions"
)

// Criticality names, most important first (as in Google's SRE book): the
// wire names of package contract's Criticality values, as the
// lagbridge-criticality header and a report's criticality spell them.
const (
	CriticalPlus  = "CRITICAL_PLUS"
	Critical      = "CRITICAL"
	SheddablePlus = "SHEDDABLE_PLUS"
	Sheddable     = "SHEDDABLE"
)

// Report is the body of POST /v1/leases.
type Report struct {
	// Producer is the producer's stable id: 1-128 characters of
	// [A-Za-z0-9._:-]. Required.
	Producer string `json:"producer"`
	// Topics the producer writes (Kafka topics or NATS streams), each with
	// the demand it sees. At most MaxTopics.
	Topics []TopicDemand `json:"topics"`
}

// TopicDemand is one topic a producer writes and what it would like to send.
type TopicDemand struct {
	// Topic is the Kafka topic or NATS stream name. Required.
	Topic string `json:"topic"`
	// Criticality of this producer's traffic on the topic; empty means
	// CRITICAL.
	Criticality string `json:"criticality,omitempty"`
	// Demand is the rate, in messages per second, that the producer was
	// asked to send over its last report window (admitted or not); 0 means
	// unknown, which the allocator treats as "wants its full share",
	// unless Measured says the producer counted none.
	Demand float64 `json:"demand"`
	// Measured (protocol 1.7), with Demand 0: the producer measured its
	// demand over the window and was asked for no message (it is idle on
	// the topic), so its 0 takes nothing from the others. False or absent:
	// a 0 is unknown, as before 1.7. A daemon older than 1.7 refuses the
	// field (RefusesMeasured); the SDK then reports without it.
	Measured bool `json:"measured,omitempty"`
}

// RefusesMeasured says whether a daemon's error text (ErrorBody.Error of
// a 400 to a demand report) refuses the report for its measured field as
// unknown: a daemon older than protocol 1.7, whose strict decoder answers
// "malformed body: topics[].measured: unknown field", or, before that
// decoder (2026-12-01), encoding/json's DisallowUnknownFields:
// "malformed report: json: unknown field \"measured\"".
func RefusesMeasured(errText string) bool {
	return strings.Contains(errText, "topics[].measured: unknown field") ||
		strings.Contains(errText, `unknown field "measured"`)
}

// LeaseSet is a producer's current leases, one per reported topic.
type LeaseSet struct {
	Producer string `json:"producer"`
	// Version changes whenever any lease of the set changes materially.
	Version uint64  `json:"version"`
	Leases  []Lease `json:"leases"`
	// RefreshAfterMs is when to report again (jittered by the daemon).
	RefreshAfterMs int64 `json:"refreshAfterMs"`
}

// Lease is the quota of one producer on one topic.
type Lease struct {
	Topic string `json:"topic"`
	// Rate is the allowed rate in messages per second; null means
	// unlimited (the queue is healthy).
	Rate *float64 `json:"rate"`
	// Burst is how many messages may go at once above Rate (token bucket
	// size); 0 with a non-null Rate means max(1, Rate/10).
	Burst int `json:"burst"`
	// Signal is one of the Signal* constants.
	Signal string `json:"signal"`
	// RetryAfterMs is the slow-down hint: wait at least this long before
	// retrying a rejected message. 0 means no hint.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	// AvoidPartitions lists the partitions keyless records should avoid.
	AvoidPartitions []int32 `json:"avoidPartitions,omitempty"`
	// PartitionShares (protocol 1.1) gives some partitions of
	// AvoidPartitions the share of keyless records they still get
	// instead of none; sorted by partition.
	PartitionShares []PartitionShare `json:"partitionShares,omitempty"`
	// Advisory is true when the matching policy is in advise mode: the
	// SDK reports but does not enforce.
	Advisory bool `json:"advisory,omitempty"`
	// Version of this lease; ExpiresAt is when the SDK must stop trusting
	// it without a refresh (fail-static until then).
	Version   uint64    `json:"version"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Reason explains the lease in words, for logs and errors. Its words
	// change between versions; match on Rule instead.
	Reason string `json:"reason,omitempty"`
	// Rule (protocol 1.4) names the controller's rule behind the topic
	// decision this lease is a share of ("drain", "saturated", "probe",
	// ...; docs/quota-control.md lists them): a name that stays the
	// same across versions, for programs and alerts. Empty when the
	// lease is not a share of a decision (an unlisted producer refused,
	// a provisional share, a topic without a policy) and from a daemon
	// older than 1.4. A client keeps a name it does not know as it is.
	Rule string `json:"rule,omitempty"`
	// Then (protocol 1.2) says what follows a lease that admits less for
	// a bounded time (a pause while the consumer's capacity is measured
	// again, or while a backlog drains): from Then.At on, the lease
	// allows Then.Rate with burst Then.Burst, unless a newer lease came
	// first; never past ExpiresAt. The daemon sets Then.At later than
	// its next decision is due, so a plan takes effect only when that
	// decision did not come (a lost leader). An SDK that does not know
	// the field keeps the lease as it is until a newer one arrives.
	Then *LeasePlan `json:"then,omitempty"`
}

// LeasePlan is what a lease allows from At on (protocol 1.2): Rate in
// messages per second (finite, not negative) and Burst (0 means
// max(1, Rate/10)), as in a Lease.
type LeasePlan struct {
	At    time.Time `json:"at"`
	Rate  float64   `json:"rate"`
	Burst int       `json:"burst"`
}

// PartitionShare is the fraction, in (0, 1], of a producer's keyless
// records an avoided partition still gets: what its consumer drains, over
// the topic's produce rate.
type PartitionShare struct {
	Partition int32   `json:"partition"`
	Share     float64 `json:"share"`
}

// ErrorBody is the body of every 4xx and 5xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

var producerID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid quota protocol request")

// ValidProducer reports whether id is an acceptable producer id.
func ValidProducer(id string) bool { return producerID.MatchString(id) }

// ValidTopic reports whether name is an acceptable topic (or stream)
// name: 1-249 characters (runes) of valid UTF-8, none of them a control
// character (C0, DEL or C1: NUL, newlines, escapes), which no broker
// accepts and which would garble logs and metrics labels.
func ValidTopic(name string) bool {
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > 249 {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// ValidCriticality reports whether c is a criticality name (or empty).
func ValidCriticality(c string) bool {
	switch c {
	case "", CriticalPlus, Critical, SheddablePlus, Sheddable:
		return true
	}
	return false
}

// Validate checks a report; every problem is reported at once, each
// wrapping ErrInvalid.
func (r Report) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...)))
	}
	if !ValidProducer(r.Producer) {
		bad("producer %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", r.Producer)
	}
	if len(r.Topics) > MaxTopics {
		bad("%d topics, at most %d", len(r.Topics), MaxTopics)
	}
	seen := make(map[string]bool, len(r.Topics))
	for i, t := range r.Topics {
		if !ValidTopic(t.Topic) {
			bad("topics[%d].topic must be 1-249 characters of valid UTF-8 without control characters", i)
		}
		if seen[t.Topic] {
			bad("topics[%d].topic %q is listed twice", i, t.Topic)
		}
		seen[t.Topic] = true
		if !ValidCriticality(t.Criticality) {
			bad("topics[%d].criticality %q is not one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE", i, t.Criticality)
		}
		if t.Demand < 0 || t.Demand != t.Demand || t.Demand > 1e12 {
			bad("topics[%d].demand %v must be a rate from 0 to 1e12 messages per second", i, t.Demand)
		}
	}
	return errors.Join(errs...)
}
