package quota

import (
	"strings"
	"testing"
	"time"
)

// TestControllerRestoredClimb replays two lagbridge bench runs of
// kafka/autocommit-1s/sync/1s at 5x (kfake, main at e5339ee with each
// lag.State the controller stepped on recorded; 2,000 msg/s offered,
// capacity 2,000 -> 400 -> 2,000 msg/s, franz-go auto-committing every
// second, read every second). After the restore (30 s) the consumer was
// caught up at every commit (lag 38-176, head at most 0.1 s) and the
// probe climbed x1.5 a reading from where the law re-opened: 453, 550,
// 825, 1,238, 1,857, 2,785 msg/s and 810, 1,215, 1,823, 2,734 msg/s, so
// the producers were refused for 2-3 s of the judged window (from 32 s)
// while the consumer idled. Once it kept up over two moves with a produce
// rate a step above the capacity it showed saturated (742 and 446 msg/s),
// consuming what was produced (0.97 and 0.99 of it) with its head at the
// commit within the engage wait (0.09 and 0.05 s), the probe steps x3
// (restoredProbe): 2,000 msg/s is allowed one reading earlier. In the slow phase, probes that the consumer kept up with
// (630, 819, 1,007 msg/s, lumpy commits) never read as a restore.
//
// The third replays kafka/commit-per-poll/sync/1s at 10x (4,000 msg/s
// offered, the producers limited from the start). The episode's highest
// saturated capacity was 1,534 msg/s, read before the drop, and no
// produce rate after the restore came a step above it before the probe
// had climbed x1.5 a reading to 2,958 msg/s: 877, 1,315, 1,972 msg/s
// while the consumer consumed them all with lag 0 (refused while idle,
// session 32). The reference is the highest of the readings decided
// saturated since the last drain once there are satReadings of them
// (428 msg/s here: the drop's drain at 13-15 s, the slow phase after), so
// the probe steps x3 at 31 s. The first recording's reference was its
// episode's 742 msg/s, read at 9.7 s, before the drop's drain; since the
// drain the slow phase read at most 445 msg/s, and the step comes a
// reading earlier (32, was 33).
func TestControllerRestoredClimb(t *testing.T) {
	for _, tc := range []struct {
		file string
		at   int // the first reading at which 2,000 msg/s is allowed
		// ref: the saturated capacity the restore is judged against
		// (satShown), msg/s, as the reason gives it.
		ref string
	}{
		{"ac1s1s-5x-climb.jsonl", 32, "445"},
		{"ac1s1s-5x-climb2.jsonl", 32, "446"},
		{"cpp1s-10x-late.jsonl", 31, "428"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ds := replayStates(t, tc.file, time.Second)
			for i, d := range ds[:30] {
				if d.Rule == RuleProbeRestored {
					t.Errorf("reading %d, before the restore: %s at %.0f/s (%s)", i, d.Rule, d.Rate, d.Reason)
				}
			}
			first := -1
			for i := 30; i < len(ds) && first < 0; i++ {
				if ds[i].Rate >= 2000 {
					first = i
				}
			}
			if first != tc.at {
				t.Errorf("2,000 msg/s first allowed after the restore at reading %d, want %d", first, tc.at)
			}
			if d := ds[tc.at]; d.Rule != RuleProbeRestored {
				t.Errorf("reading %d: %s at %.0f/s (%s), want %s", tc.at, d.Rule, d.Rate, d.Reason, RuleProbeRestored)
			} else if want := "the " + tc.ref + "/s it showed saturated"; !strings.Contains(d.Reason, want) {
				t.Errorf("reading %d: reason %q, want it judged against %q", tc.at, d.Reason, want)
			}
		})
	}
}
