package lag

import (
	"testing"
	"time"
)

// TestAckedWithin: State.AckedWithin is the longest time from the last
// acknowledgement to the reading over the newest readings in a row that
// carried one, from the second of them on (up to ackAgeReadings); 0 after
// a single one and after a reading without one. Red with the newest
// reading's age alone (reading 3: 600 ms before, 10 ms after), with
// AckAge's four readings (readings 2 and 3: 0), and without the reset (the
// reading after the one without an ack).
func TestAckedWithin(t *testing.T) {
	const ms = time.Millisecond
	tr := NewTracker(nil)
	for i, c := range []struct {
		sinceAck time.Duration // 0: no ack known
		want     time.Duration
	}{
		{30 * ms, 0}, {10 * ms, 30 * ms}, {600 * ms, 600 * ms}, {10 * ms, 600 * ms}, {10 * ms, 600 * ms}, {10 * ms, 600 * ms},
		{10 * ms, 10 * ms}, {0, 0}, {20 * ms, 0}, {5 * ms, 20 * ms},
	} {
		at := t0.Add(time.Duration(i+1) * time.Second)
		p := PartitionSample{End: int64(1000 * (i + 1)), Lag: 100, Committed: int64(1000*(i+1) - 100), HeadKnown: true, HeadTime: at.Add(-time.Second)}
		s := sample(at, 1, p)
		if c.sinceAck > 0 {
			s.LastAck = at.Add(-c.sinceAck)
		}
		if st := tr.Observe(s, at); st.AckedWithin != c.want {
			t.Errorf("reading %d, %v after the last ack: AckedWithin %v, want %v", i+1, c.sinceAck, st.AckedWithin, c.want)
		}
	}
}
