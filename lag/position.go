package lag

import (
	"math"
	"slices"
	"time"
)

// This file holds the per-partition memory of a Tracker: when the committed
// position moves (the commit cadence and the rate measured from commit to
// commit), when the end offset grew (to date the record at an estimated
// position), and the first-sight position of a partition without a
// commit. See Tracker for the rules and a worked example.

// Bounds of the per-partition history. A partition keeps a few points in
// the common case (a consumer close to the end); these caps bound the rest.
const (
	maxMoves     = 16 // commit moves kept for the measured rate
	maxEnds      = 32 // end-offset points kept for dating records
	numIntervals = 8  // commit intervals whose median is the cadence
)

// move is a reading at which the committed position moved: at (Unix
// nanoseconds) and the new position.
type move struct {
	at  int64
	pos int64
}

// endPoint says that the end offset was off from reading first to reading
// last (Unix nanoseconds): every record below off was written by first,
// every record at or after off after last.
type endPoint struct {
	off         int64
	first, last int64
}

// partTrack is what a Tracker remembers of one partition.
type partTrack struct {
	kind Kind
	// repSkipped and repMember are the running skip count of the last
	// fresh report counted and its member (see reportedSkips).
	repSkipped int64
	repMember  string
	// repLapsed: the last reading of the partition had no fresh report
	// (or none was seen yet): the next count restarts.
	repLapsed  bool
	raw        PartitionSample // the newest reading (stale: the last good values, flagged)
	observedAt time.Time

	lastPos   int64 // consumed position (End-Lag) at the last reading with a commit; -1: none
	moves     []move
	lagAtMove bool // the partition had lag at the newest move
	// caught: at the newest move the consumer had consumed every record
	// written before the reading that preceded it (see keepUpRate).
	caught bool
	// spanRate is the rate from the move before the newest to the
	// newest, and behindRate the newest such rate over a span the
	// consumer was behind at both ends of (its capacity then), messages
	// per second; 0 while unknown.
	spanRate, behindRate float64
	// proven is the fastest the consumer was seen to consume from one
	// move to the next since a commit last corrected the estimate (a
	// correcting commit sets it to the rate it measured), messages per
	// second; 0 while unknown.
	proven float64
	// prodRate is the rate the partition was written at from the
	// reading that saw the move before the newest to the one that saw the
	// newest (moveEnd and moveReadAt: that reading's end offset and time).
	prodRate   float64
	moveEnd    int64
	moveReadAt int64
	// behind: the newest move landed behind the position estimated at
	// the reading before it.
	behind bool
	// between counts the readings since the newest move, lagBetween is
	// whether all of them saw lag, and prodBetween whether the end grew
	// from each reading to the next since the newest move (see fold).
	between     int
	lagBetween  bool
	prodBetween bool
	intervals   [numIntervals]time.Duration
	nInt        int           // intervals recorded, up to numIntervals
	ci          time.Duration // median of intervals; 0 while none
	// seenGap is the longest readings' spacing over the run of readings
	// that each saw a move, up to the newest move (every reading saw
	// one): the intervals then measure the readings' spacing, and the
	// cadence is only known to be no longer. 0 when the newest move came
	// after a reading that saw none.
	seenGap time.Duration
	ends    []endPoint

	// counted is the best position at the newest reading, never moving
	// back except on an offset reset: the consumed counter of the rates.
	counted int64

	synth   int64 // first-sight position of a partition without a commit; -1: none
	synthAt time.Time

	// emptyAt is the newest reading (Unix nanoseconds) that saw the
	// partition committed up to its end: nothing to consume is as good
	// as a commit for the estimate (see best); 0: none since the newest
	// move.
	emptyAt int64

	// pool is what the target's consumer is taken to keep up with over
	// all its partitions, messages per second (see poolRate): a consumer
	// caught up at its commit may consume that much from any one of
	// them. Set by the Tracker before the partition is read.
	pool float64
}

func newPartTrack(p PartitionSample, kind Kind) *partTrack {
	return &partTrack{kind: kind, raw: p, lastPos: -1, counted: -1, synth: -1, repLapsed: true}
}

