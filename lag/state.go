package lag

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Status is a target's health in one word. The rules that choose it are
// listed in [Rules] and [Evaluate].
type Status string

// The statuses, from best to worst. Their order is that of the rules.
const (
	// StatusOK: nothing unconsumed, or the oldest unconsumed message is
	// younger than Rules.LagAge.
	StatusOK Status = "ok"
	// StatusLagging: the consumer makes progress but the oldest
	// unconsumed message is older than Rules.LagAge.
	StatusLagging Status = "lagging"
	// StatusStalled: there is work, the consumer is (or may be) present,
	// and it has not consumed anything for Rules.StallAfter.
	StatusStalled Status = "stalled"
	// StatusStopped: like stalled, but the group has no members at all.
	StatusStopped Status = "stopped"
	// StatusStale: the data is too old to judge (observation failing).
	StatusStale Status = "stale"
	// StatusAbandoned: no live consumer has been attached for the grace
	// period (see Sample.Live and Rules.AbandonAfter), or none ever was
	// since the target was first seen. Reported, never obeyed: an
	// abandoned target binds no producer.
	StatusAbandoned Status = "abandoned"
)

// Source names where a State's position, lag and head age come from.
type Source string

// The sources, from least to most exact between commits.
const (
	// SourceCommits: the broker's committed offsets (NATS: ack floors) as
	// they are.
	SourceCommits Source = "commits"
	// SourceEstimate: the committed position advanced by the measured
	// consume rate times the time since the commit, clamped by the end.
	SourceEstimate Source = "estimate"
	// SourceConsumer: the consumer's own fresh report (Report).
	SourceConsumer Source = "consumer"
	// SourceFirstSight: a partition without a commit of a consumer seen
	// live, measured from the end offset when it was first seen so (see
	// Tracker).
	SourceFirstSight Source = "first-seen"
)

// Rules are the thresholds of the status rules, all in time. The zero value
// means the defaults noted on each field.
type Rules struct {
	// LagAge is the head age above which a progressing consumer is
	// lagging. Default 10s. A quota policy sets it to its maxAge.
	LagAge time.Duration
	// StallAfter is how long a consumer with work may go without
	// consuming anything before it is stalled or stopped. The oldest
	// unconsumed message must also be at least this old, so a message
	// that arrived a moment ago on a quiet topic is not evidence of a
	// stopped consumer. Default 30s.
	StallAfter time.Duration
	// StaleAfter is how old the last good observation may be before the
	// target is stale. Default 10s.
	StaleAfter time.Duration
	// RateWindow is the time constant of the exponentially weighted rates:
	// a step change in rate is 63% reflected after one RateWindow.
	// Default 2s. The consume rate that extrapolates a position between
	// commits is measured over max(RateWindow, 2 x the commit interval),
	// from commit to commit (see [Tracker]).
	RateWindow time.Duration
	// AbandonAfter is how long a target that was seen live may go without
	// a live consumer (Sample.Live LiveNo) before it is abandoned:
	// reported, never obeyed. It is counted from the last reading that
	// saw a consumer attached or consuming (see State.LastLive). The grace protects consumers seen live (a
	// rolling restart, a rebalance); a target with no live consumer from
	// its first reading on (a decommissioned group whose offsets Kafka
	// keeps for 7 days, a NATS durable that never fetches, also right
	// after a daemon restart; a NATS consumer counts as seen live at its
	// last delivery or acknowledgement, Sample.LastActive) is abandoned
	// at once, whatever AbandonAfter,
	// and binds again from the first reading that sees it live. Default
	// 2m: longer than a rolling restart or a rebalance, short enough that
	// a group that left stops throttling its topic's producers within
	// minutes.
	AbandonAfter time.Duration
	// ReportFresh is how old a consumer's own report (PartitionSample.Reported)
	// may be and still override the position estimated from commits.
	// Default 3s: three periods of a consumer reporting every second.
	ReportFresh time.Duration
}

// DefaultRules are the rules used when a field of Rules is zero.
var DefaultRules = Rules{
	LagAge:       10 * time.Second,
	StallAfter:   30 * time.Second,
	StaleAfter:   10 * time.Second,
	RateWindow:   2 * time.Second,
	AbandonAfter: 2 * time.Minute,
	ReportFresh:  3 * time.Second,
}

// withDefaults fills zero fields from DefaultRules.
func (r Rules) withDefaults() Rules {
	if r.LagAge <= 0 {
		r.LagAge = DefaultRules.LagAge
	}
	if r.StallAfter <= 0 {
		r.StallAfter = DefaultRules.StallAfter
	}
	if r.StaleAfter <= 0 {
		r.StaleAfter = DefaultRules.StaleAfter
	}
	if r.RateWindow <= 0 {
		r.RateWindow = DefaultRules.RateWindow
	}
	if r.AbandonAfter <= 0 {
		r.AbandonAfter = DefaultRules.AbandonAfter
	}
	if r.ReportFresh <= 0 {
		r.ReportFresh = DefaultRules.ReportFresh
	}
	return r
}

