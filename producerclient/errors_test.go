package producerclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestErrorContract pins what callers branch on: each rejection matches
// its signal sentinel and its reason sentinel, plain, wrapped with %w, and
// through errors.As, and hands the message back.
func TestErrorContract(t *testing.T) {
	rec := &kgo.Record{Topic: "orders", Value: []byte("x")}
	for _, tc := range []struct {
		name    string
		err     *RejectError
		signal  error
		reason  error
		notSigs []error
		cause   error
	}{
		// Local rate limit: slow down, with the time to the next token.
		{"rate limited", reject("orders", SignalSlowDown, ErrRateLimited, "quota 10 msg/s", 100*time.Millisecond, nil),
			ErrSlowDown, ErrRateLimited, []error{ErrStop, ErrAvoidPartitions}, nil},
		// The lease says stop: do not retry.
		{"stop", reject("orders", SignalStop, nil, "consumer stopped", 0, nil),
			ErrStop, nil, []error{ErrSlowDown, ErrAvoidPartitions}, nil},
		// A closed producer is a stop, and ErrClosed.
		{"closed", reject("orders", SignalStop, ErrClosed, "closed", 0, nil),
			ErrStop, ErrClosed, []error{ErrSlowDown}, nil},
		// No lease and a closed safe quota.
		{"quota unavailable", reject("orders", SignalSlowDown, ErrQuotaUnavailable, "no lease", 0, nil),
			ErrSlowDown, ErrQuotaUnavailable, []error{ErrStop}, nil},
		// A broker failure keeps the broker's own error reachable.
		{"broker avoid partitions", reject("orders", SignalAvoidPartitions, ErrBrokerRejected, "partition unavailable", 0, kerr.NotLeaderForPartition),
			ErrAvoidPartitions, ErrBrokerRejected, []error{ErrStop, ErrSlowDown}, kerr.NotLeaderForPartition},
		// A context that ended keeps its error.
		{"deadline", reject("orders", SignalSlowDown, ErrRateLimited, "", 0, context.DeadlineExceeded),
			ErrSlowDown, ErrRateLimited, nil, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.err.Record = rec
			for _, form := range []struct {
				name string
				err  error
			}{
				{"plain", tc.err},
				{"wrapped", fmt.Errorf("send order 42: %w", tc.err)},
				{"double wrapped", fmt.Errorf("handler: %w", fmt.Errorf("send: %w", tc.err))},
			} {
				if !errors.Is(form.err, tc.signal) {
					t.Errorf("%s: not Is(%v): %v", form.name, tc.signal, form.err)
				}
				if tc.reason != nil && !errors.Is(form.err, tc.reason) {
					t.Errorf("%s: not Is(%v)", form.name, tc.reason)
				}
				for _, s := range tc.notSigs {
					if errors.Is(form.err, s) {
						t.Errorf("%s: unexpectedly Is(%v)", form.name, s)
					}
				}
				if tc.cause != nil && !errors.Is(form.err, tc.cause) {
					t.Errorf("%s: cause %v not reachable", form.name, tc.cause)
				}
				var re *RejectError
				if !errors.As(form.err, &re) || re.Record != rec || re.Topic != "orders" {
					t.Errorf("%s: errors.As did not give back the record", form.name)
				}
			}
			if !strings.Contains(tc.err.Error(), "orders") || !strings.Contains(tc.err.Error(), tc.err.Signal.String()) {
				t.Errorf("message %q lacks topic or signal", tc.err.Error())
			}
		})
	}
}

func TestRejectErrorMessage(t *testing.T) {
	r := reject("orders", SignalSlowDown, ErrBrokerRejected, "the stream is full", 250*time.Millisecond, errors.New("nats: maximum messages exceeded"))
	r.extra = ErrRetryBudgetExhausted
	r.Attempts = 2
	want := "producerclient: orders: slow-down (broker rejected the message; retry budget exhausted): the stream is full; retry after 250ms; after 2 attempt(s): nats: maximum messages exceeded"
	if r.Error() != want {
		t.Fatalf("got  %q\nwant %q", r.Error(), want)
	}
	if !errors.Is(r, ErrRetryBudgetExhausted) || !errors.Is(r, ErrBrokerRejected) {
		t.Fatal("both reasons must match")
	}
	if r := reject("t", SignalSlowDown, nil, "", -time.Second, nil); r.RetryAfter != 0 {
		t.Fatalf("negative retry-after must become 0, got %v", r.RetryAfter)
	}
}

func TestClassifyKafka(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		signal      Signal
		retriable   bool
		ownFault    bool // kept out of the adaptive throttle and the retry budget
		leaderMoved bool // kept out of the adaptive throttle only
	}{
		// A lost leader: another partition may do.
		{"not leader", kerr.NotLeaderForPartition, SignalAvoidPartitions, true, false, true},
		// A partition not led yet (franz-go fails it from the metadata):
		// the same.
		{"leader not available", fmt.Errorf("no partitions available after attempting to refresh metadata 1 times, last err: %w", kerr.LeaderNotAvailable), SignalAvoidPartitions, true, false, true},
		// A leader epoch the broker does not know yet, or an older one:
		// the leader moved, the same.
		{"fenced leader epoch", kerr.FencedLeaderEpoch, SignalAvoidPartitions, true, false, true},
		{"unknown leader epoch", kerr.UnknownLeaderEpoch, SignalAvoidPartitions, true, false, true},
		// Too few replicas: another partition may do; it counts toward
		// the throttle (the partition is led, but unavailable).
		{"not enough replicas", fmt.Errorf("x: %w", kerr.NotEnoughReplicas), SignalAvoidPartitions, true, false, false},
		// Broker quota: slow down.
		{"throttling", kerr.ThrottlingQuotaExceeded, SignalSlowDown, true, false, false},
		// The broker took too long: overload.
		{"timed out", kerr.RequestTimedOut, SignalSlowDown, true, false, false},
		// A record too large will never fit.
		{"too large", kerr.MessageTooLarge, SignalStop, false, true, false},
		// Not authorized: retrying will not help.
		{"auth", kerr.TopicAuthorizationFailed, SignalStop, false, true, false},
		// A topic that does not exist (as franz-go fails it under
		// KafkaClientOpts), or was deleted: stop.
		{"unknown topic", fmt.Errorf("no partitions available after attempting to refresh metadata 1 times, last err: %w", kerr.UnknownTopicOrPartition), SignalStop, false, true, false},
		{"unknown topic id", kerr.UnknownTopicID, SignalStop, false, true, false},
		// The broker failed on its own: stop, but it counts.
		{"unknown server error", kerr.UnknownServerError, SignalStop, false, false, false},
		// The client is gone.
		{"client closed", kgo.ErrClientClosed, SignalStop, false, false, false},
		// Anything else: slow down and retry within budget.
		{"unknown", errors.New("boom"), SignalSlowDown, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := classifyKafka(tc.err)
			if c.signal != tc.signal || c.retriable != tc.retriable || c.ownFault != tc.ownFault || c.leaderMoved != tc.leaderMoved {
				t.Fatalf("classify(%v) = %v retriable %v own fault %v leader moved %v; want %v %v %v %v", tc.err, c.signal, c.retriable, c.ownFault, c.leaderMoved, tc.signal, tc.retriable, tc.ownFault, tc.leaderMoved)
			}
		})
	}
}
