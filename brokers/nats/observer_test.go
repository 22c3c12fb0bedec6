package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/lag"
)

// checkPart compares the fields of a partition sample that a test pins.
func checkPart(t *testing.T, label string, got lag.PartitionSample, lagWant, ackPending, committed, logStart, end int64) {
	t.Helper()
	if got.Lag != lagWant || got.AckPending != ackPending || got.Committed != committed || got.LogStart != logStart || got.End != end {
		t.Errorf("%s: got lag %d ackPending %d committed %d logStart %d end %d; want %d %d %d %d %d",
			label, got.Lag, got.AckPending, got.Committed, got.LogStart, got.End, lagWant, ackPending, committed, logStart, end)
	}
}

func checkHead(t *testing.T, label string, got lag.PartitionSample, want time.Time) {
	t.Helper()
	if !got.HeadKnown || !got.HeadTime.Equal(want) {
		t.Errorf("%s: head known %v time %v, want %v (server's stored timestamp)", label, got.HeadKnown, got.HeadTime, want)
	}
}

// TestDurablePull covers a durable pull consumer on a stream with and
// without AllowDirect (direct get vs MSG.GET): lag, ack pending, committed,
// End, the head time against the server's stored timestamp, ack progress,
// and the head-get cache.
func TestDurablePull(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("allowDirect=%v", direct), func(t *testing.T) {
			s := startServer(t, nil)
			c := newClient(t, s)
			st := c.stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, AllowDirect: direct})
			subjects := make([]string, 10)
			for i := range subjects {
				subjects[i] = fmt.Sprintf("orders.%d", i)
			}
			c.publish(t, subjects...)
			cons := c.consumer(t, "ORDERS", jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy})
			clock := newFakeClock()
			o := newObserver(t, s, func(c *Config) { c.Now = clock.Now })

			sm := find(t, observe(t, o), "ORDERS", "worker")
			p := sm.Partitions[0]
			checkPart(t, "fresh", p, 10, 0, 1, 1, 11)
			checkHead(t, "fresh", p, storedTime(t, st, 1))
			if p.Err != "" || p.Stale {
				t.Errorf("fresh: err %q stale %v", p.Err, p.Stale)
			}
			if sm.Members != -1 || sm.GroupState != StateIdle || !sm.At.Equal(clock.Now()) {
				t.Errorf("fresh: members %d state %q at %v", sm.Members, sm.GroupState, sm.At)
			}
			if want := (lag.Target{Kind: lag.KindNATS, Cluster: "test", Topic: "ORDERS", Group: "worker"}); sm.Target != want {
				t.Errorf("target %+v, want %+v", sm.Target, want)
			}
			if got := o.Stats().Last; got.GetCalls != 1 || got.ListCalls != 2 || got.StreamInfoCalls != 1 {
				t.Errorf("fresh stats: %+v, want 1 get, 2 list pages, 1 stream info", got)
			}
			consumed0 := p.End - p.Lag

			// Fetch 3, ack 2: the floor moves to 2, one message stays ack
			// pending, the head moves to sequence 3.
			third := fetch(t, cons, 3, 2)[2]
			clock.Advance(time.Second)
			p = find(t, observe(t, o), "ORDERS", "worker").Partitions[0]
			checkPart(t, "after acks", p, 8, 1, 3, 1, 11)
			checkHead(t, "after acks", p, storedTime(t, st, 3))
			if got := p.End - p.Lag - consumed0; got != 2 {
				t.Errorf("consumed position moved by %d, want 2", got)
			}
			if got := o.Stats().Last; got.GetCalls != 1 || got.GetCacheHits != 0 {
				t.Errorf("after acks stats: %+v, want 1 get", got)
			}

			// Nothing moved: the head comes from the cache.
			clock.Advance(time.Second)
			p = find(t, observe(t, o), "ORDERS", "worker").Partitions[0]
			checkHead(t, "unchanged", p, storedTime(t, st, 3))
			if got := o.Stats().Last; got.GetCalls != 0 || got.GetCacheHits != 1 {
				t.Errorf("unchanged stats: %+v, want 0 gets, 1 cache hit", got)
			}

			// New messages raise End and Lag; the floor did not move, so
			// the head is still cached.
			c.publish(t, "orders.x", "orders.y")
			waitPending(t, cons, 9)
			clock.Advance(time.Second)
			p = find(t, observe(t, o), "ORDERS", "worker").Partitions[0]
			checkPart(t, "after publish", p, 10, 1, 3, 1, 13)
			checkHead(t, "after publish", p, storedTime(t, st, 3))
			if got := o.Stats().Last; got.GetCalls != 0 || got.GetCacheHits != 1 {
				t.Errorf("after publish stats: %+v, want 0 gets, 1 cache hit", got)
			}

			// Everything acked: no lag, no head, no get.
			if err := third.DoubleAck(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			fetch(t, cons, 9, 9)
			clock.Advance(time.Second)
			p = find(t, observe(t, o), "ORDERS", "worker").Partitions[0]
			checkPart(t, "drained", p, 0, 0, 13, 1, 13)
			if p.HeadKnown || !p.HeadTime.IsZero() {
				t.Errorf("drained: head known %v time %v, want none", p.HeadKnown, p.HeadTime)
			}
			if got := o.Stats().Last.GetCalls; got != 0 {
				t.Errorf("drained: %d gets, want 0", got)
			}
		})
	}
}

