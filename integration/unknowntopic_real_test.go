package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/producerclient"
)

// TestRealKafkaUnknownTopic: the SDK producing to a topic that does not
// exist (a typo) with the library's defaults, on the real broker. The
// first call's retries were refused locally ("throttled locally after
// broker rejections ... probability 0.50") and every later call too, the
// broker's UNKNOWN_TOPIC_OR_PARTITION only in the words (a new user's
// pass, session 29). Now each call is a stop carrying the broker's error,
// after one attempt, and the throttle stays at 0. franz-go does not ask
// the broker to create a topic (kgo.AllowAutoTopicCreation is off by
// default), so this holds whatever auto.create.topics.enable says (logged).
func TestRealKafkaUnknownTopic(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	adm := kadm.NewClient(client(t, addr))
	var ids []int32
	if bs, err := adm.ListBrokers(ctxT(t, 10*time.Second)); err == nil {
		ids = bs.NodeIDs()
	}
	if rc, err := adm.DescribeBrokerConfigs(ctxT(t, 10*time.Second), ids...); err == nil {
		for _, c := range rc {
			for _, v := range c.Configs {
				if v.Key == "auto.create.topics.enable" {
					t.Logf("broker %s: %s=%s (%s)", c.Name, v.Key, v.MaybeValue(), v.Source)
				}
			}
		}
	}
	topic := unique("typo")
	p, err := producerclient.NewKafka(client(t, addr, producerclient.KafkaClientOpts(nil)...), producerclient.Config{Producer: "typo"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 3; i++ {
		start := time.Now()
		err := p.Produce(ctxT(t, 30*time.Second), &kgo.Record{Topic: topic, Value: []byte("x")})
		t.Logf("call %d (%v): %v", i, time.Since(start).Round(time.Millisecond), err)
		var re *producerclient.RejectError
		if !errors.As(err, &re) || !errors.Is(err, producerclient.ErrStop) || !errors.Is(err, kerr.UnknownTopicOrPartition) ||
			errors.Is(err, producerclient.ErrThrottled) || re.Attempts != wantAttempts(i) {
			t.Fatalf("call %d: %v; want a stop after 1 attempt carrying UNKNOWN_TOPIC_OR_PARTITION", i, err)
		}
	}
	if s := p.Stats().Topics[topic]; s.ThrottleProbability != 0 {
		t.Fatalf("throttle probability %.2f; want 0: a missing topic is not overload", s.ThrottleProbability)
	}
}

// wantAttempts is the attempts of call i to a missing topic: the first
// is retried once, the later ones are not (producerclient's firstRetry).
func wantAttempts(i int) int {
	if i == 0 {
		return 2
	}
	return 1
}
