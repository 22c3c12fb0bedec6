package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestSimHotPartition is #17's one slow partition: six partitions, the
// consumer of partition 0 drains 20 msg/s where the others drain 2,000;
// keyless producers that write around avoided partitions offer 300 msg/s,
// which five partitions absorb easily. Producers must not be refused for
// partition 0's backlog (the topic's wait leaves the avoided partition
// out), partition 0's head stays near the deadline, and the avoidance
// does not end at its first empty sample (hysteresis: a consumer this
// slow gets its share back only on probation, every avoidProbe
// observations). Positions come from commits every 250 ms.
func TestSimHotPartition(t *testing.T) {
	cases := []struct {
		name        string
		commitEvery time.Duration
	}{
		{"commits every 250 ms", 250 * time.Millisecond},
		{"exact positions", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps := producersOffering(3, 300)
			for _, p := range ps {
				p.honorAvoid = true
			}
			res := runSim(t, simConfig{
				duration:    120 * time.Second,
				partitions:  6,
				capacity:    constant(20 + 5*2000),
				commitEvery: c.commitEvery,
				partCap: func(p int, _ float64) float64 {
					if p == 0 {
						return 20
					}
					return 2000
				},
				policy:    drainPolicy(),
				producers: ps,
				window:    [2]float64{20, 120},
			})
			var offered, admitted float64
			for _, p := range ps {
				offered += p.winOffered
				admitted += p.winAdmitted
			}
			refused := 1 - admitted/offered
			_, p99 := res.headStats(20, 120)
			avoided, flips, slowDown := 0, 0, 0
			var prev bool
			steps := res.between(20, 120)
			for i, s := range steps {
				on := slices.Contains(s.dec.AvoidPartitions, 0)
				if on {
					avoided++
				}
				if i > 0 && on != prev {
					flips++
				}
				prev = on
				if s.dec.Signal == SignalSlowDown || s.dec.Signal == SignalStop {
					slowDown++
				}
			}
			t.Logf("refused %.1f%% of offered; head age p99 %.2fs; partition 0 avoided %d of %d observations, %d changes; slow-down or stop in %d",
				100*refused, p99, avoided, len(steps), flips, slowDown)
			if refused > 0.05 {
				t.Errorf("refused %.1f%% of what was offered, want <= 5%%", 100*refused)
			}
			if p99 > 3 {
				t.Errorf("head age p99 %.2fs, want near the 2 s deadline", p99)
			}
			if flips > len(steps)/avoidProbe*2+2 {
				t.Errorf("partition 0's avoidance changed %d times in %d observations: no hysteresis", flips, len(steps))
			}
		})
	}
}

// TestControllerHotPartitionNotTopicWait: one partition of six holds the
// whole backlog (600 messages, head 5 s old) and drains at 20 msg/s, the
// others are empty and the consumer takes the 300 msg/s produced. The
// topic's wait is not 600 / 320 s: producers write around the late
// partition, so a new message waits on the others. Unlimited with
// avoid-partitions [0], not slow-down for the whole topic.
func TestControllerHotPartitionNotTopicWait(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	mk := func(at float64, consumed0 int64) lag.State {
		s := st(at, 600, 320, 300)
		s.HeadAge, s.HeadAgeKnown = 5*time.Second, true
		for i := range 6 {
			ps := lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: int32(i), End: 1000 * int64(at+1)}}
			if i == 0 {
				ps.End = 2000 + consumed0 // 600 behind
				ps.Lag, ps.HeadAge = 600, 5*time.Second
			}
			s.Partitions = append(s.Partitions, ps)
		}
		return s
	}
	ctl := newCtl(t, ControllerConfig{})
	var d Decision
	for i := range 4 {
		d = ctl.Step(mk(float64(i+1), 20*int64(i)), p, leaseT0.Add(time.Duration(i+1)*time.Second))
	}
	if !slices.Equal(d.AvoidPartitions, []int32{0}) || d.Signal != SignalAvoidPartitions || d.Rule != RuleAvoidPartitions || !d.IsUnlimited() {
		t.Fatalf("avoid %v signal %v rule %v rate %v (%s), want [0], avoid-partitions, unlimited", d.AvoidPartitions, d.Signal, d.Rule, d.Rate, d.Reason)
	}
}
