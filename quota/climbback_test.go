package quota

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// slowConsumer is a hook consumer as consumerclient reports it, with the
// records held (lag.Report.Held, HeldFor) and exact head ages: it polls
// what is there (at most maxPoll records) and works through them at rate
// msg/s. The plain hook finishes a poll's records at its next poll (they
// are in hand until then); behind the ttl guard (guard) it finishes each
// as it goes. The record at offset slowAt takes slow seconds; from then
// on the consumer works at after msg/s (0: rate). With skip > 0 (the
// guard), a record older than skip seconds when its turn comes is
// finished at no cost (expired: committed past unprocessed). A NATS
// consumer through consumerclient.NATSReporter.Wrap (nats) is the guard's
// with one message in hand at a time: it reports holding 1 (or nothing,
// noCount: the reporter before it counted).
type slowConsumer struct {
	rate, after   float64
	maxPoll       int
	guard         bool
	nats, noCount bool
	skip          float64
	slowAt        int
	slow          float64

	producedLog
	pos     int     // first record of the poll in hand
	hand    int     // records in hand
	done    float64 // of them finished
	pollAt  float64 // when the poll was taken
	finAt   float64 // when a record was last finished
	lastPos int
	lastEnd int
	skipped int // records skipped as expired
}

// run advances the consumer by d seconds, the producers writing at
// produce msg/s.
func (c *slowConsumer) run(d, produce float64) {
	const tick = 0.001
	for t := 0.0; t < d-1e-9; t += tick {
		c.tick(tick, produce)
		if c.done >= float64(c.hand) {
			c.pos += c.hand
			c.hand, c.done, c.pollAt = min(len(c.written)-c.pos, c.maxPoll), 0, c.now
			continue
		}
		for c.skip > 0 && c.done < float64(c.hand) && c.pos+int(c.done) != c.slowAt && c.now-c.written[c.pos+int(c.done)] > c.skip {
			c.done, c.finAt = math.Floor(c.done)+1, c.now
			c.skipped++
		}
		next := c.done + c.rate*tick
		if c.slow > 0 && c.slowAt < c.pos+c.hand && c.pos+int(next) > c.slowAt {
			// At the slow record: those before it are finished.
			if c.pos+int(c.done) < c.slowAt {
				c.done, c.finAt = float64(c.slowAt-c.pos), c.now
			}
			if c.slow -= tick; c.slow <= 0 {
				c.done, c.finAt = c.done+1, c.now
				if c.after > 0 {
					c.rate = c.after
				}
			}
			continue
		}
		if int(next) > int(c.done) {
			c.finAt = c.now
		}
		c.done = next
	}
}

// state is what the daemon reads of the consumer at, dt after the
// observation before.
func (c *slowConsumer) state(at time.Time, dt float64) lag.State {
	end := len(c.written)
	pos, held, heldFor := c.pos, c.hand, c.now-c.pollAt
	if c.guard || c.nats {
		fin := min(int(c.done), c.hand)
		pos, held, heldFor = c.pos+fin, c.hand-fin, c.now-max(c.pollAt, c.finAt)
	}
	if c.nats && held > 0 {
		held = 1
	}
	rep := lag.Report{At: at, Position: int64(pos)}
	var age time.Duration
	if held > 0 {
		age = time.Duration((c.now - c.written[pos]) * float64(time.Second))
		if !c.noCount {
			rep.Held, rep.HeldFor = int64(held), time.Duration(heldFor*float64(time.Second))
		}
	}
	s := reportedState(rep, end, c.lastPos, c.lastEnd, age, held > 0, dt)
	c.lastPos, c.lastEnd = pos, end
	return s
}

// producedLog is what the producers of a simulated consumer wrote: when, in
// seconds, each record (by offset) was written.
type producedLog struct {
	now     float64
	written []float64
	endF    float64
}

// tick advances the time by dt seconds, the producers writing at produce
// msg/s.
func (w *producedLog) tick(dt, produce float64) {
	w.now += dt
	w.endF += produce * dt
	for len(w.written) < int(w.endF) {
		w.written = append(w.written, w.now)
	}
}

// reportedState is the daemon's state of one partition whose position
// comes from the consumer's report rep (in hand, its head age old, when
// inHand), the end at end, dt after a reading at lastPos and lastEnd.
func reportedState(rep lag.Report, end, lastPos, lastEnd int, age time.Duration, inHand bool, dt float64) lag.State {
	pos := int(rep.Position)
	lagN := int64(end - pos)
	s := lag.State{Target: ordersK, At: rep.At, Status: lag.StatusOK, Lag: lagN, HeadAgeKnown: true,
		ConsumeRateInstant: float64(pos-lastPos) / dt, ProduceRateInstant: float64(end-lastEnd) / dt,
		RatesKnown: true, Members: 1, Source: lag.SourceConsumer}
	if inHand {
		s.HeadAge = age
		rep.HeadTime = rep.At.Add(-age)
	}
	s.Partitions = []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: int64(end), Lag: lagN, Reported: rep},
		Source: lag.SourceConsumer, Position: int64(pos)}}
	s.ConsumeRate, s.ProduceRate = s.ConsumeRateInstant, s.ProduceRateInstant
	return s
}

