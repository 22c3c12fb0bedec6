package nats

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/lag"
)

// This file holds the pure half of the adapter: from a consumer info and
// the stream's state to a reading, with the cross-checks, plus the refresh
// schedule. No I/O, no clock.

// Group states reported in lag.Sample.GroupState.
const (
	// StateActive: a push consumer bound to a subscription, or a pull
	// consumer with waiting pull requests.
	StateActive = "active"
	// StateInactive: a push consumer with no subscription on its deliver
	// subject.
	StateInactive = "inactive"
	// StateIdle: a pull consumer with no waiting pull request right now;
	// its clients may be between fetches, so liveness is unknown.
	StateIdle = "idle"
	// StatePaused: the consumer is paused (server 2.11+).
	StatePaused = "paused"
)

// streamView is what the cross-checks know about a stream: its state as
// listed at the start of the cycle (before the consumer infos were taken)
// and as read right after them.
type streamView struct {
	created  time.Time
	subjects []string
	before   jetstream.StreamState
	after    jetstream.StreamState
}

// reading is one consumer's values before the head time and the End
// offset are applied.
type reading struct {
	part       lag.PartitionSample
	members    int
	state      string
	filters    []string // subjects to look the head up with; ">" when unfiltered
	unfiltered bool
	identity   string // changes when End's meaning restarts
	acks       ackCounters
	// live is LiveYes for a bound push consumer or a pull consumer with
	// waiting pull requests, else LiveNo; endTracker.live turns it to
	// LiveYes when the consumer delivered since the previous reading.
	live      lag.Liveness
	delivered uint64 // Delivered.Consumer
	// active is the later of the last delivery and the last
	// acknowledgement (Sample.LastActive); zero when neither happened.
	active time.Time
	// acked is AckFloor.Last, when the server last processed an
	// acknowledgement (Sample.LastAck); zero when it never did.
	acked    time.Time
	problems []string
}

// ackCounters are the counters of one consumer reading that tell
// redeliveries from acknowledgements (see endTracker). Only filtered
// consumers with an ack policy need them: an unfiltered consumer's End
// counts stream sequences, and without acknowledgements there are no
// redeliveries.
type ackCounters struct {
	tracked    bool
	delivered  int64     // Delivered.Consumer: every delivery, redeliveries included
	ackPending int64     // NumAckPending
	lastAck    time.Time // AckFloor.Last: when the server last processed an ack; zero if never
}

// ackedSince reports whether the server may have processed an
// acknowledgement between the readings prev and c. The server stamps
// AckFloor.Last on every ack and term (not on a nak or an in-progress),
// so an unchanged stamp proves that none was processed. A stamp that
// changed in any way, including one gone after a server restart or a
// leader change, may hide acknowledgements.
func (c ackCounters) ackedSince(prev ackCounters) bool {
	return !c.lastAck.Equal(prev.lastAck)
}