// TestPullMembers: a pull consumer with an outstanding pull request
// reports it as a member.
func TestPullMembers(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	cons := c.consumer(t, "S", jetstream.ConsumerConfig{Durable: "puller", AckPolicy: jetstream.AckExplicitPolicy})
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })

	sm := find(t, observe(t, o), "S", "puller")
	if sm.Members != -1 || sm.GroupState != StateIdle || sm.Live != lag.LiveNo {
		t.Fatalf("no puller: members %d state %q live %s, want -1 idle, idle", sm.Members, sm.GroupState, sm.Live)
	}
	cc, err := cons.Consume(func(jetstream.Msg) {}, jetstream.PullExpiry(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	eventually(t, 10*time.Second, func() error {
		sm := find(t, observe(t, o), "S", "puller")
		if sm.Members < 1 || sm.GroupState != StateActive || sm.Live != lag.LiveYes {
			return fmt.Errorf("members %d state %q live %s", sm.Members, sm.GroupState, sm.Live)
		}
		return nil
	})
}

// TestLiveBetweenFetches: a pull consumer that fetched between two
// readings, with no pull request waiting at either, was live; the reading
// after, with no delivery since, says idle. A push consumer is live while
// bound.
func TestLiveBetweenFetches(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}})
	cons := c.consumer(t, "F", jetstream.ConsumerConfig{Durable: "fetcher", AckPolicy: jetstream.AckExplicitPolicy})
	_, err := c.js.CreateOrUpdatePushConsumer(ctxT(t), "F", jetstream.ConsumerConfig{
		Durable: "pusher", DeliverSubject: "deliver.f", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.publish(t, "f.1", "f.2", "f.3")
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })
	live := func(name string) lag.Liveness { return find(t, observe(t, o), "F", name).Live }
	if l := live("fetcher"); l != lag.LiveNo {
		t.Fatalf("before any fetch: %s, want idle", l)
	}
	fetch(t, cons, 2, 2) // a batch that the server completes at once
	if l := live("fetcher"); l != lag.LiveYes {
		t.Fatalf("after a fetch between readings: %s, want live", l)
	}
	if l := live("fetcher"); l != lag.LiveNo {
		t.Fatalf("a reading later, nothing delivered: %s, want idle", l)
	}
	if l := live("pusher"); l != lag.LiveNo {
		t.Fatalf("unbound push consumer: %s, want idle", l)
	}
	sub, err := c.nc.SubscribeSync("deliver.f")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	eventually(t, 10*time.Second, func() error {
		if l := find(t, observe(t, o), "F", "pusher").Live; l != lag.LiveYes {
			return fmt.Errorf("bound push consumer: %s", l)
		}
		return nil
	})
}

// TestFirstReadingOfABusyPuller: a pull consumer working through a
// backlog completes its fetches at once, so a reading rarely finds a pull
// request waiting. The first reading of a daemon that just started (or of
// a replica that just took the stream's shard over) sees it idle, yet the
// consumer delivered and acked a moment ago: it is live (binds its
// producers) from that reading, not never-live until the next one. A
// durable that never fetched is never-live; one whose last delivery is
// older than the grace is abandoned.
func TestFirstReadingOfABusyPuller(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}})
	busy := c.consumer(t, "B", jetstream.ConsumerConfig{Durable: "busy", AckPolicy: jetstream.AckExplicitPolicy})
	c.consumer(t, "B", jetstream.ConsumerConfig{Durable: "never", AckPolicy: jetstream.AckExplicitPolicy})
	subjects := make([]string, 50)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("b.%d", i)
	}
	c.publish(t, subjects...)
	fetch(t, busy, 10, 10) // the backlog's first batch, acked; 40 to go
	cases := []struct {
		name     string
		consumer string
		abandon  time.Duration // Rules.AbandonAfter
		want     lag.Status
		rule     string
	}{
		{"busy puller, first reading", "busy", 2 * time.Minute, lag.StatusLagging, "over-age"},
		{"a durable that never fetched", "never", 2 * time.Minute, lag.StatusAbandoned, "never-live"},
		{"busy puller, its last delivery older than the grace", "busy", time.Nanosecond, lag.StatusAbandoned, "abandoned"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newObserver(t, s, nil) // a daemon that just started
			sm := find(t, observe(t, o), "B", tc.consumer)
			if sm.Live != lag.LiveNo {
				t.Fatalf("live %s, want idle (no pull request waiting)", sm.Live)
			}
			tr := lag.NewTracker(func(lag.Target) lag.Rules { return lag.Rules{AbandonAfter: tc.abandon, LagAge: time.Nanosecond} })
			st := tr.Observe(sm, sm.At)
			if st.Status != tc.want || st.Rule != tc.rule {
				t.Fatalf("status %s (%s: %s), want %s (%s); last active %v", st.Status, st.Rule, st.Reason, tc.want, tc.rule, sm.LastActive)
			}
		})
	}
}

