package shard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/replica"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// fixed is an assignment the test moves by hand: the moment a shard
// changes hands, which no broker plays on cue.
type fixed struct {
	mu     sync.Mutex
	owned  []int
	owners []string // nil: unknown
	n      int      // the shard count; 0: 2
}

func (f *fixed) Owned(time.Time) ([]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.owned), true
}
func (f *fixed) set(owned ...int) { f.mu.Lock(); f.owned = owned; f.mu.Unlock() }
func (f *fixed) Owners() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, f.Count())
	copy(out, f.owners)
	return out
}
func (f *fixed) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (f *fixed) Release(context.Context)       {}
func (f *fixed) Cluster() string               { return "c" }
func (f *fixed) Count() int {
	if f.n == 0 {
		return 2
	}
	return f.n
}

// decisions stands for the engine: the decisions it made, and the remote
// ones it was given.
type decisions struct {
	mu     sync.Mutex
	own    map[lag.Target]quota.Decision
	remote map[string][]quota.Decision
}

func (d *decisions) ClusterDecisions(string) map[lag.Target]quota.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[lag.Target]quota.Decision{}
	for k, v := range d.own {
		out[k] = v
	}
	return out
}

func (d *decisions) SetRemote(source string, ds []quota.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ds == nil {
		delete(d.remote, source)
		return
	}
	d.remote[source] = ds
}

// remoteTopics returns the topics of the remote decisions, sorted.
func (d *decisions) remoteTopics() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, ds := range d.remote {
		for _, x := range ds {
			out = append(out, x.Target.Topic)
		}
	}
	slices.Sort(out)
	return out
}

// decided is a decision made at t0 with the rates known.
func decided(topic string, rate float64) quota.Decision { return decidedAt(topic, rate, t0) }

// decidedAt is a decision made at at with the rates known.
func decidedAt(topic string, rate float64, at time.Time) quota.Decision {
	return quota.Decision{Target: lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: topic, Group: "g"}, Policy: "p", Rate: rate,
		At: at, Rule: quota.RuleSaturated}
}

// t0 is the time of the first cycle: the package's start, so a test that
// offers at the wall clock's now makes its decisions at that now instead
// (with -count=N a later run starts minutes after t0, past Expire).
var t0 = time.Now()

// slowWrite is the real channel, whose writes wait, while held, until
// released: a replica whose write of a record is late (a loaded machine,
// a slow link), so that a record written after it reaches the channel
// first. It counts the values its Watch delivered per key. The moment is
// what the broker cannot play on cue.
type slowWrite struct {
	Channel
	mu        sync.Mutex
	gate      chan struct{} // nil: writes go through
	delivered map[string]int
}

func (s *slowWrite) hold() { s.mu.Lock(); s.gate = make(chan struct{}); s.mu.Unlock() }

// release lets the held writes through. Idempotent.
func (s *slowWrite) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *slowWrite) Put(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		// The write lands whenever it is released, however long it was
		// held: the exchange's own timeout would drop it instead.
		<-gate
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return s.Channel.Put(pctx, key, value)
	}
	return s.Channel.Put(ctx, key, value)
}

func (s *slowWrite) Watch(ctx context.Context, f func(string, []byte), synced func()) error {
	return s.Channel.Watch(ctx, func(k string, v []byte) {
		s.mu.Lock()
		s.delivered[k]++
		s.mu.Unlock()
		f(k, v)
	}, synced)
}

// deliveries is how many values of key the channel's Watch delivered.
func (s *slowWrite) deliveries(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered[key]
}

