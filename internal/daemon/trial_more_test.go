package daemon

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// funcSource returns what obs gives for the n-th reading (1-based).
type funcSource struct {
	mu    sync.Mutex
	reads int
	obs   func(n int) ([]lag.Sample, error)
}

func (f *funcSource) Observe(context.Context) ([]lag.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.obs(f.reads)
}

func kSample(group string, end, c int64) lag.Sample {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: group}
	return lag.Sample{Target: tg, At: time.Now(), Members: 1, Live: lag.LiveYes,
		Partitions: []lag.PartitionSample{{End: end, Committed: c, Lag: end - c}}}
}

// runLoop runs a Loop on src (interval 100 ms, engaged interval 25 ms,
// engaged as engaged says) until it fed want readings to OnCycle (10 s
// at most), and returns their times and how many came closer to the one
// before than the interval less half an engaged one (probe spacing).
func runLoop(t *testing.T, src Source, engaged func([]lag.Target) bool, want int) (fed []time.Time, fast int) {
	const interval, eng = 100 * time.Millisecond, 25 * time.Millisecond
	var mu sync.Mutex
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: interval, EngagedInterval: eng,
		Store: NewStore(map[string]lag.Kind{"c1": lag.KindKafka}), Engaged: engaged,
		OnCycle: func(time.Time, []lag.State) { mu.Lock(); fed = append(fed, time.Now()); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(fed)
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(fed); i++ {
		if fed[i].Sub(fed[i-1]) < interval-eng/2-5*time.Millisecond {
			fast++
		}
	}
	return append([]time.Time(nil), fed...), fast
}

// TestLoopTrialProbeErrorNotFed: a probe that errors (a broker error, a
// timeout) fails the trial and is not fed to the controller (it was, an
// engaged interval after the reading before, before review-fastcycle4).
// The target's commits stop after 4 readings (as stopSource), so it fails
// every trial; control: no errors.
func TestLoopTrialProbeErrorNotFed(t *testing.T) {
	for _, withErr := range []bool{false, true} {
		src := &funcSource{obs: func(n int) ([]lag.Sample, error) {
			s := []lag.Sample{kSample("g", int64(1000*n), int64(1000*min(n, 4))-500)}
			if withErr && n > 4 && n%2 == 0 {
				return s, errors.New("partial: broker timeout")
			}
			return s, nil
		}}
		fed, fast := runLoop(t, src, func([]lag.Target) bool { return true }, 25)
		t.Logf("errors %v: %d reads, %d fed, %d fed closer than the interval less half an engaged one", withErr, src.reads, len(fed), fast)
		if fast > 0 {
			t.Errorf("errors %v: %d fed readings came at probe spacing: an erroring probe reached the controller", withErr, fast)
		}
	}
}

// TestLoopTrialOnlyEngaged: a trial takes only the candidates a policy is
// engaged on. It took every candidate when Engaged said yes for any: h,
// with no policy, went on trial with g, and its commits stopping failed
// g's trial by probes (TestTrialProbes's rule).
func TestLoopTrialOnlyEngaged(t *testing.T) {
	g := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	h := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "h"}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
		Engaged: func(ts []lag.Target) bool { return slices.Contains(ts, g) }}
	tracker := lag.NewTracker(nil)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var tr trial
	for i := 1; i <= 12 && tr.on == nil; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		for _, tg := range []lag.Target{g, h} {
			tracker.Observe(lag.Sample{Target: tg, At: now, Members: 1, Live: lag.LiveYes, Partitions: []lag.PartitionSample{
				{End: int64(2000 * i), Committed: int64(2000*i - 500), Lag: 500}}}, now)
		}
		l.engaged(tracker.States(now), &tr)
	}
	t.Logf("on trial: %v", tr.on)
	if tr.on[h] != nil {
		t.Errorf("h, no policy engaged on it, is on g's trial")
	}
}

// slowObsSource: an observation that takes 9 ms (engagedCadence: 36 ms
// readings for a 25 ms engaged interval), of a target whose commits move
// at each 100 ms of the wall clock (a 1 s auto-commit at the 1 s
// interval, scaled down 10x).
type slowObsSource struct{ t0 time.Time }

func (s slowObsSource) Observe(context.Context) ([]lag.Sample, error) {
	time.Sleep(9 * time.Millisecond)
	el := time.Since(s.t0)
	end := int64(el / time.Millisecond * 10)
	c := int64(el.Truncate(100*time.Millisecond)/time.Millisecond*10) - 500
	return []lag.Sample{kSample("g", end, c)}, nil
}

// TestLoopTrialSlowObservation: an observation too slow for the engaged
// interval (the cadence slowed to 4x a cycle) fails the trial: at
// readings 340 ms apart a 1 s auto-commit moves at least every third and
// passed, and its lumpy commits were then fed at that cadence.
func TestLoopTrialSlowObservation(t *testing.T) {
	fed, fast := runLoop(t, slowObsSource{t0: time.Now()}, func([]lag.Target) bool { return true }, 60)
	t.Logf("%d fed, %d closer than the interval less half an engaged one", len(fed), fast)
	if fast > 0 {
		t.Errorf("a 100 ms (scaled 1 s) auto-commit fed %d readings at the slowed engaged cadence", fast)
	}
}
