package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lagbridge/lagbridge/lag"
)

// readings waits until src has at least n readings (or 10 s went by), then
// a further settle, and returns how many it has.
func readings(src *slowSource, n int, settle time.Duration) int {
	deadline := time.Now().Add(10 * time.Second)
	count := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return len(src.reads)
	}
	for count() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(settle)
	return count()
}

// TestLoopEngagedCadence: while Engaged says a policy is engaged, the
// cycles come every EngagedInterval instead of every Interval (an hour
// here: at it, the loop would read once), and once it has said no for
// engagedHold cycles in a row they go back to the interval. Engaged says
// yes after the first 3 cycles: 3 + 8 cycles, the 11th followed by the
// interval's wait; 10 of them followed at the engaged interval, counted
// in lagbridge_observe_engaged_cycles_total. Red when Engaged is not
// asked (1 reading) and when the cycles never go back (more than 11).
func TestLoopEngagedCadence(t *testing.T) {
	src := &slowSource{report: true}
	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg, store)
	var mu sync.Mutex
	asked := 0
	engaged := func([]lag.Target) bool {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return asked <= 3
	}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: time.Hour, Store: store, Metrics: m,
		Engaged: engaged, EngagedInterval: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	n := readings(src, 3+engagedHold, 300*time.Millisecond)
	cancel()
	<-done
	if n != 3+engagedHold {
		t.Errorf("%d readings, want %d: 3 engaged cycles and %d quiet ones at the engaged interval, then the interval", n, 3+engagedHold, engagedHold)
	}
	if got := testutil.ToFloat64(m.fastCycles.WithLabelValues("c1")); got != 2+engagedHold {
		t.Errorf("engaged cycles counted: %v, want %d", got, 2+engagedHold)
	}
}

// TestLoopEngagedCadenceOff: without an EngagedInterval shorter than the
// interval the loop keeps to the interval, engaged or not.
func TestLoopEngagedCadenceOff(t *testing.T) {
	for _, fast := range []time.Duration{0, time.Hour} {
		src := &slowSource{}
		l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: time.Hour, Store: NewStore(map[string]lag.Kind{"c1": lag.KindKafka}),
			Engaged: func([]lag.Target) bool { return true }, EngagedInterval: fast}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- l.Run(ctx) }()
		n := readings(src, 1, 200*time.Millisecond)
		cancel()
		<-done
		if n != 1 {
			t.Errorf("engaged interval %v: %d readings, want 1 (the first; the next an hour later)", fast, n)
		}
	}
}

// TestEngagedCadenceCost: the engaged cadence is never shorter than
// observeCostFactor times what the last observation took, nor longer than
// the interval; in a loop whose observations take 30 ms, readings come at
// least 3 x 30 + 30 ms apart (a cycle starts 4 x 30 ms after the one
// before), not every 10 ms engaged interval plus the observation.
func TestEngagedCadenceCost(t *testing.T) {
	for _, c := range []struct{ interval, engaged, took, want time.Duration }{
		{time.Second, 250 * time.Millisecond, 20 * time.Millisecond, 250 * time.Millisecond},
		{time.Second, 250 * time.Millisecond, 166 * time.Millisecond, 664 * time.Millisecond}, // 10,000 partitions
		{time.Second, 250 * time.Millisecond, 400 * time.Millisecond, time.Second},
	} {
		if got := engagedCadence(c.interval, c.engaged, c.took); got != c.want {
			t.Errorf("engagedCadence(%v, %v, %v) = %v, want %v", c.interval, c.engaged, c.took, got, c.want)
		}
	}
	const took = 30 * time.Millisecond
	src := &slowSource{slow: map[int]time.Duration{}, report: true}
	for i := range 6 {
		src.slow[i] = took
	}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: time.Hour, Store: NewStore(map[string]lag.Kind{"c1": lag.KindKafka}),
		Engaged: func([]lag.Target) bool { return true }, EngagedInterval: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	n := readings(src, 5, 0)
	cancel()
	<-done
	if n < 5 {
		t.Fatalf("%d readings in 10 s, want 5", n)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	for i := 1; i < 5; i++ {
		if gap := src.reads[i].Sub(src.reads[i-1]); gap < (observeCostFactor-1)*took+took {
			t.Errorf("reading %d came %v after the one before, want at least %v", i, gap, observeCostFactor*took)
		}
	}
}

// TestLoopEngagedOnlyFineTargets: the engaged cadence is for targets whose
// position moves at least every EngagedInterval. A consumer that reports
// its position switches the loop to it; a target read from its commits,
// whose cadence the loop's readings an interval apart cannot show finer
// than the interval, is not asked about and keeps the interval's
// readings, engaged as its policy may be (the hook says yes to all). Red
// when every target is asked about (the engaged cadence of session 30:
// 1 + engagedHold readings of the commits where 1 is wanted).
func TestLoopEngagedOnlyFineTargets(t *testing.T) {
	for _, c := range []struct {
		name            string
		report, commits bool
		want            int
	}{
		{"reported", true, false, 3},
		{"commits", false, true, 1},
		{"still", false, false, 1},
	} {
		src := &slowSource{report: c.report, commits: c.commits}
		var mu sync.Mutex
		var asked [][]lag.Target
		engaged := func(fine []lag.Target) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, fine)
			return true
		}
		n := runEngaged(src, engaged, c.want)
		mu.Lock()
		if c.want == 1 && n != 1 {
			t.Errorf("%s: %d readings, want 1 (the next an hour later); asked about %v", c.name, n, asked)
		}
		if c.want > 1 && n < c.want {
			t.Errorf("%s: %d readings, want at least %d at the engaged interval", c.name, n, c.want)
		}
		for _, fine := range asked {
			if !c.report || len(fine) != 1 {
				t.Errorf("%s: asked about %v", c.name, fine)
				break
			}
		}
		mu.Unlock()
	}
}

