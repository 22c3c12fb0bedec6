package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestLoopNearCapacity: Loop.engaged counts NearCapacity as engaged for
// the fine targets read from the brokers (a NATS consumer acking within
// the engaged interval), not for those whose consumer reports (its
// position is the poll in hand, a standing queue the faster readings
// would read as saturated), nor for coarse ones: asked only about the
// acking target, a coarse target beside it cannot send the cluster back
// to the interval. A Kafka target read from commits that moved at about
// every 1 s reading (a trial candidate) is asked too, and a yes starts
// its trial by probes (session 36, nearkafka); a reporting Kafka
// consumer or one committing every 5 s is not asked. Red when
// NearCapacity is not asked (the acking target alone: not fine), when it
// is asked about every fine target (the reporting one: fine), when it is
// asked about the coarse ones (coarse), and when a candidate is not
// asked (no trial).
func TestLoopNearCapacity(t *testing.T) {
	tg := func(topic string) lag.Target {
		return lag.Target{Kind: lag.KindNATS, Cluster: "c1", Topic: topic, Group: "g"}
	}
	acking := lag.State{Target: tg("acks"), AckAge: 5 * time.Millisecond}
	reporting := lag.State{Target: tg("reports"), Source: lag.SourceConsumer}
	coarse := lag.State{Target: tg("coarse")}
	// Fine by a commit cadence learned at the fast readings themselves:
	// asked, it would keep the cluster fast for good once switched.
	commits := lag.State{Target: lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "commits", Group: "g"},
		CommitInterval: 250 * time.Millisecond}
	kafka := func(topic string, src lag.Source, every time.Duration) lag.State {
		return lag.State{Target: lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: topic, Group: "g"},
			Source: src, CommitInterval: every}
	}
	candidate := kafka("candidate", lag.SourceCommits, time.Second)
	kReporting := kafka("kreports", lag.SourceConsumer, time.Second)
	k5s := kafka("k5s", lag.SourceCommits, 5*time.Second)
	never := func([]lag.Target) bool { return false }
	only := func(topic string) func([]lag.Target) bool {
		return func(ts []lag.Target) bool {
			return slices.ContainsFunc(ts, func(t lag.Target) bool { return t.Topic == topic })
		}
	}
	for _, c := range []struct {
		name                 string
		states               []lag.State
		engaged              func([]lag.Target) bool
		wantFine, wantCoarse bool
	}{
		{"acking, near its capacity", []lag.State{acking}, never, true, false},
		{"reporting, near its capacity", []lag.State{reporting}, never, false, false},
		{"coarse, near its capacity", []lag.State{coarse}, never, false, false},
		{"commits at the fast readings, near its capacity", []lag.State{commits}, never, false, false},
		{"acking near, coarse beside it", []lag.State{acking, coarse}, never, true, false},
		{"reporting engaged, acking near, coarse beside them", []lag.State{reporting, acking, coarse}, only("reports"), true, false},
		{"Kafka commits about every reading, near its capacity: a trial", []lag.State{candidate}, never, true, false},
		{"Kafka reporting, near its capacity", []lag.State{kReporting}, never, false, false},
		{"Kafka commits every 5 s, near its capacity", []lag.State{k5s}, never, false, false},
	} {
		var asked []lag.Target
		near := func(ts []lag.Target) bool {
			asked = append(asked, ts...)
			return true
		}
		l := &Loop{Name: "c1", Kind: lag.KindNATS, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
			Engaged: c.engaged, NearCapacity: near}
		var tr trial
		fine, coarseEngaged := l.engaged(c.states, &tr)
		if fine != c.wantFine || coarseEngaged != c.wantCoarse {
			t.Errorf("%s: fine %v, coarse %v; want %v, %v", c.name, fine, coarseEngaged, c.wantFine, c.wantCoarse)
		}
		for _, a := range asked {
			if a.Topic != "acks" && a.Topic != "candidate" {
				t.Errorf("%s: NearCapacity asked about %v", c.name, a)
			}
		}
		if on := tr.onTrial(candidate.Target); on != slices.ContainsFunc(c.states, func(s lag.State) bool { return s.Target == candidate.Target }) || on && !tr.probes {
			t.Errorf("%s: candidate on trial %v (by probes %v)", c.name, on, tr.probes)
		}
	}
}
