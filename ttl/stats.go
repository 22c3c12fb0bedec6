package ttl

import "time"

// Dead-letter headers. A guard that forwards an expired message to a
// dead-letter topic or subject copies its key, value and headers and adds
// these, so the dead-letter consumer knows why and from where. Values are
// plain ASCII.
const (
	// HeaderExpiredReason is the [Reason] ("deadline" or "max-age"); parse
	// it with [ParseReason].
	HeaderExpiredReason = "lagbridge-expired-reason"
	// HeaderExpiredAt is when the guard judged the message expired, RFC
	// 3339 in UTC with milliseconds (see [FormatTime]).
	HeaderExpiredAt = "lagbridge-expired-at"
	// HeaderOriginTimestamp is the original message's broker timestamp,
	// RFC 3339 in UTC with milliseconds (the forwarded copy gets a new
	// timestamp, so that the dead-letter destination's own retention
	// applies from the forward).
	HeaderOriginTimestamp = "lagbridge-origin-timestamp"

	// Kafka origin: topic, partition and offset (decimal).
	HeaderOriginTopic     = "lagbridge-origin-topic"
	HeaderOriginPartition = "lagbridge-origin-partition"
	HeaderOriginOffset    = "lagbridge-origin-offset"

	// NATS JetStream origin: stream, stream sequence (decimal) and the
	// subject the message was published on.
	HeaderOriginStream   = "lagbridge-origin-stream"
	HeaderOriginSequence = "lagbridge-origin-seq"
	HeaderOriginSubject  = "lagbridge-origin-subject"
)

// FormatTime formats t as the dead-letter time headers carry it: RFC 3339
// in UTC with exactly three fractional digits.
func FormatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// Stats counts what a guard did with the messages it was given. Counts are
// per delivery: a message the broker delivers twice (a redelivery after a
// failed handler or a failed dead-letter forward) is counted twice. The
// zero value is an idle guard.
//
// Every received message ends in exactly one of Processed, Failed and
// Expired, so once no call is in progress
//
//	Received == Processed + Failed + Expired
//
// ([Stats.Balanced]): nothing is lost silently.
type Stats struct {
	// Received is every message handed to the guard.
	Received uint64
	// Processed is live messages whose handler returned nil.
	Processed uint64
	// Failed is live messages whose handler returned an error (surfaced to
	// the caller, never swallowed).
	Failed uint64
	// Expired is messages skipped as dead work: acknowledged (NATS) or
	// committed past (Kafka) without calling the handler.
	Expired uint64
	// ExpiredBy splits Expired by [Reason] (index [Live] stays 0).
	ExpiredBy [NumReasons]uint64
	// Late is Processed and Failed messages whose handler returned at or
	// after their effective deadline: dead work done despite the guard
	// (the message expired while being handled).
	Late uint64
	// Malformed is messages that carried a malformed lagbridge header
	// (judged as if it were absent).
	Malformed uint64
	// DeadLettered is expired messages forwarded to the dead-letter
	// destination (and acknowledged by it).
	DeadLettered uint64
	// DeadLetterFailed is expired messages whose forward failed; they are
	// not acknowledged or committed past, so the broker delivers them again.
	DeadLetterFailed uint64
	// SettleFailed is expired messages whose acknowledgement to the broker
	// failed (NATS Ack or Term); the broker may deliver them again.
	SettleFailed uint64
}

// Balanced reports whether Received == Processed + Failed + Expired.
func (s Stats) Balanced() bool { return s.Received == s.Processed+s.Failed+s.Expired }
