package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerOwnPaceListedByItsWait replays lagbridge bench
// --hot-partition --hot-commit 5s --hot-slow-after 10s --hot-consumer hook
// on kfake at 1 s (21d7eca, keyless, the first 24 readings): six
// partitions, each processed by a worker of its own, the consumer hook
// reporting with KeepUntilFinished every 250 ms; partition 0's worker
// slows to 20 msg/s about 9 s into the recording while the sticky
// partitioner keeps feeding it about 50. Its reported position moves
// 20 a second with its lag growing (22, 40, 62, 75, 84 records), the
// other partitions idle. Read as one poll loop's (polledWait: the
// target's lag over the target's consumption, 270 msg/s), its wait was
// 0.1-0.3 s and it was listed only when its head passed MaxAge, with
// 107 records (5.3 s of its work) waiting. Reported at its own pace
// (ownPace, protocol 1.6), its wait is its lag over its own drain, and it
// is listed while its head is still inside the deadline.
func TestControllerOwnPaceListedByItsWait(t *testing.T) {
	const file = "hot1s-ac5s-hook-keep.jsonl"
	var heads []time.Duration // partition 0's head age per reading
	keep := func(own bool) func(*lag.State) {
		return func(st *lag.State) {
			for i := range st.Partitions {
				ps := &st.Partitions[i]
				if ps.Partition == 0 && own {
					heads = append(heads, ps.HeadAge)
				}
				if !ps.Reported.IsZero() {
					ps.Reported.OwnPace = own
				}
			}
		}
	}
	firstListed := func(ds []Decision) int {
		return slices.IndexFunc(ds, func(d Decision) bool { return slices.Contains(d.AvoidPartitions, 0) })
	}
	own := replayEdited(t, file, 0, newCtl(t, ControllerConfig{Interval: time.Second}), keep(true))
	late := slices.IndexFunc(heads, func(h time.Duration) bool { return h > 2*time.Second })
	if late < 0 {
		t.Fatal("partition 0's head never passes 2s in the recording")
	}
	first := firstListed(own)
	if first < 0 || first >= late {
		t.Fatalf("own pace: partition 0 first listed at reading %d, want before %d (head %v)", first, late, heads[late])
	}
	t.Logf("own pace: listed at reading %d, head %v (its head passes 2 s at reading %d)", first, heads[first], late)
	for i, d := range own {
		if i >= first && !slices.Equal(d.AvoidPartitions, []int32{0}) {
			t.Errorf("own pace, decision %d: avoid %v (%s), want [0] from %d on", i, d.AvoidPartitions, d.Reason, first)
		}
		if !d.IsUnlimited() {
			t.Errorf("own pace, decision %d: %s at %.0f/s (%s), want the topic unlimited", i, d.Rule, d.Rate, d.Reason)
		}
	}
	// The same readings from a poll loop's reporter: its wait is the
	// loop's, and only the head past MaxAge lists it (as recorded).
	if got := firstListed(replayEdited(t, file, 0, newCtl(t, ControllerConfig{Interval: time.Second}), keep(false))); got != late {
		t.Errorf("poll loop: partition 0 first listed at reading %d, want %d (its head past 2 s)", got, late)
	}
}

// ownPaceReplay replays the hook recording of
// TestControllerOwnPaceListedByItsWait with every reported partition
// at its own pace and each state passed through edit (with its index)
// first, and returns the decisions.
func ownPaceReplay(t *testing.T, edit func(i int, st *lag.State)) []Decision {
	t.Helper()
	i := 0
	return replayEdited(t, "hot1s-ac5s-hook-keep.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
		for j := range st.Partitions {
			if ps := &st.Partitions[j]; !ps.Reported.IsZero() {
				ps.Reported.OwnPace = true
			}
		}
		edit(i, st)
		i++
	})
}

// TestControllerOwnPaceFirstSightOwnWait: partition 0 of the hook
// recording left out of the first 12 readings (as if handed to the group
// there), first seen with 62 records and its commit rate read at the
// 20 msg/s its worker slowed to: at its own pace its first-sight wait is
// its own (3.1 s), and it is listed at once; the poll loop's (0.2 s, the
// loop keeping up) would list it only a reading later.
func TestControllerOwnPaceFirstSightOwnWait(t *testing.T) {
	const sight = 12
	ds := ownPaceReplay(t, func(i int, st *lag.State) {
		if st.Partitions[0].Partition != 0 {
			t.Fatalf("reading %d: first partition %d, want 0", i, st.Partitions[0].Partition)
		}
		switch {
		case i < sight:
			st.Partitions = st.Partitions[1:]
		case i == sight:
			st.Partitions[0].CommitRate = 20
		}
	})
	if d := ds[sight]; !slices.Equal(d.AvoidPartitions, []int32{0}) {
		t.Errorf("decision %d, partition 0 first seen: avoid %v, %s (%s), want [0]", sight, d.AvoidPartitions, d.Rule, d.Reason)
	}
}

// TestControllerOwnPaceKnownSlow: the hook recording at its own pace with
// partition 0's head age read at most 0.3 s (under lateHead: as young as
// a healthy partition's): its own drain (its worker slowed to 20 msg/s),
// measured with work left behind, lists it by knownSlow whatever its head
// says, as for a partition read from commits; by its head alone it would
// never be.
func TestControllerOwnPaceKnownSlow(t *testing.T) {
	ds := ownPaceReplay(t, func(_ int, st *lag.State) {
		ps := &st.Partitions[0]
		ps.HeadAge = min(ps.HeadAge, 300*time.Millisecond)
	})
	if !slices.ContainsFunc(ds, func(d Decision) bool { return slices.Contains(d.AvoidPartitions, 0) }) {
		t.Error("partition 0, its consumer slowed to 20 msg/s, its head read at most 0.3 s: never listed")
	}
}
