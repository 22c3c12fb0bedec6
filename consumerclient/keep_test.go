package consumerclient

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// keepStep is one thing the consumer does to a hooked reporter: poll
// (the offsets handed out, partition 0 of topic "t"), or finish.
type keepStep struct {
	poll     []int64
	done     []int64 // Done, one record each
	finished int64   // Finished through this offset; -1: none
	revoke   bool    // Revoked(t: 0)
}

// keepWant is partition 0's report after a step: in hand at position
// with held unfinished, the oldest at offset head, or idle at position;
// absent: not reported.
type keepWant struct {
	position int64
	held     int64
	head     int64
	idle     bool
	absent   bool
}

// TestKafkaKeepUntilFinished: with Config.KeepUntilFinished, a record
// stays in hand across polls until Done or Finished says it is finished;
// the position counts the records finished whatever the order (the offset
// after the last polled less the unfinished), the head is the oldest
// unfinished record; the default mode finishes a poll's records at the
// next poll, as it always did.
func TestKafkaKeepUntilFinished(t *testing.T) {
	poll := func(offs ...int64) keepStep { return keepStep{poll: append([]int64{}, offs...), finished: -1} }
	done := func(offs ...int64) keepStep { return keepStep{done: offs, finished: -1} }
	through := func(off int64) keepStep { return keepStep{finished: off} }
	revoke := keepStep{revoke: true, finished: -1}
	in := func(pos, held int64) keepWant { return keepWant{position: pos, held: held, head: pos} }
	// at: finished out of order, the oldest unfinished at head.
	at := func(pos, held, head int64) keepWant { return keepWant{position: pos, held: held, head: head} }
	idle := func(pos int64) keepWant { return keepWant{position: pos, idle: true} }
	cases := []struct {
		name  string
		keep  bool
		steps []keepStep
		want  []keepWant // after each step
	}{
		// The records of a poll wait in a worker's queue while the loop
		// polls on: still in hand, the position at the oldest.
		{"kept across polls", true,
			[]keepStep{poll(0, 1, 2), poll(3, 4), poll(), done(0), done(1, 2, 3, 4)},
			[]keepWant{in(0, 3), in(0, 5), in(0, 5), in(1, 4), idle(5)}},
		// The default mode: the next poll finishes them (unchanged).
		{"default: finished at the next poll", false,
			[]keepStep{poll(0, 1, 2), poll(3, 4), poll(), done(3)},
			[]keepWant{in(0, 3), in(3, 2), idle(5), idle(5)}},
		// A pool of workers finishes out of order: the position moves
		// with every record finished, the head stays the oldest
		// unfinished, held counts the unfinished.
		{"out of order", true,
			[]keepStep{poll(0, 1, 2, 3, 4), done(2), done(4), done(0), done(1), done(3)},
			[]keepWant{in(0, 5), at(1, 4, 0), at(2, 3, 0), at(3, 2, 1), at(4, 1, 3), idle(5)}},
		// A record finished twice, or never polled, changes nothing.
		{"done twice, unknown", true,
			[]keepStep{poll(0, 1, 2), done(1), done(1), done(7)},
			[]keepWant{in(0, 3), at(1, 2, 0), at(1, 2, 0), at(1, 2, 0)}},
		// Finished finishes everything through its record, including
		// some finished out of order before.
		{"finished through", true,
			[]keepStep{poll(0, 1, 2, 3, 4), done(3), through(1), through(3)},
			[]keepWant{in(0, 5), at(1, 4, 0), at(3, 2, 2), in(4, 1)}},
		// Offsets with gaps (compaction, transactions): Done finds them;
		// the position counts the gaps before the last record polled as
		// finished.
		{"gaps", true,
			[]keepStep{poll(10, 13, 20), done(13), done(10)},
			[]keepWant{at(18, 3, 10), at(19, 2, 10), in(20, 1)}},
		// A record polled again (assigned again, a seek back): what was in
		// hand is forgotten, the records come again.
		{"polled again", true,
			[]keepStep{poll(0, 1, 2, 3), done(1), poll(2, 3), done(2)},
			[]keepWant{in(0, 4), at(1, 3, 0), in(2, 2), in(3, 1)}},
		// The last record polled, polled again, is polled again too.
		{"last polled again", true,
			[]keepStep{poll(0, 1, 2), done(0), poll(2)},
			[]keepWant{in(0, 3), in(1, 2), in(2, 1)}},
		// Revoked forgets the partition: its queued records are dropped.
		{"revoked", true,
			[]keepStep{poll(0, 1, 2), revoke, done(0), poll(3), done(3)},
			[]keepWant{in(0, 3), {absent: true}, {absent: true}, in(3, 1), idle(4)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, h := hookOnly(t, tc.keep)
			rec := func(off int64) *kgo.Record {
				return &kgo.Record{Topic: "t", Offset: off, Timestamp: time.UnixMilli(1_000_000 + off)}
			}
			for i, s := range tc.steps {
				if s.poll != nil {
					h.OnPollStart(context.Background())
					for _, off := range s.poll {
						h.OnFetchRecordUnbuffered(rec(off), true)
					}
				}
				for _, off := range s.done {
					rep.Done(rec(off))
				}
				if s.finished >= 0 {
					rep.Finished(rec(s.finished))
				}
				if s.revoke {
					rep.Revoked(map[string][]int32{"t": {0}})
				}
				_, topics := rep.snapshot(time.Now())
				w := tc.want[i]
				if w.absent {
					if len(topics) != 0 {
						t.Errorf("step %d: reported %+v, want nothing", i, topics)
					}
					continue
				}
				if len(topics) != 1 || len(topics[0].Partitions) != 1 {
					t.Fatalf("step %d: reported %+v, want partition 0 of t", i, topics)
				}
				p := topics[0].Partitions[0]
				if p.Position != w.position || p.Idle != w.idle || p.Held != w.held {
					t.Errorf("step %d: position %d idle %v held %d, want %d %v %d", i, p.Position, p.Idle, p.Held, w.position, w.idle, w.held)
				}
				if !p.Idle && p.HeadTimeMs != 1_000_000+w.head {
					t.Errorf("step %d: head time %d, want the timestamp of offset %d", i, p.HeadTimeMs, w.head)
				}
			}
		})
	}
}

