package quota

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// climbPart is a caught-up partition as a consumer reported it at at.
func climbPart(id int32, pos int64, at time.Time) lag.PartitionState {
	return lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: id, End: pos, Reported: lag.Report{At: at, Position: pos}},
		Source: lag.SourceConsumer, Position: pos}
}

// TestClimbBackMembers: two members at 400/s each (800/s in all). Member
// B's report at the reading before was 2 s old (fresh enough: ReportFresh
// is 3 s); its report now is fresh, so its position moved 3 s of its work
// (1,200) in this 1 s interval, A's 1 s (400): the group consumed 1,600
// over dt, as lag/ computes ConsumeRateInstant. The climb back reads no
// more than the group does.
//
// Red before: the span was the newest report's, A's 1 s, for both:
// 1,500/s (the estimate before the fall) for a group of 800/s.
func TestClimbBackMembers(t *testing.T) {
	t1 := leaseT0
	t2 := t1.Add(time.Second)
	prev := handOf(&lag.State{Partitions: []lag.PartitionState{climbPart(0, 4600, t1), climbPart(1, 3800, t1.Add(-2*time.Second))}}, nil)
	tc := &control{fellFrom: 1500, capacity: 100, hand: prev}
	st := lag.State{At: t2, Source: lag.SourceConsumer, ConsumeRateInstant: 1600, RatesKnown: true,
		Partitions: []lag.PartitionState{climbPart(0, 5000, t2), climbPart(1, 5000, t2)}}
	v := reading{measured: true, dt: 1, headKnown: true}
	back := climbBack(tc, &st, &v)
	if back <= 0 || back > 800 {
		t.Errorf("a group of 800/s whose second member's report was 2 s old: climbBack read %.0f/s, want a climb of at most 800/s", back)
	}
}

// TestClimbBackParts: each of climbBack's safety parts, at the function,
// on a consumer caught up after a fall from 1,500/s with capacity 100/s
// read since: what it returns, and whether it spends the episode's climb.
// Each case is red with its part taken out (the review's mutants: no
// held subtraction, no cap at the estimate before the fall, no check of
// a missing count, the span taken as dt, no once-per-episode; and a
// partition with no report at the reading before taken as moved over dt).
func TestClimbBackParts(t *testing.T) {
	t1 := leaseT0
	t2 := t1.Add(time.Second)
	cases := []struct {
		name     string
		fellFrom float64
		spent    bool
		held     int64
		prevAt   time.Time // the report at the reading before (zero: none)
		consumed float64   // ConsumeRateInstant over dt 1 s
		want     float64
	}{
		{"what it drained, less what it held", 1500, false, 300, t1, 1000, 700},
		{"up to the estimate before the fall", 500, false, 0, t1, 1000, 500},
		{"no count at the reading before: none", 1500, false, -1, t1, 1000, 0},
		{"over the report's own span", 1500, false, 0, t1.Add(-time.Second), 1000, 500},
		{"once in an episode", 1500, true, 0, t1, 1000, 0},
		{"no higher than the capacity: none", 1500, false, 950, t1, 1000, 0},
		{"the partition not reported at the reading before: none", 1500, false, 0, time.Time{}, 1000, 0},
	}
	for _, c := range cases {
		tc := &control{fellFrom: c.fellFrom, fellSpent: c.spent, capacity: 100, hand: handMark{held: c.held, at: t1}}
		if !c.prevAt.IsZero() {
			tc.hand.parts = []partMark{{0, c.prevAt, 0}}
		}
		st := lag.State{At: t2, Source: lag.SourceConsumer, ConsumeRateInstant: c.consumed, RatesKnown: true,
			Partitions: []lag.PartitionState{climbPart(0, int64(c.consumed), t2)}}
		v := reading{measured: true, dt: 1, headKnown: true}
		got := climbBack(tc, &st, &v)
		if got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: climbBack = %.1f/s, want %.1f/s", c.name, got, c.want)
		}
		if spent := c.spent || c.want > 0; tc.fellSpent != spent {
			t.Errorf("%s: fellSpent %v after, want %v", c.name, tc.fellSpent, spent)
		}
		if c.want > 0 {
			if again := climbBack(tc, &st, &v); again != 0 {
				t.Errorf("%s: a second catch-up in the same episode climbed back to %.0f/s, want none", c.name, again)
			}
		}
	}
}

