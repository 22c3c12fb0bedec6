package producerclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestThrottledSaysWhatTheBrokerSaid: a producer publishing to a subject
// no stream answers is soon refused by the adaptive throttle; its
// rejection names the broker's last answer, not only "the broker accepted
// too few recent requests". Before, a new user's first errors never said
// that no stream answered. (A subject that JetStream's stream list says
// no stream captures is kept out of the throttle now,
// TestNATSNoStreamIsNotOverload; here the list
// cannot be read, through an API prefix nobody serves, as when a stream
// has no leader in a cluster without a meta leader.)
func TestThrottledSaysWhatTheBrokerSaid(t *testing.T) {
	_, nc, _ := startNATS(t)
	js, err := jetstream.NewWithAPIPrefix(nc, "$NOBODY.API")
	if err != nil {
		t.Fatal(err)
	}
	p := newNATSProducer(t, js, Config{Retry: RetryConfig{Backoff: 5 * time.Millisecond}})
	throttled := 0
	for i := 0; i < 40 && throttled < 3; i++ {
		_, err := p.Publish(ctxFor(t, 5*time.Second), &nats.Msg{Subject: "nostream.x", Data: []byte("x")})
		if err == nil {
			t.Fatal("a publish no stream captures succeeded")
		}
		if !errors.Is(err, ErrThrottled) {
			continue
		}
		throttled++
		if !strings.Contains(err.Error(), "no stream answered") {
			t.Fatalf("throttled without the broker's answer: %v", err)
		}
	}
	if throttled == 0 {
		t.Fatal("never throttled")
	}
}

// TestThrottledRetrySaysItsAttempts: a retry the adaptive throttle
// refuses comes back with the attempts the message had (RejectError's
// "handed to the broker client" count), not 0: on main, right after
// CreateTopics on Kafka 4.3.1, such calls read "throttled ... after 0
// attempts" though the broker had answered the first (session 30,
// sdkerr). Every produce here is answered NOT_ENOUGH_REPLICAS, which
// counts toward the throttle; each call's sends are read from the stats.
func TestThrottledRetrySaysItsAttempts(t *testing.T) {
	c := newKfake(t, 1, "orders")
	failProduce(c, kerr.NotEnoughReplicas.Code, nil)
	p := newKafkaProducer(t, newKgo(t, c), Config{Retry: RetryConfig{Backoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	retried := 0
	for i := 0; i < 200 && retried < 3; i++ {
		before := p.Stats().Topics["orders"].Attempts
		err := p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")})
		sent := int(p.Stats().Topics["orders"].Attempts - before)
		var re *RejectError
		if !errors.As(err, &re) {
			t.Fatalf("call %d: %v; want a rejection", i, err)
		}
		if !errors.Is(err, ErrThrottled) {
			continue
		}
		if re.Attempts != sent {
			t.Fatalf("call %d: %v; attempts %d, want %d (the sends before the throttle refused it)", i, err, re.Attempts, sent)
		}
		if sent > 0 {
			retried++
		}
	}
	if retried == 0 {
		t.Fatal("no retry was throttled")
	}
}
