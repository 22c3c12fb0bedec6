package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerReopenProbeCapped replays lagbridge bench at 10x on kfake,
// commit per poll read every 250 ms (kafka/commit-per-poll/sync/250ms,
// session 26).
//
// keptclimb (main at 1c73e84): after the drop to 400 msg/s a step down's
// pause was kept (no commit for 6.9 s: the poll in hand), its ending
// commit read 390/s (endHold), a drain on the wait held the producers at 0
// until a commit at 22.5 s found the consumer caught up, and the law
// re-opened at 446/s. lag/ then estimated the position between commits at
// the rate of that commit's span (the backlog taken in one poll) up to the
// end offset, so the next readings read caught up whatever the consumer
// did, and the probe climbed x1.5 a reading from them: 704 and 1,056 msg/s
// ("caught up: probing from X/s"), while the commits showed 312-376/s; then
// "saturated: capacity 376/s" and step downs.
//
// keptclimb2 (the fix at b1ce217): the drop's drain read still (no commit
// since the pause before it, so the pause was kept), the commit after it
// re-opened at 242/s (capacity 380/s), and the first readings estimated
// between commits after the consumer caught up read 1,483/s consumed (a
// capacity estimate of 1,583/s): main probed 1,810 and 2,715 msg/s there,
// the fix 570/s; the next reading read "saturated: capacity 321/s".
//
// Probes on those readings are capped one probe step above the capacity
// at the re-open (reopenCap).
func TestControllerReopenProbeCapped(t *testing.T) {
	for _, name := range []string{"cpp250-10x-keptclimb.jsonl", "cpp250-10x-keptclimb2.jsonl"} {
		t.Run(name, func(t *testing.T) {
			rec := readRecording(t, name)
			ds := replayStates(t, name, 250*time.Millisecond)
			drop := rec[0].State.At.Add(10 * time.Second)
			first, open := -1, -1
			for i := 1; i < len(ds) && first < 0; i++ {
				if rec[i].State.At.Before(drop) {
					continue
				}
				if ds[i-1].Rate == 0 && ds[i].Rate > 0 {
					open = i
				}
				if ds[i].Rule == RuleProbe {
					first = i
				}
			}
			if first < 0 || open < 0 {
				t.Fatalf("no probe after a re-open after the drop (re-open %d, probe %d)", open, first)
			}
			limit := ds[open].Capacity * (1 + DefaultControllerConfig.Probe)
			probes := 0
			for i := max(open+1, first); i < len(ds) && ds[i].Rule == RuleProbe; i++ {
				probes++
				if d := ds[i]; d.Rate > limit {
					t.Errorf("decision %d, %.2f s after the re-open at %.0f/s (capacity %.0f/s): %s at %.0f/s (%s), want at most %.0f/s",
						i, rec[i].State.At.Sub(rec[open].State.At).Seconds(), ds[open].Rate, ds[open].Capacity, d.Rule, d.Rate, d.Reason, limit)
				}
			}
			if probes < 2 {
				t.Errorf("%d probes after the re-open, want the recording's 2", probes)
			}
		})
	}
}

// TestReopenSpanLifts: the cap of a re-open (reopenCap) holds while the
// commits since show the consumer consuming about what it showed (400/s
// over 0.5 s after a re-open at 390/s), is not lifted by commits less than
// half an interval apart, and lifts once they show more than StepThreshold
// above it (2,000/s over 0.5 s: a capacity that came back, the restore).
func TestReopenSpanLifts(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	t0 := time.Date(2026, 12, 3, 22, 0, 0, 0, time.UTC)
	tc := &control{reopen: reopened{base: 390, at: t0, pos: 600}}
	v := &reading{dt: 0.25, probe: DefaultControllerConfig.Probe} // measure sets probe on every reading
	at := func(d time.Duration, committed int64) *lag.State {
		lc := t0.Add(d)
		return &lag.State{At: lc.Add(100 * time.Millisecond), Partitions: []lag.PartitionState{
			{PartitionSample: lag.PartitionSample{Partition: 0, Committed: committed / 2}, LastCommit: lc},
			{PartitionSample: lag.PartitionSample{Partition: 1, Committed: committed - committed/2}, LastCommit: lc},
		}}
	}
	c.reopenSpan(tc, at(500*time.Millisecond, 800), v)
	if tc.reopen.base != 390 || tc.reopen.pos != 800 {
		t.Fatalf("400/s over 0.5 s: reopen %+v, want the cap kept at 390/s and the span moved to 800", tc.reopen)
	}
	c.reopenSpan(tc, at(600*time.Millisecond, 1000), v)
	if tc.reopen.base != 390 || tc.reopen.pos != 800 {
		t.Fatalf("2,000/s over 0.1 s: reopen %+v, want it kept, the span where it was", tc.reopen)
	}
	c.reopenSpan(tc, at(time.Second, 1800), v)
	if tc.reopen.base != 0 {
		t.Errorf("2,000/s over 0.5 s: reopen %+v, want the cap lifted", tc.reopen)
	}
}
