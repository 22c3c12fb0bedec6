package quota

import (
	"math"
	"testing"
)

// TestControllerNATSStallClimbBack: TestControllerStallClimbBack's stall
// for a NATS consumer whose handler consumerclient.NATSReporter wraps (one
// message in hand at a time, 2,000/s, 1,500/s offered), of 2 s and 3 s,
// 10 runs each. Its reports count the message in hand and the time since
// it last finished one: in the stall that bounds it at once (1 over the
// time held), and once caught up it climbs back to what it drained
// (climbBack), as the Kafka hook does. Producers are refused at most at
// one caught-up observation a run (4 and 4 over the 10 runs), at 900/s
// (2 s) and 500/s (3 s) or more (927 and 1,066/s).
//
// Red before (noCount, logged: the NATS reporter sent no count, and the
// daemon kept none): refused at 8 (2 s) and 64 (3 s) caught-up
// observations, down to 592/s and 14/s. The 3 s catch-up after a head
// past MaxAge was held as a skip burst and the probe climbed x1.5 a
// reading from the drain while the consumer sat caught up.
func TestControllerNATSStallClimbBack(t *testing.T) {
	for _, c := range []struct{ slow, lowest float64 }{{2, 900}, {3, 500}} {
		for _, noCount := range []bool{true, false} {
			refused, late, lowest := 0, 0, math.Inf(1)
			for seed := uint64(1); seed <= 10; seed++ {
				con := &slowConsumer{rate: 2000, maxPoll: 500, nats: true, noCount: noCount, slowAt: 30 * 1500, slow: c.slow}
				r := stallRun(t, con, seed)
				refused, late, lowest = refused+r.refusedCaught, late+r.late, min(lowest, r.lowest)
			}
			t.Logf("%.0f s stall, counted %v, 10 runs: refused at %d caught-up observations, at %.0f/s at the lowest (head past MaxAge at %d)", c.slow, !noCount, refused, lowest, late)
			if noCount {
				continue
			}
			if late == 0 {
				t.Fatalf("%.0f s: the head never passed MaxAge: the stall is not the one this test is about", c.slow)
			}
			if refused > 10 || lowest < c.lowest {
				t.Errorf("a NATS consumer after a %.0f s stall caught up, producers refused at %d observations while it was (10 runs), at %.0f/s at the lowest: want at most one a run, at %.0f/s or more", c.slow, refused, lowest, c.lowest)
			}
		}
	}
}

// TestControllerNATSStallThenDrop: TestControllerStallThenDrop for the
// NATS consumer of TestControllerNATSStallClimbBack: out of a 2 s or 3 s
// stall at 400/s, the capacity read once caught up stays near 400/s
// (400/s in each run).
func TestControllerNATSStallThenDrop(t *testing.T) {
	for _, slow := range []float64{2, 3} {
		for seed := uint64(1); seed <= 5; seed++ {
			con := &slowConsumer{rate: 2000, after: 400, maxPoll: 500, nats: true, slowAt: 30 * 1500, slow: slow}
			r := stallRun(t, con, seed)
			if r.maxCap == 0 {
				t.Errorf("%.0f s seed %d: the consumer never caught up after the stall: nothing checked", slow, seed)
			}
			if r.maxCap > 1.5*400 {
				t.Errorf("%.0f s seed %d: after a stall into a drop to 400/s, capacity read %.0f/s once caught up, want at most 600/s", slow, seed, r.maxCap)
			}
		}
	}
}
