// Package contract is the vocabulary of lagbridge's backpressure contract,
// defined once and shared by the daemon, the quota protocol, the producer
// SDK and the message headers:
//
//   - [Criticality]: how much a message (or a producer's traffic) matters
//     when there is not room for all of it; the four values of Google's SRE
//     book. It travels in the lagbridge-criticality header (package ttl) and
//     in a producer's report (package quotaproto), and the daemon's
//     allocator serves it in priority order (package quota).
//   - [Signal]: what a quota or a rejection tells the producer besides its
//     rate: ok, slow down, stop, or avoid these partitions (try elsewhere).
//
// The spelling of every value on the wire is the quota protocol's
// (producerclient/quotaproto's constants); String returns it, and the Parse
// functions read it back. The numeric values are stable: a Signal's is the
// value of the lagbridge_quota_signal metric.
//
// The package is pure: it imports only the standard library and the
// protocol's names (quotaproto, itself standard library only), starts no
// goroutines and does no I/O, so the pure cores (quota, ttl) may import it.
// Everything here is an immutable value, safe for concurrent use.
package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// ErrUnknownName is wrapped by the Parse functions' and UnmarshalText's
// errors for a name they do not know, and by MarshalText's for an invalid
// value.
var ErrUnknownName = errors.New("unknown name")

// Criticality says how much a message or a producer's traffic matters when
// there is not room for all of it. Higher criticality is served first
// (strict priority) and sheddable traffic is cut first.
//
// The zero value is [Critical], the default of a message or a producer that
// says nothing, so that forgetting to declare one neither promotes traffic
// above the default nor sheds it first. The numeric values are not in
// priority order: use [Criticality.Rank] to order values.
type Criticality uint8

// The criticalities, in numeric order; in priority order they are
// CriticalPlus, Critical, SheddablePlus, Sheddable (see [Criticalities]).
const (
	// Critical is the default: production traffic whose loss users notice.
	Critical Criticality = iota
	// CriticalPlus is the most important traffic, shed last. On the
	// daemon a producer has it only by being listed so in a policy.
	CriticalPlus
	// SheddablePlus is traffic that can be delayed or partly lost, such
	// as batch work with a deadline.
	SheddablePlus
	// Sheddable is best effort (backfills), shed first.
	Sheddable
)

// Criticalities lists the four criticalities in priority order, highest
// first.
var Criticalities = [4]Criticality{CriticalPlus, Critical, SheddablePlus, Sheddable}

var criticalityNames = [...]string{
	Critical:      quotaproto.Critical,
	CriticalPlus:  quotaproto.CriticalPlus,
	SheddablePlus: quotaproto.SheddablePlus,
	Sheddable:     quotaproto.Sheddable,
}

// Valid reports whether c is one of the four criticalities.
func (c Criticality) Valid() bool { return int(c) < len(criticalityNames) }

// Rank is c's priority: 0 CriticalPlus, 1 Critical, 2 SheddablePlus, 3
// Sheddable; a lower rank is served first. An invalid value ranks 4, after
// all valid ones.
func (c Criticality) Rank() int {
	switch c {
	case CriticalPlus:
		return 0
	case Critical:
		return 1
	case SheddablePlus:
		return 2
	case Sheddable:
		return 3
	}
	return 4
}

// String returns the wire name ("CRITICAL_PLUS", ...), or "Criticality(n)"
// for an invalid value. It does not allocate for valid values.
func (c Criticality) String() string {
	if c.Valid() {
		return criticalityNames[c]
	}
	return "Criticality(" + strconv.Itoa(int(c)) + ")"
}

// ParseCriticality parses a criticality name. It accepts the four names
// case-insensitively, with '-' for '_' ("critical-plus") and surrounding
// spaces. Empty input is [Critical] with no error (nothing said). Anything
// else returns [Critical] and an error wrapping [ErrUnknownName]. It never
// panics and does not allocate for the exact wire names.
func ParseCriticality(v string) (Criticality, error) {
	s := strings.TrimSpace(v)
	if s == "" {
		return Critical, nil
	}
	if i, ok := lookup(criticalityNames[:], s, func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }); ok {
		return Criticality(i), nil
	}
	return Critical, fmt.Errorf("%w: criticality %s (want CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or SHEDDABLE)", ErrUnknownName, quoteShort(v))
}