// fold records the fresh reading p taken at at. live says whether the
// target has a consumer attached now (Sample.Live LiveYes); gap is the
// time between the target's last two fresh readings. It reports whether
// a commit landed behind the position estimated before it (the consumed
// counter restarted from it).
func (pt *partTrack) fold(p PartitionSample, at time.Time, live bool, r Rules, gap time.Duration) (corrected bool) {
	if !pt.observedAt.IsZero() && p.End < pt.raw.End {
		// The partition was recreated or its counter reset: nothing
		// learned so far applies.
		*pt = partTrack{kind: pt.kind, raw: pt.raw, lastPos: -1, counted: -1, synth: -1, moves: pt.moves[:0], ends: pt.ends[:0]}
	}
	prevCommitted := pt.raw.Committed >= 0 && !pt.observedAt.IsZero()
	// A commit where the last reading saw none was made since: a move.
	firstCommit := pt.raw.Committed < 0 && !pt.observedAt.IsZero()
	prevEnd := pt.raw.End
	pt.raw, pt.observedAt = p, at
	now := at.UnixNano()

	if n := len(pt.ends); n > 0 && pt.ends[n-1].off == p.End {
		pt.ends[n-1].last = now
	} else {
		pt.ends = append(pt.ends, endPoint{off: p.End, first: now, last: now})
	}

	reset := false
	if p.Committed >= 0 {
		pt.synth = -1
		pos := p.End - p.Lag
		if p.Lag == 0 {
			pt.emptyAt = now
		}
		switch {
		case pt.lastPos < 0 && !firstCommit:
			// The first reading: a base, not a move (when its commit
			// was made is unknown).
		case pos > pt.lastPos:
			// The commit was made between the previous reading and
			// this one: date it half way.
			mid := now - int64(gap/2)
			// The interval is the consumer's cadence when it had work to
			// commit throughout: lag at the move that started it, or at
			// every reading since (a consumer that caught up at its commit
			// while its producers were held back, then was given work),
			// or, once a cadence is known, records written from each
			// reading to the next since it (a consumer caught up at every
			// commit that keeps up: its moves show its cadence, and a
			// cadence mislearned from a commit seen a reading late is
			// relearned from them). A consumer never seen with work at a
			// move keeps its cadence unknown and is read from its commits.
			prod := pt.ci > 0 && pt.prodBetween && p.End > prevEnd
			if n := len(pt.moves); n > 0 && (pt.lagAtMove || (pt.between > 0 && pt.lagBetween) || prod) {
				pt.addInterval(time.Duration(mid - pt.moves[n-1].at))
			}
			pt.spanRate = 0
			caught := pos >= prevEnd
			if n := len(pt.moves); n > 0 && mid > pt.moves[n-1].at {
				pt.spanRate = float64(pos-pt.moves[n-1].pos) / time.Duration(mid-pt.moves[n-1].at).Seconds()
				if !caught && !pt.caught {
					pt.behindRate = pt.spanRate
				}
				if pos < pt.counted {
					pt.proven = pt.spanRate
				} else {
					pt.proven = max(pt.proven, pt.spanRate)
				}
			}
			pt.prodRate = 0
			if pt.moveReadAt > 0 && now > pt.moveReadAt {
				pt.prodRate = float64(p.End-pt.moveEnd) / time.Duration(now-pt.moveReadAt).Seconds()
			}
			pt.moveEnd, pt.moveReadAt = p.End, now
			// The longest spacing of a run of readings that each saw a
			// move: at the second and later faster readings of such a
			// run the cadence learned at the slower one is still no more
			// than known to be at most that spacing (a median of
			// numIntervals moves takes five faster ones to follow).
			if len(pt.moves) > 0 && pt.between == 0 {
				pt.seenGap = max(pt.seenGap, gap)
			} else {
				pt.seenGap = 0
			}
			pt.moves = append(pt.moves, move{at: mid, pos: pos})
			if p.Lag > 0 {
				pt.emptyAt = 0
			}
			pt.lagAtMove = p.Lag > 0
			pt.between, pt.lagBetween, pt.prodBetween = 0, true, true
			pt.caught, pt.behind = caught, pos < pt.counted
		case pos == pt.lastPos:
			pt.between++
			pt.lagBetween = pt.lagBetween && p.Lag > 0
			pt.prodBetween = pt.prodBetween && p.End > prevEnd
		case pos < pt.lastPos:
			// An offset reset to earlier: the old commits say nothing
			// of the rate from here.
			pt.forgetMoves()
			reset = true
		}
		pt.lastPos = pos
	} else {
		pt.lastPos = -1
		pt.forgetMoves()
		if pt.synth < 0 && live {
			pt.synth, pt.synthAt = p.End, at
		}
	}
	pt.trimMoves(r)

	b := pt.best(r, gap, at)
	if reset || !prevCommitted || pt.counted < 0 || pt.behind {
		// A commit behind the estimate it follows corrects it: counting
		// resumes from the position it shows (consumption counted ahead
		// is counted again, once; holding the counter would read as a
		// consumer that consumes nothing until it passes it).
		corrected, pt.behind = pt.behind, false
		pt.counted = b.pos
	} else {
		pt.counted = max(pt.counted, b.pos)
	}
	// Keep the end points from the lowest anchor on: the commit (an
	// estimate and a report that goes stale fall back to it) or the
	// first-sight position.
	anchor := pt.synth
	if p.Committed >= 0 {
		anchor = p.End - p.Lag
	}
	pt.trimEnds(anchor)
	return corrected
}

