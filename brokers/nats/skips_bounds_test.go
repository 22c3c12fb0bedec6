package nats

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testSkips is a skips that watches every consumer, logging to buf.
func testSkips(buf *bytes.Buffer, mu *sync.Mutex) *skips {
	log := slog.New(slog.DiscardHandler)
	if buf != nil {
		log = slog.New(slog.NewTextHandler(&lockedWriter{w: buf, mu: mu}, nil))
	}
	return &skips{watched: func(string, string) bool { return true }, log: log,
		version: func() string { return "2.15.2" }, runs: make(map[skipKey][]skipRun)}
}

// guardTerm is the advisory of a guard's term of stream's consumer at at
// (stream_seq seq), on its subject.
func guardTerm(stream, consumer string, at time.Time, seq uint64) *natsgo.Msg {
	return &natsgo.Msg{
		Subject: "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + stream + "." + consumer,
		Data: fmt.Appendf(nil, `{"type":"io.nats.jetstream.advisory.v1.terminated","timestamp":%q,"stream":%q,"consumer":%q,"stream_seq":%d,"deliveries":1,"reason":"lagbridge-ttl: expired (deadline)"}`,
			at.Format(time.RFC3339Nano), stream, consumer, seq),
	}
}

// keptKeys is how many consumers' counts sk holds, and whether it holds
// k's.
func keptKeys(sk *skips, k skipKey) (int, bool) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	_, ok := sk.runs[k]
	return len(sk.runs), ok
}

