package producerclient

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/ttl"
)

// batchResult is what ProduceBatchAsync handed back: the error of each
// non-nil record, and the errors of the nil ones.
type batchResult struct {
	errs    map[*kgo.Record]error
	nilErrs []error
}

// produceBatch runs ProduceBatchAsync and waits for one callback per
// record, failing the test when a record is called back twice or a
// callback is missing (after a Flush, so that a late duplicate shows).
func produceBatch(tb testing.TB, p *KafkaProducer, ctx context.Context, rs []*kgo.Record, opts ...CallOption) batchResult {
	tb.Helper()
	var (
		mu    sync.Mutex
		res   = batchResult{errs: map[*kgo.Record]error{}}
		calls int
		dup   []*kgo.Record
	)
	p.ProduceBatchAsync(ctx, rs, func(r *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if r == nil {
			res.nilErrs = append(res.nilErrs, err)
			return
		}
		if _, ok := res.errs[r]; ok {
			dup = append(dup, r)
		}
		res.errs[r] = err
	}, opts...)
	eventually(tb, 10*time.Second, "a callback for every record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= len(rs)
	})
	if err := p.Flush(ctxFor(tb, 10*time.Second)); err != nil {
		tb.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != len(rs) || len(dup) > 0 {
		tb.Fatalf("%d callbacks for %d records (%d duplicates)", calls, len(rs), len(dup))
	}
	return res
}

func recs(topic string, n int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Value: []byte{byte(i)}}
	}
	return rs
}

