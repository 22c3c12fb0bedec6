// Package lag turns raw broker observations into lag in messages and in time,
// smoothed produce and consume rates, time to drain, and a status.
//
// It is pure: it imports only the standard library, starts no goroutines and
// does no I/O. Every function that needs the time takes it as an argument
// (now time.Time), which is what makes the control logic above it testable to
// the millisecond. A test enforces the import rule.
//
// The data flow is one way: broker adapters (brokers/kafka, brokers/nats)
// produce [Sample] values; a [Tracker] folds successive samples of a target
// into a [State]; the quota controller consumes States.
package lag

import (
	"fmt"
	"time"
)

// Kind names the broker family a target lives on.
type Kind string

// The broker kinds lagbridge observes.
const (
	KindKafka Kind = "kafka"
	KindNATS  Kind = "nats"
)

// Target is what lag is measured for: a Kafka (cluster, topic, consumer
// group) or a NATS JetStream (cluster, stream, consumer). It is comparable
// and used as a map key.
type Target struct {
	Kind    Kind   `json:"kind"`
	Cluster string `json:"cluster"`
	// Topic is the Kafka topic or the NATS stream.
	Topic string `json:"topic"`
	// Group is the Kafka consumer group or the NATS consumer name.
	Group string `json:"group"`
}

// String returns kind/cluster/topic/group, the form used in logs.
func (t Target) String() string {
	return fmt.Sprintf("%s/%s/%s/%s", t.Kind, t.Cluster, t.Topic, t.Group)
}

// Sample is one observation of one target, as a broker adapter reports it.
// It holds plain values only: adapters do the I/O, this package the math.
type Sample struct {
	Target Target
	// At is when the observation was taken (the adapter's clock).
	At time.Time
	// GroupState is the broker's word for the group or consumer state
	// ("Stable", "Empty", "active", ...). Informational.
	GroupState string
	// Members is the number of live consumers (Kafka group members, NATS
	// waiting pull requests or a bound push subscription). -1 when unknown.
	Members int
	// SkipsCounted is true when the adapter counts the consumer's skips
	// (PartitionSample.Skipped: the NATS observer subscribed to the
	// server's advisories, a server that names the term's reason); false
	// where nobody counts them, when a Skipped of 0 says nothing.
	SkipsCounted bool
	// Live says whether a consumer is attached to this target now: on
	// Kafka a group member is assigned a partition of the topic; on NATS
	// the consumer has waiting pull requests, a bound push subscription,
	// or delivered since the last reading. The zero value, LiveUnknown,
	// means the adapter cannot tell (and is treated as live).
	Live Liveness
	// LastActive, when not zero, is when the broker last saw a consumer
	// take work from this target, by the broker's clock (NATS: the
	// consumer's last delivery or acknowledgement; Kafka: zero). A
	// reading counts the target as seen live then (State.LastLive, when
	// later than what was seen, and never after At), whatever Live says:
	// the first reading of a NATS pull consumer between two fetches
	// (Live LiveNo) that delivered a moment ago is not never-live, so
	// after a daemon restart or a shard move its topic binds from that
	// first reading on.
	LastActive time.Time
	// LastAck, when not zero, is when the broker last processed an
	// acknowledgement of this target's consumer, by the broker's clock
	// (NATS: AckFloor.Last; Kafka: zero, its commits carry no time the
	// daemon reads). The Tracker keeps how long before each reading it
	// was (State.AckAge).
	LastAck time.Time
	// Partitions holds one entry per partition (Kafka) or a single entry
	// with Partition 0 (NATS). Partitions that could not be observed carry
	// Err and Stale; they keep their previous values in the State.
	Partitions []PartitionSample
	// Err is set when the whole target could not be observed this cycle.
	Err string
}

