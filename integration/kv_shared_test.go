package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestKVSharedBucket: two deployments (ha, different ha.name) publish
// their producers' leases to the one default quota KV bucket. The second
// one to start neither deletes the first one's keys nor locks its leader
// out of the bucket: over two refresh intervals every key stays present,
// names its own deployment, and both leaders keep extending their leases'
// expiry. Before, the second deleted the first one's keys at its first
// publish, and the two leaders took turns on the bucket's one fence key.
func TestKVSharedBucket(t *testing.T) {
	s := embedded.NATSTest(t)
	js := embedded.Connect(t, s)
	deployment := func(name string) config.Config {
		cfg := config.Config{NATS: []nats.Config{{Cluster: "n", URLs: []string{s.ClientURL()}}}}
		cfg.Quota.NATSKV.Cluster = "n"
		cfg.HA = config.HA{Enabled: true, Name: name, SessionTimeout: 6 * time.Second}
		return cfg
	}
	type stored struct {
		quotaproto.Lease
		Deployment string `json:"deployment"`
	}
	read := func(producer string) (stored, error) {
		kv, err := js.KeyValue(ctxT(t, 5*time.Second), quotaproto.DefaultKVBucket)
		if err != nil {
			return stored{}, err
		}
		e, err := kv.Get(ctxT(t, 5*time.Second), quotaproto.KVKey(producer, "orders"))
		if err != nil {
			return stored{}, err
		}
		var l stored
		err = json.Unmarshal(e.Value(), &l)
		return l, err
	}
	present := func(producer, name string) {
		t.Helper()
		poll(t, 30*time.Second, func() (bool, string) {
			l, err := read(producer)
			return err == nil && l.Deployment == name, fmt.Sprintf("%s.orders: %+v, %v", producer, l, err)
		})
	}
	names := map[string]string{"pa": unique("kva"), "pb": unique("kvb")}
	a := startReplica(t, deployment(names["pa"]), "a0")
	waitOneLeader(t, []*haReplica{a}, "n", 30*time.Second)
	keepReporting(t, "pa", func() []string { return []string{"orders"} }, func() string { return a.base })
	present("pa", names["pa"])
	b := startReplica(t, deployment(names["pb"]), "b0")
	waitOneLeader(t, []*haReplica{b}, "n", 30*time.Second)
	keepReporting(t, "pb", func() []string { return []string{"orders"} }, func() string { return b.base })
	present("pb", names["pb"])

	first := map[string]time.Time{}
	for p := range names {
		l, err := read(p)
		if err != nil {
			t.Fatal(err)
		}
		first[p] = l.ExpiresAt
	}
	// The leases live 2 x 6 s + 4 intervals and are refreshed at a third
	// of that (4.3 s): watch two refreshes.
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		for p, name := range names {
			l, err := read(p)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("%s.orders, %s's, vanished from the shared bucket", p, name)
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Deployment != name {
				t.Fatalf("%s.orders names deployment %q, want %q", p, l.Deployment, name)
			}
		}
		time.Sleep(50 * time.Millisecond) // polling the bucket
	}
	for p, name := range names {
		l, _ := read(p)
		if !l.ExpiresAt.After(first[p]) {
			t.Errorf("%s's leader did not extend %s.orders in 10 s (expiry %v, was %v): it no longer writes the bucket", name, p, l.ExpiresAt, first[p])
		}
	}
}
