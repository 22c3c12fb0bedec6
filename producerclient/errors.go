package producerclient

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/contract"
)

// The three signals a rejection carries. Every [*RejectError] matches
// exactly one of them with errors.Is, according to its Signal field.
var (
	// ErrSlowDown: the topic is over its quota or the broker is pushing
	// back; the message may be retried, no sooner than RetryAfter when
	// that is set.
	ErrSlowDown = errors.New("producerclient: slow down")
	// ErrStop: retrying will not help (the quota says stop, the message
	// would be dead on arrival, the broker refused it for good, or the
	// producer is closed). Do not retry this message.
	ErrStop = errors.New("producerclient: stop, retrying will not help")
	// ErrAvoidPartitions (try elsewhere): this partition (or replica) is
	// busy but others are not; the message may succeed on another
	// partition or subject.
	ErrAvoidPartitions = errors.New("producerclient: avoid partitions, try elsewhere")
	// ErrTryElsewhere is ErrAvoidPartitions, under its former name.
	//
	// Deprecated: use ErrAvoidPartitions.
	ErrTryElsewhere = ErrAvoidPartitions
)

// Why a message was rejected. A [*RejectError] matches at most one of
// these besides its signal (and, for broker failures, the broker's error).
var (
	// ErrQuotaUnavailable: no valid lease and the safe quota is closed
	// (LeaseConfig.Safe). Matches ErrSlowDown too.
	ErrQuotaUnavailable = errors.New("producerclient: quota unavailable")
	// ErrClosed: the producer is closed. Matches ErrStop too.
	ErrClosed = errors.New("producerclient: producer closed")
	// ErrRateLimited: the topic's token bucket had no token in time.
	// RetryAfter is when the next token is due. Matches ErrSlowDown.
	ErrRateLimited = errors.New("producerclient: rate limited by quota")
	// ErrInFlightLimit: the topic already has MaxInFlight messages
	// outstanding. Matches ErrSlowDown.
	ErrInFlightLimit = errors.New("producerclient: in-flight limit reached")
	// ErrThrottled: adaptive throttling refused the message locally
	// because the broker has been rejecting most requests. Matches
	// ErrSlowDown.
	ErrThrottled = errors.New("producerclient: throttled locally after broker rejections")
	// ErrExpired: the message's deadline (from its context or its
	// lagbridge-deadline header) passed before it could be sent. Matches
	// ErrStop.
	ErrExpired = errors.New("producerclient: message deadline passed")
	// ErrBrokerRejected: the broker failed the message and it was not
	// (or no longer) retried. The broker's own error is wrapped too.
	ErrBrokerRejected = errors.New("producerclient: broker rejected the message")
	// ErrRetryBudgetExhausted: a retry was due but the shared retry
	// budget refused it. Comes with ErrBrokerRejected.
	ErrRetryBudgetExhausted = errors.New("producerclient: retry budget exhausted")
	// ErrInvalidOption is wrapped by every configuration error and by
	// calls with invalid arguments (a nil record, an empty topic).
	ErrInvalidOption = errors.New("producerclient: invalid option")
)

// Signal is what a lease or a rejection tells the producer: the one
// definition of package contract (the daemon's quota.Signal is the same
// type). The numeric values are stable; String returns the wire name ("ok",
// "slow-down", "stop", "avoid-partitions").
type Signal = contract.Signal

// The signals.
const (
	// SignalOK: produce within the rate. Never carried by a RejectError.
	SignalOK = contract.SignalOK
	// SignalSlowDown: over quota or pushed back; retry later.
	SignalSlowDown = contract.SignalSlowDown
	// SignalStop: do not retry.
	SignalStop = contract.SignalStop
	// SignalAvoidPartitions (try elsewhere): some partitions are busy;
	// others are fine.
	SignalAvoidPartitions = contract.SignalAvoidPartitions
	// SignalTryElsewhere is SignalAvoidPartitions, under its former name.
	//
	// Deprecated: use SignalAvoidPartitions.
	SignalTryElsewhere = SignalAvoidPartitions
)

