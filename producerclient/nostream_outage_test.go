package producerclient

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// outageJS is js during a cluster outage while down: publishes are "no
// responders" and stream lookups fail after lookupDelay (no meta leader:
// the API request times out).
type outageJS struct {
	jetstream.JetStream
	down        atomic.Bool
	lookupDelay time.Duration
	lookups     atomic.Int64
}

func (o *outageJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if o.down.Load() {
		return nil, jetstream.ErrNoStreamResponse
	}
	return o.JetStream.PublishMsg(ctx, m, opts...)
}

func (o *outageJS) StreamNameBySubject(ctx context.Context, s string) (string, error) {
	o.lookups.Add(1)
	if o.down.Load() {
		select {
		case <-time.After(o.lookupDelay):
			return "", context.DeadlineExceeded
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return o.JetStream.StreamNameBySubject(ctx, s)
}

// TestNATSFailedLookupKeepsStream: during an outage (no responders, the
// stream list unreadable) a failed lookup keeps the subject's stream as
// its lease key; on main it replaced it with the subject for 10 s, so the
// next publishes ran under lease key "orders.a" with a fresh throttle.
func TestNATSFailedLookupKeepsStream(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	o := &outageJS{JetStream: js, lookupDelay: 10 * time.Millisecond}
	p := newNATSProducer(t, o, Config{Retry: RetryConfig{MaxAttempts: 1}})
	publish := func() error {
		_, err := p.Publish(ctxFor(t, 5*time.Second), &nats.Msg{Subject: "orders.a", Data: []byte("x")})
		return err
	}
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(noStreamFresh + 100*time.Millisecond)
	o.down.Store(true)
	_ = publish()
	o.down.Store(false)
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats().Topics; s["orders.a"].Attempts > 0 || s["ORDERS"].Attempts != 3 {
		t.Fatalf("ORDERS %d attempts, orders.a %d; want 3 and 0: the lease key stays the stream", s["ORDERS"].Attempts, s["orders.a"].Attempts)
	}
}

// TestNATSNoStreamLookupNotQueued: 10 concurrent publishes that no stream
// answers while lookups take 300 ms and fail: one lookup, nobody queued
// behind it. On main each did its own lookup, one at a time (10 lookups,
// the last caller back after 3 s; 5 s a lookup without a meta leader).
func TestNATSNoStreamLookupNotQueued(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	o := &outageJS{JetStream: js, lookupDelay: 300 * time.Millisecond}
	p := newNATSProducer(t, o, Config{Retry: RetryConfig{MaxAttempts: 1}, Throttle: ThrottleConfig{Disabled: true}})
	if _, err := p.Publish(ctxFor(t, 5*time.Second), &nats.Msg{Subject: "orders.a", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(noStreamFresh + 100*time.Millisecond)
	o.down.Store(true)
	o.lookups.Store(0)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = p.Publish(ctxFor(t, 60*time.Second), &nats.Msg{Subject: "orders.a", Data: []byte("x")})
		}()
	}
	wg.Wait()
	if n, d := o.lookups.Load(), time.Since(start); n > 1 || d > 2*time.Second {
		t.Fatalf("%d lookups, the last publish back after %v; want 1 and well under 2 s", n, d)
	}
}
