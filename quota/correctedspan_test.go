package quota

import (
	"testing"
	"time"
)

// TestControllerCorrectedCommitMeasures replays a lagbridge bench run of
// kafka/autocommit-1s/sync/1s at 2x on kfake (60fdf04's code): franz-go
// auto-commits every second, read every second, and a commit that fell
// just after an observation made lag/ learn a 2 s cadence, so it
// estimated the position between commits (reading 10: committed lag 441,
// estimated 0). Capacity drops from 2,000 to 400 msg/s at the bench's
// 10 s. Readings 11 and 12 carry commits that corrected the estimate
// (State.Corrected), and the consumer was behind at both (its head at the
// commit 0.6-1.3 s); they measured nothing, the capacity stayed at the
// 1,599/s the estimate had shown ("saturated: capacity 1599/s, wait
// 475ms", 1,618/s allowed for an 800/s offer), and 1,600 messages were
// admitted after the drop, twice the bound (dead work 5.4%). The commits
// measure the consumer there (see correctedSpan): limited at reading 11
// at the rate its commits show.
func TestControllerCorrectedCommitMeasures(t *testing.T) {
	ds := replayStates(t, "ac1s1s-corrected.jsonl", time.Second)
	wantUnlimitedBefore(t, ds, 11, "before the drop")
	wantLimitedAtDrop(t, ds, 11, 12)
}

// wantLimitedAtDrop checks that decisions from to last (inclusive) of a
// replayed 1 s auto-commit run at 2x (800 msg/s offered, capacity 400 msg/s
// after the drop) limit at most to 400/s on a capacity of at most 600/s.
func wantLimitedAtDrop(t *testing.T, ds []Decision, from, last int) {
	t.Helper()
	for i := from; i <= last; i++ {
		d := ds[i]
		if d.IsUnlimited() || d.Rate > 400 || d.Capacity > 600 {
			t.Errorf("reading %d (lag %d, head %s): %s at %.0f/s, capacity %.0f/s (%s), want at most 400/s on a capacity of at most 600/s", i, d.Lag, d.HeadAge, d.Rule, d.Rate, d.Capacity, d.Reason)
		}
	}
}
