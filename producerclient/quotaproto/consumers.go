package quotaproto

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The consumer half of the protocol: a consumer tells the daemon where it
// really is, so that the daemon need not guess from commits (which move
// every few seconds) or ack floors (which move per batch).
//
//	POST /v1/consumers/report   a consumer reports, per partition it owns,
//	                            the next position it will process and the
//	                            timestamp of the message it is processing
//	                            (or that it is idle); 204, no body
//
// The daemon stamps each report with its own receive time: consumer clocks
// cannot be trusted, so freshness is judged on the daemon's clock and
// HeadTimeMs is used only as what it is, a message timestamp.
const PathConsumerReport = "/v1/consumers/report"

// Limits of a consumer report, checked by [ConsumerReport.Validate]. A
// consumer that owns more partitions sends several reports (each at most
// MaxReportPartitions partitions, which keeps it under MaxBodyBytes).
const (
	MaxReportTopics     = 64
	MaxReportPartitions = 512
	maxGroupLen         = 255
	maxClusterLen       = 128
	maxTopicLen         = 249
	// maxUnixMs bounds timestamps to year 5138: far enough for any clock,
	// close enough that a time.Time built from it cannot overflow.
	maxUnixMs = 1e14
	// MaxHeld and MaxHeldMs bound ConsumerPartition.Held and HeldMs: a
	// reporter caps what it sends at them (MaxHeldMs is a day).
	MaxHeld = 1 << 30
	// MaxSkipped bounds ConsumerPartition.Skipped (2^53: exact in a
	// JSON number); a reporter stops counting there.
	MaxSkipped = 1 << 53
	MaxHeldMs  = 24 * 60 * 60 * 1000
)

// Broker kinds a consumer report names.
const (
	KindKafka = "kafka"
	KindNATS  = "nats"
)

// ConsumerReport is the body of POST /v1/consumers/report: what one
// consumer instance (a Kafka group member, a NATS JetStream client) knows of
// the partitions it is processing now. Partitions it does not own are not
// listed; a partition the daemon stops hearing about falls back to what the
// broker shows once the last report about it is no longer fresh.
type ConsumerReport struct {
	// Kind is KindKafka or KindNATS. Required.
	Kind string `json:"kind"`
	// Cluster is the daemon's name of the cluster (its config's cluster
	// name). Empty: the report applies to the group on every cluster of
	// Kind that the daemon watches.
	Cluster string `json:"cluster,omitempty"`
	// Group is the Kafka consumer group or the NATS consumer (durable)
	// name: 1-255 characters, no control characters (see ValidGroup). Required. When the daemon requires
	// tokens, it is the id the token must list (or "*").
	Group string `json:"group"`
	// Member optionally names the reporting instance (1-128 characters of
	// [A-Za-z0-9._:-]). The daemon keeps the newest report per member: the
	// instances of a NATS consumer, which share its stream, need one each
	// (their reports combine); on Kafka the newest report of a partition
	// wins whoever sent it. Empty: anonymous (all anonymous reports are
	// one member).
	Member string `json:"member,omitempty"`
	// SentAtMs is the consumer's clock when it sent the report (Unix
	// milliseconds), informational: the daemon judges freshness by its
	// own receive time. 0: not given.
	SentAtMs int64 `json:"sentAtMs,omitempty"`
	// Topics are the Kafka topics or NATS streams reported on, 1 to
	// MaxReportTopics, each listed once.
	Topics []ConsumerTopic `json:"topics"`
}

// ConsumerTopic is what a consumer reports of one topic or stream.
type ConsumerTopic struct {
	// Topic is the Kafka topic or NATS stream name, 1-249 characters.
	Topic string `json:"topic"`
	// Partitions are the partitions the consumer owns, at least one, each
	// listed once; at most MaxReportPartitions across all topics of a
	// report. A NATS stream has one partition, 0.
	Partitions []ConsumerPartition `json:"partitions"`
}

