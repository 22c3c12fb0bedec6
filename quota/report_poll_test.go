package quota

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// pollConsumer is a consumer read through its hook's reports, as the Kafka
// hook reports it: the first record in hand until the next poll, which
// takes everything written so far. Its position moves once per poll.
type pollConsumer struct {
	rate       float64 // capacity, msg/s
	maxPoll    float64 // records a poll takes at most (0: all)
	end, pos   float64 // log end; first record in hand
	hand, done float64 // records in hand; handled of them
	lastPos    float64 // position at the last observation
	lastEnd    float64
	// counts: the reports say how many records are in hand and for how
	// long (lag.Report.Held, HeldFor), as the hook does; now and pollAt
	// are the consumer's clock and when it took its poll, seconds.
	counts      bool
	now, pollAt float64
	// stall: once the record at offset stallAt is next, the consumer
	// stands still for stall seconds with its poll in hand (a GC pause,
	// one slow call).
	stallAt, stall float64
}

// run advances the consumer by d, the producers writing at produce msg/s.
func (c *pollConsumer) run(d, produce float64) {
	const tick = 0.005
	for t := 0.0; t < d-1e-9; t += tick {
		c.now += tick
		c.end += produce * tick
		if c.done >= c.hand {
			c.pos += math.Floor(c.hand)
			c.hand, c.done, c.pollAt = math.Floor(c.end)-c.pos, 0, c.now
			if c.maxPoll > 0 {
				c.hand = min(c.hand, c.maxPoll)
			}
		}
		if c.stall > 0 && c.hand > 0 && c.pos+c.done >= c.stallAt {
			c.stall -= tick
			continue
		}
		c.done += c.rate * tick
	}
}

// state is the target's state at, observed dt after the last one.
func (c *pollConsumer) state(at time.Time, dt float64, learned time.Duration) lag.State {
	lagN := int64(math.Floor(c.end) - c.pos)
	rep := lag.Report{At: at, Position: int64(c.pos)}
	if c.hand > 0 && c.done < c.hand {
		rep.HeadTime = at.Add(-time.Second)
		if c.counts {
			rep.Held, rep.HeldFor = int64(c.hand), time.Duration((c.now-c.pollAt)*float64(time.Second))
		}
	}
	s := lag.State{
		Target: ordersK, At: at, Status: lag.StatusOK, Lag: lagN,
		ConsumeRateInstant: (c.pos - c.lastPos) / dt, ProduceRateInstant: (c.end - c.lastEnd) / dt,
		RatesKnown: true, Members: 1, Source: lag.SourceConsumer, CommitInterval: learned,
		Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: int64(c.end), Lag: lagN, Reported: rep},
			Source: lag.SourceConsumer, Position: int64(c.pos)}},
	}
	s.ConsumeRate, s.ProduceRate = s.ConsumeRateInstant, s.ProduceRateInstant
	c.lastPos, c.lastEnd = c.pos, c.end
	return s
}

// TestControllerReportPolls: a position from the consumer's reports moves
// once per poll, not once per commit and not with every message.
//
// Working through a backlog in polls of 1,000 records at 2,000/s, observed
// every 250 ms, the position stands still every other observation: that
// is a poll in hand, not a consumer that consumed nothing (read so, the
// capacity read 0, drained, and the next interval read 4,000/s).
//
// A saturated consumer of 2,000/s, limited, slows to 200/s inside a poll:
// what it held when it polled bounds what it consumed since, and the
// capacity must read below 1,000/s within 1 s, never 0. Before, read with
// no cadence it read 0 (drain) at every observation between its polls;
// read with its group's learned 5 s auto-commit cadence, those
// observations measured nothing and the capacity stayed 1,832/s until
// the poll ended.
func TestControllerReportPolls(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 10 * time.Second, MinRate: 5}
	const dt = 0.25
	at := func(k int) time.Time { return leaseT0.Add(time.Duration(k) * 250 * time.Millisecond) }
	for _, learned := range []time.Duration{0, 5 * time.Second} {
		t.Run("backlog in polls, cadence "+learned.String(), func(t *testing.T) {
			c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
			con := &pollConsumer{rate: 2000, end: 4000, maxPoll: 1000}
			con.lastEnd = con.end
			offer := 1500.0
			rate := math.Inf(1)
			for k := 1; k <= 16; k++ {
				con.run(dt, min(offer, rate))
				d := c.Step(con.state(at(k), dt, learned), p, at(k))
				if d.Rule == RuleDrain || d.Rule == RuleStepDown || d.Capacity > 3000 || (k > 2 && d.Capacity < 1000) {
					t.Fatalf("k=%d: rule %v capacity %.0f (%s): a poll in hand read as a rate", k, d.Rule, d.Capacity, d.Reason)
				}
				rate = d.Rate
			}
		})
		t.Run("slows inside a big poll, cadence "+learned.String(), func(t *testing.T) {
			c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
			con := &pollConsumer{rate: 2000, maxPoll: 2500}
			rate := math.Inf(1)
			k := 0
			for ; k < 40; k++ {
				con.run(dt, min(3000, rate))
				rate = c.Step(con.state(at(k+1), dt, learned), p, at(k+1)).Rate
			}
			// Inside a poll, it slows down.
			con.rate = 200
			for i := 1; i <= 16; i++ {
				k++
				con.run(dt, min(3000, rate))
				d := c.Step(con.state(at(k), dt, learned), p, at(k))
				rate = d.Rate
				if d.Rule == RuleDrain || (i >= 4 && d.Capacity > 1000) {
					t.Fatalf("%.2f s into a poll at 200/s: capacity %.0f/s (%s), want it read below 1,000/s within 1 s, never 0", float64(i)*dt, d.Capacity, d.Reason)
				}
			}
		})
	}
}