// TestControllerStallTwiceClimbBack: the 2 s stall of
// TestControllerStallClimbBack (plain hook), then a second one gap
// seconds after the first ended, 5 runs each. 20 s after, the target has
// been unlimited again (the episode ended): the second stall climbs back
// as the first did, refused at one caught-up observation a run at most.
//
// Red with no episode reset (fellFrom and fellSpent kept once the
// target is unlimited): the second stall climbed by the probe from the
// drain's rate, refused at many caught-up observations.
func TestControllerStallTwiceClimbBack(t *testing.T) {
	refused, lowest := 0, math.Inf(1)
	for seed := uint64(1); seed <= 5; seed++ {
		r := twoStallRun(t, &slowConsumer{rate: 2000, maxPoll: 500, slowAt: 30 * 1500, slow: 2}, seed, 20, 0)
		refused, lowest = refused+r.refusedCaught, min(lowest, r.lowest)
	}
	t.Logf("a second 2 s stall 20 s after the first, 5 runs: refused at %d caught-up observations after it, at %.0f/s at the lowest", refused, lowest)
	if refused > 5 || lowest < 1000 {
		t.Errorf("after a second stall in a new episode, producers refused at %d caught-up observations (5 runs), at %.0f/s at the lowest: want at most one a run, at 1,000/s or more", refused, lowest)
	}
}

// twoStallRun runs con (a consumer of TestControllerStallClimbBack) at
// 1,500/s offered, observed every second with 10% jitter (seed), with a
// second 2 s stall gap seconds after the first ends (from which on it
// works at after msg/s, if not 0), and returns what the observations
// after the second saw (see slowRun).
func twoStallRun(t *testing.T, con *slowConsumer, seed uint64, gap, after float64) slowRun {
	t.Helper()
	const offer = 1500.0
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{Interval: time.Second})
	rng := rand.New(rand.NewPCG(seed, 1))
	rate, at := math.Inf(1), leaseT0
	r := slowRun{lowest: math.Inf(1)}
	second, secondAt := false, 0.0
	for el := 0.0; el < 80; {
		dt := 0.9 + 0.2*rng.Float64()
		el += dt
		con.run(dt, min(offer, rate))
		if !second && con.slow <= 0 {
			if secondAt == 0 {
				secondAt = el + gap
			}
			if el >= secondAt {
				second, con.slowAt, con.slow = true, len(con.written)+10, 2
				con.after = after
			}
		}
		at = at.Add(time.Duration(dt * float64(time.Second)))
		s := con.state(at, dt)
		d := c.Step(s, p, at)
		rate = d.Rate
		if second && con.pos+con.hand > con.slowAt {
			r.see(con, &s, &d, p.MaxAge, offer)
		}
	}
	return r
}

// TestControllerStallTwiceClose: two 2 s stalls 4 s and 6 s apart, close
// enough to fall in one limited episode in most runs, plain hook,
// guard and NATS consumer, 10 runs each. Once the first climbed back and
// the consumer kept that estimate caught up for two readings, a second
// fall climbs back too (rearmClimb): after the second stall producers
// are refused at most at one caught-up observation a run, at 1,000/s or
// more. Into a drop to 400/s at the second stall, the capacity read once
// caught up stays near 400/s (up to 640/s: the plain hook's polls of 500
// read up to 611/s after one stall).
//
// Red before (the climb back once per episode): the second stall climbed
// by the probe from the drain while the consumer sat caught up. 4 s
// apart, refused at 65 (plain), 6 (guard) and 6 (NATS) caught-up
// observations over the 10 runs, down to 7/s, 881/s and 880/s; 6 s
// apart, 10, 4 and 2, down to 953/s (plain). Now 5, 0 and 0 (4 s) and 5,
// 0 and 0 (6 s), at 1,138/s at the lowest.
func TestControllerStallTwiceClose(t *testing.T) {
	modes := []struct {
		name        string
		guard, nats bool
	}{{"plain", false, false}, {"guard", true, false}, {"nats", false, true}}
	for _, m := range modes {
		for _, gap := range []float64{4, 6} {
			mk := func() *slowConsumer {
				return &slowConsumer{rate: 2000, maxPoll: 500, guard: m.guard, nats: m.nats, slowAt: 30 * 1500, slow: 2}
			}
			refused, lowest, maxCap := 0, math.Inf(1), 0.0
			for seed := uint64(1); seed <= 10; seed++ {
				r := twoStallRun(t, mk(), seed, gap, 0)
				refused, lowest = refused+r.refusedCaught, min(lowest, r.lowest)
				d := twoStallRun(t, mk(), seed, gap, 400)
				if d.maxCap == 0 {
					t.Errorf("%s %.0f s apart seed %d: never caught up after the second stall into a drop", m.name, gap, seed)
				}
				maxCap = max(maxCap, d.maxCap)
			}
			t.Logf("%s, two stalls %.0f s apart, 10 runs: refused at %d caught-up observations after the second, at %.0f/s at the lowest; into a drop to 400/s, %.0f/s read at the highest", m.name, gap, refused, lowest, maxCap)
			if refused > 10 || lowest < 1000 {
				t.Errorf("%s, two stalls %.0f s apart: refused at %d caught-up observations after the second (10 runs), at %.0f/s at the lowest: want at most one a run, at 1,000/s or more", m.name, gap, refused, lowest)
			}
			if maxCap > 640 {
				t.Errorf("%s, two stalls %.0f s apart, the second into a drop to 400/s: capacity read %.0f/s once caught up, want at most 640/s", m.name, gap, maxCap)
			}
		}
	}
}

