package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerOwnPaceSharedPoolNotListed replays the lagbridge side of
// `lagbridge bench --rows kafka/workers/sync/1s --loads 2` (kfake, main
// 0c6ff83 with a step tracer, 17:37 UTC): six partition workers that share
// ONE capacity (one pacer), reported with KeepUntilFinished, so every
// partition says ownPace. A partition's drain there is its share of the
// pool, not its own: no partition is slow, the consumer is. With ownPace
// read as its own drain, partition 5 was listed late at 14 decisions with
// heads of 0.4-1.3 s; read as the loop's (ownPace stripped, protocol 1.5)
// it is never listed while its head is inside MaxAge.
func TestControllerOwnPaceSharedPoolNotListed(t *testing.T) {
	for _, own := range []bool{false, true} {
		heads := map[int]map[int32]time.Duration{}
		i := 0
		edit := func(st *lag.State) {
			heads[i] = map[int32]time.Duration{}
			for j := range st.Partitions {
				ps := &st.Partitions[j]
				heads[i][ps.Partition] = ps.HeadAge
				if !ps.Reported.IsZero() {
					ps.Reported.OwnPace = own
				}
			}
			i++
		}
		ds := replayEdited(t, "workers1s-2x-keep.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), edit)
		bad := 0
		for k, d := range ds {
			for _, p := range d.AvoidPartitions {
				if h := heads[k][p]; h < 1500*time.Millisecond {
					bad++
					t.Logf("ownPace %v, decision %d: partition %d listed with its head at %v (%s)", own, k, p, h, d.Reason)
				}
			}
		}
		if bad > 0 {
			t.Errorf("ownPace %v: %d listings of a partition whose head is under 1.5 s, in a pool that shares one capacity", own, bad)
		}
	}
}