// TestExchange: two replicas on one NATS KV channel. Each writes the
// decisions of the shard it owns (from its second cycle with the shard),
// never those of a shard it does not own, and leases by the other's; a
// shard that moves is not fed from the channel to its new owner, and its
// former owner keeps leasing by its own last decisions until they expire;
// its last record, written late (after the new owner's), is ignored.
func TestExchange(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_test")
	// A's writes go through slowWrite: its last record of shard 0 is
	// held until B's first one was read.
	slowA := &slowWrite{Channel: ch, delivered: map[string]int{}}
	// "orders" is in shard 0 of 2, "bench-001" in shard 1.
	if Of("orders", 2) != 0 || Of("bench-001", 2) != 1 {
		t.Fatal("the test's topics are not in the shards it assumes")
	}
	type side struct {
		x   *Exchange
		a   *fixed
		eng *decisions
	}
	const expire = time.Minute
	mk := func(id string, c Channel, owned int, own ...quota.Decision) side {
		eng := &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}}
		for _, d := range own {
			eng.own[d.Target] = d
		}
		a := &fixed{owned: []int{owned}}
		// Logged to the test's output: the corrupt entry's warning below
		// ("unexpected EOF") is shown with its run, and only when it fails.
		x := NewExchange(ExchangeConfig{Channel: c, Engine: eng, ID: id, Expire: expire, Interval: 100 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
		x.Add(a)
		x.Start(context.Background())
		t.Cleanup(x.Close)
		return side{x, a, eng}
	}
	// A decides for both topics (say, just before a move), but owns only
	// shard 0: only "orders" travels. The decisions are made at the
	// cycles' time: made at t0, they were past Expire, and no longer held
	// by B, in a run that starts a minute after the package (-count).
	// Each cycle has a time of its own, as the daemon's cycles do: records
	// of one time could not tell a late write from a newer one (a
	// replica keeps the newest record per key by its time).
	now := time.Now()
	cycle := now
	next := func() time.Time { cycle = cycle.Add(time.Millisecond); return cycle }
	a := mk("a", slowA, 0, decidedAt("orders", 10, now), decidedAt("bench-001", 20, now))
	b := mk("b", ch, 1, decidedAt("bench-001", 30, now))
	t.Cleanup(slowA.release) // before the exchanges close
	waitFor := func(what string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling the channel
		}
	}
	// (A replica writes no record before it read the channel once:
	// TestUnsyncedWritesNothing.)
	waitFor("the watches started", func() bool { return a.x.Synced() && b.x.Synced() })
	at := next()
	for _, sd := range []side{a, b} {
		sd.x.Offer("c", at)
		sd.x.mu.Lock()
		pending := len(sd.x.pending)
		sd.x.mu.Unlock()
		if pending != 0 {
			t.Fatal("a shard is written at the Offer that gained it")
		}
	}
	at = next()
	a.x.Offer("c", at)
	b.x.Offer("c", at)
	waitFor("both records read by both", func() bool {
		for _, x := range []*Exchange{a.x, b.x} {
			for shard := range 2 {
				if _, ok := x.Remote("c", shard); !ok {
					return false
				}
			}
		}
		return true
	})
	// Each engine is given every fresh record, its own too (read back):
	// it decides by its own decisions where it has them. A's next record
	// of shard 0, its last, is late: it reaches the channel only after
	// B's first record of the shard was read.
	slowA.hold()
	steps := []struct {
		name   string
		do     func()
		remote []string // topics each engine was given remote decisions of
	}{
		{"each has the other's shard and its own", func() { at := next(); a.x.Offer("c", at); b.x.Offer("c", at) },
			[]string{"bench-001", "orders"}},
		{"shard 0 moves to B: both keep A's last record", func() {
			a.a.set()
			b.a.set(0, 1)
			at := next()
			a.x.Offer("c", at)
			b.x.Offer("c", at)
		}, []string{"bench-001", "orders"}},
	}
	for _, st := range steps {
		st.do()
		for _, sd := range []side{a, b} {
			if got := sd.eng.remoteTopics(); !slices.Equal(got, st.remote) {
				t.Errorf("%s: %s was given remote decisions of %v, want %v", st.name, sd.x.cfg.ID, got, st.remote)
			}
		}
	}

	// B's first Offer with shard 0 wrote nothing of it; at its second,
	// its own decision of "orders" is still without rates: A's decision
	// is written in its place.
	b.eng.mu.Lock()
	b.eng.own[decided("orders", 0).Target] = quota.Decision{Target: decided("orders", 0).Target, Policy: "p", Rate: quota.Unlimited,
		At: now, Rule: quota.RuleRatesUnknown}
	b.eng.mu.Unlock()
	b.x.Offer("c", next())
	waitFor("B's record of shard 0", func() bool { r, ok := a.x.Remote("c", 0); return ok && r.Owner == "b" })
	// A's last record, older, now reaches the channel: it is read and
	// ignored (B's is the newest).
	seen := slowA.deliveries(recordKey("c", 0))
	slowA.release()
	waitFor("A's late record read", func() bool { return slowA.deliveries(recordKey("c", 0)) > seen })
	if r, _ := a.x.Remote("c", 0); r.Owner != "b" || len(r.Decisions) != 1 || r.Decisions[0].Rate != 10 {
		t.Errorf("shard 0 as B wrote it while it learns the rates: %+v, want B's record with A's decision (10)", r)
	}
	// Once B knows the rates, its own decision is written.
	b.eng.mu.Lock()
	b.eng.own[decided("orders", 40).Target] = decidedAt("orders", 40, now)
	b.eng.mu.Unlock()
	b.x.Offer("c", next())
	waitFor("B's own decision of shard 0", func() bool {
		r, ok := a.x.Remote("c", 0)
		return ok && len(r.Decisions) == 1 && r.Decisions[0].Rate == 40
	})

	// Past the expiry, no record counts.
	last := cycle.Add(expire)
	a.x.Offer("c", last)
	if got := a.eng.remoteTopics(); len(got) != 0 {
		t.Errorf("past the expiry A was given remote decisions of %v", got)
	}
	b.x.Offer("c", last)
	waitFor("B's last records", func() bool {
		r0, ok0 := a.x.Remote("c", 0)
		r1, ok1 := a.x.Remote("c", 1)
		return ok0 && r0.At.Equal(last) && ok1 && r1.At.Equal(last)
	})

	// A corrupt entry is ignored, the last good record stays; a deleted
	// one is gone.
	if err := ch.Put(context.Background(), recordKey("c", 0), []byte("not gzip")); err != nil {
		t.Fatal(err)
	}
	if err := ch.Delete(context.Background(), recordKey("c", 1)); err != nil {
		t.Fatal(err)
	}
	waitFor("the deletion read", func() bool { _, ok := a.x.Remote("c", 1); return !ok })
	if r, ok := a.x.Remote("c", 0); !ok || r.Owner != "b" {
		t.Errorf("after a corrupt entry: %+v %v, want B's record", r, ok)
	}
}