// TestKafkaProduceBatch: the semantics of ProduceBatchAsync, record by
// record: each gets exactly one callback, with nil or an error matching
// the sentinel of its position.
func TestKafkaProduceBatch(t *testing.T) {
	type ctxKey struct{}
	ownCtx := context.WithValue(context.Background(), ctxKey{}, "mine")
	for _, tc := range []struct {
		name string
		cfg  Config
		// prep runs before the call (leases, Close).
		prep func(t *testing.T, p *KafkaProducer)
		rs   func() []*kgo.Record
		ctx  func(t *testing.T) context.Context
		opts []CallOption
		// want is the sentinel per record (nil: delivered); nilRecs is
		// how many nil records must come back with ErrInvalidOption.
		want    []error
		nilRecs int
		check   func(t *testing.T, p *KafkaProducer, rs []*kgo.Record, res batchResult)
	}{
		{
			// The common case: one topic, the quota open; every record
			// delivered and stamped, the counters moved once per record.
			name: "one topic, all delivered",
			rs:   func() []*kgo.Record { return recs("orders", 50) },
			want: make([]error, 50),
			check: func(t *testing.T, p *KafkaProducer, rs []*kgo.Record, _ batchResult) {
				for i, r := range rs {
					// CRITICAL without a deadline: no header at all.
					if len(r.Headers) != 0 {
						t.Fatalf("record %d has headers %v, want none", i, r.Headers)
					}
					if r.Context != nil {
						t.Fatalf("record %d: Context not restored to nil", i)
					}
				}
				s := p.Stats().Topics["orders"]
				if s.Admitted != 50 || s.Attempts != 50 || s.Acked != 50 || s.InFlight != 0 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			// Nothing to do: no callback at all.
			name: "empty batch",
			rs:   func() []*kgo.Record { return nil },
		},
		{
			// A nil record and one without a topic are invalid calls, not
			// rejections; the records around them go out.
			name: "nil record and no topic",
			rs: func() []*kgo.Record {
				return []*kgo.Record{{Topic: "orders"}, nil, {}, {Topic: "orders"}}
			},
			want:    []error{nil, ErrInvalidOption, nil},
			nilRecs: 1,
			check: func(t *testing.T, p *KafkaProducer, rs []*kgo.Record, res batchResult) {
				if !errors.Is(res.nilErrs[0], ErrInvalidOption) {
					t.Fatalf("nil record: %v", res.nilErrs[0])
				}
			},
		},
		{
			// Records of several topics, interleaved: each run is admitted
			// on its own topic.
			name: "mixed topics",
			rs: func() []*kgo.Record {
				return []*kgo.Record{{Topic: "orders"}, {Topic: "clicks"}, {Topic: "clicks"}, {Topic: "orders"}, {Topic: "clicks"}}
			},
			want: make([]error, 5),
			check: func(t *testing.T, p *KafkaProducer, _ []*kgo.Record, _ batchResult) {
				s := p.Stats().Topics
				if s["orders"].Acked != 2 || s["clicks"].Acked != 3 {
					t.Fatalf("acked orders %d clicks %d", s["orders"].Acked, s["clicks"].Acked)
				}
			},
		},
		{
			// Drop over the rate: the prefix the burst holds goes, the rest
			// comes back at once, each record in its own RejectError with
			// the time until a token is due.
			name: "drop over the rate: the prefix that fits",
			cfg:  Config{Mode: Drop, Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 10, Burst: 3}}},
			rs:   func() []*kgo.Record { return recs("orders", 5) },
			want: []error{nil, nil, nil, ErrRateLimited, ErrRateLimited},
			check: func(t *testing.T, p *KafkaProducer, rs []*kgo.Record, res batchResult) {
				for _, r := range rs[3:] {
					var re *RejectError
					if !errors.As(res.errs[r], &re) || re.Record != r || re.RetryAfter != 100*time.Millisecond || re.Attempts != 0 || !errors.Is(re, ErrSlowDown) {
						t.Fatalf("rejection %+v", re)
					}
				}
				s := p.Stats().Topics["orders"]
				if s.Admitted != 3 || s.Rejected["rate"] != 2 || s.Acked != 3 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			// Drop over the in-flight cap: slots for a prefix.
			name: "drop over the in-flight cap",
			cfg:  Config{Mode: Drop, MaxInFlight: 2},
			rs:   func() []*kgo.Record { return recs("orders", 4) },
			want: []error{nil, nil, ErrInFlightLimit, ErrInFlightLimit},
			check: func(t *testing.T, p *KafkaProducer, _ []*kgo.Record, _ batchResult) {
				if s := p.Stats().Topics["orders"]; s.Rejected["in_flight"] != 2 || s.InFlight != 0 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			// A Drop option on the call wins over Block in the config.
			name: "drop option on the call",
			cfg:  Config{Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 1, Burst: 1}}},
			rs:   func() []*kgo.Record { return recs("orders", 2) },
			opts: []CallOption{WithMode(Drop)},
			want: []error{nil, ErrRateLimited},
		},
		{
			// A stop lease rejects the whole batch before any send.
			name: "stop lease",
			prep: func(t *testing.T, p *KafkaProducer) {
				setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: quotaproto.SignalStop, Reason: "dead", Version: 3})
			},
			rs:   func() []*kgo.Record { return recs("orders", 3) },
			want: []error{ErrStop, ErrStop, ErrStop},
			check: func(t *testing.T, p *KafkaProducer, _ []*kgo.Record, _ batchResult) {
				if s := p.Stats().Topics["orders"]; s.Rejected["stop"] != 3 || s.Attempts != 0 || s.InFlight != 0 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			// A closed producer rejects everything with ErrClosed.
			name: "closed producer",
			prep: func(t *testing.T, p *KafkaProducer) { _ = p.Close() },
			rs:   func() []*kgo.Record { return recs("orders", 3) },
			want: []error{ErrClosed, ErrClosed, ErrClosed},
		},
		{
			// A canceled context rejects everything before any send.
			name: "canceled context",
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			rs:   func() []*kgo.Record { return recs("orders", 2) },
			want: []error{context.Canceled, context.Canceled},
		},
		{
			// Records with lagbridge headers of their own form runs of
			// their own: the criticality header is kept, an expired
			// deadline header rejects that record alone; the others are
			// CRITICAL, written as no header.
			name: "own headers",
			rs: func() []*kgo.Record {
				return []*kgo.Record{
					{Topic: "orders"},
					{Topic: "orders", Headers: []kgo.RecordHeader{{Key: ttl.HeaderCriticality, Value: []byte("SHEDDABLE")}}},
					{Topic: "orders", Headers: []kgo.RecordHeader{{Key: ttl.HeaderDeadline, Value: ttl.AppendDeadline(nil, newFakeClock().Now().Add(-time.Minute))}}},
					{Topic: "orders"},
				}
			},
			want: []error{nil, nil, ErrExpired, nil},
			check: func(t *testing.T, p *KafkaProducer, rs []*kgo.Record, _ batchResult) {
				for i, want := range []string{"", "SHEDDABLE", "", ""} {
					if got, _ := header(rs[i], ttl.HeaderCriticality); got != want {
						t.Fatalf("record %d criticality %q, want %q", i, got, want)
					}
				}
			},
		},
		{
			// The context's deadline and the call's criticality are stamped
			// on every record; a record's own Context is restored.
			name: "deadline, criticality, own context",
			ctx:  func(t *testing.T) context.Context { return ctxFor(t, time.Minute) },
			rs: func() []*kgo.Record {
				rs := recs("orders", 3)
				rs[1].Context = ownCtx
				return rs
			},
			opts: []CallOption{WithCriticality(Sheddable)},
			want: make([]error, 3),
			check: func(t *testing.T, p *KafkaProducer, rs []*kgo.Record, _ batchResult) {
				for i, r := range rs {
					d, ok := header(r, ttl.HeaderDeadline)
					dl, err := ttl.ParseDeadline(d)
					if !ok || err != nil || time.Until(dl) < 30*time.Second {
						t.Fatalf("record %d deadline %q", i, d)
					}
					if v, _ := header(r, ttl.HeaderCriticality); v != "SHEDDABLE" {
						t.Fatalf("record %d criticality %q", i, v)
					}
				}
				if rs[1].Context != ownCtx || rs[0].Context != nil {
					t.Fatal("record contexts not restored")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKfake(t, 2, "orders", "clicks")
			if tc.cfg.Clock == nil {
				tc.cfg.Clock = newFakeClock()
			}
			p := newKafkaProducer(t, newKgo(t, c), tc.cfg)
			if tc.prep != nil {
				tc.prep(t, p)
			}
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			rs := tc.rs()
			res := produceBatch(t, p, ctx, rs, tc.opts...)
			if len(res.nilErrs) != tc.nilRecs {
				t.Fatalf("%d nil records called back, want %d", len(res.nilErrs), tc.nilRecs)
			}
			i := 0
			for _, r := range rs {
				if r == nil {
					continue
				}
				err := res.errs[r]
				switch want := tc.want[i]; {
				case want == nil && err != nil:
					t.Fatalf("record %d: %v, want delivered", i, err)
				case want != nil && !errors.Is(err, want):
					t.Fatalf("record %d: %v, want %v", i, err, want)
				}
				var re *RejectError
				if errors.As(err, &re) && re.Record != r {
					t.Fatalf("record %d: the RejectError holds another record", i)
				}
				i++
			}
			if i != len(tc.want) {
				t.Fatalf("%d records checked, want %d", i, len(tc.want))
			}
			if tc.check != nil {
				tc.check(t, p, rs, res)
			}
		})
	}
}