// PartitionSample is one partition's reading.
//
// The two counters that matter are End and Lag. End is a monotonic
// "messages ever made available to this consumer" counter (Kafka: the log end
// offset, which under read_committed is the last stable offset; NATS: an
// equivalent counter, see brokers/nats). Lag is how many of them are not yet
// consumed. Their difference End-Lag is the consumed position; the rates are
// derived from the deltas of these two. Retention removing unconsumed
// messages shows as consumption (they will never be consumed), which keeps
// lag and rates consistent.
type PartitionSample struct {
	Partition int32 `json:"partition"`
	// LogStart is the first offset (or sequence) still stored.
	LogStart int64 `json:"logStart"`
	// End is the next offset to be written (high watermark or LSO).
	End int64 `json:"end"`
	// Committed is the consumer's committed offset (the next record it
	// will read), or -1 when it never committed. A partition with no
	// commit has no known position: where the consumer would start
	// depends on its reset policy, so its lag is unknown (Kafka's
	// kafka-consumer-groups shows "-"). It carries Lag 0 and HeadKnown
	// false, and the Tracker counts it in State.Uncommitted, never in
	// Lag, HeadAge or the rates.
	Committed int64 `json:"committed"`
	// Lag is the number of unconsumed messages, never negative; 0 when
	// Committed is -1 (unknown, see Committed).
	Lag int64 `json:"lag"`
	// HeadTime is the timestamp of the oldest unconsumed message: the
	// first consumable record at or after the consumer's position (which
	// skips transaction markers, aborted records and compacted-away
	// offsets). Zero when Lag is 0 or when unknown.
	HeadTime time.Time `json:"headTime,omitzero"`
	// HeadKnown reports whether HeadTime was read (true with Lag 0: there
	// is no head to know; false without a commit). A partition with lag
	// whose head could not be read keeps the previous head time if its
	// position did not move. The position is the larger of Committed and
	// LogStart: retention moves it past a commit it deleted.
	HeadKnown bool `json:"headKnown"`
	// AckPending and Redelivered are NATS-only detail: messages delivered
	// but not yet acknowledged (already part of Lag), and messages
	// redelivered at least once. Zero on Kafka.
	AckPending  int64 `json:"ackPending,omitempty"`
	Redelivered int64 `json:"redelivered,omitempty"`
	// Stale is true when this partition's values are not from this cycle.
	Stale bool `json:"stale,omitempty"`
	// Err says why this partition could not be (fully) observed.
	Err string `json:"err,omitempty"`
	// Skipped is how many messages of this partition the consumer
	// terminated as expired since the adapter's previous reading: the
	// ttl guard's skips, which cost the consumer nothing and are no
	// measure of its capacity. NATS only, counted from the server's
	// MSG_TERMINATED advisories (see brokers/nats); 0 where nobody
	// counts them (Kafka, a server too old to say why). Already part of
	// the consumption End-Lag shows. A reading repeated with the same At
	// counts nothing again.
	Skipped int64 `json:"skipped,omitempty"`
	// Reported is what the consumer itself last said of this partition
	// over the quota protocol, merged in by the daemon while it is fresh;
	// the zero value when it said nothing. While present it overrides the
	// position estimated from commits.
	Reported Report `json:"reported,omitzero"`
}

// Liveness is whether a consumer is attached to a target (see
// [Sample.Live]).
type Liveness uint8

const (
	// LiveUnknown: the adapter cannot tell; treated as live.
	LiveUnknown Liveness = iota
	// LiveYes: a consumer is attached now.
	LiveYes
	// LiveNo: no consumer is attached now.
	LiveNo
)

// MarshalText returns String's word, so JSON shows "live", not 1.
func (l Liveness) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads String's words back; anything else is an error.
func (l *Liveness) UnmarshalText(b []byte) error {
	switch string(b) {
	case "unknown":
		*l = LiveUnknown
	case "live":
		*l = LiveYes
	case "idle":
		*l = LiveNo
	default:
		return fmt.Errorf("lag: liveness %q is not unknown, live or idle", b)
	}
	return nil
}

// String returns "unknown", "live" or "idle".
func (l Liveness) String() string {
	switch l {
	case LiveYes:
		return "live"
	case LiveNo:
		return "idle"
	}
	return "unknown"
}

// Report is a consumer's own account of one partition (Kafka) or of its
// position in a stream (NATS, Partition 0), as sent over the quota
// protocol. It is the second source of truth beside the broker's commits.
type Report struct {
	// At is when the consumer made the report (the daemon's receive time
	// when the consumer's clock cannot be trusted). Zero: no report.
	At time.Time `json:"at,omitzero"`
	// Position is the next offset (Kafka) or stream sequence (NATS) the
	// consumer will process: everything before it is handled.
	Position int64 `json:"position"`
	// HeadTime is the produce timestamp of the message the consumer is
	// processing now, or zero when it is idle (caught up).
	HeadTime time.Time `json:"headTime,omitzero"`
	// Held is how many messages the consumer had in hand from Position
	// on, and HeldFor how long it had gone without finishing one of them
	// (since it took them, or last finished one) when it reported; 0:
	// not reported (an older reporter, a NATS consumer of several
	// members). With HeadTime
	// only. It finished fewer than Held in HeldFor: an upper bound of
	// what it consumes while its position stands still.
	Held    int64         `json:"held,omitempty"`
	HeldFor time.Duration `json:"heldFor,omitempty"`
	// Skipped is the reporter's running count of the messages of this
	// partition it skipped as expired (the ttl guard) when SkipsGiven,
	// and Member the reporting member's name: the Tracker adds the
	// growth of the count between two back-to-back readings of the same
	// member that both carry it to the partition's Skipped, at most the
	// partition's move (a new member, a count that went back, or a
	// report without it restarts it). Kafka only; not given: 0, false.
	Skipped    int64  `json:"skipped,omitempty"`
	SkipsGiven bool   `json:"skipsGiven,omitempty"`
	Member     string `json:"member,omitempty"`
	// OwnPace is the reporter's word that it finishes this partition's
	// messages at the partition's own pace, each reported as it is
	// finished (quotaproto.ConsumerPartition.OwnPace, protocol 1.6): its
	// moves are its own consumer's drain, not a poll loop's. Kafka only.
	OwnPace bool `json:"ownPace,omitempty"`
}

// IsZero reports whether r carries no report.
func (r Report) IsZero() bool { return r.At.IsZero() }
