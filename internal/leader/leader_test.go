package leader

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
	lbtest "github.com/lagbridge/lagbridge/internal/testutil"
)

// replica is one elector running under its own context.
type replica struct {
	e      Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func start(tb testing.TB, e Elector) *replica {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{e: e, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = e.Run(ctx) }()
	tb.Cleanup(r.kill)
	return r
}

// kill stops the replica without releasing: as if the process died.
func (r *replica) kill() { r.cancel(); <-r.done }

// leaders returns the replicas that lead at now, among those still running.
func leaders(rs []*replica, now time.Time) []int {
	var out []int
	for i, r := range rs {
		if _, ok := r.e.Leading(now); ok {
			out = append(out, i)
		}
	}
	return out
}

// waitLeader polls until exactly one of rs leads and returns its index and
// epoch; it fails when two lead at once or none within limit.
func waitLeader(tb testing.TB, rs []*replica, limit time.Duration) (int, int64) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		now := time.Now()
		switch l := leaders(rs, now); len(l) {
		case 0:
		case 1:
			epoch, _ := rs[l[0]].e.Leading(now)
			return l[0], epoch
		default:
			tb.Fatalf("replicas %v lead at once", l)
		}
		time.Sleep(10 * time.Millisecond) // polling the electors
	}
	tb.Fatalf("no leader within %v", limit)
	return -1, 0
}

// failover runs three replicas, kills the leader without release and
// checks that another one leads within the session timeout plus one
// interval, in a higher epoch, and that the killed one stops leading by
// its clock; then a graceful release hands over at once.
//
// The replicas log to logs: the released leader says it stepped down
// (before: "following: another replica publishes", also when none ran).
func failover(t *testing.T, logs *lbtest.Buffer, mk func(id string) Elector, session, every time.Duration) {
	var rs []*replica
	for i := range 3 {
		rs = append(rs, start(t, mk(fmt.Sprintf("r%d", i))))
	}
	first, epoch1 := waitLeader(t, rs, 4*session)
	for i, r := range rs {
		if i == first {
			continue
		}
		deadline := time.Now().Add(session)
		for r.e.Role(time.Now()) == RoleUnknown && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the elector
		}
		if got := r.e.Role(time.Now()); got != RoleFollower {
			t.Errorf("replica %d: role %v, want follower", i, got)
		}
	}
	killed := time.Now()
	rs[first].kill()
	dead := rs[first]
	rest := append(append([]*replica{}, rs[:first]...), rs[first+1:]...)
	if _, ok := dead.e.Leading(killed.Add(session)); ok {
		t.Errorf("a killed leader still leads by its clock one session later")
	}
	second, epoch2 := waitLeader(t, rest, session+every+session) // bound generously, measure exactly
	took := time.Since(killed)
	t.Logf("failover after killing the leader: %v (session %v, interval %v)", took.Round(time.Millisecond), session, every)
	if took > session+every+time.Second {
		t.Errorf("new leader after %v, want within session %v + interval %v (+1s scheduling)", took, session, every)
	}
	if epoch2 <= epoch1 {
		t.Errorf("epoch went from %d to %d, want higher", epoch1, epoch2)
	}

	// A graceful release hands over well before the session timeout.
	released := time.Now()
	before := strings.Count(logs.String(), "following: another replica publishes")
	rest[second].e.Release(context.Background())
	if n := strings.Count(logs.String(), "stepped down: this replica stops leading"); n != 1 {
		t.Errorf("%d step-down lines after a release, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "following: another replica publishes"); n != before {
		t.Errorf("the released leader logged that another replica publishes:\n%s", logs.String())
	}
	if _, ok := rest[second].e.Leading(time.Now()); ok {
		t.Errorf("a released leader still leads")
	}
	others := append(append([]*replica{}, rest[:second]...), rest[second+1:]...)
	_, epoch3 := waitLeader(t, others, session)
	t.Logf("handover after a release: %v", time.Since(released).Round(time.Millisecond))
	if epoch3 <= epoch2 {
		t.Errorf("epoch went from %d to %d, want higher", epoch2, epoch3)
	}
}

func TestNATSFailover(t *testing.T) {
	s := embedded.NATSTest(t)
	// Whole seconds: on NATS a key lives for its session rounded up
	// (leader.KeyTTL).
	session, every := 2*time.Second, 100*time.Millisecond
	var logs lbtest.Buffer
	failover(t, &logs, func(id string) Elector {
		nc, err := natsgo.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return NewNATS(js, "", Config{Cluster: "n", ID: id, Name: "test", Session: session, Every: every, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	}, session, every)
}

func TestKafkaFailover(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			addrs := seeds(t)
			election := fmt.Sprintf("lagbridge-test-%d", time.Now().UnixNano())
			// Kafka's group.min.session.timeout.ms defaults to 6s.
			session, every := 6*time.Second, 500*time.Millisecond
			var logs lbtest.Buffer
			failover(t, &logs, func(id string) Elector {
				return NewKafka([]kgo.Opt{kgo.SeedBrokers(addrs...)}, Config{Cluster: "k", ID: id, Name: election, Session: session, Every: every, Log: slog.New(slog.NewTextHandler(&logs, nil))})
			}, session, every)
		})
	}
}