// TestKafkaBatchBlockWaitsForTokens: in Block mode a batch over the burst
// sends what fits and waits for each further token on the clock, as
// single records would; nothing is rejected.
func TestKafkaBatchBlockWaitsForTokens(t *testing.T) {
	c := newKfake(t, 1, "orders")
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, c), Config{Clock: clk, MaxBlock: time.Minute,
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 2, Burst: 2}}})
	var delivered atomic.Int64
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		p.ProduceBatchAsync(context.Background(), recs("orders", 5), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("record failed: %v", err)
			}
			delivered.Add(1)
		})
	}()
	// The burst (2) goes at once; each further record waits 500ms.
	for want := int64(2); want <= 5; want++ {
		eventually(t, 5*time.Second, "the burst to be delivered and the next record to wait", func() bool {
			return delivered.Load() == want && (want == 5 || clk.Waiters() > 0)
		})
		if want < 5 {
			clk.Advance(500 * time.Millisecond)
		}
	}
	<-returned
	if s := p.Stats().Topics["orders"]; s.Admitted != 5 || s.RejectedTotal() != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestKafkaBatchBlockGivesUpAtDeadline: a Block batch whose next token
// comes after the context's deadline hands the rest back at once.
func TestKafkaBatchBlockGivesUpAtDeadline(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 0.1, Burst: 2}}})
	ctx := ctxFor(t, 2*time.Second)
	start := time.Now()
	rs := recs("orders", 4)
	res := produceBatch(t, p, ctx, rs)
	for i, r := range rs {
		if err := res.errs[r]; (i < 2) != (err == nil) || i >= 2 && !errors.Is(err, ErrRateLimited) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waited %v in vain", d)
	}
}

