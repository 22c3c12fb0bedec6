package ttl

import (
	"fmt"
	"time"
)

// This file holds the rule that decides whether a message is live or dead
// work, shared by the consumer-side guards (ttl/kafkaguard, ttl/natsguard).
// Like the header codec it is pure: the caller passes the time.

// Reason says why a message is dead work. It is a small closed set; the
// zero value [Live] means the message is not expired. String returns the
// value used as the "reason" label of lagbridge_ttl_expired_total and as
// the lagbridge-expired-reason dead-letter header.
type Reason uint8

// The reasons. Their numeric values are stable only within one build: put
// [Reason.String] on the wire, never the number.
const (
	// Live: the message is not expired.
	Live Reason = iota
	// ReasonDeadline: the producer's lagbridge-deadline header has passed.
	ReasonDeadline
	// ReasonMaxAge: the message is older (now minus its broker timestamp)
	// than the target's maxAge.
	ReasonMaxAge

	numReasons
)

// NumReasons is the number of Reason values including [Live]; arrays
// indexed by Reason (like [Stats.ExpiredBy]) have this length.
const NumReasons = int(numReasons)

// ExpiredReasons lists the reasons other than [Live], in a stable order
// (for pre-creating metric series and for tests).
var ExpiredReasons = [...]Reason{ReasonDeadline, ReasonMaxAge}

var reasonNames = [...]string{
	Live:           "live",
	ReasonDeadline: "deadline",
	ReasonMaxAge:   "max-age",
}

// String returns "live", "deadline", "max-age", or "Reason(n)" for a value
// outside the set. It does not allocate for valid values.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// ParseReason parses the output of [Reason.String] (as found in a
// dead-letter header). Anything else returns [Live] and an error wrapping
// [ErrMalformed]. It never panics.
func ParseReason(s string) (Reason, error) {
	for i, n := range reasonNames {
		if s == n {
			return Reason(i), nil
		}
	}
	return Live, fmt.Errorf("%w: expiry reason %s (want live, deadline or max-age)", ErrMalformed, quoteShort(s))
}

// Rule is what a target lets its messages live. The zero value bounds
// nothing but the producer's own deadline header.
type Rule struct {
	// MaxAge bounds the age of a message: one whose broker timestamp is
	// MaxAge or more before now is dead work, whatever its headers say. It
	// is the policy's maxAge, the deadline the target's consumers really
	// use. Zero (or negative) means no age bound.
	MaxAge time.Duration
}

// Verdict is the decision of [Rule.Check] for one message. The zero value
// is a live message with no deadline at all.
type Verdict struct {
	// Reason is [Live], or why the message is dead work.
	Reason Reason
	// Meta is what the headers said. When a header was malformed its field
	// holds the default (no deadline, CRITICAL) and HeaderErr says why.
	Meta Meta
	// Deadline is the effective deadline: the earlier of Meta.Deadline and
	// timestamp + MaxAge, of those that apply. The zero time means none
	// (no deadline header and no age bound or no timestamp). A live
	// message's handler runs under a context with this deadline.
	Deadline time.Time
	// HeaderErr is non-nil when a lagbridge header was present but
	// malformed; it wraps [ErrMalformed]. The message is then judged as if
	// that header were absent (losing live work is worse than doing some
	// dead work); the guards count it as lagbridge_ttl_malformed_headers_total.
	HeaderErr error
}

// Expired reports whether the message is dead work.
func (v Verdict) Expired() bool { return v.Reason != Live }

// Remaining is the time left before the effective deadline at now
// (negative once passed), or the maximum duration when there is none.
func (v Verdict) Remaining(now time.Time) time.Duration {
	if v.Deadline.IsZero() {
		return time.Duration(1<<63 - 1)
	}
	return v.Deadline.Sub(now)
}

// Check decides whether a message whose headers decoded to m, stored by the
// broker at timestamp, is live at now.
//
// The message is expired when now is at or after its effective deadline
// (see [Verdict.Deadline]): when its deadline header has passed (reason
// [ReasonDeadline], which wins when both apply: it is the producer's own
// word) or when now - timestamp >= MaxAge (reason [ReasonMaxAge]). A
// message is live strictly before its effective deadline, so a live
// message's handler context is never already done on arrival.
//
// A zero timestamp, or one at or before the Unix epoch (Kafka writes -1
// for "no timestamp"), is unknown: no age bound applies. A timestamp in the
// future (clock skew between producer and broker) makes the age negative:
// live. Check never allocates.
func (r Rule) Check(m Meta, timestamp, now time.Time) Verdict {
	v := Verdict{Meta: m, Deadline: m.Deadline}
	if r.MaxAge > 0 && timestamp.After(unixEpoch) {
		if byAge := timestamp.Add(r.MaxAge); v.Deadline.IsZero() || byAge.Before(v.Deadline) {
			v.Deadline = byAge
		}
	}
	switch {
	case v.Deadline.IsZero() || now.Before(v.Deadline):
		v.Reason = Live
	case m.Expired(now):
		v.Reason = ReasonDeadline
	default:
		v.Reason = ReasonMaxAge
	}
	return v
}

var unixEpoch = time.Unix(0, 0)

// CheckHeaders is [Decode] followed by [Rule.Check]: it decides from the
// raw header values (the ok flags say whether each header was present) and
// the broker timestamp. A malformed header is reported in
// [Verdict.HeaderErr] and judged as absent; CheckHeaders never fails and
// never panics. It allocates only when a header is malformed (the error).
func (r Rule) CheckHeaders(deadline string, hasDeadline bool, criticality string, hasCriticality bool, timestamp, now time.Time) Verdict {
	m, err := Decode(deadline, hasDeadline, criticality, hasCriticality)
	v := r.Check(m, timestamp, now)
	v.HeaderErr = err
	return v
}
