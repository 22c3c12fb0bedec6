package bench

import (
	"context"
	"sort"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// headEvent is one thing that happens to a record in a scripted run: its
// producer learns it was stored, or the consumers finish it.
type headEvent struct {
	at      time.Duration
	part    int32
	off     int64
	created time.Duration // stored events only
	stored  bool
}

// replayHeads feeds the events in time order to a heads and returns the
// true head age sampled every 100 ms from 100 ms to until.
func replayHeads(evs []headEvent, t0 time.Time, until time.Duration) []time.Duration {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var h heads
	var out []time.Duration
	k := 0
	for s := 100 * time.Millisecond; s <= until; s += 100 * time.Millisecond {
		for ; k < len(evs) && evs[k].at <= s; k++ {
			e := evs[k]
			if e.stored {
				h.stored(e.part, e.off, t0.Add(e.created))
			} else {
				h.processed(e.part, e.off)
			}
		}
		out = append(out, h.age(t0.Add(s)))
	}
	return out
}

// produced400 is n records created at 400/s from 0, round robin over
// parts partitions, each acked 3 ms after its creation; offsets count per
// partition.
func produced400(n int, parts int32) (evs []headEvent, created []time.Duration, where [][2]int64) {
	next := make([]int64, parts)
	for i := range n {
		c := time.Duration(i) * 2500 * time.Microsecond
		p := int32(i) % parts
		evs = append(evs, headEvent{at: c + 3*time.Millisecond, part: p, off: next[p], created: c, stored: true})
		created = append(created, c)
		where = append(where, [2]int64{int64(p), next[p]})
		next[p]++
	}
	return evs, created, where
}

// TestTrueHeadAge checks the bench's true head age in runs whose answer is
// known: the age of the oldest record stored and not processed.
func TestTrueHeadAge(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	near := func(got, want time.Duration) bool { return (got - want).Abs() <= 5*time.Millisecond }

	t.Run("a consumer that processes nothing for 3s", func(t *testing.T) {
		// 1,200 records stored at 400/s over 6 partitions, none
		// processed: the head is the first record, created at 0, so
		// the age is the time since 0, 3s at the end.
		evs, _, _ := produced400(1200, 6)
		ages := replayHeads(evs, t0, 3*time.Second)
		for i, a := range ages {
			if want := time.Duration(i+1) * 100 * time.Millisecond; !near(a, want) {
				t.Fatalf("at %v: %v, want %v", want, a, want)
			}
		}
	})

	t.Run("a consumer that keeps up", func(t *testing.T) {
		// Each record processed 2 ms after its producer's ack: at any
		// moment at most one record is waiting, at most 5 ms old.
		evs, _, where := produced400(1200, 6)
		for i := range 1200 {
			at := time.Duration(i)*2500*time.Microsecond + 5*time.Millisecond
			evs = append(evs, headEvent{at: at, part: int32(where[i][0]), off: where[i][1]})
		}
		for i, a := range replayHeads(evs, t0, 3*time.Second) {
			if a > 5*time.Millisecond {
				t.Fatalf("bin %d: %v, want ~0", i, a)
			}
		}
	})

	t.Run("a poll of 1,000 in hand at 400/s", func(t *testing.T) {
		// 1,000 records stored at 400/s (created 0 to 2.4975s), polled
		// at once at 2.5s and processed one after the other at 400/s:
		// record k ends at 2.5s + (k+1) x 2.5ms. While record k is in
		// hand it is the head, created at k x 2.5ms: the true age stays
		// at 2.5s. The poll's first record (the daemon's reading for a
		// consumer that reports what it holds) would be 2.5s + k x 2.5ms
		// old, up to 5s.
		evs, created, where := produced400(1000, 6)
		for k := range 1000 {
			at := 2500*time.Millisecond + time.Duration(k+1)*2500*time.Microsecond
			evs = append(evs, headEvent{at: at, part: int32(where[k][0]), off: where[k][1]})
		}
		ages := replayHeads(evs, t0, 5*time.Second)
		for i, a := range ages {
			s := time.Duration(i+1) * 100 * time.Millisecond
			var want time.Duration
			switch {
			case s <= 2500*time.Millisecond:
				want = s // nothing processed yet: the first record's age
			case s < 5*time.Second:
				// Records 0..k-1 done: record k in hand.
				k := int((s - 2500*time.Millisecond) / (2500 * time.Microsecond))
				want = s - created[k]
			default:
				want = 0 // all processed
			}
			if !near(a, want) {
				t.Fatalf("at %v: %v, want %v", s, a, want)
			}
		}
		if a := ages[39]; !near(a, 2500*time.Millisecond) { // at 4s
			t.Errorf("at 4s: %v, want 2.5s (the poll's first would read 4s)", a)
		}
	})

	t.Run("skipped and out-of-order acks", func(t *testing.T) {
		var h heads
		// Offsets 0-3 on partition 2; the ack of 1 comes last.
		for _, off := range []int64{0, 2, 3} {
			h.stored(2, off, t0.Add(time.Duration(off)*time.Second))
		}
		if a := h.age(t0.Add(10 * time.Second)); a != 10*time.Second {
			t.Errorf("head offset 0: %v, want 10s", a)
		}
		// 0 processed: offset 1 has no ack yet, so the head is 2.
		h.processed(2, 0)
		if a := h.age(t0.Add(10 * time.Second)); a != 8*time.Second {
			t.Errorf("offset 1 unacked: %v, want 8s", a)
		}
		h.stored(2, 1, t0.Add(time.Second))
		if a := h.age(t0.Add(10 * time.Second)); a != 9*time.Second {
			t.Errorf("offset 1 acked: %v, want 9s", a)
		}
		// 1 and 2 skipped as expired (processed), 3 left; processing
		// offset 1 again (a rewind) moves nothing back.
		h.processed(2, 2)
		h.processed(2, 1)
		if a := h.age(t0.Add(10 * time.Second)); a != 7*time.Second {
			t.Errorf("after skips: %v, want 7s", a)
		}
		// An ack that arrives after its record was processed is not
		// counted; nor is a negative partition.
		h.stored(2, 2, t0)
		h.stored(-1, 0, t0)
		h.processed(2, 3)
		if a := h.age(t0.Add(10 * time.Second)); a != 0 {
			t.Errorf("all processed: %v, want 0", a)
		}
	})

	t.Run("memory is given back", func(t *testing.T) {
		var h heads
		for off := range int64(20_000) {
			h.stored(0, off, t0)
			h.processed(0, off)
		}
		if n := len(h.parts[0].created); n > 8192 {
			t.Errorf("%d offsets kept after all were processed", n)
		}
		h.stored(0, 20_000, t0.Add(time.Second))
		if a := h.age(t0.Add(3 * time.Second)); a != 2*time.Second {
			t.Errorf("after trimming: %v, want 2s", a)
		}
	})
}

// TestTrueHeadAgeThroughConsumers runs the bench's own consumers (Kafka
// commit per poll and the guard on kfake, NATS ack each on the embedded
// nats-server) on a
// backlog of 1,000 stored records created 5 ms apart, at 400/s: while they
// work through it, the true head age is the age of the record in hand,
// told by how many they had processed just before and just after the
// reading (not by the poll's first record, which is up to 5 s older).
func TestTrueHeadAgeThroughConsumers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake and the embedded nats-server for about 10s")
	}
	scn := Scenario{Normal: 400, Slow: 400, NormalFor: time.Minute, Deadline: time.Hour,
		Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
	for _, kind := range []ConsumerKind{CommitPerPoll, Guard, AckEach} {
		broker := BrokerKafka
		if !kind.kafkaKind() {
			broker = BrokerNATS
		}
		t.Run(string(kind), func(t *testing.T) {
			ctx := context.Background()
			w, err := startWorld(ctx, Options{}, Row{Broker: broker}, runID(time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			rec := newRecorder(1, time.Minute, 100*time.Millisecond)
			start := time.Now()
			rec.begin(start)
			base := start.Add(-5 * time.Second)
			created := func(i int) time.Time { return base.Add(time.Duration(i) * 5 * time.Millisecond) }
			const n = 1000
			storeBacklog(t, w, rec, n, created)

			var c *consumer
			if broker == BrokerKafka {
				c, err = startKafkaConsumer(ctx, w, scn, rec, kind, "", nil)
			} else {
				c, err = startNATSConsumer(ctx, w, scn, rec, false)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			processed := func() int {
				var k int64
				for b := range rec.n {
					k += rec.good[0][b].Load() + rec.dead[0][b].Load()
				}
				return int(k)
			}
			checked := 0
			deadline := time.Now().Add(30 * time.Second)
			for processed() < 900 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				k1 := processed()
				now := time.Now()
				got := rec.heads.age(now)
				k2 := processed()
				if k1 < 100 || k2 >= n {
					continue
				}
				// The record in hand is at offset k1-1 (counted, not
				// marked yet) to k2.
				lo, hi := now.Sub(created(k2)), now.Sub(created(k1-1))
				if got < lo-time.Millisecond || got > hi+time.Millisecond {
					t.Fatalf("true head age %v with %d-%d processed, want %v-%v (the poll's first: %v)", got, k1, k2, lo, hi, now.Sub(base))
				}
				checked++
			}
			if checked < 5 {
				t.Fatalf("only %d readings while the backlog was worked through (%d processed)", checked, processed())
			}
			t.Logf("%d readings checked", checked)
		})
	}
}

// storeBacklog stores n records created at created(i) in order, on Kafka
// all in partition 0, and records their acks as the bench's producers do.
func storeBacklog(t *testing.T, w *world, rec *recorder, n int, created func(int) time.Time) {
	t.Helper()
	ctx := context.Background()
	if w.broker == BrokerNATS {
		for i := range n {
			m := &natsgo.Msg{Subject: w.subject, Data: encode(created(i), 0)}
			ack, err := w.js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			rec.ackedAt(0, natsAt(ack, m.Data))
		}
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.kafkaAddrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: w.topic, Partition: 0, Value: encode(created(i), 0), Timestamp: created(i)}
	}
	for _, res := range cl.ProduceSync(ctx, rs...) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		rec.ackedAt(0, kafkaAt(res.Record))
	}
}

// TestGuardSkipsAreProcessed checks that a record the guard skips as
// expired stops counting for the true head age the moment it is skipped,
// and is counted as skipped.
func TestGuardSkipsAreProcessed(t *testing.T) {
	rec := newRecorder(1, time.Minute, 100*time.Millisecond)
	start := time.Now()
	rec.begin(start)
	recs := make([]*kgo.Record, 3)
	for i := range recs {
		created := start.Add(-time.Duration(3-i) * time.Second) // 3s, 2s and 1s before the start
		recs[i] = &kgo.Record{Partition: 4, Offset: int64(i), Value: encode(created, 0)}
		rec.ackedAt(0, kafkaAt(recs[i]))
	}
	if a := rec.heads.age(start); a != 3*time.Second {
		t.Fatalf("before: %v, want 3s", a)
	}
	p := skips{rec}
	p.Skipped(recs[0])
	p.Skipped(recs[1])
	p.Finished(recs[0])
	if a := rec.heads.age(start); a != time.Second {
		t.Errorf("after two skips: %v, want 1s (the third record)", a)
	}
	var n int64
	for b := range rec.n {
		n += rec.skipped[0][b].Load()
	}
	if n != 2 {
		t.Errorf("%d skipped, want 2", n)
	}
}
