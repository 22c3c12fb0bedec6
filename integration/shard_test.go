package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
)

// shardSplit reads every running replica's /v1/lag: which replica observes
// each topic, whether no topic is observed twice, and whether every
// replica names the same owner of each shard as the others.
// owners maps "<cluster>/<shard>" to its owner.
func shardSplit(tb testing.TB, rs []*haReplica) (byTopic, owners map[string]string, ok bool, all string) {
	tb.Helper()
	byTopic, owners, ok = map[string]string{}, map[string]string{}, true
	for _, r := range rs {
		resp := lagAPI(tb, r.base)
		var mine []string
		for _, tg := range resp.Targets {
			if prev, dup := byTopic[tg.Topic]; dup && prev != r.id {
				ok = false
			}
			byTopic[tg.Topic] = r.id
			mine = append(mine, tg.Topic)
		}
		for _, s := range resp.Shards {
			k := fmt.Sprintf("%s/%d", s.Cluster, s.Shard)
			if o, seen := owners[k]; s.Owner == "" || seen && o != s.Owner || s.Self != (s.Owner == r.id) {
				ok = false
			}
			owners[k] = s.Owner
		}
		if len(resp.Shards) == 0 {
			ok = false
		}
		slices.Sort(mine)
		all += fmt.Sprintf("%s observes %v; ", r.id, mine)
	}
	return byTopic, owners, ok, all + fmt.Sprintf("owners %v", owners)
}

// slowConsumer consumes topic in group from its start, two records every
// 100 ms, committing each time, until the test ends.
func slowConsumer(tb testing.TB, addr, group, topic string) {
	tb.Helper()
	cl := client(tb, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			cl.PollRecords(ctx, 2)
			_ = cl.CommitUncommittedOffsets(ctx)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	})
	tb.Cleanup(func() { cancel(); wg.Wait() })
}

// streamLoad publishes to stream 100 messages/s and has a bound push
// consumer "w" (live on every reading) ack 20 of them per second, until
// the test ends.
func streamLoad(tb testing.TB, nc *natsgo.Conn, js jetstream.JetStream, stream string) {
	tb.Helper()
	legacy, err := nc.JetStream()
	if err != nil {
		tb.Fatal(err)
	}
	sub, err := legacy.Subscribe(stream, func(m *natsgo.Msg) {
		time.Sleep(50 * time.Millisecond) // the consumer's pace: 20 messages/s
		_ = m.Ack()
	}, natsgo.Durable("w"), natsgo.ManualAck(), natsgo.AckExplicit(), natsgo.MaxAckPending(2), natsgo.DeliverAll())
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = js.Publish(ctx, stream, []byte("m"))
			}
		}
	})
	tb.Cleanup(func() { cancel(); wg.Wait(); _ = sub.Unsubscribe() })
}

// standingIn reports whether a replica names a shard observed by a
// stand-in (its assigned owner silent).
func standingIn(tb testing.TB, rs []*haReplica) bool {
	tb.Helper()
	for _, r := range rs {
		for _, s := range lagAPI(tb, r.base).Shards {
			if s.StandIn {
				return true
			}
		}
	}
	return false
}

// count is the number of entries of m (topics, shards) held by id.
func count(m map[string]string, id string) int {
	n := 0
	for _, o := range m {
		if o == id {
			n++
		}
	}
	return n
}

// TestHAShards runs three lagbridge processes that split the observation
// of eight topics (streams) into four shards (ha.shards), on the real
// broker and on the embedded nats-server: every topic is observed by
// exactly one replica, /v1/lag names every shard's owner alike on every
// replica, /readyz says which shards each observes and
// lagbridge_ha_shards_owned sums to the shards. On Kafka each topic's group falls behind (it consumes and
// commits 20 records/s of the 100 written, behind a head a minute old), and a producer reporting to the leader has every
// topic limited, those of the shards the others observe included (their
// decisions travel through the lease state). SIGKILL of a replica that
// observes a shard: its topics are observed by the others within the
// session timeout (measured: a stand-in observes a shard whose owner's
// records went silent), then the assignment moves them, and the leader's
// leases stay limited throughout.
func TestHAShards(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("signals")
	}
	bin := filepath.Join(t.TempDir(), "lagbridge")
	build := exec.Command("go", "build", "-o", bin, "github.com/lagbridge/lagbridge/cmd/lagbridge")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Each world makes eight topics under prefix, each read by a slow
	// group, and returns the cluster "c" as YAML.
	cases := map[string]func(tb testing.TB, prefix string) (cluster string, topics []string){
		"kafka": func(tb testing.TB, prefix string) (string, []string) {
			addr := kafkatest.Bootstrap(tb)
			prod := client(tb, addr)
			old := time.Now().Add(-time.Minute)
			var topics []string
			for i := range 8 {
				topic, group := fmt.Sprintf("%s-t%d", prefix, i), fmt.Sprintf("%s-g%d", prefix, i)
				topics = append(topics, topic)
				createTopic(tb, addr, topic, 1, nil)
				produce(tb, prod, topic, 0, 200, func(int) time.Time { return old })
				steadyProducer(tb, addr, topic, 1)   // 100 records/s
				slowConsumer(tb, addr, group, topic) // 20 records/s, committed
			}
			return fmt.Sprintf("kafka:\n  - cluster: c\n    brokers: [%q]\n    groups: {include: [%q]}\n    topics: {include: [%q]}\n",
				addr, prefix+"-g.*", prefix+"-t.*"), topics
		},
		"nats": func(tb testing.TB, prefix string) (string, []string) {
			s := embedded.NATSTest(tb)
			nc, err := natsgo.Connect(s.ClientURL())
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(nc.Close)
			js, _ := jetstream.New(nc)
			ctx := ctxT(tb, 30*time.Second)
			var streams []string
			for i := range 8 {
				name := fmt.Sprintf("S%d", i)
				streams = append(streams, name)
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}}); err != nil {
					tb.Fatal(err)
				}
				streamLoad(tb, nc, js, name)
			}
			return fmt.Sprintf("nats:\n  - cluster: c\n    urls: [%q]\n    streams: {include: [\"S.*\"]}\n", s.ClientURL()), streams
		},
	}
	for name, world := range cases {
		t.Run(name, func(t *testing.T) {
			prefix := unique("shard")
			cluster, topics := world(t, prefix)
			haShards(t, bin, prefix, cluster, topics)
		})
	}
}