// forgetMoves drops what the commits so far told of the consumer.
func (pt *partTrack) forgetMoves() {
	pt.moves = pt.moves[:0]
	pt.caught, pt.behind, pt.spanRate, pt.behindRate, pt.proven = false, false, 0, 0, 0
	pt.prodRate, pt.moveEnd, pt.moveReadAt = 0, 0, 0
}

// addInterval records one commit interval and updates the median.
func (pt *partTrack) addInterval(d time.Duration) {
	copy(pt.intervals[1:], pt.intervals[:numIntervals-1])
	pt.intervals[0] = d
	pt.nInt = min(pt.nInt+1, numIntervals)
	var buf [numIntervals]time.Duration
	s := buf[:pt.nInt]
	copy(s, pt.intervals[:pt.nInt])
	slices.Sort(s)
	pt.ci = s[len(s)/2]
}

// window is the span the commit rate is measured over.
func (pt *partTrack) window(r Rules) time.Duration { return max(r.RateWindow, 2*pt.ci) }

// trimMoves keeps the moves the rate needs: the newest one older than the
// window before the last, and all after it; at most maxMoves.
func (pt *partTrack) trimMoves(r Rules) {
	n := len(pt.moves)
	if n < 2 {
		return
	}
	w := int64(pt.window(r))
	last := pt.moves[n-1].at
	cut := 0
	for i := n - 2; i >= 0; i-- {
		if last-pt.moves[i].at >= w {
			cut = i
			break
		}
	}
	cut = max(cut, n-maxMoves)
	if cut > 0 {
		pt.moves = pt.moves[:copy(pt.moves, pt.moves[cut:])]
	}
}

// trimEnds drops end points below pos (records the consumer has passed;
// -1 drops none) and keeps at most maxEnds, dropping the oldest.
func (pt *partTrack) trimEnds(pos int64) {
	cut := 0
	for cut < len(pt.ends)-1 && pt.ends[cut].off < pos {
		cut++
	}
	cut = max(cut, len(pt.ends)-maxEnds)
	if cut > 0 {
		pt.ends = pt.ends[:copy(pt.ends, pt.ends[cut:])]
	}
}

