package nats

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSkipsSubjectMustMatch: an advisory counts only on the subject of
// the consumer its body names; a client that publishes one for another
// consumer, or on a subject of other tokens, counts nothing (said once).
func TestSkipsSubjectMustMatch(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	sk := testSkips(&buf, &mu)
	at := time.Now().UTC().Add(-time.Second)
	m := guardTerm("S", "c", at, 1)
	for _, subj := range []string{terminatedPrefix + "S.other", terminatedPrefix + "S.c.x", terminatedPrefix + "x.y.z", "", terminatedPrefix + "T.c"} {
		sk.handle(&natsgo.Msg{Subject: subj, Data: m.Data})
	}
	if n := sk.take("S", "c", time.Time{}); n != 0 {
		t.Errorf("%d counted from advisories on subjects of other consumers, want 0", n)
	}
	sk.handle(m)
	if n := sk.take("S", "c", time.Time{}); n != 1 {
		t.Errorf("%d counted on the consumer's own subject, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if c := bytes.Count(buf.Bytes(), []byte("names another consumer than its subject")); c != 1 {
		t.Errorf("%d warnings, want 1:\n%s", c, buf.String())
	}
}

// TestSkipsOtherDomain: with a JetStream domain configured, the guard's
// terms on that domain's consumers count, and an advisory of another
// domain's consumer of the same name does not.
func TestSkipsOtherDomain(t *testing.T) {
	s := startServer(t, func(o *server.Options) { o.JetStreamDomain = "hub" })
	c := newClient(t, s)
	c.stream(t, newStreamCfg("DOM"))
	cons := c.consumer(t, "DOM", jetstream.ConsumerConfig{Durable: "g", AckPolicy: jetstream.AckExplicitPolicy})
	o := newObserver(t, s, func(c *Config) { c.Domain = "hub"; c.InfoInterval = time.Nanosecond })
	find(t, observe(t, o), "DOM", "g")
	leaf := fmt.Appendf(nil, `{"timestamp":%q,"stream":"DOM","consumer":"g","stream_seq":99,"reason":"lagbridge-ttl: expired (deadline)","domain":"leaf"}`,
		time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano))
	if err := c.nc.Publish(terminatedPrefix+"DOM.g", leaf); err != nil {
		t.Fatal(err)
	}
	c.publish(t, "DOM", "DOM")
	for _, m := range fetch(t, cons, 2, 0) {
		if err := m.TermWithReason("lagbridge-ttl: expired (deadline)"); err != nil {
			t.Fatal(err)
		}
	}
	var skipped int64
	var last time.Time
	eventually(t, 5*time.Second, func() error {
		smp := find(t, observe(t, o), "DOM", "g")
		if smp.At.After(last) {
			skipped, last = skipped+smp.Partitions[0].Skipped, smp.At
		}
		if smp.Partitions[0].Lag != 0 || skipped < 2 {
			return fmt.Errorf("lag %d, %d skipped; want 0 and 2", smp.Partitions[0].Lag, skipped)
		}
		return nil
	})
	if smp := find(t, observe(t, o), "DOM", "g"); smp.At.After(last) {
		skipped += smp.Partitions[0].Skipped
	}
	if skipped != 2 {
		t.Errorf("%d skips counted, want the hub's 2 (not the leaf's)", skipped)
	}
}

// TestSkipsSlowConsumerWarns: advisories dropped by the subscription's
// pending limits say so once; another subscription's drops are not the
// observer's to report.
func TestSkipsSlowConsumerWarns(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	sk := testSkips(&buf, &mu)
	for range 3 {
		sk.asyncError(&natsgo.Subscription{Subject: terminatedSubject}, natsgo.ErrSlowConsumer)
		sk.asyncError(&natsgo.Subscription{Subject: "orders"}, natsgo.ErrSlowConsumer)
		sk.asyncError(nil, natsgo.ErrSlowConsumer)
	}
	mu.Lock()
	defer mu.Unlock()
	if c := bytes.Count(buf.Bytes(), []byte("advisories dropped")); c != 1 {
		t.Errorf("%d warnings, want 1:\n%s", c, buf.String())
	}
}

// TestSkipsKeep: a refresh forgets the counts of its stream's consumers
// that are gone, and keeps the live ones' and other streams'.
func TestSkipsKeep(t *testing.T) {
	sk := testSkips(nil, nil)
	at := time.Now().UTC().Add(-time.Second)
	for i, k := range []skipKey{{"S", "a"}, {"S", "b"}, {"T", "b"}} {
		sk.handle(guardTerm(k.stream, k.consumer, at, uint64(i+1)))
	}
	sk.keep("S", map[string]bool{"a": true})
	for k, want := range map[skipKey]bool{{"S", "a"}: true, {"S", "b"}: false, {"T", "b"}: true} {
		if _, kept := keptKeys(sk, k); kept != want {
			t.Errorf("%v kept: %v, want %v", k, kept, want)
		}
	}
	sk.keep("T", nil)
	if n, _ := keptKeys(sk, skipKey{}); n != 1 {
		t.Errorf("%d consumers' counts kept after the stream T went, want 1", n)
	}
}

// TestSkipsNotOwned: a replica counts the skips of the streams it owns
// only (another replica counts the rest), from the advisory on, not only
// when it lists.
func TestSkipsNotOwned(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	o := newObserver(t, s, nil)
	o.SetOwns(func(stream string) bool { return stream == "MINE" })
	var conss []jetstream.Consumer
	for _, name := range []string{"THEIRS", "MINE"} {
		c.stream(t, newStreamCfg(name))
		conss = append(conss, c.consumer(t, name, jetstream.ConsumerConfig{Durable: "g", AckPolicy: jetstream.AckExplicitPolicy}))
		c.publish(t, name)
	}
	for _, cons := range conss { // THEIRS first: MINE's count shows THEIRS' arrived
		for _, m := range fetch(t, cons, 1, 0) {
			if err := m.TermWithReason("lagbridge-ttl: expired (deadline)"); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 5*time.Second, func() error {
		if _, mine := keptKeys(o.skips, skipKey{"MINE", "g"}); !mine {
			return fmt.Errorf("MINE/g not counted yet")
		}
		return nil
	})
	if n, _ := keptKeys(o.skips, skipKey{}); n != 1 {
		t.Errorf("%d consumers counted, want MINE/g only", n)
	}
}
