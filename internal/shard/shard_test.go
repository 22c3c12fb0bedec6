package shard

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOf: the shard of a name never changes (the figures are pinned: a
// change would move every topic to another replica during an upgrade) and
// names spread over the shards.
func TestOf(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		shard int
	}{
		{"orders", 1, 0},   // one shard holds everything
		{"orders", 0, 0},   // so does a count of 0
		{"orders", 16, 12}, // pinned values of FNV-1a 32 mod n
		{"orders", 4, 0},
		{"payments", 16, 6},
		{"payments", 4, 2},
		{"bench-001", 4, 3},
	}
	for _, c := range cases {
		if got := Of(c.name, c.n); got != c.shard {
			t.Errorf("Of(%q, %d) = %d, want %d", c.name, c.n, got, c.shard)
		}
	}
	counts := make([]int, 4)
	for i := range 10000 {
		counts[Of(fmt.Sprintf("topic-%d", i), 4)]++
	}
	for s, c := range counts {
		if c < 2200 || c > 2800 {
			t.Errorf("shard %d holds %d of 10000 names, want about 2500: %v", s, c, counts)
		}
	}
}

// TestRendezvous: every shard has one owner among the members, each
// member owns its share (count/members, rounded up or down), and a member
// that leaves hands over its own shards while most others stay.
func TestRendezvous(t *testing.T) {
	cases := []struct {
		name    string
		members []string
		count   int
	}{
		{"none", nil, 8},
		{"one", []string{"a"}, 8},
		{"three over four shards", []string{"c", "a", "b"}, 4},
		{"duplicates", []string{"a", "a", "b"}, 8},
		{"more members than shards", []string{"a", "b", "c", "d", "e"}, 3},
		{"four over 64", []string{"r0", "r1", "r2", "r3"}, 64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			owners := Rendezvous(c.members, c.count)
			load := map[string]int{}
			for s, o := range owners {
				if len(c.members) == 0 && o != "" || len(c.members) > 0 && !slices.Contains(c.members, o) {
					t.Errorf("shard %d owned by %q, not a member of %v", s, o, c.members)
				}
				load[o]++
			}
			if len(c.members) == 0 {
				return
			}
			distinct := slices.Compact(slices.Sorted(slices.Values(c.members)))
			lo, hi := c.count/len(distinct), (c.count+len(distinct)-1)/len(distinct)
			for _, m := range distinct {
				if load[m] < lo || load[m] > hi {
					t.Errorf("%s owns %d shards, want %d to %d: %v", m, load[m], lo, hi, owners)
				}
			}
		})
	}
	before := Rendezvous([]string{"r0", "r1", "r2", "r3"}, 64)
	after := Rendezvous([]string{"r0", "r1", "r3"}, 64)
	stayed, others := 0, 0
	for s := range before {
		if before[s] == "r2" {
			if after[s] == "r2" {
				t.Errorf("shard %d stays with r2, which left", s)
			}
			continue
		}
		others++
		if before[s] == after[s] {
			stayed++
		}
	}
	if stayed*4 < others*3 {
		t.Errorf("only %d of the %d shards of the members that stayed kept their owner", stayed, others)
	}
	t.Logf("r2 left: %d of the others' %d shards kept their owner", stayed, others)
}

type member struct {
	a      Assigner
	cancel context.CancelFunc
	done   chan struct{}
}

func run(tb testing.TB, a Assigner) *member {
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{a: a, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(m.done); _ = a.Run(ctx) }()
	tb.Cleanup(m.kill)
	return m
}

// kill stops the member without leaving: as if the process died.
func (m *member) kill() { m.cancel(); <-m.done }

// split polls until the members own every shard exactly once between them
// and returns who owns what; it fails after limit.
func split(tb testing.TB, ms []*member, ids []string, count int, limit time.Duration) map[int]int {
	tb.Helper()
	deadline := time.Now().Add(limit)
	var last map[int]int
	for time.Now().Before(deadline) {
		owner, ok := map[int]int{}, true
		for i, m := range ms {
			shards, synced := m.a.Owned(time.Now())
			ok = ok && synced
			for _, s := range shards {
				if _, dup := owner[s]; dup {
					ok = false
				}
				owner[s] = i
			}
		}
		last = owner
		// Every member sees the same owners as the others own.
		for _, m := range ms {
			for s, o := range m.a.Owners() {
				if i, has := owner[s]; !has || o != ids[i] {
					ok = false
				}
			}
		}
		if ok && len(owner) == count {
			return owner
		}
		time.Sleep(20 * time.Millisecond) // polling the assigners
	}
	tb.Fatalf("the shards are not split among %d members within %v: %v", len(ms), limit, last)
	return nil
}

