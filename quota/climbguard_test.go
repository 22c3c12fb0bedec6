package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// climbPart is a caught-up partition as a consumer reported it at at.
func climbPart(id int32, pos int64, at time.Time) lag.PartitionState {
	return lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: id, End: pos, Reported: lag.Report{At: at, Position: pos}},
		Source: lag.SourceConsumer, Position: pos}
}

// TestClimbBackMembers: two members at 400/s each (800/s in all). Member
// B's report at the reading before was 2 s old (fresh enough: ReportFresh
// is 3 s); its report now is fresh, so its position moved 3 s of its work
// (1,200) in this 1 s interval, A's 1 s (400): the group consumed 1,600
// over dt, as lag/ computes ConsumeRateInstant. The climb back reads no
// more than the group does.
//
// Red before: the span was the newest report's, A's 1 s, for both:
// 1,500/s (the estimate before the fall) for a group of 800/s.
func TestClimbBackMembers(t *testing.T) {
	t1 := leaseT0
	t2 := t1.Add(time.Second)
	prev := handOf(&lag.State{Partitions: []lag.PartitionState{climbPart(0, 4600, t1), climbPart(1, 3800, t1.Add(-2*time.Second))}}, nil)
	tc := &control{fellFrom: 1500, capacity: 100, hand: prev}
	st := lag.State{At: t2, Source: lag.SourceConsumer, ConsumeRateInstant: 1600, RatesKnown: true,
		Partitions: []lag.PartitionState{climbPart(0, 5000, t2), climbPart(1, 5000, t2)}}
	v := reading{measured: true, dt: 1, headKnown: true}
	back := climbBack(tc, &st, &v)
	if back <= 0 || back > 800 {
		t.Errorf("a group of 800/s whose second member's report was 2 s old: climbBack read %.0f/s, want a climb of at most 800/s", back)
	}
}