// slowRun is what a run of stallRun saw from the slow record on.
type slowRun struct {
	// refusedCaught counts the observations that refused the producers
	// (a rate below the offer) while the consumer was caught up: its
	// head no older than 100 ms; lowest is the lowest rate they allowed.
	refusedCaught int
	lowest        float64
	// maxCap is the highest capacity the decisions read once the
	// consumer had caught up after the stall, msg/s.
	maxCap float64
	// over counts those readings whose capacity was above 600/s.
	over int
	// late counts the observations whose head was past MaxAge.
	late int
	// caught: the consumer has caught up after the stall.
	caught bool
}

// see counts what an observation of con after its slow record shows
// (offer: the producers' rate).
func (r *slowRun) see(con *slowConsumer, s *lag.State, d *Decision, maxAge time.Duration, offer float64) {
	fresh := s.HeadAge <= 100*time.Millisecond
	if s.HeadAge > maxAge {
		r.late++
	}
	if fresh && !d.IsUnlimited() && d.Rate < 0.99*offer {
		r.refusedCaught++
		r.lowest = min(r.lowest, d.Rate)
	}
	r.caught = r.caught || fresh && con.slow <= 0
	if r.caught {
		r.maxCap = max(r.maxCap, d.Capacity)
		if d.Capacity > 600 {
			r.over++
		}
	}
}

// stallRun runs con at 1,500/s offered, observed every second with 10%
// jitter (seed), for 30 s before its slow record and 30 s after.
func stallRun(t *testing.T, con *slowConsumer, seed uint64) slowRun {
	t.Helper()
	const offer = 1500.0
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{Interval: time.Second})
	rng := rand.New(rand.NewPCG(seed, 1))
	rate, at := math.Inf(1), leaseT0
	r := slowRun{lowest: math.Inf(1)}
	for el := 0.0; el < 60; {
		dt := 0.9 + 0.2*rng.Float64()
		el += dt
		con.run(dt, min(offer, rate))
		at = at.Add(time.Duration(dt * float64(time.Second)))
		s := con.state(at, dt)
		d := c.Step(s, p, at)
		rate = d.Rate
		if con.pos+con.hand > con.slowAt {
			r.see(con, &s, &d, p.MaxAge, offer)
		}
	}
	return r
}

// TestControllerStallClimbBack: a hook consumer of 2,000/s keeping up with
// 1,500/s offered, polls of at most 500, reporting the records it holds,
// meets one record that takes 2 s (plain hook, and behind the ttl guard),
// 5 runs each. In the stall it is drained (its head passes MaxAge 2 s);
// it then drains the backlog within an interval and keeps up. Once caught
// up, the producers are refused at most at the first reading, by less
// than a third of their offer: what it drained in that interval is all
// that shows its capacity (949/s of a backlog of 996 in one run).
//
// Red before: the stall read 2-12/s (the records held over the time held,
// or the one small poll its position moved by); a catch-up after a head
// past MaxAge was held as a skip burst, and one spread over the stall
// read the stall's share (485/s); the probe climbed x1.5 a reading from
// the drain's rate or that share while the consumer sat caught up:
// refused at 50 (plain) and 20 (guard) caught-up observations over the 5
// runs, down to 5/s.
func TestControllerStallClimbBack(t *testing.T) {
	for _, guard := range []bool{false, true} {
		refused, late, lowest := 0, 0, math.Inf(1)
		for seed := uint64(1); seed <= 5; seed++ {
			con := &slowConsumer{rate: 2000, maxPoll: 500, guard: guard, slowAt: 30 * 1500, slow: 2}
			r := stallRun(t, con, seed)
			refused, late, lowest = refused+r.refusedCaught, late+r.late, min(lowest, r.lowest)
		}
		t.Logf("guard %v: a 2 s stall, 5 runs: refused at %d caught-up observations, at %.0f/s at the lowest (head past MaxAge at %d)", guard, refused, lowest, late)
		if late == 0 {
			t.Fatalf("guard %v: the head never passed MaxAge: the stall is not the one this test is about", guard)
		}
		if refused > 5 || lowest < 1000 {
			t.Errorf("guard %v: after a 2 s stall the consumer caught up, producers refused at %d observations while it was (5 runs), at %.0f/s at the lowest: want at most one a run, at 1,000/s or more", guard, refused, lowest)
		}
	}
}

