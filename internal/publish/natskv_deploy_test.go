package publish

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// kvBucket reads the default quota bucket's leases as the SDK does (key
// <producer>.<topic>, a JSON lease) with the deployment that wrote each.
type kvBucket struct {
	t  *testing.T
	kv jetstream.KeyValue
}

func openBucket(t *testing.T, js jetstream.JetStream) kvBucket {
	t.Helper()
	kv, err := js.KeyValue(ctx(t), quotaproto.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kvBucket{t, kv}
}

// get returns the lease under (producer, topic), the deployment that
// wrote it, and false when there is none.
func (b kvBucket) get(producer, topic string) (kvLease, bool) {
	b.t.Helper()
	e, err := b.kv.Get(ctx(b.t), quotaproto.KVKey(producer, topic))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return kvLease{}, false
	}
	if err != nil {
		b.t.Fatal(err)
	}
	var l kvLease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		b.t.Fatalf("%s: %v", e.Value(), err)
	}
	return l, true
}

// leases returns one set per producer, each with a lease per topic at
// version, expiring an hour from now.
func leases(version uint64, producer string, topics ...string) quotaproto.LeaseSet {
	s := quotaproto.LeaseSet{Producer: producer, Version: version}
	for _, tp := range topics {
		s.Leases = append(s.Leases, quotaproto.Lease{Topic: tp, Signal: quotaproto.SignalOK, Version: version,
			ExpiresAt: time.Now().Add(time.Hour)})
	}
	return s
}

