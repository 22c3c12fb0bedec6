package quota

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSimHAWorldSpread measures, on demand (LAGBRIDGE_SIM_SPREAD=1), how
// far apart two runs of TestHAFailoverUnderOverload's world can land with
// no failover at all and no machine noise: the simulator plays it (3
// partitions, 300 msg/s offered, a consumer of 400 msg/s dropping to 100
// at 6 s, deadline 2 s, interval 250 ms, franz-go's auto-commit of the
// previous poll) and the goodput over [16 s, 36 s) is compared between
// runs whose commit timers start in the same phase of the scenario and
// differ only in the observations' phase against them (steady commits,
// the first 40 ms later in each run) or only in the commit timer's drift
// (±10% per commit, by seed), and between runs whose commit timers start
// in different phases (two deployments started apart). It logs the figures (README, Replicas and
// failover) and asserts nothing.
func TestSimHAWorldSpread(t *testing.T) {
	if os.Getenv("LAGBRIDGE_SIM_SPREAD") == "" {
		t.Skip("on demand: LAGBRIDGE_SIM_SPREAD=1")
	}
	for _, commit := range []time.Duration{5 * time.Second, time.Second, 250 * time.Millisecond} {
		for _, drift := range []bool{false, true} {
			var diffs, cross []float64
			var all [][]float64
			for _, phase := range []float64{0.3, 1.1, 1.9, 2.7, 3.5, 4.3} {
				var gs []float64
				for k := range 6 {
					cfg := haWorld(commit, phase*commit.Seconds()/5, 1)
					if drift {
						cfg.seed = uint64(k + 1)
					} else {
						cfg.steadyCommits, cfg.commitAt = true, cfg.commitAt+0.04*float64(k)
					}
					gs = append(gs, haWorldGoodput(runSim(t, cfg)))
				}
				for i := range gs {
					for j := i + 1; j < len(gs); j++ {
						diffs = append(diffs, math.Abs(gs[i]-gs[j]))
					}
				}
				for _, other := range all {
					for _, a := range other {
						for _, b := range gs {
							cross = append(cross, math.Abs(a-b))
						}
					}
				}
				all = append(all, gs)
				t.Logf("commit %v, first at %.2fs, drift %v: goodput %s", commit, phase*commit.Seconds()/5, drift, fmt.Sprintf("%.1f", gs))
			}
			var sum float64
			for _, gs := range all {
				for _, g := range gs {
					sum += g
				}
			}
			t.Logf("commit %v, drift %v: mean goodput %.1f%% over %d runs", commit, drift, sum/float64(len(all)*len(all[0])), len(all)*len(all[0]))
			over, worst := spread(diffs)
			t.Logf("commit %v, drift %v: %d of %d pairs of runs in one commit phase differ by more than 5 points of goodput (worst %.1f)", commit, drift, over, len(diffs), worst)
			over, worst = spread(cross)
			t.Logf("commit %v, drift %v: %d of %d pairs in different commit phases do (worst %.1f)", commit, drift, over, len(cross), worst)
		}
	}
}

// TestSimHAWorldTrace prints, on demand, one run of TestSimHAWorldSpread's
// world at 5 s commits, decision by decision from 5 s to 40 s, and its
// goodput per second: LAGBRIDGE_SIM_SPREAD_TRACE=first[,seed], first the
// time of the first commit in seconds (TestSimHAWorldSpread's phases: 0.3,
// 1.1, ..., 4.3), seed a drift seed (none: steady commits). Each line: the
// time, the rule, the rate, the capacity the decision read, its wait, the
// lag and head age it read and the true head age, the consume and produce
// rates lag/ read, and the partitions avoided. It asserts nothing.
func TestSimHAWorldTrace(t *testing.T) {
	arg := os.Getenv("LAGBRIDGE_SIM_SPREAD_TRACE")
	if arg == "" {
		t.Skip("on demand: LAGBRIDGE_SIM_SPREAD_TRACE=first[,seed]")
	}
	first, seed, _ := strings.Cut(arg, ",")
	at, err := strconv.ParseFloat(first, 64)
	if err != nil {
		t.Fatalf("LAGBRIDGE_SIM_SPREAD_TRACE=%q: %v", arg, err)
	}
	cfg := haWorld(5*time.Second, at, 1)
	cfg.steadyCommits = true
	if seed != "" {
		n, err := strconv.ParseUint(seed, 10, 64)
		if err != nil {
			t.Fatalf("LAGBRIDGE_SIM_SPREAD_TRACE=%q: %v", arg, err)
		}
		cfg.seed, cfg.steadyCommits = n, false
	}
	res := runSim(t, cfg)
	for _, s := range res.between(5, 40) {
		d := s.dec
		t.Logf("%6.2f %-13s rate %7.1f cap %6.1f wait %5.2f lag %5d head %5.2f true %5.2f consumed %6.1f produced %6.1f avoid %v",
			s.t, d.Rule, d.Rate, d.Capacity, d.Wait.Seconds(), d.Lag, d.HeadAge.Seconds(), s.headAge, s.consumeInst, s.produceInst, d.AvoidPartitions)
	}
	var good [40]float64
	for i, x := range res.tickT {
		if x < 40 {
			good[int(x)] += res.tickGood[i]
		}
	}
	t.Logf("goodput over [16 s, 36 s) %.1f%%; consumed within the deadline, per second: %.0f", haWorldGoodput(res), good)
}