// TestEphemeralConsumer: an ephemeral consumer is observed under its
// server-generated name.
func TestEphemeralConsumer(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	st := c.stream(t, jetstream.StreamConfig{Name: "E", Subjects: []string{"e.>"}})
	c.publish(t, "e.1", "e.2", "e.3")
	cons, err := c.js.CreateConsumer(ctxT(t), "E", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	name := cons.CachedInfo().Name
	o := newObserver(t, s, nil)
	p := find(t, observe(t, o), "E", name).Partitions[0]
	checkPart(t, "ephemeral", p, 3, 0, 1, 1, 4)
	checkHead(t, "ephemeral", p, storedTime(t, st, 1))
}

// TestPushConsumer: a push consumer is inactive until something subscribes
// to its deliver subject, then active with one member.
func TestPushConsumer(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	st := c.stream(t, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}})
	c.publish(t, "p.1", "p.2")
	_, err := c.js.CreateOrUpdatePushConsumer(ctxT(t), "P", jetstream.ConsumerConfig{
		Durable: "pusher", DeliverSubject: "deliver.pusher", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })
	sm := find(t, observe(t, o), "P", "pusher")
	if sm.Members != 0 || sm.GroupState != StateInactive {
		t.Errorf("unbound: members %d state %q, want 0 inactive", sm.Members, sm.GroupState)
	}
	checkPart(t, "unbound", sm.Partitions[0], 2, 0, 1, 1, 3)
	checkHead(t, "unbound", sm.Partitions[0], storedTime(t, st, 1))

	sub, err := c.nc.SubscribeSync("deliver.pusher")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	eventually(t, 10*time.Second, func() error {
		sm := find(t, observe(t, o), "P", "pusher")
		p := sm.Partitions[0]
		if sm.Members != 1 || sm.GroupState != StateActive {
			return fmt.Errorf("members %d state %q", sm.Members, sm.GroupState)
		}
		// Delivered, not acked: still lag, now ack pending.
		if p.Lag != 2 || p.AckPending != 2 {
			return fmt.Errorf("lag %d ack pending %d, want 2 2", p.Lag, p.AckPending)
		}
		return nil
	})
}

// TestFilterSubjects: on a stream with interleaved subjects, a consumer
// with two filter subjects has the earliest matching message as its head
// (one get per filter), a single-filter consumer its own, and a consumer
// whose filters equal the stream's subjects counts as unfiltered.
func TestFilterSubjects(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	st := c.stream(t, jetstream.StreamConfig{Name: "MIX", Subjects: []string{"a.*", "b.*", "c.*"}, AllowDirect: true})
	// seq:         1      2      3      4      5      6      7
	c.publish(t, "c.1", "a.1", "c.2", "b.1", "a.2", "c.3", "b.2")
	ab := c.consumer(t, "MIX", jetstream.ConsumerConfig{Durable: "ab", FilterSubjects: []string{"a.*", "b.*"}, AckPolicy: jetstream.AckExplicitPolicy})
	c.consumer(t, "MIX", jetstream.ConsumerConfig{Durable: "conly", FilterSubject: "c.*", AckPolicy: jetstream.AckExplicitPolicy})
	c.consumer(t, "MIX", jetstream.ConsumerConfig{Durable: "all3", FilterSubjects: []string{"c.*", "a.*", "b.*"}, AckPolicy: jetstream.AckExplicitPolicy})
	clock := newFakeClock()
	o := newObserver(t, s, func(c *Config) { c.Now = clock.Now })

	samples := observe(t, o)
	p := find(t, samples, "MIX", "ab").Partitions[0]
	// Filtered End = delivered (0) + pending (4).
	checkPart(t, "ab", p, 4, 0, 1, 1, 4)
	checkHead(t, "ab", p, storedTime(t, st, 2))
	p = find(t, samples, "MIX", "conly").Partitions[0]
	checkPart(t, "conly", p, 3, 0, 1, 1, 3)
	checkHead(t, "conly", p, storedTime(t, st, 1))
	p = find(t, samples, "MIX", "all3").Partitions[0]
	// Unfiltered in effect: End = LastSeq + 1.
	checkPart(t, "all3", p, 7, 0, 1, 1, 8)
	checkHead(t, "all3", p, storedTime(t, st, 1))
	if got := o.Stats().Last.GetCalls; got != 2+1+1 {
		t.Errorf("gets: %d, want 4 (two filters, one, one)", got)
	}

	// Ack a.1 (seq 2): the head of ab is now b.1 (seq 4).
	fetch(t, ab, 1, 1)
	clock.Advance(time.Second)
	samples = observe(t, o)
	p = find(t, samples, "MIX", "ab").Partitions[0]
	if p.Lag != 3 || p.End != 4 || p.Committed < 3 {
		t.Errorf("ab after ack: lag %d end %d committed %d, want 3, 4, >= 3", p.Lag, p.End, p.Committed)
	}
	checkHead(t, "ab after ack", p, storedTime(t, st, 4))
	if got := o.Stats().Last; got.GetCalls != 2 || got.GetCacheHits != 2 {
		t.Errorf("stats after ack: %+v, want 2 gets (ab), 2 cache hits", got)
	}
}

