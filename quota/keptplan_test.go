package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerWaitDrainBeforeEndingCommit: a kept pause whose last
// reading before the commit that ends it drained on the wait (the lag read
// 8x there): that commit is still read by endHold, not the capacity from
// before the drop (978/s on 1,972/s before; review-keptpause, session 25).
func TestControllerWaitDrainBeforeEndingCommit(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	at := rec[k].State.At
	end := -1
	for i := k + 1; i < len(rec) && end < 0; i++ {
		if lastMove(&rec[i].State).After(at) {
			end = i
		}
	}
	plain := replayStates(t, name, 250*time.Millisecond)
	w := rec[end-1].State.At
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), lagTimesAt(w, 8))
	for i := k; i <= end+2 && i < len(ds); i++ {
		t.Logf("%d plain: %s %.0f/s cap %.0f | edited: %s %.0f/s cap %.0f (%.90s)", i, plain[i].Rule, plain[i].Rate, plain[i].Capacity, ds[i].Rule, ds[i].Rate, ds[i].Capacity, ds[i].Reason)
	}
	if ds[end].Capacity >= ds[k].Capacity {
		t.Errorf("decision %d, the commit after a still drain on the wait: capacity %.0f/s, the stale one (%.0f/s before the pause): %s at %.0f/s", end, ds[end].Capacity, ds[k].Capacity, ds[end].Rule, ds[end].Rate)
	}
}

// TestControllerKeptPausePlansNoStaleReopen: a member that hangs after
// the step down (the recording frozen there): every kept pause (and its
// drain) plans no re-open above the step down's own plan; before, each
// planned ~1,800/s half a second on, which producers act on when no newer
// decision comes (review-keptpause, session 25).
func TestControllerKeptPausePlansNoStaleReopen(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	frozen := rec[k].State
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), frozenAfter(frozen))
	for i := k + 1; i < len(ds) && i < k+12; i++ {
		if d := ds[i]; d.Rate == 0 && d.Then != nil && d.Then.Rate > ds[k].Then.Rate {
			t.Errorf("decision %d, hung, %s (%.60s): Then %.0f/s at +%s, above the step down's own plan %.0f/s", i, d.Rule, d.Reason, d.Then.Rate, d.Then.At.Sub(d.At), ds[k].Then.Rate)
		}
	}
}

// lagTimesAt is a replay edit that reads the lag n times over at the
// reading at at (every partition's too).
func lagTimesAt(at time.Time, n int64) func(*lag.State) {
	return func(st *lag.State) {
		if st.At.Equal(at) {
			st.Lag *= n
			for i := range st.Partitions {
				st.Partitions[i].Lag *= n
			}
		}
	}
}

// frozenAfter is a replay edit that freezes the recording at from (a
// member hung there: alive, nothing consumed or produced), the head aging
// with the clock.
func frozenAfter(from lag.State) func(*lag.State) {
	frozen := from
	frozen.Partitions = slices.Clone(from.Partitions)
	frozen.ConsumeRateInstant, frozen.ProduceRate = 0, 0
	return func(st *lag.State) {
		if at := st.At; at.After(frozen.At) {
			*st = frozen
			st.Partitions = slices.Clone(frozen.Partitions)
			st.At, st.HeadAge = at, frozen.HeadAge+at.Sub(frozen.At)
		}
	}
}
