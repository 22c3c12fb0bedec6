// Package ttl bounds queues in time: every message carries the deadline after
// which nobody will use its result, and its criticality, so that brokers and
// consumers can skip dead work instead of doing it late.
//
// This file defines the one header format lagbridge writes and reads, shared
// by the producer SDK (which sets the headers) and the consumer-side guard
// (which reads them). It is pure: it imports only the standard library and
// package contract (whose [Criticality] it carries), starts no goroutines,
// does no I/O, and takes the time as an argument. It must not import the
// SDK, the daemon, or any broker client; a test enforces that.
//
// # Wire format (version 1)
//
// Two headers, both plain ASCII, valid as Kafka record headers and as NATS
// message headers:
//
//	lagbridge-deadline: 1:1767225600123
//	lagbridge-criticality: CRITICAL
//
// lagbridge-deadline is "<version>:<unix milliseconds>": the format version
// (1), a colon, and the absolute deadline in milliseconds since the Unix
// epoch (UTC) as 1 to 16 decimal digits, no sign, no spaces inside.
// Milliseconds are rounded down, so a reader never sees a deadline later than
// the writer meant. A reader that meets another version must treat the
// header as absent (no deadline): versions are never reinterpreted.
//
// lagbridge-criticality is one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS,
// SHEDDABLE (the four values of Google's SRE book). Readers accept the names
// case-insensitively with '-' for '_'; writers write them as above.
//
// A message without lagbridge-criticality is CRITICAL, the default, and a
// message without lagbridge-deadline has no deadline. Writers may leave
// either header out for those values, as proto3 leaves out default fields;
// the producer SDK does, so default traffic without a deadline carries no
// header bytes at all. A reader must therefore treat absence as the
// default, never as "unknown".
//
// # Garbage in
//
// Headers come from the network and from other people's code. Every parser
// here is total: any input returns a value and, if the input was not
// well-formed, an error wrapping [ErrMalformed]. A malformed deadline means
// "no deadline" (the message is kept: losing live work is worse than doing
// some dead work); a malformed criticality means [Critical], the default. The
// caller decides whether to log or count the error; nothing panics (a fuzz
// test holds this).
package ttl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/contract"
)

// Header names. They are lower case because Kafka header keys are case
// sensitive and NATS header keys are matched exactly by nats.go's Get.
const (
	HeaderDeadline    = "lagbridge-deadline"
	HeaderCriticality = "lagbridge-criticality"
)

// DeadlineVersion is the version this package writes in lagbridge-deadline
// and the only one it reads.
const DeadlineVersion = 1

// maxDeadlineMillis bounds accepted deadlines: 16 digits of milliseconds is
// beyond year 318,000, far past anything time.Time round-trips cleanly, so
// the parser never has to think about overflow.
const maxDeadlineMillis = 9_999_999_999_999_999

// ErrMalformed is wrapped by every error of this package's parsers. The
// value they return alongside it is still usable: no deadline, or the
// default criticality.
var ErrMalformed = errors.New("ttl: malformed lagbridge header")

// ErrUnsupportedVersion is returned (wrapped) for a well-formed deadline of
// another format version. It wraps [ErrMalformed]: a reader treats it as no
// deadline.
var ErrUnsupportedVersion = fmt.Errorf("%w: unsupported version", ErrMalformed)

// Criticality says how much a message matters when there is not room for
// all of them: the one definition of package contract (the same type as
// quota.Criticality and producerclient.Criticality). The zero value is
// [Critical], the default of a message that says nothing. The numeric
// values are not in priority order; use [Criticality.Rank].
type Criticality = contract.Criticality

// The four criticalities; in priority order CriticalPlus, Critical,
// SheddablePlus, Sheddable.
const (
	// Critical is the default: production traffic whose loss users notice.
	Critical = contract.Critical
	// CriticalPlus is the most important traffic, shed last.
	CriticalPlus = contract.CriticalPlus
	// SheddablePlus is traffic that can be delayed or partly lost (batch
	// work with a deadline).
	SheddablePlus = contract.SheddablePlus
	// Sheddable is best effort, shed first.
	Sheddable = contract.Sheddable
)