// State is what lagbridge knows about one target at one instant.
type State struct {
	Target Target `json:"target"`
	// At is the time of the newest fresh observation folded in.
	At time.Time `json:"at"`
	// Status and Reason: the verdict of the first rule that matched, and
	// why, in words.
	Status Status `json:"status"`
	Reason string `json:"reason"`
	// Rule names the rule that matched (see Evaluate).
	Rule string `json:"rule"`

	GroupState string `json:"groupState,omitempty"`
	Members    int    `json:"members"`

	// Source says where Lag and HeadAge come from (empty: commits).
	Source Source `json:"source,omitempty"`
	// CommitInterval is the consumer's learned commit cadence: the typical
	// time between moves of its committed offsets; 0 while unknown.
	CommitInterval time.Duration `json:"commitInterval,omitempty"`
	// Uncertainty is how long ago the position used was last known
	// exactly (time since the commit an estimate extrapolates from, or
	// since the consumer's report); 0 when exact.
	Uncertainty time.Duration `json:"uncertainty,omitempty"`
	// CommittedLag and CommittedHeadAge are the broker's own figures (from
	// commits alone) when Source is not SourceCommits; otherwise equal to
	// Lag and HeadAge.
	CommittedLag     int64         `json:"committedLag"`
	CommittedHeadAge time.Duration `json:"committedHeadAge"`

	// Lag is the sum of unconsumed messages over the partitions, from the
	// best position known for each (see Source): the consumer's fresh
	// report, else the committed position advanced by the estimate, else
	// the commit. CommittedLag keeps the broker's own figure.
	Lag int64 `json:"lag"`
	// HeadAge is now minus the oldest unconsumed message's timestamp, over
	// partitions with lag whose head is known, at the same best positions;
	// 0 with no lag. CommittedHeadAge keeps the broker's own figure.
	HeadAge time.Duration `json:"headAge"`
	// HeadAgeKnown is false when some partition has lag but its head time
	// could not be read; HeadAge then covers only the known ones.
	HeadAgeKnown bool `json:"headAgeKnown"`
	// Uncommitted is the number of partitions without a committed offset
	// (Committed -1) whose lag is unknown: they count in none of Lag,
	// HeadAge, the rates and the status rules; Reason mentions them. A
	// partition without a commit of a group seen live (Sample.Live
	// LiveYes) is not unknown: it is measured from first sight (Source
	// SourceFirstSight) and counted in Lag. A target whose partitions all
	// lack a commit and that was never seen live has Lag 0.
	Uncommitted int `json:"uncommitted,omitempty"`

	// Live is the newest fresh reading's Sample.Live (LiveNo for a
	// LiveUnknown after a LiveNo: the last known one), and LastLive the
	// last time a consumer was seen attached (LiveYes or LiveUnknown) or
	// seen consuming (a report within Rules.ReportFresh, or on Kafka a
	// commit moved forward: a consumer that assigns its partitions itself
	// is no member of the group); zero when neither was since the target
	// was first seen. A target whose Live is LiveNo is abandoned when
	// LastLive is zero (never seen live) or Rules.AbandonAfter ago or more.
	Live     Liveness  `json:"live"`
	LastLive time.Time `json:"lastLive,omitzero"`

	// AckAge is the longest time from the broker's last processed
	// acknowledgement (Sample.LastAck) to the reading over the target's
	// last ackAgeReadings fresh readings; 0 while fewer of them carried
	// one (Kafka: always). A consumer that acknowledges at least every d
	// has an AckAge under d. One that acknowledges every 1 s reads under
	// 250 ms at 4 readings in a row 1 time in 256 when the readings fall
	// at random phases, but about 1 time in 4 when they keep step with its
	// acks (a steady 1 s timer on both sides): such a consumer then
	// switches the cluster to the engaged cadence, drops out after 4 fast
	// readings and 8 held cycles, and comes back (review-fastcycle3: 39%
	// of the time fast in a simulated loop; not guarded yet, see
	// MovesWithin).
	AckAge time.Duration `json:"ackAge,omitempty"`
	// AckedWithin is AckAge over the newest fresh readings in a row that
	// carried a Sample.LastAck, from two of them on (up to
	// ackAgeReadings): the longest time from the last acknowledgement to
	// the reading; 0 while fewer than two did (Kafka: always). It is known
	// from a target's first readings, before AckAge: a consumer that
	// acknowledges each message as it handles it reads a few ms at both,
	// one acknowledging every 1 s reads under 200 ms at two random readings
	// in a row 1 time in 25 (see AckAge for readings in step with its
	// acks).
	AckedWithin time.Duration `json:"ackedWithin,omitempty"`

	// ProduceRate and ConsumeRate are exponentially weighted rates in
	// messages per second (time constant Rules.RateWindow). RatesKnown is
	// false until two fresh observations were seen. The consumed position
	// they follow is the best one (see Source), never moving back except
	// to a commit that corrects an estimate (see Corrected), so a
	// consumer that commits every 5 s reads its steady rate between
	// commits rather than 0 four seconds in five and 5x in the fifth.
	ProduceRate float64 `json:"produceRate"`
	ConsumeRate float64 `json:"consumeRate"`
	// ProduceRateInstant and ConsumeRateInstant are over the last
	// observation interval only, for controllers that must react fast.
	ProduceRateInstant float64 `json:"produceRateInstant"`
	ConsumeRateInstant float64 `json:"consumeRateInstant"`
	RatesKnown         bool    `json:"ratesKnown"`
	// SkipRateInstant is the part of ConsumeRateInstant, messages per
	// second over the same interval, that the consumer terminated as
	// expired (PartitionSample.Skipped): work it skipped, not did. The
	// quota controller takes it out of the capacity it reads. Skipped
	// counts them since the target was first seen (the metric
	// lagbridge_consumer_skipped_total).
	SkipRateInstant float64 `json:"skipRateInstant,omitempty"`
	Skipped         int64   `json:"skipped,omitempty"`
	// SkipsCounted is the newest fresh sample's Sample.SkipsCounted:
	// whether Skipped and SkipRateInstant count anything.
	SkipsCounted bool `json:"skipsCounted,omitempty"`
	// Corrected is true when a commit in the newest reading landed
	// behind the position estimated before it (see Tracker): the estimate
	// restarts from that commit, and ConsumeRateInstant counts none of
	// what was consumed since the previous reading (the estimate counted
	// it ahead): that reading measures no consume rate.
	Corrected bool `json:"corrected,omitempty"`

	// TimeToDrain is Lag / (ConsumeRate - ProduceRate): 0 with no lag,
	// and Never (-1) when the backlog is not shrinking.
	TimeToDrain time.Duration `json:"timeToDrain"`

	// LastProgress is the last time the consumer consumed something (by
	// the best position) or had nothing to consume.
	LastProgress time.Time `json:"lastProgress"`

	// Stale is true when the status comes from old data (see StaleAfter)
	// or some partitions could not be observed (then Partial is set too).
	Stale   bool `json:"stale"`
	Partial bool `json:"partial,omitempty"`
	// Err is why the newest observation failed: the sample's error, the
	// whole cycle's error (see Tracker.Fail), or empty.
	Err string `json:"err,omitempty"`

	Partitions []PartitionState `json:"partitions"`
}

