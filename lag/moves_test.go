package lag

import (
	"testing"
	"time"
)

// TestMovesWithin: whether a target's position is known to move at least
// every 250 ms (the daemon's engaged cadence is for such targets only).
// A consumer committing every second, read every second and then every
// 250 ms, is not (its commits are lumps a 250 ms span holds whole or not
// at all); one committing every 200 ms is not either while read every
// second (the readings cannot show a cadence finer than their spacing),
// and is once read every 250 ms. A consumer's fresh report is; acks the
// broker processed within 250 ms of each of the last 4 readings are,
// and one reading 600 ms after the last ack takes that away for 4
// readings. Red without the commit cadence clause (the 200 ms consumer
// read at 250 ms), without AckAge, and with AckAge of the newest reading
// alone (the readings after the late one).
func TestMovesWithin(t *testing.T) {
	const d = 250 * time.Millisecond
	commits := func(every, spacing time.Duration, n int) State {
		s := sim{produce: 400, behind: 0.5, commitEvery: every, commitPhase: sec(0.3)}
		tr := NewTracker(nil)
		var st State
		for i := 1; i <= n; i++ {
			at := time.Duration(i) * spacing
			st = tr.Observe(sample(t0.Add(at), 1, s.reading(at)), t0.Add(at))
		}
		return st
	}
	for _, c := range []struct {
		name string
		st   State
		d    time.Duration
		want bool
	}{
		{"1 s commits, 1 s readings", commits(time.Second, time.Second, 10), d, false},
		{"1 s commits, 250 ms readings", commits(time.Second, d, 40), d, false},
		{"200 ms commits, 1 s readings", commits(200*time.Millisecond, time.Second, 10), d, false},
		{"200 ms commits, 250 ms readings", commits(200*time.Millisecond, d, 40), d, true},
		{"200 ms commits, 250 ms readings, off", commits(200*time.Millisecond, d, 40), 0, false},
		// Readings 260 ms apart (the loop's 250 ms and what each
		// observation took) of a consumer that commits every 50 ms
		// learn 260 ms: fine (red with CommitInterval <= d alone).
		{"50 ms commits, 260 ms readings", commits(50*time.Millisecond, 260*time.Millisecond, 40), d, true},
		{"1 s commits, 260 ms readings", commits(time.Second, 260*time.Millisecond, 40), d, false},
	} {
		if got := c.st.MovesWithin(c.d); got != c.want {
			t.Errorf("%s: MovesWithin(%v) %v, want %v (commit interval %v, source %s)", c.name, c.d, got, c.want, c.st.CommitInterval, c.st.Source)
		}
	}

	// The bound for Kafka commits learned at the readings' spacing: 1.5x
	// d and no more; a NATS ack floor keeps to d (its acks say more).
	for _, c := range []struct {
		kind Kind
		ci   time.Duration
		want bool
	}{
		{KindKafka, 370 * time.Millisecond, true}, {KindKafka, 400 * time.Millisecond, false},
		{KindNATS, 250 * time.Millisecond, true}, {KindNATS, 300 * time.Millisecond, false},
	} {
		st := State{Target: Target{Kind: c.kind, Cluster: "c", Topic: "t", Group: "g"}, CommitInterval: c.ci}
		if got := st.MovesWithin(d); got != c.want {
			t.Errorf("%s, commit interval %v: MovesWithin(%v) %v, want %v", c.kind, c.ci, d, got, c.want)
		}
	}

	tr := NewTracker(nil)
	p := PartitionSample{End: 1000, Lag: 100, Committed: 900, HeadKnown: true, HeadTime: t0}
	p.Reported = Report{At: t0.Add(time.Second), Position: 950}
	if st := tr.Observe(sample(t0.Add(time.Second), 1, p), t0.Add(time.Second)); st.Source != SourceConsumer || !st.MovesWithin(d) {
		t.Errorf("a fresh report: source %s, MovesWithin %v, want consumer, true", st.Source, st.MovesWithin(d))
	}

	tr = NewTracker(nil)
	for i, c := range []struct {
		sinceAck time.Duration // 0: no ack known
		want     bool
	}{
		{30 * time.Millisecond, false}, {10 * time.Millisecond, false}, {40 * time.Millisecond, false},
		{20 * time.Millisecond, true}, {50 * time.Millisecond, true},
		{600 * time.Millisecond, false}, {10 * time.Millisecond, false}, {10 * time.Millisecond, false}, {10 * time.Millisecond, false},
		{10 * time.Millisecond, true},
		{0, false}, {10 * time.Millisecond, false},
	} {
		at := t0.Add(time.Duration(i+1) * time.Second)
		p := PartitionSample{End: int64(1000 * (i + 1)), Lag: 100, Committed: int64(1000*(i+1) - 100), HeadKnown: true, HeadTime: at.Add(-time.Second)}
		s := sample(at, 1, p)
		if c.sinceAck > 0 {
			s.LastAck = at.Add(-c.sinceAck)
		}
		if st := tr.Observe(s, at); st.MovesWithin(d) != c.want {
			t.Errorf("reading %d, %v after the last ack: MovesWithin %v (ack age %v), want %v", i+1, c.sinceAck, st.MovesWithin(d), st.AckAge, c.want)
		}
	}
}
