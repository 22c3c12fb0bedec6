package quota

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The mission's drop (2,000 -> 400 -> 2,000 msg/s) seen through the commits
// of consumers people run: franz-go's default auto-commit (5 s) and a 250 ms
// one, observed every 250 ms and every second; producers offering 2x, 5x
// and 10x of 400.

type cadenceFigures struct {
	interval, commit time.Duration
	offered          float64
	// spare: the share of the offer admitted while the consumer had
	// capacity to spare (before the drop, and from one commit interval
	// plus two observations after the recovery), when the offer is below
	// its capacity; 1 when it never had spare capacity.
	spareBefore, spareAfter float64
	// idleRefused: seconds in which producers were refused while the
	// consumer had capacity to spare, outside the drop and its grace.
	idleRefused float64
	// excess: messages admitted after the drop beyond what the consumer
	// could take, until the allowed rate was first at most 110% of 400;
	// bound: (rate admitted before the drop - 400) x (commit interval +
	// observation interval).
	excess, bound float64
	// head ages (true) over the last 30 s of the slow phase, and the
	// whole run; goodput over the slow phase (admitted / 400 / s).
	steadyHeadMax, headP99 float64
	slowGoodput            float64
	minRateBefore          float64 // the lowest allowed rate before the drop
}

func (f cadenceFigures) String() string {
	return fmt.Sprintf("interval %v commit %v offered %.0f: admitted %.1f%% of the offer before the drop, %.1f%% after recovery; "+
		"refused with spare capacity %.2fs; excess after the drop %.0f (bound %.0f); steady head max %.2fs, p99 %.2fs; slow-phase goodput %.0f%%; min rate before the drop %.0f",
		f.interval, f.commit, f.offered, 100*f.spareBefore, 100*f.spareAfter, f.idleRefused, f.excess, f.bound, f.steadyHeadMax, f.headP99, 100*f.slowGoodput, f.minRateBefore)
}

func runCadence(tb testing.TB, interval, commit time.Duration, offered float64) (*simResult, cadenceFigures) {
	tb.Helper()
	return runCadenceWith(tb, simConfig{interval: interval, commitEvery: commit}, offered)
}

// runCadenceWith is runCadence on base (its interval, commitEvery,
// partitions and learnCadence; the rest is the drop's).
func runCadenceWith(tb testing.TB, base simConfig, offered float64) (*simResult, cadenceFigures) {
	tb.Helper()
	interval, commit := base.interval, base.commitEvery
	res := runSim(tb, simConfig{
		interval:     interval,
		commitEvery:  commit,
		partitions:   base.partitions,
		learnCadence: base.learnCadence,
		firstCommit:  base.firstCommit,
		duration:     time.Duration(dropEnd * float64(time.Second)),
		capacity:     dropCapacity,
		policy:       drainPolicy(),
		producers:    producersOffering(4, offered),
		seed:         uint64(interval/time.Millisecond) + uint64(commit/time.Millisecond),
	})
	f := cadenceFigures{interval: interval, commit: commit, offered: offered, spareBefore: 1, spareAfter: 1, minRateBefore: math.Inf(1)}
	grace := recoverAt + commit.Seconds() + 2*interval.Seconds()
	var offB, admB, offA, admA float64
	var rateBefore, nBefore float64
	for i, t := range res.tickT {
		switch {
		case t <= dropAt:
			offB += res.tickOffered[i]
			admB += res.tickAdmitd[i]
			if t > dropAt-5 {
				rateBefore += res.tickAdmitd[i]
				nBefore += res.cfg.tick.Seconds()
			}
		case t > grace:
			offA += res.tickOffered[i]
			admA += res.tickAdmitd[i]
		}
		if (t <= dropAt || t > grace) && res.tickSpare[i] && res.tickAdmitd[i] < 0.99*res.tickOffered[i] {
			f.idleRefused += res.cfg.tick.Seconds()
		}
	}
	if offered < highCap {
		f.spareBefore, f.spareAfter = admB/offB, admA/offA
	}
	rateBefore /= nBefore
	f.bound = max(rateBefore-lowCap, 0) * (commit.Seconds() + interval.Seconds())
	cut := recoverAt
	for _, s := range res.between(dropAt, recoverAt) {
		if s.dec.Rate <= 1.1*lowCap {
			cut = s.t
			break
		}
	}
	var slowAdm float64
	for i, t := range res.tickT {
		if t > dropAt && t <= recoverAt {
			slowAdm += res.tickAdmitd[i]
			if t <= cut {
				f.excess += res.tickAdmitd[i] - lowCap*res.cfg.tick.Seconds()
			}
		}
	}
	f.slowGoodput = slowAdm / (lowCap * (recoverAt - dropAt))
	for _, s := range res.between(2, dropAt) {
		f.minRateBefore = min(f.minRateBefore, s.dec.Rate)
	}
	f.steadyHeadMax, _ = res.headStats(recoverAt-30, recoverAt)
	_, f.headP99 = res.headStats(0, dropEnd)
	return res, f
}

