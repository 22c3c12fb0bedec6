package quota

import (
	"strings"
	"testing"
	"time"
)

// TestControllerReopenProbeCapped replays lagbridge bench at 10x on kfake,
// commit per poll read every 250 ms (kafka/commit-per-poll/sync/250ms,
// main at 1c73e84, session 26): after the drop to 400 msg/s a step down's
// pause was kept (no commit for 6.9 s: the poll in hand), its ending
// commit read 390/s (endHold), a drain on the wait held the producers at 0
// until a commit at 22.5 s found the consumer caught up, and the law
// re-opened at 446/s. lag/ then estimated the position between commits at
// the rate of that commit's span (the backlog taken in one poll) up to the
// end offset, so the next readings read caught up whatever the consumer
// did, and the probe climbed x1.5 a reading from them: 704 and 1,056 msg/s
// ("caught up: probing from X/s"), while the commits showed 312-376/s; then
// "saturated: capacity 376/s" and step downs. Probes on those readings
// are capped one probe step above the capacity at the re-open (reopenCap).
func TestControllerReopenProbeCapped(t *testing.T) {
	const name = "cpp250-10x-keptclimb.jsonl"
	rec := readRecording(t, name)
	ds := replayStates(t, name, 250*time.Millisecond)
	kept, open := false, -1
	for i := 1; i < len(ds) && open < 0; i++ {
		kept = kept || strings.Contains(ds[i].Reason, "nothing committed since")
		if kept && ds[i-1].Rate == 0 && ds[i].Rate > 0 {
			open = i
		}
	}
	if open < 0 {
		t.Fatal("no re-open after a kept pause")
	}
	limit := ds[open].Capacity * (1 + DefaultControllerConfig.Probe)
	probes := 0
	for i := open + 1; i < len(ds) && ds[i].Rule == RuleProbe; i++ {
		probes++
		if d := ds[i]; d.Rate > limit {
			t.Errorf("decision %d, %.2f s after the re-open at %.0f/s (capacity %.0f/s): %s at %.0f/s (%s), want at most %.0f/s",
				i, rec[i].State.At.Sub(rec[open].State.At).Seconds(), ds[open].Rate, ds[open].Capacity, d.Rule, d.Rate, d.Reason, limit)
		}
	}
	if probes < 2 {
		t.Errorf("%d probes after the re-open, want the recording's 2", probes)
	}
}