// TestKafkaBatchStopWhileBlocked: a Block batch waiting for a token ends
// at once with ErrStop for the rest when the lease turns to stop.
func TestKafkaBatchStopWhileBlocked(t *testing.T) {
	c := newKfake(t, 1, "orders")
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, c), Config{Clock: clk, MaxBlock: time.Hour,
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 0.001, Burst: 1}}})
	done := make(chan batchResult, 1)
	rs := recs("orders", 3)
	go func() { done <- produceBatch(t, p, context.Background(), rs) }()
	eventually(t, 5*time.Second, "the second record to wait", func() bool { return clk.Waiters() > 0 })
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: quotaproto.SignalStop, Reason: "dead", Version: 4})
	res := <-done
	if res.errs[rs[0]] != nil || !errors.Is(res.errs[rs[1]], ErrStop) || !errors.Is(res.errs[rs[2]], ErrStop) {
		t.Fatalf("outcomes %v %v %v", res.errs[rs[0]], res.errs[rs[1]], res.errs[rs[2]])
	}
	if s := p.Stats().Topics["orders"]; s.Rejected["stop"] != 2 || s.Admitted != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestKafkaBatchBrokerFailsPart: the broker fails the records of one
// partition once; they are retried (within the budget) as single records
// and delivered, the others are delivered the first time, and every
// record is called back once.
func TestKafkaBatchBrokerFailsPart(t *testing.T) {
	c2, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c2.Close)
	// Put the two partitions on different brokers, so that they travel
	// in different requests.
	if l0 := c2.LeaderFor("orders", 0); l0 == c2.LeaderFor("orders", 1) {
		other := int32(0)
		if l0 == 0 {
			other = 1
		}
		if err := c2.MoveTopicPartition("orders", 1, other); err != nil {
			t.Fatal(err)
		}
	}
	bad := c2.LeaderFor("orders", 0)
	var failed atomic.Int64
	c2.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if c2.CurrentNode() != bad {
			// Not handled: the function stays. (KeepControl here would
			// keep it for good, after the bad broker's request too: the
			// flag sticks to the function.)
			return nil, nil, false
		}
		return produceFailure(req, kerr.NotEnoughReplicas.Code, &failed), nil, true // once: the retries go through
	})
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c2.ListenAddrs()...)}, KafkaClientOpts(kgo.ManualPartitioner())...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	// Throttling off: five failures out of five would make it refuse
	// the retries locally (as it would single records).
	p := newKafkaProducer(t, cl, Config{Throttle: ThrottleConfig{Disabled: true},
		Retry: RetryConfig{Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	rs := recs("orders", 10)
	for i, r := range rs {
		r.Partition = int32(i % 2)
	}
	res := produceBatch(t, p, ctxFor(t, time.Minute), rs)
	for i, r := range rs {
		if err := res.errs[r]; err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	s := p.Stats().Topics["orders"]
	n := uint64(failed.Load())
	t.Logf("the broker failed %d records of partition 0 once; stats %+v", n, s)
	if n == 0 || n > 5 || s.BrokerErrors != n || s.Retries != n || s.Attempts != 10+n || s.Acked != 10 || s.InFlight != 0 {
		t.Fatalf("the broker failed %d records; stats %+v", n, s)
	}
	got := consumeAll(t, c2, "orders", 10)
	if len(got) != 10 {
		t.Fatalf("consumed %d records", len(got))
	}
}

// TestKafkaBatchFlushWaits: Flush returns once every record of a batch is
// acknowledged and its callback ran.
func TestKafkaBatchFlushWaits(t *testing.T) {
	c := newKfake(t, 2, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	var n atomic.Int64
	for i := 0; i < 20; i++ {
		p.ProduceBatchAsync(context.Background(), recs("orders", 50), func(_ *kgo.Record, err error) {
			if err == nil {
				n.Add(1)
			}
		})
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 1000 {
		t.Fatalf("%d callbacks before Flush returned", n.Load())
	}
	if s := p.Stats().Topics["orders"]; s.InFlight != 0 || s.Acked != 1000 {
		t.Fatalf("stats %+v", s)
	}
}

// TestKafkaProduceBatchSync: ProduceBatch returns one result per record.
func TestKafkaProduceBatchSync(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Mode: Drop, Clock: newFakeClock(),
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 1, Burst: 2}}})
	res := p.ProduceBatch(context.Background(), append(recs("orders", 3), nil))
	if len(res) != 4 {
		t.Fatalf("%d results", len(res))
	}
	var ok, limited, invalid int
	for _, r := range res {
		switch {
		case r.Err == nil:
			ok++
		case errors.Is(r.Err, ErrRateLimited):
			limited++
		case errors.Is(r.Err, ErrInvalidOption) && r.Record == nil:
			invalid++
		}
	}
	if ok != 2 || limited != 1 || invalid != 1 || !errors.Is(res.FirstErr(), ErrInvalidOption) && !errors.Is(res.FirstErr(), ErrRateLimited) {
		t.Fatalf("ok %d limited %d invalid %d", ok, limited, invalid)
	}
}

// TestInflightAcquireNNeverOverCap: goroutines take and give back slots
// in batches of varying size; the slots held never exceed the cap.
func TestInflightAcquireNNeverOverCap(t *testing.T) {
	f := &inflight{limit: 50}
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4*runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				n := int64(1 + (i+w)%17)
				k := f.tryAcquireN(n)
				if k < 0 || k > n {
					t.Errorf("acquired %d of %d", k, n)
					return
				}
				h := held.Add(k)
				for {
					p := peak.Load()
					if h <= p || peak.CompareAndSwap(p, h) {
						break
					}
				}
				held.Add(-k)
				f.releaseN(k)
			}
		}(w)
	}
	wg.Wait()
	if peak.Load() > f.limit {
		t.Fatalf("held %d slots with a cap of %d", peak.Load(), f.limit)
	}
	if f.count() != 0 {
		t.Fatalf("%d slots left", f.count())
	}
}

