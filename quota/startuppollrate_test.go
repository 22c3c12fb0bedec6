package quota

import (
	"math"
	"sort"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// busyPoller is a consumer read through its hook's reports: each poll
// takes everything written so far and the consumer works through it at
// capacity msg/s before it polls again; it knows when each record was
// written (the age of the record in hand; a record handled more than the
// deadline after it was written is dead work), and its reports say what
// its last poll that found records waiting handed out over that poll's
// length (lag.Report.PollRate), as consumerclient's Kafka reporter does.
type busyPoller struct {
	capacity float64   // msg/s
	now      float64   // seconds since the start
	end      float64   // records written
	written  []float64 // end after each tick, for the write time of a record
	pos      float64   // first record in hand
	hand     float64   // records in hand
	done     float64   // handled of them
	pollAt   float64
	polled   bool    // a poll started
	lastRate float64 // the last busy poll's records over its length
	lastLen  float64 // its length, seconds
	lastBusy bool    // the last finished poll found records waiting
	lastPos  float64
	lastEnd  float64
	handled  float64
	dead     float64
	noRate   bool // report no poll rate (an older reporter)
}

const busyTick = 0.005

// run advances the consumer by d seconds, the producers writing at produce
// msg/s.
func (c *busyPoller) run(d, produce, deadline float64) {
	for t := 0.0; t < d-1e-9; t += busyTick {
		c.now += busyTick
		c.end += produce * busyTick
		c.written = append(c.written, c.end)
		if c.done >= c.hand {
			if c.polled {
				c.lastBusy = c.hand > 0
				if c.lastBusy {
					c.lastLen = c.now - c.pollAt
					c.lastRate = c.hand / c.lastLen
				}
			}
			c.pos += c.hand
			c.hand, c.done, c.pollAt, c.polled = math.Floor(c.end)-c.pos, 0, c.now, true
		}
		n := min(c.capacity*busyTick, c.hand-c.done)
		if n > 0 && c.now-c.writtenAt(c.pos+c.done) > deadline {
			c.dead += n
		}
		c.done += n
		c.handled += n
	}
}

// writtenAt is when record i was written, seconds since the start.
func (c *busyPoller) writtenAt(i float64) float64 {
	k := sort.SearchFloat64s(c.written, i+1)
	return float64(k+1) * busyTick
}

// state is the target's state at, observed dt after the last one (rates
// known unless first).
func (c *busyPoller) state(at time.Time, dt float64, first bool) lag.State {
	lagN := int64(math.Floor(c.end) - c.pos)
	rep := lag.Report{At: at, Position: int64(c.pos)}
	var head time.Duration
	if c.hand > 0 && c.done < c.hand {
		head = time.Duration((c.now - c.writtenAt(c.pos)) * float64(time.Second))
		rep.HeadTime = at.Add(-head)
		rep.Held, rep.HeldFor = int64(c.hand), time.Duration((c.now-c.pollAt)*float64(time.Second))
	}
	if c.lastBusy && !c.noRate {
		rep.PollRate, rep.PollFor = c.lastRate, time.Duration(c.lastLen*float64(time.Second))
	}
	s := lag.State{
		Target: ordersK, At: at, Status: lag.StatusOK, Lag: lagN, HeadAge: head, HeadAgeKnown: true,
		ConsumeRateInstant: (c.pos - c.lastPos) / dt, ProduceRateInstant: (c.end - c.lastEnd) / dt,
		RatesKnown: !first, Members: 1, Source: lag.SourceConsumer,
		Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: int64(c.end), Lag: lagN, HeadKnown: true, Reported: rep},
			HeadAge: head, Source: lag.SourceConsumer, Position: int64(c.pos)}},
	}
	s.ConsumeRate, s.ProduceRate = s.ConsumeRateInstant, s.ProduceRateInstant
	c.lastPos, c.lastEnd = c.pos, c.end
	return s
}

