package quota

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestReopenSpanLiftsBelowSmallProbe: with a probe step at or under
// StepThreshold (ControllerConfig.Probe 0.2 here), the cap of a re-open
// (base x 1.2) sits under the lift's StepThreshold (base x 1.25): a
// consumer that takes everything the cap admits never lifted it from
// estimated readings (review-probeclimb finding 3). It lifts once the
// commits show the consumer at 95% of the cap or more (460/s after a
// re-open at 390/s, a cap of 468/s), and keeps it at what it showed
// (400/s).
func TestReopenSpanLiftsBelowSmallProbe(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond, Probe: 0.2})
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	tc := &control{reopen: reopened{base: 390, at: t0, pos: 600}}
	v := &reading{dt: 0.25, probe: 0.2, estimated: true}
	at := func(d time.Duration, committed int64) *lag.State {
		lc := t0.Add(d)
		return &lag.State{At: lc.Add(100 * time.Millisecond), Partitions: []lag.PartitionState{
			{PartitionSample: lag.PartitionSample{Partition: 0, Committed: committed}, LastCommit: lc},
		}}
	}
	if cp := reopenCap(tc, v); math.Abs(cp-468) > 0.5 {
		t.Fatalf("cap %.1f/s, want 468/s", cp)
	}
	c.reopenSpan(tc, at(500*time.Millisecond, 800), v)
	if tc.reopen.base != 390 {
		t.Fatalf("400/s over 0.5 s: reopen %+v, want the cap kept", tc.reopen)
	}
	c.reopenSpan(tc, at(time.Second, 1030), v)
	if tc.reopen.base != 0 {
		t.Errorf("460/s over 0.5 s under a cap of 468/s: reopen %+v, want the cap lifted", tc.reopen)
	}
}

// TestAdoptReleaseForgetsReopen: a release the leader decided between two
// of this follower's readings ends the episode, its re-open cap with it
// (review-probeclimb finding 4): an old base must not cap a later
// episode's probes.
func TestAdoptReleaseForgetsReopen(t *testing.T) {
	c := newCtl(t, ControllerConfig{})
	tg := lag.Target{Cluster: "k", Topic: "orders", Group: "g"}
	c.targets[tg] = &control{limited: true, rate: 300, reopen: reopened{base: 390, at: time.Now(), pos: 10}}
	c.Adopt(Decision{Target: tg, Rate: math.Inf(1)})
	if r := c.targets[tg].reopen; r != (reopened{}) {
		t.Errorf("after an unlimited decision adopted: reopen %+v, want none", r)
	}
}
