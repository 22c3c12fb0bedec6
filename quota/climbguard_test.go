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
		n, low := twoStallRun(t, seed, 20)
		refused, lowest = refused+n, min(lowest, low)
	}
	t.Logf("a second 2 s stall 20 s after the first, 5 runs: refused at %d caught-up observations after it, at %.0f/s at the lowest", refused, lowest)
	if refused > 5 || lowest < 1000 {
		t.Errorf("after a second stall in a new episode, producers refused at %d caught-up observations (5 runs), at %.0f/s at the lowest: want at most one a run, at 1,000/s or more", refused, lowest)
	}
}

// twoStallRun runs the plain hook consumer of TestControllerStallClimbBack
// at 1,500/s offered (observed every second with 10% jitter, seed), with
// a second 2 s stall gap seconds after the first ends, and returns the
// observations after the second that refused the producers while the
// consumer was caught up (head no older than 100 ms), and the lowest rate
// they allowed.
func twoStallRun(t *testing.T, seed uint64, gap float64) (int, float64) {
	t.Helper()
	const offer = 1500.0
	con := &slowConsumer{rate: 2000, maxPoll: 500, slowAt: 30 * 1500, slow: 2}
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{Interval: time.Second})
	rng := rand.New(rand.NewPCG(seed, 1))
	rate, at := math.Inf(1), leaseT0
	n, lowest, second, secondAt := 0, math.Inf(1), false, 0.0
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
			}
		}
		at = at.Add(time.Duration(dt * float64(time.Second)))
		s := con.state(at, dt)
		d := c.Step(s, p, at)
		rate = d.Rate
		if second && con.pos+con.hand > con.slowAt && s.HeadAge <= 100*time.Millisecond && !d.IsUnlimited() && d.Rate < 0.99*offer {
			n++
			lowest = min(lowest, d.Rate)
		}
	}
	return n, lowest
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