// busyStartRun runs con (2,000 msg/s) offered offer msg/s from the start,
// observed from phase seconds in (the first reading, without rates, as the
// daemon's first), again gap seconds later (a report that woke the
// daemon), then every second, for 10 s (lagbridge bench's phase before the
// drop); it returns the decisions and the share of the records handled
// that were dead.
func busyStartRun(t *testing.T, con *busyPoller, offer, phase, gap float64) ([]Decision, float64) {
	t.Helper()
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{})
	var ds []Decision
	con.run(phase, offer, 2)
	dt := 1.0
	for k := 0; con.now < 10; k++ {
		at := leaseT0.Add(time.Duration(con.now * float64(time.Second)))
		d := c.Step(con.state(at, dt, k == 0), p, at)
		ds = append(ds, d)
		dt = 1
		if k == 0 {
			dt = gap
		}
		con.run(dt, min(offer, d.Rate), 2)
	}
	return ds, con.dead / con.handled
}

// TestControllerStartupBusyPoll: the traced start of lagbridge bench's
// kafka/hook/sync/1s at 10x on kfake: a consumer of 2,000 msg/s read
// through its hook's reports, offered 4,000 msg/s from the first second.
// Its polls take everything written so far, so they double (on kfake,
// 20 records in 10.6 ms, then 28, 52, ... 899 in 451 ms, 1,480 in 742 ms,
// each 1,990-2,000/s), and the first fresh reading may fall in the same
// poll as the first reading (no rates yet): the position has not moved,
// nothing was measured, and "wait 0s <= engage 400ms: unlimited" let the
// backlog grow by 2,000 msg/s until the poll ended (2.6-21.9% dead before
// the drop in 5 runs of 12, session 21). Its last finished poll, which
// found records waiting, says what it consumed: limited at once, no dead
// work at any phase of the first readings. Without the poll's rate (an
// older reporter) the same runs are dead as before.
func TestControllerStartupBusyPoll(t *testing.T) {
	dead := 0
	for _, r := range [][2]float64{{0.3, 1}, {0.6, 1}, {0.9, 1}, {0.7, 0.3}, {1.0, 0.3}, {1.3, 0.3}, {1.6, 0.3}, {1.0, 0.5}, {1.5, 0.5}} {
		phase, gap := r[0], r[1]
		ds, share := busyStartRun(t, &busyPoller{capacity: 2000}, 4000, phase, gap)
		if share > 0.01 {
			t.Errorf("10x, the first readings at %.1fs and %.1fs later: %.1f%% of the records handled in the first 10 s were dead, want <= 1%%", phase, gap, 100*share)
			for i, d := range ds[:min(4, len(ds))] {
				t.Logf("  reading %d: lag %d, head %s: %s at %.0f/s (%s)", i, d.Lag, d.HeadAge.Round(time.Millisecond), d.Rule, d.Rate, d.Reason)
			}
		}
		if _, share := busyStartRun(t, &busyPoller{capacity: 2000, noRate: true}, 4000, phase, gap); share > 0.01 {
			dead++
		}
		ds, share = busyStartRun(t, &busyPoller{capacity: 2000}, 800, phase, gap)
		if share > 0 {
			t.Errorf("2x, the first readings at %.1fs and %.1fs later: %.1f%% dead, want none", phase, gap, 100*share)
		}
		wantUnlimitedBefore(t, ds, len(ds), "2x: the consumer keeps up")
	}
	if dead == 0 {
		t.Errorf("without the poll's rate no run had dead work: the test no longer shows the startup it is about")
	}
}

// TestControllerStartupBatchPollRate: TestControllerStartupBatchPoll's
// consumer (polls of 0.6 s, a fixed cost per poll, 500 msg/s offered, its
// record in hand 0.6-1.2 s old) whose reports give its last poll's rate:
// 300 records in 0.6 s, what was written. It keeps up: at least 90% of
// the offer at the first fresh reading, at every phase.
func TestControllerStartupBatchPollRate(t *testing.T) {
	batchFirstFresh(t, func(st *lag.State) {
		st.Partitions[0].Reported.PollRate, st.Partitions[0].Reported.PollFor = 500, 600*time.Millisecond
	})
}

