package quota

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// poolConsumer is a consumer whose poll loop keeps queued records ahead
// of a pool of w workers, reported as consumerclient's KafkaReporter with
// KeepUntilFinished reports it: the position is the offset after the last
// record polled less the records in hand not finished (a count of what
// was finished, in any order), the head time the oldest unfinished
// record's, held the unfinished records, heldFor the time since a record
// was last finished anywhere (whole ms; 0 is "not given"). The pool
// finishes rate msg/s; the record at slowAt holds one worker for slow
// seconds, the others going on at rate x (w-1)/w.
type poolConsumer struct {
	rate   float64
	w, q   int // workers, records polled ahead of the finished ones
	slowAt int
	slow   float64

	producedLog
	finished float64 // records finished, counting the slow one while it holds its worker
	stuck    bool
	finAt    float64
	lastPos  int
	lastEnd  int
}

// run advances the pool by d seconds, the producers writing at produce
// msg/s.
func (c *poolConsumer) run(d, produce float64) {
	const tick = 0.001
	for t := 0.0; t < d-1e-9; t += tick {
		c.tick(tick, produce)
		r := c.rate
		if c.stuck {
			r *= float64(c.w-1) / float64(c.w)
			if c.slow -= tick; c.slow <= 0 {
				c.stuck, c.finAt = false, c.now
			}
		}
		n := math.Min(c.finished+r*tick, float64(len(c.written)))
		if int(n) > int(c.finished) {
			c.finAt = c.now
			if c.slow > 0 && int(c.finished) <= c.slowAt && int(n) > c.slowAt {
				c.stuck = true
			}
		}
		c.finished = n
	}
}

// state is the daemon's state of the pool's one partition at at, dt
// seconds after the last.
func (c *poolConsumer) state(at time.Time, dt float64) lag.State {
	end, done := len(c.written), int(c.finished)
	polled, head := min(end, done+c.q), done
	if c.stuck {
		done, head = done-1, c.slowAt
	}
	held, pos := polled-done, done
	rep := lag.Report{At: at, Position: int64(pos), OwnPace: true} // KeepUntilFinished says so (protocol 1.6)
	var age time.Duration
	if held > 0 {
		age = time.Duration((c.now - c.written[head]) * float64(time.Second))
		rep.Held = int64(held)
		rep.HeldFor = time.Duration(math.Floor((c.now-c.finAt)*1000)) * time.Millisecond
	}
	s := reportedState(rep, end, c.lastPos, c.lastEnd, age, held > 0, dt)
	c.lastPos, c.lastEnd = pos, end
	return s
}

// TestControllerPoolSlowRecord: a pool of 8 workers finishing 2,000/s out
// of order, 1,500/s offered, 200 records queued ahead; one record holds
// one worker for S seconds while the other seven go on at 1,750/s, so the
// pool keeps up throughout and the stuck record's head age stays under
// MaxAge (2 s). Reported as a count of what was finished (the position
// moves with every record, the lag is the records not finished), the
// daemon leaves the producers alone. Reported at the first unfinished
// record (the hook before), every record the other workers finished past
// it read as lag: at S = 1.5 s the position stood still with a lag of
// 2,000, the capacity was read at 750/s and the rate cut to 5/s.
func TestControllerPoolSlowRecord(t *testing.T) {
	const offer = 1500.0
	for _, slow := range []float64{0.5, 1, 1.5, 1.9} {
		p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
		c := newCtl(t, ControllerConfig{Interval: time.Second})
		con := &poolConsumer{rate: 2000, w: 8, q: 200, slowAt: 30 * 1500, slow: slow}
		rate, at := math.Inf(1), leaseT0
		lowest, lowCap := math.Inf(1), math.Inf(1)
		for el := 0.0; el < 60; el += 0.5 {
			con.run(0.5, min(offer, rate))
			at = at.Add(500 * time.Millisecond)
			s := con.state(at, 0.5)
			d := c.Step(s, p, at)
			rate = d.Rate
			if el > 30 {
				lowest, lowCap = min(lowest, d.Rate), min(lowCap, d.Capacity)
			}
		}
		if lowest < 0.99*offer {
			t.Errorf("a %.1f s record: a pool keeping up (1,750/s for 1,500/s offered) was cut to %.0f/s (capacity read %.0f/s)",
				slow, lowest, lowCap)
		}
	}
}
