package producerclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSNoStreamIsNotOverload: a publish to a subject that no stream captures
// (a typo: "ordres.a" beside the stream ORDERS on "orders.>"), library
// defaults. On main the server's "no responders" was a retried slow-down
// counted toward the adaptive throttle and the retry budget, so the first
// call read "slow-down (throttled locally after broker rejections) ...
// probability 0.50". Now the SDK asks JetStream's stream list, and each
// call is a slow-down carrying jetstream.ErrStreamNotFound and the subject
// (the first after one retry, as Kafka's missing topic), outside the
// throttle and the budget; not a stop, which a mapped subject's stream
// without a leader would read as too (TestNATSLeaderlessStreamIsNotStop). A stream created afterwards takes the next publish.
func TestNATSNoStreamIsNotOverload(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	p := newNATSProducer(t, js, Config{Retry: RetryConfig{Budget: RetryBudgetConfig{Kind: BudgetTokens}}})
	for i := 0; i < 3; i++ {
		start := time.Now()
		_, err := p.Publish(ctxFor(t, 10*time.Second), &nats.Msg{Subject: "ordres.a", Data: []byte("x")})
		t.Logf("publish %d (%v): %v", i, time.Since(start).Round(time.Millisecond), err)
		var re *RejectError
		if !errors.As(err, &re) || !errors.Is(err, ErrSlowDown) || !errors.Is(err, ErrBrokerRejected) ||
			!errors.Is(err, jetstream.ErrStreamNotFound) || !errors.Is(err, jetstream.ErrNoStreamResponse) ||
			errors.Is(err, ErrThrottled) || re.Attempts != wantAttempts(i) || !strings.Contains(err.Error(), `"ordres.a"`) {
			t.Fatalf("publish %d: %v; want a slow-down after %d attempt(s) naming the subject, carrying ErrStreamNotFound", i, err, wantAttempts(i))
		}
	}
	done := make(chan error, 1)
	if err := p.PublishAsync(ctxFor(t, 10*time.Second), &nats.Msg{Subject: "ordres.b", Data: []byte("x")},
		func(_ *nats.Msg, _ *jetstream.PubAck, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrSlowDown) || !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, ErrThrottled) {
		t.Fatalf("async publish: %v; want a slow-down carrying ErrStreamNotFound", err)
	}
	s := p.Stats()
	if pr, tokens := s.Topics["ordres.a"].ThrottleProbability, s.RetryBudgetTokens; pr != 0 || tokens != 10 {
		t.Fatalf("throttle probability %.2f, budget tokens %.1f of 10; want 0 and 10: a misspelt subject is not overload", pr, tokens)
	}
	// The stream created late: the next publish is stored.
	createStream(t, js, jetstream.StreamConfig{Name: "ORDRES", Subjects: []string{"ordres.>"}})
	if _, err := p.Publish(ctxFor(t, 10*time.Second), &nats.Msg{Subject: "ordres.a", Data: []byte("x")}); err != nil {
		t.Fatalf("publish after the stream was created: %v", err)
	}
}

// TestNATSNoStreamLookupFails: when the stream list cannot be read (here
// a JetStream context whose API prefix nobody serves; in a cluster, no
// meta leader), a publish no stream answered stays what it was: a
// retried slow-down that counts toward the throttle (a stream without a
// leader looks the same).
func TestNATSNoStreamLookupFails(t *testing.T) {
	_, nc, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	bogus, err := jetstream.NewWithAPIPrefix(nc, "$NOBODY.API")
	if err != nil {
		t.Fatal(err)
	}
	p := newNATSProducer(t, bogus, Config{Retry: RetryConfig{Backoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	_, err = p.Publish(ctxFor(t, 10*time.Second), &nats.Msg{Subject: "ordres.a", Data: []byte("x")})
	if errors.Is(err, ErrStop) || errors.Is(err, jetstream.ErrStreamNotFound) || !errors.Is(err, ErrSlowDown) {
		t.Fatalf("%v; want the slow-down of a publish no stream answered", err)
	}
	// Counted: the throttle's probability is above 0 (the retry itself may
	// be refused by it locally, with probability 0.50 after one failure, so
	// the number of attempts is 1 or more).
	if s := p.Stats().Topics["ordres.a"]; s.ThrottleProbability == 0 {
		t.Fatalf("%d attempts, throttle probability %.2f; want counted", s.Attempts, s.ThrottleProbability)
	}
}
