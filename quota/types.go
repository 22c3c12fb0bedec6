package quota

import (
	"fmt"
	"strings"

	"github.com/lagbridge/lagbridge/contract"
)

// ErrUnknownName is returned (wrapped) by the Parse functions and the
// UnmarshalText methods of [Criticality], [Signal] and [Mode] for a name they
// do not know. It is contract.ErrUnknownName.
var ErrUnknownName = contract.ErrUnknownName

// Criticality says how much a producer's traffic matters when there is not
// enough room for all of it: the one definition of package contract (the
// same type as ttl.Criticality and producerclient.Criticality). Higher
// criticality is served first (strict priority) and sheddable traffic is
// cut first. The zero value is [Critical]; use [Criticality.Rank] to order
// values.
type Criticality = contract.Criticality

// The criticalities. Listed here in numeric order; in priority order they are
// CriticalPlus, Critical, SheddablePlus, Sheddable (see [Criticalities]).
const (
	// Critical is the default: production traffic whose loss users notice.
	Critical = contract.Critical
	// CriticalPlus is the most important traffic, protected above all
	// else. A producer can only have it by being listed so in a policy.
	CriticalPlus = contract.CriticalPlus
	// SheddablePlus is traffic that can be delayed or partly lost, such
	// as batch work with a deadline.
	SheddablePlus = contract.SheddablePlus
	// Sheddable is traffic that is cut first: best effort, backfills.
	Sheddable = contract.Sheddable
)

// Criticalities lists the four criticalities in priority order, highest
// first.
var Criticalities = contract.Criticalities

// ParseCriticality is [contract.ParseCriticality]: the four names
// case-insensitively, with '-' as well as '_' ("critical-plus" works); the
// empty string is [Critical], the default; other input returns an error
// wrapping [ErrUnknownName].
func ParseCriticality(s string) (Criticality, error) { return contract.ParseCriticality(s) }

// Signal is what a quota tells a producer besides its rate: the one
// definition of package contract. The numeric values are stable (they are
// the value of the lagbridge_quota_signal metric): 0 ok, 1 slow-down, 2
// stop, 3 avoid-partitions. The zero value is [SignalOK].
type Signal = contract.Signal

// The signals.
const (
	// SignalOK: produce up to the rate; nothing is wrong.
	SignalOK = contract.SignalOK
	// SignalSlowDown: the queue is over its target or the rate binds;
	// rejected sends may be retried after RetryAfter.
	SignalSlowDown = contract.SignalSlowDown
	// SignalStop: retrying cannot help: a message produced now would be
	// dead on arrival (older than the hard age before it is consumed), or
	// the consumer is stopped.
	SignalStop = contract.SignalStop
	// SignalAvoidPartitions: a few partitions lag while the rest are
	// fine; producers without keys should write to other partitions (the
	// list travels with the signal).
	SignalAvoidPartitions = contract.SignalAvoidPartitions
)

// severity orders signals for combining: stop > slow-down >
// avoid-partitions > ok.
func severity(s Signal) int {
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

// ParseSignal is [contract.ParseSignal]: the four names case-insensitively,
// with '_' as well as '-'; other input returns an error wrapping
// [ErrUnknownName].
func ParseSignal(s string) (Signal, error) { return contract.ParseSignal(s) }

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
