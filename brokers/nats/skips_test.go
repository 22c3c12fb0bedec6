package nats

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/ttl/natsguard"
)

// TestSkipsCountGuardTerms: a pull consumer behind ttl/natsguard
// terminates the expired messages it is given; the server's
// MSG_TERMINATED advisories reach the observer, which counts them per
// consumer and hands each reading the terms made since the previous one
// (lag.PartitionSample.Skipped). Terms of another reason (an
// application's poison message, a plain Term) and the messages the guard
// passes to the handler are not skips.
func TestSkipsCountGuardTerms(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	c.stream(t, newStreamCfg("SKIPS"))
	cons := c.consumer(t, "SKIPS", jetstream.ConsumerConfig{Durable: "guarded", AckPolicy: jetstream.AckExplicitPolicy})
	c.consumer(t, "SKIPS", jetstream.ConsumerConfig{Durable: "other", AckPolicy: jetstream.AckExplicitPolicy})
	o := newObserver(t, s, func(c *Config) { c.Interval = 100 * time.Millisecond })
	find(t, observe(t, o), "SKIPS", "guarded")

	// The guard's clock runs 1 h ahead: every message is expired.
	g, err := natsguard.New(natsguard.Config{MaxAge: time.Minute, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	subjects := make([]string, 25)
	for i := range subjects {
		subjects[i] = "SKIPS"
	}
	c.publish(t, subjects...)
	msgs := fetch(t, cons, 25, 0)
	for _, m := range msgs[:20] {
		if err := g.Handle(ctxT(t), m, func(context.Context, jetstream.Msg) error {
			return fmt.Errorf("the handler ran on an expired message")
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := msgs[20].TermWithReason("poison: cannot parse"); err != nil {
		t.Fatal(err)
	}
	if err := msgs[21].Term(); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs[22:] {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	// A reading repeated between two refreshes (same At) repeats its
	// count: lag/ counts it once, and so does this test.
	var skipped int64
	var last time.Time
	read := func() lag.Sample {
		smp := find(t, observe(t, o), "SKIPS", "guarded")
		if smp.At.After(last) {
			skipped += smp.Partitions[0].Skipped
			last = smp.At
		}
		return smp
	}
	eventually(t, 10*time.Second, func() error {
		smp := read()
		if smp.Partitions[0].Lag != 0 || skipped < 20 {
			return fmt.Errorf("lag %d, %d skipped so far; want 0 and 20", smp.Partitions[0].Lag, skipped)
		}
		return nil
	})
	// Wait for any advisory still in flight: none is counted twice, and
	// no other term counts.
	time.Sleep(200 * time.Millisecond)
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		read()
	}
	if skipped != 20 {
		t.Errorf("%d skips counted, want the guard's 20 (not the poison term, the plain term or the acks)", skipped)
	}
	if smp := find(t, observe(t, o), "SKIPS", "other"); smp.Partitions[0].Skipped != 0 || !smp.SkipsCounted {
		t.Errorf("the other consumer: %d skips, counted: %v; want 0, and counted", smp.Partitions[0].Skipped, smp.SkipsCounted)
	}
	o.skips.mu.Lock()
	left := len(o.skips.runs)
	o.skips.mu.Unlock()
	if left != 0 {
		t.Errorf("%d consumers' counts kept after they were read, want 0", left)
	}
}

// TestSkipsTakeByServerTime: a reading takes the terms the server made up
// to its consumer info's time stamp; later ones (already in the counter,
// not yet in that info's ack floor) are the next reading's.
func TestSkipsTakeByServerTime(t *testing.T) {
	at := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	sk := &skips{watched: func(string, string) bool { return true }, log: slog.New(slog.DiscardHandler),
		version: func() string { return "2.15.2" }, runs: make(map[skipKey][]skipRun)}
	for i, ms := range []int{0, 0, 1, 5, 10, 11} {
		sk.handle(guardTerm("S", "c", at.Add(time.Duration(ms)*time.Millisecond), uint64(i+1)))
	}
	if n := sk.take("S", "c", at.Add(5*time.Millisecond)); n != 4 {
		t.Errorf("took %d up to +5ms, want 4", n)
	}
	if n := sk.take("S", "c", time.Time{}); n != 2 {
		t.Errorf("took %d with no time stamp, want the 2 left", n)
	}
	if n := sk.take("S", "c", at.Add(time.Hour)); n != 0 {
		t.Errorf("took %d again, want 0", n)
	}
}

// TestSkipsWarnings: an advisory that does not parse, and a server that
// drops the reason (before 2.10.4), say so once each; neither counts.
func TestSkipsWarnings(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil)
	sk := &skips{watched: func(string, string) bool { return true }, log: slog.New(h),
		version: func() string { return "2.10.3" }, runs: make(map[skipKey][]skipRun)}
	for range 2 {
		sk.handle(&natsgo.Msg{Data: []byte(`{"stream":`)})
		sk.handle(&natsgo.Msg{Subject: terminatedPrefix + "S.c", Data: []byte(`{"stream":"S","consumer":"c"}`)})
	}
	if n := sk.take("S", "c", time.Time{}); n != 0 {
		t.Errorf("%d counted, want 0", n)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Count(out, "does not parse") != 1 || strings.Count(out, "before 2.10.4") != 1 {
		t.Errorf("want one warning each, got:\n%s", out)
	}
	for v, want := range map[string]bool{"2.10.4": true, "2.10.3": false, "2.11.0-beta": true, "1.99.99": false, "": false, "3.0.0": true} {
		if got := atLeast(v, minReasonServer); got != want {
			t.Errorf("atLeast(%q, 2.10.4) = %v, want %v", v, got, want)
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestSkipsPermissionDenied: a user that may not subscribe to the
// advisories gets one warning that the skips are not counted, and an
// observer that works as before.
func TestSkipsPermissionDenied(t *testing.T) {
	s := startServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "obs", Password: "pw", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Deny: []string{"$JS.EVENT.>"}}}}}
	})
	c := newClient(t, s, natsgo.UserInfo("obs", "pw"))
	c.stream(t, newStreamCfg("DENIED"))
	c.consumer(t, "DENIED", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	var buf bytes.Buffer
	var mu sync.Mutex
	o := newObserver(t, s, func(c *Config) {
		c.User, c.Password = "obs", "pw"
		c.Log = slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	})
	eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(buf.String(), "no permission to subscribe") {
			return fmt.Errorf("no warning yet: %q", buf.String())
		}
		return nil
	})
	if smp := find(t, observe(t, o), "DENIED", "c"); smp.Partitions[0].Err != "" || smp.SkipsCounted {
		t.Errorf("without the advisories: err %q, skips counted %v; want none, and not counted", smp.Partitions[0].Err, smp.SkipsCounted)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "no permission"); n != 1 {
		t.Errorf("%d warnings, want one:\n%s", n, buf.String())
	}
}
