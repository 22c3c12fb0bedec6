package bench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFullMatrix(t *testing.T) {
	m := FullMatrix()
	seen := map[string]bool{}
	for _, r := range m {
		if errs := r.validate(); len(errs) > 0 {
			t.Errorf("%s: %v", r.Name(), errs)
		}
		if seen[r.Name()] {
			t.Errorf("%s twice", r.Name())
		}
		seen[r.Name()] = true
		// Every name reads back as the same row (Star aside).
		back, err := ParseRow(r.Name())
		back.Star = r.Star
		if err != nil || back != r {
			t.Errorf("ParseRow(%q) = %+v, %v", r.Name(), back, err)
		}
	}
	// What issue 12 asks the matrix to hold.
	for _, name := range []string{
		"kafka/autocommit-5s/sync/1s", "kafka/autocommit-5s-java/sync/1s", "kafka/autocommit-1s/sync/1s", "kafka/commit-per-poll/sync/250ms",
		"kafka/guard/sync/1s", "kafka/hook/sync/250ms", "kafka/marks-20ms/sync/250ms",
		"kafka/guard/async/1s", "kafka/guard/batch/1s",
		"nats/ack-each/sync/1s", "nats/ack-batch/sync/250ms",
		"kafka/autocommit-5s/sync/1s+abandoned", "nats/ack-each/sync/1s+abandoned", "kafka/autocommit-5s/sync/1s+no-commit-yet",
	} {
		if !seen[name] {
			t.Errorf("%s is not in the matrix", name)
		}
	}
	// Every short row is a full row.
	for _, r := range ShortMatrix() {
		if !slices.Contains(m, r) {
			t.Errorf("short row %s is not in the full matrix", r.Name())
		}
	}
}

func TestSelectRows(t *testing.T) {
	m := FullMatrix()
	names := func(rs []Row) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name())
		}
		return out
	}
	cases := []struct {
		name     string
		patterns []string
		want     []string
	}{
		// A glob on the whole name.
		{"glob", []string{"kafka/guard/*/1s"}, []string{"kafka/guard/sync/1s", "kafka/guard/async/1s", "kafka/guard/batch/1s"}},
		// A glob on the first parts (the --rows help's example) and on
		// the last ones: "*" stops at a slash.
		{"prefix glob", []string{"kafka/guard/*"}, []string{"kafka/guard/sync/1s", "kafka/guard/sync/250ms", "kafka/guard/async/1s", "kafka/guard/batch/1s"}},
		{"suffix glob", []string{"nats/*/*/250ms"}, []string{"nats/ack-each/sync/250ms", "nats/ack-batch/sync/250ms"}},
		{"middle glob", []string{"autocommit-5s*/sync"}, []string{"kafka/autocommit-5s/sync/1s", "kafka/autocommit-5s-java/sync/1s", "kafka/autocommit-5s/sync/250ms", "kafka/autocommit-5s/sync/1s+abandoned", "kafka/autocommit-5s/sync/1s+no-commit-yet"}},
		// A plain word matches as a substring.
		{"substring", []string{"abandoned"}, []string{"kafka/autocommit-5s/sync/1s+abandoned", "nats/ack-each/sync/1s+abandoned"}},
		// Two patterns: the union, in the matrix's order.
		{"union", []string{"nats/ack-batch/sync/1s", "kafka/hook/sync/1s"}, []string{"kafka/hook/sync/1s", "nats/ack-batch/sync/1s"}},
		// Nothing matches.
		{"none", []string{"rabbit*"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := SelectRows(m, c.patterns)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(got), c.want) {
				t.Errorf("got %v, want %v", names(got), c.want)
			}
		})
	}
	if _, err := SelectRows(m, []string{"[kafka"}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("bad glob: %v", err)
	}
	if got, _ := SelectRows(m, nil); len(got) != len(m) {
		t.Errorf("no pattern kept %d of %d rows", len(got), len(m))
	}
}

