package quota

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestControllerObserverStallNotBelieved replays lagbridge bench
// --hot-partition --hot-interval 250ms --hot-slow-after 10s, keyed, on
// real Kafka 4.3.1 (main at a8b6aaa, the bench's process paused for
// 0.4-0.9 s every 4-7 s: a machine stall, which stops the daemon's
// observer and the consumer alike), from 05:11:52.9, partition 0 listed
// since its slowdown. Three readings came 0.45-0.88 s after the one
// before (05:11:56.175, 05:12:01.429, 05:12:02.476): little consumed over
// the stretched interval (55-75 msg/s), the other partitions' heads up
// to 0.43 s at their commits, read as a stall of the whole consumer:
// "saturated: capacity 56/s" (then 75/s, 55/s), the topic limited at
// 51-58 msg/s and keyed records of every partition refused (634 of
// partitions 1-5 in that run), while each next reading showed the
// consumer caught up (213-278 msg/s consumed, lag 2-16). Such a stall is
// not believed before it outlasts the observer's own gap: the topic stays
// unlimited, and partition 0 stays listed.
func TestControllerObserverStallNotBelieved(t *testing.T) {
	ds := replayStates(t, "hot250-kafka-stall.jsonl", 250*time.Millisecond)
	if len(ds) != 39 {
		t.Fatalf("%d decisions, want 39", len(ds))
	}
	for i, d := range ds {
		if !d.IsUnlimited() || d.Signal == SignalSlowDown || d.Signal == SignalStop {
			t.Errorf("decision %d (%s): %s %s at %.0f/s, want unlimited (%s)", i, d.At.Format("15:04:05.000"), d.Rule, d.Signal, d.Rate, d.Reason)
		}
		if i > 0 && !slices.Contains(d.AvoidPartitions, 0) {
			t.Errorf("decision %d (%s): partition 0 not listed (%s)", i, d.At.Format("15:04:05.000"), d.Reason)
		}
	}
}

// hotStallWorld is TestSimHotPartitionStickyProducer's world (six
// partitions, each consumer at 2,000 msg/s, partition 0's at 20 from 10 s,
// 250 ms commits read every 250 ms, 300 msg/s of keyless records from one
// sticky producer that honours the list) with the machine stalled by
// machine, and partition caps by partCap.
func hotStallWorld(ps []*simProducer, machine func(float64) bool, partCap func(int, float64) float64) simConfig {
	return simConfig{
		interval:      250 * time.Millisecond,
		duration:      60 * time.Second,
		partitions:    6,
		capacity:      constant(6 * 2000),
		commitEvery:   250 * time.Millisecond,
		commitAt:      0.05,
		steadyCommits: true,
		learnCadence:  true,
		sticky:        150,
		partCap:       partCap,
		machineStall:  machine,
		policy:        drainPolicy(),
		producers:     ps,
		window:        [2]float64{10, 60},
	}
}

// slowP0 is partition 0's consumer slowed to 20 msg/s from 10 s.
func slowP0(p int, at float64) float64 {
	if p == 0 && at >= 10 {
		return 20
	}
	return 2000
}

// TestSimHotPartitionMachineStall: the hot partition's world with the
// machine of the observer and the consumer stalled for 0.4-0.7 s every 5
// s from 15 s on (the producers, elsewhere, go on). Each stall reads, at
// the observation after it, as a stall of the whole consumer: it must not
// limit the topic (refusing producers on every partition) nor drop
// partition 0's listing.
func TestSimHotPartitionMachineStall(t *testing.T) {
	for _, length := range []float64{0.4, 0.55, 0.7} {
		t.Run(fmt.Sprintf("stalls of %.2f s", length), func(t *testing.T) {
			// From 15 s to 45 s: partition 0, listed since about 12 s,
			// is tried again (avoidProbe) only after that.
			stalled := func(at float64) bool {
				return at >= 15 && at < 45 && math.Mod(at-15, 5) < length
			}
			ps := producersOffering(1, 300)
			ps[0].honorAvoid = true
			res := runSim(t, hotStallWorld(ps, stalled, slowP0))
			refused := 1 - ps[0].winAdmitted/ps[0].winOffered
			unlisted, slow := 0, 0
			for _, s := range res.between(15, 46) {
				if !slices.Contains(s.dec.AvoidPartitions, 0) {
					unlisted++
				}
				if s.dec.Signal == SignalSlowDown || s.dec.Signal == SignalStop {
					slow++
				}
			}
			_, p99 := res.headStats(10, 60)
			t.Logf("refused %.1f%% of the offer; from 15 s to 46 s, partition 0 unlisted in %d observations, slow-down or stop in %d; head age p99 %.2fs",
				100*refused, unlisted, slow, p99)
			if slow > 0 {
				t.Errorf("slow-down or stop in %d observations, want none: the consumer kept up", slow)
			}
			if refused > 0.01 {
				t.Errorf("refused %.1f%% of the offer, want <= 1%%", 100*refused)
			}
			if unlisted > 0 {
				t.Errorf("partition 0 unlisted in %d observations from 15 s, want 0", unlisted)
			}
		})
	}
}

