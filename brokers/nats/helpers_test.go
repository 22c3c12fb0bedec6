package nats

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/lag"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startServer runs an embedded nats-server with JetStream on loopback and
// shuts it down at cleanup. mod may adjust the options.
func startServer(tb testing.TB, mod func(*server.Options)) *server.Server {
	tb.Helper()
	opts := &server.Options{
		JetStream: true,
		StoreDir:  tb.TempDir(),
		Host:      "127.0.0.1",
		Port:      -1,
		NoLog:     true,
		NoSigs:    true,
	}
	if mod != nil {
		mod(opts)
	}
	return startServerOpts(tb, opts)
}

func startServerOpts(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("new server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		tb.Fatal("server not ready")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func serverPort(tb testing.TB, s *server.Server) int {
	tb.Helper()
	return s.Addr().(*net.TCPAddr).Port
}

// fakeClock is a manual clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newObserver connects an Observer to s, closing it at cleanup.
func newObserver(tb testing.TB, s *server.Server, mod func(*Config), opts ...natsgo.Option) *Observer {
	tb.Helper()
	cfg := Config{Cluster: "test", URLs: []string{s.ClientURL()}, RequestTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	o, err := New(cfg, opts...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(o.Close)
	return o
}

// client is a plain test client for setting up streams and consumers.
type client struct {
	nc *natsgo.Conn
	js jetstream.JetStream
}

func newClient(tb testing.TB, s *server.Server, opts ...natsgo.Option) client {
	tb.Helper()
	nc, err := natsgo.Connect(s.ClientURL(), opts...)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	return client{nc: nc, js: js}
}

func ctxT(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func (c client) stream(tb testing.TB, cfg jetstream.StreamConfig) jetstream.Stream {
	tb.Helper()
	st, err := c.js.CreateStream(ctxT(tb), cfg)
	if err != nil {
		tb.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	return st
}

func (c client) consumer(tb testing.TB, stream string, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	tb.Helper()
	cons, err := c.js.CreateOrUpdateConsumer(ctxT(tb), stream, cfg)
	if err != nil {
		tb.Fatalf("create consumer on %s: %v", stream, err)
	}
	return cons
}

// publish publishes one message per subject, in order, and returns their
// stream sequences.
func (c client) publish(tb testing.TB, subjects ...string) []uint64 {
	tb.Helper()
	seqs := make([]uint64, 0, len(subjects))
	for i, subj := range subjects {
		ack, err := c.js.Publish(ctxT(tb), subj, fmt.Appendf(nil, "m%d", i))
		if err != nil {
			tb.Fatalf("publish %s: %v", subj, err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

// storedTime returns the server's stored timestamp of a message.
func storedTime(tb testing.TB, st jetstream.Stream, seq uint64) time.Time {
	tb.Helper()
	m, err := st.GetMsg(ctxT(tb), seq)
	if err != nil {
		tb.Fatalf("get %d: %v", seq, err)
	}
	return m.Time
}

// fetch pulls n messages from cons and acks the first ack of them.
func fetch(tb testing.TB, cons jetstream.Consumer, n, ack int) []jetstream.Msg {
	tb.Helper()
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		tb.Fatalf("fetch: %v", err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); err != nil {
		tb.Fatalf("fetch: %v", err)
	}
	if len(msgs) != n {
		tb.Fatalf("fetched %d messages, want %d", len(msgs), n)
	}
	for _, m := range msgs[:ack] {
		if err := m.DoubleAck(ctxT(tb)); err != nil {
			tb.Fatalf("ack: %v", err)
		}
	}
	return msgs
}

// observe runs one cycle and fails the test on error.
func observe(tb testing.TB, o *Observer) []lag.Sample {
	tb.Helper()
	samples, err := o.Observe(ctxT(tb))
	if err != nil {
		tb.Fatalf("Observe: %v", err)
	}
	return samples
}

// find returns the sample of stream/consumer, failing when absent.
func find(tb testing.TB, samples []lag.Sample, stream, consumer string) lag.Sample {
	tb.Helper()
	for _, s := range samples {
		if s.Target.Topic == stream && s.Target.Group == consumer {
			if len(s.Partitions) != 1 {
				tb.Fatalf("%s/%s: %d partitions, want 1", stream, consumer, len(s.Partitions))
			}
			return s
		}
	}
	tb.Fatalf("no sample for %s/%s in %d samples", stream, consumer, len(samples))
	return lag.Sample{}
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(tb testing.TB, timeout time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newStreamCfg(name string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{name}}
}

// waitPending waits until the server's own consumer info counts pending
// undelivered messages. The server updates a consumer's pending count a
// moment after it acknowledges a publish; tests that check the observer's
// arithmetic first let the server settle.
func waitPending(tb testing.TB, cons jetstream.Consumer, pending uint64) {
	tb.Helper()
	eventually(tb, 10*time.Second, func() error {
		ci, err := cons.Info(ctxT(tb))
		if err != nil {
			return err
		}
		if ci.NumPending != pending {
			return fmt.Errorf("server reports %d pending, waiting for %d", ci.NumPending, pending)
		}
		return nil
	})
}