func TestParseRowErrors(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		// Too few parts.
		{"parts", "kafka/guard/sync", "BROKER/CONSUMER/PRODUCER/INTERVAL"},
		// An interval that is no duration.
		{"interval", "kafka/guard/sync/soon", "interval"},
		// A NATS consumer on Kafka.
		{"mixed", "kafka/ack-each/sync/1s", "ack-each is a NATS consumer"},
		// An unknown extra.
		{"extra", "kafka/guard/sync/1s+chaos", `unknown extra "chaos"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRow(c.in)
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestRowNaiveSide(t *testing.T) {
	g1 := Row{Broker: BrokerKafka, Consumer: Guard, Producer: Sync, Interval: time.Second}
	g250 := Row{Broker: BrokerKafka, Consumer: Guard, Producer: Sync, Interval: 250 * time.Millisecond}
	cpp := Row{Broker: BrokerKafka, Consumer: CommitPerPoll, Producer: Sync, Interval: time.Second}
	hook := Row{Broker: BrokerKafka, Consumer: Hook, Producer: Sync, Interval: time.Second}
	auto := Row{Broker: BrokerKafka, Consumer: AutoCommit5s, Producer: Sync, Interval: 250 * time.Millisecond}
	async := Row{Broker: BrokerKafka, Consumer: Guard, Producer: Async, Interval: time.Second}
	// The guard's and the hook's naive sides are the consumers they ride
	// on, whatever the interval; the producer still tells them apart.
	if g1.naiveKey() != g250.naiveKey() || g1.naiveKey() != cpp.naiveKey() || hook.naiveKey() != auto.naiveKey() {
		t.Errorf("keys: %s %s %s / %s %s", g1.naiveKey(), g250.naiveKey(), cpp.naiveKey(), hook.naiveKey(), auto.naiveKey())
	}
	if g1.naiveKey() == async.naiveKey() || g1.naiveKey() == auto.naiveKey() {
		t.Errorf("different naive runs share a key: %s", g1.naiveKey())
	}
	// A row whose drop comes before the first commit.
	nc := Row{Extra: NoCommitYet}.scenario(DefaultScenario())
	if nc.DropAt() != time.Second || nc.RecoverAt() != 21*time.Second {
		t.Errorf("no-commit-yet scenario: drop %v restore %v", nc.DropAt(), nc.RecoverAt())
	}
}

func TestExcessAfterDrop(t *testing.T) {
	cases := []struct {
		name  string
		acked []int64
		want  float64
	}{
		// The doc's example: bins of 1s from the drop (bin 0), 400 msg/s
		// after it; 1,000 a second for three seconds then 100.
		{"blind three seconds", []int64{1000, 1000, 1000, 100, 100}, 1800},
		// Never more than the capacity: no excess.
		{"within", []int64{400, 300, 400}, 0},
		// A late burst counts as much as an early one.
		{"late", []int64{0, 0, 1600}, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ExcessAfterDrop(c.acked, time.Second, 0, len(c.acked), 400); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
	// Bins outside [drop, restore) do not count.
	if got := ExcessAfterDrop([]int64{5000, 400, 400, 5000}, time.Second, 1, 3, 400); got != 0 {
		t.Errorf("outside the slow phase: %v", got)
	}
}

func TestExcessBound(t *testing.T) {
	cases := []struct {
		name           string
		before, after  float64
		commit, period time.Duration
		want           float64
	}{
		// The doc's example: (800 - 400) x (5s + 1s).
		{"autocommit 5s at 1s", 800, 400, 5 * time.Second, time.Second, 2400},
		// Commit per poll at 250ms: one observation interval.
		{"per poll", 2000, 400, 0, 250 * time.Millisecond, 400},
		// Admitting no more than the new capacity leaves nothing to bound.
		{"no excess", 400, 400, 5 * time.Second, time.Second, 0},
		// An unknown rate before the drop bounds nothing.
		{"unknown", math.NaN(), 400, time.Second, time.Second, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ExcessBound(c.before, c.after, c.commit, c.period); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestCommitGapAt(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	from, to, end := 10*time.Second, 11*time.Second, 30*time.Second
	cases := []struct {
		name    string
		commits [][]time.Duration
		want    time.Duration
	}{
		// The doc's example: the poll in hand at the drop, 500 records
		// at 400 msg/s, committed 1.25 s after the commit that began it.
		{"poll in hand", [][]time.Duration{ms(9_900, 9_960, 10_020, 11_270, 11_300)}, 1250 * time.Millisecond},
		// The gap in force at the drop counts whole, from its commit
		// before the drop.
		{"straddles the drop", [][]time.Duration{ms(9_000, 9_400, 10_600, 10_700, 11_100, 11_200)}, 1200 * time.Millisecond},
		// A gap that starts after the window is the excess's own poll.
		{"starts after the window", [][]time.Duration{ms(9_950, 10_050, 10_950, 11_050, 14_050)}, 900 * time.Millisecond},
		// A gap that ends before the drop does not count.
		{"ends before the drop", [][]time.Duration{ms(5_000, 9_990, 10_010, 10_500, 11_000, 11_100)}, 500 * time.Millisecond},
		// No commit after 10.5 s: invisible until the end.
		{"still open", [][]time.Duration{ms(9_990, 10_500)}, 19_500 * time.Millisecond},
		// No commit before the drop: the gap starts with the run.
		{"first commit after the drop", [][]time.Duration{ms(10_200, 10_300, 11_100, 11_200)}, 10_200 * time.Millisecond},
		// Members commit their own partitions: the longest member's gap,
		// not the gaps between the members' commits together.
		{"members", [][]time.Duration{ms(9_990, 10_010, 10_030, 11_050), ms(9_995, 11_495, 11_500)}, 1500 * time.Millisecond},
		// A member that never committed counts as one never recorded,
		// whichever its index.
		{"member without commits first", [][]time.Duration{nil, ms(9_990, 10_010, 10_500, 11_200, 30_000)}, 700 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CommitGapAt(c.commits, from, to, end); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestAnalyzeMeasuredCommitGap(t *testing.T) {
	scn := testScenario() // the drop at 1 s, the restore at 3 s
	c := func(v int64) func(int) int64 { return func(int) int64 { return v } }
	s := series(c(50), c(50), c(50), c(0), func(int) float64 { return 0 })
	// A poll in hand from 0.9 s to 1.6 s, then commits every 100 ms.
	s.Commits = [][]time.Duration{{800 * time.Millisecond, 900 * time.Millisecond, 1600 * time.Millisecond, 1700 * time.Millisecond}}
	// 500 msg/s admitted before the drop, 100 after: (500 - 100) x
	// (0.7 s + 0.25 s) = 380.
	r := Analyze(scn, testRow, "k", ModeLagbridge, 5, s, Totals{})
	if r.CommitGap != 700*time.Millisecond || !r.CommitMeasured || math.Abs(r.Bound-380) > 1e-6 {
		t.Errorf("commit per poll: gap %v (measured %v), bound %v; want 700ms measured, 380", r.CommitGap, r.CommitMeasured, r.Bound)
	}
	// A poll that begins after the drop holds what was admitted after it:
	// its gap is not the commit interval (the one in force at the drop,
	// 0.95 s to 1.05 s, is): (500 - 100) x (0.1 s + 0.25 s) = 140.
	s.Commits = [][]time.Duration{{900 * time.Millisecond, 950 * time.Millisecond, 1050 * time.Millisecond, 1750 * time.Millisecond, 1800 * time.Millisecond}}
	r = Analyze(scn, testRow, "k", ModeLagbridge, 5, s, Totals{})
	if r.CommitGap != 100*time.Millisecond || math.Abs(r.Bound-140) > 1e-6 {
		t.Errorf("poll after the drop: gap %v, bound %v; want 100ms, 140", r.CommitGap, r.Bound)
	}
	// A consumer on franz-go's autocommit timer keeps its setting.
	row := testRow
	row.Consumer = AutoCommit1s
	r = Analyze(scn, row, "k", ModeLagbridge, 5, s, Totals{})
	if r.CommitGap != time.Second || r.CommitMeasured || math.Abs(r.Bound-500) > 1e-6 {
		t.Errorf("autocommit 1s: gap %v (measured %v), bound %v; want 1s set, 500", r.CommitGap, r.CommitMeasured, r.Bound)
	}
}

func TestFalseThrottle(t *testing.T) {
	scn := testScenario() // 1,000 msg/s for 1s, 100 msg/s for 2s, 1,000 msg/s for 1s
	bin := 100 * time.Millisecond
	per := func(v int64) []int64 {
		out := make([]int64, 40)
		for i := range out {
			out[i] = v
		}
		return out
	}
	cases := []struct {
		name               string
		processed, refused []int64
		want               []int
	}{
		// Refused while processing 500 of 1,000 (first and last second)
		// and 50 of 100 (the slow seconds): every second.
		{"idle throughout", per(5), per(1), []int{0, 1, 2, 3}},
		// Busy at capacity in every second: refusals are fair.
		{"busy", func() []int64 {
			p := per(100)
			for i := 10; i < 30; i++ {
				p[i] = 10
			}
			return p
		}(), per(1), nil},
		// Idle but nobody refused.
		{"idle, no refusal", per(0), per(0), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FalseThrottle(scn, bin, c.processed, c.refused); !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestMachineHeld: of the false-throttle seconds, those in which the
// consumer's lateness behind its capacity (work waiting) grew by the
// shortfall are the machine's; a consumer that ran dry restarts its
// lateness and shows none.
func TestMachineHeld(t *testing.T) {
	scn := testScenario() // 1,000 msg/s for 1s, 100 msg/s for 2s, 1,000 msg/s for 1s
	bin := 100 * time.Millisecond
	processed := make([]int64, 40)
	for i := range processed {
		processed[i] = 80 // 800 of 1,000
	}
	for i := 10; i < 30; i++ {
		processed[i] = 8 // 80 of 100
	}
	for i := 30; i < 40; i++ {
		processed[i] = 50 // 500 of 1,000
	}
	ramp := func(from, to float64) func(i int) float64 { // over bins 0-9 of a second
		return func(i int) float64 { return from + (to-from)*float64(i+1)/10 }
	}
	cases := []struct {
		name   string
		behind func(i int) float64 // bin i's lateness; nil: not measured
		want   []int
	}{
		// Second 0 fell 0.2 s further behind: 800 + 0.2 x 1,000 >= 900.
		// Second 3 fell 0.1 s: 500 + 100 < 900, it idled too.
		{"held back", func(i int) float64 {
			switch {
			case i < 10:
				return ramp(0, 0.2)(i)
			case i < 30:
				return 0.2
			}
			return ramp(0.2, 0.3)(i - 30)
		}, []int{0}},
		// Second 0 fell 0.45 s behind (the machine's); second 2 0.05 s
		// more, 5 messages' worth of its 100 msg/s: 80 + 5 < 90, not
		// enough. Second 3's lateness fell from 0.5 s to 0.05 s (the
		// consumer ran dry): none of it the machine's.
		{"ran dry", func(i int) float64 {
			switch {
			case i < 10:
				return ramp(0, 0.45)(i)
			case i < 20:
				return 0.45
			case i < 30:
				return ramp(0.45, 0.5)(i - 20)
			}
			return 0.05
		}, []int{0}},
		{"not measured", nil, nil},
	}
	refused := make([]int64, 40)
	for i := range refused {
		refused[i] = 1
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var behind []float64
			if c.behind != nil {
				behind = make([]float64, 40)
				for i := range behind {
					behind[i] = c.behind(i)
				}
			}
			secs := FalseThrottle(scn, bin, processed, refused)
			if !slices.Equal(secs, []int{0, 1, 2, 3}) {
				t.Fatalf("false-throttle seconds %v", secs)
			}
			if got := MachineHeld(scn, bin, processed, behind, secs); !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestPhaseBounds(t *testing.T) {
	scn := DefaultScenario()
	cases := []struct {
		name  string
		row   Row
		after time.Duration
	}{
		// 5s commits observed every 1s: the after phase starts 6s after the restore.
		{"autocommit 5s", Row{Consumer: AutoCommit5s, Interval: time.Second}, 36 * time.Second},
		// Commit per poll at 250ms: one observation interval after it.
		{"per poll", Row{Consumer: CommitPerPoll, Interval: 250 * time.Millisecond}, 30250 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := PhaseBounds(scn, c.row)
			if b[0] != [2]time.Duration{0, 10 * time.Second} || b[1] != [2]time.Duration{10 * time.Second, 30 * time.Second} ||
				b[2] != [2]time.Duration{c.after, 45 * time.Second} {
				t.Errorf("%v", b)
			}
		})
	}
	// A run too short for the after phase leaves it empty.
	if b := PhaseBounds(scn.Scaled(0.1), Row{Consumer: AutoCommit5s, Interval: time.Second}); b[2][0] != b[2][1] {
		t.Errorf("short run: %v", b[2])
	}
}

func TestTargetsCheck(t *testing.T) {
	tg := DefaultTargets(DefaultScenario())
	spare := Phase{Spare: true, AdmittedShare: 1}
	good := Result{Row: Row{Consumer: Guard}, GoodputShare: 0.98, DeadShare: 0, HeadAgeP99: time.Second, TrueHeadAgeP99: time.Second,
		Phases: [3]Phase{spare, {}, spare}}
	naive := Result{GoodputShare: 0.4, DeadShare: 0.5}
	cases := []struct {
		name  string
		lb    Result
		naive *Result
		want  []string // substrings, in order
	}{
		// Meets everything.
		{"meets", good, &naive, nil},
		// Worse than naive on both counts.
		{"worse than naive", func() Result { r := good; r.GoodputShare, r.DeadShare = 0.3, 0.6; return r }(), &naive,
			[]string{"goodput 30.0% < naive's 40.0%", "dead work 60.0% > naive's 50.0%", "goodput 30.0% < 95.0%", "dead work 60.0% > 1.0%"}},
		// False throttling: refused while idle, and a short admission where there was spare capacity.
		{"false throttle", func() Result {
			r := good
			r.FalseThrottleSeconds = 5
			r.Phases[0] = Phase{Name: "before", Spare: true, AdmittedShare: 1, FalseThrottleSeconds: 2}
			r.Phases[2] = Phase{Name: "after", Spare: true, AdmittedShare: 0.9, FalseThrottleSeconds: 3}
			return r
		}(), nil, []string{"2 false-throttle seconds before the drop", "3 false-throttle seconds after the restore", "admitted 90.0% of the offer after the restore"}},
		// The machine's seconds are judged, and said.
		{"false throttle, the machine's", func() Result {
			r := good
			r.FalseThrottleSeconds = 4
			r.Phases[2] = Phase{Name: "after", Spare: true, AdmittedShare: 1, FalseThrottleSeconds: 4, MachineSeconds: 3}
			return r
		}(), nil, []string{"4 false-throttle seconds after the restore (3 with the consumer held back by the machine, work waiting)"}},
		// False seconds in the slow phase and in the blind window after
		// the restore (before one commit + one observation interval) are
		// shown, not judged.
		{"false throttle outside the judged windows", func() Result {
			r := good
			r.FalseThrottleSeconds = 7
			r.Phases[1].FalseThrottleSeconds = 3
			r.Blind.FalseThrottleSeconds = 4
			return r
		}(), nil, nil},
		// The head age is judged on the bench's true measure: the
		// daemon's reading above the deadline (a hook's poll in hand)
		// is shown, not judged...
		{"daemon's head age over", func() Result { r := good; r.HeadAgeP99 = 3 * time.Second; return r }(), nil, nil},
		// ...and a true head age above it is a miss, whatever the daemon read.
		{"true head age over", func() Result { r := good; r.TrueHeadAgeP99 = 2100 * time.Millisecond; return r }(), nil,
			[]string{"true head age p99 2.10s > 2.00s"}},
		// Without spare capacity, admitting less is no false throttling.
		{"no spare", func() Result { r := good; r.Phases[0] = Phase{AdmittedShare: 0.5}; return r }(), nil, nil},
		// A commit-only row past 1.2x its bound; its goodput target does not apply.
		{"excess", Result{Row: Row{Consumer: AutoCommit5s}, GoodputShare: 0.5, Excess: 2500, Bound: 2000, Phases: [3]Phase{spare, {}, spare}}, nil,
			[]string{"excess after the drop 2,500 > 1.2x the bound 2,000"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := tg.Check(c.lb, c.naive)
			if len(got) != len(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			for i := range got {
				if !strings.Contains(got[i], c.want[i]) {
					t.Errorf("[%d] %q, want %q", i, got[i], c.want[i])
				}
			}
		})
	}
}

// TestTargetsTrueNever: a run without a single true head age reading
// misses the head age target (it was not measured), whatever the daemon
// read.
func TestTargetsTrueNever(t *testing.T) {
	tg := DefaultTargets(DefaultScenario())
	spare := Phase{Spare: true, AdmittedShare: 1}
	r := Result{Row: Row{Consumer: Guard}, GoodputShare: 0.98, HeadAgeP99: time.Second, TrueHeadAgeP99: Never,
		Phases: [3]Phase{spare, {}, spare}}
	if m := tg.Check(r, nil); len(m) != 1 {
		t.Errorf("misses %q, want the true head age's", m)
	}
}