// TestRedeliveriesAreNotConsumption: a consumer that receives the same
// message over and over (fetch, nak, every cycle) and acknowledges nothing
// makes no progress, filtered or not. The unfiltered consumer measures
// consumption in stream sequences; the filtered one counts deliveries, and
// its redeliveries (the consumer sequence grows with each) must not read
// as consumption: both come out stalled with consume rate 0, while the
// messages published meanwhile still count as production. An ack then
// moves both consumed positions by exactly one.
func TestRedeliveriesAreNotConsumption(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.*"}})
	c.publish(t, "s.a", "s.a", "s.a")
	// One message ack pending at a time: a nak is asynchronous, and until
	// the server has processed it the next fetch must wait for the
	// redelivery instead of handing out the next new message.
	f := c.consumer(t, "S", jetstream.ConsumerConfig{Durable: "filtered", FilterSubject: "s.a", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
	u := c.consumer(t, "S", jetstream.ConsumerConfig{Durable: "unfiltered", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
	waitPending(t, f, 3)
	waitPending(t, u, 3)
	// The head is a real stored timestamp: start the clock at real time.
	clock := &fakeClock{t: time.Now()}
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Millisecond; c.Interval = time.Millisecond; c.Now = clock.Now })
	tr := lag.NewTracker(nil)
	consumers := map[string]jetstream.Consumer{"filtered": f, "unfiltered": u}

	// cycle observes both consumers once the server counts the published
	// messages as pending, and returns their states and consumed positions.
	cycle := func(pendingF, pendingU uint64) (map[string]lag.State, map[string]int64) {
		t.Helper()
		waitPending(t, f, pendingF)
		waitPending(t, u, pendingU)
		clock.Advance(10 * time.Second)
		states, consumed := map[string]lag.State{}, map[string]int64{}
		for _, sm := range observe(t, o) {
			p := sm.Partitions[0]
			states[sm.Target.Group] = tr.Observe(sm, clock.Now())
			consumed[sm.Target.Group] = p.End - p.Lag
		}
		return states, consumed
	}
	// redeliver fetches the message redelivered to cons (the first s.a,
	// which the server hands out again before anything new) and returns
	// it, nak'ed when nak is set.
	redeliver := func(cons jetstream.Consumer, nak bool) jetstream.Msg {
		t.Helper()
		m := fetch(t, cons, 1, 0)[0]
		if md, err := m.Metadata(); err != nil || md.Sequence.Stream != 1 {
			t.Fatalf("fetched %+v (%v), want stream sequence 1 again", md, err)
		}
		if nak {
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}

	var states map[string]lag.State
	var first map[string]int64
	pendingF, pendingU := uint64(2), uint64(2)
	for i := range 8 {
		for _, cons := range consumers {
			redeliver(cons, true)
		}
		if i > 0 {
			// Production goes on: one message both consumers see, one
			// only the unfiltered consumer sees.
			c.publish(t, "s.a", "s.b")
			pendingF, pendingU = pendingF+1, pendingU+2
		}
		var consumed map[string]int64
		states, consumed = cycle(pendingF, pendingU)
		if first == nil {
			first = consumed
		}
		for name, pos := range consumed {
			if pos != first[name] {
				t.Errorf("cycle %d: %s consumed position %d, was %d: redeliveries read as consumption", i, name, pos, first[name])
			}
		}
	}
	for _, name := range []string{"unfiltered", "filtered"} {
		st := states[name]
		t.Logf("%s after 8 nak cycles: status %s (%s), lag %d, consume rate %.3f/s, produce rate %.3f/s, last progress %v ago",
			name, st.Status, st.Reason, st.Lag, st.ConsumeRate, st.ProduceRate, clock.Now().Sub(st.LastProgress))
		if st.Status != lag.StatusStalled || st.ConsumeRate != 0 {
			t.Errorf("%s: status %s, consume rate %.3f/s; want stalled with consume rate 0 (nothing was acknowledged)", name, st.Status, st.ConsumeRate)
		}
		if st.ProduceRate <= 0 {
			t.Errorf("%s: produce rate %.3f/s, want > 0 (messages were published)", name, st.ProduceRate)
		}
	}

	// One more delivery, left ack pending: still nothing consumed.
	held := map[string]jetstream.Msg{}
	for name, cons := range consumers {
		held[name] = redeliver(cons, false)
	}
	_, consumed := cycle(pendingF, pendingU)
	for name, pos := range consumed {
		if pos != first[name] {
			t.Errorf("delivered, not acked: %s consumed position %d, was %d", name, pos, first[name])
		}
	}
	// Acknowledge it: exactly one message consumed, and progress again.
	for _, m := range held {
		if err := m.DoubleAck(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	states, consumed = cycle(pendingF, pendingU)
	for _, name := range []string{"unfiltered", "filtered"} {
		st := states[name]
		t.Logf("%s after the ack: status %s (%s), consumed %+d, consume rate %.3f/s",
			name, st.Status, st.Reason, consumed[name]-first[name], st.ConsumeRate)
		if got := consumed[name] - first[name]; got != 1 {
			t.Errorf("%s: consumed position moved by %d after one ack, want 1", name, got)
		}
		if st.Status == lag.StatusStalled || st.ConsumeRate <= 0 || !st.LastProgress.Equal(clock.Now()) {
			t.Errorf("%s after the ack: status %s, consume rate %.3f/s, last progress %v; want progress now", name, st.Status, st.ConsumeRate, st.LastProgress)
		}
	}
}

// TestPurge: a purge empties the lag, End does not go back (the purged
// messages read as consumed), and the head follows new messages. Both an
// unfiltered and a filtered consumer.
func TestPurge(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	st := c.stream(t, jetstream.StreamConfig{Name: "PG", Subjects: []string{"pg.*"}})
	c.publish(t, "pg.a", "pg.b", "pg.a", "pg.b", "pg.a", "pg.b", "pg.a", "pg.b", "pg.a", "pg.b")
	all := c.consumer(t, "PG", jetstream.ConsumerConfig{Durable: "all", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	onlya := c.consumer(t, "PG", jetstream.ConsumerConfig{Durable: "onlya", FilterSubject: "pg.a", AckPolicy: jetstream.AckExplicitPolicy})
	fetch(t, all, 3, 0)
	clock := newFakeClock()
	o := newObserver(t, s, func(c *Config) { c.Now = clock.Now })

	samples := observe(t, o)
	checkPart(t, "all before", find(t, samples, "PG", "all").Partitions[0], 10, 3, 1, 1, 11)
	checkPart(t, "onlya before", find(t, samples, "PG", "onlya").Partitions[0], 5, 0, 1, 1, 5)

	if err := st.Purge(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	samples = observe(t, o)
	for _, name := range []string{"all", "onlya"} {
		p := find(t, samples, "PG", name).Partitions[0]
		if p.Lag != 0 || p.LogStart != 11 || p.HeadKnown || p.Err != "" {
			t.Errorf("%s after purge: %+v, want lag 0, logStart 11, no head, no err", name, p)
		}
	}
	if p := find(t, samples, "PG", "onlya").Partitions[0]; p.End != 5 {
		t.Errorf("onlya after purge: end %d, want 5 (kept monotonic)", p.End)
	}
	if p := find(t, samples, "PG", "all").Partitions[0]; p.End != 11 {
		t.Errorf("all after purge: end %d, want 11", p.End)
	}

	c.publish(t, "pg.b", "pg.a")
	waitPending(t, all, 2)
	waitPending(t, onlya, 1)
	clock.Advance(time.Second)
	samples = observe(t, o)
	p := find(t, samples, "PG", "all").Partitions[0]
	checkPart(t, "all after new", p, 2, 0, 11, 11, 13)
	checkHead(t, "all after new", p, storedTime(t, st, 11))
	p = find(t, samples, "PG", "onlya").Partitions[0]
	if p.Lag != 1 || p.End != 6 {
		t.Errorf("onlya after new: lag %d end %d, want 1, 6", p.Lag, p.End)
	}
	checkHead(t, "onlya after new", p, storedTime(t, st, 12))
}

// TestMaxMsgsRemoval: messages removed by the MaxMsgs limit past the ack
// floor (LogStart jumps past it) are not lag any more; the clamp is silent.
func TestMaxMsgsRemoval(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	st := c.stream(t, jetstream.StreamConfig{Name: "LIM", Subjects: []string{"lim"}, MaxMsgs: 5})
	cons := c.consumer(t, "LIM", jetstream.ConsumerConfig{Durable: "slow", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	c.publish(t, "lim", "lim", "lim")
	fetch(t, cons, 2, 0) // seqs 1, 2 ack pending
	c.publish(t, "lim", "lim", "lim", "lim", "lim", "lim", "lim")
	waitPending(t, cons, 5)
	o := newObserver(t, s, nil)
	p := find(t, observe(t, o), "LIM", "slow").Partitions[0]
	// Stored: 6..10, all unprocessed. (The server drops the removed
	// ack-pending 1 and 2 and moves the floor to 2; the pure cross-check
	// tests cover a consumer that still counts removed messages.)
	if p.Lag != 5 || p.LogStart != 6 || p.End != 11 || p.Err != "" {
		t.Errorf("got %+v, want lag 5, logStart 6, end 11, no err", p)
	}
	t.Logf("committed %d, ack pending %d", p.Committed, p.AckPending)
	checkHead(t, "limit", p, storedTime(t, st, 6))
}

// TestMaxAgeExpiry: once MaxAge removed everything, lag is 0 although the
// consumer still has ack-pending entries; a new message is the head.
func TestMaxAgeExpiry(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	st := c.stream(t, jetstream.StreamConfig{Name: "AGE", Subjects: []string{"age"}, MaxAge: time.Second})
	cons := c.consumer(t, "AGE", jetstream.ConsumerConfig{Durable: "slow", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	c.publish(t, "age", "age", "age")
	fetch(t, cons, 1, 0)
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })
	if p := find(t, observe(t, o), "AGE", "slow").Partitions[0]; p.Lag != 3 {
		t.Fatalf("before expiry: lag %d, want 3", p.Lag)
	}
	eventually(t, 10*time.Second, func() error {
		p := find(t, observe(t, o), "AGE", "slow").Partitions[0]
		if p.LogStart != 4 || p.Lag != 0 || p.End != 4 || p.HeadKnown || p.Err != "" {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	c.publish(t, "age")
	// The server's pending counter sometimes stays at 0 here for good
	// (its running count drifted during the expiry); the lower-bound
	// cross-check then restores the lag and says so in Err.
	eventually(t, 10*time.Second, func() error {
		p := find(t, observe(t, o), "AGE", "slow").Partitions[0]
		if p.Lag != 1 || p.End != 5 || !p.HeadKnown {
			return fmt.Errorf("%+v", p)
		}
		checkHead(t, "after new message", p, storedTime(t, st, 4))
		if p.Err != "" {
			t.Logf("cross-check fired: %s", p.Err)
		}
		return nil
	})
}

// TestDeletedMidCycle: a consumer deleted and a stream deleted between the
// stream listing and their refresh disappear without an error; a stream
// with no consumers gives no sample.
func TestDeletedMidCycle(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}})
	c.stream(t, jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone"}})
	c.stream(t, jetstream.StreamConfig{Name: "EMPTY", Subjects: []string{"empty"}})
	c.publish(t, "keep", "gone")
	c.consumer(t, "KEEP", jetstream.ConsumerConfig{Durable: "stays"})
	c.consumer(t, "KEEP", jetstream.ConsumerConfig{Durable: "leaves"})
	c.consumer(t, "GONE", jetstream.ConsumerConfig{Durable: "g"})
	o := newObserver(t, s, func(c *Config) { c.Concurrency = 1 })
	o.testHookRefresh = func(stream string) error {
		ctx := context.Background()
		switch stream {
		case "KEEP":
			return c.js.DeleteConsumer(ctx, "KEEP", "leaves")
		case "GONE":
			return c.js.DeleteStream(ctx, "GONE")
		}
		return nil
	}
	samples := observe(t, o)
	if len(samples) != 1 || samples[0].Target.Group != "stays" {
		t.Fatalf("samples %+v, want only KEEP/stays", samples)
	}
	if got := o.Stats().Last.StreamErrors; got != 0 {
		t.Errorf("stream errors %d, want 0", got)
	}
}

// TestPartialFailure: a stream whose refresh fails keeps its previous
// readings, marked Stale with Err, and Observe reports ErrPartial with a
// StreamError; the other streams are unaffected.
func TestPartialFailure(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "OK", Subjects: []string{"ok"}})
	c.stream(t, jetstream.StreamConfig{Name: "BAD", Subjects: []string{"bad"}})
	c.publish(t, "ok", "bad", "bad")
	c.consumer(t, "OK", jetstream.ConsumerConfig{Durable: "c"})
	c.consumer(t, "BAD", jetstream.ConsumerConfig{Durable: "c"})
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })
	observe(t, o)
	boom := errors.New("boom")
	o.testHookRefresh = func(stream string) error {
		if stream == "BAD" {
			return boom
		}
		return nil
	}
	samples, err := o.Observe(ctxT(t))
	if !errors.Is(err, ErrPartial) || !errors.Is(err, boom) {
		t.Fatalf("err %v, want ErrPartial wrapping boom", err)
	}
	var se *StreamError
	if !errors.As(err, &se) || se.Stream != "BAD" {
		t.Fatalf("err %v, want a *StreamError for BAD", err)
	}
	bad := find(t, samples, "BAD", "c")
	if p := bad.Partitions[0]; !p.Stale || !strings.Contains(p.Err, "boom") || p.Lag != 2 || bad.Err == "" {
		t.Errorf("BAD: %+v, want stale with err and the previous lag 2", bad)
	}
	if p := find(t, samples, "OK", "c").Partitions[0]; p.Stale || p.Err != "" || p.Lag != 1 {
		t.Errorf("OK: %+v, want fresh lag 1", p)
	}
	if st := o.Stats().Last; st.StreamErrors != 1 || st.StreamsRefreshed != 1 {
		t.Errorf("stats %+v, want 1 error, 1 refreshed", st)
	}
}

// TestFilters: stream and consumer include/exclude patterns are anchored.
func TestFilters(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	for _, name := range []string{"ORDERS", "ORDERS_DLQ", "AUDIT"} {
		c.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name)}})
		for _, cons := range []string{"billing", "billing-canary", "shipping"} {
			c.consumer(t, name, jetstream.ConsumerConfig{Durable: cons})
		}
	}
	o := newObserver(t, s, func(c *Config) {
		c.Streams = Filter{Include: []string{"ORDERS.*"}, Exclude: []string{".*_DLQ"}}
		c.Consumers = Filter{Include: []string{"billing"}}
	})
	samples := observe(t, o)
	var got []string
	for _, s := range samples {
		got = append(got, s.Target.Topic+"/"+s.Target.Group)
	}
	if strings.Join(got, ",") != "ORDERS/billing" {
		t.Errorf("got %v, want [ORDERS/billing]", got)
	}
}

// TestJitterSchedule: with InfoInterval five observation intervals and
// full jitter, each stream is refreshed at most once per InfoInterval, the
// refreshes after the first cycle are spread over several cycles, and the
// readings in between are repeated with their original At, not stale.
func TestJitterSchedule(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	const nStreams = 20
	for i := range nStreams {
		name := fmt.Sprintf("S%02d", i)
		c.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name}})
		c.consumer(t, name, jetstream.ConsumerConfig{Durable: "c"})
	}
	clock := newFakeClock()
	o := newObserver(t, s, func(c *Config) {
		c.Interval = time.Second
		c.InfoInterval = 5 * time.Second
		c.Jitter = 1
		c.Now = clock.Now
	})

	lastAt := map[string]time.Time{}
	refreshes := map[string]int{}
	var perCycle []int64
	for cycle := range 16 {
		samples := observe(t, o)
		if len(samples) != nStreams {
			t.Fatalf("cycle %d: %d samples", cycle, len(samples))
		}
		n := 0
		for _, sm := range samples {
			name := sm.Target.Topic
			if sm.Partitions[0].Stale {
				t.Errorf("cycle %d: %s stale", cycle, name)
			}
			if prev, ok := lastAt[name]; !ok || !sm.At.Equal(prev) {
				if ok && sm.At.Sub(prev) < 5*time.Second-time.Second/4 {
					t.Errorf("%s refreshed %v after the previous refresh", name, sm.At.Sub(prev))
				}
				if !sm.At.Equal(clock.Now()) {
					t.Errorf("%s: new At %v, want now %v", name, sm.At, clock.Now())
				}
				lastAt[name] = sm.At
				refreshes[name]++
				n++
			}
		}
		if got := o.Stats().Last.StreamsRefreshed; got != int64(n) {
			t.Errorf("cycle %d: stats say %d refreshed, samples %d", cycle, got, n)
		}
		if got := o.Stats().Last.ListCalls; got != 1+int64(n) {
			t.Errorf("cycle %d: %d list calls, want 1 + %d", cycle, got, n)
		}
		perCycle = append(perCycle, int64(n))
		clock.Advance(time.Second)
	}
	if perCycle[0] != nStreams {
		t.Errorf("first cycle refreshed %d, want all %d", perCycle[0], nStreams)
	}
	busiest, busy := int64(0), 0
	for _, n := range perCycle[1:] {
		busiest = max(busiest, n)
		if n > 0 {
			busy++
		}
	}
	if busiest >= nStreams/2 || busy < 4 {
		t.Errorf("refreshes per cycle %v: not spread (busiest %d, %d busy cycles)", perCycle, busiest, busy)
	}
	for name, n := range refreshes {
		// 16 cycles over 15 s: the first refresh, then at most 3 more.
		if n < 3 || n > 4 {
			t.Errorf("%s refreshed %d times in 16 cycles, want 3 or 4", name, n)
		}
	}
	t.Logf("refreshes per cycle: %v", perCycle)
}