// rate is the consume rate measured from commit to commit, in messages
// per second: from the newest move at least one window before the last
// one (or the oldest kept) to the last one. Once the next commit is
// overdue (more than one commit interval plus one observation interval
// after the last), the time it is overdue is added to the span, so the
// rate of a consumer that stopped decays instead of holding. 0 with fewer
// than two moves.
func (pt *partTrack) rate(r Rules, gap time.Duration, now time.Time) float64 {
	n := len(pt.moves)
	if n < 2 {
		return 0
	}
	w := int64(pt.window(r))
	last, ref := pt.moves[n-1], pt.moves[0]
	for i := n - 2; i >= 0; i-- {
		if last.at-pt.moves[i].at >= w {
			ref = pt.moves[i]
			break
		}
	}
	span := last.at - ref.at
	span += max(0, now.UnixNano()-last.at-int64(pt.ci+gap))
	if span <= 0 {
		return 0
	}
	return float64(last.pos-ref.pos) / time.Duration(span).Seconds()
}

// reportedSkips returns the messages the partition's fresh report says
// were skipped since the last report counted: the growth of its running
// count (Report.Skipped) between two back-to-back readings that both
// carry a fresh report of the same member. A new member, a count that
// went back (its reporter restarted, or the partition was revoked and
// assigned again), or a reading after one without a fresh report (the
// reports lapsed: the commits counted the gap's skips as consumption)
// restarts from its count and counts nothing: its growth is no one
// interval's; so does a report that does not give the count
// (Report.SkipsGiven false: an older reporter, or a sender that left it
// out for an older daemon), which is not a count of 0. A count of 0
// sets the member: the first skips of a member whose earlier reports
// counted none are growth, not a new member's total (they were: most of
// a skip burst went uncounted, 6 of 591 in one lagbridge demo run). The
// caller caps the result at the partition's move in the reading (see
// capSkips).
func (pt *partTrack) reportedSkips(rep Report, at time.Time, r Rules) int64 {
	if !rep.freshAt(at, r) || !rep.SkipsGiven {
		pt.repLapsed = true
		return 0
	}
	n := int64(0)
	if !pt.repLapsed && rep.Member == pt.repMember && rep.Skipped >= pt.repSkipped {
		n = rep.Skipped - pt.repSkipped
	}
	pt.repSkipped, pt.repMember, pt.repLapsed = rep.Skipped, rep.Member, false
	return n
}

// capSkips caps n, the skips a report counted in this reading, at the
// partition's counted move in it (from prevCounted, the counted position
// before the reading): a skipped record is part of the move, so no more
// were skipped in the interval than the position moved. It bounds a
// count that jumps for any other reason (a reporter's lifetime count
// after its sender stripped it, a hostile reporter) to one reading of
// this partition's own consumption.
func (pt *partTrack) capSkips(n, prevCounted int64) int64 {
	if n <= 0 || prevCounted < 0 || pt.counted < prevCounted {
		return 0
	}
	return min(n, pt.counted-prevCounted)
}

// addSat returns a+b for b >= 0, saturating at the largest int64: a sum
// of counts never wraps negative.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// freshAt reports whether rep is a report at most r.ReportFresh old at now.
func (rep Report) freshAt(now time.Time, r Rules) bool {
	return !rep.IsZero() && now.Sub(rep.At) <= r.ReportFresh
}

// bestPos is a partition's best position and the head there.
type bestPos struct {
	pos       int64 // -1: unknown
	src       Source
	head      time.Time
	headKnown bool
	unc       time.Duration
}

