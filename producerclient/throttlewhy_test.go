package producerclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestThrottledSaysWhatTheBrokerSaid: a producer publishing to a subject
// no stream captures (a typo, a stream not created yet) is soon refused
// by the adaptive throttle; its rejection names the broker's last answer,
// not only "the broker accepted too few recent requests". Before, a new
// user's first errors never said that no stream captures the subject.
func TestThrottledSaysWhatTheBrokerSaid(t *testing.T) {
	_, _, js := startNATS(t)
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
