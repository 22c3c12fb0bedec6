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
// to the interval. Red when NearCapacity is not asked (the acking target
// alone: not fine), when it is asked about every fine target (the
// reporting one: fine) and when it is asked about the coarse ones
// (coarse).
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
			if a.Topic != "acks" {
				t.Errorf("%s: NearCapacity asked about %v", c.name, a)
			}
		}
	}
}