// Never is the TimeToDrain of a backlog that does not shrink.
const Never time.Duration = -1

// PartitionState is one partition of a State. Its embedded Lag, HeadTime
// and HeadKnown are at the best position (Position, from Source); the
// broker's own figures are in Committed, CommittedLag and CommittedHeadAge.
type PartitionState struct {
	PartitionSample
	// HeadAge is now minus HeadTime when the partition has lag.
	HeadAge time.Duration `json:"headAge"`
	// ObservedAt is when these values were read (older than the State's
	// At when the partition is stale).
	ObservedAt time.Time `json:"observedAt"`
	// Source says where Position comes from; empty when the position is
	// unknown (no commit, never seen live).
	Source Source `json:"source,omitempty"`
	// Position is the best known next offset (or counter, NATS) of the
	// consumer, in End's units; -1 when unknown.
	Position int64 `json:"position"`
	// CommittedLag and CommittedHeadAge are the broker's figures at the
	// committed position (0 without a commit).
	CommittedLag     int64         `json:"committedLag"`
	CommittedHeadAge time.Duration `json:"committedHeadAge"`
	// CommitInterval is the learned time between moves of this
	// partition's committed position (the median of the last 8 over
	// which the consumer had work: lag at the move that started it, lag
	// at every reading since, or records written between every two
	// readings since), at the resolution of the observation interval;
	// 0 while unknown.
	CommitInterval time.Duration `json:"commitInterval,omitempty"`
	// LastCommit is when the committed position last moved, as dated by
	// the Tracker: half an observation interval before the reading that
	// saw it move; zero before the first move was seen.
	LastCommit time.Time `json:"lastCommit,omitzero"`
	// CommitRate is the consume rate measured from commit to commit over
	// max(RateWindow, 2 x CommitInterval), in messages per second; it
	// decays once a commit is overdue. It drives the estimate.
	CommitRate float64 `json:"commitRate"`
	// Uncertainty is how old the exact knowledge behind Position is: the
	// time since the commit an estimate extrapolates from, since the
	// consumer's report, or since first sight; 0 for SourceCommits.
	Uncertainty time.Duration `json:"uncertainty,omitempty"`
}

