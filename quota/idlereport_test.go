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

// TestControllerIdleAtSightNotAQueue replays the first readings of a new
// group committing every 250 ms (franz-go's auto-commit at 250 ms), read
// every 250 ms, 300 msg/s of keyless records, six partitions, each
// consumer at 2,000 msg/s: lagbridge bench --hot-partition --hot-interval
// 250ms on real Kafka 4.3.1 (main at 0976c06, before partition 0 slows
// down), and the same on kfake (hot250-startlock.jsonl, main at 911186f).
// The group had no lag at its first reading (rates not known yet); at the
// next, its first commits had moved 54 (60) msg/s of 313 (299) produced,
// lag 62 (60), head 0.24 (0.25) s: every record written since the first
// reading. Read as its capacity, "saturated: capacity 54/s, wait 1.142s"
// (60/s, 1.005s), then probes and follows for 3 s (on kfake, limited in 13
// of 14 decisions). No queue can have formed since a reading with no
// lag: unlimited throughout.
func TestControllerIdleAtSightNotAQueue(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
	}{{"kafka250-sight.jsonl", 40}, {"hot250-startlock.jsonl", 14}} {
		ds := replayStates(t, c.name, 250*time.Millisecond)
		if len(ds) != c.n {
			t.Fatalf("%s: %d decisions, want %d", c.name, len(ds), c.n)
		}
		for i, d := range ds {
			if !d.IsUnlimited() {
				t.Errorf("%s: decision %d (%s): %s at %.0f/s (%s), want unlimited: every record held was written since a reading with no lag", c.name, i, d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
			}
		}
	}
}