// TestLeaseExpires: a leader whose confirmations stop (paused) stops
// leading by the clock, without hearing from the broker.
func TestLeaseExpires(t *testing.T) {
	var l lease
	var mu sync.Mutex
	var roles []Role
	l.onRole = func(r Role, _ int64, _ bool) { mu.Lock(); roles = append(roles, r); mu.Unlock() }
	t0 := time.Unix(1000, 0)
	if got := l.role(t0); got != RoleUnknown {
		t.Fatalf("role before any answer: %v", got)
	}
	l.confirm(t0, 7, 4*time.Second)
	cases := []struct {
		name string
		at   time.Duration
		lead bool
	}{
		{"at confirmation", 0, true},
		{"just before ttl", 4*time.Second - time.Nanosecond, true},
		{"at ttl", 4 * time.Second, false},
		{"long after (resumed from SIGSTOP)", time.Hour, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			epoch, ok := l.leading(t0.Add(c.at))
			if ok != c.lead || epoch != 7 {
				t.Errorf("leading = %d, %v; want 7, %v", epoch, ok, c.lead)
			}
		})
	}
	l.notify(t0.Add(time.Hour))
	if len(roles) != 2 || roles[0] != RoleLeader || roles[1] != RoleFollower {
		t.Errorf("roles notified %v, want [leader follower]", roles)
	}
}

// TestKafkaRevokedDuringConfirmation: a revocation of partition 0 (or a
// Release) that arrives while the leader's confirming commit is in flight
// wins over that commit's success: the replica does not lead again on it,
// so it never leads beside the member that now owns partition 0.
func TestKafkaRevokedDuringConfirmation(t *testing.T) {
	cases := []struct {
		name string
		// during runs while the broker handles the confirming commit.
		during func(k *Kafka)
		lead   bool
	}{
		{"nothing happens: the commit confirms", func(*Kafka) {}, true},
		{"partition 0 revoked", func(k *Kafka) {
			k.revoked(context.Background(), nil, map[string][]int32{k.topic: {0}})
		}, false},
		{"released", func(k *Kafka) { k.Release(context.Background()) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			seeds := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
			k := NewKafka(seeds, Config{Cluster: "k", ID: "r0", Name: "revoke", Session: 6 * time.Second, Every: time.Second})
			ctx := context.Background()
			if err := k.m.CreateTopic(ctx); err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(seeds, kgo.ConsumerGroup(k.cfg.Name), kgo.ConsumeTopics(k.topic), kgo.DisableAutoCommit(),
				kgo.OnPartitionsAssigned(k.assigned), kgo.OnPartitionsRevoked(k.revoked))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			pctx, cancel := context.WithCancel(ctx)
			polled := make(chan struct{})
			go func() { // the group is served while polled
				defer close(polled)
				for pctx.Err() == nil {
					cl.PollFetches(pctx)
				}
			}()
			t.Cleanup(func() { cancel(); <-polled })
			deadline := time.Now().Add(10 * time.Second)
			for {
				k.mu.Lock()
				owns := k.owns
				k.mu.Unlock()
				if owns {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("partition 0 not assigned within 10s")
				}
				time.Sleep(10 * time.Millisecond) // polling the group's assignment
			}
			c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
				tc.during(k)
				return nil, nil, false // the broker answers the commit as usual
			})
			if err := k.round(ctx, cl); err != nil {
				t.Fatal(err)
			}
			if _, ok := k.Leading(time.Now()); ok != tc.lead {
				t.Errorf("leading after the round = %v, want %v", ok, tc.lead)
			}
		})
	}
}

// TestRunEndsOnRelease: after Release, Run returns while its context is
// still live (its poll loop and ticker stop with it), whether the replica
// led or followed.
func TestRunEndsOnRelease(t *testing.T) {
	session, every := 6*time.Second, 100*time.Millisecond
	cases := []struct {
		name string
		// mk returns n electors of one election on a fresh broker.
		mk func(tb testing.TB, n int) []Elector
	}{
		{"kafka (kfake)", func(tb testing.TB, n int) []Elector {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(c.Close)
			var es []Elector
			for i := range n {
				es = append(es, NewKafka([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Config{Cluster: "k", ID: fmt.Sprintf("r%d", i), Name: "release", Session: session, Every: every}))
			}
			return es
		}},
		{"nats", func(tb testing.TB, n int) []Elector {
			s := embedded.NATSTest(tb)
			var es []Elector
			for i := range n {
				es = append(es, NewNATS(embedded.Connect(tb, s), "", Config{Cluster: "n", ID: fmt.Sprintf("r%d", i), Name: "release", Session: session, Every: every}))
			}
			return es
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es := tc.mk(t, 2)
			var rs []*replica
			for _, e := range es {
				rs = append(rs, start(t, e))
			}
			first, _ := waitLeader(t, rs, 4*session)
			other := rs[1-first]
			deadline := time.Now().Add(session)
			for other.e.Role(time.Now()) == RoleUnknown && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polling the elector
			}
			for _, r := range []*replica{other, rs[first]} { // the follower, then the leader
				r.e.Release(context.Background())
				r.e.Release(context.Background()) // idempotent
				select {
				case <-r.done:
				case <-time.After(10 * every):
					t.Fatalf("Run still runs %v after Release (role %v)", 10*every, r.e.Role(time.Now()))
				}
			}
		})
	}
}