// TestControllerStallLongClimbBack: TestControllerStallClimbBack's
// consumer with a stall of 3 s, 10 runs each (plain hook and the guard).
// The backlog takes two readings to drain: the first, not caught up,
// reads the drain; the second, caught up, the little that was left. Once
// caught up, producers are refused at most at one observation a run, at
// a third of their offer or more.
//
// Red before: climbBack read the caught-up reading alone (6/s), spent the
// episode's climb on it, and the probe climbed from there: refused at 22
// (plain) and 22 (guard) caught-up observations over 10 runs, down to
// 7/s. Now 9 and 8, at 666/s and 826/s at the lowest.
func TestControllerStallLongClimbBack(t *testing.T) {
	for _, guard := range []bool{false, true} {
		refused, lowest := 0, math.Inf(1)
		for seed := uint64(1); seed <= 10; seed++ {
			con := &slowConsumer{rate: 2000, maxPoll: 500, guard: guard, slowAt: 30 * 1500, slow: 3}
			r := stallRun(t, con, seed)
			refused, lowest = refused+r.refusedCaught, min(lowest, r.lowest)
		}
		t.Logf("guard %v: a 3 s stall, 10 runs: refused at %d caught-up observations, at %.0f/s at the lowest", guard, refused, lowest)
		if refused > 10 || lowest < 500 {
			t.Errorf("guard %v: after a 3 s stall the consumer caught up, producers refused at %d observations while it was (10 runs), at %.0f/s at the lowest: want at most one a run, at 500/s or more", guard, refused, lowest)
		}
	}
}

// TestControllerStallLongThenDropSkips: the 3 s stall into a drop to
// 400/s, behind a ttl guard that skips what expired (older than MaxAge,
// uncounted as on Kafka). Its drain reading is mostly skips, its head
// within MaxAge: no capacity. In these seeds the catch-up reads 399-400/s
// (in seeds 2, 4-6, 8 and 9 a skip burst reads over 600/s on main too,
// the once-an-episode exposure; runs and skipped records there are the
// same with the drain reading).
//
// Red with the drain reading taken whatever its head: 1,502/s in each
// (the estimate before the fall), and 8.5% more records skipped over
// seeds 1-10.
func TestControllerStallLongThenDropSkips(t *testing.T) {
	for _, seed := range []uint64{1, 3, 7, 10} {
		con := &slowConsumer{rate: 2000, after: 400, maxPoll: 500, guard: true, skip: 2, slowAt: 30 * 1500, slow: 3}
		r := stallRun(t, con, seed)
		if r.maxCap == 0 {
			t.Errorf("seed %d: the consumer never caught up after the stall: nothing checked", seed)
		}
		if r.maxCap > 1.5*400 {
			t.Errorf("seed %d: a skipping guard after a 3 s stall into a drop to 400/s: capacity read %.0f/s once caught up, want at most 600/s", seed, r.maxCap)
		}
	}
}

// TestRearmClimb: what re-arms the climb back (rearmClimb). After a climb
// back to 1,500/s at t0, two measured readings of the consumer caught up
// that keep the estimate within a step re-arm it; the climb's own reading,
// one not measured, or one not caught up do not count; a reading below a
// step of it ends the trial for the episode.
func TestRearmClimb(t *testing.T) {
	t0 := leaseT0
	caught := reading{measured: true, headKnown: true, headAge: 0.05, engageWait: 1}
	behind := reading{measured: true, headKnown: true, headAge: 1.5, engageWait: 1, lag: 900}
	unmeasured := caught
	unmeasured.measured = false
	type step struct {
		v     reading
		cInst float64
	}
	cases := []struct {
		name  string
		steps []step
		armed bool
	}{
		{"two caught-up readings that keep it", []step{{caught, 1500}, {caught, 1450}}, true},
		{"one is not enough", []step{{caught, 1500}}, false},
		{"within a step", []step{{caught, 1400}, {caught, 1300}}, true},
		{"not measured, not caught up: not counted", []step{{caught, 1500}, {unmeasured, 1500}, {behind, 1500}}, false},
		{"below a step ends the trial", []step{{caught, 1500}, {behind, 400}, {caught, 1500}, {caught, 1500}}, false},
	}
	for _, c := range cases {
		tc := &control{fellFrom: 1600, fellSpent: true, climbTo: 1500, climbAt: t0}
		// The climb's own reading does not count.
		rearmClimb(tc, &lag.State{At: t0}, &caught, 1500, 0.25)
		for i, s := range c.steps {
			rearmClimb(tc, &lag.State{At: t0.Add(time.Duration(i+1) * time.Second)}, &s.v, s.cInst, 0.25)
		}
		if armed := !tc.fellSpent && tc.fellFrom == 0; armed != c.armed {
			t.Errorf("%s: re-armed %v (fellFrom %.0f, spent %v), want %v", c.name, armed, tc.fellFrom, tc.fellSpent, c.armed)
		}
	}
}