// hookOnly is a reporter of group "g" whose hook the test calls itself
// (no client: every partition it saw is reported), sending nowhere.
func hookOnly(tb testing.TB, keep bool) (*KafkaReporter, *kafkaHook) {
	tb.Helper()
	rep, err := NewKafkaReporter(Config{URL: "http://127.0.0.1:1", Group: "g", Interval: time.Second, KeepUntilFinished: keep})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rep.Close)
	return rep, rep.Hook().(*kafkaHook)
}

// TestKafkaKeepHeldFor: with KeepUntilFinished, a poll does not restart
// the time for which the consumer has finished nothing (its workers may
// be stuck on records of earlier polls); a partition that had nothing in
// hand counts from when it took its first record.
func TestKafkaKeepHeldFor(t *testing.T) {
	rep, h := hookOnly(t, true)
	rec := func(p int32, off int64) *kgo.Record {
		return &kgo.Record{Topic: "t", Partition: p, Offset: off, Timestamp: time.Now()}
	}
	h.OnPollStart(context.Background())
	h.OnFetchRecordUnbuffered(rec(0, 0), true)
	rep.mu.Lock()
	// The partition took its record 10 s ago; nothing finished since.
	rep.parts[topicPartition{"t", 0}].taken = time.Now().Add(-10 * time.Second)
	rep.mu.Unlock()
	h.OnPollStart(context.Background())
	h.OnFetchRecordUnbuffered(rec(0, 1), true)
	h.OnFetchRecordUnbuffered(rec(1, 0), true) // partition 1 takes its first now
	_, topics := rep.snapshot(time.Now())
	ps := topics[0].Partitions
	if ps[0].HeldMs < 10_000 || ps[0].Held != 2 {
		t.Errorf("partition 0: %d held for %d ms, want 2 for 10,000 ms or more (the poll restarts nothing)", ps[0].Held, ps[0].HeldMs)
	}
	if ps[1].HeldMs >= 10_000 {
		t.Errorf("partition 1 took its record now, held for %d ms", ps[1].HeldMs)
	}
	// A record finished restarts it for every partition.
	rep.Done(rec(0, 0))
	_, topics = rep.snapshot(time.Now())
	if ms := topics[0].Partitions[0].HeldMs; ms >= 10_000 {
		t.Errorf("after a Done, partition 0 held for %d ms", ms)
	}
}