// MarshalText implements encoding.TextMarshaler with the wire name; an
// invalid value is an error wrapping [ErrUnknownName].
func (c Criticality) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("%w: criticality %d", ErrUnknownName, uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseCriticality];
// on error c is left unchanged.
func (c *Criticality) UnmarshalText(b []byte) error {
	v, err := ParseCriticality(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Signal is what a quota or a rejection tells a producer besides its rate.
// The numeric values are stable (they are the value of the
// lagbridge_quota_signal metric): 0 ok, 1 slow-down, 2 stop, 3
// avoid-partitions. The zero value is [SignalOK].
type Signal uint8

// The signals: the three a rejection should carry, and ok.
const (
	// SignalOK: produce up to the rate; nothing is wrong. Never carried by
	// a rejection.
	SignalOK Signal = iota
	// SignalSlowDown: the queue is over its target, the rate binds or the
	// broker pushes back; a rejected message may be retried, no sooner
	// than the retry-after hint.
	SignalSlowDown
	// SignalStop: retrying cannot help: a message produced now would be
	// dead on arrival (older than the hard age before it is consumed), the
	// consumer is stopped, or the broker refused the message for good.
	SignalStop
	// SignalAvoidPartitions (try elsewhere): a few partitions are busy
	// while the rest are fine; records without a key should go to other
	// partitions (a lease lists the ones to avoid).
	SignalAvoidPartitions
)

var signalNames = [...]string{
	SignalOK:              quotaproto.SignalOK,
	SignalSlowDown:        quotaproto.SignalSlowDown,
	SignalStop:            quotaproto.SignalStop,
	SignalAvoidPartitions: quotaproto.SignalAvoidPartitions,
}

// Valid reports whether s is one of the four signals.
func (s Signal) Valid() bool { return int(s) < len(signalNames) }

// String returns the wire name ("ok", "slow-down", "stop" or
// "avoid-partitions"), or "Signal(n)" for an invalid value. It does not
// allocate for valid values.
func (s Signal) String() string {
	if s.Valid() {
		return signalNames[s]
	}
	return "Signal(" + strconv.Itoa(int(s)) + ")"
}

// ParseSignal parses a signal name: the four wire names
// case-insensitively, with '_' for '-' and surrounding spaces. Anything else
// (the empty string included) returns [SignalOK] and an error wrapping
// [ErrUnknownName]. It does not allocate for the exact wire names.
func ParseSignal(v string) (Signal, error) {
	if i, ok := lookup(signalNames[:], strings.TrimSpace(v), func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "-")) }); ok {
		return Signal(i), nil
	}
	return SignalOK, fmt.Errorf("%w: signal %s (want ok, slow-down, stop or avoid-partitions)", ErrUnknownName, quoteShort(v))
}

// MarshalText implements encoding.TextMarshaler with the wire name; an
// invalid value is an error wrapping [ErrUnknownName].
func (s Signal) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: signal %d", ErrUnknownName, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseSignal]; on
// error s is left unchanged.
func (s *Signal) UnmarshalText(b []byte) error {
	v, err := ParseSignal(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// lookup finds s among names: as it is (the fast path: the exact wire
// names, no allocation), else as canon spells it. Input longer than every
// name is not canonicalized, so garbage costs no allocation either.
func lookup(names []string, s string, canon func(string) string) (int, bool) {
	longest := 0
	for i, name := range names {
		if s == name {
			return i, true
		}
		longest = max(longest, len(name))
	}
	if len(s) > longest {
		return 0, false
	}
	n := canon(s)
	for i, name := range names {
		if n == name {
			return i, true
		}
	}
	return 0, false
}

// quoteShort quotes at most 64 bytes of s for an error message, so that a
// huge garbage header cannot blow up logs.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}
