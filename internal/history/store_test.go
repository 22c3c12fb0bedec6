package history

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

var t0 = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

func target(i int) lag.Target {
	return lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: fmt.Sprintf("topic-%04d", i), Group: "g"}
}

func state(t lag.Target, lagN int64, head time.Duration, st lag.Status) lag.State {
	return lag.State{Target: t, Lag: lagN, HeadAge: head, HeadAgeKnown: true, ProduceRate: 1000, ConsumeRate: 400,
		RatesKnown: true, Status: st}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		// The zero value takes every default.
		{"zero", Config{}, nil},
		// A longer recent past raises the default retention with it.
		{"long recent", Config{Recent: 3 * time.Hour}, nil},
		// Every bad field is reported at once, by its config name.
		{"all bad", Config{Recent: time.Second, Retention: 30 * 24 * time.Hour, Resolution: time.Millisecond, Events: 5, GrantChange: -1},
			[]string{"history.recent", "history.retention", "history.resolution", "history.events", "history.grantChange"}},
		// Retention shorter than the recent past would drop recent points.
		{"retention below recent", Config{Recent: 30 * time.Minute, Retention: 10 * time.Minute}, []string{"at least history.recent"}},
		// NaN is not a threshold.
		{"nan threshold", Config{GrantChange: math.NaN()}, []string{"history.grantChange"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// TestRecentAndDownsampled: the recent past at interval resolution, the
// older points merged per resolution bucket with the largest lag and head
// age, the mean rates, the smallest allowed rate and the worst status.
func TestRecentAndDownsampled(t *testing.T) {
	s := NewStore(Config{Recent: time.Minute, Retention: 10 * time.Minute, Resolution: 30 * time.Second}, time.Second, t0)
	tg := target(1)
	// 3 minutes at 1s: lag rises to 179; allowed falls from 1000 in steps.
	for i := range 180 {
		st := state(tg, int64(i), time.Duration(i)*10*time.Millisecond, lag.StatusOK)
		if i == 20 {
			st.Status = lag.StatusStalled
		}
		d := quota.Decision{Rate: 1000 - float64(i), Signal: quota.SignalSlowDown}
		if i < 10 {
			d = quota.Decision{Rate: math.Inf(1), Signal: quota.SignalOK}
		}
		s.Record(t0.Add(time.Duration(i)*time.Second), []lag.State{st}, map[lag.Target]quota.Decision{tg: d})
	}
	got := s.Query(Query{})
	if len(got) != 1 {
		t.Fatalf("%d series", len(got))
	}
	pts := got[0].Points
	var recent, coarse []Point
	for _, p := range pts {
		if p.SpanSeconds > 0 {
			coarse = append(coarse, p)
		} else {
			recent = append(recent, p)
		}
	}
	// Recent: the last minute at 1s (60 or 61 points, the bound allows 62).
	if len(recent) < 60 || len(recent) > 62 {
		t.Errorf("%d recent points, want about 60", len(recent))
	}
	if last := recent[len(recent)-1]; last.Lag != 179 || last.T != t0.Add(179*time.Second).UnixMilli() {
		t.Errorf("newest point %+v", last)
	}
	// Older: 0..~118s in 30s buckets: 4 buckets, each with the bucket's
	// largest lag, its first time, and spans of 29s.
	if len(coarse) != 4 {
		t.Fatalf("%d downsampled points, want 4: %+v", len(coarse), coarse)
	}
	first := coarse[0]
	if first.T != t0.UnixMilli() || first.Lag != 29 || first.SpanSeconds != 29 {
		t.Errorf("first bucket %+v, want t0, lag 29, span 29", first)
	}
	if *first.HeadAgeSeconds != 0.29 {
		t.Errorf("first bucket head age %v, want the largest, 0.29", *first.HeadAgeSeconds)
	}
	if first.Unlimited || first.Allowed == nil || *first.Allowed != 1000-29 {
		t.Errorf("first bucket allowed %v (unlimited %v), want the smallest, 971", first.Allowed, first.Unlimited)
	}
	if first.Signal != "slow-down" || first.Status != lag.StatusStalled {
		t.Errorf("first bucket signal %q status %q, want the worst: slow-down, stalled", first.Signal, first.Status)
	}
	if *first.ProduceRate != 1000 || *first.ConsumeRate != 400 {
		t.Errorf("first bucket rates %v %v", *first.ProduceRate, *first.ConsumeRate)
	}
	// Time order throughout.
	for i := 1; i < len(pts); i++ {
		if pts[i].T <= pts[i-1].T {
			t.Fatalf("points out of order at %d: %d after %d", i, pts[i].T, pts[i-1].T)
		}
	}
	// A time filter keeps the overlapping points only.
	part := s.Query(Query{Since: t0.Add(170 * time.Second), Until: t0.Add(175 * time.Second)})[0].Points
	if len(part) != 6 || part[0].Lag != 170 {
		t.Errorf("filtered: %d points from lag %d, want 6 from 170", len(part), part[0].Lag)
	}
	// At most 10 points: runs merged, the largest lag kept, the whole
	// range covered.
	few := s.Query(Query{MaxPoints: 10})[0].Points
	if len(few) > 10 || len(few) < 5 {
		t.Fatalf("%d points with MaxPoints 10", len(few))
	}
	last := few[len(few)-1]
	if few[0].T != t0.UnixMilli() || last.Lag != 179 || last.T+int64(last.SpanSeconds)*1000 != t0.Add(179*time.Second).UnixMilli() {
		t.Errorf("thinned points do not cover the range: first %+v, last %+v", few[0], last)
	}
	oldest, started := s.Since()
	if !oldest.Equal(t0) || !started.Equal(t0) {
		t.Errorf("Since = %v, %v", oldest, started)
	}
}

// TestForgetAndFilter: targets not seen for the retention are dropped;
// queries filter by cluster, topic and group; an old point is ignored.
func TestForgetAndFilter(t *testing.T) {
	s := NewStore(Config{Recent: time.Minute, Retention: 5 * time.Minute}, time.Second, t0)
	a, b := target(1), target(2)
	s.Record(t0, []lag.State{state(a, 1, 0, lag.StatusOK), state(b, 2, 0, lag.StatusOK)}, nil)
	s.Record(t0.Add(-time.Second), []lag.State{state(a, 99, 0, lag.StatusOK)}, nil) // out of order: ignored
	if got := s.Query(Query{Topic: b.Topic}); len(got) != 1 || got[0].Target != b || got[0].Points[0].Lag != 2 {
		t.Fatalf("by topic: %+v", got)
	}
	if got := s.Query(Query{Topic: a.Topic}); len(got[0].Points) != 1 || got[0].Points[0].Lag != 1 {
		t.Errorf("an older point was stored: %+v", got[0].Points)
	}
	if got := s.Query(Query{Cluster: "other"}); len(got) != 0 {
		t.Errorf("cluster filter: %+v", got)
	}
	// No quota: allowed null, not unlimited.
	if p := s.Query(Query{Topic: a.Topic})[0].Points[0]; p.Allowed != nil || p.Unlimited || p.Signal != "" {
		t.Errorf("no-quota point %+v", p)
	}
	// b keeps being observed for 6 minutes; a is gone.
	for i := 1; i <= 360; i++ {
		s.Record(t0.Add(time.Duration(i)*time.Second), []lag.State{state(b, 2, 0, lag.StatusOK)}, nil)
	}
	if got := s.Query(Query{}); len(got) != 1 || got[0].Target != b {
		t.Errorf("after the retention: %d series, want b only", len(got))
	}
	oldest, _ := s.Since()
	if oldest.Before(t0.Add(60 * time.Second)) {
		t.Errorf("oldest point %v is older than the retention", oldest)
	}
}

// recordWorld fills s with n targets x steps cycles at 1s.
func recordWorld(s *Store, n, steps int) {
	states := make([]lag.State, n)
	decisions := make(map[lag.Target]quota.Decision, n)
	for i := range n {
		states[i] = state(target(i), 100, time.Second, lag.StatusOK)
		decisions[states[i].Target] = quota.Decision{Rate: 500, Signal: quota.SignalSlowDown}
	}
	for k := range steps {
		for i := range states {
			states[i].Lag = int64(k)
		}
		s.Record(t0.Add(time.Duration(k)*time.Second), states, decisions)
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// memoryBound is the bound the README states for 1,000 targets x 15
// minutes at 1s (with the default 2h of downsampled points).
const memoryBound = 48 << 20

// TestMemoryBound: 1,000 targets, 15 minutes at 1s plus the default 2h of
// downsampled points, stay within the stated bound, and Bound says so.
func TestMemoryBound(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("fills 1,000 targets x 2h15m; measured without -short and without -race")
	}
	before := heap()
	s := NewStore(Config{}, time.Second, t0)
	recordWorld(s, 1000, int((DefaultRecent + DefaultRetention).Seconds()))
	used := heap() - before
	runtime.KeepAlive(s)
	t.Logf("1,000 targets x (15m at 1s + 2h at 1m): %.1f MiB in use; Bound %.1f MiB; stated %d MiB",
		float64(used)/(1<<20), float64(s.Bound(1000))/(1<<20), memoryBound>>20)
	if used > memoryBound {
		t.Errorf("history uses %d bytes, over the stated %d", used, memoryBound)
	}
	if targets, bytes := s.Usage(); targets != 1000 || bytes > s.Bound(1000) {
		t.Errorf("Usage = %d targets, %d bytes; want 1000 within Bound %d", targets, bytes, s.Bound(1000))
	}
	if s.Bound(1000) > memoryBound {
		t.Errorf("Bound(1000) = %d, over the stated %d", s.Bound(1000), memoryBound)
	}
	if PointBytes != 40 {
		t.Errorf("a point takes %d bytes, want 40", PointBytes)
	}
}

// BenchmarkHistory1000x15m fills the history of 1,000 targets with 15
// minutes at 1s (the default recent past) and reports the heap it holds
// (MiB-held) and the time one cycle of 1,000 targets takes to record.
func BenchmarkHistory1000x15m(b *testing.B) {
	b.ReportAllocs()
	var held uint64
	for b.Loop() {
		before := heap()
		s := NewStore(Config{}, time.Second, t0)
		recordWorld(s, 1000, 900)
		held = heap() - before
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(held)/(1<<20), "MiB-held")
}

// BenchmarkRecordCycle: one cycle of 1,000 targets into a full history.
func BenchmarkRecordCycle(b *testing.B) {
	s := NewStore(Config{}, time.Second, t0)
	recordWorld(s, 1000, 900)
	states := make([]lag.State, 1000)
	for i := range states {
		states[i] = state(target(i), 100, time.Second, lag.StatusOK)
	}
	b.ReportAllocs()
	k := 900
	for b.Loop() {
		s.Record(t0.Add(time.Duration(k)*time.Second), states, nil)
		k++
	}
}

// TestRing: pushes and pops in any order keep the points in time order,
// within the capacity, as a plain slice would (pops while the ring still
// grows included: a target observed irregularly).
func TestRing(t *testing.T) {
	cases := []struct {
		name     string
		capacity int
		ops      string // p: push, o: pop
	}{
		{"grow to full and wrap", 20, strings.Repeat("p", 45)},
		{"pops while growing", 40, strings.Repeat("pppo", 30) + strings.Repeat("p", 50)},
		{"empty then grow", 30, "ppoo" + strings.Repeat("p", 35)},
		{"tiny", 2, "pppopp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r ring
			var want []int64
			next := int64(0)
			for i, op := range c.ops {
				if op == 'p' {
					r.push(point{at: next}, c.capacity)
					want = append(want, next)
					if len(want) > c.capacity {
						want = want[1:]
					}
					next++
				} else if r.n > 0 {
					r.pop()
					want = want[1:]
				}
				if r.n != len(want) || len(r.buf) > c.capacity {
					t.Fatalf("op %d: n %d (len %d), want %d within %d", i, r.n, len(r.buf), len(want), c.capacity)
				}
				for j, w := range want {
					if got := r.at(j).at; got != w {
						t.Fatalf("op %d: point %d is %d, want %d", i, j, got, w)
					}
				}
			}
		})
	}
}