// sentinelOf is the signal sentinel a rejection with s matches.
func sentinelOf(s Signal) error {
	switch s {
	case SignalStop:
		return ErrStop
	case SignalAvoidPartitions:
		return ErrAvoidPartitions
	}
	return ErrSlowDown
}

// RejectError is the error of every message the SDK did not deliver. It
// hands the message back (Record for Kafka, Msg for NATS) so that nothing
// is lost quietly: the caller decides whether to retry, park or drop it.
//
// errors.Is matches the sentinel of Signal (ErrSlowDown, ErrStop or
// ErrAvoidPartitions), the reason sentinel (ErrRateLimited, ErrThrottled, ...)
// and whatever Err wraps (the broker's error, a context error). Use
// errors.As to get the details.
type RejectError struct {
	// Topic is the Kafka topic or the NATS stream (the lease key).
	Topic string
	// Signal says what to do: slow down, stop, or avoid partitions (try
	// elsewhere).
	Signal Signal
	// Reason says why, in words (the lease's reason when it decided).
	// Its words change between versions: match on Rule.
	Reason string
	// Rule names the daemon's rule behind the lease that refused the
	// message ("drain", "saturated", "probe", "hard-age", ...; the list
	// is in docs/quota-control.md), a name that stays the same across
	// versions: the rule behind the lease's rate and signal. "" when no
	// lease decided (the safe quota, a deadline, a closed producer, the
	// broker), the daemon is older than protocol 1.4, or a keyed record
	// was refused for its partition under a lease whose rule is not
	// "avoid-partitions" (the partitions to avoid may come from another
	// consumer group than the rate).
	Rule string
	// RetryAfter is the earliest sensible retry, 0 for no hint. It is
	// never negative.
	RetryAfter time.Duration
	// Attempts is how many times the message was handed to the broker
	// client (0 when it was rejected before any send).
	Attempts int
	// Record is the rejected Kafka record (nil for NATS).
	Record *kgo.Record
	// Msg is the rejected NATS message (nil for Kafka).
	Msg *nats.Msg
	// Err is the underlying error, if any: the broker's, or a context's.
	Err error

	kind  error // one of the reason sentinels, or nil
	extra error // a second reason sentinel (ErrRetryBudgetExhausted), or nil
}

// Error describes the rejection in one line.
func (e *RejectError) Error() string {
	var b strings.Builder
	b.WriteString("producerclient: ")
	b.WriteString(e.Topic)
	b.WriteString(": ")
	b.WriteString(e.Signal.String())
	if e.kind != nil {
		b.WriteString(" (")
		b.WriteString(strings.TrimPrefix(e.kind.Error(), "producerclient: "))
		if e.extra != nil {
			b.WriteString("; ")
			b.WriteString(strings.TrimPrefix(e.extra.Error(), "producerclient: "))
		}
		b.WriteString(")")
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.RetryAfter > 0 {
		b.WriteString("; retry after ")
		b.WriteString(e.RetryAfter.String())
	}
	if e.Attempts > 0 {
		b.WriteString("; after ")
		b.WriteString(strconv.Itoa(e.Attempts))
		b.WriteString(" attempt(s)")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the signal sentinel, the reason sentinels and Err.
func (e *RejectError) Unwrap() []error {
	errs := make([]error, 0, 4)
	errs = append(errs, sentinelOf(e.Signal))
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.extra != nil {
		errs = append(errs, e.extra)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// reject builds a RejectError without the message (the producer sets it).
func reject(topic string, sig Signal, kind error, reason string, after time.Duration, cause error) *RejectError {
	if after < 0 {
		after = 0
	}
	return &RejectError{Topic: topic, Signal: sig, kind: kind, Reason: reason, RetryAfter: after, Err: cause}
}
