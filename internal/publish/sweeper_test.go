package publish

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSweeperFailsUntilItSucceeds: while its broker is unreachable, the
// sweeper's publishes between two attempts report the last failure, so the
// engine does not log a recovery after every failed attempt.
func TestSweeperFailsUntilItSucceeds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: every request fails
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := &ClientQuotaSweeper{Cluster: "k", Quotas: NewClientQuotas(cl, slog.New(slog.DiscardHandler))}
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := p.Publish(ctx, Snapshot{})
		cancel()
		if err == nil {
			t.Fatalf("publish %d reported success with no broker", i)
		}
	}
}
