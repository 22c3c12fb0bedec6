package demo

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/lagbridge/lagbridge/ttl/kafkaguard"
)

// TestProcessKafkaSkipped: of a poll, the expired record counts as
// skipped and the live one that work gives back unfinished (its wait for
// capacity cannot end before ctx's deadline, as at the end of a run)
// counts as nothing. Before, it counted as handled and not done, so the
// report said "expired and skipped -1" after a run with none.
func TestProcessKafkaSkipped(t *testing.T) {
	g, err := kafkaguard.New(kafkaguard.Config{MaxAge: MessageDeadline})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	recs := []*kgo.Record{
		{Topic: "orders", Partition: 0, Offset: 0, Timestamp: now.Add(-time.Minute)}, // expired
		{Topic: "orders", Partition: 0, Offset: 1, Timestamp: now},                   // live
	}
	lim := rate.NewLimiter(rate.Limit(1e-6), 1)
	lim.Allow() // no token for about 12 days
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var c ConsumerTally
	if err := processKafka(ctx, g, recs, lim, &c); err == nil {
		t.Fatal("work finished a record it had no capacity for")
	}
	if got := c.Skipped.Load(); got != 1 {
		t.Errorf("skipped %d, want 1 (the expired record)", got)
	}
	if good, dead := c.Good.Load(), c.Dead.Load(); good+dead != 0 {
		t.Errorf("good %d, dead %d: the unfinished record counted", good, dead)
	}
}
