package quota

import (
	"slices"
	"testing"
	"time"
)

// TestControllerBlindCapKeepsCommitCap replays lagbridge bench
// kafka/autocommit-1s/sync/250ms at 2x (kfake, main at a8b6aaa, from the
// slow phase's drain to the release): a consumer that auto-commits every
// second, read every 250 ms through lag's estimate between its commits,
// 800 msg/s offered. The first commit after the restore showed it caught
// up, and the probe went to 954/s (one step above what it consumed over
// the span that ended there). At the next reading the producers used
// that rate and the estimate (moving at the span's rate) read a backlog:
// the blind cap, one probe step above what the producers had sent over
// the span (the slow phase's 363/s), cut the rate to 544/s of the 800/s
// offered, and the reading after let it back to 954/s, twice before the
// next commit: refused while the consumer sat idle. Where a commit can
// tell a consumer at its setpoint from one caught up (datesSetpoint), the
// blind cap is never below that commit's own probe cap.
func TestControllerBlindCapKeepsCommitCap(t *testing.T) {
	ds := replayStates(t, "ac1s250-restore.jsonl", 250*time.Millisecond)
	// The probes after the restore: those before the release.
	first := slices.IndexFunc(ds, func(d Decision) bool { return d.Rule == RuleRelease })
	if first < 0 {
		t.Fatal("no release: the case tests nothing")
	}
	for first > 0 && ds[first-1].Rule == RuleProbe {
		first--
	}
	if ds[first].Rule != RuleProbe || ds[first].Rate < 800 {
		t.Fatalf("%s: %s at %.0f/s, want a probe at or above the 800/s offered after the restore: the case tests nothing", ds[first].At.Format("15:04:05.000"), ds[first].Rule, ds[first].Rate)
	}
	for _, d := range ds[first:] {
		if d.Rate < 800 {
			t.Errorf("%s: %s at %.0f/s (%s), want at least the 800/s offered: the consumer was caught up at its last commit", d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
		}
	}
}

// TestSimOneSecondAutoCommitAt250ms: the kafka/autocommit-1s/sync/250ms
// row in the simulator, at commit timer phases where, before the blind
// cap kept the commit's probe cap (see
// TestControllerBlindCapKeepsCommitCap), the readings between the first
// commits after the restore cut the probe back to one step above what
// the producers sent in the slow phase: 98.7% of the offer admitted after
// the restore, refused 0.35 s while the consumer idled (the consumer's
// position committed as it is consumed), and 98.7%, 0.39 s (the previous
// poll committed, as franz-go does).
func TestSimOneSecondAutoCommitAt250ms(t *testing.T) {
	for _, tc := range []autoCommitCase{
		{name: "position committed", interval: 250 * time.Millisecond, commit: time.Second, commitAt: 0.1, load: 2},
		{name: "previous poll committed", interval: 250 * time.Millisecond, commit: time.Second, commitAt: 0.7, polls: true, load: 2},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}