// TestSimCommitCadence is issue 12's controller part, in the simulator:
// consumers that commit every 250 ms and every 5 s (franz-go's default),
// observed every 250 ms and every second, through the drop.
//
// Asserted in every row: no false throttling before the drop (producers
// offering 800 msg/s to a 2,000 msg/s consumer get >= 98% of it; >= 99%
// with 250 ms commits). With 250 ms commits, the overload guarantees too:
// the head age stays under MaxAge in steady overload, goodput in the slow
// phase is >= 95% of the consumer's 400 msg/s, and once capacity has
// returned (plus one commit interval and two observations) producers get
// >= 99% of their offer (issue 12: no false throttling). With 5 s commits
// an observer of commits is blind for up to a commit interval: the excess
// admitted after the drop stays within 1.2x of (rate before - 400) x
// (commit interval + interval), goodput in the slow phase is >= 60%, and
// after the recovery producers get >= 80% of their offer (each commit that
// shows the consumer caught up allows one probe step; see
// TestControllerCaughtUpAtCommit). The figures are logged.
func TestSimCommitCadence(t *testing.T) {
	for _, iv := range []time.Duration{250 * time.Millisecond, time.Second} {
		for _, ci := range []time.Duration{250 * time.Millisecond, 5 * time.Second} {
			for _, mult := range []float64{2, 5, 10} {
				t.Run(fmt.Sprintf("interval %v commit %v %.0fx", iv, ci, mult), func(t *testing.T) {
					_, f := runCadence(t, iv, ci, mult*lowCap)
					t.Log(f)
					fast := ci < time.Second
					want := 0.98
					if fast {
						want = 0.99
					}
					if f.spareBefore < want {
						t.Errorf("before the drop producers got %.1f%% of their offer, want >= %.0f%%", 100*f.spareBefore, 100*want)
					}
					if !fast {
						checkCommitsOnly(t, f)
						return
					}
					if f.steadyHeadMax > drainPolicy().MaxAge.Seconds() {
						t.Errorf("head age %.2fs in steady overload, want <= maxAge", f.steadyHeadMax)
					}
					if f.slowGoodput < 0.95 {
						t.Errorf("slow-phase goodput %.0f%%, want >= 95%%", 100*f.slowGoodput)
					}
					if f.spareAfter < 0.99 {
						t.Errorf("after the recovery producers got %.1f%% of their offer, want >= 99%%", 100*f.spareAfter)
					}
				})
			}
		}
	}
}