// TestSimConsumerStallBelieved: the whole consumer stalls for 3 s at 30 s
// (every partition's consumer stops; the observer and the producers go
// on), alone, or starting with a 0.7 s stall of the machine the observer
// runs on (its gap). Alone, the stall is read as before: producers are
// slowed within two observations of its commits being overdue (1.5 commit
// intervals and an observation after the last). With the observer's gap,
// at most the gap's shadow (min(gap, L/4)) and one observation later.
func TestSimConsumerStallBelieved(t *testing.T) {
	slowedAt := func(machine float64) float64 {
		stalled := func(at float64) bool { return at >= 30 && at < 30+machine }
		partCap := func(p int, at float64) float64 {
			if at >= 30 && at < 33 {
				return 0
			}
			return 2000
		}
		ps := producersOffering(1, 300)
		res := runSim(t, hotStallWorld(ps, stalled, partCap))
		for _, s := range res.between(30, 33) {
			if s.dec.Signal == SignalSlowDown || s.dec.Signal == SignalStop {
				return s.t
			}
		}
		return math.Inf(1)
	}
	alone, withGap := slowedAt(0), slowedAt(0.7)
	t.Logf("consumer stalled at 30 s: producers slowed at %.2f s; with the observer's gap of 0.7 s, at %.2f s", alone, withGap)
	if want := 30 + 1.5*0.25 + 0.25 + 2*0.25; alone > want {
		t.Errorf("consumer stalled alone: slowed at %.2f s, want by %.2f s", alone, want)
	}
	if want := alone + min(0.7, 0.5) + 0.25; withGap > want {
		t.Errorf("consumer stalled with the observer's gap: slowed at %.2f s, want by %.2f s", withGap, want)
	}
}

// TestControllerShadowKeepsRealBacklog: a reading after the observer's own
// gap whose backlog no stall of that length explains is read as it is. A
// replica resumed after a 2.6 s pause (TestHAShards/nats, SIGSTOP of a
// shard owner) read a consumer at 20 msg/s of 100 offered with a wait
// over a minute in the shadow, and served its producers unlimited.
func TestControllerShadowKeepsRealBacklog(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	p := Policy{Name: "p", MaxAge: 10 * time.Second}
	var d Decision
	for i := range 8 { // healthy, every 250 ms
		s := st(0.25*float64(i+1), 0, 100, 100)
		d = c.Step(s, p, s.At)
	}
	if !d.IsUnlimited() {
		t.Fatalf("healthy: %s %s", d.Rule, d.Reason)
	}
	late := st(2+2.6, 1600, 20, 100) // 2.6 s later: 1,600 queued, 16 s at the 100/s measured before
	late.HeadAge, late.HeadAgeKnown = 79*time.Second, true
	d = c.Step(late, p, late.At)
	if d.IsUnlimited() || d.Signal == SignalOK {
		t.Errorf("after a 2.6 s gap, 1,600 queued at 20/s: %s %s at %v, want limited (%s)", d.Rule, d.Signal, d.Rate, d.Reason)
	}
}

// TestControllerObserverStallRule: a stall of the whole consumer read in
// the shadow of the observer's own gap is decided by a rule of its own,
// observer-stall, not by unlimited or await-commit, whose conditions the
// reading does not meet: unlimited stays unlimited, and a limited target
// keeps the rate in force.
func TestControllerObserverStallRule(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 10 * time.Second}
	healthy := func(c *Controller) {
		for i := range 8 {
			s := st(0.25*float64(i+1), 0, 300, 300)
			c.Step(s, p, s.At)
		}
	}
	stalled := st(2+0.6, 150, 55, 300) // 0.6 s late: 55/s consumed of 300, 150 queued
	stalled.HeadAge, stalled.HeadAgeKnown = 400*time.Millisecond, true

	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	healthy(c)
	if d := c.Step(stalled, p, stalled.At); d.Rule != RuleObserverStall || !d.IsUnlimited() {
		t.Errorf("unlimited, then a stall in the observer's shadow: %s at %v, want observer-stall, unlimited (%s)", d.Rule, d.Rate, d.Reason)
	}

	c = newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	var d Decision
	for i := range 12 { // a consumer of 100/s under 300/s offered: limited
		s := st(0.25*float64(i+1), int64(50*(i+1)), 100, 300)
		d = c.Step(s, p, s.At)
	}
	if d.IsUnlimited() {
		t.Fatalf("overloaded: %s %s, want limited", d.Rule, d.Reason)
	}
	inForce := d.Rate
	late := st(3+0.6, 650, 20, 100) // 0.6 s late, 20/s consumed over the stretched interval
	late.HeadAge, late.HeadAgeKnown = time.Second, true
	if d = c.Step(late, p, late.At); d.Rule != RuleObserverStall || d.Rate != inForce {
		t.Errorf("limited at %v, then a stall in the observer's shadow: %s at %v, want observer-stall at %v (%s)", inForce, d.Rule, d.Rate, inForce, d.Reason)
	}
}
