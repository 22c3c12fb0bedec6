package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerUncommittedPartitionOfCommittingGroup replays the first
// readings of two lagbridge bench runs of kafka/autocommit-1s/sync/1s at 2x
// on Kafka 4.3.1 (main at e5339ee, the naive side of each run, which the
// daemon decides on without enforcing): 800 msg/s of keyless records
// offered to a consumer of 2,000 that franz-go auto-commits every second,
// read every second, the capacity dropping to 400 msg/s at 10 s. At first
// sight two or three of the six partitions were empty (franz-go's sticky
// partitioner had not reached them); the group committed the others
// within the second. When the partitioner reached an empty one, its
// records, consumed and not committed yet, made it first-seen with lag,
// and the whole target read as a group without a commit: "saturated:
// capacity 801/s, wait 943ms" at the third fresh reading, then 620/s held
// until the drop (8 of 9 readings before it limited, in both runs). Its
// position is what the group commits, at the group's cadence
// (committedSight): unlimited until the drop, which still limits it.
func TestControllerUncommittedPartitionOfCommittingGroup(t *testing.T) {
	for _, name := range []string{"ac1s1s-kafka-emptysight.jsonl", "ac1s1s-kafka-emptysight2.jsonl"} {
		t.Run(name, func(t *testing.T) {
			ds := replayStates(t, name, time.Second)
			// Readings 0-10 are before the drop shows at a commit.
			wantUnlimitedBefore(t, ds, 11, "before the drop")
			wantLimitedWithin(t, ds, 11, 3)
		})
	}
}

// TestControllerUncommittedPartitionBinds: a group that commits every
// second on five of six partitions, read every second (the tracker from
// samples, as the daemon reads Kafka), and whose sixth partition, empty
// when the group was first seen, starts receiving records 2.5 s in. A
// consumer that consumes it too (committing it at its next commit) is not
// limited; one that never consumes it is (its records wait: a queue, not
// a commit's worth of uncommitted work), within three readings of them.
func TestControllerUncommittedPartitionBinds(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	tgt := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "t", Group: "g"}
	const perPart = 160.0 // msg/s to each written partition
	for _, tc := range []struct {
		name     string
		consumes bool // the consumer consumes (and commits) partition 5
	}{
		{name: "consumed", consumes: true},
		{name: "never consumed", consumes: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := lag.NewTracker(nil)
			c := newCtl(t, ControllerConfig{Interval: time.Second})
			t0 := leaseT0
			// end is partition i's end offset at sec seconds: partition
			// 5 is written from 2.5 s on.
			end := func(i int, sec float64) int64 {
				if i == 5 {
					return int64(perPart * max(sec-2.5, 0))
				}
				return int64(perPart * sec)
			}
			// written is when partition i's record at offset off was written.
			written := func(i int, off int64) time.Time {
				sec := float64(off) / perPart
				if i == 5 {
					sec += 2.5
				}
				return t0.Add(time.Duration(sec * float64(time.Second)))
			}
			var ds []Decision
			for k := 0; k <= 8; k++ {
				sec := float64(k) + 0.2
				var parts []lag.PartitionSample
				for i := range 6 {
					e := end(i, sec)
					ps := lag.PartitionSample{Partition: int32(i), End: e, Committed: -1, HeadKnown: true}
					// The commits come 0.05 s after each reading, of
					// everything written until then; none before the first.
					if com := sec - 0.95; com > 0 && (i < 5 || tc.consumes) {
						if c := end(i, com); c > 0 || i < 5 {
							ps.Committed = c
						}
					}
					if ps.Committed >= 0 {
						ps.Lag = e - ps.Committed
						if ps.Lag > 0 {
							ps.HeadTime = written(i, ps.Committed)
						}
					}
					parts = append(parts, ps)
				}
				now := t0.Add(time.Duration(sec * float64(time.Second)))
				s := tr.Observe(lag.Sample{Target: tgt, At: now, GroupState: "Stable", Members: 1, Live: lag.LiveYes, Partitions: parts}, now)
				ds = append(ds, c.Step(s, p, now))
			}
			// Partition 5's first records are read at 3.2 s (reading 3).
			limited := false
			for i, d := range ds {
				if !d.IsUnlimited() && tc.consumes {
					t.Errorf("reading %d (lag %d, head %s): %s at %.0f/s (%s), want unlimited: the consumer keeps up", i, d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason)
				}
				limited = limited || i <= 5 && !d.IsUnlimited()
			}
			if !tc.consumes && !limited {
				t.Errorf("not limited by reading 5: partition 5's records wait for a consumer that never reads them")
			}
		})
	}
}