// TestStaleAfterThreeIntervals: readings repeated for longer than three
// InfoIntervals (a stream the server listed without its info) are Stale.
func TestStaleAfterThreeIntervals(t *testing.T) {
	clock := newFakeClock()
	o := &Observer{cfg: Config{InfoInterval: time.Second, Now: clock.Now}.WithDefaults(), state: map[string]*streamState{}}
	sample := lag.Sample{Target: lag.Target{Topic: "S", Group: "c"}, At: clock.Now(), Partitions: []lag.PartitionSample{{Lag: 3}}}
	o.state["S"] = &streamState{ok: true, fetchedAt: clock.Now(), samples: []lag.Sample{sample}}
	for _, tc := range []struct {
		advance time.Duration
		stale   bool
	}{
		{time.Second, false},     // one interval: fine
		{2 * time.Second, false}, // three intervals exactly: still fine
		{time.Millisecond, true}, // just past three intervals: stale
	} {
		clock.Advance(tc.advance)
		got := o.assemble(clock.Now())
		if got[0].Partitions[0].Stale != tc.stale || !got[0].At.Equal(sample.At) {
			t.Errorf("after %v: %+v, want stale %v and the original At", clock.Now().Sub(sample.At), got[0], tc.stale)
		}
	}
	if o.state["S"].samples[0].Partitions[0].Stale {
		t.Error("assemble mutated the stored reading")
	}
}