// TestKafkaKeepBounded: a consumer that never says what it finished holds
// at most keepMax records a partition; the oldest are taken as finished.
func TestKafkaKeepBounded(t *testing.T) {
	rep, h := hookOnly(t, true)
	r := &kgo.Record{Topic: "t", Timestamp: time.Now()}
	for off := range int64(keepMax + 10) {
		r.Offset = off
		h.OnFetchRecordUnbuffered(r, true)
	}
	_, topics := rep.snapshot(time.Now())
	p := topics[0].Partitions[0]
	if p.Held != keepMax || p.Position != 10 {
		t.Errorf("held %d from %d, want the newest %d from 10", p.Held, p.Position, keepMax)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if n := cap(rep.parts[topicPartition{"t", 0}].inHand); n > 2*keepMax {
		t.Errorf("%d records of room for %d held", n, keepMax)
	}
}

// TestKafkaKeepRebalance: a goroutine-per-partition consumer (KeepUntil
// Finished, its workers stuck) loses partitions to a second member: its
// revoke callback's Revoked forgets them at once, they are reported no
// more, and the partitions it keeps are still reported
// in hand at their first record (the default mode would read them idle);
// once the workers finish, idle at the end.
func TestKafkaKeepRebalance(t *testing.T) {
	const topic, group = "keep-rebalance", "g"
	c, rep := fourPartitions(t, topic, true)
	var revoked atomic.Int64
	forget := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		rep.Revoked(m)
		// Gone at once, before any report asks the client.
		rep.mu.Lock()
		defer rep.mu.Unlock()
		for tp, ps := range m {
			for _, n := range ps {
				revoked.Add(1)
				if rep.parts[topicPartition{tp, n}] != nil {
					t.Errorf("partition %d still in hand after Revoked", n)
				}
			}
		}
	}
	cl1 := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()),
		kgo.OnPartitionsRevoked(forget), kgo.OnPartitionsLost(forget))
	var queued []*kgo.Record // the workers' queues: nothing finished yet
	for len(queued) < 12 {
		queued = append(queued, pollN(t, cl1, 1)...)
	}
	inHand := func() map[int32]quotaproto.ConsumerPartition {
		_, topics := rep.snapshot(time.Now())
		out := map[int32]quotaproto.ConsumerPartition{}
		for _, tp := range topics {
			for _, p := range tp.Partitions {
				out[p.Partition] = p
			}
		}
		return out
	}
	if ps := inHand(); len(ps) != 4 || ps[0].Idle || ps[0].Held != 3 {
		t.Fatalf("alone in the group: %+v, want 4 partitions with 3 in hand each", ps)
	}
	cl2 := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for _, cl := range []*kgo.Client{cl1, cl2} {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				cl.PollFetches(ctx)
			}
		}()
	}
	defer func() { cancel(); <-done; <-done }()
	var kept map[int32]quotaproto.ConsumerPartition
	waitFor(t, "the first member reports only the partitions it kept", func() bool {
		kept = inHand()
		return len(kept) > 0 && len(kept) < 4
	})
	if revoked.Load() == 0 {
		t.Error("no partition revoked")
	}
	for n, p := range kept {
		if p.Idle || p.Position != 0 || p.Held != 3 {
			t.Errorf("kept partition %d: %+v, want its 3 queued records in hand from 0", n, p)
		}
	}
	// The workers of the kept partitions finish their queues.
	for _, r := range queued {
		if _, ok := kept[r.Partition]; ok {
			rep.Done(r)
		}
	}
	after := inHand()
	for n, p := range after {
		if !p.Idle || p.Position != 3 {
			t.Errorf("partition %d after its worker finished: %+v, want idle at 3", n, p)
		}
	}
	if len(after) != len(kept) {
		t.Errorf("%d partitions reported after the workers finished, want the %d kept", len(after), len(kept))
	}
}