// consumerFilters returns the consumer's filter subjects and whether it is
// effectively unfiltered: no filter, a ">" filter, or a filter set equal to
// the stream's own subjects.
func consumerFilters(cfg jetstream.ConsumerConfig, streamSubjects []string) ([]string, bool) {
	var fs []string
	if cfg.FilterSubject != "" {
		fs = append(fs, cfg.FilterSubject)
	}
	for _, f := range cfg.FilterSubjects {
		if f != "" && !slices.Contains(fs, f) {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 || slices.Contains(fs, ">") {
		return []string{">"}, true
	}
	if len(streamSubjects) > 0 && len(fs) == len(streamSubjects) {
		a, b := slices.Clone(fs), slices.Clone(streamSubjects)
		slices.Sort(a)
		slices.Sort(b)
		if slices.Equal(a, b) {
			return []string{">"}, true
		}
	}
	slices.Sort(fs)
	return fs, false
}

// sub returns a-b, or 0 when b > a.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func toInt64(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

func nonNeg(i int) uint64 {
	if i < 0 {
		return 0
	}
	return uint64(i)
}

// read derives one consumer's partition sample (all but the head time and
// the End offset) from its info ci and the stream view sv, cross-checking
// the counters against the stream state. See the package doc for the
// definitions and the worked example.
func read(ci *jetstream.ConsumerInfo, sv streamView) reading {
	var r reading
	filters, unfiltered := consumerFilters(ci.Config, sv.subjects)
	r.filters, r.unfiltered = filters, unfiltered
	r.identity = fmt.Sprintf("%d/%d/%s", sv.created.UnixNano(), ci.Created.UnixNano(), strings.Join(filters, ","))

	before, after := sv.before, sv.after
	if after.LastSeq < before.LastSeq {
		// The stream was reset between the two reads (deleted and
		// recreated under the same name): only the later read is
		// meaningful.
		before = after
	}
	pending := ci.NumPending
	ackPending := nonNeg(ci.NumAckPending)
	floor := ci.AckFloor.Stream
	last := after.LastSeq

	// Check 1: undelivered messages are stored messages. At the moment of
	// the consumer read the stream held at most what it held at the start
	// of the cycle plus what was published since.
	if maxStored := before.Msgs + sub(last, before.LastSeq); pending > maxStored {
		r.problems = append(r.problems, fmt.Sprintf(
			"pending exceeds stream messages: pending %d > %d stored", pending, maxStored))
		pending = maxStored
	}
	// Check 2 (unfiltered consumers): NumPending is a running counter in
	// the server and can drift low (seen after MaxAge expiry). Stored
	// messages after the delivered sequence that already existed at the
	// start of the cycle are undelivered: count them. Gaps are bounded by
	// the later read's interior deletes. Skipped for DeliverLastPerSubject,
	// whose pending counts only one message per subject.
	if unfiltered && ci.Config.DeliverPolicy != jetstream.DeliverLastPerSubjectPolicy && after.Msgs > 0 {
		lo := sub(before.LastSeq, max(ci.Delivered.Stream, sub(after.FirstSeq, 1)))
		lo = min(sub(lo, nonNeg(after.NumDeleted)), after.Msgs)
		if pending < lo {
			r.problems = append(r.problems, fmt.Sprintf(
				"pending below stored messages after delivered: pending %d < %d", pending, lo))
			pending = lo
		}
	}
	unprocessed := pending + ackPending

	// Check 3: every unprocessed message has its own sequence in
	// (ack floor, last], whatever was removed since.
	if floor > last {
		r.problems = append(r.problems, fmt.Sprintf(
			"ack floor %d beyond stream last sequence %d", floor, last))
	}
	if span := sub(last, floor); unprocessed > span {
		if floor <= last {
			r.problems = append(r.problems, fmt.Sprintf(
				"unprocessed exceeds sequences after ack floor: pending %d + ack pending %d > last %d - ack floor %d",
				pending, ackPending, last, floor))
		}
		unprocessed = span
	}

	// Storage bound, not an inconsistency: a purge, MaxAge, MaxMsgs or
	// MaxBytes may have removed messages past the ack floor (LogStart
	// jumps past it) while the consumer still counts them as ack pending.
	// They will never be processed; lag counts only what is stored, and
	// the removal shows as consumption (End keeps growing, Lag drops).
	var stored uint64
	if after.Msgs > 0 {
		stored = min(after.Msgs, sub(last, max(floor, sub(after.FirstSeq, 1))))
	}
	unprocessed = min(unprocessed, stored)

	p := &r.part
	p.Partition = 0
	p.LogStart = toInt64(after.FirstSeq)
	p.Committed = toInt64(floor) + 1
	p.Lag = toInt64(unprocessed)
	p.AckPending = min(toInt64(ackPending), p.Lag)
	p.Redelivered = int64(nonNeg(ci.NumRedelivered))
	if unfiltered {
		// Exact: every stream sequence is one message made available.
		p.End = toInt64(last) + 1
	} else {
		// Deliveries (the consumer sequence counts redeliveries too) plus
		// what is still to deliver. endTracker takes out the
		// redeliveries it can prove and absorbs decreases (undelivered
		// messages removed).
		p.End = toInt64(ci.Delivered.Consumer) + toInt64(pending)
		if ci.Config.AckPolicy != jetstream.AckNonePolicy {
			r.acks = ackCounters{
				tracked:    true,
				delivered:  toInt64(ci.Delivered.Consumer),
				ackPending: toInt64(ackPending),
			}
			if ci.AckFloor.Last != nil {
				r.acks.lastAck = *ci.AckFloor.Last
			}
		}
	}
	if p.End < p.Lag {
		r.problems = append(r.problems, fmt.Sprintf("end %d below lag %d", p.End, p.Lag))
		p.End = p.Lag
	}
	if len(r.problems) > 0 {
		p.Err = strings.Join(r.problems, "; ")
	}

	push := ci.Config.DeliverSubject != ""
	r.delivered = ci.Delivered.Consumer
	if ci.AckFloor.Last != nil {
		r.acked = *ci.AckFloor.Last
	}
	for _, t := range []*time.Time{ci.Delivered.Last, ci.AckFloor.Last} {
		if t != nil && t.After(r.active) {
			r.active = *t
		}
	}
	r.live = lag.LiveNo
	if (push && ci.PushBound) || (!push && ci.NumWaiting > 0) {
		r.live = lag.LiveYes
	}
	switch {
	case push && ci.PushBound:
		r.members, r.state = 1, StateActive
	case push:
		r.members, r.state = 0, StateInactive
	case ci.NumWaiting > 0:
		r.members, r.state = ci.NumWaiting, StateActive
	default:
		// A pull consumer between two fetches has no waiting request:
		// zero waiting does not mean nobody is consuming.
		r.members, r.state = -1, StateIdle
	}
	if ci.Paused {
		r.state = StatePaused
	}
	return r
}

// endTracker turns a consumer's raw End into the End it reports, per
// target. It restarts when the target's identity (stream and consumer
// creation times, filter set) changes.
//
// Redeliveries (filtered consumers with an ack policy): the raw End,
// Delivered.Consumer + NumPending, grows by one with every redelivery, and
// so would the consumed position End-Lag. Between two readings in which
// the server processed no acknowledgement (ackCounters.ackedSince), the
// growth of Delivered.Consumer - NumAckPending can only be redeliveries
// (or ack-pending messages removed from the stream); it is added to
// redelivered and taken out of End. Such an interval thus moves End by
// the change in NumPending + NumAckPending only, and the consumed
// position by nothing but removals. Redeliveries in an interval that also
// saw acknowledgements cannot be told apart from them and stay counted.
//
// Monotonic End: when End drops (undelivered messages removed by
// retention or purge on a filtered consumer, a consumer reset) the
// difference moves into offset, so the removal reads as consumption
// rather than as negative production. End is also kept at least at Lag.
type endTracker struct {
	identity    string
	offset      int64
	last        int64
	prev        ackCounters
	redelivered int64
	// delivered is Delivered.Consumer at the previous reading (valid
	// when seen), for liveness.
	delivered uint64
	seen      bool
}

// live returns r's liveness, LiveYes also when the consumer delivered
// since the previous reading (a pull consumer between two fetches), and
// remembers r's deliveries. Call it after apply.
func (t *endTracker) live(r *reading) lag.Liveness {
	l := r.live
	if t.seen && r.delivered != t.delivered {
		l = lag.LiveYes
	}
	t.delivered, t.seen = r.delivered, true
	return l
}

// apply returns the End to report for the reading r.
func (t *endTracker) apply(r *reading) int64 {
	raw, c := r.part.End, r.acks
	if t.identity != r.identity {
		*t = endTracker{identity: r.identity, last: raw, prev: c}
		return raw
	}
	if c.tracked && t.prev.tracked && !c.ackedSince(t.prev) {
		t.redelivered += max(0, (c.delivered-c.ackPending)-(t.prev.delivered-t.prev.ackPending))
	}
	t.prev = c
	e := raw - t.redelivered + t.offset
	if floor := max(t.last, r.part.Lag); e < floor {
		t.offset += floor - e
		e = floor
	}
	t.last = e
	return e
}

// schedule decides when a stream's infos are fetched again.
type schedule struct {
	interval time.Duration // InfoInterval
	slack    time.Duration // tolerance for tick noise
	jitter   float64       // fraction of interval
}

func newSchedule(cfg Config) schedule {
	return schedule{
		interval: cfg.InfoInterval,
		slack:    min(cfg.Interval, cfg.InfoInterval) / 4,
		jitter:   cfg.Jitter,
	}
}

// phase is the stable per-stream delay in [0, jitter*interval) added to
// the first re-fetch, so that streams first read together drift apart.
func (s schedule) phase(stream string) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(stream))
	// FNV's high bits barely differ between names that differ in their
	// last byte ("S01", "S02"); a splitmix64 finalizer spreads them.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	frac := float64(x>>11) / float64(1<<53)
	return time.Duration(frac * s.jitter * float64(s.interval))
}

// next returns when a stream fetched at fetchedAt is due again. first is
// true for its first fetch.
func (s schedule) next(stream string, fetchedAt time.Time, first bool) time.Time {
	d := s.interval - s.slack
	if first {
		d += s.phase(stream)
	}
	return fetchedAt.Add(d)
}
