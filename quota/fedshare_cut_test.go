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
	_, ds := partsRun{feeds: [3]int64{5, 5, 5}, lag0: [3]int64{2, 2, 2}, head: 600 * time.Millisecond, offer: 300}.run(t, drains)
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

// TestControllerOwnPaceFedLittleHeldAgainstFeed: partition 0, fed 2 records an interval (8 msg/s,
// a fifth of the even share of 40), drains 1 (4 msg/s, half its feed) while
// partition 1 catches up (22 an interval of 14 fed): slowed alone, but its drain
// is not under half its feed: not listed by it (against the even share it would be: 4 < 20).
func TestControllerOwnPaceFedLittleHeldAgainstFeed(t *testing.T) {
	_, ds := partsRun{feeds: [3]int64{2, 14, 14}, lag0: [3]int64{2, 20, 2}, head: 600 * time.Millisecond}.run(t, [][3]int64{{1, 22, 14}, {1, 22, 14}, {1, 22, 14}, {1, 22, 14}})
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
