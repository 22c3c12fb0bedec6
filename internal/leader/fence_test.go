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
