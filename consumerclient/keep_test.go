package consumerclient

import (
	"context"
	"sync"
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
// with held unfinished, or idle at position; absent: not reported.
type keepWant struct {
	position int64
	held     int64
	idle     bool
	absent   bool
}

// TestKafkaKeepUntilFinished: with Config.KeepUntilFinished, a record
// stays in hand across polls until Done or Finished says it is finished,
// and the position is the first unfinished offset whatever the order; the
// default mode finishes a poll's records at the next poll, as it always
// did.
func TestKafkaKeepUntilFinished(t *testing.T) {
	poll := func(offs ...int64) keepStep { return keepStep{poll: append([]int64{}, offs...), finished: -1} }
	done := func(offs ...int64) keepStep { return keepStep{done: offs, finished: -1} }
	through := func(off int64) keepStep { return keepStep{finished: off} }
	revoke := keepStep{revoke: true, finished: -1}
	in := func(pos, held int64) keepWant { return keepWant{position: pos, held: held} }
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
		// A pool of workers finishes out of order: the position is the
		// first unfinished offset, held the unfinished from it on.
		{"out of order", true,
			[]keepStep{poll(0, 1, 2, 3, 4), done(2), done(4), done(0), done(1), done(3)},
			[]keepWant{in(0, 5), in(0, 4), in(0, 3), in(1, 2), in(3, 1), idle(5)}},
		// A record finished twice, or never polled, changes nothing.
		{"done twice, unknown", true,
			[]keepStep{poll(0, 1, 2), done(1), done(1), done(7)},
			[]keepWant{in(0, 3), in(0, 2), in(0, 2), in(0, 2)}},
		// Finished finishes everything through its record, including
		// some finished out of order before.
		{"finished through", true,
			[]keepStep{poll(0, 1, 2, 3, 4), done(3), through(1), through(3)},
			[]keepWant{in(0, 5), in(0, 4), in(2, 2), in(4, 1)}},
		// Offsets with gaps (compaction, transactions): Done finds them.
		{"gaps", true,
			[]keepStep{poll(10, 13, 20), done(13), done(10)},
			[]keepWant{in(10, 3), in(10, 2), in(20, 1)}},
		// A record polled again (assigned again, a seek back): what was in
		// hand is forgotten, the records come again.
		{"polled again", true,
			[]keepStep{poll(0, 1, 2, 3), done(1), poll(2, 3), done(2)},
			[]keepWant{in(0, 4), in(0, 3), in(2, 2), in(3, 1)}},
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
				if !p.Idle && p.HeadTimeMs != 1_000_000+p.Position {
					t.Errorf("step %d: head time %d, want the timestamp of offset %d", i, p.HeadTimeMs, p.Position)
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
// Finished, its workers stuck) loses partitions to a second member: they
// are reported no more, and the partitions it keeps are still reported
// in hand at their first record (the default mode would read them idle);
// once the workers finish, idle at the end.
func TestKafkaKeepRebalance(t *testing.T) {
	const topic, group = "keep-rebalance", "g"
	c, rep := fourPartitions(t, topic, true)
	forget := func(_ context.Context, _ *kgo.Client, m map[string][]int32) { rep.Revoked(m) }
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
// of them stuck on offset 7: the reporter says partition 0 is at 7 with
// that one record unfinished (the default mode would read it idle at 20),
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
	if p := report(); p.Position != 7 || p.Idle || p.HeadTimeMs != stamp.Add(7*time.Millisecond).UnixMilli() {
		t.Errorf("offset 7 stuck, the rest finished: %+v, want in hand at 7 with its timestamp", p)
	}
	close(gate)
	waitFor(t, "idle at 20", func() bool { p := report(); return p.Idle && p.Position == 20 })
}