// TestServerRestart: while the server is down Observe fails fast with
// ErrNotConnected; after a restart on the same port and store dir it works
// again and sees the persisted state.
func TestServerRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, func(o *server.Options) { o.StoreDir = dir })
	port := serverPort(t, s)
	c := newClient(t, s)
	c.stream(t, jetstream.StreamConfig{Name: "R", Subjects: []string{"r"}})
	c.publish(t, "r", "r", "r")
	c.consumer(t, "R", jetstream.ConsumerConfig{Durable: "c"})
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond },
		natsgo.ReconnectWait(50*time.Millisecond))
	if p := find(t, observe(t, o), "R", "c").Partitions[0]; p.Lag != 3 {
		t.Fatalf("before restart: lag %d", p.Lag)
	}

	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, 10*time.Second, func() error {
		start := time.Now()
		_, err := o.Observe(ctxT(t))
		if !errors.Is(err, ErrNotConnected) {
			return fmt.Errorf("err %v, want ErrNotConnected", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Observe took %v while disconnected, want fast failure", d)
		}
		return nil
	})

	startServer(t, func(o *server.Options) { o.StoreDir = dir; o.Port = port })
	eventually(t, 20*time.Second, func() error {
		samples, err := o.Observe(ctxT(t))
		if err != nil {
			return err
		}
		if p := find(t, samples, "R", "c").Partitions[0]; p.Lag != 3 {
			return fmt.Errorf("lag %d, want 3", p.Lag)
		}
		return nil
	})
}

