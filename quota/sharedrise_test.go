package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerSharedRiseKeepsList replays three runs of lagbridge bench
// --hot-partition --hot-interval 250ms --hot-slow-after 10s on real Kafka
// 4.3.1 on a loaded machine (load average 13-20; session 17's traced
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
//   - keyless (pair 5, main's run): at 17:29:58.252 the healthy
//     partitions' heads rose from 0.20-0.32 s to 0.33-0.34 s with 7-11
//     records drained each. Nothing was listed at that reading, but, read
//     as it looked, partitions 1 and 2 learned a consume rate of 34 and
//     48 msg/s from it (94 and 103 before), and partition 3 was listed
//     beside partition 0 by its drain (knownSlow) 1.3 s later, for five
//     decisions.
//
// Such a reading is a stall every partition shared (sharedRise): it lists
// no partition and teaches none a rate. Partition 0 stays listed, alone,
// from its first listing on; the topic's law reads the stall as it is
// (TestControllerSharedRiseDropBelieved).
func TestControllerSharedRiseKeepsList(t *testing.T) {
	cases := []struct {
		name  string
		file  string
		n     int
		stall int // the reading of the shared stall
	}{
		{"keyed, five healthy partitions listed by their wait", "hot250-kafka-sharedrise.jsonl", 108, 97},
		{"keyless, two healthy partitions listed by their drain", "hot250-kafka-sharedrise2.jsonl", 56, 45},
		{"keyless, a healthy partition listed by the drain learned in the stall", "hot250-kafka-sharedrise3.jsonl", 66, 51},
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
		{"one partition without lag", func(_ *control, st *lag.State, _ *reading) {
			st.Partitions[2].End, st.Partitions[2].Lag = 2000, 0 // nothing written, nothing drained
		}, false},
		{"one partition stale", func(_ *control, st *lag.State, _ *reading) { st.Partitions[2].Stale = true }, false},
		{"one head unknown", func(_ *control, st *lag.State, _ *reading) { st.Partitions[2].HeadKnown = false }, false},
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

// TestControllerSharedRiseDropBelieved: a real drop of the whole
// consumer's capacity while a partition is listed is the topic's law's to
// read at once, as without a listed partition. Six partitions, partition
// 0's consumer at 20 msg/s and listed, the others' at 2,000 until 30 s and
// 15 msg/s after (a bad query plan), 300 msg/s keyless offered around the
// listed partition, commits every 250 ms. Every reading after the drop
// shows every head not listed risen, within half the budget, and drained
// at under half its rate: what sharedRise reads as a stall every partition
// shared. A first form of it also kept the topic's law from believing
// such readings until those heads passed half the budget: at 250 ms the
// topic was limited 1.5 s after the drop (0.5 s without the rule) and 244
// messages went dead in the 10 s after; at 1 s, 2 s after (1 s).
func TestControllerSharedRiseDropBelieved(t *testing.T) {
	const drop = 30.0
	for _, c := range []struct {
		iv        time.Duration
		limitedBy float64 // seconds after the drop
	}{
		{250 * time.Millisecond, 0.5},
		{time.Second, 1},
	} {
		t.Run(c.iv.String(), func(t *testing.T) {
			ps := producersOffering(3, 300)
			for _, p := range ps {
				p.honorAvoid = true
			}
			res := runSim(t, simConfig{
				interval:    c.iv,
				duration:    45 * time.Second,
				partitions:  6,
				capacity:    step(drop, 20+5*2000, 20+5*15),
				commitEvery: 250 * time.Millisecond,
				partCap: func(p int, at float64) float64 {
					if p == 0 {
						return 20
					}
					return step(drop, 2000, 15)(at)
				},
				policy:    drainPolicy(),
				producers: ps,
				window:    [2]float64{drop, 45},
			})
			if d := res.between(drop-1, drop)[0].dec; !slices.Equal(d.AvoidPartitions, []int32{0}) || !d.IsUnlimited() {
				t.Fatalf("before the drop: %s at %.0f/s avoiding %v, want unlimited avoiding [0] (%s)", d.Rule, d.Rate, d.AvoidPartitions, d.Reason)
			}
			limited := -1.0
			for _, s := range res.between(drop, drop+5) {
				if !s.dec.IsUnlimited() {
					limited = s.t - drop
					break
				}
			}
			if limited < 0 || limited > c.limitedBy {
				t.Errorf("first limited %.2f s after the drop, want within %.2f s", limited, c.limitedBy)
			}
			if c.iv < time.Second {
				var dead float64
				for i, at := range res.tickT {
					if at > drop && at <= drop+10 {
						dead += res.tickDead[i]
					}
				}
				if dead > 0 {
					t.Errorf("%.0f messages dead in the 10 s after the drop, want none", dead)
				}
			}
		})
	}
}
