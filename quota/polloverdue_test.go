package quota

import (
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerPollOverdue replays lagbridge bench
// kafka/commit-per-poll/sync/1s at 10x on kfake (main at b3bef3d, session
// 27): a consumer that commits each poll, read every second, whose
// capacity falls from 2,000 to 400 msg/s 10 s in, while it holds the
// poll it fetched at the old capacity. Its position was last seen to move
// at the reading after the drop (committed lag 1,671); the next commit
// came three readings later. The reading 2 s after that move, the head at
// the committed position 3.39 s old, read "saturated: capacity 1164/s,
// wait 739ms" and admitted 1,026 msg/s: the poll in hand, at most 1,671
// messages, had taken longer than at 835/s (pollOverdue). The second
// recording, from another run of the row (session 27), has its last
// commit before the drop just after a reading that estimated the
// consumer caught up, and two readings after it at "capacity 1976/s"
// (1,603 and 1,789 msg/s, the head 1.99 and 2.99 s). From the drop on, at
// most one reading may admit above twice the capacity after it before a
// decision admits no more than that capacity.
func TestControllerPollOverdue(t *testing.T) {
	for _, name := range []string{"cpp1s-10x-late.jsonl", "cpp1s-10x-late2.jsonl"} {
		t.Run(name, func(t *testing.T) { pollOverdueReplay(t, name) })
	}
}

// pollOverdueReplay is TestControllerPollOverdue's check of one recording.
func pollOverdueReplay(t *testing.T, name string) {
	const after = 400.0
	rec := readRecording(t, name)
	ds := replayStates(t, name, time.Second)
	drop := rec[0].State.At.Add(10 * time.Second)
	high := 0
	for i, d := range ds {
		st := rec[i].State
		if st.At.Before(drop) {
			continue
		}
		t.Logf("decision %d at %.2f s after the drop: %s at %.0f/s, capacity %.0f/s (%s)", i, st.At.Sub(drop).Seconds(), d.Rule, d.Rate, d.Capacity, d.Reason)
		if d.Rate <= after {
			break
		}
		if d.Rate > 2*after {
			high++
		}
	}
	if high > 1 {
		t.Errorf("%d readings after the drop admitted above %.0f/s before one admitted at most %.0f/s, want at most 1", high, 2*after, after)
	}
}

// TestControllerPollOverdueHeadWithin: the same recording with the head
// at the committed position held within the budget from the drop on (a
// consumer held at its setpoint starts each poll so): a poll as long is
// no evidence, and the readings from the drop to the next commit read
// at the estimate, which nothing measures between commits.
func TestControllerPollOverdueHeadWithin(t *testing.T) {
	const name = "cpp1s-10x-late.jsonl"
	rec := readRecording(t, name)
	drop := rec[0].State.At.Add(10 * time.Second)
	ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
		if !st.At.Before(drop) {
			st.CommittedHeadAge = min(st.CommittedHeadAge, 1900*time.Millisecond)
		}
	})
	k := 1
	for k < len(rec) && rec[k].State.At.Before(drop) {
		k++
	}
	for i := k + 1; i < len(ds); i++ {
		st := rec[i].State
		if committedPos(&st) != committedPos(&rec[i-1].State) {
			break
		}
		if d := ds[i]; d.Capacity != ds[i-1].Capacity {
			t.Errorf("decision %d at %.2f s after the drop, no commit since the one before, the head at the commit within the budget: capacity %.0f/s after %.0f/s (%s, %s)",
				i, st.At.Sub(drop).Seconds(), d.Capacity, ds[i-1].Capacity, d.Rule, d.Reason)
		}
	}
}

// TestControllerPollOverdueCaughtUpAtMove: a consumer caught up at the
// reading that saw its position move (committed lag 0) holds no poll the
// bound could read: the rule stays out, where a bound of 0 read capacity 0
// (review-inhand: the replay's reading 12 went from 1,256/s to 0 with the
// `pollLag <= 0` clause dropped).
func TestControllerPollOverdueCaughtUpAtMove(t *testing.T) {
	i := -1
	ds := replayEdited(t, "cpp1s-10x-late.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
		if i++; i == 10 {
			st.CommittedLag, st.Lag = 0, 0
		}
	})
	for j := 11; j <= 12; j++ {
		if d := ds[j]; d.Capacity != ds[j-1].Capacity {
			t.Errorf("decision %d: %s capacity %.0f after %.0f (%s)", j, d.Rule, d.Capacity, ds[j-1].Capacity, d.Reason)
		}
	}
}

// TestControllerPollOverdueWithinStep: a bound within StepThreshold of the
// estimate is a long poll of a consumer as fast as before: with the lag at
// the move 2,100 the bound reads 1,049/s against the estimate's 1,164,
// and no reading is overdue.
func TestControllerPollOverdueWithinStep(t *testing.T) {
	i := -1
	ds := replayEdited(t, "cpp1s-10x-late.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
		if i++; i == 10 {
			st.CommittedLag, st.Lag = 2100, 2100
		}
	})
	for j, d := range ds {
		if strings.Contains(d.Reason, "poll in hand") {
			t.Errorf("decision %d: %s", j, d.Reason)
		}
	}
}
