package quota

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// commitsPart is partition 0 read through its commits (every every),
// committed at committed with lag records written since, its last commit
// at lastCommit.
func commitsPart(committed, lagMsgs int64, every time.Duration, lastCommit time.Time) lag.PartitionState {
	return lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: 0, End: committed + lagMsgs, Committed: committed, Lag: lagMsgs},
		Source: lag.SourceCommits, Position: committed, CommittedLag: lagMsgs, CommitInterval: every, LastCommit: lastCommit}
}

// listedStep runs keepLate for partition 0, listed at the last decision
// and judged late now, drained at 20 msg/s and fed its whole rate (pt.limit)
// over the last second; it returns the partition's record after it.
func listedStep(pt partTrack, ps lag.PartitionState, at time.Time, dt float64) partTrack {
	tc := &control{last: Decision{AvoidPartitions: []int32{0}}}
	v := &reading{dt: dt, setWait: 0.5}
	st := &lag.State{At: at}
	next := partTrack{late: pt.late, rate: 20, full: true, capSeen: true, inAvg: pt.limit, limit: pt.limit, committed: ps.Committed, freshAt: pt.freshAt}
	keepLate(tc, pt, &next, true, &ps, st, v, true, 0, 0, 0, dt)
	return next
}

// TestKeepLateCommitCadence: a listed partition read every second through
// 5 s commits, at the reading of a commit, gets partLimit's rate for a
// cadence of 5 s (its worked example: 21 msg/s), not the one for a reading
// every second (25 msg/s: the fill to the setpoint and the probe's growth
// in one second, which the next commit shows only 5 s later).
func TestKeepLateCommitCadence(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := t0.Add(5 * time.Second)
	pt := partTrack{late: true, limit: 18, committed: 100, freshAt: at.Add(-time.Second)}
	next := listedStep(pt, commitsPart(200, 5, 5*time.Second, at), at, 1)
	if math.Abs(next.limit-21) > 1e-9 {
		t.Errorf("limit at the commit = %v msg/s, want 21 (partLimit with h = 5, the commit cadence)", next.limit)
	}
}

// TestKeepLateGrowthSinceFresh: a listed partition fed its rate, read
// every 250 ms through commits every second (h = 1), keeps its rate over
// the three readings between two commits and, at the next commit, grows
// it by limitGrowth over the whole second since the last fresh reading:
// 24 x 1.25 = 30 msg/s, not 24 x 1.25^0.25 (the growth of one interval,
// which would make the probe four times slower than limitGrowth a second).
func TestKeepLateGrowthSinceFresh(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	pt := partTrack{late: true, limit: 24, committed: 100, freshAt: t0}
	for i := 1; i <= 4; i++ {
		at := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		ps := commitsPart(100, int64(5*i), time.Second, t0)
		if i == 4 {
			ps = commitsPart(120, 5, time.Second, at) // the next commit
		}
		next := listedStep(pt, ps, at, 0.25)
		want, what := 24.0, "between two commits"
		if i == 4 {
			want, what = 30, "at the commit a second after the last"
		}
		if math.Abs(next.limit-want) > 1e-9 {
			t.Errorf("reading %d (%s): limit %v msg/s, want %v", i, what, next.limit, want)
		}
		pt = next
	}
}

// TestHoldLateCapacityForgotten: a partition whose consumer's capacity was
// seen (capSeen) and was below the share it would get back, freed, then
// listed again by its wait with a rate only ever seen draining all it was
// given (a lower bound of its consumer's), is freed after avoidCalm calm
// readings: the capacity seen while it was last listed is forgotten when
// it is unlisted, and the new rate is not a slow consumer's (no probe of
// avoidProbe seconds).
func TestHoldLateCapacityForgotten(t *testing.T) {
	const share, dt = 50.0, 1.0
	// Listed, its capacity seen (at 100 msg/s, above the share), calm.
	pt := partTrack{late: true, capSeen: true, full: true, rate: 100, calm: avoidCalm - 1}
	carry := func(pt partTrack) partTrack {
		// What trackPart carries from one observation to the next.
		return partTrack{full: pt.full, capSeen: pt.capSeen, rate: pt.rate, probe: pt.probe, limit: pt.limit, late: pt.late}
	}
	next := carry(pt)
	if holdLate(pt, &next, false, false, 0, 0, 0, 0.5, share, dt) {
		t.Fatalf("still listed after %d calm readings at a capacity of 100 msg/s", avoidCalm)
	}
	// Listed again at once; its rate now 10 msg/s, read while it drained
	// all it was fed (not full).
	pt = next
	next = carry(pt)
	next.rate, next.full = 10, false
	next.capSeen = next.capSeen || next.full // as lateParts does
	if !holdLate(pt, &next, true, false, 100, 3, 3, 0.5, share, dt) {
		t.Fatal("not listed again when judged late")
	}
	for i := 1; ; i++ {
		pt = next
		next = carry(pt)
		next.capSeen = next.capSeen || next.full
		if !holdLate(pt, &next, false, false, 0, 0, 0, 0.5, share, dt) {
			if i != avoidCalm {
				t.Errorf("freed after %d calm readings, want %d", i, avoidCalm)
			}
			break
		}
		if i > 2*avoidCalm {
			t.Fatalf("still listed after %d calm readings (capSeen %v from its listing before): held as a slow consumer", i, next.capSeen)
		}
	}
}

// TestBetweenCommits pins betweenCommits and commitCadence on their edges:
// a reading is between commits only for a partition seen before (had), in
// this cycle (not Stale), whose commit cadence is over 1.5 observations,
// whose committed offset has not moved and which was written to since.
func TestBetweenCommits(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	pt := partTrack{committed: 100}
	for _, tc := range []struct {
		name  string
		pt    partTrack
		had   bool
		every time.Duration
		dt    float64
		mod   func(*lag.PartitionState)
		want  bool
		cad   float64
	}{
		{"5 s commits, read every second", pt, true, 5 * time.Second, 1, nil, true, 5},
		{"2 s commits, read every second", pt, true, 2 * time.Second, 1, nil, true, 2},
		{"1.2 s commits, read every second", pt, true, 1200 * time.Millisecond, 1, nil, false, 0},
		{"1 s commits, read every 250 ms", pt, true, time.Second, 0.25, nil, true, 1},
		{"commits every reading", pt, true, time.Second, 1, nil, false, 0},
		{"committed moved", partTrack{committed: 90}, true, 5 * time.Second, 1, nil, false, 5},
		{"nothing written since the commit", pt, true, 5 * time.Second, 1, func(ps *lag.PartitionState) { ps.End, ps.Lag = 100, 0 }, false, 5},
		{"stale reading", pt, true, 5 * time.Second, 1, func(ps *lag.PartitionState) { ps.Stale = true }, false, 5},
		{"first seen at offset 0", partTrack{}, false, 5 * time.Second, 1, func(ps *lag.PartitionState) { ps.Committed, ps.Position = 0, 0 }, false, 5},
		{"consumer's reports", pt, true, 5 * time.Second, 1, func(ps *lag.PartitionState) { ps.Source = lag.SourceConsumer }, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := commitsPart(100, 30, tc.every, t0)
			if tc.mod != nil {
				tc.mod(&ps)
			}
			if got := commitCadence(&ps, tc.dt); got != tc.cad {
				t.Errorf("commitCadence = %v, want %v", got, tc.cad)
			}
			if got := betweenCommits(tc.pt, tc.had, &ps, tc.dt); got != tc.want {
				t.Errorf("betweenCommits = %v, want %v", got, tc.want)
			}
		})
	}
}
