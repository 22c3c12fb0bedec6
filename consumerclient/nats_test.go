package consumerclient

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/ttl/natsguard"
)

// fetchN fetches n messages of cons.
func fetchN(tb testing.TB, cons jetstream.Consumer, n int) []jetstream.Msg {
	tb.Helper()
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	if len(out) != n {
		tb.Fatalf("fetched %d messages, want %d (%v)", len(out), n, batch.Error())
	}
	return out
}

// newJetStream starts an embedded nats-server with stream name on subject
// and a durable pull consumer with explicit acks, and publishes n messages.
func newJetStream(tb testing.TB, name, subject, durable string, n int) (*server.Server, jetstream.Consumer) {
	tb.Helper()
	s := embedded.NATSTest(tb)
	js := embedded.Connect(tb, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	if err != nil {
		tb.Fatal(err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		tb.Fatal(err)
	}
	for range n {
		if _, err := js.Publish(ctx, subject, []byte("m")); err != nil {
			tb.Fatal(err)
		}
	}
	return s, cons
}

// newNATSDaemon is newTestDaemon observing s (cluster "main"), its
// reports fresh for fresh.
func newNATSDaemon(tb testing.TB, s *server.Server, fresh time.Duration) *testDaemon {
	tb.Helper()
	obs, err := nats.New(nats.Config{Cluster: "main", URLs: []string{s.ClientURL()}, RequestTimeout: 2 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(obs.Close)
	return newTestDaemon(tb, quotaserver.Auth{}, fresh, lag.KindNATS, obs)
}

// TestNATSReporterEndToEnd: two instances of one durable consumer that
// acknowledge in batches. While one holds messages, the daemon's sample
// carries the oldest of them; once both finished theirs, the furthest
// position, idle; when reports stop, the daemon falls back to the ack
// floor.
func TestNATSReporterEndToEnd(t *testing.T) {
	s, cons := newJetStream(t, "ORDERS", "orders.new", "billing", 10)
	d := newNATSDaemon(t, s, 500*time.Millisecond)
	newRep := func(member string) *NATSReporter {
		r, err := NewNATSReporter(Config{URL: d.URL, Cluster: "main", Member: member, Interval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	repA, repB := newRep("a"), newRep("b")
	defer repA.Close()
	defer repB.Close()

	// A takes 1-5 and finishes 1 and 2; B takes 6-10 and finishes them
	// all. Nobody has acknowledged anything yet: the batches ack later.
	a, b := fetchN(t, cons, 5), fetchN(t, cons, 5)
	for _, m := range a {
		repA.Received(m)
	}
	repA.Done(a[0])
	repA.Done(a[1])
	for _, m := range b {
		repB.Wrap(func(jetstream.Msg) {})(m)
	}
	md, err := a[2].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	target := lag.Target{Kind: lag.KindNATS, Cluster: "main", Topic: "ORDERS", Group: "billing"}
	// Sequences 1 and 2 are done: lag counts from 3, eight messages,
	// while the ack floor still says ten.
	st := d.waitState(t, target, "A's oldest message in hand reported", func(st lag.State) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].Reported.Position == 3 && st.Source == lag.SourceConsumer && st.Lag == 8
	})
	p := st.Partitions[0]
	if want := md.Timestamp.Truncate(time.Millisecond); !p.Reported.HeadTime.Equal(want) {
		t.Errorf("head time %v, want the stored time of sequence 3, %v", p.Reported.HeadTime, want)
	}
	t.Logf("reported %+v: lag %d, head age %v; the ack floor at %d says lag %d", p.Reported, st.Lag, st.HeadAge, p.Committed, st.CommittedLag)

	// A finishes and both batches are acknowledged: idle at 11.
	for _, m := range a[2:] {
		repA.Done(m)
	}
	for _, m := range append(a, b...) {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	d.waitState(t, target, "idle past the last message", func(st lag.State) bool {
		r := st.Partitions[0].Reported
		return !r.IsZero() && r.Position == 11 && r.HeadTime.IsZero()
	})

	repA.Close()
	repB.Close()
	d.waitState(t, target, "fallback to the ack floor", func(st lag.State) bool { return st.Partitions[0].Reported.IsZero() })
}

// TestNATSGuardProgress: with a ttl/natsguard guard as the reporter's
// Progress, a message is in hand while its handler runs and done after.
func TestNATSGuardProgress(t *testing.T) {
	_, cons := newJetStream(t, "S", "s", "d", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := newTestDaemon(t, quotaserver.Auth{}, time.Second, lag.KindNATS, nil)
	rep, err := NewNATSReporter(Config{URL: d.URL, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	g, err := natsguard.New(natsguard.Config{Progress: rep})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range fetchN(t, cons, 3) {
		err := g.Handle(ctx, m, func(context.Context, jetstream.Msg) error {
			group, topics := rep.snapshot(time.Now())
			if p := topics[0].Partitions[0]; group != "d" || p.Position != int64(i+1) || p.HeadTimeMs == 0 {
				t.Errorf("handling sequence %d: the reporter says %s %+v", i+1, group, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, topics := rep.snapshot(time.Now()); !topics[0].Partitions[0].Idle || topics[0].Partitions[0].Position != 4 {
		t.Errorf("after the batch: %+v, want idle at 4", topics[0].Partitions[0])
	}
}

// TestNATSReporterHeld: a consumer's one instance says how many messages
// it holds from its position on (up to the highest received, a message
// done out of order among them) and for how long it has finished none,
// and the daemon's sample carries both (lag.Report.Held, HeldFor), as a
// Kafka hook's. Receiving more does not restart the time; a message done
// does. Before, a NATS report counted nothing: the daemon read no bound
// of the consumer's capacity while its position stood still, and no
// climb back after a stall.
func TestNATSReporterHeld(t *testing.T) {
	s, cons := newJetStream(t, "HELD", "held.new", "worker", 4)
	d := newNATSDaemon(t, s, 2*time.Second)
	rep, err := NewNATSReporter(Config{URL: d.URL, Cluster: "main", Member: "a", Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	target := lag.Target{Kind: lag.KindNATS, Cluster: "main", Topic: "HELD", Group: "worker"}

	// Sequences 1-3 in hand, 2 done out of order: 1 is the oldest work,
	// and the consumer holds 1-3 from it.
	msgs := fetchN(t, cons, 3)
	for _, m := range msgs {
		rep.Received(m)
	}
	rep.Done(msgs[1])
	st := d.waitState(t, target, "three held from sequence 1 for 300ms", func(st lag.State) bool {
		r := st.Partitions[0].Reported
		return st.Source == lag.SourceConsumer && r.Position == 1 && r.Held == 3 && r.HeldFor >= 300*time.Millisecond
	})
	if _, topics := rep.snapshot(time.Now()); topics[0].Partitions[0].HeldMs < 300 {
		t.Errorf("the reporter says %+v", topics[0].Partitions[0])
	}
	t.Logf("reported %+v", st.Partitions[0].Reported)

	// A fourth received: the consumer still has finished none since 2.
	held := st.Partitions[0].Reported.HeldFor
	rep.Received(fetchN(t, cons, 1)[0])
	d.waitState(t, target, "four held, the time running on", func(st lag.State) bool {
		r := st.Partitions[0].Reported
		return r.Position == 1 && r.Held == 4 && r.HeldFor > held
	})

	// Sequence 1 done: the position moves to 3, holding 3 and 4, and the
	// time starts again.
	done := time.Now()
	rep.Done(msgs[0])
	d.waitState(t, target, "two held from sequence 3, since 1 was done", func(st lag.State) bool {
		r := st.Partitions[0].Reported
		return r.Position == 3 && r.Held == 2 && r.HeldFor <= time.Since(done)
	})
}

// TestNATSReporterHeldTime: when the time a consumer has finished none
// starts, read from the snapshot at a moment taken just before a
// Received, so that no assertion depends on how long anything took. The
// first message of a stream and a message received after an idle pause
// start it (an idle consumer must not report its idle time, nor a day on a
// new stream); a message received while others are in hand does not
// restart it. Before, TestNATSReporterHeld waited for HeldFor to grow, and
// passed with either mistake.
func TestNATSReporterHeldTime(t *testing.T) {
	_, cons := newJetStream(t, "TIME", "time.new", "worker", 5)
	d := newTestDaemon(t, quotaserver.Auth{}, time.Second, lag.KindNATS, nil)
	rep, err := NewNATSReporter(Config{URL: d.URL, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	heldMs := func(now time.Time) int64 {
		t.Helper()
		_, topics := rep.snapshot(now)
		p := topics[0].Partitions[0]
		if p.Idle {
			t.Fatalf("the reporter says idle: %+v", p)
		}
		return p.HeldMs
	}
	msgs := fetchN(t, cons, 5)

	before := time.Now()
	rep.Received(msgs[0])
	if ms := heldMs(before); ms != 0 {
		t.Errorf("the stream's first message: heldMs %d, want 0 (the time starts at the Received)", ms)
	}
	rep.Done(msgs[0])

	// Idle for a while, then one message: the time starts at its Received,
	// not at the last Done.
	time.Sleep(50 * time.Millisecond)
	before = time.Now()
	rep.Received(msgs[1])
	if ms := heldMs(before); ms != 0 {
		t.Errorf("received after an idle pause: heldMs %d, want 0 (the idle time is not held)", ms)
	}

	// More received while 2 is in hand: the time runs on from 2's Received.
	started := time.Now()
	rep.Received(msgs[2])
	time.Sleep(50 * time.Millisecond)
	before = time.Now()
	rep.Received(msgs[3])
	if ms, want := heldMs(before), before.Sub(started).Milliseconds(); ms < want {
		t.Errorf("received with 2 in hand: heldMs %d, want at least %d (receiving more does not restart the time)", ms, want)
	}
}

// TestNATSReporterOlderDaemon: a NATS reporter against a daemon of
// protocol 1.2, which refuses the held counts: it sends the same report
// without them and keeps doing so, and counts no refusal.
func TestNATSReporterOlderDaemon(t *testing.T) {
	_, cons := newJetStream(t, "OLD", "old.new", "worker", 2)
	old := &olderDaemon[report12]{}
	ts := httptest.NewServer(old)
	defer ts.Close()
	rep, err := NewNATSReporter(Config{URL: ts.URL, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	for _, m := range fetchN(t, cons, 2) {
		rep.Received(m)
	}
	waitFor(t, "three reports of the messages in hand stored", func() bool { return old.inHand(1) >= 3 })
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.refused) != 1 {
		t.Errorf("the older daemon refused %d reports (%q), want the first only", len(old.refused), old.refused)
	}
	if n := rep.s.count(outcomeRefused); n != 0 {
		t.Errorf("the reporter counts %d refused reports, want 0 (the report went without the counts)", n)
	}
}

// TestNATSReporterHeldOutOfOrder: handlers run in parallel, so messages
// may be received out of stream order; the count runs to the highest
// sequence received, not the last one (which would count 1 here).
func TestNATSReporterHeldOutOfOrder(t *testing.T) {
	_, cons := newJetStream(t, "ORDER", "order.new", "worker", 3)
	rep, err := NewNATSReporter(Config{URL: "http://127.0.0.1:1", Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	msgs := fetchN(t, cons, 3)
	for _, m := range slices.Backward(msgs) {
		rep.Received(m)
	}
	_, topics := rep.snapshot(time.Now())
	if p := topics[0].Partitions[0]; p.Position != 1 || p.Held != 3 {
		t.Errorf("received 3, 2, 1: %+v, want position 1 holding 3", p)
	}
}