// ConsumerPartition is a consumer's position in one partition.
type ConsumerPartition struct {
	// Partition is the Kafka partition, or 0 for a NATS stream.
	Partition int32 `json:"partition"`
	// Position is the first offset (Kafka) or stream sequence (NATS) the
	// consumer has not finished: every message before it is handled.
	// >= 0.
	Position int64 `json:"position"`
	// HeadTimeMs is the timestamp (Unix milliseconds; Kafka's record
	// timestamp, NATS's stored message time) of the message at Position
	// when the consumer has it in hand (fetched, not finished): its age
	// is the age of the work in hand. 0: none. Exactly one of
	// HeadTimeMs > 0 and Idle.
	HeadTimeMs int64 `json:"headTimeMs,omitempty"`
	// Idle says the consumer has nothing in hand on this partition: it
	// finished everything it fetched and waits for more.
	Idle bool `json:"idle,omitempty"`
	// Held optionally counts the messages the consumer has in hand on
	// this partition from Position on (fetched, not finished), 1 to
	// MaxHeld; 0: not given (older reporters). Only with HeadTimeMs.
	Held int64 `json:"held,omitempty"`
	// HeldMs is how long, in milliseconds of the consumer's own clock
	// (a duration: no clock needs to agree), the consumer has gone
	// without finishing a message of its report, or since it took the
	// messages it holds (a poll), whichever is later, 0 to MaxHeldMs.
	// With Held it bounds the consumer's capacity: it finished fewer
	// than all it holds in that time. Only with Held.
	HeldMs int64 `json:"heldMs,omitempty"`
	// Skipped optionally counts the messages of this partition the
	// consumer skipped as expired (the ttl guard) since the partition
	// was assigned to the reporting member: a running count, 0 to
	// MaxSkipped. Nil (absent or null): not given (an older reporter, or a
	// sender that leaves it out for an older daemon), which is not a
	// count of 0. The count restarts when the partition is revoked and
	// assigned again, or the reporter restarts. The daemon takes the
	// growth between two back-to-back reports of the same member that
	// both carry it out of the consumption it reads as capacity (a
	// skip costs the consumer nothing), at most the partition's move;
	// a count that went back, or a report without it, counts nothing.
	Skipped *int64 `json:"skipped,omitempty"`
	// OwnPace optionally (protocol 1.6) says that the consumer finishes
	// this partition's messages at the partition's own pace, each
	// reported finished as it is (a worker per partition:
	// consumerclient's KeepUntilFinished), not in one poll loop that works
	// through every partition's polls in turn. A move of its position is
	// then its consumer's drain of it, and while the target keeps up the
	// daemon reads the partition's own wait from it (its lag over that drain) instead of
	// the poll loop's (the target's lag over the target's consumption).
	// False or absent: a poll loop, or not given (an older reporter).
	OwnPace bool `json:"ownPace,omitempty"`
}

// HeadTime returns HeadTimeMs as a time, zero when idle or unset.
func (p ConsumerPartition) HeadTime() time.Time {
	if p.HeadTimeMs <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(p.HeadTimeMs)
}

