package quota

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownName is returned (wrapped) by the Parse functions and the
// UnmarshalText methods of [Criticality], [Signal] and [Mode] for a name they
// do not know.
var ErrUnknownName = errors.New("quota: unknown name")

// Criticality says how much a producer's traffic matters when there is not
// enough room for all of it. The four values are the ones of Google's
// production systems; higher criticality is served first (strict priority)
// and sheddable traffic is cut first.
//
// The zero value is [Critical], the default of a producer that says nothing,
// so that forgetting to declare a criticality neither promotes traffic above
// the default nor sheds it first. Use [Criticality.Rank] to order values; the
// numeric values are not in priority order.
type Criticality uint8

// The criticalities. Listed here in numeric order; in priority order they are
// CriticalPlus, Critical, SheddablePlus, Sheddable (see [Criticalities]).
const (
	// Critical is the default: production traffic whose loss users notice.
	Critical Criticality = iota
	// CriticalPlus is the most important traffic, protected above all
	// else. A producer can only have it by being listed so in a policy.
	CriticalPlus
	// SheddablePlus is traffic that can be delayed or partly lost, such
	// as batch work with a deadline.
	SheddablePlus
	// Sheddable is traffic that is cut first: best effort, backfills.
	Sheddable
)

// Criticalities lists the four criticalities in priority order, highest
// first.
var Criticalities = [4]Criticality{CriticalPlus, Critical, SheddablePlus, Sheddable}

var criticalityNames = [...]string{
	Critical:      "CRITICAL",
	CriticalPlus:  "CRITICAL_PLUS",
	SheddablePlus: "SHEDDABLE_PLUS",
	Sheddable:     "SHEDDABLE",
}

// Rank is the priority rank of c: 0 for CriticalPlus, 1 Critical, 2
// SheddablePlus, 3 Sheddable; a lower rank is served first. An invalid value
// ranks 4, after all valid ones.
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

// Valid reports whether c is one of the four criticalities.
func (c Criticality) Valid() bool { return int(c) < len(criticalityNames) }

// String returns the upper-case name ("CRITICAL_PLUS", ...), or
// "Criticality(n)" for an invalid value.
func (c Criticality) String() string {
	if c.Valid() {
		return criticalityNames[c]
	}
	return fmt.Sprintf("Criticality(%d)", uint8(c))
}

// ParseCriticality accepts the four names case-insensitively, with '-' as
// well as '_' ("critical-plus" works). The empty string is [Critical], the
// default. Other input returns an error wrapping [ErrUnknownName].
func ParseCriticality(s string) (Criticality, error) {
	n := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if n == "" {
		return Critical, nil
	}
	for i, name := range criticalityNames {
		if n == name {
			return Criticality(i), nil
		}
	}
	return 0, fmt.Errorf("%w: criticality %q (want CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or SHEDDABLE)", ErrUnknownName, s)
}

// MarshalText implements encoding.TextMarshaler; an invalid value is an
// error wrapping [ErrUnknownName].
func (c Criticality) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("%w: criticality %d", ErrUnknownName, uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseCriticality].
func (c *Criticality) UnmarshalText(b []byte) error {
	v, err := ParseCriticality(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Signal is what a quota tells a producer besides its rate. The numeric
// values are stable (they are the value of the lagbridge_quota_signal
// metric): 0 ok, 1 slow-down, 2 stop, 3 avoid-partitions. The zero value is
// [SignalOK].
type Signal uint8

// The signals.
const (
	// SignalOK: produce up to the rate; nothing is wrong.
	SignalOK Signal = iota
	// SignalSlowDown: the queue is over its target or the rate binds;
	// rejected sends may be retried after RetryAfter.
	SignalSlowDown
	// SignalStop: retrying cannot help: a message produced now would be
	// dead on arrival (older than the hard age before it is consumed), or
	// the consumer is stopped.
	SignalStop
	// SignalAvoidPartitions: a few partitions lag while the rest are
	// fine; producers without keys should write to other partitions (the
	// list travels with the signal).
	SignalAvoidPartitions
)

var signalNames = [...]string{
	SignalOK:              "ok",
	SignalSlowDown:        "slow-down",
	SignalStop:            "stop",
	SignalAvoidPartitions: "avoid-partitions",
}

// Valid reports whether s is one of the four signals.
func (s Signal) Valid() bool { return int(s) < len(signalNames) }

// String returns "ok", "slow-down", "stop" or "avoid-partitions", or
// "Signal(n)" for an invalid value.
func (s Signal) String() string {
	if s.Valid() {
		return signalNames[s]
	}
	return fmt.Sprintf("Signal(%d)", uint8(s))
}

// severity orders signals for combining: stop > slow-down >
// avoid-partitions > ok.
func (s Signal) severity() int {
	switch s {
	case SignalStop:
		return 3
	case SignalSlowDown:
		return 2
	case SignalAvoidPartitions:
		return 1
	}
	return 0
}

// ParseSignal accepts the four names case-insensitively, with '_' as well as
// '-'. Other input returns an error wrapping [ErrUnknownName].
func ParseSignal(s string) (Signal, error) {
	n := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", "-"))
	for i, name := range signalNames {
		if n == name {
			return Signal(i), nil
		}
	}
	return 0, fmt.Errorf("%w: signal %q (want ok, slow-down, stop or avoid-partitions)", ErrUnknownName, s)
}

// MarshalText implements encoding.TextMarshaler; an invalid value is an
// error wrapping [ErrUnknownName].
func (s Signal) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: signal %d", ErrUnknownName, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseSignal].
func (s *Signal) UnmarshalText(b []byte) error {
	v, err := ParseSignal(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Mode says whether a policy's quotas are enforced or only advised. The zero
// value "" means [ModeEnforce]: a policy is written to be enforced; set
// advise to roll one out and watch it first.
type Mode string

// The modes.
const (
	// ModeEnforce: leases bind; the SDK and the brokers enforce them.
	ModeEnforce Mode = "enforce"
	// ModeAdvise: everything is computed and published, but marked
	// advisory: SDKs report what they would have done and do not throttle,
	// and no broker-native quota is set.
	ModeAdvise Mode = "advise"
)

// Advisory reports whether m is advise.
func (m Mode) Advisory() bool { return m == ModeAdvise }

// Valid reports whether m is "", enforce or advise.
func (m Mode) Valid() bool { return m == "" || m == ModeEnforce || m == ModeAdvise }

// String returns "enforce" (also for the zero value) or "advise".
func (m Mode) String() string {
	if m == "" {
		return string(ModeEnforce)
	}
	return string(m)
}

// ParseMode accepts enforce and advise case-insensitively; the empty string
// is enforce. Other input returns an error wrapping [ErrUnknownName].
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "enforce":
		return ModeEnforce, nil
	case "advise":
		return ModeAdvise, nil
	}
	return "", fmt.Errorf("%w: mode %q (want advise or enforce)", ErrUnknownName, s)
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("%w: mode %q", ErrUnknownName, string(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseMode].
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