func haShards(t *testing.T, bin, name, cluster string, topics []string) {
	dir := t.TempDir()
	const session, interval = 6 * time.Second, 250 * time.Millisecond
	var ps []*haProcess
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		yaml := fmt.Sprintf(`interval: %s
%squota:
  policies:
    - name: p
      maxAge: 2s
ha:
  enabled: true
  name: %s
  sessionTimeout: %s
  shards: 4
`, interval, cluster, name, session)
		p := startProcess(t, bin, dir, id, yaml)
		ps = append(ps, p)
	}
	replicas := func(except ...*haProcess) []*haReplica {
		var rs []*haReplica
		for _, p := range ps {
			if !slices.Contains(except, p) {
				rs = append(rs, &haReplica{id: p.id, base: p.base, cancel: func() {}})
			}
		}
		return rs
	}
	leaderID := waitOneLeader(t, replicas(), "c", 60*time.Second)
	// The split as it settles: every topic observed once, and a replica
	// other than the leader observing one (until the others' presence is
	// read, the first to join owns every shard: a run of the NATS case
	// read that split 1.25 s in and found no follower to kill).
	var byTopic map[string]string
	poll(t, 60*time.Second, func() (bool, string) {
		var ok bool
		var all string
		byTopic, _, ok, all = shardSplit(t, replicas())
		return ok && len(byTopic) == len(topics) && count(byTopic, leaderID) < len(topics), all
	})
	var leader *haProcess
	for _, p := range ps {
		if p.id == leaderID {
			leader = p
		}
		if code, body := get(t, p.base+"/readyz"); code != 200 || !strings.Contains(body, " of 4 of c") {
			t.Errorf("%s /readyz: %d %s, want the shards it observes", p.id, code, body)
		}
	}
	// Every shard owned once. Read until the rebalance that settled the
	// split is over: the cooperative assignor gives a member that joins
	// nothing in its first generation, while the others give up what it
	// is to get, assigned in the next (a CI run read 3 shards owned, the
	// leader synced with none, between the two).
	poll(t, 30*time.Second, func() (bool, string) {
		owned, per := 0.0, map[string]map[string]float64{}
		for _, p := range ps {
			vs := metricValues(t, p.base, "lagbridge_ha_shards_owned")
			per[p.id] = vs
			for _, v := range vs {
				owned += v
			}
		}
		return owned == 4, fmt.Sprintf("lagbridge_ha_shards_owned sums to %v over the replicas (%v), want 4", owned, per)
	})
	// limited: the leader limits every topic.
	limited := func() (bool, string) {
		set := report(t, leader.base, "checkout", topics...)
		var open []string
		for _, l := range set.Leases {
			if l.Rate == nil {
				open = append(open, fmt.Sprintf("%s (%s)", l.Topic, l.Reason))
			}
		}
		return len(set.Leases) == len(topics) && len(open) == 0, fmt.Sprintf("open leases on %v (observed by %v)", open, byTopic)
	}
	poll(t, 30*time.Second, limited)
	t.Logf("split: %v; the leader %s observes %d of %d topics", byTopic, leaderID, count(byTopic, leaderID), len(topics))

	// SIGKILL a replica that observes a topic, other than the leader.
	var victim *haProcess
	for _, p := range ps {
		if p != leader && count(byTopic, p.id) > 0 {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("the leader observes every topic: %v", byTopic)
	}
	moving := count(byTopic, victim.id)
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var gaps []string
	poll(t, session+2*interval+5*time.Second, func() (bool, string) {
		if ok, why := limited(); !ok {
			gaps = append(gaps, why)
		}
		now, owners, ok, all := shardSplit(t, replicas(victim))
		return ok && len(now) == len(topics) && count(owners, victim.id) == 0, all
	})
	took := time.Since(killed)
	t.Logf("SIGKILL of %s: its %d topics are observed by the others after %v (session %v, interval %v)", victim.id, moving, took.Round(time.Millisecond), session, interval)
	// The others read no record of its shards for the silence (a third
	// of the session here), one of them stands in at its next cycle and
	// observes them at the one after: within the session, which alone
	// (Kafka's group protocol) would take the whole of it, then the
	// others' next look at the assignment and their next cycle.
	if took >= session {
		t.Errorf("the shards were observed by the others after %v, want within the session timeout %v", took, session)
	}
	if len(gaps) > 0 {
		t.Errorf("the leader's leases opened during the move: %s", strings.Join(gaps, "; "))
	}
	// Then the assignment moves the shards (the session ran out): the
	// stand-in hands them over to their new owners, the leases limited
	// throughout.
	gaps = nil
	poll(t, 2*session+5*time.Second, func() (bool, string) {
		if ok, why := limited(); !ok {
			gaps = append(gaps, why)
		}
		now, owners, ok, all := shardSplit(t, replicas(victim))
		return ok && len(now) == len(topics) && count(owners, victim.id) == 0 && !standingIn(t, replicas(victim)), all
	})
	t.Logf("the assignment moved %s's shards after %v", victim.id, time.Since(killed).Round(time.Millisecond))
	if len(gaps) > 0 {
		t.Errorf("the leader's leases opened when the assignment moved the shards: %s", strings.Join(gaps, "; "))
	}
	// The new owners learn the rates of the topics they took over (the
	// former owner's decisions hold meanwhile): the leases stay limited
	// over the next seconds too.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) { // watching a window
		if ok, why := limited(); !ok {
			t.Errorf("after the move: %s", why)
			break
		}
	}

	var last *haProcess
	for _, p := range ps {
		if p != leader && p != victim {
			last = p
		}
	}
	haPause(t, leader, last, replicas(victim), len(topics), limited)

	// SIGTERM the other follower: it leaves the assignment on its way
	// out, and the leader observes every topic well before a session.
	stopped := time.Now()
	if err := last.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gaps = nil
	poll(t, session, func() (bool, string) {
		if ok, why := limited(); !ok {
			gaps = append(gaps, why)
		}
		now, owners, ok, all := shardSplit(t, replicas(victim, last))
		return ok && len(now) == len(topics) && count(owners, leader.id) == len(owners), all
	})
	t.Logf("SIGTERM of %s: the leader observes all %d topics after %v", last.id, len(topics), time.Since(stopped).Round(time.Millisecond))
	if len(gaps) > 0 {
		t.Errorf("the leader's leases opened during the graceful move: %s", strings.Join(gaps, "; "))
	}
}