// ValidGroup reports whether g is an acceptable consumer group or NATS
// consumer name: 1-255 characters of UTF-8 without control characters
// (U+0000-U+001F, U+007F-U+009F).
func ValidGroup(g string) bool {
	if g == "" || !utf8.ValidString(g) || utf8.RuneCountInString(g) > maxGroupLen {
		return false
	}
	for _, r := range g {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

// Validate checks a consumer report; every problem is reported at once,
// each wrapping ErrInvalid.
func (r ConsumerReport) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...)))
	}
	if r.Kind != KindKafka && r.Kind != KindNATS {
		bad("kind %q must be %q or %q", r.Kind, KindKafka, KindNATS)
	}
	if !utf8.ValidString(r.Cluster) || utf8.RuneCountInString(r.Cluster) > maxClusterLen {
		bad("cluster must be at most %d characters of UTF-8", maxClusterLen)
	}
	if !ValidGroup(r.Group) {
		bad("group must be 1-%d characters without control characters", maxGroupLen)
	}
	if r.Member != "" && !ValidProducer(r.Member) {
		bad("member %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", r.Member)
	}
	if r.SentAtMs < 0 || r.SentAtMs > maxUnixMs {
		bad("sentAtMs %d must be Unix milliseconds from 0 to %d", r.SentAtMs, int64(maxUnixMs))
	}
	if len(r.Topics) == 0 || len(r.Topics) > MaxReportTopics {
		bad("%d topics, must be 1 to %d", len(r.Topics), MaxReportTopics)
	}
	parts := 0
	seen := make(map[string]bool, len(r.Topics))
	for i, t := range r.Topics {
		if !ValidTopic(t.Topic) {
			bad("topics[%d].topic must be 1-%d characters of valid UTF-8 without control characters", i, maxTopicLen)
		}
		if seen[t.Topic] {
			bad("topics[%d].topic %q is listed twice", i, t.Topic)
		}
		seen[t.Topic] = true
		if len(t.Partitions) == 0 {
			bad("topics[%d].partitions is empty: report the partitions the consumer owns", i)
		}
		parts += len(t.Partitions)
		if parts > MaxReportPartitions {
			continue // reported once below; checking more would only repeat
		}
		seenPart := make(map[int32]bool, len(t.Partitions))
		for j, p := range t.Partitions {
			at := fmt.Sprintf("topics[%d].partitions[%d]", i, j)
			switch {
			case p.Partition < 0:
				bad("%s.partition %d must be >= 0", at, p.Partition)
			case r.Kind == KindNATS && p.Partition != 0:
				bad("%s.partition %d: a NATS stream has one partition, 0", at, p.Partition)
			case seenPart[p.Partition]:
				bad("%s.partition %d is listed twice", at, p.Partition)
			}
			seenPart[p.Partition] = true
			if p.Position < 0 {
				bad("%s.position %d must be >= 0", at, p.Position)
			}
			if p.HeadTimeMs < 0 || p.HeadTimeMs > maxUnixMs {
				bad("%s.headTimeMs %d must be Unix milliseconds from 0 (none) to %d", at, p.HeadTimeMs, int64(maxUnixMs))
			}
			if (p.HeadTimeMs > 0) == p.Idle {
				bad("%s: give exactly one of headTimeMs (the message in hand) and idle", at)
			}
			switch {
			case p.Held < 0 || p.Held > MaxHeld:
				bad("%s.held %d must be from 0 (not given) to %d", at, p.Held, MaxHeld)
			case p.Held > 0 && p.HeadTimeMs <= 0:
				bad("%s.held %d needs headTimeMs: it counts the messages in hand", at, p.Held)
			}
			if p.Skipped != nil && (*p.Skipped < 0 || *p.Skipped > MaxSkipped) {
				bad("%s.skipped %d must be from 0 to %d", at, *p.Skipped, int64(MaxSkipped))
			}
			switch {
			case p.HeldMs < 0 || p.HeldMs > MaxHeldMs:
				bad("%s.heldMs %d must be from 0 to %d", at, p.HeldMs, MaxHeldMs)
			case p.HeldMs > 0 && p.Held <= 0:
				bad("%s.heldMs %d needs held", at, p.HeldMs)
			}
		}
	}
	if parts > MaxReportPartitions {
		bad("%d partitions, at most %d per report", parts, MaxReportPartitions)
	}
	return errors.Join(errs...)
}

// RefusesHeld says whether a daemon's error text (ErrorBody.Error of a
// 400 to a consumer report) refuses the report for its held or heldMs
// field as unknown: a daemon older than protocol 1.3, whose strict
// decoder answers "malformed body: topics[].partitions[].held: unknown
// field". A reporter then sends the same report without them.
func RefusesHeld(errText string) bool { return RefusesField(errText, "held", "heldMs") }

// RefusesField says whether a daemon's error text refuses the report for
// one of a partition's fields named as unknown (RefusesHeld for any
// newer field: "skipped", protocol 1.5; "ownPace", 1.6).
func RefusesField(errText string, names ...string) bool {
	for _, f := range names {
		if strings.Contains(errText, "partitions[]."+f+": unknown field") {
			return true
		}
	}
	return false
}
