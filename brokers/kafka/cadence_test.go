package kafka

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/lag"
)

// TestAutoCommitCadence runs the consumer people run: a franz-go group
// consumer with its defaults (auto-commit every 5 s), fed 500 records/s,
// observed every second and folded into a lag.Tracker as the daemon does.
// From its second commit on, the tracker knows a commit interval of about
// 5 s; between commits the consume rate is never 0 and the target never
// stalled; and the estimated position is closer to the consumer's own
// position (the offsets it polled, read at each observation) than the
// commits are. (Before the second commit the figures are the commits'.)
func TestAutoCommitCadence(t *testing.T) {
	if testing.Short() {
		t.Skip("up to 40 s of wall time")
	}
	t.Parallel()
	c := newCluster(t)
	prod := newClient(t, c)
	createTopic(t, kadm.NewClient(prod), "ticks", 1, nil)
	cons := newClient(t, c, kgo.ConsumerGroup("auto"), kgo.ConsumeTopics("ticks"))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var polled atomic.Int64 // the consumer's own position: next offset to poll
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { polled.Store(max(polled.Load(), r.Offset+1)) })
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, 5)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: "ticks", Partition: 0, Value: []byte("x")}
			}
			_ = prod.ProduceSync(ctx, recs...) // errors only when ctx ends
		}
	})

	o := newObserver(t, c, nil)
	tr := lag.NewTracker(func(lag.Target) lag.Rules { return lag.Rules{LagAge: 2 * time.Second} })
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var errCommit, errEstimate float64
	var checked int
	var lastCommit int64 = -2 // the committed offset last read
	var movedAt time.Time     // when a reading first showed it
	// Until 8 readings after the cadence is known (two commits), at most
	// 40 s: joining the group takes a few seconds on a busy machine.
	for i := 1; i <= 40 && checked < 8; i++ {
		<-tick.C
		samples := observe(t, o)
		real := polled.Load()
		s := find(samples, "auto", "ticks")
		if s == nil {
			continue // not joined yet
		}
		st := tr.Observe(*s, s.At)
		p := st.Partitions[0]
		if p.Committed != lastCommit {
			lastCommit, movedAt = p.Committed, s.At
		}
		t.Logf("%2d: committed %d estimate %d (%s) consumer %d; interval %v rate %.0f (instant %.0f) status %s",
			i, p.Committed, p.Position, p.Source, real, st.CommitInterval, st.ConsumeRate, st.ConsumeRateInstant, st.Status)
		if st.CommitInterval == 0 {
			continue // before the second commit: read from the commits as they are
		}
		checked++
		// Commits are seen at readings, so the learnt interval is off by
		// up to one reading interval either way, plus a late tick.
		if st.CommitInterval < 3500*time.Millisecond || st.CommitInterval > 6500*time.Millisecond {
			t.Errorf("%d: commit interval %v, want 5s within one reading interval", i, st.CommitInterval)
		}
		// The consumer keeps up with what is written (on a busy machine
		// the producer pauses at times: then there is nothing to consume).
		// lag/ stops its estimate once the next commit is overdue (one
		// learnt interval and one observation after the last, the move
		// dated half an observation before the reading that saw it):
		// the learnt interval is off by up to a reading, and a loaded
		// machine delays a commit by a reading more, so a reading past
		// that point may see no movement until the commit arrives.
		overdue := s.At.Sub(movedAt) >= st.CommitInterval+500*time.Millisecond
		if st.ConsumeRate < st.ProduceRate/2 || !overdue && st.ProduceRateInstant > 0 && st.ConsumeRateInstant <= 0 {
			t.Errorf("%d: consume rate %.0f (instant %.0f) for a consumer keeping up with %.0f/s (instant %.0f)",
				i, st.ConsumeRate, st.ConsumeRateInstant, st.ProduceRate, st.ProduceRateInstant)
		}
		if st.Status == lag.StatusStalled || st.Status == lag.StatusStopped {
			t.Errorf("%d: status %s (%s)", i, st.Status, st.Reason)
		}
		errCommit += math.Abs(float64(real - p.Committed))
		errEstimate += math.Abs(float64(real - p.Position))
	}
	if checked < 8 {
		t.Fatalf("only %d readings after the cadence was learnt", checked)
	}
	errCommit /= float64(checked)
	errEstimate /= float64(checked)
	t.Logf("mean distance from the consumer's own position over %d readings: commits %.0f, estimate %.0f records", checked, errCommit, errEstimate)
	// 500/s: the commits are 2.5 s of records behind on average; the
	// estimate must be within two observation intervals' worth and less
	// than half as far.
	if errEstimate > 1000 || errEstimate > errCommit/2 {
		t.Fatalf("estimate %.0f records from the consumer's position on average (commits %.0f): want <= 1000 and under half", errEstimate, errCommit)
	}
}