// TestControllerStallThenDrop: the same stall, but the consumer comes out
// of it at 400/s (a real drop: the slow record was the first of many).
// Its catch-up is no return to the 2,000/s from before: the capacity read
// once it has caught up stays near the 400/s it does (its polls of 500
// read up to 545/s before climbBack too). Restoring the estimate from
// before the stall without what the catch-up showed read 1,500/s.
func TestControllerStallThenDrop(t *testing.T) {
	for _, guard := range []bool{false, true} {
		for seed := uint64(1); seed <= 5; seed++ {
			con := &slowConsumer{rate: 2000, after: 400, maxPoll: 500, guard: guard, slowAt: 30 * 1500, slow: 2}
			r := stallRun(t, con, seed)
			t.Logf("guard %v seed %d: highest capacity read after the catch-up %.0f/s", guard, seed, r.maxCap)
			if r.maxCap > 1.5*400 {
				t.Errorf("guard %v seed %d: after a stall into a drop to 400/s, capacity read %.0f/s once caught up, want at most 600/s", guard, seed, r.maxCap)
			}
		}
	}
}

// TestControllerStallThenDropSkips: the same stall into a drop to 400/s,
// behind a ttl guard that skips what expired (older than MaxAge): its
// catch-ups after a drain skip the late records at no cost, which reads
// as capacity. The estimate climbs back from the fall once in a limited
// episode at most: above 600/s (1.5 x 400) at most twice (that reading
// and the one the law decided on before the queue showed).
//
// The seeds are ones whose consumer catches up (head at 100 ms or less)
// after the stall: at 400/s with polls of up to 500 it holds a record for
// up to a second, and in 11 of seeds 1-20 it never gets there (seeds 1
// and 5 among them: this test asserted nothing in them); a seed that stops
// catching up fails rather than pass unchecked. Seeds 3 and 13 stopped
// catching up when a reported move was measured from poll start to poll
// start (moveSpan; 19 of seeds 1-40 catch up with it, 17 without, none
// above 600/s more than twice either way): seed 11 stands in for 3.
func TestControllerStallThenDropSkips(t *testing.T) {
	for _, seed := range []uint64{2, 4, 6, 8, 11} {
		con := &slowConsumer{rate: 2000, after: 400, maxPoll: 500, guard: true, skip: 2, slowAt: 30 * 1500, slow: 2}
		r := stallRun(t, con, seed)
		if r.maxCap == 0 {
			t.Errorf("seed %d: the consumer never caught up after the stall: nothing checked", seed)
		}
		t.Logf("seed %d: capacity above 600/s at %d readings after the catch-up, %.0f/s at the highest", seed, r.over, r.maxCap)
		if r.over > 2 {
			t.Errorf("seed %d: a guard that skips expired records, after a stall into a drop to 400/s: capacity above 600/s at %d readings once caught up, want at most 2", seed, r.over)
		}
	}
}

// TestHandOf: what handOf reads from a state's partitions. The records in
// hand add up over the partitions with lag; a partition with lag read
// otherwise than from the consumer's reports, or with work in hand and no
// count (an older reporter), leaves no count; one with nothing in hand
// holds none. The time is the newest report's.
func TestHandOf(t *testing.T) {
	at := leaseT0
	part := func(lagN, held int64, inHand bool, src lag.Source, age time.Duration) lag.PartitionState {
		rep := lag.Report{At: at.Add(-age), Position: 10, Held: held}
		if inHand {
			rep.HeadTime = at.Add(-time.Second)
		}
		return lag.PartitionState{PartitionSample: lag.PartitionSample{End: 10 + lagN, Lag: lagN, Reported: rep},
			Source: src, Position: 10}
	}
	cons := lag.SourceConsumer
	cases := []struct {
		name  string
		parts []lag.PartitionState
		want  handMark
	}{
		{"two partitions in hand: summed", []lag.PartitionState{part(500, 100, true, cons, 0), part(40, 40, true, cons, 100*time.Millisecond)}, handMark{held: 140, at: at}},
		{"nothing in hand: none", []lag.PartitionState{part(5, 0, false, cons, 0), part(500, 100, true, cons, 0)}, handMark{held: 100, at: at}},
		{"no lag: not counted", []lag.PartitionState{part(0, 7, true, cons, 0), part(500, 100, true, cons, 0)}, handMark{held: 100, at: at}},
		{"newest report", []lag.PartitionState{part(500, 100, true, cons, 200*time.Millisecond), part(500, 100, true, cons, 50*time.Millisecond)}, handMark{held: 200, at: at.Add(-50 * time.Millisecond)}},
		{"in hand without a count", []lag.PartitionState{part(500, 100, true, cons, 0), part(500, 0, true, cons, 0)}, handMark{held: -1}},
		{"from commits", []lag.PartitionState{part(500, 100, true, cons, 0), part(500, 0, false, lag.SourceCommits, 0)}, handMark{held: -1}},
	}
	for _, tc := range cases {
		if got := handOf(&lag.State{At: at, Partitions: tc.parts}, nil); got.held != tc.want.held || !got.at.Equal(tc.want.at) {
			t.Errorf("%s: handOf = %d at %v, want %d at %v", tc.name, got.held, got.at, tc.want.held, tc.want.at)
		}
	}
}
