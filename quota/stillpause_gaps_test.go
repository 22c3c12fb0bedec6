package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// afterDropStep replays the commit-per-poll drop recording with every state
// after the drop's step down passed through edit, and returns the
// decision at the reading after it.
func afterDropStep(t *testing.T, edit func(st *lag.State, since time.Duration)) Decision {
	t.Helper()
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	at := rec[k].State.At
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
		if st.At.After(at) {
			edit(st, st.At.Sub(at))
		}
	})
	return ds[k+1]
}

// TestControllerStillPauseKeptOnlyWhenRead: the pause is kept only for a target read
// from commits at a learned cadence, and only while the head ages at
// least stillAged of the time.
func TestControllerStillPauseKeptOnlyWhenRead(t *testing.T) {
	rec := readRecording(t, "cpp250-10x-drop.jsonl")
	k := dropStepDown(t, rec, replayStates(t, "cpp250-10x-drop.jsonl", 250*time.Millisecond))
	head := rec[k].State.HeadAge
	kept := func(d Decision) bool { return d.Rule == RuleStepDown }
	for _, tc := range []struct {
		name string
		edit func(*lag.State, time.Duration)
		want bool
	}{
		{"as recorded", func(*lag.State, time.Duration) {}, true},
		{"cadence unknown", func(st *lag.State, _ time.Duration) { st.CommitInterval = 0 }, false},
		{"reported positions", func(st *lag.State, _ time.Duration) { st.Source = lag.SourceConsumer }, false},
		{"head aged 0.6 of the time", func(st *lag.State, s time.Duration) { st.HeadAge = head + s*6/10 }, false},
		{"head aged 0.9 of the time", func(st *lag.State, s time.Duration) { st.HeadAge = head + s*9/10 }, true},
		// The last commit 1.13 s before the reading, read every 250 ms:
		// at a cadence of 700 ms that is 1.26 intervals and a reading
		// (not overdue at 1.5), at 550 ms 1.6 intervals and a reading.
		{"last commit 1.26 intervals and a reading ago", func(st *lag.State, _ time.Duration) { st.CommitInterval = 700 * time.Millisecond }, false},
		{"last commit 1.6 intervals and a reading ago", func(st *lag.State, _ time.Duration) { st.CommitInterval = 550 * time.Millisecond }, true},
	} {
		if d := afterDropStep(t, tc.edit); kept(d) != tc.want {
			t.Errorf("%s: %s at %.0f/s (%s), kept pause want %v", tc.name, d.Rule, d.Rate, d.Reason, tc.want)
		}
	}
}

// TestControllerEndHoldStaleNotZero: a partition read stale from the
// commit that ends the kept pause (its committed offset left out), or
// reset to 0 there, is no capacity of 0 (review-tenx: the sum of committed
// offsets went back, and the capacity with it).
func TestControllerEndHoldStaleNotZero(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	var end time.Time
	for i := k + 1; i < len(rec); i++ {
		if lastMove(&rec[i].State).After(rec[k].State.At) {
			end = rec[i].State.At
			break
		}
	}
	for _, mode := range []string{"stale", "reset"} {
		ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
			if st.At.Before(end) {
				return
			}
			ps := &st.Partitions[0]
			if mode == "stale" {
				ps.Stale = true
			} else if st.At.Equal(end) {
				ps.Committed, ps.Position, ps.Lag, ps.CommittedLag = 0, 0, ps.End, ps.End
			}
		})
		for i, d := range ds {
			if !rec[i].State.At.Before(end) && d.Capacity == 0 {
				t.Errorf("%s: decision %d (%.2f s): capacity 0, %s at %.0f/s (%s)", mode, i, rec[i].State.At.Sub(rec[0].State.At).Seconds(), d.Rule, d.Rate, d.Reason)
			}
		}
	}
}

// TestControllerEndHoldNeverRaises: the commit that ends the kept pause
// read 1,000 records further on each of the six partitions (from it on:
// 6,000 more over the 1.51 s since the last commit before the pause,
// about 4,650/s) does not raise the estimate at that commit (endHold
// lowers it only; the commit measures nothing there, as an estimated
// position's commit does).
func TestControllerEndHoldNeverRaises(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	end := -1
	for i := k + 1; i < len(rec) && end < 0; i++ {
		if lastMove(&rec[i].State).After(rec[k].State.At) {
			end = i
		}
	}
	if end < 0 {
		t.Fatal("no commit after the drop's step down")
	}
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
		if !st.At.Before(rec[end].State.At) {
			for i := range st.Partitions {
				ps := &st.Partitions[i]
				ps.Committed, ps.Position, ps.End = ps.Committed+1000, ps.Position+1000, ps.End+1000
			}
		}
	})
	if before, d := ds[k].Capacity, ds[end]; d.Capacity > before {
		t.Errorf("decision %d, the commit that ends the kept pause: capacity %.0f/s, above %.0f/s before the pause (%s at %.0f/s: %s)", end, d.Capacity, before, d.Rule, d.Rate, d.Reason)
	}
}
