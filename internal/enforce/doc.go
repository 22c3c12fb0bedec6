// Package enforce bounds queues in time on the broker side, for the daemon.
// Both mechanisms are opt-in per policy and report what they would do
// before they do it (dry run):
//
//   - [StreamEnforcer] checks that a NATS JetStream stream's MaxAge and
//     AllowMsgTTL match the policy, reports drift, and updates the stream
//     when told to.
//   - [KafkaMover] advances the committed offsets of an EMPTY Kafka
//     consumer group past records older than the policy's hard limit, to
//     the first record younger than maxAge, and never touches a group with
//     members.
//
// The daemon decides when to call them (its cycle and config); this
// package does the broker I/O, logs every action and counts it on an
// injected prometheus.Registerer ([Metrics]). Nothing here starts a
// goroutine.
//
// It imports franz-go (kgo, kadm), nats.go's jetstream management API and
// prometheus; it must not import the producer SDK, the consumer-side
// guards, or the daemon's other packages.
package enforce

import "errors"

// Errors callers branch on (errors.Is).
var (
	// ErrGroupActive: the consumer group has members (or the broker
	// rejected the commit as coming from outside a live group). Nothing was
	// moved. A normal outcome while consumers run; log it quietly.
	ErrGroupActive = errors.New("enforce: consumer group has active members")
	// ErrInvalidArgument: a call's arguments are unusable (empty names,
	// maxAge <= 0, hardAge < maxAge).
	ErrInvalidArgument = errors.New("enforce: invalid argument")
)
