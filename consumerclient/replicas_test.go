package consumerclient

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
)

// TestReportsReachEveryReplica: with the URLs of every replica (ha), each
// report reaches each of them, so whichever leads (only its decisions
// count) reads the consumer's position, and a replica that is down
// delays no other. Before, the reporter had one URL: with it pointed at a
// follower (a Service in front of the replicas), the leader read the ack
// floor only ("source" commits on the leader's /v1/lag, "consumer" on the
// follower's), found by hand on a two-replica daemon on nats-server.
func TestReportsReachEveryReplica(t *testing.T) {
	s, cons := newJetStream(t, "ORDERS", "orders.new", "billing", 4)
	var ds []*testDaemon
	for range 2 {
		obs, err := nats.New(nats.Config{Cluster: "main", URLs: []string{s.ClientURL()}, RequestTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		ds = append(ds, newTestDaemon(t, quotaserver.Auth{}, 500*time.Millisecond, lag.KindNATS, obs))
	}
	dead := httptest.NewServer(nil)
	dead.Close() // a replica that is down
	r, err := NewNATSReporter(Config{URL: ds[0].URL, URLs: []string{dead.URL, ds[1].URL, ds[0].URL},
		Cluster: "main", Member: "a", Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ms := fetchN(t, cons, 4)
	for _, m := range ms {
		r.Received(m)
	}
	r.Done(ms[0])
	target := lag.Target{Kind: lag.KindNATS, Cluster: "main", Topic: "ORDERS", Group: "billing"}
	for i, d := range ds {
		d.waitState(t, target, "replica "+string(rune('0'+i))+" reads the report", func(st lag.State) bool {
			return st.Source == lag.SourceConsumer && len(st.Partitions) == 1 && st.Partitions[0].Reported.Position == 2
		})
	}
	if got := r.s.failed.Load(); got == 0 {
		t.Error("the replica that is down counted no failure")
	}
}
