package quota

import (
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerStillReadDrainKeepsPause: the reading after the drop's
// step down, its lag read 8 times over (a wait of 5.4 s at 1,972/s),
// drains though it reads still; the reading after that, with no commit
// since the pause either, keeps the pause (0/s). Read as without
// stillAfterPause (before session 25), it re-opened at 1,224/s on the
// capacity from before the drop (gaps24), the re-open the kept pause
// exists to stop.
func TestControllerStillReadDrainKeepsPause(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	at := rec[k+1].State.At
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), lagTimesAt(at, 8))
	if d := ds[k+1]; d.Rule != RuleDrain {
		t.Fatalf("decision %d, lag read 8 times over: %s at %.0f/s (%s), want a drain", k+1, d.Rule, d.Rate, d.Reason)
	}
	if lastMove(&rec[k+2].State).After(rec[k].State.At) {
		t.Fatalf("decision %d: a commit since the pause in the recording", k+2)
	}
	if d := ds[k+2]; d.Rule != RuleStepDown || d.Rate != 0 {
		t.Errorf("decision %d, after a still drain, no commit since the pause: %s at %.0f/s (%s), want the pause kept", k+2, d.Rule, d.Rate, d.Reason)
	}
}

// TestControllerHungKeptPauseDrains: a hung member (alive, never
// committing again) after the drop's step down of the commit-per-poll
// recording: every state after the pause is the pause's own (no commit,
// no record consumed or written: the producers are held at 0/s), its
// head aging with the time. The pause is kept (step-down, 0/s) while the
// head is within the budget; once it is past it, the rule is the drain
// and its reason says the head, not a capacity still to measure. Before
// session 25 it read "capacity still not measured" up to the hard age
// (review-tenx, finding 3).
func TestControllerHungKeptPauseDrains(t *testing.T) {
	const name = "cpp250-10x-drop.jsonl"
	rec := readRecording(t, name)
	k := dropStepDown(t, rec, replayStates(t, name, 250*time.Millisecond))
	frozen := rec[k].State
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), frozenAfter(frozen))
	budget := 2 * time.Second
	var kept, drained int
	for i := k + 1; i < len(ds); i++ {
		d, head := ds[i], frozen.HeadAge+rec[i].State.At.Sub(frozen.At)
		if d.Rule == RuleHardAge || head >= 4*time.Second {
			break
		}
		switch {
		case d.Rate != 0:
			t.Errorf("decision %d, hung, head %s: %s at %.0f/s (%s), want 0/s", i, head, d.Rule, d.Rate, d.Reason)
		case head <= budget && d.Rule != RuleStepDown:
			t.Errorf("decision %d, hung, head %s within the budget: %s (%s), want the pause kept", i, head, d.Rule, d.Reason)
		case head > budget && (d.Rule != RuleDrain || !strings.Contains(d.Reason, "nothing committed since")):
			t.Errorf("decision %d, hung, head %s past the budget: %s (%s), want the drain of a kept pause", i, head, d.Rule, d.Reason)
		case head > budget:
			drained++
		default:
			kept++
		}
	}
	if kept == 0 || drained == 0 {
		t.Errorf("kept %d readings, drained %d: want both", kept, drained)
	}
}

// TestControllerKeptDrainEndHold: the drop's step down of the
// commit-per-poll recording with the head read 1.2 s older from the
// reading after it on (past the budget while nothing is consumed: the
// kept pause drains on its head, as a poll in hand longer than the
// budget did in a 10x run on kfake, review-tenx's p4). The commit that
// ends it is still read by endHold: its capacity is below the one from
// before the drop, not the stale one a plain drain keeps (which re-opened
// a 10x commit-per-poll run at 2,648/s on kfake).
func TestControllerKeptDrainEndHold(t *testing.T) {
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
	if end < 0 {
		t.Fatal("no commit after the drop's step down")
	}
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
		if st.At.After(at) {
			st.HeadAge += 1200 * time.Millisecond
		}
	})
	for i := k + 1; i < end; i++ {
		if d := ds[i]; d.Rule != RuleDrain || d.Rate != 0 || !strings.Contains(d.Reason, "nothing committed since") {
			t.Errorf("decision %d, kept, the head past the budget: %s at %.0f/s (%s), want the drain of a kept pause", i, d.Rule, d.Rate, d.Reason)
		}
	}
	if before, d := ds[k].Capacity, ds[end]; d.Capacity >= before {
		t.Errorf("decision %d, the commit that ends the kept pause: capacity %.0f/s, not below %.0f/s before the pause (%s at %.0f/s: %s)", end, d.Capacity, before, d.Rule, d.Rate, d.Reason)
	}
}
