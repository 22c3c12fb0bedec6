package quota

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerOwnPaceListedSoon replays lagbridge bench --hot-partition
// --hot-commit 5s --hot-slow-after 10s --hot-consumer hook on kfake at 1 s
// (1c73e84, keyless, the first 20 readings): six partitions, each
// processed by a worker of its own, the hook reporting at its own pace.
// Partition 0's worker slows to 20 msg/s inside the second before reading
// 10, which shows it at lag 27, head 0.60 s, drained at 28 msg/s over
// that second while the sticky partitioner wrote 46 (a wait of 1.61 s);
// main listed it at reading 11, by its wait, at lag 47 (2.35 s of its
// work), and that run's partition 0 ended at p99 2.00 s, 1.1% dead. Its
// wait and one more interval reach the budget: it is listed at reading
// 10 (lateSoon), at a keyless rate from the drain just read (listedRate:
// 28 msg/s less its backlog, a share of 0.05, where the rate it drained
// at before it slowed, 58 msg/s, gave it its even share, 1/6; in the
// bench so listed, its lag grew to 38-45 by the next reading), and no
// other partition is listed, the topic unlimited. The same readings from
// a poll loop's reporter (not at its own pace) are read as before.
func TestControllerOwnPaceListedSoon(t *testing.T) {
	const file = "hot1s-ac5s-hook-soon.jsonl"
	replay := func(own bool) []Decision {
		return replayEdited(t, file, 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
			for i := range st.Partitions {
				if ps := &st.Partitions[i]; !ps.Reported.IsZero() {
					ps.Reported.OwnPace = own
				}
			}
		})
	}
	firstListed := func(ds []Decision) int {
		return slices.IndexFunc(ds, func(d Decision) bool { return slices.Contains(d.AvoidPartitions, 0) })
	}
	ds := replay(true)
	if got := firstListed(ds); got != 10 {
		t.Errorf("partition 0 first listed at reading %d, want 10 (lag 27, head 0.60 s)", got)
	} else if sh := shareOf(ds[got].PartitionShares, 0); sh > 0.1 {
		t.Errorf("partition 0 listed with a keyless share of %.3f, want at most 0.1 (its drain of 28 msg/s less its backlog, of 300 msg/s)", sh)
	}
	for i, d := range ds {
		if len(d.AvoidPartitions) > 0 && !slices.Equal(d.AvoidPartitions, []int32{0}) {
			t.Errorf("decision %d: avoid %v, want [0] or none", i, d.AvoidPartitions)
		}
		if !d.IsUnlimited() {
			t.Errorf("decision %d: %s at %.0f/s (%s), want the topic unlimited", i, d.Rule, d.Rate, d.Reason)
		}
	}
	if got := firstListed(replay(false)); got == 10 {
		t.Errorf("poll loop: partition 0 listed at reading 10: its wait is the loop's, not its own")
	}
}

// TestControllerOwnPaceSoonNotPool replays the demo's two hook recordings
// (demo-kafka-hook-lateshare-back and -held: a pool of workers saturated
// as a whole) as if reported at their own pace. lateSoon lists no
// partition there: at the first fresh reading of -back partition 2 showed
// lag 239, head 0.70 s, drained at 261 msg/s while written 305 (a wait of
// 1.09 s), but its drain was not measured before (a first move, not a
// change of pace), and in -held several partitions at once were behind.
// Read with no regard to its drain measured before, -back listed
// partition 2 from decision 1 on; with no regard to the other partitions
// behind, the lists of -back and -held held 12 and 25 partition-entries
// over the run. The first lists are those of the readings without the
// rule (decisions 11 and 9), and so are the entries (5 and 17). (At
// decision 13 of -back the topic was cut to 5 msg/s, every partition fed
// about 1: knownSlow lists partition 3 beside 0 and 1 by its drain against
// the offer's even share, and with three of six listed the list is dropped
// (AvoidBelow), freeing 0 and 1 two readings before their hysteresis
// would; partition 3, lag 0, is listed again at 15. fedShare read
// partition 3 as fed little there only because of the cut, 8 entries;
// fed little now means under the partitions' mean feed too, as in a cut
// every partition is under the offer's share:
// TestControllerOwnPaceCutSlowWorkerListed.)
func TestControllerOwnPaceSoonNotPool(t *testing.T) {
	for file, want := range map[string][2]int{"demo-kafka-hook-lateshare-back.jsonl": {11, 5}, "demo-kafka-hook-lateshare-held.jsonl": {9, 17}} {
		ds := replayEdited(t, file, 0, newCtl(t, ControllerConfig{Interval: time.Second}), func(st *lag.State) {
			for i := range st.Partitions {
				if ps := &st.Partitions[i]; !ps.Reported.IsZero() {
					ps.Reported.OwnPace = true
				}
			}
		})
		got := slices.IndexFunc(ds, func(d Decision) bool { return len(d.AvoidPartitions) > 0 })
		if got != want[0] {
			t.Errorf("%s: first list at decision %d (%v), want %d", file, got, ds[max(got, 0)].AvoidPartitions, want[0])
		}
		listed := 0
		for _, d := range ds {
			listed += len(d.AvoidPartitions)
		}
		if listed != want[1] {
			t.Errorf("%s: %d partitions listed over the decisions, want %d", file, listed, want[1])
		}
	}
}