// Tracker folds successive Samples of each target into States. It keeps one
// small record per target and per partition.
//
// # Between commits
//
// A consumer's committed offset moves only when it commits: franz-go's
// and Java's auto-commit every 5 s. Read as they are, commits make a
// steady consumer look stalled four seconds in five and five times faster
// in the fifth. The Tracker therefore learns, per partition, when the
// committed position moves (CommitInterval), measures the consume rate
// from commit to commit (CommitRate), and estimates the real position
// between commits:
//
//	position = committed + CommitRate x min(now - LastCommit, CommitInterval + one observation interval)
//
// clamped to End, where LastCommit dates the commit half an observation
// interval before the reading that saw it. A consumer whose cadence is
// not longer than 1.5 observation intervals is read from its commits as
// they are. The extrapolation stops one commit interval (plus one
// observation) after the last commit: a consumer that misses its commit
// is not assumed to progress. No estimate is made before the cadence is
// known (two moves with work between them: lag at the first or at every
// reading between, or records written between every two readings).
//
// The rate from commit to commit is the consumer's capacity only when it
// was behind; a consumer caught up at its commit (it had consumed every
// record written before the reading that preceded the commit) consumed
// what it was given, and may take more. Such a consumer is taken to keep
// up with what is written until its next commit, at up to twice the
// rate it consumed or was written at from its previous commit (so that
// producers a quota held back can be given twice as much within one
// commit interval), or, when its producers had been held below the
// capacity it showed when last behind at two commits in a row, at that
// capacity (a consumer that drained a backlog while given nothing is not
// taken to be faster for it). A consumer behind at its commit consumes at
// the rate from commit to commit, and never slower than the fastest it
// was seen to consume since a commit last corrected the estimate.
//
// A commit that lands behind the estimated position corrects it: the
// estimate restarts from the commit, State.Corrected says so, and the
// consumed counter of the rates restarts from there too (what the
// estimate counted ahead is counted again, once; holding the counter
// until the consumer passes it would read as a consumer that consumes
// nothing meanwhile).
//
// The head age at an estimated position needs the timestamp of the
// record there, which the adapters do not read. The Tracker keeps, per
// partition, when the end offset grew (a reading at time t with end E
// says every record below E was written by t) and interpolates linearly
// between the known head at the commit and these points, as
// kafka-lag-exporter does with its offset/time table. Worked example: the
// commit is at offset 1,000 and its record was written at 12:00:00.0;
// readings saw the end at 2,000 at 12:00:02 and 3,000 at 12:00:04; the
// consumer's estimated position is 2,500. It lies between (2,000,
// 12:00:02) and (3,000, 12:00:04), half way: its record was written about
// 12:00:03. At now = 12:00:04.5 the head age is 1.5 s (the committed head
// age is 4.5 s) and the lag 500 (committed: 2,000). Record times come from
// producers, reading times from the daemon: clock skew between them moves
// the estimate, and an estimated head is never older than the committed
// one.
//
// A consumer's own fresh report (PartitionSample.Reported, at most
// Rules.ReportFresh old) overrides both: its position and the time of
// the record it handles (interpolated as above when it is idle but
// records arrived since). A NATS report names a stream sequence while End
// counts the consumer's messages: it advances the committed position by
// how far it is past the ack floor, exact for an unfiltered consumer and a
// lower bound of the lag of a filtered one (whose head age, from the
// report, stays exact).
//
// # Without a commit
//
// A partition without a commit (Committed -1) of a target seen live
// (Sample.Live LiveYes) is measured from when it was first seen so: its
// position is the end offset at that reading, and its head the first
// record written after it, dated by the same interpolation from that
// reading's time. Example: first seen live at 12:00:00 with end 5,000
// and no commit; at 12:00:03 the end is 6,200: lag 1,200, head age about
// 3 s (not 0, as the broker's figures would say). A consumer that started
// earlier (reset to earliest) is further behind than this. Its first
// commit is a move like any other: what lies between the first-sight
// position and the commit counts as consumed in the interval that saw it
// (the consumer was at or before that position when first seen); a first
// commit behind it corrects it (State.Corrected) and counts nothing.
// Targets never seen live keep the unknown lag of Kafka's own tools.
//
// A Tracker is not safe for concurrent use: one observation loop owns it.
type Tracker struct {
	rules   func(Target) Rules
	targets map[Target]*track
	gen     uint64 // Prune's generation
}

type track struct {
	state      State
	parts      map[int32]*partTrack
	lastFresh  time.Time
	gap        time.Duration // between the last two fresh readings
	haveRates  bool
	haveSample bool
	lastLive   time.Time
	// knownLive is the last fresh reading's Sample.Live that was not
	// LiveUnknown (LiveUnknown: none yet).
	knownLive Liveness
	listed    uint64 // the Prune generation that last listed the target
	// ackAges are the newest fresh readings' At - Sample.LastAck, newest
	// first; nAck how many of them in a row carried a LastAck.
	ackAges [ackAgeReadings]time.Duration
	nAck    int
}

// ackAgeReadings is how many readings in a row State.AckAge is taken over.
const ackAgeReadings = 4

// NewTracker returns a Tracker. rules gives the thresholds for a target;
// nil means DefaultRules for all.
func NewTracker(rules func(Target) Rules) *Tracker {
	if rules == nil {
		rules = func(Target) Rules { return DefaultRules }
	}
	return &Tracker{rules: rules, targets: make(map[Target]*track)}
}

