package quota

import (
	"testing"
	"time"
)

// TestControllerRestoreAfterDrainReopens replays two lagbridge bench runs
// of kafka/autocommit-1s/sync/1s at 2x (kfake, main at 5d5b7e9): franz-go
// auto-commits every second, the daemon reads every second, 800 msg/s
// offered, capacity 2,000 -> 400 -> 2,000 msg/s. In each, a drain was in
// force when the capacity came back (the slow phase's probes had
// overshot), and the first reading that shows the restore has the
// consumer caught up at its commit (lag 0, head 0) after draining 770
// and 1,337 msg/s over the interval, with the head at the reading before
// past the deadline (2.72 s, 2.20 s). The rise was not taken as capacity
// (skipped work is not capacity) and no probe steps from a drain (no rate
// in force), so the law re-opened at 207 and 332 msg/s and the probe
// climbed x1.5 a second from there: producers refused for 2 and 1 s of
// the judged window while the consumer idled. A consumer that commits
// about once per observation and has drained what it held, at 90% or more
// of the rate it kept up with while unlimited (800 msg/s), is re-opened
// from what it drained, up to that rate (drainedAtCommits): 1,155 and
// 1,000 msg/s.
func TestControllerRestoreAfterDrainReopens(t *testing.T) {
	for _, tc := range []struct {
		file string
		at   int // the first reading that shows the restore
	}{
		{"ac1s1s-restoredrain.jsonl", 31},
		{"ac1s1s-restoredrain2.jsonl", 30},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ds := replayStates(t, tc.file, time.Second)
			prev, d := ds[tc.at-1], ds[tc.at]
			if prev.Rule != RuleDrain || d.Lag != 0 {
				t.Fatalf("reading %d: %s before, lag %d: not the recording's restore", tc.at, prev.Rule, d.Lag)
			}
			if d.Rate < 0.99*800 {
				t.Errorf("reading %d (drained, lag 0, after a drain): %s at %.0f/s (%s), want at least 99%% of the 800/s offered", tc.at, d.Rule, d.Rate, d.Reason)
			}
		})
	}
}