// TestSimCommitCadenceLearned: franz-go's default auto-commit (5 s) over
// six partitions, observed every second, as the daemon sees it: the
// cadence is what the Tracker learns (unknown until two commits moved the
// positions), not handed to the observer from the first observation.
// The same guarantees as TestSimCommitCadence's 5 s rows. Before the
// controller took an unknown cadence as no evidence (commits due at the
// auto-commit default), the first seconds read the lag between commits
// as a wait without bound: producers offering 800 msg/s to a 2,000 msg/s
// consumer got 35.5% of their offer before the drop (24 s refused while
// the consumer had capacity to spare).
func TestSimCommitCadenceLearned(t *testing.T) {
	for _, mult := range []float64{2, 5, 10} {
		t.Run(fmt.Sprintf("%.0fx", mult), func(t *testing.T) {
			_, f := runCadenceWith(t, simConfig{interval: time.Second, commitEvery: 5 * time.Second, partitions: 6, learnCadence: true}, mult*lowCap)
			t.Log(f)
			if f.spareBefore < 0.98 {
				t.Errorf("before the drop producers got %.1f%% of their offer, want >= 98%%", 100*f.spareBefore)
			}
			checkCommitsOnly(t, f)
		})
	}
}

// checkCommitsOnly asserts what an observer of 5 s commits can hold: the
// excess after the drop within 1.2x its bound, slow-phase goodput >= 60%,
// >= 80% of the offer after the recovery (re-opening waits for commits
// that show the consumer caught up), and a head age in steady overload
// of at most two commit intervals (what an estimate between commits can
// hide is bounded by one).
func checkCommitsOnly(tb testing.TB, f cadenceFigures) {
	tb.Helper()
	if limit := 2 * f.commit.Seconds(); f.steadyHeadMax > limit {
		tb.Errorf("head age %.2fs in steady overload, want <= %.0fs (two commit intervals)", f.steadyHeadMax, limit)
	}
	if f.excess > 1.2*f.bound+1 {
		tb.Errorf("excess %.0f after the drop, want <= 1.2 x %.0f", f.excess, f.bound)
	}
	if f.slowGoodput < 0.6 {
		tb.Errorf("slow-phase goodput %.0f%%, want >= 60%%", 100*f.slowGoodput)
	}
	if f.spareAfter < 0.8 {
		tb.Errorf("after the recovery producers got %.1f%% of their offer, want >= 80%%", 100*f.spareAfter)
	}
}

// TestSimFirstCommit: a consumer group that starts without a committed
// offset, seen live from the start (lag/ measures it from first sight),
// whose first commit comes 5.3 s later (franz-go's default auto-commit),
// then every 5 s; observed every 250 ms and every second. Offered 800 msg/s
// with 2,000 of capacity, producers are not throttled for the commit they
// have not made yet (>= 97% of the offer in the first 20 s; before, the
// first observation drained them to 0 and the rate stayed 0). Offered 2,000
// with 400 of capacity, they are throttled (rate <= 110% of 400) by the
// first commit, within one auto-commit interval, two observations and half
// a second of first sight: the first commit measures what the consumer
// moved past the first-sight position (before, it measured no rate and
// the throttle came with the second commit, at 8.25 s and 10 s).
func TestSimFirstCommit(t *testing.T) {
	for _, iv := range []time.Duration{250 * time.Millisecond, time.Second} {
		for _, tc := range []struct {
			name     string
			offered  float64
			capacity float64
		}{
			{name: "spare capacity", offered: 800, capacity: highCap},
			{name: "overload", offered: 2000, capacity: lowCap},
		} {
			t.Run(fmt.Sprintf("interval %v %s", iv, tc.name), func(t *testing.T) {
				res := runSim(t, simConfig{
					interval:    iv,
					commitEvery: 5 * time.Second,
					firstCommit: 5.3,
					duration:    40 * time.Second,
					capacity:    constant(tc.capacity),
					policy:      drainPolicy(),
					producers:   producersOffering(4, tc.offered),
					seed:        uint64(iv / time.Millisecond),
				})
				var off, adm float64
				for i, tt := range res.tickT {
					if tt <= 20 {
						off += res.tickOffered[i]
						adm += res.tickAdmitd[i]
					}
				}
				share := adm / off
				throttled := -1.0
				for _, s := range res.steps {
					if s.dec.Rate <= 1.1*tc.capacity {
						throttled = s.t
						break
					}
				}
				t.Logf("admitted %.1f%% of the offer in the first 20 s; first throttled at %.2fs", 100*share, throttled)
				if tc.offered < tc.capacity && share < 0.97 {
					t.Errorf("producers got %.1f%% of their offer to a consumer with spare capacity, want >= 97%%", 100*share)
				}
				if by := firstCommitEvery.Seconds() + 2*iv.Seconds() + 0.5; tc.offered > tc.capacity && (throttled < 0 || throttled > by) {
					t.Errorf("first throttled at %.2fs, want by %.2fs", throttled, by)
				}
			})
		}
	}
}

