package quota

import (
	"testing"
	"time"
)

// TestControllerPollBurst replays lagbridge bench
// kafka/commit-per-poll/sync/250ms at 10x on kfake (main at 1c73e84, the
// first 12.5 s): a consumer of 2,000 msg/s that commits each poll, read
// every 250 ms, its commits every 250-500 ms and as large as the backlog
// it polled. One observation's move held a poll's work done partly in the
// observation before, and read 2,932-3,651 msg/s; taken as the capacity
// after a pause (a step down or a drain on the low move before it), it
// restarted the estimate at 2,582-3,058 msg/s, and the law admitted up to
// 3,975 msg/s over it. Before the drop (10 s), from 3 s on, no estimate
// may exceed the rate committed over that span by more than the step
// threshold.
func TestControllerPollBurst(t *testing.T) {
	const name = "cpp250-10x-standing.jsonl"
	rec := readRecording(t, name)
	ds := replayStates(t, name, 250*time.Millisecond)
	start := rec[0].State.At
	from, drop := start.Add(3*time.Second), start.Add(10*time.Second)
	var first, last int = -1, -1
	for i, r := range rec {
		if r.State.At.Before(from) {
			continue
		}
		if !r.State.At.Before(drop) {
			break
		}
		if first < 0 {
			first = i
		}
		last = i
	}
	if first < 0 || last <= first {
		t.Fatal("no readings between 3 s and the drop")
	}
	a, b := rec[first].State, rec[last].State
	committed := float64(committedPos(&b)-committedPos(&a)) / b.At.Sub(a.At).Seconds()
	ceiling := (1 + DefaultControllerConfig.StepThreshold) * committed
	t.Logf("committed %.0f/s, ceiling %.0f/s, readings %d-%d", committed, ceiling, first, last)
	for i := first; i <= last; i++ {
		if d := ds[i]; d.Capacity > ceiling {
			t.Errorf("decision %d at %.2f s: capacity %.0f/s, over %.0f/s (the %.0f/s committed from 3 s to the drop, plus the step threshold): %s at %.0f/s (%s)",
				i, rec[i].State.At.Sub(start).Seconds(), d.Capacity, ceiling, committed, d.Rule, d.Rate, d.Reason)
		}
	}
}
