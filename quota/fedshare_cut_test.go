package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerOwnPaceCutSlowWorkerListed: under a cut every partition
// is fed less than the offer's even share (300 msg/s offered, the topic
// cut to 60): partition 0, draining 12 msg/s of its share of 100 with its
// lag growing, must still be listed by its drain. fedShare read it as fed
// little and held it to its feed, and it went unlisted for 8 readings,
// the topic read "saturated: capacity 60/s" (review-fedfive finding 1).
func TestControllerOwnPaceCutSlowWorkerListed(t *testing.T) {
	var drains [][3]int64
	for range 8 {
		drains = append(drains, [3]int64{3, 5, 5})
	}
	ds := feedPartsOffer(t, [3]int64{5, 5, 5}, [3]int64{2, 2, 2}, drains, 300)
	first := -1
	for i, d := range ds {
		if first < 0 && len(d.AvoidPartitions) > 0 {
			first = i
		}
	}
	if first < 0 || first > 3 {
		t.Errorf("partition 0 (12 msg/s of a share of 100, lag growing) first listed at reading %d, want by 3", first)
	}
}

// feedPartsOffer is threeParts (ownpace_stale_test.go) with partition i fed
// feeds[i] records an interval of 250 ms and lag0[i] behind through 12 readings,
// then draining drains[r][i] at reading r (at most what it has); the smoothed
// produce rate is offer (0: the feed's), producers cut below what they offer.
func feedPartsOffer(t *testing.T, feeds, lag0 [3]int64, drains [][3]int64, offer float64) []Decision {
	t.Helper()
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	p := Policy{Name: "bench", MaxAge: 2 * time.Second}
	var prev []lag.PartitionState
	var ds []Decision
	rate := float64(feeds[0]+feeds[1]+feeds[2]) * 4
	prod := max(rate, offer)
	pos := [3]int64{}
	for k := 1; k <= 12+len(drains); k++ {
		at := leaseT0.Add(time.Duration(k) * 250 * time.Millisecond)
		s := lag.State{Target: ordersK, At: at, Status: lag.StatusOK, HeadAgeKnown: true, RatesKnown: true, Members: 1, Source: lag.SourceConsumer,
			ProduceRate: prod, ConsumeRate: rate, ProduceRateInstant: rate, ConsumeRateInstant: rate}
		var parts []lag.PartitionState
		for i := range int32(3) {
			end := feeds[i] * int64(k)
			pos[i] = end - lag0[i]
			if k > 12 {
				pos[i] = min(prev[i].Position+drains[k-13][i], end)
			}
			parts = append(parts, lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: i, End: end, Lag: end - pos[i],
				Reported: lag.Report{At: at, Position: pos[i], OwnPace: true, HeadTime: at.Add(-600 * time.Millisecond)}},
				HeadAge: 600 * time.Millisecond, Source: lag.SourceConsumer, Position: pos[i]})
			s.Lag += end - pos[i]
		}
		s.Partitions, prev = parts, parts
		if d := c.Step(s, p, at); k > 12 {
			ds = append(ds, d)
		}
	}
	return ds
}

// TestControllerOwnPaceFedLittleHeldAgainstFeed: partition 0, fed 2 records an interval (8 msg/s,
// a fifth of the even share of 40), drains 1 (4 msg/s, half its feed) while
// partition 1 catches up (22 an interval of 14 fed): slowed alone, but its drain
// is not under half its feed: not listed by it (against the even share it would be: 4 < 20).
func TestControllerOwnPaceFedLittleHeldAgainstFeed(t *testing.T) {
	ds := feedPartsOffer(t, [3]int64{2, 14, 14}, [3]int64{2, 20, 2}, [][3]int64{{1, 22, 14}, {1, 22, 14}, {1, 22, 14}, {1, 22, 14}}, 0)
	for i, d := range ds {
		if len(d.AvoidPartitions) > 0 {
			t.Errorf("reading %d: avoid %v, want none", i, d.AvoidPartitions)
		}
	}
}

// TestFedShareOwnReportsOnly: fedShare reads a partition by its own feed
// only while its position is its consumer's own report: a report older
// than ReportFresh leaves the position from commits with Reported.OwnPace
// still set, and that partition is held against the even share as any
// partition read from commits (review-fedfive's M2), as is one already
// listed (M1).
func TestFedShareOwnReportsOnly(t *testing.T) {
	var ps lag.PartitionState
	ps.Source, ps.Reported.OwnPace = lag.SourceConsumer, true
	next := partTrack{in: 5, inAvg: 5}
	sum := drains{out: 300, in: 300}
	if got := fedShare(partTrack{}, next, &ps, 50, sum, 6); got != 0 {
		t.Fatalf("own report, fed 5 of a mean 50, not slowed: share %.0f, want 0", got)
	}
	commits := ps
	commits.Source = lag.SourceCommits
	if got := fedShare(partTrack{}, next, &commits, 50, sum, 6); got != 50 {
		t.Errorf("a stale report, the position from commits: share %.0f, want the even share 50", got)
	}
	if got := fedShare(partTrack{late: true}, next, &ps, 50, sum, 6); got != 50 {
		t.Errorf("listed: share %.0f, want the even share 50", got)
	}
}
