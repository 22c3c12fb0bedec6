package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerFasterReadingsSpan: a consumer that commits every poll
// (each poll's records, at most 500, committed as it takes the next) at
// 2,000 msg/s drops to 400 msg/s at 10 s under an 800 msg/s offer. Read
// every second, then every 0.2 s from the first reading after the drop
// (the loop's engaged interval), the first short span must not read
// the consumer as consuming more than it ever did: a move seen after a
// 1 s spacing may have come anywhere in that second (see moveSpan).
// Measured from the reading that saw it, the span of 0.2 s read a
// capacity of 1,078/s in lagbridge bench (2x at 1 s, session 30).
func TestControllerFasterReadingsSpan(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	tgt := lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "t", Group: "g"}
	const offer, drop = 800.0, 10.0
	maxPoll := 150
	tr := lag.NewTracker(nil)
	c := newCtl(t, ControllerConfig{Interval: time.Second})
	t0 := leaseT0
	var (
		now            float64
		pos, committed int     // first record of the poll in hand; the committed offset
		hand           int     // records in hand
		done           float64 // of them finished
		admitted       = offer // msg/s the producers are let in at
		written        []float64
		acc            float64
	)
	tick := func(d float64) {
		const dt = 0.001
		for s := 0.0; s < d-1e-9; s += dt {
			now += dt
			for acc += min(offer, admitted) * dt; acc >= 1; acc-- {
				written = append(written, now)
			}
			rate := 2000.0
			if now >= drop {
				rate = 400
			}
			if done >= float64(hand) {
				pos += hand
				committed = pos
				hand, done = min(len(written)-pos, maxPoll), 0
				continue
			}
			done += rate * dt
		}
	}
	at := 0.0
	for at < 14 {
		next := at + 1
		if at >= drop+1 {
			next = at + 0.2
		}
		tick(next - at)
		at = next
		end := int64(len(written))
		ps := lag.PartitionSample{Partition: 0, End: end, Committed: int64(committed), HeadKnown: true, Lag: end - int64(committed)}
		if ps.Lag > 0 {
			ps.HeadTime = t0.Add(time.Duration(written[committed] * float64(time.Second)))
		}
		ts := t0.Add(time.Duration(at * float64(time.Second)))
		s := tr.Observe(lag.Sample{Target: tgt, At: ts, GroupState: "Stable", Members: 1, Live: lag.LiveYes, Partitions: []lag.PartitionSample{ps}}, ts)
		d := c.Step(s, p, ts)
		t.Logf("%5.1f lag %4d cap %5.0f %s at %.0f/s (%s)", at, d.Lag, d.Capacity, d.Rule, d.Rate, d.Reason)
		if first := at > drop+1 && at < drop+1.3; first && d.Capacity > 1.2*400 {
			// The first short span alone: since lag/ reads the commits
			// exactly there (partTrack.seenGap keeps the longest spacing
			// of a run of readings that each saw a move), only moveSpan
			// keeps it from reading 750/s for the consumer of 400/s.
			t.Errorf("%.1f s, the first short span: capacity %.0f/s for a consumer of 400/s since the drop (lag %d, %s: %s)", at, d.Capacity, d.Lag, d.Rule, d.Reason)
		}
		if at > drop && d.Capacity > 1.2*offer {
			t.Errorf("%.1f s: capacity %.0f/s for a consumer that never consumed more than the %.0f/s offered (lag %d, %s: %s)", at, d.Capacity, offer, d.Lag, d.Rule, d.Reason)
		}
		admitted = offer
		if !d.IsUnlimited() {
			admitted = d.Rate
		}
	}
}