// TestInflightWaiterGetsSlotFreedByBackOut pins that a Block waiter gets
// a slot that a refused acquire leaves free. An acquire counts itself
// before it checks and backs out when refused; a waiter woken by a
// release while such an acquire (D) is counted fails and sleeps again, and
// only D's back-out can wake it. The back-out used to wake nobody, and the
// waiter slept until MaxBlock with the slot free. D is played in two
// halves (its increment, then backOut, the refusal path of tryAcquire) to
// hold that window open.
func TestInflightWaiterGetsSlotFreedByBackOut(t *testing.T) {
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{MaxInFlight: 1, MaxBlock: 3 * time.Second})
	c := p.c
	tp := c.topic("orders")
	f := &tp.inflight
	if !f.tryAcquire() { // X holds the only slot
		t.Fatal("no slot")
	}
	res := make(chan *RejectError, 1)
	go func() {
		m := msg{t: tp, ctx: context.Background(), mode: Block, limit: c.mono.nanos() + int64(3*time.Second)}
		r, _ := c.acquireSlot(&m)
		res <- r
	}()
	parked := func() bool { // the waiter sleeps on the current channel
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.waiters.Load() == 1 && f.ch != nil
	}
	eventually(t, 5*time.Second, "the waiter to park", parked)
	f.acq.Add(1) // D counts itself: the cap is now exceeded
	f.release()  // X is done: wakes the waiter, which fails against D
	eventually(t, 5*time.Second, "the waiter to park again", parked)
	freed := time.Now()
	f.backOut(1) // D is refused and backs out: the slot is free
	select {
	case r := <-res:
		if r != nil {
			t.Fatalf("the waiter failed: %v", r)
		}
		t.Logf("the waiter got the slot %v after it was freed", time.Since(freed).Round(time.Microsecond))
	case <-time.After(time.Second):
		t.Fatalf("the slot was free but the waiter did not get it within 1s (MaxBlock 3s)")
	}
	if n := f.count(); n != 1 {
		t.Fatalf("%d slots held, want 1 (the waiter's)", n)
	}
}
