package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseStartPhase(t *testing.T) {
	for _, c := range []struct {
		in   string
		want StartPhase
		err  bool
	}{
		{"", StartPhase{}, false},
		{"random", StartPhase{Set: true, Random: true}, false},
		{"450ms", StartPhase{Set: true, At: 450 * time.Millisecond}, false},
		{"0s", StartPhase{Set: true}, false},
		{"-1s", StartPhase{}, true},
		{"soon", StartPhase{}, true},
	} {
		got, err := ParseStartPhase(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseStartPhase(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.err)
		}
		if err == nil && got.String() != strings.TrimSpace(c.in) && c.in != "0s" {
			t.Errorf("ParseStartPhase(%q).String() = %q", c.in, got.String())
		}
	}
}

func TestStartPhasePick(t *testing.T) {
	iv := time.Second
	if got := (StartPhase{}).pick(iv); got != -1 {
		t.Errorf("unset: %v, want -1", got)
	}
	if got := (StartPhase{Set: true, At: 2450 * time.Millisecond}).pick(iv); got != 450*time.Millisecond {
		t.Errorf("2.45s at 1s: %v, want 450ms (modulo the interval)", got)
	}
	seen := map[bool]bool{}
	for range 200 {
		got := (StartPhase{Set: true, Random: true}).pick(iv)
		if got < 0 || got >= iv {
			t.Fatalf("random: %v, outside [0, %v)", got, iv)
		}
		seen[got < iv/2] = true
	}
	if len(seen) != 2 {
		t.Errorf("random: 200 draws all in one half of the interval")
	}
}

func TestPhaseWait(t *testing.T) {
	last := time.Unix(100, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		now, phase, want time.Duration // now after last
	}{
		{ms(10), ms(450), ms(440)},   // this cycle's phase is ahead
		{ms(500), ms(450), ms(950)},  // passed: the next cycle's
		{ms(440), ms(450), ms(1010)}, // 10 ms ahead, under minPhaseWait: the next cycle's
		{ms(2300), ms(100), ms(800)}, // cycles missed since last: 3.1 s
		{ms(0), 0, ms(1000)},         // at a cycle: the next one
	} {
		if got := phaseWait(last, time.Second, c.phase, last.Add(c.now)); got != c.want {
			t.Errorf("now +%v, phase %v: wait %v, want %v", c.now, c.phase, got, c.want)
		}
	}
}

func TestCommitPhase(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cycles := []time.Duration{ms(2000), 0, ms(1000), ms(3000)} // unsorted on purpose
	for _, c := range []struct {
		name    string
		commits [][]time.Duration
		want    time.Duration
	}{
		{"none", nil, -1},
		{"before every cycle", [][]time.Duration{{-ms(5)}}, -1},
		{"one committer", [][]time.Duration{{ms(120), ms(1130), ms(2110)}}, ms(120)},
		{"at a cycle", [][]time.Duration{{ms(1000)}}, 0},
		{"two committers, upper median", [][]time.Duration{{ms(120)}, {ms(2300)}}, ms(300)},
	} {
		if got := CommitPhase(c.commits, cycles); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := CommitPhase([][]time.Duration{{ms(120)}}, nil); got != -1 {
		t.Errorf("no cycles: %v, want -1", got)
	}
}

func TestCommitWordsPhase(t *testing.T) {
	r := Result{CommitGap: 5 * time.Second, CommitMeasured: true, Phase: RunPhase{Commit: 120 * time.Millisecond, CommitKnown: true}}
	if got, want := commitWords(r)+timerWords(r), "C 5.00s measured, commits 0.12s after a reading"; got != want {
		t.Errorf("commitWords + timerWords = %q, want %q", got, want)
	}
	r.Phase.Start, r.Phase.StartSet = 450*time.Millisecond, true
	if got, want := commitWords(r)+timerWords(r), "C 5.00s measured, commits 0.12s after a reading (consumer started 0.45s after one, --phase)"; got != want {
		t.Errorf("commitWords + timerWords = %q, want %q", got, want)
	}
	if got, want := commitWords(r), "C 5.00s measured"; got != want {
		t.Errorf("commitWords = %q, want %q (the phase only in the table's column, not the bound's formula)", got, want)
	}
}

func TestTimerWordsFrequentCommits(t *testing.T) {
	r := Result{Row: Row{Interval: time.Second}, CommitGap: 70 * time.Millisecond, CommitMeasured: true,
		Phase: RunPhase{Commit: 200 * time.Millisecond, CommitKnown: true}}
	if got := timerWords(r); got != "" {
		t.Errorf("commits 70 ms apart, read every 1 s: %q, want no phase (their median says nothing)", got)
	}
	r.Phase.Start, r.Phase.StartSet = 450*time.Millisecond, true
	if got, want := timerWords(r), " (consumer started 0.45s after one, --phase)"; got != want {
		t.Errorf("commits 70 ms apart, --phase: %q, want %q", got, want)
	}
	r.CommitGap = 5 * time.Second
	if got, want := timerWords(r), ", commits 0.20s after a reading (consumer started 0.45s after one, --phase)"; got != want {
		t.Errorf("commits 5 s apart: %q, want %q", got, want)
	}
}

// TestCellPhaseOneDraw: --phase random draws once a cell, so its naive
// and lagbridge runs start at the same phase; a row of a shorter
// interval sharing the naive run takes it modulo its interval.
func TestCellPhaseOneDraw(t *testing.T) {
	random := StartPhase{Set: true, Random: true}
	for i := 0; i < 50; i++ {
		phases := map[string]time.Duration{}
		a := cellPhase(phases, "k@5", random, time.Second)
		b := cellPhase(phases, "k@5", random, time.Second)
		if a != b || a < 0 || a >= time.Second {
			t.Fatalf("naive %v, lagbridge %v: want one draw in [0, 1s)", a, b)
		}
		if c := cellPhase(phases, "k@5", random, 250*time.Millisecond); c != a%(250*time.Millisecond) {
			t.Fatalf("250ms row sharing the naive run: %v, want %v", c, a%(250*time.Millisecond))
		}
	}
	if got := cellPhase(map[string]time.Duration{}, "k@5", StartPhase{}, time.Second); got >= 0 {
		t.Fatalf("no --phase: %v, want negative (at once)", got)
	}
}
