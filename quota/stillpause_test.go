package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerStillAfterPause replays lagbridge bench at 10x on kfake,
// read every 250 ms (main at 684a35d, session 23's p250 recordings):
// commit per poll (kafka/commit-per-poll/sync/250ms) and the ttl guard
// (kafka/guard/sync/250ms), each committing every poll, about every 0.5 s,
// from the start to 2.3 s after the drop to 400 msg/s at 10 s.
//
// After the drop, the first step down paused admission for one reading;
// the readings after it measured nothing (no commit: the poll in hand at
// the drop; lag/'s estimate between commits standing still) while the
// head aged 0.27-0.30 s a reading, and the law re-opened at the capacity
// from before the drop: 1,497 and 1,224 msg/s at "capacity 1,972/s"
// (commit per poll), 1,407 and 1,130 msg/s at 1,829/s (the guard). No
// decision between that step down and the first commit after it may
// admit anything (stillAfterPause). At that commit, 1.5 s after the
// last one before the pause, the law re-opened at the old capacity too
// (978 msg/s at 1,972/s; 906 and 851 msg/s at 1,829/s): no decision after
// the step down may admit more than its reading consumed (endHold: the
// commit measures the capacity from the last commit before the pause).
//
// Before the drop, a step down fired on lumpy readings of a consumer
// keeping up (commit per poll at 8.27 s: "at most 1,547/s"; the guard at
// 8.29 s: "at most 1,659/s"), whose heads moved at the next reading (aged
// 0.04-0.05 s): the pause stays one reading long there.
func TestControllerStillAfterPause(t *testing.T) {
	for _, name := range []string{"cpp250-10x-drop.jsonl", "guard250-10x-drop.jsonl"} {
		t.Run(name, func(t *testing.T) {
			rec := readRecording(t, name)
			ds := replayStates(t, name, 250*time.Millisecond)
			k := dropStepDown(t, rec, ds)
			for i := 1; i < k; i++ {
				// Before the drop: a pause is followed by a decision
				// that admits.
				if d := ds[i]; ds[i-1].Rule == RuleStepDown && d.Rate == 0 && rec[i].State.At.Before(rec[0].State.At.Add(10*time.Second)) {
					t.Errorf("decision %d at %.2f s, before the drop, after a step down: %s at 0/s (%s)",
						i, rec[i].State.At.Sub(rec[0].State.At).Seconds(), d.Rule, d.Reason)
				}
			}
			pausedAt, bound := rec[k].State.At, rec[k].State.ConsumeRateInstant
			committed := false
			for i := k + 1; i < len(ds); i++ {
				st, d := rec[i].State, ds[i]
				committed = committed || lastMove(&st).After(pausedAt)
				if !committed && d.Rate > 0 {
					t.Errorf("decision %d, %.2f s after the drop's step down, no commit since: %s at %.0f/s (%s)",
						i, st.At.Sub(pausedAt).Seconds(), d.Rule, d.Rate, d.Reason)
				}
				if d.Rate > bound {
					t.Errorf("decision %d, %.2f s after the drop's step down that read at most %.0f/s: %s at %.0f/s (%s)",
						i, st.At.Sub(pausedAt).Seconds(), bound, d.Rule, d.Rate, d.Reason)
				}
			}
		})
	}
}

// TestControllerStillAfterPauseHeadMoves: the same commit-per-poll
// recording, with the head age after the drop's step down held at that
// reading's (the position moving as fast as records are written, as
// lag/'s estimate between commits reads a consumer that keeps up): no
// commit and the last one overdue, but something consumed, so the pause
// is not kept.
func TestControllerStillAfterPauseHeadMoves(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	ds := replayStates(t, name, 250*time.Millisecond)
	k := dropStepDown(t, rec, ds)
	head, at := rec[k].State.HeadAge, rec[k].State.At
	edited := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
		if st.At.After(at) {
			st.HeadAge = head
		}
	})
	if d := edited[k+1]; d.Rule == RuleStepDown {
		t.Errorf("decision %d, the head not aged since the step down: %s at %.0f/s (%s)", k+1, d.Rule, d.Rate, d.Reason)
	}
}

// dropStepDown is the index of the first step down at or after the drop,
// 10 s into the recording rec whose decisions are ds; the test fails
// without one, or without a reading after it.
func dropStepDown(t *testing.T, rec []recorded, ds []Decision) int {
	t.Helper()
	drop := rec[0].State.At.Add(10 * time.Second)
	for i, d := range ds {
		if !rec[i].State.At.Before(drop) && d.Rule == RuleStepDown && i+1 < len(ds) {
			return i
		}
	}
	t.Fatal("no step down after the drop, with a reading after it")
	return -1
}
