package demo

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/quota"
)

// TestStoryEndCountsEveryRecord: a story stopped while its services
// offer 2,000 msg/s (records in flight, requests waiting) accounts for
// every record it offered, as acked, shed or failed, and fails none of
// the async services' records for the end itself. Before, the request
// handlers returned at the end and left the requests still waiting
// uncounted (4-29 of a service's 1,000-1,700 in three runs); the async
// records were produced under the context the end cancels and closed
// without a flush (a new user's 45 s demo read "batch-export kafka ...
// failed 10"), which this test does not reproduce (0 failed in 5 runs
// without the flush, and review-lead's mutants of the flush and of the
// contexts pass): the async check is a floor, not a proof of the flush.
func TestStoryEndCountsEveryRecord(t *testing.T) {
	b, err := StartBrokers(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := Config(b, "127.0.0.1:0", time.Second)
	cfg.Quota.Policies = []quota.Policy{StoryPolicy()}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The consumers take 400 msg/s of the 2,000 offered: records are
	// shed, retried and in flight when the story ends.
	st, err := StartStory(b, "http://"+a.Addr(), func(time.Duration) float64 { return 400 }, 2000)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	st.Close()

	for _, p := range StoryProducers {
		for _, key := range []string{p.ID, p.ID + natsSuffix} {
			tl := st.Producers[key]
			off, acked, shed, failed := tl.Offered.Load(), tl.Acked.Load(), tl.Shed.Load(), tl.Failed.Load()
			if off == 0 {
				t.Errorf("%s: offered nothing in 4 s", key)
			}
			if acked+shed+failed != off {
				t.Errorf("%s: offered %d, acked %d + shed %d + failed %d = %d: %d records unaccounted for",
					key, off, acked, shed, failed, acked+shed+failed, off-acked-shed-failed)
			}
			if !p.Requests && failed != 0 {
				t.Errorf("%s (async): %d of %d records failed; none should fail for the story's end", key, failed, off)
			}
		}
	}
}