// TestControllerStartupBusyPollMembers: a group of two members, each
// working through a long poll of its own partition (positions still),
// offered 4,000 msg/s; their last busy polls read 1,200/s and 800/s. The
// group consumes their sum: the first fresh reading limits at a capacity
// of 2,000/s, not one member's rate. A partition without a rate (a member
// caught up, or an older reporter), or one from a poll of a few
// milliseconds, leaves the reading as it was.
func TestControllerStartupBusyPollMembers(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	at := func(s float64) time.Time { return leaseT0.Add(time.Duration(s * float64(time.Second))) }
	read := func(s float64, rateB float64, forB time.Duration) lag.State {
		repA := lag.Report{At: at(s), Position: 1000, HeadTime: at(0.1), Held: 900, HeldFor: 700 * time.Millisecond, Member: "a", PollRate: 1200, PollFor: 500 * time.Millisecond}
		repB := lag.Report{At: at(s), Position: 800, HeadTime: at(0.2), Held: 600, HeldFor: 600 * time.Millisecond, Member: "b", PollRate: rateB, PollFor: forB}
		endA, endB := int64(1000+s*2000), int64(800+s*2000)
		return lag.State{Target: ordersK, At: at(s), Status: lag.StatusOK, Lag: endA - 1000 + endB - 800, HeadAge: time.Duration((s - 0.1) * float64(time.Second)), HeadAgeKnown: true,
			ProduceRateInstant: 4000, ProduceRate: 4000, RatesKnown: s > 1, Members: 2, Source: lag.SourceConsumer,
			Partitions: []lag.PartitionState{
				{PartitionSample: lag.PartitionSample{Partition: 0, End: endA, Lag: endA - 1000, HeadKnown: true, Reported: repA}, Source: lag.SourceConsumer, Position: 1000},
				{PartitionSample: lag.PartitionSample{Partition: 1, End: endB, Lag: endB - 800, HeadKnown: true, Reported: repB}, Source: lag.SourceConsumer, Position: 800},
			}}
	}
	c := newCtl(t, ControllerConfig{})
	c.Step(read(1.0, 800, 400*time.Millisecond), p, at(1.0))
	if d := c.Step(read(1.3, 800, 400*time.Millisecond), p, at(1.3)); d.IsUnlimited() || d.Capacity < 1900 || d.Capacity > 2100 {
		t.Errorf("two members at 1,200/s and 800/s, offered 4,000/s: %s at %.0f/s, capacity %.0f/s (%s), want limited at a capacity of 2,000/s", d.Rule, d.Rate, d.Capacity, d.Reason)
	}
	c = newCtl(t, ControllerConfig{})
	c.Step(read(1.0, 0, 0), p, at(1.0))
	if d := c.Step(read(1.3, 0, 0), p, at(1.3)); !d.IsUnlimited() {
		t.Errorf("member b gives no rate: %s at %.0f/s (%s), want unlimited as before (nothing measured)", d.Rule, d.Rate, d.Reason)
	}
	// b's last busy poll was 3 ms: 2 records over it read 667/s, the
	// scheduler's, not the consumer's. Too short to read.
	c = newCtl(t, ControllerConfig{})
	c.Step(read(1.0, 667, 3*time.Millisecond), p, at(1.0))
	if d := c.Step(read(1.3, 667, 3*time.Millisecond), p, at(1.3)); !d.IsUnlimited() {
		t.Errorf("member b's last busy poll lasted 3 ms: %s at %.0f/s (%s), want unlimited as before (nothing measured)", d.Rule, d.Rate, d.Reason)
	}
}
