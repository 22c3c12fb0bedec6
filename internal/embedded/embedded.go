// Package embedded starts the in-process brokers lagbridge's demo and tests
// use: a nats-server with JetStream on a free loopback port. It imports
// nothing of lagbridge, so any package's tests can use it.
package embedded

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS starts a nats-server with JetStream on 127.0.0.1 (a free port),
// storing in storeDir. The caller shuts it down.
func NATS(storeDir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, fmt.Errorf("start embedded nats-server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("start embedded nats-server: not ready after 10s")
	}
	return ns, nil
}

// NATSTest starts NATS for a test, storing in tb.TempDir, and shuts it down
// when the test ends (callers may also shut it down earlier).
func NATSTest(tb testing.TB) *server.Server {
	tb.Helper()
	s, err := NATS(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if !quiesce(s, quiesceWait) {
			tb.Logf("embedded nats-server: clients or JetStream API requests left after %v; shutting down anyway", quiesceWait)
		}
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// quiesceWait bounds how long NATSTest's cleanup waits for the server to
// be quiet before it shuts it down.
const quiesceWait = 10 * time.Second

// quiesce waits, for up to wait, until no client is connected to s and
// no JetStream API request it read is still being served, and reports
// whether it came to that (a server shut down already is quiet). A stream that a request in flight creates
// while the server shuts down is never stopped: nats-server v2.15.2's
// JetStream shutdown stops the streams it has at its start, and the new
// one's file store goroutines (flushStreamStateLoop, ats.Register) run
// until the process exits. A test that ends with a KV bucket's creation
// on its way (a replica's first write or read, cancelled by its stop)
// left them behind for goleak to find: internal/replica's
// VerifyTestMain under load, 1 of 30 runs of its NATS tests at load
// 7-21. A test's connections are closed by cleanups that run before
// this one (registered after it): once the server saw them close it
// read all they sent, and once the requests in flight are served,
// none can come.
func quiesce(s *server.Server, wait time.Duration) bool {
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		if !s.Running() { // shut down by the test already
			return true
		}
		if s.NumClients() == 0 {
			jsz, err := s.Jsz(nil)
			if err != nil || jsz.API.Inflight == 0 {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// JetStreamTest starts NATS for a test (NATSTest) and returns a JetStream
// context on a connection to it (Connect); both end when the test ends.
func JetStreamTest(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	return Connect(tb, NATSTest(tb))
}

// Connect returns a JetStream context on a new connection to s (its Conn
// method returns the connection), closed when the test ends.
func Connect(tb testing.TB, s *server.Server) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}
