package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient"
)

// naiveRetries is how many times the naive producers retry a failed
// message (so up to four attempts).
const naiveRetries = 3

// fleet is the producers of one run, one per class.
type fleet interface {
	// send asks producer class to send one message created now. It may
	// block (a full client buffer), never for long.
	send(ctx context.Context, class int, created time.Time)
	// allowed is the total rate the producers enforce now: NaN for naive
	// producers, +Inf when some producer is unlimited.
	allowed() float64
	// close flushes for at most a second, stops every goroutine the fleet
	// started and returns the totals.
	close() Totals
}

// naiveKafka: one kgo client per producer with franz-go's retries off and
// three application-level retries per failed record, the way most
// hand-written producers look. No lagbridge anywhere.
type naiveKafka struct {
	w       *world
	rec     *recorder
	clients []*kgo.Client
	retry   chan kretry
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

type kretry struct {
	class, attempt int
	r              *kgo.Record
}

func newNaiveKafka(w *world, scn Scenario, rec *recorder) (*naiveKafka, error) {
	ctx, stop := context.WithCancel(context.Background())
	n := &naiveKafka{w: w, rec: rec, retry: make(chan kretry, 100_000), stop: stop}
	for _, c := range scn.Classes {
		cl, err := kgo.NewClient(append(w.kafkaOpts(), kgo.ClientID(c.Producer), kgo.RecordRetries(0))...)
		if err != nil {
			n.close()
			return nil, err
		}
		n.clients = append(n.clients, cl)
	}
	n.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case k := <-n.retry:
				n.produce(ctx, k.class, k.r, k.attempt)
			}
		}
	})
	return n, nil
}

func (n *naiveKafka) send(ctx context.Context, class int, created time.Time) {
	r := &kgo.Record{Topic: n.w.topic, Value: encode(created, class), Timestamp: created}
	n.produce(ctx, class, r, 1)
}

func (n *naiveKafka) produce(ctx context.Context, class int, r *kgo.Record, attempt int) {
	n.rec.attempts.Add(1)
	if attempt > 1 {
		n.rec.retries.Add(1)
	}
	n.clients[class].Produce(ctx, r, func(r *kgo.Record, err error) {
		if err == nil {
			n.rec.add(n.rec.acked, class, time.Now())
			return
		}
		if attempt > naiveRetries || ctx.Err() != nil {
			n.rec.failed.Add(1)
			return
		}
		// Producing from inside a promise can block on a full buffer:
		// hand the retry to the retry goroutine.
		select {
		case n.retry <- kretry{class: class, attempt: attempt + 1, r: r}:
		default:
			n.rec.failed.Add(1)
		}
	})
}

func (n *naiveKafka) allowed() float64 { return math.NaN() }

func (n *naiveKafka) close() Totals {
	fctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, cl := range n.clients {
		_ = cl.Flush(fctx)
	}
	n.stop()
	n.wg.Wait()
	for _, cl := range n.clients {
		cl.Close()
	}
	n.clients = nil
	return Totals{Attempts: n.rec.attempts.Load(), Retries: n.rec.retries.Load(), Failed: n.rec.failed.Load()}
}

// sdkKafka: one producerclient.KafkaProducer per producer, in Drop mode
// (what does not fit the quota is shed at once, the cheapest rejection),
// with the deadline as message TTL and leases pushed by the daemon over
// server-sent events.
type sdkKafka struct {
	w         *world
	rec       *recorder
	clients   []*kgo.Client
	producers []*producerclient.KafkaProducer
	done      []func(*kgo.Record, error)
}

// sdkConfig is the SDK config of one producer class.
func sdkConfig(o Options, scn Scenario, c Class, topic, base string) producerclient.Config {
	return producerclient.Config{
		Producer: c.Producer, Topics: []string{topic}, Mode: producerclient.Drop, Criticality: c.Criticality,
		MessageTTL: scn.Deadline,
		Leases:     producerclient.LeaseConfig{URL: base, Transport: producerclient.SSE},
		Logger:     o.Log.With("producer", c.Producer),
	}
}