// TestSkipsForgetUnlisted: the counts of streams the observer does not
// list are forgotten at the next listing: advisories for a stream that
// never existed (made up by a client) and a stream created, termed and
// deleted between two listings would otherwise stay for good.
func TestSkipsForgetUnlisted(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, newStreamCfg("REAL"))
	c.consumer(t, "REAL", jetstream.ConsumerConfig{Durable: "g", AckPolicy: jetstream.AckExplicitPolicy})
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })
	find(t, observe(t, o), "REAL", "g")
	for i := range 200 {
		m := guardTerm("GHOST", fmt.Sprintf("eph%d", i), time.Now().UTC(), uint64(i+1))
		if err := c.nc.Publish(m.Subject, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	c.stream(t, newStreamCfg("SHORT"))
	cons := c.consumer(t, "SHORT", jetstream.ConsumerConfig{Durable: "g", AckPolicy: jetstream.AckExplicitPolicy})
	c.publish(t, "SHORT", "SHORT", "SHORT")
	for _, m := range fetch(t, cons, 3, 0) {
		if err := m.TermWithReason("lagbridge-ttl: expired (deadline)"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, func() error {
		if n, short := keptKeys(o.skips, skipKey{"SHORT", "g"}); n < 201 || !short {
			return fmt.Errorf("%d consumers counted (SHORT/g: %v), want the 200 made up and SHORT/g", n, short)
		}
		return nil
	})
	if err := c.js.DeleteStream(ctxT(t), "SHORT"); err != nil {
		t.Fatal(err)
	}
	observe(t, o)
	if n, short := keptKeys(o.skips, skipKey{"SHORT", "g"}); n != 0 || short {
		t.Errorf("after a listing: %d consumers' counts kept (SHORT/g: %v), want none: no listed stream has any", n, short)
	}
}

// TestSkipsBounded: the consumers counted at once and the runs kept over
// all of them are bounded; past the bound a new consumer is not counted
// (said once) and a known one's terms join its newest run, so none of
// its count is lost.
func TestSkipsBounded(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	sk := testSkips(&buf, &mu)
	at := time.Now().UTC().Add(-time.Minute)
	for i := range maxSkipKeys + 10 {
		sk.handle(guardTerm("S", fmt.Sprintf("c%d", i), at, 1))
	}
	if n, _ := keptKeys(sk, skipKey{}); n != maxSkipKeys {
		t.Errorf("%d consumers counted, want at most %d", n, maxSkipKeys)
	}
	const each = maxSkipRuns // 32 consumers of a run each: twice the bound
	for i := range 32 * each {
		sk.handle(guardTerm("S", fmt.Sprintf("c%d", i%32), at.Add(time.Duration(i)*time.Millisecond), uint64(i+2)))
	}
	sk.mu.Lock()
	runs := 0
	for _, rs := range sk.runs {
		runs += len(rs)
	}
	held := sk.nRuns
	sk.mu.Unlock()
	if runs != maxSkipRunsAll || held != runs {
		t.Errorf("%d runs kept (counted %d), want the bound, %d", runs, held, maxSkipRunsAll)
	}
	if n := sk.take("S", "c0", time.Time{}); n != 1+each {
		t.Errorf("c0: took %d, want %d", n, 1+each)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if c := bytes.Count([]byte(out), []byte("too many MSG_TERMINATED")); c != 1 {
		t.Errorf("%d warnings, want 1:\n%s", c, out)
	}
}

// TestSkipsStampAhead: an advisory stamped far ahead (made up, or a
// server whose clock runs ahead) does not hold back the terms after it,
// and is itself taken once its stamp, bounded to a second past its
// arrival, has passed.
func TestSkipsStampAhead(t *testing.T) {
	now := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	sk := testSkips(nil, nil)
	sk.now = func() time.Time { return now }
	sk.handle(guardTerm("S", "c", now.Add(time.Hour), 1))
	for i := range 100 {
		sk.handle(guardTerm("S", "c", now.Add(time.Duration(i)*time.Millisecond), uint64(i+2)))
	}
	if n := sk.take("S", "c", now.Add(500*time.Millisecond)); n != 100 {
		t.Errorf("took %d of the 100 terms made before the reading, want 100", n)
	}
	if n := sk.take("S", "c", now.Add(stampSlack)); n != 1 {
		t.Errorf("took %d a second on, want the one stamped an hour ahead", n)
	}
}

// TestSkipsTermedTwice: the guard terms two expired copies of each
// message (the first one's term came after AckWait had redelivered it);
// the server sends an advisory for each term, and each message counts
// once. (A term of a copy whose first copy was acked still counts: the
// ack sends no advisory to tell it by; see skips.go.)
func TestSkipsTermedTwice(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, newStreamCfg("TWICE"))
	cons := c.consumer(t, "TWICE", jetstream.ConsumerConfig{Durable: "g", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 300 * time.Millisecond})
	o := newObserver(t, s, func(c *Config) { c.InfoInterval = time.Nanosecond })
	const n = 20
	subjects := make([]string, n)
	for i := range subjects {
		subjects[i] = "TWICE"
	}
	c.publish(t, subjects...)
	find(t, observe(t, o), "TWICE", "g")
	first := fetch(t, cons, n, 0)
	time.Sleep(500 * time.Millisecond)
	second := fetch(t, cons, n, 0) // redelivered
	for i := range first {
		for _, m := range []jetstream.Msg{second[i], first[i]} {
			if err := m.TermWithReason("lagbridge-ttl: expired (deadline)"); err != nil {
				t.Fatal(err)
			}
		}
	}
	var skipped int64
	var last time.Time
	eventually(t, 5*time.Second, func() error {
		smp := find(t, observe(t, o), "TWICE", "g")
		if smp.At.After(last) {
			skipped, last = skipped+smp.Partitions[0].Skipped, smp.At
		}
		if smp.Partitions[0].Lag != 0 || skipped < n {
			return fmt.Errorf("lag %d, %d skipped; want 0 and %d", smp.Partitions[0].Lag, skipped, n)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // advisories still in flight
	smp := find(t, observe(t, o), "TWICE", "g")
	if smp.At.After(last) {
		skipped += smp.Partitions[0].Skipped
	}
	if skipped != n {
		t.Errorf("%d skips counted for %d messages termed twice each, want %d", skipped, n, n)
	}
}

// TestSkipsRecentBounded: the terms remembered to count a message termed
// twice once are bounded; one termed again past the window counts again.
func TestSkipsRecentBounded(t *testing.T) {
	at := time.Now().UTC().Add(-time.Minute)
	sk := testSkips(nil, nil)
	for i := range maxRecentTerms + 5 {
		sk.handle(guardTerm("S", "c", at, uint64(i+1)))
	}
	sk.handle(guardTerm("S", "c", at, 1))                // forgotten: counts
	sk.handle(guardTerm("S", "c", at, maxRecentTerms+5)) // remembered
	if n := sk.take("S", "c", time.Time{}); n != maxRecentTerms+6 {
		t.Errorf("took %d, want %d", n, maxRecentTerms+6)
	}
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if len(sk.recent) != maxRecentTerms || len(sk.ring) != maxRecentTerms {
		t.Errorf("%d terms remembered (ring %d), want %d", len(sk.recent), len(sk.ring), maxRecentTerms)
	}
}
