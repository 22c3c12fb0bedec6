package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func TestScheduleOf(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	s := &Series{Bin: 100 * time.Millisecond, Behind: make([]float64, 50)}
	s.Behind[24] = 0.3 // [2.4 s, 2.5 s)
	s.Behind[45] = 2   // outside the window
	s.ConsumerBehind = make([]float64, 50)
	s.ConsumerBehind[15] = 1.5 // [1.5 s, 1.6 s): before the window
	s.ConsumerBehind[30] = 1.2 // [3.0 s, 3.1 s)
	s.ConsumerBehind[31] = 0.9
	for _, tc := range []struct {
		name   string
		cycles []time.Duration
		want   Schedule
	}{
		// The doc's example: the gap from 2.25 to 3.9 s is the longest;
		// 4.1 to the window's end (4.5 s) is shorter.
		{"gap inside", ms(1750, 2000, 2250, 3900, 4100, 4750),
			Schedule{Behind: 300 * time.Millisecond, BehindAt: 2500 * time.Millisecond, Consumer: 1200 * time.Millisecond, ConsumerAt: 3100 * time.Millisecond,
				Gap: 1650 * time.Millisecond, GapAt: 3900 * time.Millisecond, Cycles: 4}},
		// No cycle after 2.25 s: the gap runs to the window's end.
		{"stopped", ms(1750, 2000, 2250),
			Schedule{Behind: 300 * time.Millisecond, BehindAt: 2500 * time.Millisecond, Consumer: 1200 * time.Millisecond, ConsumerAt: 3100 * time.Millisecond,
				Gap: 2250 * time.Millisecond, GapAt: 4500 * time.Millisecond, Cycles: 2}},
		// No cycle at all: the whole window is one gap.
		{"none", nil,
			Schedule{Behind: 300 * time.Millisecond, BehindAt: 2500 * time.Millisecond, Consumer: 1200 * time.Millisecond, ConsumerAt: 3100 * time.Millisecond,
				Gap: 2500 * time.Millisecond, GapAt: 4500 * time.Millisecond}},
		// A gap that began before the window counts from its last cycle
		// before the window.
		{"from before", ms(1000, 2600, 2850, 3100, 3350, 3600, 3850, 4100, 4350),
			Schedule{Behind: 300 * time.Millisecond, BehindAt: 2500 * time.Millisecond, Consumer: 1200 * time.Millisecond, ConsumerAt: 3100 * time.Millisecond,
				Gap: 1600 * time.Millisecond, GapAt: 2600 * time.Millisecond, Cycles: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Cycles = tc.cycles
			if got := ScheduleOf(s, 2*time.Second, 4500*time.Millisecond); got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestTimeline renders the generic series around its "drop" at 2 s: rows
// of 500 ms with the row's rates and the end-of-row samples, and the rule
// changes with their reasons.
func TestTimeline(t *testing.T) {
	s := series(func(int) int64 { return 100 }, func(i int) int64 { return int64(100 - i) }, func(int) int64 { return 0 },
		func(int) int64 { return 0 }, func(i int) float64 { return float64(i) / 10 })
	s.Rule, s.Behind = make([]string, 40), make([]float64, 40)
	for i := range 40 {
		s.Rule[i], s.Reason[i] = "unlimited", "wait 0.1s: unlimited"
		if i >= 22 {
			s.Rule[i], s.Reason[i], s.Decided[i], s.Allowed[i] = "saturated", "consumer saturated: "+strings.Repeat("x", 300), 210, math.NaN()
		}
	}
	s.Behind[23] = 0.042
	s.Cycles = []time.Duration{2250 * time.Millisecond, 2500 * time.Millisecond}
	s.Refused[0][25] = 7
	r := Result{Series: s, Scenario: testScenario()}
	got := Timeline(r, 1500*time.Millisecond, 3*time.Second, 500*time.Millisecond)
	want := "t (s)       offered  stored refused allowed decided rule              head   true    lag   late cycles\n" +
		" 1.5-2.0      1,000     830       0     inf       - unlimited        1.90s  0.95s     19  0.00s      0\n" +
		" 2.0-2.5      1,000     780       0       -     210 saturated        2.40s  1.20s     24  0.04s      1\n" +
		" 2.5-3.0      1,000     730      14       -     210 saturated        2.90s  1.45s     29  0.00s      1\n" +
		"  2.3s saturated: consumer saturated: " + strings.Repeat("x", 200) + "...\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestPacerBehind: a consumer at 1,000 msg/s with work waiting that
// spends 2 ms on each message falls at least 1 ms further behind its
// capacity's schedule with each one (a busy machine only adds to it).
func TestPacerBehind(t *testing.T) {
	var worst time.Duration
	p := &pacer{capacity: func(time.Time) float64 { return 1000 },
		behind: func(_ time.Time, late time.Duration) { worst = max(worst, late) }}
	for range 100 {
		if err := p.take(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the message's work, beyond its 1 ms
		p.queued = true
	}
	if worst < 98*time.Millisecond {
		t.Errorf("100 messages of 2 ms at 1,000 msg/s, each waiting: at worst %v behind, want at least 98ms", worst)
	}
}