// TestKafkaKeepWorkerPool: a consumer whose poll loop polls on and hands
// records to a pool of four workers, which finish them in any order, one
// of them stuck on offset 7: the reporter says partition 0 has that one
// record unfinished, its head time offset 7's, its position 19 (the 19
// others finished: a lag of 1; the default mode would read it idle at 20),
// then idle at 20 once it is finished.
func TestKafkaKeepWorkerPool(t *testing.T) {
	const topic = "keep-pool"
	c := newKafkaCluster(t, topic, 1)
	stamp := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	produce(t, c, topic, 0, 20, stamp)
	rep, _ := hookOnly(t, true)
	cl := newKafkaClient(t, c, kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	ctx, cancel := context.WithCancel(context.Background())
	queue, gate := make(chan *kgo.Record, 20), make(chan struct{})
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, r := range cl.PollFetches(ctx).Records() {
				queue <- r // room for all 20
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case r := <-queue:
					if r.Offset == 7 {
						select {
						case <-gate:
						case <-ctx.Done():
							return
						}
					}
					rep.Done(r)
				}
			}
		})
	}
	report := func() quotaproto.ConsumerPartition {
		_, topics := rep.snapshot(time.Now())
		if len(topics) == 0 {
			return quotaproto.ConsumerPartition{}
		}
		return topics[0].Partitions[0]
	}
	waitFor(t, "the other 19 finished", func() bool { return report().Held == 1 })
	if p := report(); p.Position != 19 || p.Idle || p.HeadTimeMs != stamp.Add(7*time.Millisecond).UnixMilli() {
		t.Errorf("offset 7 stuck, the rest finished: %+v, want in hand at 19 with offset 7's timestamp", p)
	}
	close(gate)
	waitFor(t, "idle at 20", func() bool { p := report(); return p.Idle && p.Position == 20 })
}

// keepRoom reports the room of partition 0 of "t"'s slice.
func keepRoomOf(rep *KafkaReporter) int {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return cap(rep.parts[topicPartition{"t", 0}].inHand)
}