// Observe folds one Sample into its target's state and returns the new
// State; now is the current time (head ages and staleness are measured
// against it; normally s.At).
//
// Partitions of s that are Stale keep their previous values, so one
// unreachable broker produces partial results flagged stale, never a lag
// spike or drop. A sample with Err and no partitions keeps the whole previous
// state and only ages it. A sample without Err that read at least one
// partition lists all the target has: partitions it does not list (a topic
// recreated with fewer partitions) are dropped.
func (t *Tracker) Observe(s Sample, now time.Time) State {
	tr := t.targets[s.Target]
	if tr == nil {
		tr = &track{parts: make(map[int32]*partTrack)}
		t.targets[s.Target] = tr
	}
	r := t.rules(s.Target).withDefaults()
	st := &tr.state
	st.Target = s.Target
	st.Err = s.Err

	fresh := 0
	for _, p := range s.Partitions {
		if !p.Stale {
			fresh++
		}
	}
	if fresh > 0 {
		live := s.Live
		switch {
		case live != LiveUnknown:
			tr.knownLive = live
		case tr.knownLive == LiveNo:
			// The adapter could not tell this time (a group describe
			// not answered): a target last read without a consumer
			// keeps that reading, so one lost answer does not revive
			// an abandoned group, binding its producers again for
			// AbandonAfter. Unknown from first sight still counts as
			// live, and so does unknown after a live reading.
			live = LiveNo
		}
		if live != LiveNo {
			tr.lastLive = s.At
		}
		if a := s.LastActive; !a.IsZero() {
			if a.After(s.At) {
				a = s.At // the broker's clock ahead of ours
			}
			if a.After(tr.lastLive) {
				tr.lastLive = a
			}
		}
		st.Live, st.SkipsCounted = live, s.SkipsCounted
		if tr.haveSample {
			tr.gap = s.At.Sub(tr.lastFresh)
		}
	}
	var dProduced, dConsumed, dSkipped int64
	var rateParts int
	// A reading repeated with the same At (an adapter between two
	// refreshes) counts its skips once.
	newReading := !tr.haveSample || s.At.After(tr.lastFresh)
	if fresh > 0 && newReading {
		tr.foldAck(s)
	}
	consuming, corrected := false, false
	for _, p := range s.Partitions {
		pt, had := tr.parts[p.Partition]
		if p.Stale {
			if had {
				pt.raw.Stale = true
				pt.raw.Err = p.Err
			} else {
				// Nothing to keep: remember that it exists and is
				// unknown; it counts no lag.
				tr.parts[p.Partition] = newPartTrack(PartitionSample{
					Partition: p.Partition, Committed: -1, Stale: true, Err: p.Err,
				}, s.Target.Kind)
			}
			continue
		}
		// A head that could not be read this time but whose position did
		// not move is still the same message. The position is the commit,
		// or the log start when retention deleted past the commit: then
		// the log start moving is the position moving.
		if !p.HeadKnown && p.Lag > 0 && p.Committed >= 0 && had && pt.raw.HeadKnown && position(pt.raw) == position(p) {
			p.HeadTime, p.HeadKnown = pt.raw.HeadTime, true
		}
		if !had {
			pt = newPartTrack(p, s.Target.Kind)
			tr.parts[p.Partition] = pt
		}
		prevRaw, prevCounted, prevFresh := pt.raw, pt.counted, had && !pt.raw.Stale && tr.haveSample
		prevKnown := prevRaw.Committed >= 0 || pt.synth >= 0
		// A consumer that is no member of the group (it assigns its
		// partitions itself and commits, or reports) is live all the
		// same while it reports or, on Kafka, while its commit moves
		// forward (the commit itself: End-Lag also moves with retention
		// and compaction; a NATS consumer's deliveries are in Live).
		readBefore := had && !pt.observedAt.IsZero()
		if p.Reported.freshAt(s.At, r) || s.Target.Kind == KindKafka && readBefore && p.Committed >= 0 && p.Committed > prevRaw.Committed {
			consuming = true
		}
		var repSkips int64
		if newReading {
			repSkips = pt.reportedSkips(p.Reported, s.At, r)
		}
		// A consumer's fresh report that carried a skip count (a
		// Kafka hook behind the ttl guard, protocol 1.5) says the skips
		// are counted, from its first skip on.
		if pt.repSkipped > 0 && p.Reported.freshAt(s.At, r) {
			st.SkipsCounted = true
		}
		corrected = pt.fold(p, s.At, s.Live == LiveYes, r, tr.gap) || corrected
		if n := pt.capSkips(repSkips, prevCounted); n > 0 {
			p.Skipped = addSat(p.Skipped, n)
			pt.raw.Skipped = p.Skipped
		}
		if newReading && p.Skipped > 0 {
			st.Skipped = addSat(st.Skipped, p.Skipped)
			dSkipped = addSat(dSkipped, p.Skipped)
		}
		// Without a position on either side (no commit, never seen
		// live) the consumed position is unknown: no rate from this
		// pair. A first commit after a first-sight position counts
		// what lies between them as consumed (the consumer was at or
		// before the end when it was first seen, so it consumed at
		// least that since); one behind it corrects it and counts
		// nothing. A position from commits that loses them (offsets
		// deleted) gives no rate.
		known := p.Committed >= 0 || pt.synth >= 0
		if prevFresh && prevKnown && known && (p.Committed >= 0 || prevRaw.Committed < 0) {
			dp := p.End - prevRaw.End
			// A shrinking end offset means the partition was recreated
			// or the counter reset: no rate from this pair.
			if dp >= 0 {
				dProduced += dp
				// The counted position never moves back (an offset
				// reset to earlier, an estimate corrected by the next
				// commit): consumption counted ahead is not counted
				// twice.
				dConsumed += max(pt.counted-prevCounted, 0)
				rateParts++
			}
		}
	}
	if consuming {
		tr.lastLive = s.At
	}
	// Every partition s lists is in tr.parts now; more there means some
	// are gone from the target.
	if s.Err == "" && fresh > 0 && len(tr.parts) > len(s.Partitions) {
		listed := make(map[int32]bool, len(s.Partitions))
		for _, p := range s.Partitions {
			listed[p.Partition] = true
		}
		for id := range tr.parts {
			if !listed[id] {
				delete(tr.parts, id)
			}
		}
	}

	if fresh > 0 {
		if tr.haveSample && rateParts > 0 {
			dt := s.At.Sub(tr.lastFresh).Seconds()
			if dt > 0 {
				ip, ic := float64(dProduced)/dt, float64(dConsumed)/dt
				st.ProduceRateInstant, st.ConsumeRateInstant = ip, ic
				st.SkipRateInstant = float64(dSkipped) / dt
				if !tr.haveRates {
					st.ProduceRate, st.ConsumeRate = ip, ic
					tr.haveRates = true
				} else {
					// alpha = 1 - e^(-dt/tau): exact for any interval,
					// so irregular cycles weigh what they cover.
					alpha := 1 - math.Exp(-dt/r.RateWindow.Seconds())
					st.ProduceRate += alpha * (ip - st.ProduceRate)
					st.ConsumeRate += alpha * (ic - st.ConsumeRate)
				}
				st.RatesKnown = true
				if dConsumed > 0 {
					st.LastProgress = s.At
				}
			}
		}
		tr.haveSample = true
		tr.lastFresh = s.At
		st.Corrected = corrected
		st.At = s.At
		st.GroupState = s.GroupState
		st.Members = s.Members
	}

	t.summarize(tr, r, now)
	if st.Lag == 0 && fresh > 0 {
		st.LastProgress = s.At
	}
	if st.LastProgress.IsZero() && fresh > 0 {
		// First sight of a target with lag: progress unknown, count from
		// here so that a stall is only declared after StallAfter of our own
		// watching.
		st.LastProgress = s.At
	}
	Evaluate(st, r, now, tr.lastFresh)
	return t.snapshot(tr)
}

