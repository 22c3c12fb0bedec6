package quota

import (
	"testing"
	"time"
)

// TestControllerKnownSlowNotWithOthers replays lagbridge bench
// kafka/guard/sync/250ms at 10x on kfake (main at b3bef3d, the first
// 3.75 s): one poll loop of 2,000 msg/s over six partitions behind the
// ttl guard, committing each poll, read every 250 ms, every partition's
// head at 0.24-0.35 s. At 2.5 s partition 2's commit moved 38 records
// (152 msg/s, a poll that held little of it) against a share of 667
// msg/s, and knownSlow listed it though its head (0.346 s) was no older
// than the others' (up to 0.352 s). Its lag left out of the wait, the
// topic's consumption read low: a step down at once, partitions 2 and 4
// listed until 9.3 s, estimates of 460-1,351 msg/s and three more step
// downs before the drop (10 s). No partition of these readings is slower
// than the others (one loop drains them all): none may be listed.
func TestControllerKnownSlowNotWithOthers(t *testing.T) {
	const name = "guard250-10x-knownslow.jsonl"
	rec := readRecording(t, name)
	ds := replayStates(t, name, 250*time.Millisecond)
	start := rec[0].State.At
	for i, d := range ds {
		if len(d.AvoidPartitions) == 0 {
			continue
		}
		var heads []float64
		for _, ps := range rec[i].State.Partitions {
			heads = append(heads, ps.HeadAge.Seconds())
		}
		t.Errorf("decision %d at %.2f s lists partitions %v (heads %.3f s): %s at %.0f/s (%s)",
			i, rec[i].State.At.Sub(start).Seconds(), d.AvoidPartitions, heads, d.Rule, d.Rate, d.Reason)
	}
}
