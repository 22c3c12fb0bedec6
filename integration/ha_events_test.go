package integration

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/quota"
)

// TestHAFollowerDecisionLog: two replicas observe one stream (the embedded
// nats-server) or topic (kfake) whose consumer slows; both step it, but only the
// leader's decisions are served. The leader's /v1/events and its log at
// INFO have the decisions; the follower's events are all marked notServed
// and its log has them at DEBUG only (served=false), unless it stood in for
// a silent leader (it then served its own: those may be served). Before
// the mark (session 31), the follower logged every decision it never
// served at INFO and listed it as an event like the leader's.
func TestHAFollowerDecisionLog(t *testing.T) {
	b := startSlowingDemo(t)

	for _, kind := range []string{"nats", "kafka"} {
		t.Run(kind, func(t *testing.T) { followerDecisionLog(t, b, kind) })
	}
}

// followerDecisionLog is TestHAFollowerDecisionLog on one of the demo's
// brokers: "nats" (the embedded nats-server, the lease state in its KV)
// or "kafka" (kfake, the lease state in a compacted topic).
func followerDecisionLog(t *testing.T, b *demo.Brokers, kind string) {
	cfg := demo.Config(b, "", 250*time.Millisecond)
	cluster, topic := demo.NATSCluster, demo.NATSStream
	if kind == "kafka" {
		cluster, topic = demo.KafkaCluster, demo.KafkaTopic
		cfg.NATS = nil
	} else {
		cfg.Kafka = nil
	}
	// One cluster: its election is the lease state's.
	cfg.Quota = config.Quota{Policies: []quota.Policy{{Name: "demo", MaxAge: time.Second, Producers: []quota.ProducerSpec{{ID: "svc-a"}}}}}
	if kind == "nats" {
		cfg.Quota.NATSKV.Cluster = cluster
	}
	cfg.HA = config.HA{Enabled: true, Name: unique("haev"), SessionTimeout: 6 * time.Second}
	logs := map[string]*testutil.Buffer{}
	var rs []*haReplica
	for _, id := range []string{"r0", "r1"} {
		logs[id] = &testutil.Buffer{}
		rs = append(rs, startLoggedReplica(t, cfg, id, logs[id]))
	}
	lead := waitOneLeader(t, rs, cluster, 30*time.Second)
	var leader, follower *haReplica
	for _, r := range rs {
		if r.id == lead {
			leader = r
		} else {
			follower = r
		}
	}
	watchStream(t, leader.base, "svc-a", topic)
	events := func(r *haReplica) []history.Event {
		code, body := get(t, r.base+"/v1/events")
		var resp history.EventsResponse
		if code != 200 || json.Unmarshal([]byte(body), &resp) != nil {
			t.Fatalf("%s /v1/events: %d %s", r.id, code, body)
		}
		return resp.Events
	}
	// Both step the slowed consumer: wait for a cut on each.
	poll(t, 40*time.Second, func() (bool, string) {
		le, fe := events(leader), events(follower)
		return len(le) > 0 && len(fe) > 0, "no events on both replicas yet"
	})
	stood := strings.Contains(logs[follower.id].String(), "serving this replica's own lease sets")
	for _, e := range events(leader) {
		if e.NotServed {
			t.Errorf("leader %s: event marked not served: %+v", leader.id, e)
		}
	}
	marked := 0
	for _, e := range events(follower) {
		if e.NotServed {
			marked++
		} else if !stood {
			t.Errorf("follower %s (never stood in): event not marked as not served: %+v", follower.id, e)
		}
	}
	if marked == 0 {
		t.Errorf("follower %s: no event marked not served", follower.id)
	}
	lines := func(id, level string) int {
		n := 0
		for _, l := range strings.Split(logs[id].String(), "\n") {
			if strings.Contains(l, `"msg":"quota decision"`) && strings.Contains(l, `"level":"`+level+`"`) {
				n++
			}
		}
		return n
	}
	t.Logf("leader %s: %d quota decision lines at INFO, %d at DEBUG; follower %s: %d at INFO, %d at DEBUG (stood in: %v)",
		leader.id, lines(leader.id, "INFO"), lines(leader.id, "DEBUG"), follower.id, lines(follower.id, "INFO"), lines(follower.id, "DEBUG"), stood)
	if lines(leader.id, "INFO") == 0 {
		t.Errorf("leader %s logged no decision at INFO", leader.id)
	}
	if n := lines(follower.id, "INFO"); n > 0 && !stood {
		t.Errorf("follower %s logged %d decisions it did not serve at INFO", follower.id, n)
	}
	if lines(follower.id, "DEBUG") == 0 {
		t.Errorf("follower %s logged no decision at DEBUG", follower.id)
	}
}

// startLoggedReplica is startReplica with the replica's log, JSON at
// DEBUG, written to w.
func startLoggedReplica(tb testing.TB, cfg config.Config, id string, w *testutil.Buffer) *haReplica {
	tb.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.Interval = 250 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Log = config.Log{Level: "debug", Format: "json"}
	cfg.HA.ID = id
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	r := &haReplica{id: id, base: "http://" + a.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	tb.Cleanup(func() { r.stop(tb) })
	return r
}