// foldAck records the age of a fresh reading's last acknowledgement and
// sets State.AckAge.
func (tr *track) foldAck(s Sample) {
	tr.state.AckAge, tr.state.AckedWithin = 0, 0
	if s.LastAck.IsZero() {
		tr.nAck = 0
		return
	}
	copy(tr.ackAges[1:], tr.ackAges[:ackAgeReadings-1])
	// Never 0, which says unknown; the broker's clock ahead of ours: 1 ns.
	tr.ackAges[0] = max(s.At.Sub(s.LastAck), time.Nanosecond)
	tr.nAck = min(tr.nAck+1, ackAgeReadings)
	if tr.nAck >= 2 {
		tr.state.AckedWithin = slices.Max(tr.ackAges[:tr.nAck])
	}
	if tr.nAck == ackAgeReadings {
		tr.state.AckAge = slices.Max(tr.ackAges[:])
	}
}

// MovesWithin reports whether the target's consumed position is known to
// move at least every d, so that readings every d follow the consumer
// rather than the lumps of its commits: every lagging partition read
// from a fresh report of the consumer (Source SourceConsumer), or a
// commit cadence learned at about d or under (CommitInterval, the slowest
// partition's; on Kafka up to 1.5 d, the readings' jitter; learned from
// readings at least as close, since readings further apart than the
// cadence learn their own spacing: the daemon's loop reads a Kafka target
// whose commits moved at about every reading at d for a trial, see
// internal/daemon.Loop.Engaged), or every one of the last ackAgeReadings
// readings came within d of an acknowledgement (AckAge). A target read
// from commits made every second (a commit per poll of a second's
// records, a 1 s auto-commit) does not.
func (s State) MovesWithin(d time.Duration) bool {
	switch {
	case d <= 0:
		return false
	case s.Source == SourceConsumer:
		return true
	case s.CommitInterval > 0 && s.CommitInterval <= d:
		return true
	case s.Target.Kind == KindKafka && s.CommitInterval > 0 && s.CommitInterval <= d*3/2:
		// About once per reading every d (as lag/ reads commits
		// exactly): a consumer that commits at each reading every d
		// learns the readings' spacing, d and a few milliseconds. (A
		// NATS consumer's ack floor keeps to d: its acks say more,
		// AckAge.)
		return true
	}
	return s.AcksWithin(d)
}