// spread counts the differences over 5 points and returns the largest.
func spread(diffs []float64) (over int, worst float64) {
	for _, d := range diffs {
		if d > 5 {
			over++
		}
		worst = max(worst, d)
	}
	return over, worst
}

// haWorld is TestHAFailoverUnderOverload's world in the simulator.
func haWorld(commit time.Duration, commitAt float64, seed uint64) simConfig {
	return simConfig{
		interval: 250 * time.Millisecond, commitEvery: commit, commitAt: commitAt,
		pollCommits: true, partitions: 3, learnCadence: true, duration: 50 * time.Second,
		capacity: func(x float64) float64 {
			if x >= 6 {
				return 100
			}
			return 400
		},
		policy: drainPolicy(), producers: producersOffering(2, 300), seed: seed,
	}
}

// haWorldGoodput is the goodput over [16 s, 36 s), percent of the 100
// msg/s consumer's capacity.
func haWorldGoodput(res *simResult) float64 {
	var good float64
	for i, x := range res.tickT {
		if x >= 16 && x < 36 {
			good += res.tickGood[i]
		}
	}
	return 100 * good / (100 * 20)
}

// TestSimHAFailoverCost measures, on demand (LAGBRIDGE_SIM_SPREAD=1), what
// the leader's loss costs in TestHAFailoverUnderOverload's world in the
// simulator, where nothing but the handoff differs between two runs: the
// goodput over [16 s, 36 s) of runs whose leader is killed at 16 s
// against the same runs without (steady 5 s commits, first at 36 phases).
// The handoffs: internal/replica's (a follower that adopted the leader's
// decisions stands in 2 s after the kill and leads 6.4 s after it, as
// measured on Kafka 4.3.1); the same with the lost leader's client quotas
// binding until the new leader's, or until the stand-in writes them
// (2.25 s: its first publish after it stands in); the same without the
// stand-in (the producers
// keep the lost leader's last leases until the new leader's, what a
// Kafka client quota the lost leader left does to a producer it binds);
// and the follower leading from 1 s on (its observations half an
// interval off the leader's: the phase alone). It logs the mean cost and
// its spread (README, Replicas and failover) and asserts nothing.
func TestSimHAFailoverCost(t *testing.T) {
	if os.Getenv("LAGBRIDGE_SIM_SPREAD") == "" {
		t.Skip("on demand: LAGBRIDGE_SIM_SPREAD=1")
	}
	for _, h := range []struct {
		name string
		fo   simFailover
	}{
		{"stand-in after 2s, new leader after 6.4s", simFailover{kill: 16, standIn: 2, lead: 6.4}},
		{"the same, the lost leader's client quotas (40 msg/s per producer) until the new leader's", simFailover{kill: 16, standIn: 2, lead: 6.4, quota: 40}},
		{"the same, a stand-in writes the client quotas from 2.25s", simFailover{kill: 16, standIn: 2, lead: 6.4, quota: 40, steer: 2.25}},
		{"no stand-in, new leader after 6.4s", simFailover{kill: 16, standIn: 6.4, lead: 6.4}},
		{"the follower's phase alone (it leads from 1s)", simFailover{kill: 1}},
	} {
		var costs []float64
		for _, phase := range []float64{0.3, 1.1, 1.9, 2.7, 3.5, 4.3} {
			for k := range 6 {
				world := func() simConfig {
					cfg := haWorld(5*time.Second, phase+0.04*float64(k), 1)
					cfg.steadyCommits = true
					return cfg
				}
				calm := haWorldGoodput(runSim(t, world()))
				cfg := world()
				cfg.failover = &h.fo
				costs = append(costs, calm-haWorldGoodput(runSim(t, cfg)))
			}
		}
		var sum, dist float64
		var dists []float64
		for _, c := range costs {
			sum, dist = sum+c, dist+math.Abs(c)
			dists = append(dists, math.Abs(c))
		}
		over, worst := spread(dists)
		n := float64(len(costs))
		t.Logf("%s: goodput cost mean %.1f points, mean distance %.1f, %d of %d runs more than 5 points apart either way (worst %.1f)", h.name, sum/n, dist/n, over, len(costs), worst)
	}
}
