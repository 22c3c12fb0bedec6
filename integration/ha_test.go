package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/embedded"
)

// haReplica is one in-process daemon of a replicated deployment.
type haReplica struct {
	id     string
	base   string
	cancel context.CancelFunc
	done   chan error
}

// stop stops the replica gracefully (it hands leadership over).
func (r *haReplica) stop(tb testing.TB) {
	tb.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil {
		tb.Errorf("replica %s stopped with %v", r.id, err)
	}
	r.cancel = nil
}

func startReplica(tb testing.TB, cfg config.Config, id string) *haReplica {
	tb.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.Interval = 250 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Log = config.Log{Level: "info", Format: "text"}
	cfg.HA.ID = id
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, testLogger(tb).With("replica", id))
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	r := &haReplica{id: id, base: "http://" + a.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	tb.Cleanup(func() { r.stop(tb) })
	return r
}

// roles reads every running replica's /readyz: the ids of those that lead
// the cluster, and whether all answered ready.
func roles(tb testing.TB, rs []*haReplica, cluster string) (leaders []string, all string, ready bool) {
	tb.Helper()
	ready = true
	for _, r := range rs {
		if r.cancel == nil {
			continue
		}
		code, body := get(tb, r.base+"/readyz")
		all += fmt.Sprintf("%s: %d %s", r.id, code, body)
		ready = ready && code == 200
		if code == 200 && strings.Contains(body, "leader of "+cluster) {
			leaders = append(leaders, r.id)
		}
	}
	return leaders, all, ready
}

// waitOneLeader polls until every running replica is ready and exactly one
// leads; it fails as soon as two lead at once.
func waitOneLeader(tb testing.TB, rs []*haReplica, cluster string, d time.Duration) string {
	tb.Helper()
	var leader string
	poll(tb, d, func() (bool, string) {
		ls, all, ready := roles(tb, rs, cluster)
		if len(ls) > 1 {
			tb.Fatalf("replicas %v lead %s at once:\n%s", ls, cluster, all)
		}
		if len(ls) == 1 && ready {
			leader = ls[0]
			return true, all
		}
		return false, all
	})
	return leader
}

// TestHAReplicas: three replicas on one cluster elect one leader, which
// /readyz (with its epoch, as lagbridge_ha_epoch) and lagbridge_ha_leader
// name; the others follow. The leader
// stops gracefully: another one leads within one session timeout (it
// released, so well before), in a higher epoch.
func TestHAReplicas(t *testing.T) {
	cases := map[string]func(tb testing.TB) (config.Config, string){
		"nats": func(tb testing.TB) (config.Config, string) {
			s := embedded.NATSTest(tb)
			cfg := config.Config{NATS: []nats.Config{{Cluster: "n", URLs: []string{s.ClientURL()}}}}
			cfg.Quota.NATSKV.Cluster = "n"
			return cfg, "n"
		},
		"kafka": func(tb testing.TB) (config.Config, string) {
			addr := kafkatest.Bootstrap(tb)
			return config.Config{Kafka: []kafka.Config{{Cluster: "k", Brokers: []string{addr}}}}, "k"
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, cluster := mk(t)
			cfg.HA = config.HA{Enabled: true, Name: unique("ha"), SessionTimeout: 6 * time.Second}
			var rs []*haReplica
			for i := range 3 {
				rs = append(rs, startReplica(t, cfg, fmt.Sprintf("r%d", i)))
			}
			first := waitOneLeader(t, rs, cluster, 30*time.Second)
			byID := map[string]*haReplica{}
			for _, r := range rs {
				byID[r.id] = r
				want := 0.0
				if r.id == first {
					want = 1
				}
				if got := metricValues(t, r.base, "lagbridge_ha_leader")[cluster+"//"]; got != want {
					t.Errorf("%s: lagbridge_ha_leader{cluster=%q} = %v, want %v", r.id, cluster, got, want)
				}
			}
			// The leader leads on through the rebalances the others'
			// joins cause, each a new epoch (the gauge follows it), so
			// /readyz is compared with the gauge read before and after
			// it, and read again when the epoch moved in between (fresh-
			// clone CI, session 16: the gauge said 2, /readyz a moment
			// later "epoch 3").
			epoch := func() float64 { return metricValues(t, byID[first].base, "lagbridge_ha_epoch")[cluster+"//"] }
			var epoch1 float64
			for try := 0; ; try++ {
				before := epoch()
				_, body := get(t, byID[first].base+"/readyz")
				if after := epoch(); after != before && try < 10 {
					t.Logf("%s: the epoch moved from %v to %v around /readyz; reading again", first, before, after)
					time.Sleep(200 * time.Millisecond) // the epoch moved: read again
					continue
				}
				if !strings.Contains(body, fmt.Sprintf("leader of %s (epoch %d)", cluster, int64(before))) {
					t.Errorf("%s: /readyz %q does not name the epoch lagbridge_ha_epoch says, %v", first, body, before)
				}
				epoch1 = before
				break
			}

			stopped := time.Now()
			byID[first].stop(t)
			second := waitOneLeader(t, rs, cluster, cfg.HA.SessionTimeout+time.Second)
			t.Logf("%s: leader %s stopped gracefully; %s leads after %v", name, first, second, time.Since(stopped).Round(time.Millisecond))
			if epoch2 := metricValues(t, byID[second].base, "lagbridge_ha_epoch")[cluster+"//"]; epoch2 <= epoch1 {
				t.Errorf("epoch went from %v to %v, want higher", epoch1, epoch2)
			}
		})
	}
}
