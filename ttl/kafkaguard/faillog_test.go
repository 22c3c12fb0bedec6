package kafkaguard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/testutil"
)

// TestDeadLetterFailureLogsOncePerProcess: when every forward of a poll
// fails for one cause (a dead-letter topic not created yet, found on
// Kafka 4.3.1: 425 warnings per poll, every poll), the guard warns once
// per Process call, saying how many failed; Process's error has the
// count too. Before, it warned once per record.
func TestDeadLetterFailureLogsOncePerProcess(t *testing.T) {
	c := newCluster(t)
	broken, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close() // every produce fails with kgo.ErrClientClosed
	var logs testutil.Buffer
	g, err := New(Config{Now: newClock().Now, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		DeadLetter: &DeadLetter{Client: broken, Topic: "orders.dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 50 {
		recs = append(recs, r(int64(i), t0.Add(-time.Second), t0))
	}
	for range 2 {
		if _, err := g.Process(ctxT(t), recs, func(context.Context, *kgo.Record) error { return nil }); !errors.Is(err, ErrDeadLetter) {
			t.Fatalf("err %v, want ErrDeadLetter", err)
		}
	}
	if n := strings.Count(logs.String(), "dead-letter forward failed"); n != 2 {
		t.Fatalf("%d warnings for 2 polls of 50 failed forwards, want 2:\n%.2000s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "failed=50") {
		t.Fatalf("the warning does not say how many failed:\n%s", logs.String())
	}
}