func newSDKKafka(o Options, scn Scenario, w *world, base string, rec *recorder) (*sdkKafka, error) {
	s := &sdkKafka{w: w, rec: rec}
	for i, c := range scn.Classes {
		cl, err := kgo.NewClient(append(append(w.kafkaOpts(), kgo.ClientID(c.Producer)), producerclient.KafkaClientOpts(nil)...)...)
		if err != nil {
			s.close()
			return nil, err
		}
		s.clients = append(s.clients, cl)
		p, err := producerclient.NewKafka(cl, sdkConfig(o, scn, c, w.topic, base))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("producer %s: %w", c.Producer, err)
		}
		s.producers = append(s.producers, p)
		class := i
		s.done = append(s.done, func(_ *kgo.Record, err error) {
			if err == nil {
				rec.add(rec.acked, class, time.Now())
				return
			}
			var re *producerclient.RejectError
			if errors.As(err, &re) && re.Attempts > 0 {
				rec.failed.Add(1)
			}
		})
	}
	return s, nil
}

func (s *sdkKafka) send(ctx context.Context, class int, created time.Time) {
	r := &kgo.Record{Topic: s.w.topic, Value: encode(created, class), Timestamp: created}
	s.producers[class].ProduceAsync(ctx, r, s.done[class])
}

func (s *sdkKafka) allowed() float64 { return allowedOf(s.producers, s.w.topic) }

func (s *sdkKafka) close() Totals {
	tot := closeAll(s.producers)
	for _, cl := range s.clients {
		cl.Close()
	}
	s.producers, s.clients = nil, nil
	tot.Failed = s.rec.failed.Load()
	return tot
}

// sumQuota adds the producers' enforced rates; a producer on its open safe
// quota or an unlimited lease makes the sum +Inf.
func sumQuota(qs []producerclient.Quota) float64 {
	var sum float64
	for _, q := range qs {
		if q.Closed {
			continue
		}
		sum += q.Rate
	}
	return sum
}

func addStats(t *Totals, st producerclient.Stats) {
	if t.Shed == nil {
		t.Shed = map[string]int64{}
	}
	for _, ts := range st.Topics {
		t.Attempts += int64(ts.Attempts)
		t.Retries += int64(ts.Retries)
		for why, n := range ts.Rejected {
			if why == "broker" || why == "retry_budget" {
				continue // sent and failed: not shed
			}
			t.Shed[why] += int64(n)
		}
	}
}

// naiveNATS: JetStream async publishes with three application-level
// retries per failure.
type naiveNATS struct {
	w       *world
	rec     *recorder
	pending chan npub
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

type npub struct {
	class, attempt int
	m              *natsgo.Msg
	f              jetstream.PubAckFuture
}

func newNaiveNATS(w *world, rec *recorder) *naiveNATS {
	ctx, stop := context.WithCancel(context.Background())
	n := &naiveNATS{w: w, rec: rec, pending: make(chan npub, 100_000), stop: stop}
	n.wg.Go(func() { n.collect(ctx) })
	return n
}

func (n *naiveNATS) send(ctx context.Context, class int, created time.Time) {
	n.publish(ctx, class, &natsgo.Msg{Subject: n.w.subject, Data: encode(created, class)}, 1)
}

func (n *naiveNATS) publish(ctx context.Context, class int, m *natsgo.Msg, attempt int) {
	for ; ctx.Err() == nil; attempt++ {
		n.rec.attempts.Add(1)
		if attempt > 1 {
			n.rec.retries.Add(1)
		}
		f, err := n.w.js.PublishMsgAsync(m)
		if err == nil {
			select {
			case n.pending <- npub{class: class, attempt: attempt, m: m, f: f}:
			case <-ctx.Done():
			}
			return
		}
		if attempt > naiveRetries {
			n.rec.failed.Add(1)
			return
		}
	}
}

// collect waits for each ack in order and retries failures.
func (n *naiveNATS) collect(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-n.pending:
			select {
			case <-p.f.Ok():
				n.rec.add(n.rec.acked, p.class, time.Now())
			case <-p.f.Err():
				if p.attempt > naiveRetries {
					n.rec.failed.Add(1)
					continue
				}
				n.publish(ctx, p.class, p.m, p.attempt+1)
			case <-ctx.Done():
				return
			}
		}
	}
}