// haPause pauses (SIGSTOP) the follower p, which owns shards, for less
// than the session, while rs (p and the leader) run: the leader stands in
// for p's shards within the session; resumed (SIGCONT), p writes its
// records again and observes its shards, the leader no longer stands in;
// the leader's leases stay limited throughout.
func haPause(t *testing.T, leader, p *haProcess, rs []*haReplica, topics int, limited func() (bool, string)) {
	t.Helper()
	_, owners, _, _ := shardSplit(t, rs)
	if count(owners, p.id) == 0 {
		t.Logf("%s owns no shard: no pause", p.id)
		return
	}
	others := slices.DeleteFunc(slices.Clone(rs), func(r *haReplica) bool { return r.id == p.id })
	var gaps []string
	paused := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll(t, 6*time.Second, func() (bool, string) {
		if ok, why := limited(); !ok {
			gaps = append(gaps, why)
		}
		now, owners, ok, all := shardSplit(t, others)
		return ok && len(now) == topics && count(owners, leader.id) == len(owners), all
	})
	t.Logf("SIGSTOP of %s: the leader stands in for its shards after %v", p.id, time.Since(paused).Round(time.Millisecond))
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	poll(t, 10*time.Second, func() (bool, string) {
		if ok, why := limited(); !ok {
			gaps = append(gaps, why)
		}
		now, owners, ok, all := shardSplit(t, rs)
		return ok && len(now) == topics && count(owners, p.id) > 0 && !standingIn(t, rs), all
	})
	t.Logf("SIGCONT of %s after %v: it observes its shards again, nobody stands in, after %v", p.id,
		resumed.Sub(paused).Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond))
	if len(gaps) > 0 {
		t.Errorf("the leader's leases opened around the pause: %s", strings.Join(gaps, "; "))
	}
}
