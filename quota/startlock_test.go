package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerOneSecondCommitsFirstReading: a healthy consumer that
// auto-commits every second, read every second, from its first measured
// reading (lagbridge bench, kafka/autocommit-1s at 2x, kfake, main at
// 96afeb6): 800 msg/s produced, its commits alternating between a whole
// second of records and a few from the start, the head at its commit
// about 1.0 s old whenever it has lag; lag/ learns the cadence at the
// fifth reading. Before, the first reading (40 msg/s consumed, lag 760)
// was read as the capacity (a wait of 19 s: drain), and again two
// readings later; once limited, the standing wait was never learned and
// the rate alternated between drain, saturated and probe (63.8% of the
// offer admitted before the drop, 35 false-throttle seconds). A commit
// whose head is no older than one interval (plus E/2) and whose lag is no
// more than was produced in that time shows no queue: before the standing
// wait is learned, such a reading neither lowers the capacity nor engages
// the law. A capacity drop is still seen: the head at the commit ages
// past it.
func TestControllerOneSecondCommitsFirstReading(t *testing.T) {
	// The readings of that run (lag and head at each decision; consumed
	// is what was produced less the lag's growth).
	replayOneSecondCommits(t, 5, [][3]float64{
		{760, 40, 0.96}, {0, 1560, 0}, {762, 39, 0.959}, {0, 1562, 0}, {182, 618, 0.902},
		{623, 359, 0.951}, {305, 1118, 0.966}, {745, 360, 0.977}, {0, 1545, 0}, {770, 30, 0.98},
	})
}

// replayOneSecondCommits replays the readings {lag, consumed msg/s, head
// s} of a healthy consumer committing every second, read every second
// with 800 msg/s offered (the commit cadence known from reading
// cadenceFrom), and wants each decision to admit the offer; then the
// capacity drops to 400/s and it wants the rate limited below the offer
// by the second reading after.
func replayOneSecondCommits(t *testing.T, cadenceFrom int, healthy [][3]float64) {
	t.Helper()
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{})
	k := 0
	step := func(lagN int64, consume float64, head float64) Decision {
		k++
		s := st(float64(k), lagN, consume, 800)
		if k >= cadenceFrom {
			s.CommitInterval = time.Second
		}
		s.Source = lag.SourceCommits
		s.HeadAge, s.HeadAgeKnown = time.Duration(head*float64(time.Second)), true
		return c.Step(s, p, leaseT0.Add(time.Duration(k)*time.Second))
	}
	for _, r := range healthy {
		if d := step(int64(r[0]), r[1], r[2]); d.Rate < 800 {
			t.Fatalf("reading %d (lag %.0f, %.0f msg/s consumed, head %.3fs): %s at %.0f/s (%s), want at least the 800/s offered", k, r[0], r[1], r[2], d.Rule, d.Rate, d.Reason)
		}
	}
	// The capacity drops to 400/s: the commits fall behind and the head
	// at them ages.
	var d Decision
	for i, r := range [][3]float64{{1220, 400, 1.52}, {1620, 400, 2.03}} {
		if d = step(int64(r[0]), r[1], r[2]); i == 1 && d.Rate >= 800 {
			t.Fatalf("reading %d (capacity fell to 400/s): %s at %.0f/s (%s), want limited below the offer", k, d.Rule, d.Rate, d.Reason)
		}
	}
}