// rebalance runs four members over 8 shards, kills one without leaving and
// checks that its shards move to the others within the session timeout
// plus one interval; then one leaves gracefully and its shards move at
// once.
func rebalance(t *testing.T, mk func(id string) Assigner, session, every time.Duration) {
	const count = 8
	var ms []*member
	for i := range 4 {
		ms = append(ms, run(t, mk(fmt.Sprintf("r%d", i))))
	}
	ids := []string{"r0", "r1", "r2", "r3"}
	owner := split(t, ms, ids, count, 4*session)
	t.Logf("split: %v", owner)
	victim := owner[0] // a member that owns a shard
	killed := time.Now()
	ms[victim].kill()
	rest := slices.Delete(slices.Clone(ms), victim, victim+1)
	restIDs := slices.Delete(slices.Clone(ids), victim, victim+1)
	split(t, rest, restIDs, count, session+every+session)
	took := time.Since(killed)
	t.Logf("shards moved %v after a member was killed (session %v, interval %v)", took.Round(time.Millisecond), session, every)
	if took > session+every+time.Second {
		t.Errorf("shards moved after %v, want within session %v + interval %v (+1s scheduling)", took, session, every)
	}
	left := time.Now()
	rest[0].a.Release(context.Background())
	if got, _ := rest[0].a.Owned(time.Now()); len(got) != 0 {
		t.Errorf("a released member still owns %v", got)
	}
	split(t, rest[1:], restIDs[1:], count, session)
	t.Logf("shards moved %v after a graceful leave", time.Since(left).Round(time.Millisecond))
}

func TestNATSRebalance(t *testing.T) {
	js := embedded.JetStreamTest(t)
	// Whole seconds: on NATS a key lives for its session rounded up
	// (leader.KeyTTL).
	session, every := 2*time.Second, 100*time.Millisecond
	rebalance(t, func(id string) Assigner {
		return NewNATS(js, "", Config{Cluster: "n", ID: id, Name: "test", Count: 8, Session: session, Every: every}, nil)
	}, session, every)
}

func TestKafkaRebalance(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			addrs := seeds(t)
			name := fmt.Sprintf("lagbridge-shard-test-%d", time.Now().UnixNano())
			// Kafka's group.min.session.timeout.ms defaults to 6s.
			session, every := 6*time.Second, 500*time.Millisecond
			rebalance(t, func(id string) Assigner {
				return NewKafka([]kgo.Opt{kgo.SeedBrokers(addrs...)}, Config{Cluster: "k", ID: id, Name: name, Count: 8, Session: session, Every: every}, nil)
			}, session, every)
		})
	}
}

// TestRunEndsOnRelease: after Release, Run returns while its context is
// still live (with it the group's poll loop, which on a closed client
// would spin), whether the member joined yet or not.
func TestRunEndsOnRelease(t *testing.T) {
	session, every := 6*time.Second, 100*time.Millisecond
	cases := []struct {
		name string
		mk   func(tb testing.TB, id string) Assigner
	}{
		{"kafka (kfake)", func(tb testing.TB, id string) Assigner {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(c.Close)
			return NewKafka([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Config{Cluster: "k", ID: id, Name: "release", Count: 2, Session: session, Every: every}, nil)
		}},
		{"nats", func(tb testing.TB, id string) Assigner {
			return NewNATS(embedded.JetStreamTest(tb), "", Config{Cluster: "n", ID: id, Name: "release", Count: 2, Session: session, Every: every}, nil)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := run(t, tc.mk(t, "r0"))
			split(t, []*member{m}, []string{"r0"}, 2, 4*session)
			m.a.Release(context.Background())
			m.a.Release(context.Background()) // idempotent
			select {
			case <-m.done:
			case <-time.After(10 * every):
				t.Fatalf("Run still runs %v after Release", 10*every)
			}
		})
	}
}

// TestChangedFirstAnswerEmpty: a replica whose first answer from the
// assignment gives it no shard is told so once (OnChange with none, so
// lagbridge_ha_shards_owned reads 0, not the -1 of "not answered yet");
// nothing is told before the first answer, and an answer that changes
// nothing is not told again. TestHAShards/kafka read -1 from a replica
// that joined last and was assigned nothing.
func TestChangedFirstAnswerEmpty(t *testing.T) {
	var told [][]int
	o := &owned{notify: func(s []int) { told = append(told, s) }}
	now := time.Now()
	o.changed(now)
	if len(told) != 0 {
		t.Fatalf("before the first answer: told %v, want nothing", told)
	}
	o.store([]int{}, []string{"a", "b"}, time.Time{})
	o.changed(now)
	o.changed(now)
	if len(told) != 1 || len(told[0]) != 0 {
		t.Fatalf("first answer, no shard: told %v, want [[]] once", told)
	}
	o.store([]int{1}, []string{"a", "me"}, time.Time{})
	o.changed(now)
	if len(told) != 2 || !slices.Equal(told[1], []int{1}) {
		t.Fatalf("then shard 1: told %v, want [[] [1]]", told)
	}
}
