package quota

import (
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// PartitionShare is the fraction of a producer's keyless records a late
// partition still gets: what its consumer drains, over the topic's
// produce rate. A partition listed in AvoidPartitions with a share is fed
// that fraction of keyless records instead of none; a keyed record bound
// for it goes with probability share x partitions and is refused for it
// otherwise (see [Decision].AvoidPartitions), so that it gets about the
// same share of keyed records.
type PartitionShare struct {
	Partition int32 `json:"partition"`
	// Share is in (0, 1/n] for a topic of n partitions: never more than
	// the even share the partition would get unlisted.
	Share float64 `json:"share"`
}

// limitGrowth is how fast (per second) a late partition's keyless rate
// grows while its consumer drains all it is fed and stays inside the
// target wait: the probe that finds a recovered consumer without handing
// it its whole share at once. feedRatio is the part of its rate a
// partition must have been written (over about the last second, see
// fedLimited) for that to count as evidence of what its consumer drains:
// traffic refused for it (keyed records through an SDK that does not read
// the shares) writes nothing, and proves nothing.
const (
	limitGrowth = 1.25
	feedRatio   = 0.5
)

// partLimit is the keyless rate, msg/s over the whole topic, a listed
// partition gets after this observation: the rate its consumer was seen to
// drain it at (next.rate, measured while it had a backlog), less what
// brings its backlog (lagMsgs, see partBacklog) back to setWait of that
// rate within one second (never below 0: a backlog past that is drained
// first), or, below that, plus what fills it to setWait within h seconds
// (the time until it is seen again: 1, or its commit cadence when it is
// read between commits, see commitCadence); and, while the consumer
// drained everything it was fed (a backlog of at most setWait of work) and
// it was fed at least feedRatio of its rate, the previous rate grown by
// limitGrowth per second (over dt seconds, at most two), by at most
// setWait of work over h. 0 (avoid it outright) while its drain rate is
// unknown. Between commits (between) it only falls.
//
// Example: drained at 20 msg/s, setWait 0.5 s: 30 messages of lag give
// 20 + (10 - 30) = 0 msg/s until it is down to its setpoint; 5 of lag,
// fed 18 msg/s over the last second at a rate of 18, give max(25, 22.5)
// = 25 msg/s; read at 5 s commits (h = 5), max(21, 18 x 1.1) = 21 msg/s:
// what it is fed beyond its drain waits until the next commit shows it.
func partLimit(pt, next partTrack, lagMsgs float64, setWait, dt, h float64, between bool) float64 {
	c := next.rate
	if c <= 0 {
		return 0
	}
	surplus := c*setWait - lagMsgs
	if surplus > 0 {
		surplus /= h
	}
	lim := max(c+surplus, 0)
	if between {
		// Nothing new since its last commit: the rate does not grow.
		return min(lim, pt.limit)
	}
	if lagMsgs <= c*setWait {
		// Calm: the consumer drained what it was fed, and c may be only
		// that; the rate does not shrink, and grows while it is fed.
		lim = max(lim, pt.limit)
		if fedLimited(pt, next) {
			g := math.Pow(limitGrowth, min(dt, 2))
			if h > 1 {
				g = min(g, 1+setWait/h)
			}
			lim = max(lim, pt.limit*g)
		}
	}
	return lim
}

// betweenCommits reports whether ps is read between two of its commits:
// its position comes from its commits (as they are, or estimated from
// the last one), it commits less often than every 1.5 observations (dt,
// seconds; its learned cadence), and its committed offset has not moved
// since the last observation. Such a reading repeats the last commit's,
// aged, or extrapolates it: an estimate that says the consumer kept up
// with what was written (what the Tracker takes of a consumer caught up
// at its commit) is the Tracker's assumption, not the consumer's doing.
// Read as evidence, a slow partition fed its keyless share looked
// comfortable between its 5 s commits, its share grew by limitGrowth a
// second on them, and its list was ended on a lag of 0 that the next
// commit took back (TestControllerBetweenCommitsNoCalm). A partition
// with nothing written since its commit is not between commits: its
// reading is exact, and one avoided outright (no share) is written nothing
// and commits nothing, so it would be held for ever
// (TestControllerDeadThenRecoveredFreed).
func betweenCommits(pt partTrack, had bool, ps *lag.PartitionState, dt float64) bool {
	return had && !ps.Stale && commitCadence(ps, dt) > 0 && ps.Committed == pt.committed && ps.End > ps.Committed
}

// commitCadence is the learned commit cadence, seconds, of a partition
// whose position comes from its commits (as they are, or estimated from
// the last one) when it is longer than 1.5 observations (dt, seconds); 0
// otherwise.
func commitCadence(ps *lag.PartitionState, dt float64) float64 {
	switch ps.Source {
	case "", lag.SourceCommits, lag.SourceEstimate:
		if ci := ps.CommitInterval.Seconds(); ci > 1.5*dt {
			return ci
		}
	}
	return 0
}

// partBacklog is a partition's lag less what its consumer, read through
// its commits, drained since its last commit (at its drain rate, over at
// most one commit cadence: a consumer overdue is not assumed to drain):
// the work really waiting. A position that is not a commit is taken as
// it is.
func partBacklog(ps *lag.PartitionState, rate float64, at time.Time, v *reading) float64 {
	l := float64(ps.Lag)
	cad := partCadence(ps, v)
	if cad <= 0 || rate <= 0 || ps.LastCommit.IsZero() {
		return l
	}
	age := min(max(at.Sub(ps.LastCommit).Seconds(), 0), cad)
	return max(l-rate*age, 0)
}

// fedLimited reports whether a listed partition with a keyless rate was
// written to at least feedRatio of it over about the last second (inAvg:
// at a few messages a second, one interval of 250 ms holds none or one):
// producers feed it what its consumer drains, so it needs no timed trial
// to show a recovered consumer (its rate grows while it keeps up).
func fedLimited(pt, next partTrack) bool {
	return pt.limit > 0 && next.inAvg >= feedRatio*pt.limit
}

// keylessShares is the share of keyless records each avoided partition
// with a rate gets: its rate over produced (the topic's produce rate,
// msg/s, the avoided partitions included), at most 1/n. None when nothing
// is produced.
func keylessShares(tc *control, avoid []int32, produced float64, n int) []PartitionShare {
	if produced <= 0 || n <= 0 {
		return nil
	}
	var out []PartitionShare
	for _, id := range avoid {
		if lim := tc.parts[id].limit; lim > 0 {
			out = append(out, PartitionShare{Partition: id, Share: min(lim/produced, 1/float64(n))})
		}
	}
	return out
}

// combineShares is the keyless share of each partition in avoid (the
// topic's union of the groups' lists) when every counting group that lists
// it gives it one: the smallest. A group that lists a partition with no
// share avoids it outright.
func combineShares(ds []Decision, counts func(Decision) bool, avoid []int32) []PartitionShare {
	var out []PartitionShare
	for _, id := range avoid {
		share, ok := math.Inf(1), true
		for _, d := range ds {
			if !counts(d) || !slices.Contains(d.AvoidPartitions, id) {
				continue
			}
			s := shareOf(d.PartitionShares, id)
			if s <= 0 {
				ok = false
				break
			}
			share = min(share, s)
		}
		if ok && !math.IsInf(share, 1) {
			out = append(out, PartitionShare{Partition: id, Share: share})
		}
	}
	return out
}

// shareOf is partition id's share in ss, 0 when it has none.
func shareOf(ss []PartitionShare, id int32) float64 {
	for _, s := range ss {
		if s.Partition == id {
			return s.Share
		}
	}
	return 0
}

// sameShares reports whether a and b list the same partitions with shares
// within a relative tol of each other.
func sameShares(a, b []PartitionShare, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Partition != b[i].Partition || math.Abs(a[i].Share-b[i].Share) > tol*max(a[i].Share, b[i].Share) {
			return false
		}
	}
	return true
}
