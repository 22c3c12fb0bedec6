package producerclient

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaUnknownTopicIsNotOverload: producing to a topic that does not
// exist (a typo) with the library's defaults. The failures were retried
// and counted as the broker's rejections, so the retries of the very
// first call were refused locally: "slow-down (throttled locally after
// broker rejections) ... probability 0.50", the broker's
// UNKNOWN_TOPIC_OR_PARTITION only in the words of the last failure (a new
// user's pass, session 29). Now each call is a stop with the broker's
// error (the first call after one retry, the later ones after one
// attempt), and the throttle stays at 0.
func TestKafkaUnknownTopicIsNotOverload(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	for i := 0; i < 3; i++ {
		err := p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: "ordres", Value: []byte("x")})
		var re *RejectError
		if !errors.As(err, &re) || !errors.Is(err, ErrStop) || !errors.Is(err, ErrBrokerRejected) ||
			!errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, ErrThrottled) || re.Attempts != wantAttempts(i) {
			t.Fatalf("call %d: %v; want a stop after 1 attempt carrying UNKNOWN_TOPIC_OR_PARTITION", i, err)
		}
	}
	if s := p.Stats().Topics["ordres"]; s.ThrottleProbability != 0 || s.Retries > 1 {
		t.Fatalf("throttle probability %.2f, %d retries; want 0 and at most 1 (the first call's): a missing topic is not overload", s.ThrottleProbability, s.Retries)
	}
}

// TestKafkaOwnFaultsNotCounted: broker answers that are the request's own
// fault (a missing topic, a record too large, no authorization, an invalid
// record) end the message with a stop and the broker's error, and count
// toward neither the adaptive throttle nor the retry budget; an overload
// or unavailability answer (NOT_ENOUGH_REPLICAS) still counts toward both.
// The answers come from kfake's per-request fault injection.
func TestKafkaOwnFaultsNotCounted(t *testing.T) {
	for _, tc := range []struct {
		err   *kerr.Error
		count bool
	}{
		{kerr.UnknownTopicOrPartition, false},
		{kerr.MessageTooLarge, false},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.InvalidRecord, false},
		{kerr.NotEnoughReplicas, true},
	} {
		t.Run(tc.err.Message, func(t *testing.T) {
			c := newKfake(t, 1, "orders")
			failProduce(c, tc.err.Code, nil)
			p := newKafkaProducer(t, newKgo(t, c), Config{Retry: RetryConfig{
				Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Budget: RetryBudgetConfig{Kind: BudgetTokens}}})
			for i := 0; i < 4; i++ {
				err := p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")})
				if !errors.Is(err, ErrBrokerRejected) && !errors.Is(err, ErrThrottled) {
					t.Fatalf("call %d: %v; want the broker's rejection", i, err)
				}
				if !tc.count && (!errors.Is(err, ErrStop) || !errors.Is(err, tc.err) || errors.Is(err, ErrThrottled)) {
					t.Fatalf("call %d: %v; want a stop carrying %s", i, err, tc.err.Message)
				}
			}
			s := p.Stats()
			pr, tokens := s.Topics["orders"].ThrottleProbability, s.RetryBudgetTokens
			t.Logf("%s: throttle probability %.2f, budget tokens %.1f", tc.err.Message, pr, tokens)
			if (pr > 0) != tc.count || (tokens < 10) != tc.count {
				t.Fatalf("throttle probability %.2f, budget tokens %.1f of 10: want counted %v by both", pr, tokens, tc.count)
			}
		})
	}
}

// TestNATSOwnFaultsNotCounted: a message the stream refuses for itself
// (larger than the stream's MaxMsgSize) is a stop carrying the server's
// error, and counts toward neither the adaptive throttle nor the retry
// budget; before, 4 of them set the throttle's probability to 0.80 (the
// subject's good messages then refused locally).
func TestNATSOwnFaultsNotCounted(t *testing.T) {
	_, _, js := startNATS(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxMsgSize: 16})
	p := newNATSProducer(t, js, Config{Retry: RetryConfig{Budget: RetryBudgetConfig{Kind: BudgetTokens}}})
	for i := 0; i < 4; i++ {
		_, err := p.Publish(ctxFor(t, 10*time.Second), &nats.Msg{Subject: "orders.a", Data: make([]byte, 64)})
		var api *jetstream.APIError
		if !errors.Is(err, ErrStop) || !errors.As(err, &api) || errors.Is(err, ErrThrottled) {
			t.Fatalf("publish %d: %v; want a stop carrying the stream's refusal", i, err)
		}
	}
	s := p.Stats()
	if pr, tokens := s.Topics["ORDERS"].ThrottleProbability, s.RetryBudgetTokens; pr != 0 || tokens != 10 {
		t.Fatalf("throttle probability %.2f, budget tokens %.1f of 10; want 0 and 10: a message too large is not overload", pr, tokens)
	}
}

// A broker whose metadata lags the controller: the first Metadata answer
// after CreateTopics does not list the new topic yet (as Kafka 4.3.1
// under load, 30 of 120 create-then-produce calls).
func TestKafkaTopicListedLate(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	once := true
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mr := req.(*kmsg.MetadataRequest)
		if !once || len(mr.Topics) == 0 {
			c.KeepControl()
			return nil, nil, false
		}
		once = false
		resp := mr.ResponseKind().(*kmsg.MetadataResponse)
		resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: "127.0.0.1", Port: 0}}
		for _, rt := range mr.Topics {
			st := kmsg.NewMetadataResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	err := p.Produce(ctxFor(t, 10*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")})
	t.Logf("err: %v", err)
	if err != nil {
		t.Fatal("a topic that exists, listed one metadata load late, was refused")
	}
}

// wantAttempts is the attempts of call i to a missing topic: the first
// is retried once (a topic the broker's metadata may list a moment
// late), the later ones are not.
func wantAttempts(i int) int {
	if i == 0 {
		return 2
	}
	return 1
}
