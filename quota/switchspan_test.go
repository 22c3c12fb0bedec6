package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerSwitchReportSpan: a hook consumer of 2,000 msg/s (polls
// of at most 500 records, in hand until the next poll, reported as the
// hook does, on its own 0.25 s tick: the poll's first record, Held,
// HeldFor since the poll) under a 4,000 msg/s offer, read every second
// until the controller engages, then every 0.25 s (the loop's engaged
// interval). A short span may hold two poll starts where the one before
// held none: read from reading to reading, the consumer read at up to
// 3,600/s within 1 s of the switch (3,344-3,756/s in lagbridge bench,
// kafka/hook/sync/1s 10x, session 31), taken as the capacity and let in.
// Measured from the poll start the report at the move before showed
// (moveSpan, reportedPoll), at most 2,295/s. 20 phases and poll sizes
// (380-570). Red on main (3,600/s) and with the poll start span taken at
// the first short span after the switch only (3,440/s).
func TestControllerSwitchReportSpan(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	tgt := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "t", Group: "g"}
	const offer, rate = 4000.0, 2000.0
	worst, worstPhase, worstPoll := 0.0, 0.0, 0
	for k := range 20 {
		phase, maxPoll := 0.05*float64(k/5*5)+0.013*float64(k%5), 380+10*k
		tr := lag.NewTracker(nil)
		c := newCtl(t, ControllerConfig{Interval: time.Second})
		t0 := leaseT0
		var (
			now      float64
			pos      int     // first record of the poll in hand
			hand     int     // records in hand
			done     float64 // of them finished
			pollAt   float64
			rep      lag.Report // the newest report, made every 0.25 s
			repNext  = 0.25 * float64(k%5) / 5
			admitted = offer
			written  []float64
			acc      float64
		)
		tick := func(d float64) {
			const dt = 0.001
			for s := 0.0; s < d-1e-9; s += dt {
				now += dt
				for acc += min(offer, admitted) * dt; acc >= 1; acc-- {
					written = append(written, now)
				}
				if done >= float64(hand) {
					pos += hand
					hand, done, pollAt = min(len(written)-pos, maxPoll), 0, now
					continue
				}
				done += rate * dt
				if now >= repNext {
					repNext += 0.25
					rep = lag.Report{At: t0.Add(time.Duration(now * float64(time.Second))), Position: int64(pos)}
					if hand > 0 {
						rep.HeadTime = t0.Add(time.Duration(written[pos] * float64(time.Second)))
						rep.Held, rep.HeldFor = int64(hand), time.Duration((now-pollAt)*float64(time.Second))
					}
				}
			}
		}
		at, switched := 0.0, -1.0
		for at < 8 {
			next := at + 1
			if at == 0 {
				next = phase + 0.5
			}
			if switched >= 0 {
				next = at + 0.25
			}
			tick(next - at)
			at = next
			end := int64(len(written))
			ts := t0.Add(time.Duration(at * float64(time.Second)))
			ps := lag.PartitionSample{Partition: 0, End: end, Committed: -1, Reported: rep}
			s := tr.Observe(lag.Sample{Target: tgt, At: ts, GroupState: "Stable", Members: 1, Live: lag.LiveYes, Partitions: []lag.PartitionSample{ps}}, ts)
			d := c.Step(s, p, ts)
			if k == -1 && at < 5 {
				t.Logf("%5.2f pos %d lag %d cap %5.0f %s at %.0f/s (%s)", at, pos, d.Lag, d.Capacity, d.Rule, d.Rate, d.Reason)
			}
			if switched >= 0 && at <= switched+1 && d.Capacity > worst {
				worst, worstPhase, worstPoll = d.Capacity, phase, maxPoll
			}
			if switched < 0 && !d.IsUnlimited() {
				switched = at
			}
			admitted = offer
			if !d.IsUnlimited() {
				admitted = d.Rate
			}
		}
	}
	t.Logf("highest capacity read within 1 s of the switch: %.0f/s (phase %.2f, polls of %d)", worst, worstPhase, worstPoll)
	if worst > 1.25*rate {
		t.Errorf("capacity %.0f/s read within 1 s of the switch to 0.25 s readings (phase %.2f s, polls of %d) for a consumer of %.0f/s", worst, worstPhase, worstPoll, rate)
	}
}
