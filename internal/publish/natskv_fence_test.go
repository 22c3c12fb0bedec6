package publish

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestKVFenced: under a leader's epoch, the KV's writes are fenced by the
// broker: once a replica of a higher epoch published, the deposed one's
// puts and deletes are refused and the bucket keeps the new leader's
// leases; adopting the bucket never takes the fence key for a lease.
func TestKVFenced(t *testing.T) {
	js, old := newKV(t)
	var next *KV // started once the first leader published: it adopts its keys
	nextKV := func() *KV {
		if next == nil {
			var err error
			if next, err = NewKV(ctx(t), js, KVConfig{}); err != nil {
				t.Fatal(err)
			}
		}
		return next
	}
	oldKV := func() *KV { return old }
	set := func(version uint64, topics ...string) []quotaproto.LeaseSet {
		s := quotaproto.LeaseSet{Producer: "svc", Version: version}
		for _, tp := range topics {
			s.Leases = append(s.Leases, quotaproto.Lease{Topic: tp, Signal: quotaproto.SignalOK, Version: version})
		}
		return []quotaproto.LeaseSet{s}
	}
	bucket, err := js.KeyValue(ctx(t), quotaproto.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	version := func(topic string) uint64 {
		e, err := bucket.Get(ctx(t), quotaproto.KVKey("svc", topic))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		var l quotaproto.Lease
		if err := json.Unmarshal(e.Value(), &l); err != nil {
			t.Fatal(err)
		}
		return l.Version
	}
	steps := []struct {
		name   string
		kv     func() *KV
		epoch  int64
		sets   []quotaproto.LeaseSet
		fenced bool
		// want is each topic's version in the bucket after the step (0:
		// no key).
		want map[string]uint64
	}{
		{"the leader of epoch 3 publishes", oldKV, 3, set(1, "orders", "events"), false, map[string]uint64{"orders": 1, "events": 1}},
		{"the leader of epoch 8 takes over, drops events", nextKV, 8, set(5, "orders"), false, map[string]uint64{"orders": 5, "events": 0}},
		{"the deposed one, resumed, is refused", oldKV, 3, set(2, "orders", "events"), true, map[string]uint64{"orders": 5, "events": 0}},
		{"the leader goes on", nextKV, 8, set(6, "orders"), false, map[string]uint64{"orders": 6, "events": 0}},
	}
	for _, st := range steps {
		_, _, err := st.kv().Publish(leader.WithEpoch(ctx(t), st.epoch), st.sets)
		if errors.Is(err, leader.ErrFenced) != st.fenced || !st.fenced && err != nil {
			t.Fatalf("%s: %v, want fenced %v", st.name, err, st.fenced)
		}
		for topic, want := range st.want {
			if got := version(topic); got != want {
				t.Errorf("%s: %s at version %d, want %d", st.name, topic, got, want)
			}
		}
	}
	// A replica adopting the bucket leaves the fence key alone.
	again, err := NewKV(ctx(t), js, KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := again.Publish(leader.WithEpoch(ctx(t), 9), set(7, "orders")); err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.Get(ctx(t), leader.DeploymentFenceKey(DefaultDeployment)); err != nil {
		t.Errorf("fence key after an adopting publish: %v", err)
	}
}
