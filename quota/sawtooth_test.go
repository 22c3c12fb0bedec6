package quota

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerFirstSightHoldNotSlow replays lagbridge bench
// --hot-partition --hot-commit 5s --hot-slow-after 10s --hot-interval 1s
// on kfake (main at 87ff78a, keyless): a new group committing every 5 s,
// partition 0's consumer slowed from 2,000 to 20 msg/s at 10 s, seen at the
// commit read at 15 s (head 3.5 s). Before its first commit every
// partition's head was past MaxAge (a partition first seen ages from
// then), all six were late and the list was not given (AvoidBelow); the
// healthy five then stayed held by the trial of a slow partition, their
// rate (what they were fed, about 50 msg/s, read between two commits that
// left nothing behind) below the share a freed partition would get with
// all six listed (the whole offer, 300 msg/s). Partition 0 was listed at
// 22 s, 12 s after it slowed, and meanwhile its backlog was the topic's:
// "saturated: capacity 323/s" and a step down to 0 for all six
// partitions. A rate read while the partition drained everything it was
// given is a lower bound of its consumer's, not a slow consumer.
func TestControllerFirstSightHoldNotSlow(t *testing.T) {
	ds := replayStates(t, "hot1s-ac5s-slowed.jsonl", time.Second)
	const seen = 15 // the reading of the commit at 15 s
	for i, d := range ds {
		switch {
		case i < seen && len(d.AvoidPartitions) > 0:
			t.Errorf("decision %d: partitions %v avoided before partition 0 is seen late", i, d.AvoidPartitions)
		case i >= seen && !slices.Equal(d.AvoidPartitions, []int32{0}):
			t.Errorf("decision %d: avoid %v (%s), want [0] from decision %d on", i, d.AvoidPartitions, d.Reason, seen)
		case i >= seen && !d.IsUnlimited():
			t.Errorf("decision %d: %s at %.0f/s (%s), want the topic unlimited: five partitions drain 10,000 msg/s", i, d.Rule, d.Rate, d.Reason)
		}
	}
}

// TestControllerBetweenCommitsNoCalm replays lagbridge bench
// --hot-partition --hot-commit 5s --hot-slow-after 10s --hot-interval 1s
// on Kafka 4.3.1 (main at 87ff78a, keyless): partition 0's consumer drains
// 20 msg/s from 10 s on, to the end. Fed its keyless share, it was caught
// up at some commits, and the Tracker then takes it to keep up with what
// is written until its next one: between two commits its estimated lag
// read 0, its share grew by limitGrowth a second on those readings
// (0.094, 0.124, 0.135 of the offer) and the list was ended at a lag of
// 0 estimated 3.5 s after a commit; the next commit showed 134 records
// (2.6 s) waiting, and partition 0 was listed again. Between its commits
// a listed partition is not freed and its share does not grow.
func TestControllerBetweenCommitsNoCalm(t *testing.T) {
	var committed []int64
	edit := func(st *lag.State) {
		for _, ps := range st.Partitions {
			if ps.Partition == 0 {
				committed = append(committed, ps.Committed)
			}
		}
	}
	ds := replayEdited(t, "hot1s-ac5s-kafka.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), edit)
	first := slices.IndexFunc(ds, func(d Decision) bool { return slices.Contains(d.AvoidPartitions, 0) })
	if first < 0 || first > 15 {
		t.Fatalf("partition 0 first listed at decision %d, want by 15 (its commit at 15 s shows it late)", first)
	}
	for i := first + 1; i < len(ds); i++ {
		d, prev := ds[i], shareOf(ds[i-1].PartitionShares, 0)
		if !slices.Contains(d.AvoidPartitions, 0) {
			t.Errorf("decision %d: partition 0 no longer listed (%s), its consumer at 20 msg/s", i, d.Reason)
		}
		// Its share is of the produce rate, which moves a little.
		if s := shareOf(d.PartitionShares, 0); committed[i] == committed[i-1] && prev > 0 && s > 1.2*prev {
			t.Errorf("decision %d: partition 0's share grew from %.3f to %.3f between two of its commits", i, prev, s)
		}
	}
}

// TestPartLimitCommitCadence pins partLimit's worked example, and the
// same partition read between 5 s commits: what it is fed beyond its
// drain waits a whole cadence before a commit shows it, so the fill to
// the setpoint and the probe's growth are spread over it.
func TestPartLimitCommitCadence(t *testing.T) {
	fed := partTrack{limit: 18}
	for _, tc := range []struct {
		name    string
		pt      partTrack
		next    partTrack
		lag     float64
		h       float64
		between bool
		want    float64
	}{
		// 20 + (10 - 30): a backlog past the setpoint drains first, whatever h.
		{"backlog, every observation", partTrack{}, partTrack{rate: 20}, 30, 1, false, 0},
		{"backlog, 5 s commits", partTrack{}, partTrack{rate: 20}, 30, 5, false, 0},
		// max(20 + 5, 18 x 1.25): the doc's example.
		{"calm and fed, every observation", fed, partTrack{rate: 20, inAvg: 18}, 5, 1, false, 25},
		// max(20 + 5/5, 18 x min(1.25, 1 + 0.5/5)).
		{"calm and fed, 5 s commits", fed, partTrack{rate: 20, inAvg: 18}, 5, 5, false, 21},
		// Between commits it only falls: min(21, 18).
		{"between commits", fed, partTrack{rate: 20, inAvg: 18}, 5, 5, true, 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := partLimit(tc.pt, tc.next, tc.lag, 0.5, 1, tc.h, tc.between); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("partLimit = %v, want %v", got, tc.want)
			}
		})
	}
}
