package replica

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// TestNATSChannelFenced: on the lease state's KV bucket, a leader's
// writes (their context carries its epoch) are refused by the server
// once a replica of a higher epoch wrote, while reports (no epoch) from
// any replica still land.
func TestNATSChannelFenced(t *testing.T) {
	js := embedded.JetStreamTest(t)
	bucket := NATSBucket("fenced")
	old, next := NewNATS(js, bucket), NewNATS(js, bucket)
	ctx := context.Background()
	steps := []struct {
		name   string
		write  func() error
		fenced bool
	}{
		{"the leader of epoch 4 writes a set", func() error { return old.Put(leader.WithEpoch(ctx, 4), key(kindSet, "p"), []byte("a")) }, false},
		{"the leader of epoch 7 writes it", func() error { return next.Put(leader.WithEpoch(ctx, 7), key(kindSet, "p"), []byte("b")) }, false},
		{"the deposed one's set is refused", func() error { return old.Put(leader.WithEpoch(ctx, 4), key(kindSet, "p"), []byte("stale")) }, true},
		{"and its delete", func() error { return old.Delete(leader.WithEpoch(ctx, 4), key(kindSet, "p")) }, true},
		{"its reports still land", func() error { return old.Put(ctx, key(kindReport, "p"), []byte("r")) }, false},
	}
	for _, st := range steps {
		if err := st.write(); errors.Is(err, leader.ErrFenced) != st.fenced || !st.fenced && err != nil {
			t.Fatalf("%s: %v, want fenced %v", st.name, err, st.fenced)
		}
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{key(kindSet, "p"): "b", key(kindReport, "p"): "r"} {
		if e, err := kv.Get(ctx, k); err != nil {
			t.Errorf("%s: %v, want %q", k, err, want)
		} else if string(e.Value()) != want {
			t.Errorf("%s = %q, want %q", k, e.Value(), want)
		}
	}
	if _, err := kv.Get(ctx, leader.FenceKey); errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("no fence key in the bucket: the leaders did not take it")
	}
}

// TestFenceKeysSkipped: the lease state's bucket may hold fence keys, the
// one its leaders take (leader.FenceKey) and, were a bucket shared, a
// deployment's (leader.DeploymentFenceKey, whose name may have dots):
// none is read as a set, a report or a decisions record.
func TestFenceKeysSkipped(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := quotaserver.NewHub()
	t.Cleanup(hub.Close)
	r := New(Config{Elector: &role{}, Hub: hub, Lifetime: time.Minute, Silence: time.Second, Log: log})
	eng, err := engine.New(engine.Config{Hub: r.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetEngine(eng)
	set, err := json.Marshal(setRecord{Set: quotaproto.LeaseSet{Producer: "s", Version: 9}, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{leader.FenceKey, leader.DeploymentFenceKey("prod"), leader.DeploymentFenceKey("eu.s"), leader.DeploymentFenceKey("s.s")} {
		r.apply(k, set)
		r.apply(k, []byte("7"))
		r.apply(k, nil)
	}
	if _, _, ok := hub.Current("s"); ok || len(r.setKeys) > 0 || r.maxVersion > 0 || !r.lastLeader.IsZero() {
		t.Errorf("a fence key was read as lease state: served %v, set keys %v, max version %d", ok, r.setKeys, r.maxVersion)
	}
}
