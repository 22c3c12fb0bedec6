package app

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/quota"
)

// TestNearCapacityKafka: on kfake, a franz-go consumer group that keeps
// up with a steady 200 msg/s at 3 ms a record (no policy engaged: its
// producers unlimited, its capacity estimate what it consumes, so near
// it; work to commit at the readings, so its commit cadence is learned:
// one caught up at every reading keeps it unknown and is no trial
// candidate) is read
// at the engaged cadence (250 ms at the 1 s interval) once the trial's
// probes saw its commits move, when it commits per poll; the controller
// then gets readings about 250 ms apart. With nearCapacity: false, or
// with a 1 s auto-commit (which fails each trial: no move for three
// probes in a row, and a trial waits 4, 8, 16 ... readings after a
// failed one), every reading the controller gets is an interval apart;
// nearCapacity false's trials are never tried (no cycle at the engaged
// cadence); the auto-commit's are when lag/ learned its cadence as about
// one reading, which depends on where its ticker falls against the
// readings (CI at 658c4e0 drew a phase with none in 20 readings). Red before nearkafka (session 36): near-capacity asked only
// about NATS targets fine by their acks, so the per-poll committer's
// readings stayed 1 s apart.
func TestNearCapacityKafka(t *testing.T) {
	off := false
	for _, c := range []struct {
		name     string
		near     *bool
		opts     []kgo.Opt // the consumer's commit setting
		perPoll  bool      // commit after each poll
		wantFast bool
		cycles   int  // readings to watch when none should come fast
		probed   bool // read at the engaged cadence at all (a trial's probes)
		// phased: whether a trial is tried depends on where the commit
		// ticker falls against the readings (commits seen at every other
		// reading learn a 2 s cadence: no candidate), so probed is not
		// asserted.
		phased bool
	}{
		{"commit per poll", nil, []kgo.Opt{kgo.DisableAutoCommit()}, true, true, 0, true, false},
		{"commit per poll, nearCapacity false", &off, []kgo.Opt{kgo.DisableAutoCommit()}, true, false, 20, false, false},
		{"1 s auto-commit", nil, []kgo.Opt{kgo.AutoCommitInterval(time.Second)}, false, false, 20, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const topic, group = "orders", "billing"
			kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
			if err != nil {
				t.Fatal(err)
			}
			defer kc.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, err := New(ctx, config.Config{Listen: "127.0.0.1:0", Interval: time.Second, ShutdownTimeout: 5 * time.Second,
				NearCapacity: c.near, Kafka: []kafka.Config{{Cluster: "k", Brokers: kc.ListenAddrs()}},
				Quota: config.Quota{Policies: []quota.Policy{{Name: "p", MaxAge: 2 * time.Second}}}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			// The clients close after the goroutines using them have stopped.
			prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup(group),
				kgo.ConsumeTopics(topic)}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			wg.Go(func() {
				if err := a.Run(ctx); err != nil {
					t.Errorf("run: %v", err)
				}
			})
			updates, unsub := a.Store.Subscribe()
			defer unsub()

			wg.Go(func() { // the producer: one record every 5 ms
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						prod.Produce(ctx, &kgo.Record{Value: []byte("x")}, nil)
					}
				}
			})
			wg.Go(func() { // the consumer: 3 ms of work a record (333 msg/s)
				for ctx.Err() == nil {
					time.Sleep(3 * time.Millisecond * time.Duration(cl.PollFetches(ctx).NumRecords()))
					if c.perPoll {
						cl.CommitUncommittedOffsets(ctx)
					}
				}
			})

			// The times of the readings the controller got (each cycle
			// that was no probe updates the store).
			var last time.Time
			fast, read := 0, 0
			deadline := time.After(45 * time.Second)
			for (c.wantFast && fast < 3) || (!c.wantFast && read < c.cycles) {
				select {
				case <-updates:
				case <-deadline:
					t.Fatalf("%d readings, %d of them under 0.6 s after the one before, want 3", read, fast)
				}
				at := a.Store.Clusters()[0].LastCycle
				if at.Equal(last) {
					continue
				}
				if !last.IsZero() {
					read++
					if gap := at.Sub(last); gap < 600*time.Millisecond {
						fast++
						if !c.wantFast {
							t.Errorf("reading %d came %v after the one before, want the interval (1 s)", read, gap)
						}
					}
				}
				last = at
			}
			engaged := counterTotal(t, a, "lagbridge_observe_engaged_cycles_total") // probes too
			t.Logf("%d readings, %d of them under 0.6 s after the one before; %.0f cycles at the engaged cadence", read, fast, engaged)
			if !c.phased && (engaged > 0) != c.probed {
				t.Errorf("%.0f cycles at the engaged cadence, want some: %v (a trial tried)", engaged, c.probed)
			}
		})
	}
}
