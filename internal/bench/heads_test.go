package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
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

// TestTrueHeadAgeThroughConsumers runs every consumer of the bench (on
// kfake: commit per poll, the guard, the hook, the workers, the autocommits
// and marks;
// on the embedded nats-server: ack each and ack batch; each marks what it
// processed in its own loop) on a backlog of 1,000 stored records created
// 5 ms apart, at 400/s: while they work through it, the true head age is
// the age of the record in hand, told by how many they had processed just
// before and just after the reading (not by the poll's first record, which
// is up to 5 s older); once all are processed it is 0.
func TestTrueHeadAgeThroughConsumers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake and the embedded nats-server for about 30s")
	}
	scn := Scenario{Normal: 400, Slow: 400, NormalFor: time.Minute, Deadline: time.Hour,
		Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
	kinds := []ConsumerKind{CommitPerPoll, Guard, Hook, Workers, AutoCommit5s, JavaAutoCommit5s, AutoCommit1s, Marks20ms, AckEach, AckBatch}
	for _, kind := range kinds {
		broker := BrokerKafka
		if !kind.kafkaKind() {
			broker = BrokerNATS
		}
		t.Run(string(kind), func(t *testing.T) {
			ctx := context.Background()
			start := time.Now()
			w, rec := headsWorld(t, broker, start)
			base := start.Add(-5 * time.Second)
			created := func(i int) time.Time { return base.Add(time.Duration(i) * 5 * time.Millisecond) }
			const n = 1000
			storeBacklog(t, w, rec, n, created)

			// The hook reports to nowhere: its reporter fails quietly.
			c, err := startConsumer(ctx, w, scn, rec, kind, 1, "http://127.0.0.1:1", slog.New(slog.NewTextHandler(io.Discard, nil)), false)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			processed := func() int { return processedOf(rec) }
			checked := 0
			deadline := time.Now().Add(30 * time.Second)
			for processed() < n && time.Now().Before(deadline) {
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
			if k := processed(); k < n {
				t.Fatalf("%d of %d processed", k, n)
			}
			if a := rec.heads.age(time.Now()); a != 0 {
				t.Errorf("all processed, true head age %v, want 0", a)
			}
			t.Logf("%d readings checked", checked)
		})
	}
}

// headsWorld starts a fresh broker world of the given kind for a test
// (closed when it ends) and a one-class recorder of 100 ms bins begun at
// start.
func headsWorld(t *testing.T, broker string, start time.Time) (*world, *recorder) {
	t.Helper()
	w, err := startWorld(context.Background(), Options{}, Row{Broker: broker}, runID(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	rec := newRecorder(1, time.Minute, 100*time.Millisecond)
	rec.begin(start)
	return w, rec
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

// TestGuardSkipsCountAtOnce: records the guard skips as expired are
// handled the moment they are skipped (ccbad5e: the guard's Progress).
// Each partition holds 60 fresh records then 3 expired ones, and the guard
// works through the partitions one after another: while a later
// partition's fresh records are processed, an earlier partition's skipped
// ones must not read as waiting. Red at a84f84e (marked when Process
// returned); red at the end check with ccbad5e's Progress wiring removed
// (never marked).
//
// The check reads the partitions' processed prefixes, not the head age
// alone: between a partition's last fresh record and its skips, the
// expired record is that partition's head for an instant, however the
// skips are marked, and a sample there on a loaded machine reads an hour.
// What tells the two apart is whether another partition's fresh records
// are being processed meanwhile.
func TestGuardSkipsCountAtOnce(t *testing.T) {
	scn := Scenario{Normal: 400, Slow: 400, NormalFor: time.Minute, Deadline: 2 * time.Second,
		Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
	ctx := context.Background()
	now := time.Now()
	w, rec := headsWorld(t, BrokerKafka, now)
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.kafkaAddrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const fresh = 60
	var rs []*kgo.Record
	for p := range int32(partitions) {
		for i := range fresh {
			c := now.Add(3*time.Second + time.Duration(i)*time.Millisecond) // fresh however long the group takes to join
			rs = append(rs, &kgo.Record{Topic: w.topic, Partition: p, Value: encode(c, 0), Timestamp: c})
		}
		for range 3 { // expired an hour ago
			c := now.Add(-time.Hour)
			rs = append(rs, &kgo.Record{Topic: w.topic, Partition: p, Value: encode(c, 0), Timestamp: c})
		}
	}
	for _, res := range cl.ProduceSync(ctx, rs...) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		rec.ackedAt(0, kafkaAt(res.Record))
	}
	c, err := startKafkaConsumer(ctx, w, scn, rec, Guard, 0, 1, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var late []string
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		if s := skipsWaiting(&rec.heads, fresh); s != "" && len(late) < 5 {
			late = append(late, s)
		}
		time.Sleep(time.Millisecond)
	}
	// Once the guard is through, the skipped records are handled.
	if a := rec.heads.age(time.Now()); a != 0 {
		t.Fatalf("every record handled or skipped, true head age %v, want 0", a)
	}
	// While fresh records were worked through, the skipped ones were
	// already handled.
	if len(late) > 0 {
		t.Errorf("skipped records still waiting while another partition's fresh ones were processed (skips not counted as handled at once): %v", late)
	}
}

// skipsWaiting returns a description of the first partition whose
// processed prefix ends at its expired records (offset fresh, its first
// expired one) while another partition is partway through its fresh ones;
// "" when there is none. The topic is new: offsets start at 0.
func skipsWaiting(h *heads, fresh int64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	waiting, busy := int32(-1), int32(-1)
	for p := range h.parts {
		switch next := h.parts[p].next; {
		case next == fresh:
			waiting = int32(p)
		case next > 0 && next < fresh:
			busy = int32(p)
		}
	}
	if waiting < 0 || busy < 0 {
		return ""
	}
	return fmt.Sprintf("p%d's skips waiting while p%d at offset %d", waiting, busy, h.parts[busy].next)
}

// TestTrueHeadAgeEveryProducer: every sender the bench runs (naive and
// SDK, Kafka and NATS; sync, async and batch calls) tells the measure where
// its acked records were stored. Three calls of each, nothing consumed: the
// head is the first record, created 10 s ago. (TestTrueHeadAgeThroughConsumers
// stores its backlog with its own client, so no test ran these paths.)
func TestTrueHeadAgeEveryProducer(t *testing.T) {
	scn := Scenario{Normal: 400, Slow: 400, NormalFor: time.Minute, Deadline: time.Hour,
		Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
	for _, broker := range []string{BrokerKafka, BrokerNATS} {
		for _, sdk := range []bool{false, true} {
			for _, call := range []string{"sync", "async", "batch"} {
				name := broker + "/" + map[bool]string{false: "naive", true: "sdk"}[sdk] + "/" + call
				t.Run(name, func(t *testing.T) {
					ctx := context.Background()
					w, rec := headsWorld(t, broker, time.Now())
					var (
						s   sender
						err error
					)
					switch {
					case broker == BrokerKafka && !sdk:
						s, err = newNaiveKafka(w, scn, rec)
					case !sdk:
						s = newNaiveNATS(w, rec)
					case broker == BrokerKafka:
						s, err = newSDKKafka(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, scn, w, "http://127.0.0.1:1", rec)
					default:
						s, err = newSDKNATS(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, scn, w, "http://127.0.0.1:1", rec)
					}
					if err != nil {
						t.Fatal(err)
					}
					base := time.Now().Add(-10 * time.Second)
					for i := range 3 {
						c := base.Add(time.Duration(i) * time.Millisecond)
						switch call {
						case "sync":
							s.sync(ctx, 0, c)
						case "async":
							s.async(ctx, 0, c)
						default:
							s.batch(ctx, 0, []time.Time{c})
						}
					}
					var acked int64
					for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
						acked = 0
						for b := range rec.n {
							acked += rec.acked[0][b].Load()
						}
						if acked == 3 {
							break
						}
					}
					s.close()
					got := rec.heads.age(time.Now())
					if want := time.Since(base); acked != 3 || (got-want).Abs() > 100*time.Millisecond {
						t.Errorf("%d acked, true head age %v, want 3 and %v", acked, got, want)
					}
				})
			}
		}
	}
}

// TestTrueHeadAgeAfterPartialTrim: the trim of the processed prefix
// keeps the offsets it did not drop where they were (the memory subtest
// only trims everything, which a trim that forgets to move base also
// passes). 10,000 stored 1 ms apart, the first 6,000 processed: the head
// is offset 6,000.
func TestTrueHeadAgeAfterPartialTrim(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var h heads
	for off := range int64(10_000) {
		h.stored(3, off, t0.Add(time.Duration(off)*time.Millisecond))
	}
	for off := range int64(6_000) {
		h.processed(3, off)
	}
	now := t0.Add(20 * time.Second)
	if got, want := h.age(now), now.Sub(t0.Add(6*time.Second)); got != want {
		t.Errorf("true head age %v, want %v (offset 6,000)", got, want)
	}
	if n := len(h.parts[3].created); n > 5_000 {
		t.Errorf("%d slots kept for 4,000 unprocessed", n)
	}
	// Acks of offsets already stored arrive again after the trim (a
	// late ack): the slot of 6,001 is overwritten in place, not elsewhere.
	h.stored(3, 9_999, t0)
	h.processed(3, 9_998)
	if got, want := h.age(now), 20*time.Second; got != want {
		t.Errorf("after a late ack of 9,999: %v, want %v", got, want)
	}
}

// TestHeadsTrimAmortised: the processed prefix is dropped once it is half
// of what is kept (and over 4,096 records), not at every record: a backlog
// of 10,000 worked through one record at a time is trimmed twice (at
// 5,001 and 9,098 processed), each trim a copy of what is left. Trimmed
// at every record, the drain copies the rest each time: quadratic in the
// backlog (BenchmarkHeads/drain-40k).
func TestHeadsTrimAmortised(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var h heads
	for off := range int64(10_000) {
		h.stored(0, off, t0)
	}
	var trims []int64
	for off := range int64(10_000) {
		base := h.parts[0].base
		h.processed(0, off)
		if h.parts[0].base != base {
			trims = append(trims, off+1)
		}
	}
	if len(trims) != 2 || trims[0] != 5_001 || trims[1] != 9_098 {
		t.Errorf("the processed prefix was dropped %d times, at %v processed (first ones), want at 5,001 and 9,098", len(trims), trims[:min(len(trims), 5)])
	}
}

// BenchmarkHeads: one record stored and processed (the steady state),
// a 10x run's worst backlog (4,000/s for 60 s, 6 partitions, nothing
// processed): its memory and one sample's scan; and that backlog's
// partition (40,000 records) processed one record at a time (ns/op per
// record: the trims' copies, amortised).
func BenchmarkHeads(b *testing.B) {
	t0 := time.Unix(1_800_000_000, 0)
	b.Run("store+process", func(b *testing.B) {
		var h heads
		for i := range b.N {
			p, off := int32(i%6), int64(i/6)
			h.stored(p, off, t0)
			h.processed(p, off)
		}
	})
	b.Run("backlog-240k", func(b *testing.B) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		var h heads
		for i := range 240_000 {
			h.stored(int32(i%6), int64(i/6), t0.Add(time.Duration(i)*250*time.Microsecond))
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ResetTimer()
		for range b.N {
			_ = h.age(t0.Add(time.Minute))
		}
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/1e6, "MB-held")
	})
	b.Run("drain-40k", func(b *testing.B) {
		var h heads
		for i := range b.N {
			off := int64(i % 40_000)
			if off == 0 {
				b.StopTimer()
				h = heads{}
				for o := range int64(40_000) {
					h.stored(0, o, t0)
				}
				b.StartTimer()
			}
			h.processed(0, off)
		}
	})
}

// TestNaiveNATSCloseCountsLastAcks: close counts the acks of the last
// async publishes that its collector had not reached, as stored (before,
// they were dropped: 1 of 3 counted when close came right after the
// publishes).
func TestNaiveNATSCloseCountsLastAcks(t *testing.T) {
	w, rec := headsWorld(t, BrokerNATS, time.Now())
	n := newNaiveNATS(w, rec)
	for range 3 {
		n.async(context.Background(), 0, time.Now())
	}
	tot := n.close()
	var acked int64
	for b := range rec.n {
		acked += rec.acked[0][b].Load()
	}
	if acked != 3 {
		t.Errorf("%d stored, %d failed of 3 published", acked, tot.Failed)
	}
}

// TestSamplerStoresTrueHeadAge: the sampler stores the bench's own measure
// in Series.TrueHeadAge, whatever the daemon reads. Ten records created
// 5 s before the start are stored on kfake and none is processed; the
// daemon watches the run's group, which no consumer joined, so it knows
// no head for it. Every bin sampled holds the age of the oldest record at
// its sample: 5 s plus the time since the start.
func TestSamplerStoresTrueHeadAge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake and the daemon for a few seconds")
	}
	ctx := context.Background()
	start := time.Now()
	w, rec := headsWorld(t, BrokerKafka, start)
	base := start.Add(-5 * time.Second)
	storeBacklog(t, w, rec, 10, func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) })
	d, err := startDaemon(ctx, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, testScenario(), w, 250*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.stop() }()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sample(sctx, rec, d, w, &fleet{s: &slowSender{}})
	}()
	// Until three bins are sampled (ticks are missed on a loaded
	// machine), at most 20 s.
	sampled := func() (n int) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, a := range rec.trueHeadAge {
			if !math.IsNaN(a) {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(20 * time.Second); sampled() < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	upTo := time.Since(base).Seconds()
	if n := sampled(); n < 3 {
		t.Fatalf("%d bins sampled in 20 s", n)
	}
	for i, a := range rec.trueHeadAge {
		// Bin i is sampled at its end (100 ms bins), up to a tick late.
		if lo := 5 + 0.1*float64(i); !math.IsNaN(a) && (a < lo || a > upTo) {
			t.Errorf("bin %d: true head age %.3f s, want %.3f-%.3f s (the oldest stored record's age; the daemon read %.3f s)", i, a, lo, upTo, rec.headAge[i])
		}
	}
}