// best returns the best position of the partition as of now: the fresh
// report, the estimate between commits, the commit, or the first-sight
// position, in that order (see Tracker).
func (pt *partTrack) best(r Rules, gap time.Duration, now time.Time) bestPos {
	p := pt.raw
	end := p.End
	if rep := p.Reported; rep.freshAt(now, r) {
		pos := rep.Position
		if pt.kind == KindNATS {
			// A stream sequence; End counts messages for this
			// consumer (see brokers/nats). Advance the committed
			// position by the sequences the report is past the ack
			// floor: exact for an unfiltered consumer, for a filtered
			// one the sequences between also number other subjects'
			// messages, so the lag is a lower bound (its head age,
			// from the report, is exact).
			pos = end - p.Lag
			if p.Committed >= 0 {
				// At most to the end: a sequence near the largest
				// int64 must not wrap the sum below zero.
				pos += min(max(rep.Position-p.Committed, 0), max(end-pos, 0))
			}
		} else {
			pos = max(pos, p.LogStart)
		}
		pos = min(max(pos, 0), end)
		b := bestPos{pos: pos, src: SourceConsumer, unc: max(now.Sub(rep.At), 0), headKnown: true}
		if pos < end {
			if b.head = rep.HeadTime; b.head.IsZero() {
				// Idle when it reported, records came since.
				b.head = pt.dateRecord(pos, rep.At, pos)
			}
		}
		return b
	}
	if p.Committed < 0 {
		if pt.synth < 0 {
			return bestPos{pos: -1}
		}
		b := bestPos{pos: pt.synth, src: SourceFirstSight, unc: max(now.Sub(pt.synthAt), 0), headKnown: true}
		if pt.synth < end {
			b.head = pt.dateRecord(pt.synth, pt.synthAt, pt.synth)
		}
		return b
	}
	cpos := end - p.Lag
	b := bestPos{pos: cpos, src: SourceCommits, head: p.HeadTime, headKnown: p.HeadKnown}
	n := len(pt.moves)
	// A consumer that commits about once per reading is read exactly
	// enough by its commits.
	// So is one whose cadence was learned from moves at every reading of
	// a slower spacing than now's (the daemon's loop went faster): until
	// it is seen to skip a reading, its cadence is not known to be longer
	// than the new spacing.
	if p.Lag == 0 || pt.ci <= gap*3/2 || n == 0 || pt.moves[n-1].pos != cpos ||
		(pt.seenGap > gap*3/2 && pt.ci <= pt.seenGap*3/2) {
		return b
	}
	last, caught := pt.moves[n-1].at, pt.caught
	if pt.emptyAt > last {
		// Seen with nothing to consume since its newest commit: caught
		// up then, whatever was written since (producers that stick to
		// other partitions for a while leave it idle, with no commit to
		// make).
		last, caught = pt.emptyAt, true
	}
	dt := min(time.Duration(now.UnixNano()-last), pt.ci+gap)
	var pos int64
	if caught {
		pos = min(pt.endBy(last+int64(dt)), cpos+int64(max(pt.keepUpRate(), pt.pool)*dt.Seconds()))
	} else {
		rate := pt.rate(r, gap, now)
		if rate > 0 {
			rate = max(rate, pt.proven)
		}
		pos = cpos + int64(rate*dt.Seconds())
	}
	if pos <= cpos {
		return b
	}
	pos = min(pos, end)
	b = bestPos{pos: pos, src: SourceEstimate, unc: time.Duration(now.UnixNano() - last), headKnown: p.HeadKnown || pos == end}
	if pos < end && p.HeadKnown {
		b.head = pt.dateRecord(cpos, p.HeadTime, pos)
	}
	return b
}

// keepUpRate is the most a consumer caught up at its newest commit is
// taken to consume until its next one, messages per second (see Tracker):
// the capacity it showed when last behind at two commits in a row, when
// it was written to at less than 90% of that since its previous commit
// (it caught up because its producers were held back: nothing shows it
// faster); otherwise twice the larger of the rate it consumed and the
// rate it was written at from its previous commit to this one (it kept
// up with all it was given, which bounds nothing above).
//
// A span that drained a backlog faster than that capacity (a restore)
// counts at its own rate, not twice it: that rate is the span's average,
// idle time included, and commits alone do not tell a consumer restored
// from 400 to 2,000/s from one restored to 900/s. Reading a span over
// twice the capacity as one that kept up with all it was given kept
// probing the first (2,459/s where a kfake recording followed at
// 1,215/s) and probed the second to 3,736/s, then drained (the
// simulator, 5 s commits of the previous poll, seed 9).
func (pt *partTrack) keepUpRate() float64 {
	if pt.behindRate > 0 && pt.prodRate < 0.9*pt.behindRate {
		return max(pt.behindRate, pt.spanRate)
	}
	return 2 * max(pt.spanRate, pt.prodRate)
}