// AcksWithin reports whether the broker had processed an acknowledgement
// of s's consumer within d before the reading (AckAge; NATS only): a
// position fine by its acks, not by a commit cadence learned from the
// readings' own spacing.
func (s State) AcksWithin(d time.Duration) bool { return s.AckAge > 0 && s.AckAge <= d }

// position is where the consumer of p reads next: its commit, or the log
// start when retention deleted past the commit.
func position(p PartitionSample) int64 { return max(p.Committed, p.LogStart) }

// summarize recomputes the sums over partitions as of now.
func (t *Tracker) summarize(tr *track, r Rules, now time.Time) {
	setPool(tr.parts)
	st := &tr.state
	st.Lag, st.HeadAge, st.HeadAgeKnown, st.Partial, st.Uncommitted = 0, 0, true, false, 0
	st.CommittedLag, st.CommittedHeadAge, st.CommitInterval, st.Uncertainty, st.Source = 0, 0, 0, 0, ""
	st.LastLive = tr.lastLive
	st.Partitions = st.Partitions[:0]
	var srcLag, srcAll Source
	for _, pt := range tr.parts {
		p := pt.view(r, tr.gap, now)
		if p.Stale {
			st.Partial = true
		}
		st.CommitInterval = max(st.CommitInterval, p.CommitInterval)
		switch {
		case p.Source == "":
			// No position: lag unknown, not counted. A stale
			// placeholder for a partition never read is not
			// counted either.
			if !p.ObservedAt.IsZero() {
				st.Uncommitted++
			}
		default:
			st.CommittedLag += p.CommittedLag
			st.CommittedHeadAge = max(st.CommittedHeadAge, p.CommittedHeadAge)
			srcAll = lessExact(srcAll, p.Source)
			if p.Lag > 0 {
				srcLag = lessExact(srcLag, p.Source)
				st.Uncertainty = max(st.Uncertainty, p.Uncertainty)
				st.Lag += p.Lag
				if p.HeadKnown {
					st.HeadAge = max(st.HeadAge, p.HeadAge)
				} else {
					st.HeadAgeKnown = false
				}
			}
		}
		st.Partitions = append(st.Partitions, p)
	}
	st.Source = cmp.Or(srcLag, srcAll)
	sort.Slice(st.Partitions, func(i, j int) bool { return st.Partitions[i].Partition < st.Partitions[j].Partition })
	switch net := st.ConsumeRate - st.ProduceRate; {
	case st.Lag == 0:
		st.TimeToDrain = 0
	case !st.RatesKnown || net <= 0:
		st.TimeToDrain = Never
	default:
		st.TimeToDrain = time.Duration(float64(st.Lag) / net * float64(time.Second))
	}
}

// exactness orders the sources from least to most exact.
var exactness = map[Source]int{SourceFirstSight: 1, SourceEstimate: 2, SourceCommits: 3, SourceConsumer: 4}

// lessExact returns the less exact of a and b; "" counts as none.
func lessExact(a, b Source) Source {
	if a == "" || exactness[b] < exactness[a] {
		return b
	}
	return a
}

// snapshot returns a copy of the state that shares no memory with the
// tracker.
func (t *Tracker) snapshot(tr *track) State {
	s := tr.state
	s.Partitions = append([]PartitionState(nil), tr.state.Partitions...)
	return s
}

