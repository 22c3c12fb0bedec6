package quota

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerSharedRiseKeepsList replays two runs of lagbridge bench
// --hot-partition --hot-interval 250ms --hot-slow-after 10s on real Kafka
// 4.3.1 on a loaded machine (load average 13-15; session 17's traced
// pairs, main at fc878bc), from the group's first reading to a few seconds
// after a stall of the whole consumer that came with the observer on time
// (0.24-0.41 s after the reading before, so no observerStall's shadow):
//   - keyed (pair 6, main's run): at 17:42:19.251 every partition but the
//     listed partition 0 had its head rise from 0.42-0.45 s to 0.81-0.85 s
//     while its consumer drained 1-5 records of the 14-18 written to it.
//     Read as it looked, five healthy partitions were listed by their wait
//     (six of six late: the list dropped), the topic drained ("wait 3.678s
//     >= budget 2s") and the hysteresis held the healthy partitions listed
//     for seconds after, the list empty and the topic saturated, stepping
//     down and probing in 15 decisions (1,510 keyed records of partitions
//     1-5 refused in that run).
//   - keyless (pair 6, the session's patch): at 17:38:02.727 the healthy
//     partitions' heads rose to 0.28-0.42 s, two of them were listed by
//     their drain in the stall (knownSlow), the list was dropped (three of
//     six), and partition 0's backlog back in the topic's wait read
//     "saturated: capacity 189/s": the topic limited in 11 decisions, and
//     partition 0's lag grew to 67 records before it was listed again.
//
// Such a reading is a stall every partition shared (sharedRise): it lists
// no partition, teaches none a rate, and the topic's law does not believe
// it yet. Partition 0 stays listed, alone, and the topic unlimited, from
// its first listing on.
func TestControllerSharedRiseKeepsList(t *testing.T) {
	cases := []struct {
		name  string
		file  string
		n     int
		stall int // the reading of the shared stall
		held  bool
	}{
		{"keyed, the topic drained at the stall", "hot250-kafka-sharedrise.jsonl", 108, 97, true},
		{"keyless, two healthy partitions listed by their drain", "hot250-kafka-sharedrise2.jsonl", 56, 45, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := replayStates(t, c.file, 250*time.Millisecond)
			if len(ds) != c.n {
				t.Fatalf("%d decisions, want %d", len(ds), c.n)
			}
			first := slices.IndexFunc(ds, func(d Decision) bool { return slices.Contains(d.AvoidPartitions, 0) })
			if first < 0 || first >= c.stall {
				t.Fatalf("partition 0 first listed at decision %d, want before the stall at %d", first, c.stall)
			}
			for i, d := range ds[first:] {
				i += first
				if !slices.Equal(d.AvoidPartitions, []int32{0}) {
					t.Errorf("decision %d (%s): avoid %v, want [0] (%s)", i, d.At.Format("15:04:05.000"), d.AvoidPartitions, d.Reason)
				}
				if !d.IsUnlimited() {
					t.Errorf("decision %d (%s): %s at %.0f/s, want unlimited (%s)", i, d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
				}
			}
			if d := ds[c.stall]; c.held && !strings.Contains(d.Reason, "rose together") {
				t.Errorf("decision %d (%s): %s (%s), want the stall every head showed not believed", c.stall, d.At.Format("15:04:05.000"), d.Rule, d.Reason)
			}
		})
	}
}

// TestSharedRise pins what reads as a stall every partition shared: the
// partitions not listed all hold lag whose head rose since the reading
// before, to at most half the budget, while their consumer drained less
// than half the rate it was seen to drain them at; and some partition is
// listed. Three partitions, partition 0 listed; the others drained 100
// msg/s before, 5 records over 0.25 s now (20 msg/s), heads 0.2 s before.
func TestSharedRise(t *testing.T) {
	const dt = 0.25
	base := func() (*control, *lag.State, *reading) {
		tc := &control{last: Decision{AvoidPartitions: []int32{0}}, parts: map[int32]partTrack{
			0: {late: true, pos: 100, lag: 20, rate: 20, head: 1.0},
			1: {pos: 1000, lag: 10, rate: 100, head: 0.2},
			2: {pos: 2000, lag: 10, rate: 100, head: 0.2},
		}}
		part := func(id int32, end, lagMsgs int64, head float64) lag.PartitionState {
			ps := lag.PartitionState{HeadAge: time.Duration(head * float64(time.Second))}
			ps.Partition, ps.End, ps.Lag, ps.HeadKnown = id, end, lagMsgs, true
			return ps
		}
		st := &lag.State{Partitions: []lag.PartitionState{
			part(0, 125, 24, 1.2),
			part(1, 1030, 25, 0.45), // drained 5 of the 20 written
			part(2, 2030, 25, 0.45),
		}}
		return tc, st, &reading{measured: true, budget: 2}
	}
	cases := []struct {
		name   string
		change func(*control, *lag.State, *reading)
		want   bool
	}{
		{"every head not listed rose, little drained", func(*control, *lag.State, *reading) {}, true},
		{"nothing listed: the target's business", func(tc *control, _ *lag.State, _ *reading) { tc.last.AvoidPartitions = nil }, false},
		{"not measured: no commit in the interval", func(_ *control, _ *lag.State, v *reading) { v.measured = false }, false},
		{"one head did not rise", func(_ *control, st *lag.State, _ *reading) { st.Partitions[2].HeadAge = 200 * time.Millisecond }, false},
		{"one partition without lag", func(_ *control, st *lag.State, _ *reading) { st.Partitions[2].Lag = 0 }, false},
		{"a head past half the budget: read as it is", func(_ *control, st *lag.State, _ *reading) { st.Partitions[1].HeadAge = 1100 * time.Millisecond }, false},
		{"one drained half its rate: a saturated consumer, not a stall", func(_ *control, st *lag.State, _ *reading) { st.Partitions[2].Lag = 17 }, false},
		{"a partition first seen", func(tc *control, _ *lag.State, _ *reading) { delete(tc.parts, 2) }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc, st, v := base()
			c.change(tc, st, v)
			if got := sharedRise(tc, st, v, dt); got != c.want {
				t.Errorf("sharedRise = %v, want %v", got, c.want)
			}
		})
	}
}