// TestExchangeCountChange: during a rolling change of ha.shards the
// replicas of either count write the same channel keys (shard 1 of 2 and
// shard 1 of 4 are both "d.c/1"). A replica keeps being given the records
// of its own count, however often the other count writes over them.
// (Kept by key alone, the other count's write replaced the record, and
// every other cycle the replica dropped the topics of the shards it does
// not own: they got the open lease of a topic nobody observes.)
func TestExchangeCountChange(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_count")
	if Of("orders", 2) != 0 || Of("bench-001", 2) != 1 {
		t.Fatal("the test's topics are not in the shards it assumes")
	}
	type side struct {
		x   *Exchange
		eng *decisions
	}
	mk := func(id string, a *fixed, own ...quota.Decision) side {
		eng := &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}}
		for _, d := range own {
			eng.own[d.Target] = d
		}
		x := NewExchange(ExchangeConfig{Channel: ch, Engine: eng, ID: id, Expire: time.Minute, Interval: 100 * time.Millisecond})
		x.Add(a)
		x.Start(context.Background())
		t.Cleanup(x.Close)
		return side{x, eng}
	}
	// Count 2: a1 owns shard 0 ("orders"), a2 shard 1 ("bench-001").
	// Count 4: b owns every shard and decides both topics.
	a1 := mk("a1", &fixed{owned: []int{0}}, decided("orders", 10))
	a2 := mk("a2", &fixed{owned: []int{1}}, decided("bench-001", 20))
	b := mk("b", &fixed{owned: []int{0, 1, 2, 3}, n: 4}, decided("orders", 30), decided("bench-001", 40))
	// read reports whether x has read the record of count of key at at.
	read := func(x *Exchange, count int, at time.Time) bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, r := range x.remote {
			if r.Count == count && r.Shard == 1 && r.At.Equal(at) {
				return true
			}
		}
		return false
	}
	waitFor := func(what string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling the channel
		}
	}
	// Written before a watch started, a2's record of "d.c/1" would be
	// read only if it were the key's last value: b's, of the same key,
	// may come after.
	waitFor("the watches started", func() bool { return a1.x.Synced() && a2.x.Synced() && b.x.Synced() })
	// Each cycle b writes over a2's record only once a1 read it: the
	// bucket keeps one value per key, and a value overwritten before a
	// watch delivered it is never delivered (under load a2's record was
	// lost to b's written a moment after it, and a1 waited for it in
	// vain).
	start := time.Now()
	for i := range 6 {
		at := start.Add(time.Duration(i) * time.Millisecond)
		a1.x.Offer("c", at)
		a2.x.Offer("c", at)
		if i > 0 { // a shard is written from the second Offer with it
			waitFor(fmt.Sprintf("cycle %d: a1 read a2's record", i), func() bool { return read(a1.x, 2, at) })
		}
		b.x.Offer("c", at)
		if i == 0 {
			continue
		}
		waitFor(fmt.Sprintf("cycle %d: a1 read b's record", i), func() bool { return read(a1.x, 4, at) })
		a1.x.Offer("c", at)
		if got := a1.eng.remoteTopics(); !slices.Contains(got, "bench-001") {
			t.Fatalf("cycle %d: a1 was given remote decisions of %v, want a2's bench-001 among them", i, got)
		}
		for _, ds := range a1.eng.remote {
			for _, d := range ds {
				if d.Rate == 30 || d.Rate == 40 {
					t.Fatalf("cycle %d: a1 was given b's decision %+v, of another shard count", i, d)
				}
			}
		}
	}
}