// TestLoopEngagedMixedCluster: a cluster holding a reporting target (t)
// and one read from commits that never show a cadence (t2) cycles at the
// engaged interval while only the reporting one is engaged, and keeps the
// interval while the coarse one is engaged too, since the cluster's fast
// cycles would read it at 250 ms as well. Red (3+ readings where 1 is
// wanted) when Loop.engaged asks only about the fine targets.
func TestLoopEngagedMixedCluster(t *testing.T) {
	for _, c := range []struct {
		name          string
		coarseEngaged bool
		want          int
	}{
		{"only the reporting one engaged", false, 3},
		{"the coarse one engaged too", true, 1},
	} {
		src := &slowSource{report: true, coarse: true}
		engaged := func(ts []lag.Target) bool {
			for _, tg := range ts {
				if tg.Topic == "t" || (tg.Topic == "t2" && c.coarseEngaged) {
					return true
				}
			}
			return false
		}
		n := runEngaged(src, engaged, c.want)
		if c.want == 1 && n != 1 {
			t.Errorf("%s: %d readings, want 1 (the next an hour later)", c.name, n)
		}
		if c.want > 1 && n < c.want {
			t.Errorf("%s: %d readings, want at least %d at the engaged interval", c.name, n, c.want)
		}
	}
}

// runEngaged runs a loop of cluster c1 over src at an hour's interval and
// a 10 ms engaged interval, asking engaged, until src gave want readings
// (or 10 s passed) and 200 ms more; it returns how many it gave.
func runEngaged(src *slowSource, engaged func([]lag.Target) bool, want int) int {
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: time.Hour, Store: NewStore(map[string]lag.Kind{"c1": lag.KindKafka}),
		Engaged: engaged, EngagedInterval: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	n := readings(src, want, 200*time.Millisecond)
	cancel()
	<-done
	return n
}

// TestLoopEngagedCoarseLater: once a coarse target is engaged beside the
// reporting one that switched the cluster, the next cycle comes at the
// interval, not after engagedHold more fast ones. Red (12 readings where
// at most 5 are wanted) when the hold runs on.
func TestLoopEngagedCoarseLater(t *testing.T) {
	src := &slowSource{report: true, coarse: true}
	engaged := func(ts []lag.Target) bool {
		src.mu.Lock()
		reads := len(src.reads)
		src.mu.Unlock()
		for _, tg := range ts {
			if tg.Topic == "t" || (tg.Topic == "t2" && reads >= 4) {
				return true
			}
		}
		return false
	}
	if n := runEngaged(src, engaged, 4); n > 5 {
		t.Errorf("%d readings, want at most 5 (4 fast ones, then the interval's)", n)
	}
}