// TestLateSoon: the wait and one more interval against the budget, only
// for a partition reported at its own pace, whose drain was measured
// before, written more than it drained, with its head past lateHead.
func TestLateSoon(t *testing.T) {
	var own lag.PartitionState
	own.Lag, own.Source, own.Reported.OwnPace = 27, lag.SourceConsumer, true
	loop := own
	loop.Reported.OwnPace = false
	// A report gone stale: the position is from commits again, while
	// Reported still holds the last report's OwnPace.
	commits := own
	commits.Source = lag.SourceCommits
	slowed := partTrack{rate: 57.9}
	fed, drained := partTrack{in: 46, out: 28}, partTrack{in: 20, out: 28}
	for _, c := range []struct {
		name       string
		pt, next   partTrack
		ps         lag.PartitionState
		wait, head float64
		want       bool
	}{
		{"wait and an interval reach the budget", slowed, fed, own, 1.61, 0.60, true},
		{"wait and an interval short of it", slowed, fed, own, 0.99, 0.60, false},
		{"head inside lateHead", slowed, fed, own, 1.61, 0.45, false},
		{"wait unknown", slowed, fed, own, -1, 0.60, false},
		{"drains more than written", slowed, drained, own, 1.61, 0.60, false},
		{"drains at the rate known", slowed, partTrack{in: 46, out: 40}, own, 1.61, 0.60, false},
		{"drains at soonPace of it", partTrack{rate: 50}, partTrack{in: 46, out: 30}, own, 1.61, 0.60, true},
		{"no drain measured before", partTrack{}, fed, own, 1.61, 0.60, false},
		{"a poll loop's report", slowed, fed, loop, 1.61, 0.60, false},
		{"a report gone stale, the position from commits", slowed, fed, commits, 1.61, 0.60, false},
		{"wait and an interval at the budget exactly", slowed, fed, own, 1, 0.60, true},
	} {
		if got := lateSoon(c.pt, c.next, &c.ps, c.wait, c.head, 0.5, 2, 1); got != c.want {
			t.Errorf("%s: lateSoon = %v, want %v", c.name, got, c.want)
		}
	}
	// An unknown wait (-1) with an interval past the budget by more than
	// one: -1 + interval alone reaches it.
	if lateSoon(slowed, fed, &own, -1, 0.60, 0.5, 1, 2.5) {
		t.Error("wait unknown, interval 2.5 s, budget 1 s: lateSoon = true, want false")
	}
}

// ownPaceSim is six partitions, a worker each (partCap msg/s), 300 msg/s
// of keyless records from producers sticky for `sticky` records, 5 s
// commits, each partition's position and head reported at its own pace
// (simConfig.reportOwn), observed every second.
func ownPaceSim(t *testing.T, producers int, sticky float64, partCap func(p int, at float64) float64) *simResult {
	ps := producersOffering(producers, 300)
	for _, p := range ps {
		p.honorAvoid = true
	}
	return runSim(t, simConfig{
		interval: time.Second, duration: 120 * time.Second, partitions: 6,
		capacity: constant(100000), commitEvery: 5 * time.Second, steadyCommits: true,
		partCap: partCap, reportOwn: true, sticky: sticky,
		policy: drainPolicy(), producers: ps, ctl: ControllerConfig{Interval: time.Second},
	})
}

// jitterWorker is a worker at base msg/s, +-frac, redrawn every 250 ms.
func jitterWorker(base, frac float64, seed uint64) func(p int, at float64) float64 {
	return func(p int, at float64) float64 {
		k := (uint64(at*4)+seed*1000003)*2654435761 ^ uint64(p+1)*40503
		k ^= k >> 13
		k *= 0x5bd1e995
		k ^= k >> 15
		return base * (1 + frac*(2*float64(k%10000)/10000-1))
	}
}

// slowedThen is partition 0's worker at slow msg/s from 10 s to until,
// then at after; every other worker (and partition 0's before) at 2,000.
func slowedThen(slow, until, after float64) func(p int, at float64) float64 {
	return func(p int, at float64) float64 {
		switch {
		case p != 0 || at < 10:
			return 2000
		case at < until:
			return slow
		}
		return after
	}
}

