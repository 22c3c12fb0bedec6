package shard

import (
	"context"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
)

// TestNATSSessionsApart: replicas of one deployment with different
// sessions (a rolling change of ha.sessionTimeout) share the shards; a
// member's key lives for its own session, whoever started last, so no
// shard is ever owned by two. (Before the keys carried their own time to
// live, the bucket's was the last starter's, 600 ms, and the 3 s member's
// key expired between its renewals: the other took every shard.)
func TestNATSSessionsApart(t *testing.T) {
	s := embedded.NATSTest(t)
	const count = 4
	long := run(t, NewNATS(embedded.Connect(t, s), "", Config{Cluster: "n", ID: "long", Name: "apart", Count: count, Session: 3 * time.Second, Every: time.Second}, nil))
	split(t, []*member{long}, []string{"long"}, count, 12*time.Second)
	short := run(t, NewNATS(embedded.Connect(t, s), "", Config{Cluster: "n", ID: "short", Name: "apart", Count: count, Session: 600 * time.Millisecond, Every: 200 * time.Millisecond}, nil))
	split(t, []*member{long, short}, []string{"long", "short"}, count, 12*time.Second)
	start := time.Now()
	for time.Since(start) < 6*time.Second {
		now := time.Now()
		a, _ := long.a.Owned(now)
		b, _ := short.a.Owned(now)
		for _, s := range a {
			if slices.Contains(b, s) {
				t.Fatalf("shard %d owned by both members %v into the watch (long %v, short %v)", s, time.Since(start).Round(time.Millisecond), a, b)
			}
		}
		time.Sleep(10 * time.Millisecond) // polling the assigners
	}
}

// TestNATSLegacyMembers: while the shared bucket of earlier versions
// exists, a replica puts its key there too and counts the members listed
// there, so old and new replicas compute the same owners during a rolling
// upgrade.
func TestNATSLegacyMembers(t *testing.T) {
	js := embedded.JetStreamTest(t)
	ctx := context.Background()
	const count = 6
	old, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: LegacyBucket, History: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "up.6."
	if _, err := old.Put(ctx, prefix+hex.EncodeToString([]byte("old0")), []byte("old0")); err != nil {
		t.Fatal(err)
	}
	var ms []*member
	for _, id := range []string{"new0", "new1"} {
		ms = append(ms, run(t, NewNATS(js, "", Config{Cluster: "n", ID: id, Name: "up", Count: count, Session: 2 * time.Second, Every: 100 * time.Millisecond, LegacyBucket: LegacyBucket}, nil)))
	}
	want := Rendezvous([]string{"old0", "new0", "new1"}, count)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if slices.Equal(ms[0].a.Owners(), want) && slices.Equal(ms[1].a.Owners(), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("owners %v and %v, want %v (the old member counted)", ms[0].a.Owners(), ms[1].a.Owners(), want)
		}
		time.Sleep(20 * time.Millisecond) // polling the assigners
	}
	lister, err := old.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, id := range []string{"new0", "new1"} {
		if !slices.Contains(keys, prefix+hex.EncodeToString([]byte(id))) {
			t.Errorf("%s has no key in the legacy bucket (keys %v): the old replicas would not count it", id, keys)
		}
	}
	ms[0].a.Release(ctx)
	if _, err := old.Get(ctx, prefix+hex.EncodeToString([]byte("new0"))); err == nil {
		t.Errorf("new0's legacy key is still there after its release")
	}
	// Nothing is left of new0 in its own bucket (no age limit there):
	// only new1's key.
	deadline = time.Now().Add(5 * time.Second)
	for {
		st, err := js.Stream(ctx, "KV_"+Bucket("up"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages in the bucket 5s after new0's release, want new1's only", info.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond) // polling the stream
	}
}
