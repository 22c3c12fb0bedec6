package quota

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerStartupTwoMembers: a group of two members read through
// their reports. A (partition 0) is 0.8 s into a poll of 400 records at
// both readings (a batchy member); B (partition 1) moves 600 records in
// the 0.3 s between the first reading and the first fresh one: the group
// consumed 2,000/s. The first fresh reading must not spread B's move over
// A's poll (600 records over 1.1 s, 545/s: "drain at 5/s", as the
// startup's poll-to-poll span of session 22 read it, since taken out).
func TestControllerStartupTwoMembers(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	at := func(s float64) time.Time { return leaseT0.Add(time.Duration(s * float64(time.Second))) }
	read := func(s float64, posB int64, heldForB, consB float64) lag.State {
		repA := lag.Report{At: at(s), Position: 1000, HeadTime: at(0), Held: 400, HeldFor: time.Duration((s - 0.2) * float64(time.Second)), Member: "a"}
		repB := lag.Report{At: at(s), Position: posB, HeadTime: at(s - 0.3), Held: 300, HeldFor: time.Duration(heldForB * float64(time.Second)), Member: "b"}
		endA, endB := int64(1400+s*500), int64(2900+s*500)
		lagA, lagB := endA-1000, endB-posB
		return lag.State{Target: ordersK, At: at(s), Status: lag.StatusOK, Lag: lagA + lagB, HeadAge: time.Duration(s * float64(time.Second)), HeadAgeKnown: true,
			ConsumeRateInstant: consB, ProduceRateInstant: 1000, ConsumeRate: consB, ProduceRate: 1000, RatesKnown: consB > 0, Members: 2, Source: lag.SourceConsumer,
			Partitions: []lag.PartitionState{
				{PartitionSample: lag.PartitionSample{Partition: 0, End: endA, Lag: lagA, HeadKnown: true, Reported: repA}, Source: lag.SourceConsumer, Position: 1000},
				{PartitionSample: lag.PartitionSample{Partition: 1, End: endB, Lag: lagB, HeadKnown: true, Reported: repB}, Source: lag.SourceConsumer, Position: posB},
			}}
	}
	c := newCtl(t, ControllerConfig{})
	c.Step(read(1.0, 2000, 0.1, 0), p, at(1.0))
	if d := c.Step(read(1.3, 2600, 0.05, 600/0.3), p, at(1.3)); d.Capacity < 1500 {
		t.Errorf("the first fresh reading: %s at %.0f/s, capacity %.0f/s (%s), want >= 1,500/s of a group that consumed 2,000/s", d.Rule, d.Rate, d.Capacity, d.Reason)
	}
}

// batchState is the state at t of a consumer read through its reports that
// keeps up but works through each poll in a fixed P seconds (a bulk write
// per poll), offered offer msg/s from the start: at t in [kP,(k+1)P) it
// holds the records written in [(k-1)P,kP), its first record t-(k-1)P
// old; lastPos is its position dt seconds before.
func batchState(t, P, offer, lastPos, dt float64, first bool) (lag.State, float64) {
	k := math.Floor(t / P)
	pos := math.Max(offer*(k-1)*P, 0)
	end := offer * t
	lagN := int64(end - pos)
	at := leaseT0.Add(time.Duration(t * float64(time.Second)))
	rep := lag.Report{At: at, Position: int64(pos)}
	head := time.Duration((t - math.Max((k-1)*P, 0)) * float64(time.Second))
	if k >= 1 {
		rep.HeadTime = at.Add(-head)
		rep.Held, rep.HeldFor = int64(offer*P), time.Duration((t-k*P)*float64(time.Second))
	}
	s := lag.State{
		Target: ordersK, At: at, Status: lag.StatusOK, Lag: lagN, HeadAge: head, HeadAgeKnown: true,
		ConsumeRateInstant: (pos - lastPos) / dt, ProduceRateInstant: offer,
		RatesKnown: !first, Members: 1, Source: lag.SourceConsumer,
		Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: int64(end), Lag: lagN, HeadKnown: true, Reported: rep},
			HeadAge: head, Source: lag.SourceConsumer, Position: int64(pos)}},
	}
	s.ConsumeRate, s.ProduceRate = s.ConsumeRateInstant, s.ProduceRateInstant
	return s, pos
}

// TestControllerStartupBatchPoll: a fresh (or restarted) daemon in front of
// a consumer that keeps up with a fixed cost per poll (polls of 0.6 s, 500
// msg/s offered, MaxAge 2 s): its record in hand is 0.6-1.2 s old all the
// time, past the engage wait (400 ms), and never dead. Its first reading
// comes at several phases of a poll and the next, woken by a report, 0.3 s
// later, in the same poll or the next. Reading the record in hand's age
// as the wait while nothing was measured (session 22's startup change,
// since taken out) refused it at 5/s there ("capacity not measured yet (a
// poll in hand)"), and again after every restart of the daemon. (The
// readings after it are not checked: such a consumer read every second
// steps down now and then on its own, the aliasing of 0.6 s polls read at
// 1 s.)
func TestControllerStartupBatchPoll(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	const P, offer = 0.6, 500.0
	for _, phase := range []float64{1.3, 1.5, 1.7, 2.1} {
		c := newCtl(t, ControllerConfig{})
		first, pos := batchState(phase, P, offer, 0, 1, true)
		c.Step(first, p, first.At)
		st, _ := batchState(phase+0.3, P, offer, pos, 0.3, false)
		if d := c.Step(st, p, st.At); !d.IsUnlimited() && d.Rate < 0.9*offer {
			t.Errorf("the first reading at %.1fs, the next 0.3 s later: lag %d, head %s: %s at %.0f/s (%s), want at least 90%% of the %.0f/s offered", phase, d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason, offer)
		}
	}
}