// Evaluate applies the status rules to st as of now, in order; the first that
// matches sets Status, Rule and Reason:
//
//  1. stale: the newest fresh observation is older than StaleAfter, or
//     there never was one. (Partial data sets Stale but judges on.) The
//     reason ends with the cause: st.Err, else the first partition's.
//  2. never-live: no live consumer now (Live LiveNo) and none since the
//     target was first seen (LastLive zero): abandoned at once.
//     abandoned: no live consumer for AbandonAfter since LastLive.
//     Whatever its lag: an abandoned target binds no producer. Example,
//     AbandonAfter 2m: a group with offsets and no member at the
//     daemon's first reading is abandoned at that reading; a group seen
//     live at 12:00:00 and empty since is stopped or stalled (by the
//     rules below) until 12:02:00, abandoned from then on. Either binds
//     again from the first reading that sees a consumer attached or
//     consuming (see State.LastLive).
//  3. caught-up: no lag. OK, however long ago the last message came:
//     a quiet topic is not a stopped consumer.
//  4. no-progress: there is lag, nothing was consumed for StallAfter, and
//     the oldest unconsumed message is itself at least StallAfter old:
//     stopped when the group has no members, else stalled. Progress is
//     read at the estimated position, which moves between commits, so a
//     consumer is never stalled inside one commit interval.
//  5. over-age: the oldest unconsumed message is older than LagAge:
//     lagging.
//  6. within-age: OK.
//
// Partitions whose lag is unknown (State.Uncommitted) take part in no
// rule. Reason ends with their number when there are any, so a target
// whose partitions all lack a commit is OK (caught-up) and says why.
func Evaluate(st *State, r Rules, now, lastFresh time.Time) {
	r = r.withDefaults()
	st.Stale = st.Partial
	set := func(s Status, rule, reason string) { st.Status, st.Rule, st.Reason = s, rule, reason }
	since := now.Sub(lastFresh)
	switch {
	case lastFresh.IsZero():
		st.Stale = true
		set(StatusStale, "stale", "never observed: "+orNone(cause(st)))
	case since > r.StaleAfter:
		st.Stale = true
		set(StatusStale, "stale", fmt.Sprintf("last good observation %s ago (> %s): %s", since.Round(time.Millisecond), r.StaleAfter, orNone(cause(st))))
	case st.Live == LiveNo && st.LastLive.IsZero():
		set(StatusAbandoned, "never-live", "no live consumer since first seen: reported, binds no producer")
	case st.Live == LiveNo && now.Sub(st.LastLive) >= r.AbandonAfter:
		set(StatusAbandoned, "abandoned", fmt.Sprintf("no live consumer for %s (>= %s): reported, binds no producer", now.Sub(st.LastLive).Round(time.Millisecond), r.AbandonAfter))
	case st.Lag == 0:
		set(StatusOK, "caught-up", "nothing unconsumed")
	case now.Sub(st.LastProgress) >= r.StallAfter && st.HeadAge >= r.StallAfter:
		idle := now.Sub(st.LastProgress).Round(time.Millisecond)
		if st.Members == 0 {
			set(StatusStopped, "no-progress", fmt.Sprintf("%d unconsumed, nothing consumed for %s, no members", st.Lag, idle))
		} else {
			set(StatusStalled, "no-progress", fmt.Sprintf("%d unconsumed, nothing consumed for %s", st.Lag, idle))
		}
	case st.HeadAge > r.LagAge:
		set(StatusLagging, "over-age", fmt.Sprintf("head age %s > %s", st.HeadAge.Round(time.Millisecond), r.LagAge))
	default:
		set(StatusOK, "within-age", fmt.Sprintf("head age %s <= %s", st.HeadAge.Round(time.Millisecond), r.LagAge))
	}
	if st.Uncommitted > 0 {
		st.Reason += fmt.Sprintf("; %d of %d partitions without a committed offset (lag unknown, not counted)", st.Uncommitted, len(st.Partitions))
	}
}

// cause is why st's data may be old: its error, else the first partition
// error.
func cause(st *State) string {
	if st.Err != "" {
		return st.Err
	}
	for _, p := range st.Partitions {
		if p.Err != "" {
			return fmt.Sprintf("partition %d: %s", p.Partition, p.Err)
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "no error reported"
	}
	return s
}

// States re-evaluates every tracked target as of now (ageing head ages,
// estimates and staleness without new samples) and returns them sorted by
// target.
func (t *Tracker) States(now time.Time) []State {
	out := make([]State, 0, len(t.targets))
	for tg, tr := range t.targets {
		r := t.rules(tg).withDefaults()
		t.summarize(tr, r, now)
		Evaluate(&tr.state, r, now, tr.lastFresh)
		out = append(out, t.snapshot(tr))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target.String() < out[j].Target.String() })
	return out
}

// Fail records that a whole observation cycle failed with cause (for
// example "metadata: broker 1: EOF"): every tracked target keeps its data,
// ageing towards stale, and carries cause in Err and, once stale, in its
// reason. The next sample of a target replaces it.
func (t *Tracker) Fail(cause string) {
	for _, tr := range t.targets {
		tr.state.Err = cause
	}
}

// Prune drops the targets that listed does not contain and returns them.
// Call it with the samples of a cycle whose listing is complete (the
// adapter listed every target that still exists, possibly stale): a
// deleted topic, a deleted group or an expired NATS consumer then leaves
// at the first cycle that no longer lists it, with its state.
//
// It allocates nothing when nothing leaves: the listed targets are marked
// with a generation, not collected in a set.
func (t *Tracker) Prune(listed []Sample) []Target {
	t.gen++
	for _, s := range listed {
		if tr := t.targets[s.Target]; tr != nil {
			tr.listed = t.gen
		}
	}
	var gone []Target
	for tg, tr := range t.targets {
		if tr.listed != t.gen {
			gone = append(gone, tg)
			delete(t.targets, tg)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].String() < gone[j].String() })
	return gone
}

// Forget drops targets whose last fresh observation is older than cutoff
// (groups deleted, consumers removed) and returns them.
func (t *Tracker) Forget(cutoff time.Time) []Target {
	var gone []Target
	for tg, tr := range t.targets {
		if tr.lastFresh.Before(cutoff) {
			gone = append(gone, tg)
			delete(t.targets, tg)
		}
	}
	return gone
}

// Len is the number of tracked targets.
func (t *Tracker) Len() int { return len(t.targets) }
