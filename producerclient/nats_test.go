package producerclient

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/ttl"
)

// startNATS runs an embedded nats-server with JetStream on loopback and
// returns a connection and its JetStream context; all close at cleanup.
func startNATS(tb testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	tb.Helper()
	s, err := server.NewServer(&server.Options{JetStream: true, StoreDir: tb.TempDir(), Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		tb.Fatal("nats-server not ready")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return s, nc, js
}

func createStream(tb testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	tb.Helper()
	st, err := js.CreateStream(ctxFor(tb, 10*time.Second), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func newNATSProducer(tb testing.TB, js jetstream.JetStream, cfg Config) *NATSProducer {
	tb.Helper()
	if cfg.Producer == "" {
		cfg.Producer = "test-producer"
	}
	p, err := NewNATS(js, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func TestNATSPublishHeadersAndTTL(t *testing.T) {
	_, _, js := startNATS(t)
	withTTL := createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, AllowMsgTTL: true})
	plain := createStream(t, js, jetstream.StreamConfig{Name: "AUDIT", Subjects: []string{"audit.>"}})
	p := newNATSProducer(t, js, Config{Criticality: Sheddable})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	dl, _ := ctx.Deadline()
	ack, err := p.Publish(ctx, &nats.Msg{Subject: "orders.new", Data: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "ORDERS" {
		t.Fatalf("ack from %q", ack.Stream)
	}
	if _, err := p.Publish(ctx, &nats.Msg{Subject: "audit.x", Data: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	// The stream is the lease key, found from the subject.
	if _, ok := p.Quota("ORDERS"); !ok {
		t.Fatal("no quota state for stream ORDERS")
	}

	m, err := withTTL.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ttl.ParseDeadline(m.Header.Get(ttl.HeaderDeadline))
	if err != nil || got.UnixMilli() != dl.UnixMilli() {
		t.Fatalf("deadline header %q (%v), want %v", m.Header.Get(ttl.HeaderDeadline), err, dl)
	}
	if c := m.Header.Get(ttl.HeaderCriticality); c != "SHEDDABLE" {
		t.Fatalf("criticality %q", c)
	}
	// 3s of deadline left, rounded up to whole seconds, and the server
	// took it (v2.15 with AllowMsgTTL).
	if v := m.Header.Get(jetstream.MsgTTLHeader); v != "3" && v != "2" {
		t.Fatalf("Nats-TTL %q, want 3 (or 2 on a slow machine)", v)
	}
	m2, err := plain.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v := m2.Header.Get(jetstream.MsgTTLHeader); v != "" {
		t.Fatalf("Nats-TTL %q on a stream that does not allow it", v)
	}
	// The broker itself drops the message once its TTL passes.
	eventually(t, 10*time.Second, "the server to expire the message by its TTL", func() bool {
		_, err := withTTL.GetMsg(context.Background(), 1)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
}

// TestNATSDefaultCriticalityHasNoHeader: as on Kafka, CRITICAL is written
// by leaving lagbridge-criticality out (a default message without a
// deadline has no header block at all), and a stale criticality header is
// overwritten rather than left.
func TestNATSDefaultCriticalityHasNoHeader(t *testing.T) {
	_, _, js := startNATS(t)
	st := createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	p := newNATSProducer(t, js, Config{})
	ctx := ctxFor(t, 5*time.Second)
	if _, err := p.Publish(context.Background(), &nats.Msg{Subject: "orders.a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, &nats.Msg{Subject: "orders.b"}); err != nil {
		t.Fatal(err)
	}
	stale := &nats.Msg{Subject: "orders.c", Header: nats.Header{ttl.HeaderCriticality: []string{"SHEDDABLE"}}}
	if _, err := p.Publish(context.Background(), stale, WithCriticality(Critical)); err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]struct {
		deadline bool
		crit     string
	}{1: {false, ""}, 2: {true, ""}, 3: {false, "CRITICAL"}} {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(ttl.HeaderDeadline) != ""; got != want.deadline {
			t.Fatalf("message %d: deadline header %v, want %v", seq, got, want.deadline)
		}
		if got := m.Header.Get(ttl.HeaderCriticality); got != want.crit {
			t.Fatalf("message %d: criticality header %q, want %q", seq, got, want.crit)
		}
		if meta, _ := readNATSMeta(m.Header); meta.Criticality != ttl.Critical {
			t.Fatalf("message %d reads as %v", seq, meta.Criticality)
		}
	}
}

// noAckProducer returns a producer (lease key "NOACK") whose messages to
// noack.> are never acknowledged: sub, a plain subscriber, takes them and
// never answers (no stream, no "no responders", no ack).
func noAckProducer(t *testing.T) (p *NATSProducer, sub *nats.Subscription) {
	t.Helper()
	_, nc, js := startNATS(t)
	sub, err := nc.SubscribeSync("noack.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return newNATSProducer(t, js, Config{NATS: NATSConfig{Topic: func(string) string { return "NOACK" }}}), sub
}

// TestNATSAsyncContextEndIsNotABrokerFailure: an async message whose
// context ends while it waits for its JetStream ack (here nothing acks:
// a plain subscriber holds the subject) comes back at once with the
// context's error, and is not counted as a broker failure (throttle,
// budget, broker errors): that is the caller's decision.
func TestNATSAsyncContextEndIsNotABrokerFailure(t *testing.T) {
	p, _ := noAckProducer(t)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded},
		// Without a deadline the ack wait is 30 s: the cancel must end it.
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		ctx, cancel := tc.ctx()
		start := time.Now()
		ch := make(chan error, 1)
		p.PublishAsync(ctx, &nats.Msg{Subject: "noack.x", Data: []byte("x")}, func(_ *nats.Msg, _ *jetstream.PubAck, err error) { ch <- err })
		err := <-ch
		took := time.Since(start)
		cancel()
		if !errors.Is(err, tc.want) || !errors.Is(err, ErrSlowDown) {
			t.Fatalf("%s: %v, want the context's error", tc.name, err)
		}
		if took > 5*time.Second {
			t.Fatalf("%s: came back after %v", tc.name, took)
		}
	}
	st := p.Stats().Topics["NOACK"]
	if st.BrokerErrors != 0 || st.Rejected["canceled"] != 2 {
		t.Fatalf("broker errors %d, rejected %v; want 0 and canceled 2", st.BrokerErrors, st.Rejected)
	}
}

func TestNATSTTLRefusedIsResentWithout(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	// The SDK believes the stream allows TTLs (as if its config changed
	// after it was cached); the server refuses, and the SDK resends the
	// message without Nats-TTL, outside the retry budget.
	p := newNATSProducer(t, js, Config{NATS: NATSConfig{MessageTTL: TTLAlways}, Retry: RetryConfig{MaxAttempts: 1}})
	m := &nats.Msg{Subject: "s.x"}
	if _, err := p.Publish(ctxFor(t, 5*time.Second), m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if m.Header.Get(jetstream.MsgTTLHeader) != "" {
		t.Fatal("Nats-TTL still set")
	}
}

func TestNATSAsyncAndFlush(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	p := newNATSProducer(t, js, Config{})
	var acked atomic.Int64
	for i := 0; i < 300; i++ {
		p.PublishAsync(context.Background(), &nats.Msg{Subject: "orders.x", Data: []byte(strconv.Itoa(i))},
			func(_ *nats.Msg, ack *jetstream.PubAck, err error) {
				if err == nil && ack != nil {
					acked.Add(1)
				}
			})
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if acked.Load() != 300 {
		t.Fatalf("%d of 300 acked after Flush", acked.Load())
	}
}

func TestNATSStopAndRate(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	p := newNATSProducer(t, js, Config{Mode: Drop})
	setLease(t, p.c, quotaproto.Lease{Topic: "ORDERS", Rate: ptr(1.0), Burst: 1, Signal: quotaproto.SignalOK, Version: 1})
	if _, err := p.Publish(context.Background(), &nats.Msg{Subject: "orders.a"}); err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: "orders.b"}
	_, err := p.Publish(context.Background(), m)
	var re *RejectError
	if !errors.Is(err, ErrRateLimited) || !errors.As(err, &re) || re.Msg != m || re.Topic != "ORDERS" {
		t.Fatalf("over the rate: %v", err)
	}
	setLease(t, p.c, quotaproto.Lease{Topic: "ORDERS", Rate: ptr(100.0), Signal: quotaproto.SignalStop, Version: 2})
	done := make(chan error, 1)
	p.PublishAsync(context.Background(), &nats.Msg{Subject: "orders.c"}, func(_ *nats.Msg, _ *jetstream.PubAck, err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrStop) {
		t.Fatalf("async under stop: %v", err)
	}
}

func TestClassifyNATS(t *testing.T) {
	full := &jetstream.APIError{Code: 503, ErrorCode: jsErrStreamStoreFailed, Description: "maximum messages exceeded"}
	withID := &nats.Msg{Header: nats.Header{jetstream.MsgIDHeader: {"id-1"}}}
	for _, tc := range []struct {
		name      string
		err       error
		msg       *nats.Msg
		signal    Signal
		retriable bool
		ownFault  bool // kept out of the adaptive throttle and the retry budget
	}{
		// A full stream with discard-new: slow down; consumers may drain it.
		{"stream full", full, nil, SignalSlowDown, true, false},
		// The account's JetStream store is full (a 400): the same pushback.
		{"account full", &jetstream.APIError{Code: 400, ErrorCode: 10002, Description: "resource limits exceeded for account"}, nil, SignalSlowDown, true, false},
		// The stream's ingest queue is full (a 4xx, but overload).
		{"too many requests", &jetstream.APIError{Code: 429, ErrorCode: 10167, Description: "too many requests"}, nil, SignalSlowDown, true, false},
		// The message can never fit.
		{"too large", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}, nil, SignalStop, false, true},
		{"max payload", nats.ErrMaxPayload, nil, SignalStop, false, true},
		// Optimistic concurrency lost: retrying the same message fails again.
		{"wrong last seq", &jetstream.APIError{Code: 400, ErrorCode: jsErrWrongLastSequence}, nil, SignalStop, false, true},
		// Any other refusal of the request.
		{"other 4xx", &jetstream.APIError{Code: 400, ErrorCode: 10999}, nil, SignalStop, false, true},
		// No stream answered, and the stream list did not say none
		// captures the subject (no leader yet, or the lookup failed).
		{"no responders", jetstream.ErrNoStreamResponse, nil, SignalSlowDown, true, false},
		// No stream answered, and the stream list has none that
		// captures the subject (noStreamErr): a slow-down (a mapped
		// subject's stream without a leader reads the same), the request's own
		// (retried once per subject by firstRetry, not here).
		{"no stream", &noStreamError{subject: "ordres.a", err: jetstream.ErrNoStreamResponse}, nil, SignalSlowDown, false, true},
		// A timeout without a message id is not retried: it could duplicate.
		{"timeout no id", context.DeadlineExceeded, &nats.Msg{}, SignalSlowDown, false, false},
		// With a message id the stream deduplicates: retried.
		{"timeout with id", nats.ErrTimeout, withID, SignalSlowDown, true, false},
		// The connection is gone.
		{"closed", nats.ErrConnectionClosed, nil, SignalStop, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := classifyNATS(tc.err, tc.msg)
			if c.signal != tc.signal || c.retriable != tc.retriable || c.ownFault != tc.ownFault {
				t.Fatalf("classify(%v) = %v retriable %v own fault %v, want %v %v %v", tc.err, c.signal, c.retriable, c.ownFault, tc.signal, tc.retriable, tc.ownFault)
			}
		})
	}
}

// TestNATSRetryStorm: a stream that is full (max msgs 1, discard new)
// rejects every publish at 1,000 requests per second for two seconds.
// Attempts, counted by a plain subscriber that sees every publish on the
// subject, stay within 1.1x the requests: nats.go's own retries are off.
func TestNATSRetryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("2s storm")
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		// The ratio budget alone.
		{"ratio budget only", Config{Throttle: ThrottleConfig{Disabled: true}}},
		// The defaults: budget and adaptive throttling.
		{"defaults", Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, nc, js := startNATS(t)
			createStream(t, js, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew})
			if _, err := js.Publish(ctxFor(t, 5*time.Second), "full.x", []byte("fill")); err != nil {
				t.Fatal(err)
			}
			var seen atomic.Int64
			sub, err := nc.Subscribe("full.>", func(*nats.Msg) { seen.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			tc.cfg.Retry.Backoff = 20 * time.Millisecond
			tc.cfg.NATS.Topic = func(string) string { return "FULL" }
			p := newNATSProducer(t, js, tc.cfg)
			res := storm(t, func(ctx context.Context, done func(error)) {
				p.PublishAsync(ctx, &nats.Msg{Subject: "full.x", Data: []byte("x")}, func(_ *nats.Msg, _ *jetstream.PubAck, err error) { done(err) })
			})
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the subscriber to see every attempt", func() bool {
				return seen.Load() >= int64(p.Stats().Topics["FULL"].Attempts)
			})
			s := p.Stats().Topics["FULL"]
			got := float64(seen.Load())
			t.Logf("requests %d, attempts on the wire %.0f (SDK: %d attempts, %d retries), amplification %.3f, rejected %v",
				res.requests, got, s.Attempts, s.Retries, got/float64(res.requests), s.Rejected)
			if got > 1.1*float64(res.requests) {
				t.Fatalf("amplification %.3f > 1.1", got/float64(res.requests))
			}
			if got != float64(s.Attempts) {
				t.Fatalf("the wire saw %.0f publishes, the SDK made %d attempts: nats.go retried on its own", got, s.Attempts)
			}
		})
	}
}

func TestNATSCloseIdempotent(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	p, err := NewNATS(js, Config{Producer: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: "orders.x"}
	_, err = p.Publish(context.Background(), m)
	var re *RejectError
	if !errors.Is(err, ErrClosed) || !errors.As(err, &re) || re.Msg != m {
		t.Fatalf("after Close: %v", err)
	}
}

// gatedJS holds every call of one kind (the TTL probe js.Stream, or
// js.PublishMsgAsync) until gate is closed, so that a test can run Close
// while admitted messages sit at that point of PublishAsync.
type gatedJS struct {
	jetstream.JetStream
	gateStream, gatePublish bool
	gate                    chan struct{}
	entered                 sync.WaitGroup
}

func (g *gatedJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if g.gateStream {
		g.entered.Done()
		<-g.gate
	}
	return g.JetStream.Stream(ctx, name)
}

func (g *gatedJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if g.gatePublish {
		g.entered.Done()
		<-g.gate
	}
	return g.JetStream.PublishMsgAsync(m, opts...)
}

// TestNATSPublishAsyncRacingCloseCallsDone pins that every PublishAsync
// admitted before Close gets its done exactly once, with ErrClosed, and
// releases its in-flight slot, when Close (and the ack goroutine's exit)
// happens while the call is still on its way to the ack queue: before the
// send (held in stamp's TTL probe), or during it (held in
// PublishMsgAsync, past the closed check). Such a message used to go into
// the queue after the ack goroutine had gone, about half the time: done
// never ran and Flush hung.
func TestNATSPublishAsyncRacingCloseCallsDone(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		gateStream, gatePublish bool
	}{
		{"held before the send", true, false},
		{"held in the send", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, js := startNATS(t)
			createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, AllowMsgTTL: true})
			const n = 40
			g := &gatedJS{JetStream: js, gateStream: tc.gateStream, gatePublish: tc.gatePublish, gate: make(chan struct{})}
			g.entered.Add(n)
			p := newNATSProducer(t, g, Config{NATS: NATSConfig{Topic: func(string) string { return "ORDERS" }}})

			var calls [n]atomic.Int32
			var closedErrs atomic.Int32
			var returned sync.WaitGroup
			for i := 0; i < n; i++ {
				returned.Add(1)
				go func() {
					defer returned.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					p.PublishAsync(ctx, &nats.Msg{Subject: "orders.x", Data: []byte("x")}, func(_ *nats.Msg, _ *jetstream.PubAck, err error) {
						calls[i].Add(1)
						if errors.Is(err, ErrClosed) {
							closedErrs.Add(1)
						}
					})
				}()
			}
			g.entered.Wait() // all n admitted and held
			_ = p.Close()    // the ack goroutine exits: nothing is queued yet
			close(g.gate)
			returned.Wait()
			// Flush returns only when every admitted message has finished.
			if err := p.Flush(ctxFor(t, 5*time.Second)); err != nil {
				t.Fatalf("Flush after Close: %v; %d in flight (Stats: %+v)", err, p.c.outstanding(), p.Stats())
			}
			for i := range calls {
				if got := calls[i].Load(); got != 1 {
					t.Errorf("message %d: done called %d times, want 1", i, got)
				}
			}
			if got := closedErrs.Load(); got != n {
				t.Errorf("%d of %d callbacks got ErrClosed", got, n)
			}
		})
	}
}

// TestNATSCloseDrainIsBounded pins that Close waits at most closeDrain
// (5s) in all for the acks of async messages already published, however
// many are unacknowledged, and fails each of them with ErrClosed. The
// drain timer's one tick used to end the wait of the first such message
// only; each later one waited for its own ack timeout (30s without a
// deadline).
func TestNATSCloseDrainIsBounded(t *testing.T) {
	p, sub := noAckProducer(t)
	const n = 3
	var closedErrs atomic.Int32
	for i := 0; i < n; i++ {
		p.PublishAsync(context.Background(), &nats.Msg{Subject: "noack.x", Data: []byte("x")}, func(_ *nats.Msg, _ *jetstream.PubAck, err error) {
			if errors.Is(err, ErrClosed) {
				closedErrs.Add(1)
			}
		})
	}
	for i := 0; i < n; i++ { // all n are out
		if _, err := sub.NextMsg(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_ = p.Close()
	took := time.Since(start)
	t.Logf("Close took %v with %d unacknowledged messages", took.Round(time.Millisecond), n)
	if took > closeDrain+2*time.Second {
		t.Fatalf("Close took %v, want at most about %v", took, closeDrain)
	}
	if got := closedErrs.Load(); got != n {
		t.Fatalf("%d of %d unacknowledged messages failed with ErrClosed", got, n)
	}
}
