package integration

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/config"
)

// freePort returns a loopback port nothing listens on (for a server the
// test starts later).
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestReadyWithoutOneCluster: a daemon that reaches one of its clusters
// (the real Kafka) but not the other turns ready, and /readyz names the
// one it never observed with its error; the other, reached later, is
// observed and the answer stays ready. With ha, the election of the cluster
// never reached is not waited for, but the lease state is: when it travels
// through that cluster the replica is not ready (it could serve none of
// the leader's sets) until the cluster answers. Before session 31 every
// case stayed 503 until every cluster was observed.
func TestReadyWithoutOneCluster(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	real := kafka.Config{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{unique("rdy")}}}
	late := func(port int) nats.Config {
		return nats.Config{Cluster: "late", URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}, ReconnectWait: 100 * time.Millisecond}
	}
	startNATS := func(t *testing.T, port int) {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(ns.Shutdown)
	}
	readyz := func(t *testing.T, base string, code int, want ...string) string {
		t.Helper()
		var body string
		poll(t, 20*time.Second, func() (bool, string) {
			var c int
			c, body = get(t, base+"/readyz")
			ok := c == code
			for _, w := range want {
				ok = ok && strings.Contains(body, w)
			}
			return ok, fmt.Sprintf("%d %s", c, body)
		})
		return body
	}

	t.Run("one replica, NATS later", func(t *testing.T) {
		port := freePort(t)
		base := "http://" + runApp(t, config.Config{Listen: "127.0.0.1:0", Interval: 250 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
			Log: config.Log{Level: "info", Format: "text"}, Kafka: []kafka.Config{real}, NATS: []nats.Config{late(port)}})
		readyz(t, base, 200, "never observed late since start (")
		startNATS(t, port)
		// Reached later: observed, and ready all along.
		poll(t, 20*time.Second, func() (bool, string) {
			code, body := get(t, base+"/readyz")
			if code != 200 {
				t.Fatalf("readyz after NATS came: %d %s", code, body)
			}
			return body == "ready\n", body
		})
		for _, cl := range lagAPI(t, base).Clusters {
			if !cl.Observed {
				t.Errorf("cluster %s not observed: %+v", cl.Name, cl)
			}
		}
	})

	t.Run("ha, a second Kafka cluster never reached", func(t *testing.T) {
		dead := kafka.Config{Cluster: "dead", Brokers: []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}}
		r := startReplica(t, config.Config{Kafka: []kafka.Config{real, dead},
			HA: config.HA{Enabled: true, Name: unique("rdy"), SessionTimeout: 6 * time.Second}}, "a")
		readyz(t, r.base, 200, "leader of real", "election not answered yet of dead", "never observed dead since start (")
	})

	t.Run("ha.shards, a second Kafka cluster never reached", func(t *testing.T) {
		// Its shards are never assigned: not waited for either.
		dead := kafka.Config{Cluster: "dead", Brokers: []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}}
		r := startReplica(t, config.Config{Kafka: []kafka.Config{real, dead},
			HA: config.HA{Enabled: true, Name: unique("rdy"), SessionTimeout: 6 * time.Second, Shards: 2}}, "a")
		readyz(t, r.base, 200, "observes shards 0, 1 of 2 of real", "shards of dead not yet assigned", "never observed dead since start (")
	})

	t.Run("ha, the lease state through a NATS reached later", func(t *testing.T) {
		port := freePort(t)
		r := startReplica(t, config.Config{Kafka: []kafka.Config{real}, NATS: []nats.Config{late(port)},
			HA: config.HA{Enabled: true, Name: unique("rdy"), SessionTimeout: 6 * time.Second}}, "a")
		readyz(t, r.base, 503, "lease state not yet synced (it travels through late, never observed)", "never observed late since start (")
		startNATS(t, port)
		readyz(t, r.base, 200, "leader of late")
		// Its election can answer a cycle before the loop observes it:
		// the note leaves at the loop's first cycle that returns data.
		poll(t, 20*time.Second, func() (bool, string) {
			c, body := get(t, r.base+"/readyz")
			return c == 200 && !strings.Contains(body, "never observed"), fmt.Sprintf("readyz %d %q still names a cluster never observed", c, body)
		})
	})
}
