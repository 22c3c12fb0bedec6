package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerDeadThenRecoveredFreed: six partitions, 300 msg/s keyless, every
// consumer commits every 5 s (read every 1 s). Partition 0's consumer is
// dead (never commits) until 20 s; then a new owner (a rebalance) drains
// it all at its next commit and commits every 5 s after. Nothing keyless is
// written to p0 while it is avoided outright (no share), so its committed
// offset never moves again: that reading is exact, not one between
// commits. p0 must be freed (the list ends or p0 gets a share) within 30 s
// of its recovery; it stayed avoided to the end before (review-hot5s).
func TestControllerDeadThenRecoveredFreed(t *testing.T) {
	ctl := newCtl(t, ControllerConfig{Interval: time.Second})
	p := Policy{Name: "bench", MaxAge: 2 * time.Second}
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const n = 6
	end := make([]int64, n)
	committed := make([]int64, n)
	lastCommit := make([]time.Time, n)
	headTime := make([]time.Time, n) // time of the oldest unconsumed record
	var last Decision
	freedAt := -1
	for s := 1; s <= 80; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		// Writes over the last second, by the last decision's shares.
		avoided := last.AvoidPartitions
		var sharesSum float64
		for _, id := range avoided {
			sharesSum += shareOf(last.PartitionShares, id)
		}
		for i := 0; i < n; i++ {
			var w float64
			if slices.Contains(avoided, int32(i)) {
				w = 300 * shareOf(last.PartitionShares, int32(i))
			} else {
				w = 300 * (1 - sharesSum) / float64(n-len(avoided))
			}
			if w > 0 && end[i] == committed[i] {
				headTime[i] = now.Add(-time.Second)
			}
			end[i] += int64(w)
		}
		st := lag.State{At: now, Status: lag.StatusOK, Members: 1, ProduceRate: 300, ConsumeRate: 300, RatesKnown: true, LastProgress: now}
		for i := 0; i < n; i++ {
			alive := i != 0 || s >= 20
			if alive && s%5 == 0 {
				committed[i] = end[i]
				lastCommit[i] = now
			}
			ps := lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: int32(i), End: end[i], Committed: committed[i], Lag: end[i] - committed[i],
				HeadKnown: true}, ObservedAt: now, Source: lag.SourceCommits, Position: committed[i],
				CommittedLag: end[i] - committed[i], CommitInterval: 5 * time.Second, LastCommit: lastCommit[i]}
			if ps.Lag > 0 {
				ps.HeadTime = headTime[i]
				ps.HeadAge = now.Sub(headTime[i])
				ps.CommittedHeadAge = ps.HeadAge
			}
			if alive && i != 0 {
				ps.CommitRate = 50
			}
			st.Partitions = append(st.Partitions, ps)
			st.Lag += ps.Lag
			st.HeadAge = max(st.HeadAge, ps.HeadAge)
		}
		st.HeadAgeKnown = true
		last = ctl.Step(st, p, now)
		in := slices.Contains(last.AvoidPartitions, 0)
		t.Logf("t=%2d p0 end=%d committed=%d avoid=%v share0=%.3f %s %.0f", s, end[0], committed[0], last.AvoidPartitions, shareOf(last.PartitionShares, 0), last.Rule, last.Rate)
		if s > 20 && freedAt < 0 && (!in || shareOf(last.PartitionShares, 0) > 0) {
			freedAt = s
		}
	}
	if freedAt < 0 || freedAt > 50 {
		t.Errorf("p0 recovered at 20 s (drained, committing every 5 s) still avoided outright at 80 s (freed at %d)", freedAt)
	}
}
