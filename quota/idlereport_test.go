package quota

import (
	"testing"
	"time"
)

// TestControllerIdleReportNotAQueue replays lagbridge bench --rows
// 'kafka/hook/sync/250ms' --loads 2 on kfake (main at 0976c06): a new
// group whose consumer (2,000 msg/s) reports through the hook every
// ~200 ms, read every 250 ms, 800 msg/s offered. Its reports had nothing
// in hand on every partition with lag, 0.2 s old, and its lag was what
// was written since (160 of 795 msg/s produced, heads 0.20 s). The first
// fresh reading measured 159 msg/s consumed (what it was given since it
// was first seen) and read "saturated: capacity 159/s, wait 807ms"; later
// idle readings (cons 148-281 msg/s, lag 64-94) limited it again and
// again for 3-4 s before the capacity drop. Such a reading is no queue:
// unlimited until the drop (decision 41), which is still seen within two
// readings.
func TestControllerIdleReportNotAQueue(t *testing.T) {
	ds := replayStates(t, "hook250-idle.jsonl", 250*time.Millisecond)
	if len(ds) != 46 {
		t.Fatalf("%d decisions, want 46", len(ds))
	}
	for i, d := range ds[:41] {
		if !d.IsUnlimited() {
			t.Errorf("decision %d (%s): %s at %.0f/s (%s), want unlimited: the consumer reported nothing in hand, its lag written since", i, d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
		}
	}
	seen := false
	for _, d := range ds[41:43] {
		seen = seen || !d.IsUnlimited()
	}
	if !seen {
		t.Errorf("the capacity drop (2,000 -> 400 msg/s, 800 offered) not limited within two readings: %s, %s", ds[41].Reason, ds[42].Reason)
	}
}