// TestAuth: user/password and token authentication reach a server that
// requires them; a wrong password fails New.
func TestAuth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		server  func(*server.Options)
		cfg     func(*Config)
		wantErr bool
	}{
		// user and password accepted
		{"user", func(o *server.Options) { o.Username, o.Password = "obs", "s3cret" }, func(c *Config) { c.User, c.Password = "obs", "s3cret" }, false},
		// token accepted
		{"token", func(o *server.Options) { o.Authorization = "tok3n" }, func(c *Config) { c.Token = "tok3n" }, false},
		// wrong password refused at connect
		{"wrong password", func(o *server.Options) { o.Username, o.Password = "obs", "s3cret" }, func(c *Config) { c.User, c.Password = "obs", "nope" }, true},
		// no credentials refused at connect
		{"missing token", func(o *server.Options) { o.Authorization = "tok3n" }, func(*Config) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.server)
			cfg := Config{Cluster: "test", URLs: []string{s.ClientURL()}, RequestTimeout: 2 * time.Second}
			tc.cfg(&cfg)
			o, err := New(cfg)
			if tc.wantErr {
				if err == nil {
					o.Close()
					t.Fatal("New succeeded, want an auth error")
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer o.Close()
			if _, err := o.Observe(ctxT(t)); err != nil {
				t.Fatalf("Observe: %v", err)
			}
		})
	}
}

