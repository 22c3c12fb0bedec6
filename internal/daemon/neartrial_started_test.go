package daemon

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestTrialNearStartedBy drives a trial by probes the way Run does (the
// start and the fed readings through Loop.engaged, the readings between
// them through trial.probe), for a target no policy is engaged on but
// near its capacity (NearCapacity alone starts it) and for one a policy
// is engaged on, its 12th reading a fed one (the trial's end in engaged)
// or a probe (trial.probe). A near-started pass is sticky (trial.near
// true: it stays in passed once its cadence is relearned within the
// engaged interval); a policy-started one is not, through its grace and
// once relearned (main's rule, which the 10x rows keep: session 36,
// nearkafka), and it is still asked about while fine by that cadence;
// a reporting consumer is never asked. Red (review of nearkafka) with the
// pass by probes not marking the target (markNear in probe), with every
// pass sticky (markNear, byNear true, the grace case setting near), with
// isNear not asked in the fine-by-cadence case and without the
// SourceConsumer case: mutants every other daemon test passed.
func TestTrialNearStartedBy(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	state := func(pos int64, every time.Duration, src lag.Source) []lag.State {
		return []lag.State{{Target: tg, Source: src, CommitInterval: every,
			Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: pos + 100, Committed: pos, Lag: 100}, CommittedLag: 100}}}}
	}
	sample := func(pos int64) []lag.Sample {
		return []lag.Sample{{Target: tg, Partitions: []lag.PartitionSample{{End: pos + 100, Committed: pos, Lag: 100}}}}
	}
	always := func([]lag.Target) bool { return true }
	never := func([]lag.Target) bool { return false }
	for _, byPolicy := range []bool{false, true} {
		for _, endByProbe := range []bool{false, true} {
			name := map[bool]string{false: "near-started", true: "policy-started"}[byPolicy] +
				map[bool]string{false: ", ends at a fed reading", true: ", ends at a probe"}[endByProbe]
			engaged := never
			if byPolicy {
				engaged = always
			}
			l := &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
				Engaged: engaged, NearCapacity: always}
			var tr trial
			pos := int64(1000)
			if fine, _ := l.engaged(state(pos, time.Second, lag.SourceCommits), &tr); !fine || tr.on == nil || !tr.probes {
				t.Fatalf("%s: no trial by probes started: fine %v, trial %+v", name, fine, tr)
			}
			// Readings 1..11: probes, but every fourth a fed one (as Run
			// feeds one an interval after the last); the 12th ends it.
			for i := 1; i <= trialCycles; i++ {
				pos += 50
				fed := i%4 == 0
				if i == trialCycles {
					fed = !endByProbe
				}
				if fed {
					l.engaged(state(pos, time.Second, lag.SourceCommits), &tr)
				} else if !tr.probe(sample(pos)) {
					t.Fatalf("%s: probe %d failed: trial %+v", name, i, tr)
				}
			}
			sticky, asked := tr.near[tg]
			if tr.on != nil || tr.passed[tg] != trialCycles || !asked || sticky == byPolicy {
				t.Fatalf("%s: after the trial: %+v; want passed for %d cycles, in near with %v", name, tr, trialCycles, !byPolicy)
			}
			// Its grace: read at the cadence learned at 1 s.
			pos += 50
			l.engaged(state(pos, time.Second, lag.SourceCommits), &tr)
			if sticky, asked := tr.near[tg]; !asked || sticky == byPolicy {
				t.Errorf("%s: in its grace: near %v (asked %v), want %v", name, sticky, asked, !byPolicy)
			}
			// Its cadence relearned at the fast readings: a near-started
			// target stays in passed, a policy-started one leaves it.
			pos += 50
			l.engaged(state(pos, 250*time.Millisecond, lag.SourceCommits), &tr)
			if _, in := tr.passed[tg]; in == byPolicy {
				t.Errorf("%s: fine by its relearned cadence: in passed %v, want %v", name, in, !byPolicy)
			}
			// No policy engaged any more, still near: asked, still fast.
			l.Engaged = never
			pos += 50
			if fine, _ := l.engaged(state(pos, 250*time.Millisecond, lag.SourceCommits), &tr); !fine {
				t.Errorf("%s: fine by its relearned cadence, near, no policy: not fine (trial %+v)", name, tr)
			}
			// Its consumer reports now: not asked (its poll in hand).
			if fine, _ := l.engaged(state(pos+50, time.Second, lag.SourceConsumer), &tr); fine {
				t.Errorf("%s: reporting, near, no policy: fine (NearCapacity asked about a reporting consumer)", name)
			}
		}
	}
}

// TestTrialNearStickyFastCluster: in a cluster already fast for another
// fine target, a target on trial passes once its cadence is relearned
// within the engaged interval (the MovesWithin case); it stays in passed
// (sticky) when NearCapacity alone started its trial, not when a policy
// did. Red (review of nearkafka) with the trial's starter not read there
// (every target on trial sticky), a mutant every other daemon test
// passed.
func TestTrialNearStickyFastCluster(t *testing.T) {
	k := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	other := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "fast", Group: "g"}
	states := func(every time.Duration) []lag.State {
		return []lag.State{
			{Target: other, Source: lag.SourceCommits, CommitInterval: 100 * time.Millisecond},
			{Target: k, Source: lag.SourceCommits, CommitInterval: every,
				Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: 1100, Committed: 1000, Lag: 100}, CommittedLag: 100}}},
		}
	}
	for _, byPolicy := range []bool{false, true} {
		l := &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
			Engaged: func(ts []lag.Target) bool {
				for _, t := range ts {
					if t == other || byPolicy {
						return true
					}
				}
				return false
			},
			NearCapacity: func([]lag.Target) bool { return true }}
		var tr trial
		if fine, _ := l.engaged(states(time.Second), &tr); !fine || !tr.onTrial(k) || tr.probes || tr.byNear == byPolicy {
			t.Fatalf("policy-started %v: no trial read at every fast cycle: fine %v, trial %+v", byPolicy, fine, tr)
		}
		l.engaged(states(250*time.Millisecond), &tr)
		if _, in := tr.passed[k]; tr.on != nil || in == byPolicy {
			t.Errorf("policy-started %v: fine by its relearned cadence: trial %+v, in passed %v, want %v", byPolicy, tr, in, !byPolicy)
		}
	}
}