// TestRecordSize: a shard of 10,000 decided targets (a quarter of a
// 40,000-group cluster) fits one NATS message (1 MiB by default) once
// encoded, and decodes to what was written.
func TestRecordSize(t *testing.T) {
	r := Record{Owner: "lagbridge-0", Cluster: "main", Shard: 3, Count: 4, At: t0}
	for i := range 10000 {
		d := decided(fmt.Sprintf("orders-%05d", i/4), 1234.5+float64(i))
		d.Target.Group = fmt.Sprintf("billing-%05d", i)
		d.Capacity, d.CapacityKnown, d.Wait, d.TargetWait, d.HeadAge, d.Lag = 2000, true, 1500*time.Millisecond, time.Second, 3*time.Second, 4500+int64(i)
		d.Reason = fmt.Sprintf("wait %.1fs >= budget 2s: a new message would be dead on arrival, draining at %.0f msg/s", 1.5+float64(i%7), 2000.0+float64(i%13))
		r.Decisions = append(r.Decisions, d)
	}
	b, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 decisions: %d bytes encoded (%.0f per decision)", len(b), float64(len(b))/10000)
	if len(b) > 1<<20 {
		t.Errorf("%d bytes: over a NATS message", len(b))
	}
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Decisions) != 10000 || got.Decisions[9999].Lag != r.Decisions[9999].Lag || got.Decisions[5].Reason != r.Decisions[5].Reason {
		t.Errorf("decoded %d decisions, last %+v", len(got.Decisions), got.Decisions[len(got.Decisions)-1])
	}
}
