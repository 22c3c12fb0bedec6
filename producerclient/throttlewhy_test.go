package producerclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestThrottledSaysWhatTheBrokerSaid: a producer publishing to a subject
// no stream answers is soon refused by the adaptive throttle; its
// rejection names the broker's last answer, not only "the broker accepted
// too few recent requests". Before, a new user's first errors never said
// that no stream answered. (A subject that JetStream's stream list says
// no stream captures is a stop now, TestNATSNoStreamIsStop; here the list
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