func (n *naiveNATS) allowed() float64 { return math.NaN() }

func (n *naiveNATS) close() Totals {
	select {
	case <-n.w.js.PublishAsyncComplete():
	case <-time.After(time.Second):
	}
	n.stop()
	n.wg.Wait()
	return Totals{Attempts: n.rec.attempts.Load(), Retries: n.rec.retries.Load(), Failed: n.rec.failed.Load()}
}

// sdkNATS: one producerclient.NATSProducer per producer, Drop mode.
type sdkNATS struct {
	w         *world
	rec       *recorder
	producers []*producerclient.NATSProducer
	done      []func(*natsgo.Msg, *jetstream.PubAck, error)
}

func newSDKNATS(o Options, scn Scenario, w *world, base string, rec *recorder) (*sdkNATS, error) {
	s := &sdkNATS{w: w, rec: rec}
	for i, c := range scn.Classes {
		cfg := sdkConfig(o, scn, c, w.topic, base)
		stream := w.topic
		cfg.NATS.Topic = func(string) string { return stream }
		p, err := producerclient.NewNATS(w.js, cfg)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("producer %s: %w", c.Producer, err)
		}
		s.producers = append(s.producers, p)
		class := i
		s.done = append(s.done, func(_ *natsgo.Msg, _ *jetstream.PubAck, err error) {
			if err == nil {
				rec.add(rec.acked, class, time.Now())
				return
			}
			var re *producerclient.RejectError
			if errors.As(err, &re) && re.Attempts > 0 {
				rec.failed.Add(1)
			}
		})
	}
	return s, nil
}

func (s *sdkNATS) send(ctx context.Context, class int, created time.Time) {
	m := &natsgo.Msg{Subject: s.w.subject, Data: encode(created, class), Header: natsgo.Header{}}
	s.producers[class].PublishAsync(ctx, m, s.done[class])
}

func (s *sdkNATS) allowed() float64 { return allowedOf(s.producers, s.w.topic) }

func (s *sdkNATS) close() Totals {
	tot := closeAll(s.producers)
	s.producers = nil
	tot.Failed = s.rec.failed.Load()
	return tot
}

// generate calls send rate times a second (open loop: a slow send makes
// the next ones come in a burst, not fewer) until ctx ends.
func generate(ctx context.Context, start time.Time, rate float64, send func(created time.Time)) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int(now.Sub(start).Seconds()*rate) - sent
			for range due {
				if ctx.Err() != nil {
					return
				}
				send(time.Now())
			}
			sent += max(due, 0)
		}
	}
}

// sdkProducer is what the bench needs of the SDK's Kafka and NATS producers.
type sdkProducer interface {
	Quota(topic string) (producerclient.Quota, bool)
	Flush(ctx context.Context) error
	Stats() producerclient.Stats
	Close() error
}

// allowedOf sums the producers' current quotas on topic.
func allowedOf[P sdkProducer](ps []P, topic string) float64 {
	qs := make([]producerclient.Quota, 0, len(ps))
	for _, p := range ps {
		q, _ := p.Quota(topic)
		qs = append(qs, q)
	}
	return sumQuota(qs)
}

// closeAll flushes (for up to a second), counts and closes the producers.
func closeAll[P sdkProducer](ps []P) Totals {
	fctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var tot Totals
	for _, p := range ps {
		_ = p.Flush(fctx)
		addStats(&tot, p.Stats())
		_ = p.Close()
	}
	return tot
}
