package consumerclient

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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
	if got := r.s.count(outcomeFailed); got == 0 {
		t.Error("the replica that is down counted no failure")
	}
}

// TestReportsPastAHungReplica: a replica that takes the connection and
// never answers (a pod gone whose address still routes) holds back only
// its own reports: the others keep getting one a tick, and the hung one
// takes a single request at a time. Before, every round waited for every
// replica, so the healthy replica got one report per Timeout (10 s here)
// and the leader's consumer source fell back to commits.
func TestReportsPastAHungReplica(t *testing.T) {
	release := make(chan struct{})
	var hungRequests atomic.Int64
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hungRequests.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	var healthyReports atomic.Int64
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		healthyReports.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer healthy.Close()
	_, cons := newJetStream(t, "ORDERS", "orders.new", "billing", 2)
	// "http://x/" and "http://x" are one replica: it gets each report once.
	r, err := NewNATSReporter(Config{URL: healthy.URL + "/", URLs: []string{hung.URL, healthy.URL},
		Member: "a", Interval: 20 * time.Millisecond, Timeout: MaxTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := len(r.s.endpoints); n != 2 {
		t.Fatalf("%d endpoints for two replicas, one written with a trailing slash", n)
	}
	for _, m := range fetchN(t, cons, 2) {
		r.Received(m)
	}
	waitFor(t, "ten reports at the healthy replica while the hung one holds its first", func() bool {
		return healthyReports.Load() >= 10
	})
	if n := hungRequests.Load(); n != 1 {
		t.Errorf("the hung replica got %d requests at once, want 1", n)
	}
}
