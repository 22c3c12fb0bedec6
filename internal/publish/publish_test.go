package publish

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctx(tb testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return c
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestMarker(t *testing.T) {
	cases := []struct {
		v    float64
		ours bool
	}{
		{Marked(1000), true},
		{Marked(0.3), true}, // 41 B/s, still marked
		{1000, false},       // an operator's round number
		{1024, false},
		{1000.5, false},
		{Marked(1000) + 0.5, false},
		{Marked(1e12), true},
	}
	for _, c := range cases {
		if IsOurs(c.v) != c.ours {
			t.Errorf("IsOurs(%v) = %v", c.v, !c.ours)
		}
	}
}

// TestClientQuotas: set, adjust, tolerate noise, clear, and never touch an
// operator's quota; on kfake (the real broker's throttling is proven in
// integration/).
func TestClientQuotas(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// An operator's own quota on "legacy".
	name := "legacy"
	if _, err := kadm.NewClient(cl).AlterClientQuotas(ctx(t), []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &name}}, Ops: []kadm.AlterClientQuotaOp{{Key: QuotaKey, Value: 5000}},
	}}); err != nil {
		t.Fatal(err)
	}
	q := NewClientQuotas(cl, discard)
	steps := []struct {
		name                    string
		want                    map[string]float64
		set, removed, conflicts int
		after                   map[string]float64 // expected producer_byte_rate by client-id (Marked applied)
	}{
		{"set two, refuse the operator's", map[string]float64{"a": 1000, "b": 2000, "legacy": 10},
			2, 0, 1, map[string]float64{"a": Marked(1000), "b": Marked(2000), "legacy": 5000}},
		// 1% is noise: no write.
		{"noise is no churn", map[string]float64{"a": 1010, "b": 2000}, 0, 0, 0,
			map[string]float64{"a": Marked(1000), "b": Marked(2000), "legacy": 5000}},
		{"change and clear", map[string]float64{"a": 500}, 1, 1, 0,
			map[string]float64{"a": Marked(500), "legacy": 5000}},
		{"pressure gone", nil, 0, 1, 0, map[string]float64{"legacy": 5000}},
	}
	for _, s := range steps {
		res, err := q.Apply(ctx(t), s.want)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if len(res.Set) != s.set || len(res.Removed) != s.removed || len(res.Conflicts) != s.conflicts {
			t.Fatalf("%s: %+v", s.name, res)
		}
		cur, err := q.Current(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(cur) != len(s.after) {
			t.Fatalf("%s: quotas %v, want %v", s.name, cur, s.after)
		}
		for id, v := range s.after {
			if cur[id] != v {
				t.Fatalf("%s: %s = %v, want %v", s.name, id, cur[id], v)
			}
		}
	}
}