// TestSimNoCommitYet: lagbridge bench's +no-commit-yet row in the
// simulator. Six partitions, a group seen live without a commit from the
// start, franz-go's default auto-commit (5 s, of what the previous poll
// returned: its first commit at 5.3 s may land behind the position the
// group was first seen at), the cadence learned as the daemon learns it;
// the consumer's capacity drops from 2,000 to 400 msg/s 1 s in, before
// any commit, and comes back at 21 s; producers offer 2x and 10x of 400.
// Naive producers (no lagbridge) in the same world beside it. lagbridge
// must never be worse than naive (goodput and dead work), and:
//   - it throttles (rate <= 110% of 400) once the first commit is due:
//     by firstCommitEvery, two observations and half a second of first
//     sight (before: at 10 s at 2x and 15 s at 10x, where a first commit
//     behind the first-sight position restarted the count);
//   - at 10x, less dead work than naive (before: the same, 93.3%);
//   - at 2x, dead work <= 20% of what is processed (before: 28.2%), and
//     goodput >= 1.25x naive's: the first commit's rate is a lower bound
//     of the capacity, which a late head does not hold in place (with
//     the earlier throttle alone, 1.21x: the drain ran on and the rate
//     stayed at that bound after it).
func TestSimNoCommitYet(t *testing.T) {
	for _, load := range []float64{2, 10} {
		t.Run(fmt.Sprintf("%vx", load), func(t *testing.T) {
			run := func(open bool) (*simResult, float64, float64) {
				res := runSim(t, simConfig{
					interval:     time.Second,
					commitEvery:  5 * time.Second,
					firstCommit:  5.3,
					partitions:   6,
					learnCadence: true,
					pollCommits:  true,
					duration:     36 * time.Second,
					capacity:     capacityDropped(1, 21),
					policy:       drainPolicy(),
					producers:    producersOffering(4, load*lowCap),
					seed:         7,
					open:         open,
				})
				var good, dead float64
				for i := range res.tickT {
					good += res.tickGood[i]
					dead += res.tickDead[i]
				}
				return res, good, dead
			}
			_, nGood, nDead := run(true)
			res, good, dead := run(false)
			throttled := -1.0
			for _, s := range res.steps {
				if s.dec.Rate <= 1.1*lowCap {
					throttled = s.t
					break
				}
			}
			t.Logf("naive: good %.0f dead %.0f (%.1f%%); lagbridge: good %.0f dead %.0f (%.1f%%), throttled at %.0fs",
				nGood, nDead, 100*nDead/(nGood+nDead), good, dead, 100*dead/(good+dead), throttled)
			if good < nGood || dead > nDead {
				t.Errorf("worse than naive: good %.0f < %.0f or dead %.0f > %.0f", good, nGood, dead, nDead)
			}
			if by := 1 + firstCommitEvery.Seconds() + 2 + 0.5; throttled < 0 || throttled > by {
				t.Errorf("first throttled at %.0fs, want by %.1fs", throttled, by)
			}
			switch load {
			case 10:
				if dead >= nDead {
					t.Errorf("dead work %.0f, want less than naive's %.0f", dead, nDead)
				}
			case 2:
				if share := dead / (good + dead); share > 0.2 {
					t.Errorf("dead work %.1f%% of what was processed, want <= 20%%", 100*share)
				}
				if good < 1.25*nGood {
					t.Errorf("goodput %.0f, want >= 1.25 x naive's %.0f", good, nGood)
				}
			}
		})
	}
}