// TestKVDeployments: two deployments publish to one quota KV bucket. Each
// deletes only its own keys, at its first publish after a start as at
// every later one; a key another deployment leases is left alone (and
// named once in the log) until that lease expires; a key an earlier
// version wrote (no deployment named) is adopted; a key another
// deployment wrote last is not deleted. On a bucket shared as before, the
// second deployment to start deleted the first one's keys.
func TestKVDeployments(t *testing.T) {
	js := embedded.JetStreamTest(t)
	var logs testutil.Buffer
	newKV := func(name string) *KV {
		kv, err := NewKV(ctx(t), js, KVConfig{Deployment: name, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	publish := func(kv *KV, sets ...quotaproto.LeaseSet) (int, int) {
		t.Helper()
		w, d, err := kv.Publish(ctx(t), sets)
		if err != nil {
			t.Fatal(err)
		}
		return w, d
	}
	bucket := func() kvBucket { return openBucket(t, js) }
	a := newKV("a")
	publish(a, leases(1, "pa", "orders", "events"), leases(1, "shared", "orders"))
	b := newKV("b") // started after a published: it finds a's keys
	if w, d := publish(b, leases(2, "pb", "orders"), leases(2, "shared", "orders")); w != 1 || d != 0 {
		t.Fatalf("b's first publish wrote %d and deleted %d, want 1 and 0 (shared.orders is a's)", w, d)
	}
	for _, k := range [][2]string{{"pa", "orders"}, {"pa", "events"}, {"shared", "orders"}} {
		if l, ok := bucket().get(k[0], k[1]); !ok || l.Deployment != "a" || l.Version != 1 {
			t.Errorf("a's %s.%s after b's first publish: %+v (present %v), want a's version 1", k[0], k[1], l, ok)
		}
	}
	if l, ok := bucket().get("pb", "orders"); !ok || l.Deployment != "b" {
		t.Errorf("b's pb.orders: %+v (present %v)", l, ok)
	}
	publish(b, leases(3, "pb", "orders"), leases(3, "shared", "orders"))
	if n := strings.Count(logs.String(), "another deployment"); n != 1 {
		t.Errorf("the conflict on shared.orders logged %d times in two publishes, want once", n)
	}
	// a drops events and restarts: it deletes its own key, never b's.
	a = newKV("a")
	if w, d := publish(a, leases(4, "pa", "orders"), leases(4, "shared", "orders")); d != 1 || w != 2 {
		t.Fatalf("a after a restart wrote %d and deleted %d, want 2 and 1", w, d)
	}
	if _, ok := bucket().get("pa", "events"); ok {
		t.Error("a's dropped lease pa.events is still in the bucket")
	}
	if l, ok := bucket().get("pb", "orders"); !ok || l.Deployment != "b" || l.Version != 3 {
		t.Errorf("b's pb.orders after a's restart: %+v (present %v)", l, ok)
	}
	// b with no lease left deletes only its own.
	if _, d := publish(newKV("b")); d != 1 {
		t.Fatalf("b with no leases deleted %d keys, want 1 (pb.orders)", d)
	}
	if _, ok := bucket().get("pa", "orders"); !ok {
		t.Error("a's pa.orders was deleted by b")
	}
	// Once a's lease on shared.orders expired (a stopped refreshing it),
	// b may take the key over.
	b = newKV("b")
	b.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	publish(b, leases(5, "shared", "orders"))
	if l, _ := bucket().get("shared", "orders"); l.Deployment != "b" || l.Version != 5 {
		t.Errorf("shared.orders past a's expiry: %+v, want b's version 5", l)
	}
	// a and b create one key at the same moment (played here by b's
	// write landing right after a's): a, which lost, does not delete b's
	// lease when it drops its own.
	publish(a, leases(6, "pa", "orders"), leases(6, "race", "orders"))
	raced, _ := json.Marshal(kvLease{Lease: leases(6, "race", "orders").Leases[0], Deployment: "b"})
	if _, err := bucket().kv.Put(ctx(t), quotaproto.KVKey("race", "orders"), raced); err != nil {
		t.Fatal(err)
	}
	if _, d := publish(a, leases(7, "pa", "orders")); d != 0 {
		t.Errorf("a dropping race.orders, which b wrote last, deleted %d keys, want 0", d)
	}
	if l, ok := bucket().get("race", "orders"); !ok || l.Deployment != "b" {
		t.Errorf("race.orders after a dropped it: %+v (present %v), want b's", l, ok)
	}
}

// TestKVUpgrade: a leader of the version before deployments shared the
// bucket wrote leases that name no deployment, under the bucket's single
// fence key. The new leader of the same deployment adopts those keys
// (deleting those it does not lease), names itself in the ones it writes,
// and fences the old leader out: the server refuses its later writes, and
// it cannot take the old fence key back.
func TestKVUpgrade(t *testing.T) {
	js := embedded.JetStreamTest(t)
	kv, err := js.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: quotaproto.DefaultKVBucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	const oldEpoch, newEpoch = 7, 1<<40 + 3
	old := leader.NewKVFence(js, kv) // the earlier version's fence: the key lagbridge-fence
	oldPut := func(topic string, version uint64) error {
		b, _ := json.Marshal(leases(version, "svc", topic).Leases[0])
		_, err := old.Put(ctx(t), oldEpoch, quotaproto.KVKey("svc", topic), b)
		return err
	}
	for _, tp := range []string{"orders", "events"} {
		if err := oldPut(tp, 1); err != nil {
			t.Fatal(err)
		}
	}
	next, err := NewKV(ctx(t), js, KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, d, err := next.Publish(leader.WithEpoch(ctx(t), newEpoch), []quotaproto.LeaseSet{leases(2, "svc", "orders")})
	if err != nil || w != 1 || d != 1 {
		t.Fatalf("the new leader's first publish: wrote %d, deleted %d, %v; want 1, 1", w, d, err)
	}
	if err := oldPut("orders", 3); !errors.Is(err, leader.ErrFenced) {
		t.Errorf("the old leader's write after the new one took the bucket: %v, want ErrFenced", err)
	}
	if err := leader.NewKVFence(js, kv).Delete(ctx(t), oldEpoch, quotaproto.KVKey("svc", "orders")); !errors.Is(err, leader.ErrFenced) {
		t.Errorf("the old leader's take of the old fence key again: %v, want ErrFenced", err)
	}
	b := openBucket(t, js)
	if l, ok := b.get("svc", "orders"); !ok || l.Version != 2 || l.Deployment != DefaultDeployment {
		t.Errorf("svc.orders: %+v (present %v), want version 2 of %s", l, ok, DefaultDeployment)
	}
	if _, ok := b.get("svc", "events"); ok {
		t.Error("svc.events, adopted from the old version and no longer leased, was not deleted")
	}
}

// TestKVDeploymentsFenced: with ha, the leaders of two deployments on one
// bucket each take their own fence key, so neither refuses the other's
// writes (before, the lower epoch was fenced out by the higher), while a
// deposed leader of either deployment is still refused.
func TestKVDeploymentsFenced(t *testing.T) {
	js := embedded.JetStreamTest(t)
	newKV := func(name string) *KV {
		kv, err := NewKV(ctx(t), js, KVConfig{Deployment: name})
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	a, b := newKV("a"), newKV("b")
	aNext := newKV("a")
	const high, low = 1<<40 + 90, 1<<40 + 3 // the epochs of two unrelated elections
	steps := []struct {
		name   string
		kv     *KV
		epoch  int64
		set    quotaproto.LeaseSet
		fenced bool
	}{
		{"a's leader publishes", a, high, leases(1, "pa", "orders"), false},
		{"b's leader, with a lower epoch, publishes", b, low, leases(1, "pb", "orders"), false},
		{"a's leader publishes again", a, high, leases(2, "pa", "orders"), false},
		{"a's next leader takes over", aNext, high + 1, leases(3, "pa", "orders"), false},
		{"a's deposed leader is refused", a, high, leases(4, "pa", "orders"), true},
		{"b's leader goes on", b, low, leases(2, "pb", "orders"), false},
	}
	for _, st := range steps {
		_, _, err := st.kv.Publish(leader.WithEpoch(ctx(t), st.epoch), []quotaproto.LeaseSet{st.set})
		if errors.Is(err, leader.ErrFenced) != st.fenced || !st.fenced && err != nil {
			t.Fatalf("%s: %v, want fenced %v", st.name, err, st.fenced)
		}
	}
	bk := openBucket(t, js)
	if l, _ := bk.get("pa", "orders"); l.Version != 3 {
		t.Errorf("pa.orders at version %d, want a's next leader's 3", l.Version)
	}
	if l, _ := bk.get("pb", "orders"); l.Version != 2 {
		t.Errorf("pb.orders at version %d, want 2", l.Version)
	}
}
