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
	tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
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
