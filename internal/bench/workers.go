package bench

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/consumerclient"
)

// workerBatches is how many polled batches a partition's worker queues
// before the poll loop waits for it (franz-go's goroutine-per-partition
// example queues 5).
const workerBatches = 5

// WorkerRows are the rows of a consumer that hands records to workers:
// they run only by name (`--rows workers`), as issue 12's matrix does not
// hold them.
func WorkerRows() []Row {
	return []Row{
		{Broker: BrokerKafka, Consumer: Workers, Producer: Sync, Interval: time.Second},
		{Broker: BrokerKafka, Consumer: Workers, Producer: Sync, Interval: 250 * time.Millisecond},
	}
}

// partWorker is one partition's worker: it processes the batches the poll
// loop queues on recs until quit is closed or the consumer stops, and
// closes done when it returns.
type partWorker struct {
	recs chan []*kgo.Record
	quit chan struct{}
	done chan struct{}
}

// workerSet holds the workers of the partitions assigned to the consumer.
// The group's callbacks start and stop them; the poll loop looks them up.
type workerSet struct {
	mu   sync.Mutex
	ws   map[int32]*partWorker
	wg   sync.WaitGroup
	ctx  context.Context
	work func(ctx context.Context, w *partWorker)
}

// start starts a worker for each partition that has none (none once the
// consumer stops).
func (s *workerSet) start(parts []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		if s.ws[p] != nil || s.ctx.Err() != nil {
			continue
		}
		w := &partWorker{recs: make(chan []*kgo.Record, workerBatches), quit: make(chan struct{}), done: make(chan struct{})}
		s.ws[p] = w
		s.wg.Go(func() {
			defer close(w.done)
			s.work(s.ctx, w)
		})
	}
}

// stop stops the workers of parts and waits for them: what they queued is
// dropped (the partitions' next owner fetches it from the last commit).
func (s *workerSet) stop(parts []int32) {
	var ws []*partWorker
	s.mu.Lock()
	for _, p := range parts {
		if w := s.ws[p]; w != nil {
			delete(s.ws, p)
			close(w.quit)
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		<-w.done
	}
}

// get returns partition p's worker, nil when it has none.
func (s *workerSet) get(p int32) *partWorker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ws[p]
}

// startWorkersConsumer is the Workers consumer and, with hook false, its
// naive side: a franz-go group consumer whose poll loop hands each
// partition's records to that partition's worker goroutine (a queue of
// workerBatches polls each, the poll loop waiting while one is full) and
// polls on, as franz-go's goroutine-per-partition example does. The
// workers share the scenario's capacity: one pacer, taken in turn, so
// together they process at capacity. Commits are franz-go's defaults:
// every 5 s, the offsets of what the poll loop was handed, finished by a
// worker or not. With hook, the consumer hook reports to daemon with
// KeepUntilFinished, each worker calls Done for each record it finishes,
// and the revoke and lost callbacks call Revoked once their workers
// stopped. Setting the revoke callback replaces franz-go's default commit
// on revoke: the bench's one member is revoked only when it closes, after
// the run is measured. stall, when set (tests), is called before a worker
// processes a record. It returns once the group has assigned partitions.
func startWorkersConsumer(ctx context.Context, w *world, scn Scenario, rec *recorder, hook bool, daemon string, log *slog.Logger, stall func(context.Context, *kgo.Record)) (*consumer, error) {
	var rep *consumerclient.KafkaReporter
	if hook {
		var err error
		if rep, err = consumerclient.NewKafkaReporter(consumerclient.Config{URL: daemon, Cluster: w.name, Logger: log, KeepUntilFinished: true}); err != nil {
			return nil, err
		}
	}
	cctx, cancel := context.WithCancel(context.Background())
	p := &pacer{capacity: capacityAt(scn, rec)}
	var pmu sync.Mutex
	take := func() error {
		pmu.Lock()
		defer pmu.Unlock()
		return p.take(cctx)
	}
	process := func(r *kgo.Record) error {
		if stall != nil {
			stall(cctx, r)
		}
		if err := take(); err != nil {
			return err
		}
		rec.processed(r, scn.Deadline)
		if rep != nil {
			rep.Done(r)
		}
		return nil
	}
	set := &workerSet{ws: map[int32]*partWorker{}, ctx: cctx, work: func(ctx context.Context, pw *partWorker) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-pw.quit:
				return
			case b := <-pw.recs:
				for _, r := range b {
					select {
					case <-pw.quit:
						return
					default:
					}
					if process(r) != nil {
						return
					}
				}
			}
		}
	}}
	assigned := make(chan struct{})
	var once sync.Once
	revoke := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		set.stop(m[w.topic])
		if rep != nil {
			rep.Revoked(m)
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(w.kafkaAddrs...), kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.topic),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			set.start(m[w.topic])
			once.Do(func() { close(assigned) })
		}),
		kgo.OnPartitionsRevoked(revoke), kgo.OnPartitionsLost(revoke)}
	if rep != nil {
		opts = append(opts, kgo.WithHooks(rep.Hook()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		cancel()
		if rep != nil {
			rep.Close()
		}
		return nil, err
	}
	c := &consumer{cancel: cancel, closeF: func() {
		cl.Close()
		set.wg.Wait()
		if rep != nil {
			rep.Close()
		}
	}}
	c.wg.Go(func() {
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			if cctx.Err() != nil {
				return
			}
			for _, ft := range fs {
				for _, t := range ft.Topics {
					for _, fp := range t.Partitions {
						pw := set.get(fp.Partition)
						if pw == nil || len(fp.Records) == 0 {
							continue
						}
						select {
						case pw.recs <- fp.Records:
						case <-pw.quit:
						case <-cctx.Done():
							return
						}
					}
				}
			}
		}
	})
	return waitAssigned(ctx, c, assigned, w.group)
}
