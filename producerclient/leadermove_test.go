package producerclient

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaLeaderMoveIsNotOverload: a produce to a new topic answered
// NOT_LEADER_FOR_PARTITION or LEADER_NOT_AVAILABLE once (Kafka 4.3.1 right
// after CreateTopics: the broker lists itself as the leader a moment
// before it leads) is retried and delivered, never throttled locally. On
// main the failure counted toward the topic's adaptive throttle, so its
// retry was refused locally with probability (1-0)/(1+1) = 0.50: about
// half of such calls came back "throttled locally". A partition that
// stays without a leader still counts toward the retry budget (not the
// throttle), which bounds its retries.
func TestKafkaLeaderMoveIsNotOverload(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.LeaderNotAvailable} {
		t.Run(code.Message+"/once", func(t *testing.T) {
			const topics = 24
			names := make([]string, topics)
			for i := range names {
				names[i] = fmt.Sprintf("new-%d", i)
			}
			c := newKfake(t, 1, names...)
			failed := map[[16]byte]bool{} // by topic id (produce v13 has no names)
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				pr := req.(*kmsg.ProduceRequest)
				for _, rt := range pr.Topics {
					if failed[rt.TopicID] {
						return nil, nil, false
					}
				}
				for _, rt := range pr.Topics {
					failed[rt.TopicID] = true
				}
				return produceFailure(req, code.Code, nil), nil, true
			})
			p := newKafkaProducer(t, newKgo(t, c), Config{})
			throttled := 0
			for _, topic := range names {
				err := p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: topic, Value: []byte("x")})
				if errors.Is(err, ErrThrottled) {
					throttled++
					t.Logf("%s: %v", topic, err)
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v; want delivered after one retry", topic, err)
				}
				if s := p.Stats().Topics[topic]; s.Attempts != 2 || s.ThrottleProbability != 0 {
					t.Fatalf("%s: %d attempts, throttle probability %.2f; want 2 and 0", topic, s.Attempts, s.ThrottleProbability)
				}
			}
			if throttled > 0 {
				t.Fatalf("%d of %d new topics' first produce throttled locally after one %s", throttled, topics, code.Message)
			}
		})
		t.Run(code.Message+"/always", func(t *testing.T) {
			c := newKfake(t, 1, "orders")
			failProduce(c, code.Code, nil)
			p := newKafkaProducer(t, newKgo(t, c), Config{Retry: RetryConfig{
				Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Budget: RetryBudgetConfig{Kind: BudgetTokens}}})
			for i := 0; i < 4; i++ {
				err := p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")})
				if !errors.Is(err, ErrBrokerRejected) || !errors.Is(err, ErrAvoidPartitions) || errors.Is(err, ErrThrottled) {
					t.Fatalf("call %d: %v; want the broker's rejection, avoid partitions", i, err)
				}
			}
			s := p.Stats()
			pr, tokens := s.Topics["orders"].ThrottleProbability, s.RetryBudgetTokens
			if pr != 0 || tokens >= 10 {
				t.Fatalf("throttle probability %.2f, budget tokens %.1f of 10 after 4 calls answered %s every time; want 0 and fewer than 10 (the budget counts them)", pr, tokens, code.Message)
			}
		})
	}
}
