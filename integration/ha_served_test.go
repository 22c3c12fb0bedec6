package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/quota"
)

// TestHASplitLeadershipServed: two replicas, same config, NATS (lease
// state, quota KV) and kfake, leadership split (one leads the lease
// cluster, the other only the Kafka cluster; 4 of 4 starts split on the
// first try). No policy sets kafkaClientQuota, so the Kafka leader's
// decisions reach nobody: its events are marked not served and logged
// below INFO, the lease leader's are served and at INFO (red when leading
// the topic's cluster alone counted as serving: served=2, INFO 2 on both).
func TestHASplitLeadershipServed(t *testing.T) {
	b := startSlowingDemo(t)
	for try := range 8 {
		cfg := demo.Config(b, "", 250*time.Millisecond)
		cfg.Quota = config.Quota{Policies: []quota.Policy{{Name: "demo", MaxAge: time.Second, Producers: []quota.ProducerSpec{{ID: "svc-a"}}}}}
		cfg.Quota.NATSKV.Cluster = demo.NATSCluster
		cfg.HA = config.HA{Enabled: true, Name: unique("split"), SessionTimeout: 6 * time.Second}
		logs := map[string]*testutil.Buffer{"r0": {}, "r1": {}}
		var rs []*haReplica
		done := make(chan *haReplica, 2)
		for _, id := range []string{"r0", "r1"} {
			go func() { done <- startLoggedReplica(t, cfg, id, logs[id]) }()
		}
		rs = append(rs, <-done, <-done)
		// roles() misses the second cluster of "leader of a (epoch 2), b":
		// read /readyz's first segment here.
		leaderOf := func(c string) string {
			var who string
			poll(t, 30*time.Second, func() (bool, string) {
				who = ""
				for _, r := range rs {
					code, body := get(t, r.base+"/readyz")
					if code != 200 {
						return false, body
					}
					seg, _, _ := strings.Cut(body, ";")
					if i := strings.Index(seg, "leader of "); i >= 0 && strings.Contains(seg[i:], c) {
						who = r.id
					}
				}
				return who != "", "no leader of " + c
			})
			return who
		}
		nl, kl := leaderOf(demo.NATSCluster), leaderOf(demo.KafkaCluster)
		t.Logf("try %d: nats leader %s, kafka leader %s", try, nl, kl)
		if nl == kl {
			for _, r := range rs {
				r.stop(t)
			}
			continue
		}
		var kafkaOnly *haReplica
		for _, r := range rs {
			if r.id == kl {
				kafkaOnly = r
			}
		}
		for _, r := range rs {
			watchStream(t, r.base, "svc-a", demo.KafkaTopic)
		}
		events := func(r *haReplica) []history.Event {
			code, body := get(t, r.base+"/v1/events?cluster="+demo.KafkaCluster)
			var resp history.EventsResponse
			if code != 200 || json.Unmarshal([]byte(body), &resp) != nil {
				t.Fatalf("%s /v1/events: %d %s", r.id, code, body)
			}
			return resp.Events
		}
		poll(t, 40*time.Second, func() (bool, string) {
			return len(events(rs[0])) > 0 && len(events(rs[1])) > 0, "no events yet"
		})
		for _, r := range rs {
			served, ns := 0, 0
			for _, e := range events(r) {
				if e.NotServed {
					ns++
				} else {
					served++
				}
			}
			info := 0
			for _, l := range strings.Split(logs[r.id].String(), "\n") {
				if strings.Contains(l, `"msg":"quota decision"`) && strings.Contains(l, `"level":"INFO"`) && strings.Contains(l, demo.KafkaCluster) {
					info++
				}
			}
			t.Logf("%s (leads nats: %v, leads kafka: %v): kafka-topic events served=%d notServed=%d, INFO lines=%d", r.id, r.id == nl, r.id == kl, served, ns, info)
			if r == kafkaOnly && (served > 0 || info > 0 || ns == 0) {
				t.Errorf("%s leads only the Kafka cluster (no kafkaClientQuota): %d events served, %d INFO lines, %d not served; want 0, 0, >0", r.id, served, info, ns)
			}
			if r != kafkaOnly && (served == 0 || info == 0) {
				t.Errorf("%s leads the lease state: %d events served, %d INFO lines; want some of each", r.id, served, info)
			}
		}
		return
	}
	t.Skip("no split in 8 tries")
}