// TestClientQuotasOwned: two deployments on one cluster, each owning the
// client-ids its policies list, never clear each other's quotas, neither
// while deciding nor when they stop (Apply(nil)); a daemon without Owns
// clears every marked quota, as before.
func TestClientQuotasOwned(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	owns := func(ids ...string) func(string) bool {
		return func(id string) bool { return slices.Contains(ids, id) }
	}
	a, b := NewClientQuotas(cl, discard), NewClientQuotas(cl, discard)
	a.Owns, b.Owns = owns("a1", "a2"), owns("b1")
	apply := func(q *ClientQuotas, want map[string]float64) Result {
		t.Helper()
		res, err := q.Apply(ctx(t), want)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	current := func() map[string]float64 {
		t.Helper()
		cur, err := a.Current(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	apply(a, map[string]float64{"a1": 1000, "a2": 2000})
	if res := apply(b, map[string]float64{"b1": 3000}); len(res.Removed) != 0 || !slices.Equal(res.Foreign, []string{"a1", "a2"}) {
		t.Fatalf("b deciding: %+v; want nothing removed, a1 and a2 foreign", res)
	}
	if res := apply(a, nil); !slices.Equal(res.Removed, []string{"a1", "a2"}) || !slices.Equal(res.Foreign, []string{"b1"}) {
		t.Fatalf("a stopping: %+v; want a1 and a2 removed, b1 foreign", res)
	}
	if cur := current(); len(cur) != 1 || cur["b1"] != Marked(3000) {
		t.Fatalf("after a stopped: %v, want b1's quota only", cur)
	}
	if res := apply(NewClientQuotas(cl, discard), nil); !slices.Equal(res.Removed, []string{"b1"}) {
		t.Fatalf("without Owns: %+v, want every marked quota removed", res)
	}
}

// newKV starts an embedded nats-server with JetStream and returns its
// JetStream context and a KV publisher on the default bucket; all stop at
// cleanup.
func newKV(t *testing.T) (jetstream.JetStream, *KV) {
	t.Helper()
	js := embedded.JetStreamTest(t)
	kv, err := NewKV(ctx(t), js, KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// TestKV: leases land under their keys as JSON, unchanged versions are not
// rewritten, vanished leases are deleted, and a restart adopts old keys.
func TestKV(t *testing.T) {
	js, kv := newKV(t)
	rate := 120.0
	sets := []quotaproto.LeaseSet{{Producer: "svc.a", Version: 1, Leases: []quotaproto.Lease{
		{Topic: "orders", Rate: &rate, Signal: quotaproto.SignalSlowDown, RetryAfterMs: 500, Version: 1},
		{Topic: "events", Signal: quotaproto.SignalOK, Version: 1},
	}}}
	if w, d, err := kv.Publish(ctx(t), sets); err != nil || w != 2 || d != 0 {
		t.Fatalf("first publish: %d %d %v", w, d, err)
	}
	bucket, _ := js.KeyValue(ctx(t), quotaproto.DefaultKVBucket)
	e, err := bucket.Get(ctx(t), quotaproto.KVKey("svc.a", "orders"))
	if err != nil {
		t.Fatal(err)
	}
	var got quotaproto.Lease
	if err := json.Unmarshal(e.Value(), &got); err != nil || *got.Rate != 120 || got.Signal != quotaproto.SignalSlowDown {
		t.Fatalf("stored %s (%v)", e.Value(), err)
	}
	if w, d, _ := kv.Publish(ctx(t), sets); w != 0 || d != 0 {
		t.Fatalf("unchanged publish wrote %d deleted %d", w, d)
	}
	// A restarted daemon adopts the keys and deletes what it no longer has.
	kv2, err := NewKV(ctx(t), js, KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sets[0].Leases = sets[0].Leases[:1]
	if w, d, err := kv2.Publish(ctx(t), sets); err != nil || w != 1 || d != 1 {
		t.Fatalf("after restart: wrote %d deleted %d %v", w, d, err)
	}
	if _, err := bucket.Get(ctx(t), quotaproto.KVKey("svc.a", "events")); err == nil {
		t.Fatal("vanished lease still in the bucket")
	}
}

// TestKVRefreshesSteadyLeaseExpiry: the daemon extends a lease that stays
// the same every cycle without a new version. The bucket's copy must
// follow once its expiry falls a refresh interval behind, or a producer
// reading leases from the bucket sees a lease the daemon still grants
// expire, and falls back to its safe quota (open by default) in the middle
// of an overload. Version-0 leases are not rewritten every cycle either.
func TestKVRefreshesSteadyLeaseExpiry(t *testing.T) {
	js, kv := newKV(t)
	bucket, _ := js.KeyValue(ctx(t), quotaproto.DefaultKVBucket)
	stored := func(topic string) time.Time {
		t.Helper()
		e, err := bucket.Get(ctx(t), quotaproto.KVKey("svc.a", topic))
		if err != nil {
			t.Fatal(err)
		}
		var l quotaproto.Lease
		if err := json.Unmarshal(e.Value(), &l); err != nil {
			t.Fatal(err)
		}
		return l.ExpiresAt
	}
	// A 10 s lifetime refreshed every ~3.3 s, one cycle per second.
	const lifetime, refresh = 10 * time.Second, 3300 * time.Millisecond
	rate := 0.0
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	writes := 0
	for cycle := range 30 {
		now := t0.Add(time.Duration(cycle) * time.Second)
		sets := []quotaproto.LeaseSet{{Producer: "svc.a", Version: 7, RefreshAfterMs: refresh.Milliseconds(), Leases: []quotaproto.Lease{
			{Topic: "orders", Rate: &rate, Signal: quotaproto.SignalSlowDown, Version: 7, ExpiresAt: now.Add(lifetime)},
			{Topic: "events", Signal: quotaproto.SignalOK, Version: 0, ExpiresAt: now.Add(lifetime)},
		}}}
		w, _, err := kv.Publish(ctx(t), sets)
		if err != nil {
			t.Fatal(err)
		}
		writes += w
		for _, topic := range []string{"orders", "events"} {
			if left := stored(topic).Sub(now); left < lifetime-refresh {
				t.Fatalf("cycle %d: the bucket's %s lease has %v left, want at least %v", cycle, topic, left, lifetime-refresh)
			}
		}
	}
	// One write per key per refresh interval, not one per cycle.
	if max := 2 * (30/3 + 1); writes > max {
		t.Fatalf("%d writes in 30 cycles, want at most %d", writes, max)
	}
}