// TestControllerOwnPaceHealthyNotSoon: every worker drains 56-84 msg/s of
// the 50 it is fed, six producers sticky for 20 records: none is late,
// though a sticky burst puts a healthy partition's head past lateHead
// with more written than drained that second. lateSoon as first landed
// (9fd5fcf, no change of pace checked) listed 180 partition-entries over
// these six seeds where main before it listed none.
func TestControllerOwnPaceHealthyNotSoon(t *testing.T) {
	listed := 0
	for seed := uint64(1); seed <= 6; seed++ {
		res := ownPaceSim(t, 6, 20, jitterWorker(70, 0.2, seed))
		for _, s := range res.steps {
			listed += len(s.dec.AvoidPartitions)
		}
	}
	if listed > 3 {
		t.Errorf("%d partition-entries of healthy workers listed over 6 runs, want at most 3 (main before lateSoon: 0)", listed)
	}
}

// TestControllerOwnPaceRecoveredNotRelisted: partition 0's worker drains
// 10 msg/s for 2 s, then 70 (1.4x its share of 50). Once freed, it is
// not listed again late in the run: its known rate is its own drain, not
// the low drain its listing was given for its keyless rate (listedRate),
// and a sticky burst at its usual pace is no change of pace (lateSoon).
func TestControllerOwnPaceRecoveredNotRelisted(t *testing.T) {
	res := ownPaceSim(t, 1, 40, slowedThen(10, 12, 70))
	for _, s := range res.steps {
		if s.t >= 70 && slices.Contains(s.dec.AvoidPartitions, 0) {
			t.Fatalf("t=%.0f s: partition 0, recovered at 12 s to 1.4x its share, listed", s.t)
		}
	}
}

// TestListedRateNotNegative: a position that went back (a new owner
// after a rebalance resumes from the group's commit, behind the old
// owner's last report) is no drain.
func TestListedRateNotNegative(t *testing.T) {
	at := time.Unix(1000, 0)
	pt := partTrack{movePos: 500, moveAt: at.Add(-time.Second)}
	ps := lag.PartitionState{PartitionSample: lag.PartitionSample{End: 560, Lag: 80}} // position 480
	if r := listedRate(pt, partTrack{rate: 58}, &ps, &lag.State{At: at}); r < 0 {
		t.Errorf("listedRate = %.0f msg/s for a position that went back 20 records", r)
	}
}

// TestControllerOwnPaceRecoveredNotHeld: partition 0's worker drains 20
// msg/s for 3 s, then 60 (1.2x its share of 50). Relisted by a sticky
// burst after its first hold ran out, it is freed again within a few
// readings: the drain its listing read for its keyless rate (listedRate)
// is not kept as its known rate, which held it listed from 89 s to the
// end of the run, at the even share, as a slow partition on probe.
func TestControllerOwnPaceRecoveredNotHeld(t *testing.T) {
	res := ownPaceSim(t, 1, 40, slowedThen(20, 13, 60))
	run := 0
	for _, s := range res.steps {
		if s.t < 45 || !slices.Contains(s.dec.AvoidPartitions, 0) {
			run = 0
			continue
		}
		if run++; run > 10 {
			t.Fatalf("t=%.0f s: partition 0, recovered at 13 s to 1.2x its share, listed for %d readings in a row", s.t, run)
		}
	}
}

// TestListedRate: a partition listed now drains at the lower of its known
// rate and its drain since its last move; with no move seen yet (moveAt
// zero: a span since year 1 would read a drain of about 0), a span of
// nothing, or no known rate, the known rate stands.
func TestListedRate(t *testing.T) {
	at := time.Unix(1000, 0)
	ps := lag.PartitionState{PartitionSample: lag.PartitionSample{End: 560, Lag: 80}} // position 480
	known := partTrack{rate: 58}
	for _, c := range []struct {
		name string
		pt   partTrack
		want float64
	}{
		{"drained 20 over 1 s", partTrack{movePos: 460, moveAt: at.Add(-time.Second)}, 20},
		{"drained 100 over 1 s, above the rate known", partTrack{movePos: 380, moveAt: at.Add(-time.Second)}, 58},
		{"no move seen yet", partTrack{movePos: 460}, 58},
		{"moved at this observation", partTrack{movePos: 460, moveAt: at}, 58},
	} {
		if got := listedRate(c.pt, known, &ps, &lag.State{At: at}); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: listedRate = %.2f msg/s, want %.0f", c.name, got, c.want)
		}
	}
}
