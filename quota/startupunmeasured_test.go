package quota

import (
	"testing"
	"time"
)

// TestControllerStartupUnmeasuredNotAQueue replays the first readings of
// a lagbridge bench run of kafka/autocommit-1s/sync/1s at 2x on Kafka 4.3.1
// (580edb2's code, 800 msg/s offered to a consumer of 2,000 that franz-go
// auto-commits every second, read every second, the capacity dropping to
// 400 msg/s at 10 s). Its second fresh reading measured nothing (no commit
// since the one before: lag 761, head at the commit 0.96 s, the cadence
// just learned) and got no startup allowance for the second of
// uncommitted work: "saturated: capacity 686/s, wait 1.11s", then
// saturated, step-down and a probe in turn until the drop, 9 seconds in
// which producers were refused while the consumer idled. Such a reading
// tells neither way (see unlearnedWait): the target stays unlimited until
// the drop shows.
func TestControllerStartupUnmeasuredNotAQueue(t *testing.T) {
	ds := replayStates(t, "ac1s1s-kafka-startup.jsonl", time.Second)
	// Readings 0-9 are before the drop reaches the commits (the drop is
	// at the bench's 10 s, the daemon's first reading about 1 s in).
	wantUnlimitedBefore(t, ds, 10, "before the drop")
	// The drop still limits it.
	wantLimitedWithin(t, ds, 10, 6)
}

// wantUnlimitedBefore checks that the first n decisions of a replay left
// the target unlimited (readings before the drop reached the commits).
func wantUnlimitedBefore(t *testing.T, ds []Decision, n int, why string) {
	t.Helper()
	for i, d := range ds[:n] {
		if !d.IsUnlimited() {
			t.Errorf("reading %d (%s, lag %d, head %s): %s at %.0f/s (%s), want unlimited: %s", i, d.At.Format("15:04:05.000"), d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason, why)
		}
	}
}

// sightRead is why a recording whose first readings had partitions
// without a commit stays unlimited since committedSight.
const sightRead = "a partition its group has not committed yet is read at the group's commits"

// wantLimitedWithin: one of the n decisions from ds[from] on (the
// readings after a drop) is limited.
func wantLimitedWithin(t *testing.T, ds []Decision, from, n int) {
	t.Helper()
	for _, d := range ds[from : from+n] {
		if !d.IsUnlimited() {
			return
		}
	}
	t.Errorf("not limited within %d readings of the drop", n)
}
