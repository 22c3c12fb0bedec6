package producerclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaSyncCallsDoNotLinger: with franz-go lingering a minute (its
// largest linger), the synchronous calls still come back within seconds,
// since they flush their partition at once as kgo.ProduceSync does; a
// synchronous call built on ProduceAsync and a wait would sit out the
// minute. The record's own Context (none here) is as the caller left it.
func TestKafkaSyncCallsDoNotLinger(t *testing.T) {
	c := newKfake(t, 2, "orders")
	cl := newKgo(t, c, kgo.ProducerLinger(time.Minute))
	p := newKafkaProducer(t, cl, Config{})
	// Until the client has loaded a topic's partitions it cannot tell which
	// partition to flush (kgo.ProduceSync has the same limit): load them
	// with a first record, flushed by hand.
	warm := make(chan error, 1)
	p.ProduceAsync(ctxFor(t, 20*time.Second), &kgo.Record{Topic: "orders"}, func(_ *kgo.Record, err error) { warm <- err })
	if err := cl.Flush(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-warm; err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		produce func(ctx context.Context) error
	}{
		// One record, the request handler's call.
		{"Produce", func(ctx context.Context) error {
			r := &kgo.Record{Topic: "orders", Value: []byte("one")}
			err := p.Produce(ctx, r)
			if r.Context != nil {
				t.Errorf("record Context left as %v", r.Context)
			}
			return err
		}},
		// A record that carries its own Context keeps it.
		{"Produce own context", func(ctx context.Context) error {
			own, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := &kgo.Record{Topic: "orders", Value: []byte("own"), Context: own}
			err := p.Produce(ctx, r)
			if r.Context != own {
				t.Errorf("record Context replaced")
			}
			return err
		}},
		// A batch, synchronously.
		{"ProduceBatch", func(ctx context.Context) error {
			rs := []*kgo.Record{{Topic: "orders", Value: []byte("a")}, {Topic: "orders", Value: []byte("b")}, {Topic: "orders", Value: []byte("c")}}
			res := p.ProduceBatch(ctx, rs)
			if len(res) != 3 {
				t.Errorf("%d results for 3 records", len(res))
			}
			return res.FirstErr()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.produce(ctxFor(t, 20*time.Second)); err != nil {
				t.Fatalf("%s with a one-minute linger: %v", tc.name, err)
			}
		})
	}
	s := p.Stats().Topics["orders"]
	if s.Admitted != 6 || s.Acked != 6 || s.InFlight != 0 || s.RejectedTotal() != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestKafkaSyncRetriesOnCaller: a synchronous Produce whose first attempt
// fails is retried on the calling goroutine under the budget, and counted
// as for ProduceAsync.
func TestKafkaSyncRetriesOnCaller(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Retry: RetryConfig{Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}})
	if err := p.Produce(ctxFor(t, 10*time.Second), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatal(err) // metadata and producer id first
	}
	// The next produce request fails (the control is used once).
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		return produceFailure(req, kerr.NotLeaderForPartition.Code, nil), nil, true
	})
	if err := p.Produce(ctxFor(t, 10*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	s := p.Stats().Topics["orders"]
	if s.Attempts != 3 || s.Retries != 1 || s.Acked != 2 || s.BrokerErrors != 1 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestAsyncRefusalAtCallTime: an async call whose message the SDK refuses
// returns that refusal at once, the same error its callback got, and the
// callback runs once; the refusal is counted once. An admitted message
// returns nil and its outcome comes through the callback only.
func TestAsyncRefusalAtCallTime(t *testing.T) {
	type outcome struct {
		ret   error
		calls int
		got   error
	}
	// once makes one async call through send, whose callback calls done,
	// and returns its outcome once done has run.
	once := func(send func(done func(error)) error) outcome {
		var o outcome
		ch := make(chan struct{})
		o.ret = send(func(err error) {
			o.calls++
			o.got = err
			close(ch)
		})
		<-ch
		return o
	}
	for _, tc := range []struct {
		name string
		// send makes one async call and returns its outcome once done
		// has run.
		send   func(t *testing.T) (first, second outcome, rejected uint64)
		reason error
	}{
		// Kafka, Drop mode over a rate of 1/s with a burst of 1.
		{"kafka ProduceAsync", func(t *testing.T) (outcome, outcome, uint64) {
			p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Mode: Drop, Clock: newFakeClock(),
				Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 1, Burst: 1}}})
			call := func() outcome {
				return once(func(done func(error)) error {
					return p.ProduceAsync(context.Background(), &kgo.Record{Topic: "orders"}, func(_ *kgo.Record, err error) { done(err) })
				})
			}
			a, b := call(), call()
			return a, b, p.Stats().Topics["orders"].Rejected["rate"]
		}, ErrRateLimited},
		// NATS, the same.
		{"nats PublishAsync", func(t *testing.T) (outcome, outcome, uint64) {
			_, _, js := startNATS(t)
			createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
			p := newNATSProducer(t, js, Config{Mode: Drop, Clock: newFakeClock(),
				Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 1, Burst: 1}}})
			call := func() outcome {
				return once(func(done func(error)) error {
					return p.PublishAsync(context.Background(), &nats.Msg{Subject: "orders.a"}, func(_ *nats.Msg, _ *jetstream.PubAck, err error) { done(err) })
				})
			}
			a, b := call(), call()
			return a, b, p.Stats().Topics["ORDERS"].Rejected["rate"]
		}, ErrRateLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second, rejected := tc.send(t)
			if first.ret != nil || first.got != nil || first.calls != 1 {
				t.Fatalf("admitted message: returned %v, callback %d times with %v", first.ret, first.calls, first.got)
			}
			if second.ret == nil || second.ret != second.got || second.calls != 1 || !errors.Is(second.ret, tc.reason) {
				t.Fatalf("refused message: returned %v, callback %d times with %v; want the same %v once", second.ret, second.calls, second.got, tc.reason)
			}
			if rejected != 1 {
				t.Fatalf("refusal counted %d times", rejected)
			}
		})
	}

	// A batch returns how many of its records were refused at call time.
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Mode: Drop, Clock: newFakeClock(),
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 1, Burst: 2}}})
	got := make(chan error, 5)
	rs := []*kgo.Record{{Topic: "orders"}, {Topic: "orders"}, {Topic: "orders"}, {Topic: "orders"}, nil}
	n := p.ProduceBatchAsync(context.Background(), rs, func(_ *kgo.Record, err error) { got <- err })
	var refused int
	for range rs {
		if err := <-got; err != nil {
			refused++
		}
	}
	if n != 3 || refused != 3 || p.Stats().Topics["orders"].Rejected["rate"] != 2 {
		t.Fatalf("batch: returned %d refused, callbacks saw %d, counted %d; want 3, 3, 2 (+1 invalid)", n, refused, p.Stats().Topics["orders"].Rejected["rate"])
	}
}
