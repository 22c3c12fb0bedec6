package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/replica"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// slowRead is the real channel, whose first read (Watch) starts only once
// open is closed: a replica whose read of the lease state is slow at
// start (a Kafka lease topic read from its start, a broker that answers
// late). The moment is what the broker cannot play on cue.
type slowRead struct {
	Channel
	open chan struct{}
}

func (s slowRead) Watch(ctx context.Context, f func(string, []byte), synced func()) error {
	select {
	case <-s.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Channel.Watch(ctx, f, synced)
}

// TestUnsyncedWritesNothing: a replica restarts and owns its shard again
// at once (Kafka's static membership), but has not read the lease state
// yet. Its engine has just begun (no rates: unlimited); were it to write
// the shard's record, that record would carry its unlimited decision
// (the former one is not known to hold in its place) and, being the
// newest, open the topic in every replica's leases. It writes nothing
// until it has read the channel; then it writes from its second Offer on,
// with the former decision in place of its own.
func TestUnsyncedWritesNothing(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_unsynced")
	var topic string
	for i := 0; topic == ""; i++ {
		if name := fmt.Sprintf("topic-%d", i); Of(name, 2) == 0 {
			topic = name
		}
	}
	mk := func(id string, c Channel, owned []int, own ...quota.Decision) *Exchange {
		eng := &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}}
		for _, d := range own {
			eng.own[d.Target] = d
		}
		x := NewExchange(ExchangeConfig{Channel: c, Engine: eng, ID: id, Expire: time.Minute, Interval: 50 * time.Millisecond})
		x.Add(&fixed{owned: owned})
		x.Start(context.Background())
		t.Cleanup(x.Close)
		return x
	}
	// o reads the shard's record as every replica does.
	o := mk("o", ch, []int{1})
	record := func(what string, f func(Record) bool, within time.Duration) (Record, bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if r, ok := o.Remote("c", 0); ok && f(r) {
				return r, true
			}
			if time.Now().After(deadline) {
				r, _ := o.Remote("c", 0)
				return r, false
			}
			time.Sleep(10 * time.Millisecond) // polling the channel
		}
	}
	// a owns shard 0 and limits its topic to 10/s.
	a := mk("a", ch, []int{0}, decided(topic, 10))
	for !a.Synced() || !o.Synced() {
		time.Sleep(10 * time.Millisecond) // the watches start
	}
	a.Offer("c", t0)
	a.Offer("c", t0.Add(time.Second))
	if r, ok := record("a's record", func(r Record) bool { return r.Owner == "a" && r.At.Equal(t0.Add(time.Second)) }, 10*time.Second); !ok {
		t.Fatalf("a's record not read within 10s: %+v", r)
	}
	// a restarts: its engine has no rates yet, its read of the channel is
	// slow; it owns shard 0 again.
	a.Close()
	open := make(chan struct{})
	tg := decided(topic, 0).Target
	a2 := mk("a", slowRead{ch, open}, []int{0},
		quota.Decision{Target: tg, Policy: "p", Rate: quota.Unlimited, At: t0.Add(2 * time.Second), Rule: quota.RuleRatesUnknown})
	for i := range 4 {
		a2.Offer("c", t0.Add(time.Duration(2+i)*time.Second))
	}
	if r, ok := record("a record written before the channel was read", func(r Record) bool { return r.At.After(t0.Add(time.Second)) }, 2*time.Second); ok {
		t.Errorf("shard 0 written before its writer read the channel: %+v (its decisions open the topic in every replica's leases)", r)
	}
	close(open)
	for !a2.Synced() {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 3 {
		a2.Offer("c", t0.Add(time.Duration(6+i)*time.Second))
	}
	r, ok := record("a2's record", func(r Record) bool { return r.At.Equal(t0.Add(8 * time.Second)) }, 10*time.Second)
	if !ok {
		t.Fatalf("shard 0 not written once its writer read the channel: %+v", r)
	}
	if len(r.Decisions) != 1 || r.Decisions[0].Rate != 10 {
		t.Errorf("shard 0 written after the read: %+v, want the former decision (10) in place of the one without rates", r.Decisions)
	}
}