// TestKafkaKeepCapCountsUnfinished: the cap counts the records not
// finished. A pool stuck on offset 0 whose workers finish every other
// record, more than keepMax of them, still has offset 0 in hand (its head
// age read), one unfinished; no warning is logged, and the slice stays
// small. One whose workers finish one record in four, keepMax in all in
// hand, still has offset 0 too. A consumer that finishes nothing is
// warned once, however long.
func TestKafkaKeepCapCountsUnfinished(t *testing.T) {
	var warned atomic.Int64
	logger := slog.New(countHandler{&warned})
	n := int64(keepMax + 1000)
	for _, every := range []int64{1, 4, 0} { // Done for one record in every (0: none), offset 0 never
		warned.Store(0)
		rep, err := NewKafkaReporter(Config{URL: "http://127.0.0.1:1", Group: "g", KeepUntilFinished: true, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		rep.Close() // no sender: the test takes the reports
		h := rep.Hook().(*kafkaHook)
		start := time.Now().Truncate(time.Millisecond)
		done := int64(0)
		for off := range n {
			r := &kgo.Record{Topic: "t", Offset: off, Timestamp: start.Add(time.Duration(off) * time.Microsecond)}
			h.OnFetchRecordUnbuffered(r, true)
			if every > 0 && off%every == 1%every && off > 0 {
				rep.Done(r)
				done++
			}
		}
		_, topics := rep.snapshot(time.Now())
		p := topics[0].Partitions[0]
		if every > 0 {
			if p.Idle || p.Held != n-done || p.HeadTimeMs != start.UnixMilli() || p.Position != done || warned.Load() != 0 {
				t.Errorf("offset 0 unfinished, one in %d Done: %+v, %d warnings; want %d held at %d, offset 0's head, none",
					every, p, warned.Load(), n-done, done)
			}
			if room := keepRoomOf(rep); every == 1 && room > keepRoom {
				t.Errorf("1 record unfinished, room for %d kept", room)
			}
			continue
		}
		if p.Held != keepMax || p.Position != n-keepMax || warned.Load() != 1 {
			t.Errorf("nothing finished: %+v, %d warnings; want the newest %d held, 1 warning", p, warned.Load(), keepMax)
		}
	}
}

// countHandler counts the records logged at Warn or above.
type countHandler struct{ n *atomic.Int64 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TestKafkaKeepGivesRoomBack: a partition's slice gives its memory back
// once mostly empty: after a burst of 100,000 records finished in one
// Finished, or all but one finished out of order (Done); a worker always
// one record behind, or a pool stuck on one record that finishes the
// others as they come, keeps a small one.
func TestKafkaKeepGivesRoomBack(t *testing.T) {
	const burst = 100_000
	rec := func(off int64) *kgo.Record { return &kgo.Record{Topic: "t", Offset: off, Timestamp: time.Now()} }
	t.Run("finished", func(t *testing.T) {
		rep, h := hookOnly(t, true)
		for off := range int64(burst) {
			h.OnFetchRecordUnbuffered(rec(off), true)
		}
		rep.Finished(rec(burst - 1))
		if room := keepRoomOf(rep); room > keepRoom {
			t.Errorf("nothing in hand, room for %d records (%d KiB) kept", room, room*16/1024)
		}
	})
	t.Run("done but one", func(t *testing.T) {
		rep, h := hookOnly(t, true)
		for off := range int64(burst) {
			h.OnFetchRecordUnbuffered(rec(off), true)
		}
		for off := int64(burst - 1); off > 0; off-- {
			rep.Done(rec(off))
		}
		if room := keepRoomOf(rep); room > keepRoom {
			t.Errorf("1 record unfinished, room for %d records (%d KiB) kept", room, room*16/1024)
		}
		_, topics := rep.snapshot(time.Now())
		if p := topics[0].Partitions[0]; p.Held != 1 || p.Position != burst-1 {
			t.Errorf("offset 0 unfinished: %+v", p)
		}
	})
	t.Run("stuck on one", func(t *testing.T) {
		rep, h := hookOnly(t, true)
		h.OnFetchRecordUnbuffered(rec(0), true)
		for off := int64(1); off < burst; off++ {
			h.OnFetchRecordUnbuffered(rec(off), true)
			rep.Done(rec(off))
		}
		if room := keepRoomOf(rep); room > 64 {
			t.Errorf("2 records in hand at most, room for %d", room)
		}
	})
	t.Run("one behind", func(t *testing.T) {
		rep, h := hookOnly(t, true)
		h.OnFetchRecordUnbuffered(rec(0), true)
		for off := int64(1); off < burst; off++ {
			h.OnFetchRecordUnbuffered(rec(off), true)
			rep.Done(rec(off - 1))
		}
		if room := keepRoomOf(rep); room > 64 {
			t.Errorf("1 record in hand, room for %d", room)
		}
	})
}

// TestKafkaKeepDoneMovedOnly: only a Done that finishes a record restarts
// the time without a finished record, and never moves it back (a Done
// read its clock before another's that set a later time).
func TestKafkaKeepDoneMovedOnly(t *testing.T) {
	rep, h := hookOnly(t, true)
	rec := func(off int64) *kgo.Record { return &kgo.Record{Topic: "t", Offset: off, Timestamp: time.Now()} }
	h.OnFetchRecordUnbuffered(rec(0), true)
	h.OnFetchRecordUnbuffered(rec(1), true)
	rep.Done(rec(0))
	rep.mu.Lock()
	rep.moved = time.Now().Add(-10 * time.Second)
	rep.parts[topicPartition{"t", 0}].taken = rep.moved
	rep.mu.Unlock()
	rep.Done(rec(0)) // finished already
	rep.Done(rec(7)) // never polled
	if _, topics := rep.snapshot(time.Now()); topics[0].Partitions[0].HeldMs < 10_000 {
		t.Errorf("a Done that finished nothing restarted the time: %+v", topics[0].Partitions[0])
	}
	later := time.Now().Add(time.Hour)
	rep.mu.Lock()
	rep.moved = later
	rep.mu.Unlock()
	rep.Done(rec(1))
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if !rep.moved.Equal(later) {
		t.Errorf("a Done moved the last finish back from %v to %v", later, rep.moved)
	}
}

// TestKafkaKeepPolledWhileReporting: a partition first polled while a
// report asks the client what it owns (not in its answer) is reported,
// not forgotten with its records in hand.
func TestKafkaKeepPolledWhileReporting(t *testing.T) {
	const topic = "keep-asked"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 1, time.Now())
	rep, h := hookOnly(t, true)
	rep.Close() // no sender: the test takes the reports
	cl := newKafkaClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.WithHooks(h))
	pollN(t, cl, 1)
	rep.mu.Lock()
	rep.asked = func() {
		h.OnFetchRecordUnbuffered(&kgo.Record{Topic: "new", Offset: 5, Timestamp: time.Now()}, true)
	}
	rep.mu.Unlock()
	_, topics := rep.snapshot(time.Now())
	if len(topics) != 2 || topics[1].Topic != "new" || topics[1].Partitions[0].Held != 1 {
		t.Errorf("reported %+v, want partition 0 of new with 1 held, and %s", topics, topic)
	}
}