// TestNoJetStream: a server without JetStream gives ErrNoJetStream.
func TestNoJetStream(t *testing.T) {
	s := startServer(t, func(o *server.Options) { o.JetStream = false })
	o := newObserver(t, s, nil)
	_, err := o.Observe(ctxT(t))
	if !errors.Is(err, ErrNoJetStream) {
		t.Fatalf("err %v, want ErrNoJetStream", err)
	}
}

// TestClose: Close is idempotent, Observe afterwards returns ErrClosed and
// the connection is closed.
func TestClose(t *testing.T) {
	s := startServer(t, nil)
	o := newObserver(t, s, nil)
	observe(t, o)
	o.Close()
	o.Close()
	if _, err := o.Observe(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("Observe after Close: %v, want ErrClosed", err)
	}
	if !o.Conn().IsClosed() {
		t.Error("connection not closed")
	}
}

// TestNewErrors: New rejects an invalid config with every problem and
// fails on an unreachable server.
func TestNewErrors(t *testing.T) {
	_, err := New(Config{})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("empty config: %v, want ErrInvalidConfig", err)
	}
	_, err = New(Config{Cluster: "x", URLs: []string{"nats://127.0.0.1:1"}, RequestTimeout: 500 * time.Millisecond})
	if err == nil {
		t.Error("unreachable server: New succeeded")
	}
}
