package quota

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// staleReadings steps a controller at 250 ms through three partitions
// reported at their own pace, each fed 10 records an interval and
// draining them (lag 2), for 12 readings; then one reading where drain[i]
// records of partition i are drained and the partitions in stale carry
// their sample of the reading before, marked Stale. It returns the
// partitions' records after that reading.
func staleReadings(t *testing.T, drain [3]int64, stale ...int32) map[int32]partTrack {
	t.Helper()
	parts, _ := threeParts(t, [][3]int64{drain}, stale...)
	return parts
}

// threeParts is staleReadings with one reading after the 12 for each
// element of drains (stale applies to the last); it returns the decisions
// of those readings too.
func threeParts(t *testing.T, drains [][3]int64, stale ...int32) (map[int32]partTrack, []Decision) {
	t.Helper()
	return partsRun{feeds: [3]int64{10, 10, 10}, lag0: [3]int64{2, 2, 2}, head: 100 * time.Millisecond, stale: stale}.run(t, drains)
}

// partsRun steps a controller at 250 ms through three partitions reported
// at their own pace: partition i fed feeds[i] records an interval and
// lag0[i] behind through 12 readings, its head head old; then one reading
// for each element of drains, where drains[r][i] records of partition i
// are drained (at most what it has), and at the last the partitions in
// stale carry their sample of the reading before, marked Stale. The
// produce rate read is offer, or the feed's when that is more (producers
// cut below what they offer). It returns the partitions' records after
// the last reading and the decisions of the readings after the 12.
type partsRun struct {
	feeds, lag0 [3]int64
	head        time.Duration
	offer       float64
	stale       []int32
}

func (r partsRun) run(t *testing.T, drains [][3]int64) (map[int32]partTrack, []Decision) {
	t.Helper()
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	p := Policy{Name: "bench", MaxAge: 2 * time.Second}
	var prev []lag.PartitionState
	var ds []Decision
	rate := float64(r.feeds[0]+r.feeds[1]+r.feeds[2]) * 4
	prod := max(rate, r.offer)
	pos := [3]int64{}
	last := 12 + len(drains)
	for k := 1; k <= last; k++ {
		at := leaseT0.Add(time.Duration(k) * 250 * time.Millisecond)
		s := lag.State{Target: ordersK, At: at, Status: lag.StatusOK, HeadAgeKnown: true, RatesKnown: true, Members: 1, Source: lag.SourceConsumer,
			ProduceRate: prod, ConsumeRate: rate, ProduceRateInstant: rate, ConsumeRateInstant: rate}
		var parts []lag.PartitionState
		for i := range int32(3) {
			end := r.feeds[i] * int64(k)
			pos[i] = end - r.lag0[i]
			if k > 12 {
				pos[i] = min(prev[i].Position+drains[k-13][i], end)
			}
			ps := lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: i, End: end, Lag: end - pos[i],
				Reported: lag.Report{At: at, Position: pos[i], OwnPace: true, HeadTime: at.Add(-r.head)}},
				HeadAge: r.head, Source: lag.SourceConsumer, Position: pos[i]}
			if k == last && slices.Contains(r.stale, i) {
				ps = prev[i]
				ps.Stale = true
			}
			parts = append(parts, ps)
			s.Lag += ps.Lag
		}
		s.Partitions, prev = parts, parts
		if d := c.Step(s, p, at); k > 12 {
			ds = append(ds, d)
		}
	}
	return c.targets[ordersK].parts, ds
}

// TestSlowedNotStale: a partition whose reading is stale measured no
// drain (trackPart leaves its out at 0): it is not slowed alone by it,
// whatever the others drained.
func TestSlowedNotStale(t *testing.T) {
	if parts := staleReadings(t, [3]int64{10, 10, 10}, 0); parts[0].slowed {
		t.Errorf("partition 0 stale: slowed, want not (its drain was not read)")
	}
	if parts := staleReadings(t, [3]int64{4, 10, 10}); !parts[0].slowed {
		t.Errorf("partition 0 drained 4 of the 10 it was fed, the others 10: not slowed, want slowed")
	}
}

// TestSlowedOthersNotStale: the others' drain slowAlone holds a partition
// against leaves a stale partition out: its drain was not read (0), and
// counted, with what it was fed, it halved what the others drained for
// their feed.
func TestSlowedOthersNotStale(t *testing.T) {
	if parts := staleReadings(t, [3]int64{4, 10, 10}, 1); !parts[0].slowed {
		t.Errorf("partition 0 drained 4 of 10, partition 2 10 of 10, partition 1 stale: not slowed, want slowed")
	}
}

// TestControllerOwnPaceFedShareListedByDrain: a partition fed its even
// share (10 of the 30 records an interval) that drains 4 of them two
// readings in a row is listed by its drain (knownSlow) at the second,
// though partition 2 drains only 6 of its 10: not slowed alone (0.4 of
// its feed is not under half the others' 0.8), it is held against the
// share as before fedShare; only a partition fed less than that needs
// slowAlone to be read by its drain.
func TestControllerOwnPaceFedShareListedByDrain(t *testing.T) {
	parts, ds := threeParts(t, [][3]int64{{4, 10, 6}, {4, 10, 6}})
	if parts[0].slowed {
		t.Fatalf("partition 0 slowed alone: the case tests nothing")
	}
	if !slices.Equal(ds[1].AvoidPartitions, []int32{0}) {
		t.Errorf("second reading: avoid %v (%s), want [0]", ds[1].AvoidPartitions, ds[1].Reason)
	}
}
