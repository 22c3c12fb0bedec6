package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
)

// TestFence: a leader's write context ends with its lease and carries its
// epoch; a follower gets none; a daemon without replicas writes unbounded.
func TestFence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	leading := NewNATS(nil, "", Config{Session: 10 * time.Second})
	leading.hold(t0, 7, 8*time.Second)
	following := NewNATS(nil, "", Config{Session: 10 * time.Second})
	following.follow(t0)
	cases := []struct {
		name     string
		e        Elector
		at       time.Duration
		ok       bool
		deadline time.Time // zero: none
		epoch    int64     // -1: none
	}{
		{"leader: bounded by its lease, with its epoch", leading, time.Second, true, t0.Add(8 * time.Second), 7},
		{"leader past its lease (resumed from a pause)", leading, 9 * time.Second, false, time.Time{}, -1},
		{"follower", following, 0, false, time.Time{}, -1},
		{"no replicas", Single{Name: "c"}, 0, true, time.Time{}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel, ok := Fence(context.Background(), c.e, t0.Add(c.at))
			defer cancel()
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			d, has := ctx.Deadline()
			if has != !c.deadline.IsZero() || has && !d.Equal(c.deadline) {
				t.Errorf("deadline = %v (%v), want %v", d, has, c.deadline)
			}
			epoch, has := EpochOf(ctx)
			if has != (c.epoch >= 0) || has && epoch != c.epoch {
				t.Errorf("epoch = %d (%v), want %d", epoch, has, c.epoch)
			}
		})
	}
	// The lease's end is the context's: a write that would start after it
	// is refused with ErrFenced as the cause.
	leading.hold(time.Now(), 7, 50*time.Millisecond)
	ctx, cancel, ok := Fence(context.Background(), leading, time.Now())
	defer cancel()
	if !ok {
		t.Fatal("a fresh lease does not lead")
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the write context outlived the lease by 10s")
	}
	if !errors.Is(context.Cause(ctx), ErrFenced) {
		t.Errorf("cause %v, want ErrFenced", context.Cause(ctx))
	}
}

// TestKVFence: on the embedded nats-server, the broker refuses the writes
// of a leader whose epoch was superseded, however late they come (a
// leader resumed from SIGSTOP), and a lower epoch cannot take the bucket
// back.
func TestKVFence(t *testing.T) {
	js := embedded.JetStreamTest(t)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fenced"})
	if err != nil {
		t.Fatal(err)
	}
	old, next := NewKVFence(js, kv), NewKVFence(js, kv)
	value := func() string {
		e, err := kv.Get(ctx, "p.orders")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return "<deleted>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}
	steps := []struct {
		name   string
		write  func() error
		fenced bool
		want   string // the key's value after the step
	}{
		{"the first leader (epoch 5) takes the bucket and writes",
			func() error { _, err := old.Put(ctx, 5, "p.orders", []byte("a")); return err }, false, "a"},
		{"it writes again under the same take",
			func() error { _, err := old.Put(ctx, 5, "p.orders", []byte("b")); return err }, false, "b"},
		{"the next leader (epoch 9) takes it over",
			func() error { _, err := next.Put(ctx, 9, "p.orders", []byte("c")); return err }, false, "c"},
		{"the old leader, resumed, is refused by the broker",
			func() error { _, err := old.Put(ctx, 5, "p.orders", []byte("stale")); return err }, true, "c"},
		{"its delete too",
			func() error { return old.Delete(ctx, 5, "p.orders") }, true, "c"},
		{"and it cannot take the bucket back with its lower epoch",
			func() error { _, err := old.Put(ctx, 5, "p.orders", []byte("stale")); return err }, true, "c"},
		{"the leader's own delete lands",
			func() error { return next.Delete(ctx, 9, "p.orders") }, false, "<deleted>"},
		{"a later leader (epoch 12, once the old one) takes over",
			func() error { _, err := old.Put(ctx, 12, "p.orders", []byte("d")); return err }, false, "d"},
		{"and fences epoch 9 in turn",
			func() error { _, err := next.Put(ctx, 9, "p.orders", []byte("stale")); return err }, true, "d"},
	}
	for _, st := range steps {
		err := st.write()
		if st.fenced != errors.Is(err, ErrFenced) || !st.fenced && err != nil {
			t.Fatalf("%s: err %v, want fenced %v", st.name, err, st.fenced)
		}
		if got := value(); got != st.want {
			t.Fatalf("%s: value %q, want %q", st.name, got, st.want)
		}
	}
}

// TestDeploymentKVFence: deployments sharing a bucket fence on their own
// keys: the leaders of two elections, whose epochs are unrelated, never
// refuse each other, and each is fenced by its own next leader. The key
// earlier versions took (FenceKey) is not created where it is absent;
// where it is, every take rewrites it with the highest epoch seen, so an
// earlier version's leader is refused from then on and cannot take it
// back.
func TestDeploymentKVFence(t *testing.T) {
	js := embedded.JetStreamTest(t)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	a, aNext, b := NewDeploymentKVFence(js, kv, "a"), NewDeploymentKVFence(js, kv, "a"), NewDeploymentKVFence(js, kv, "b")
	old := NewKVFence(js, kv)
	const high, low = 1<<40 + 50, 1<<40 + 2
	put := func(f *KVFence, epoch int64, key string) error {
		_, err := f.Put(ctx, epoch, key, []byte("v"))
		return err
	}
	legacy := func() string {
		e, err := kv.Get(ctx, FenceKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return "<none>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}
	steps := []struct {
		name   string
		write  func() error
		fenced bool
		legacy string // FenceKey's value after the step
	}{
		{"a's leader writes", func() error { return put(a, high, "pa.t") }, false, "<none>"},
		{"b's leader, of a lower epoch, writes too", func() error { return put(b, low, "pb.t") }, false, "<none>"},
		{"a's next leader takes a's fence", func() error { return put(aNext, high+1, "pa.t") }, false, "<none>"},
		{"a's deposed leader is refused", func() error { return put(a, high, "pa.t") }, true, "<none>"},
		{"b's leader is not", func() error { return put(b, low, "pb.t") }, false, "<none>"},
		{"an earlier version's leader takes FenceKey", func() error { return put(old, 9, "po.t") }, false, "9"},
		{"b's next leader supersedes it", func() error { return put(NewDeploymentKVFence(js, kv, "b"), low+1, "pb.t") }, false, "1099511627779"},
		{"the earlier version's leader is refused", func() error { return put(old, 9, "po.t") }, true, "1099511627779"},
		{"and cannot take FenceKey back", func() error { return put(NewKVFence(js, kv), 9, "po.t") }, true, "1099511627779"},
		{"a takes over again: FenceKey keeps the highest epoch", func() error { return put(NewDeploymentKVFence(js, kv, "a"), high+2, "pa.t") }, false, "1099511627828"},
		{"a lower epoch's take does not lower it", func() error { return put(NewDeploymentKVFence(js, kv, "b"), low+2, "pb.t") }, false, "1099511627828"},
	}
	for _, st := range steps {
		err := st.write()
		if st.fenced != errors.Is(err, ErrFenced) || !st.fenced && err != nil {
			t.Fatalf("%s: err %v, want fenced %v", st.name, err, st.fenced)
		}
		if got := legacy(); got != st.legacy {
			t.Fatalf("%s: %s holds %q, want %q", st.name, FenceKey, got, st.legacy)
		}
	}
}
