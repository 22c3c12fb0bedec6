package quota

import (
	"slices"
	"testing"
	"time"
)

// TestControllerOwnPaceSlowAloneListed replays lagbridge bench
// --hot-partition --hot-commit 5s --hot-slow-after 10s --hot-consumer hook
// --hot-interval 250ms on kfake (keyless, main 1c73e84, 22:51 UTC; the
// first 56 readings): six partitions, each processed by a worker of its
// own, the hook reporting at its own pace every 250 ms. Partition 0's
// worker slows to 20 msg/s before reading 41; the five others drain what
// they are fed, their heads at 0.22-0.23 s (one report) throughout. At
// 250 ms the setpoint is one interval, and partition 0's 18-28 records
// beside the others' 55 put the poll loop's wait over it: read as the
// loop's (a shared pool's share, af13de3), partition 0 was listed only
// when its head passed MaxAge, at reading 52 (lag 92; the run ended at p0
// p99 4.07 s, 9.0% dead, 3.5% refused). Its drain fell below half of what
// the others drained on average, and below its feed, two intervals in a
// row (slowAlone): it is read by its own drain and listed at reading 42
// (lag 28, head 0.44 s), and no other partition is listed.
func TestControllerOwnPaceSlowAloneListed(t *testing.T) {
	ds := replayWith(t, "hot250-ac5s-hook-alone.jsonl", 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}))
	first := slices.IndexFunc(ds, func(d Decision) bool { return slices.Contains(d.AvoidPartitions, 0) })
	if first != 42 {
		t.Errorf("partition 0 first listed at reading %d, want 42 (lag 28, head 0.44 s; by its head past MaxAge: 52)", first)
	}
	for i, d := range ds {
		if len(d.AvoidPartitions) > 0 && !slices.Equal(d.AvoidPartitions, []int32{0}) {
			t.Errorf("decision %d: avoid %v, want [0] or none", i, d.AvoidPartitions)
		}
	}
}

// TestSlowAlone: a drain under half the others' average and under the
// feed; a drain the whole pool shares, or one the partition was fed, is
// not alone.
func TestSlowAlone(t *testing.T) {
	for _, c := range []struct {
		name    string
		out, in float64
		sum     float64
		n       int
		want    bool
	}{
		{"slowed alone", 20, 56, 20 + 5*50, 6, true},
		{"the pool's share", 68, 84, 68 + 5*66, 6, false},
		{"drains its feed", 20, 18, 20 + 5*50, 6, false},
		{"at half the others'", 25, 56, 25 + 5*50, 6, false},
		{"one partition", 20, 56, 20, 1, false},
	} {
		if got := slowAlone(partTrack{out: c.out, inAvg: c.in}, drains{c.sum, c.in * float64(c.n)}, c.n); got != c.want {
			t.Errorf("%s: slowAlone = %v, want %v", c.name, got, c.want)
		}
	}
}