// setPool shares poolRate among the partitions by what each holds beyond
// its commit (for a partition caught up at its commit, what was written to
// it since): a partition that got all of it may be consumed at the whole
// of it, and partitions written to evenly share it evenly (a saturated
// consumer caught up at its commits is not taken to be faster than it
// was).
func setPool(parts map[int32]*partTrack) {
	pool := poolRate(parts)
	var total float64
	for _, pt := range parts {
		total += float64(pt.beyondCommit())
	}
	for _, pt := range parts {
		pt.pool = 0
		if total > 0 {
			pt.pool = pool * float64(pt.beyondCommit()) / total
		}
	}
}

// beyondCommit is the partition's lag at its commit, messages (0 without
// a commit).
func (pt *partTrack) beyondCommit() int64 {
	if pt.raw.Committed < 0 {
		return 0
	}
	return max(pt.raw.Lag, 0)
}

// poolRate is the rate, messages per second, the consumer of parts is
// taken to keep up with on any one partition caught up at its commit: the
// rule of keepUpRate over the sums of the partitions' rates. A consumer
// reads its partitions with one capacity: producers that stick to one
// partition for a batch (franz-go's default partitioner for keyless
// records) send a partition that was idle over its last commit span more
// than twice what it got then, and its consumer, which took the other
// partitions' share over that span, takes it as well.
func poolRate(parts map[int32]*partTrack) float64 {
	var span, prod, behind float64
	for _, pt := range parts {
		span += pt.spanRate
		prod += pt.prodRate
		behind += pt.behindRate
	}
	if behind > 0 && prod < 0.9*behind {
		return max(behind, span)
	}
	return 2 * max(span, prod)
}

// endBy is the end offset of the newest reading at or before at (Unix
// nanoseconds) that the end points keep, at least the committed position.
func (pt *partTrack) endBy(at int64) int64 {
	pos := pt.raw.End - pt.raw.Lag
	for _, e := range pt.ends {
		if e.first <= at {
			pos = max(pos, e.off)
		}
	}
	return pos
}

// dateRecord estimates when the record at offset pos was written, given
// that the record at anchor was written at anchorAt (anchor <= pos), by
// linear interpolation over the end points (see Tracker). The result is
// never before anchorAt.
func (pt *partTrack) dateRecord(anchor int64, anchorAt time.Time, pos int64) time.Time {
	loOff, loAt := anchor, anchorAt.UnixNano()
	for _, e := range pt.ends {
		if e.off < loOff {
			continue
		}
		if e.off <= pos {
			// Records from e.off on were written after e.last.
			loOff, loAt = e.off, max(loAt, e.last)
			continue
		}
		// Records below e.off were written by e.first.
		hiAt := max(loAt, e.first)
		frac := float64(pos-loOff) / float64(e.off-loOff)
		return time.Unix(0, loAt+int64(frac*float64(hiAt-loAt)))
	}
	return time.Unix(0, loAt)
}

// view returns the partition's public state as of now.
func (pt *partTrack) view(r Rules, gap time.Duration, now time.Time) PartitionState {
	p := pt.raw
	v := PartitionState{PartitionSample: p, ObservedAt: pt.observedAt, Position: -1,
		CommitInterval: pt.ci, CommitRate: pt.rate(r, gap, now)}
	if n := len(pt.moves); n > 0 {
		v.LastCommit = time.Unix(0, pt.moves[n-1].at)
	}
	if p.Committed >= 0 {
		v.CommittedLag = p.Lag
		if p.Lag > 0 && p.HeadKnown {
			v.CommittedHeadAge = max(now.Sub(p.HeadTime), 0)
		}
	}
	if pt.observedAt.IsZero() {
		return v // a stale placeholder, never read
	}
	b := pt.best(r, gap, now)
	if b.pos < 0 {
		return v
	}
	v.Source, v.Position, v.Uncertainty = b.src, b.pos, b.unc
	v.Lag = max(p.End-b.pos, 0)
	v.HeadTime, v.HeadKnown = time.Time{}, true
	if v.Lag > 0 {
		v.HeadTime, v.HeadKnown = b.head, b.headKnown
		if b.headKnown {
			// A head stamped in the future (producer clock skew) is
			// age 0, not negative.
			v.HeadAge = max(now.Sub(b.head), 0)
		}
	}
	return v
}
