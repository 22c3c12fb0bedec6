package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// reportBody is a report of producer with a demand of 100 msg/s per topic.
func reportBody(producer string, topics []string) *bytes.Reader {
	r := quotaproto.Report{Producer: producer}
	for _, t := range topics {
		r.Topics = append(r.Topics, quotaproto.TopicDemand{Topic: t, Demand: 100})
	}
	b, _ := json.Marshal(r)
	return bytes.NewReader(b)
}

// report posts a producer's report to a replica and returns its answer.
func report(tb testing.TB, base, producer string, topics ...string) quotaproto.LeaseSet {
	tb.Helper()
	resp, err := http.Post(base+quotaproto.PathLeases, "application/json", reportBody(producer, topics))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("report %s to %s: %s", producer, base, resp.Status)
	}
	var set quotaproto.LeaseSet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		tb.Fatal(err)
	}
	return set
}

// keepReporting reports topics for producer every 300 ms to the first of
// bases that answers, as an SDK does, until the test ends.
func keepReporting(tb testing.TB, producer string, topics func() []string, bases ...func() string) {
	tb.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(300 * time.Millisecond)
		defer t.Stop()
		for {
			for _, base := range bases {
				resp, err := http.Post(base()+quotaproto.PathLeases, "application/json", reportBody(producer, topics()))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	tb.Cleanup(func() { close(stop); <-done })
}

// servedSet is the set a replica serves a producer now (a watch that does
// not wait); ok false while it knows none.
func servedSet(tb testing.TB, base, producer string) (quotaproto.LeaseSet, bool) {
	tb.Helper()
	return heldSet(tb, base, producer, 0)
}

// heldSet is servedSet asked by a producer that holds version (the SDK's
// watch's ?version=), as one failing over from another replica does.
func heldSet(tb testing.TB, base, producer string, version uint64) (quotaproto.LeaseSet, bool) {
	tb.Helper()
	code, body := get(tb, base+quotaproto.PathWatch+"?producer="+producer+"&version="+strconv.FormatUint(version, 10)+"&timeout=0s")
	if code != http.StatusOK {
		return quotaproto.LeaseSet{}, false
	}
	var set quotaproto.LeaseSet
	if err := json.Unmarshal([]byte(body), &set); err != nil {
		tb.Fatalf("watch %s: %v: %s", producer, err, body)
	}
	return set, true
}

// TestHALeaseReplication: three replicas; a producer reporting to a
// follower and one reporting to the leader are served the same sets (the
// leader's: same versions) by every replica, within one interval plus the
// replication delay, which the test logs. The leader stops: the new leader
// serves both producers with higher versions, a producer failing over to
// it from the remaining follower a version at least the one it holds, and
// the follower then serves the same.
func TestHALeaseReplication(t *testing.T) {
	cases := map[string]func(tb testing.TB) (config.Config, string){
		"nats": func(tb testing.TB) (config.Config, string) {
			s := embedded.NATSTest(tb)
			return config.Config{NATS: []nats.Config{{Cluster: "n", URLs: []string{s.ClientURL()}}}}, "n"
		},
		"kafka": func(tb testing.TB) (config.Config, string) {
			addr := kafkatest.Bootstrap(tb)
			return config.Config{Kafka: []kafka.Config{{Cluster: "k", Brokers: []string{addr}}}}, "k"
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, cluster := mk(t)
			cfg.HA = config.HA{Enabled: true, Name: unique("hl"), SessionTimeout: 6 * time.Second}
			byID := map[string]*haReplica{}
			var rs []*haReplica
			for i := range 3 {
				r := startReplica(t, cfg, fmt.Sprintf("r%d", i))
				rs = append(rs, r)
				byID[r.id] = r
			}
			lead := byID[waitOneLeader(t, rs, cluster, 30*time.Second)]
			var follower *haReplica
			for _, r := range rs {
				if r != lead {
					follower = r
					break
				}
			}
			pl, pf := unique("pl"), unique("pf")
			// same waits until every follower serves the leader's sets
			// as the leader numbers them. A follower that stood in (a
			// leader's record over a second late: load 15-18) serves the
			// leader's sets numbered above its own until a set changes:
			// each follower's version is told to the leader as a
			// producer of it failing over would, and the leader numbers
			// the set above it.
			same := func(d time.Duration) (map[string]quotaproto.LeaseSet, time.Duration) {
				t.Helper()
				start := time.Now()
				var want map[string]quotaproto.LeaseSet
				poll(t, d, func() (bool, string) {
					want = map[string]quotaproto.LeaseSet{}
					for _, p := range []string{pl, pf} {
						for _, f := range rs {
							if f == lead {
								continue
							}
							b, ok := servedSet(t, f.base, p)
							if !ok {
								return false, fmt.Sprintf("%s serves %s no set yet", f.id, p)
							}
							a, _ := heldSet(t, lead.base, p, b.Version)
							c, _ := servedSet(t, f.base, p)
							if a.Version <= 1 || c.Version != a.Version || len(c.Leases) != len(a.Leases) {
								return false, fmt.Sprintf("%s serves %s version %d, then %d; the leader %s %d to a producer holding %d", f.id, p, b.Version, c.Version, lead.id, a.Version, b.Version)
							}
							want[p] = a
						}
					}
					return true, ""
				})
				return want, time.Since(start)
			}
			report(t, lead.base, pl, "orders")
			report(t, follower.base, pf, "orders")
			var mu sync.Mutex
			pfTopics := []string{"orders"}
			keepReporting(t, pl, func() []string { return []string{"orders"} }, func() string { return lead.base }, func() string { return follower.base })
			keepReporting(t, pf, func() []string { mu.Lock(); defer mu.Unlock(); return pfTopics }, func() string { return follower.base })
			sets, took := same(cfg.Interval + 10*time.Second)
			t.Logf("%s: every replica serves the leader's sets %v after the reports (interval %v)", name, took.Round(time.Millisecond), 250*time.Millisecond)

			// A new version on the leader reaches the followers.
			changed := time.Now()
			mu.Lock()
			pfTopics = []string{"orders", "payments"}
			mu.Unlock()
			report(t, follower.base, pf, "orders", "payments")
			poll(t, 10*time.Second, func() (bool, string) {
				for _, r := range rs {
					s, _ := servedSet(t, r.base, pf)
					if len(s.Leases) != 2 {
						return false, fmt.Sprintf("%s serves %s with %d leases", r.id, pf, len(s.Leases))
					}
				}
				return true, ""
			})
			t.Logf("%s: a changed set is served by every replica %v after the report", name, time.Since(changed).Round(time.Millisecond))
			if age, ok := metricValues(t, follower.base, "lagbridge_ha_lease_state_age_seconds")["//"]; !ok || age < 0 || age > 10 {
				t.Errorf("%s: lagbridge_ha_lease_state_age_seconds = %v (exported: %v), want a set read within 10s", follower.id, age, ok)
			}

			// Failover: versions only grow, and the survivors agree.
			lead.stop(t)
			var left []*haReplica
			for _, r := range rs {
				if r != lead {
					left = append(left, r)
				}
			}
			next := byID[waitOneLeader(t, left, cluster, cfg.HA.SessionTimeout+time.Second)]
			var other *haReplica
			for _, r := range left {
				if r != next {
					other = r
				}
			}
			// The follower may have stood in after the new leader
			// renumbered its sets, before it read them: it then serves
			// versions above the leader's (its own, then the leader's
			// numbered above them) until the set changes. A producer of
			// it failing over to the leader tells it the version it
			// holds, and is served the set above it (once written); the
			// follower then serves the leader's numbers again.
			poll(t, 15*time.Second, func() (bool, string) {
				for _, p := range []string{pl, pf} {
					b, _ := servedSet(t, other.base, p)
					a, _ := heldSet(t, next.base, p, b.Version)
					c, _ := servedSet(t, other.base, p)
					if a.Version <= sets[p].Version || a.Version < b.Version || a.Version != c.Version {
						return false, fmt.Sprintf("%s: before %d, follower %s %d, new leader %s %d to a producer holding that, follower then %d", p, sets[p].Version, other.id, b.Version, next.id, a.Version, c.Version)
					}
				}
				return true, ""
			})
		})
	}
}
