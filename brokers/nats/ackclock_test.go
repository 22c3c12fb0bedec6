package nats

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestAckOnOurClock: the last ack's time is taken as its age at the
// server's TimeStamp, so that the server's clock skew drops out.
func TestAckOnOurClock(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{0, 800 * time.Millisecond, -300 * time.Millisecond} {
		ts := at.Add(skew)                       // the server's clock when it gathered the info
		acked := ts.Add(-600 * time.Millisecond) // acked 600 ms before
		if got := at.Sub(ackOnOurClock(acked, ts, at)); got != 600*time.Millisecond {
			t.Errorf("server clock %+v: ack age %v, want 600ms", skew, got)
		}
	}
	acked := at.Add(-time.Second)
	if got := ackOnOurClock(acked, time.Time{}, at); !got.Equal(acked) {
		t.Errorf("no TimeStamp: %v, want the ack as it is", got)
	}
	if got := ackOnOurClock(time.Time{}, at, at); !got.IsZero() {
		t.Errorf("no ack: %v, want zero", got)
	}
}

// TestAssembleStaleAfterInterval: at a 1 s interval with the infoInterval
// of the daemon's engaged cadence (250 ms), a stream's readings repeated
// once (the listing missed it at one cycle) are not stale yet.
func TestAssembleStaleAfterInterval(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	o := &Observer{cfg: Config{Cluster: "n", Interval: time.Second, InfoInterval: 250 * time.Millisecond}.WithDefaults(),
		state: map[string]*streamState{}}
	for _, age := range []time.Duration{time.Second, 4 * time.Second} {
		o.state["S"] = &streamState{ok: true, fetchedAt: now.Add(-age),
			samples: []lag.Sample{{Target: o.target("S", "c"), At: now.Add(-age), Partitions: []lag.PartitionSample{{}}}}}
		if got, want := o.assemble(now)[0].Partitions[0].Stale, age > 3*time.Second; got != want {
			t.Errorf("a reading %v old: stale %v, want %v", age, got, want)
		}
	}
}