// ParseCriticality parses a criticality header value with
// [contract.ParseCriticality]: the four names case-insensitively, with '-'
// for '_' and surrounding spaces. Empty input is [Critical] with no error
// (the header says nothing). Anything else is [Critical] and an error
// wrapping both [ErrMalformed] and contract.ErrUnknownName.
func ParseCriticality(v string) (Criticality, error) {
	c, err := contract.ParseCriticality(v)
	if err != nil {
		return Critical, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return c, nil
}

// AppendDeadline appends the lagbridge-deadline value for deadline to dst
// ("1:<unix millis>") and returns the extended slice. It does not allocate
// when dst has room (19 bytes suffice until year 318,000). A deadline before
// the Unix epoch is written as 1:0 (already expired).
func AppendDeadline(dst []byte, deadline time.Time) []byte {
	ms := deadline.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	if ms > maxDeadlineMillis {
		ms = maxDeadlineMillis
	}
	dst = append(dst, '1', ':')
	return strconv.AppendInt(dst, ms, 10)
}

// FormatDeadline is AppendDeadline into a new string.
func FormatDeadline(deadline time.Time) string {
	var b [24]byte
	return string(AppendDeadline(b[:0], deadline))
}

// ParseDeadline parses a lagbridge-deadline value. It returns the deadline
// (millisecond precision, in UTC) or, for anything but a well-formed version
// 1 value, the zero time and an error wrapping [ErrMalformed] (or
// [ErrUnsupportedVersion] for another version). Surrounding spaces are
// ignored; nothing else is. It never panics and does not allocate on
// success.
func ParseDeadline(v string) (time.Time, error) {
	s := strings.TrimSpace(v)
	ver, ms, ok := strings.Cut(s, ":")
	if !ok {
		return time.Time{}, fmt.Errorf("%w: deadline %s has no version (want 1:<unix millis>)", ErrMalformed, quoteShort(v))
	}
	if ver != "1" {
		if isDigits(ver) && len(ver) <= 4 {
			return time.Time{}, fmt.Errorf("%w: deadline version %s (this reader knows 1)", ErrUnsupportedVersion, ver)
		}
		return time.Time{}, fmt.Errorf("%w: deadline %s has a bad version (want 1:<unix millis>)", ErrMalformed, quoteShort(v))
	}
	if len(ms) == 0 || len(ms) > 16 || !isDigits(ms) {
		return time.Time{}, fmt.Errorf("%w: deadline %s: want 1 to 16 digits of unix milliseconds", ErrMalformed, quoteShort(v))
	}
	var n int64
	for i := 0; i < len(ms); i++ {
		n = n*10 + int64(ms[i]-'0') // 16 digits cannot overflow int64
	}
	return time.UnixMilli(n).UTC(), nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// quoteShort quotes at most 64 bytes of s for an error message, so a huge
// garbage header cannot blow up logs.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// Meta is what a message says about itself: its deadline and criticality.
// The zero value is "no deadline, CRITICAL".
type Meta struct {
	// Deadline is when the message's result stops being useful; the zero
	// time means none.
	Deadline time.Time
	// Criticality of the message; zero is Critical.
	Criticality Criticality
}

// HasDeadline reports whether m carries a deadline.
func (m Meta) HasDeadline() bool { return !m.Deadline.IsZero() }

// Remaining is the time left until the deadline at now (negative once
// passed). Without a deadline it returns the maximum duration.
func (m Meta) Remaining(now time.Time) time.Duration {
	if m.Deadline.IsZero() {
		return time.Duration(1<<63 - 1)
	}
	return m.Deadline.Sub(now)
}

// Expired reports whether m has a deadline and now is at or after it.
func (m Meta) Expired(now time.Time) bool {
	return !m.Deadline.IsZero() && !now.Before(m.Deadline)
}

// Decode reads a message's Meta from its two header values. ok flags say
// whether each header was present at all (an absent header is not an
// error). The returned Meta is always usable; err joins one error wrapping
// [ErrMalformed] per malformed header.
func Decode(deadline string, hasDeadline bool, criticality string, hasCriticality bool) (Meta, error) {
	var m Meta
	var errD, errC error
	if hasDeadline {
		m.Deadline, errD = ParseDeadline(deadline)
	}
	if hasCriticality {
		m.Criticality, errC = ParseCriticality(criticality)
	}
	if errD == nil && errC == nil {
		return m, nil
	}
	return m, errors.Join(errD, errC)
}

// NATSTTL returns the value of the NATS per-message TTL header (Nats-TTL,
// ADR-43) for a message whose deadline is remaining from now. The server accepts whole seconds or a Go duration of at
// least one second; this writes whole seconds, rounded up (the broker
// removes the message at most a second after its deadline rather than
// before it, and the deadline header stays exact). A remaining time of zero
// or less returns "1": the message is already dead, and one second is the
// shortest TTL the server accepts.
func NATSTTL(remaining time.Duration) string {
	if remaining <= time.Second {
		return "1"
	}
	s := int64(remaining / time.Second)
	if remaining%time.Second != 0 {
		s++
	}
	return strconv.FormatInt(s, 10)
}
