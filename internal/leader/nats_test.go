package leader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/groupmember"
)

// watchOne polls the replicas of every deployment for d and fails as soon
// as two replicas of one deployment lead at once; at the end every
// deployment must have a leader.
func watchOne(t *testing.T, deployments map[string][]*replica, d time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		now := time.Now()
		for name, rs := range deployments {
			if l := leaders(rs, now); len(l) > 1 {
				var epochs []int64
				for _, i := range l {
					e, _ := rs[i].e.Leading(now)
					epochs = append(epochs, e)
				}
				t.Fatalf("deployment %s: replicas %v lead at once (epochs %v) after %v", name, l, epochs, now.Sub(start).Round(time.Millisecond))
			}
		}
		time.Sleep(10 * time.Millisecond) // polling the electors
	}
	for name, rs := range deployments {
		if len(leaders(rs, time.Now())) != 1 {
			t.Errorf("deployment %s: no leader after %v", name, d)
		}
	}
}

// TestNATSSessionsApart: deployments whose ha.sessionTimeout differ share a
// NATS account, and replicas of one deployment differ too (a rolling
// change of the setting). A key must live for its own writer's session,
// whoever started last: never two leaders of one deployment. (Before the
// keys carried their own time to live, the bucket's was the last
// starter's, and the 3 s leader's key expired between its renewals.)
func TestNATSSessionsApart(t *testing.T) {
	s := embedded.NATSTest(t)
	mk := func(name, id string, session, every time.Duration) *replica {
		return start(t, NewNATS(embedded.Connect(t, s), "", Config{Cluster: "n", ID: id, Name: name, Session: session, Every: every}))
	}
	deployments := map[string][]*replica{}
	// Two replicas at 3 s, then one at 600 ms in the same deployment.
	deployments["mixed"] = []*replica{mk("mixed", "m0", 3*time.Second, time.Second), mk("mixed", "m1", 3*time.Second, time.Second)}
	waitLeader(t, deployments["mixed"], 12*time.Second)
	deployments["mixed"] = append(deployments["mixed"], mk("mixed", "m2", 600*time.Millisecond, 200*time.Millisecond))
	// A deployment at 3 s, started before one at 600 ms.
	deployments["long"] = []*replica{mk("long", "l0", 3*time.Second, time.Second), mk("long", "l1", 3*time.Second, time.Second)}
	waitLeader(t, deployments["long"], 12*time.Second)
	deployments["short"] = []*replica{mk("short", "s0", 600*time.Millisecond, 200*time.Millisecond), mk("short", "s1", 600*time.Millisecond, 200*time.Millisecond)}
	watchOne(t, deployments, 7*time.Second)
	for name, rs := range deployments {
		for i, r := range rs {
			t.Logf("%s/%d: %v", name, i, r.e.Role(time.Now()))
		}
	}

}

// v0 is a replica of the versions before one bucket per deployment,
// electing in LegacyBucket as they did (NATS.round of then: the bucket's
// age limit set to its own session by every starter, the epoch the
// creation's revision): what a rolling upgrade runs beside the new ones.
type v0 struct {
	js  jetstream.JetStream
	cfg Config
	kv  jetstream.KeyValue
	// mu: one round or Release at a time; released: no round after
	// Release.
	mu       sync.Mutex
	rev      uint64
	released bool
	stopped  chan struct{}
	lease
}

func newV0(js jetstream.JetStream, cfg Config) *v0 {
	return &v0{js: js, cfg: cfg, stopped: make(chan struct{})}
}

func (o *v0) Cluster() string                     { return o.cfg.Cluster }
func (o *v0) Leading(now time.Time) (int64, bool) { return o.leading(now) }
func (o *v0) Role(now time.Time) Role             { return o.role(now) }

func (o *v0) Run(ctx context.Context) error {
	groupmember.Rounds(ctx, o.stopped, o.cfg.every(), func() {
		o.round(ctx)
		o.notify(time.Now())
	})
	return nil
}

func (o *v0) round(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.released {
		return
	}
	if o.kv == nil {
		kv, err := o.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: LegacyBucket, History: 1, TTL: o.cfg.Session})
		if err != nil {
			return
		}
		o.kv = kv
	}
	sent := time.Now()
	if o.rev != 0 {
		rev, err := o.kv.Update(ctx, o.cfg.Name, []byte(o.cfg.ID), o.rev)
		switch {
		case err == nil:
			o.rev = rev
			o.confirm(sent, o.epoch, o.cfg.ttl())
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
			o.rev = 0
			o.follow(time.Now())
		}
		return
	}
	rev, err := o.kv.Create(ctx, o.cfg.Name, []byte(o.cfg.ID))
	switch {
	case err == nil:
		o.rev = rev
		o.confirm(sent, int64(rev), o.cfg.ttl())
	case errors.Is(err, jetstream.ErrKeyExists):
		o.follow(time.Now())
	}
}

// Release stops the rounds, waits for one in flight, then deletes the key.
func (o *v0) Release(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.released {
		return
	}
	o.released = true
	close(o.stopped)
	if o.rev != 0 {
		_ = o.kv.Delete(ctx, o.cfg.Name, jetstream.LastRevision(o.rev))
		o.rev = 0
		o.follow(time.Now())
	}
}

// atMostOne polls rs for d and fails as soon as two lead at once.
func atMostOne(t *testing.T, rs []*replica, d time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		if l := leaders(rs, time.Now()); len(l) > 1 {
			t.Fatalf("replicas %v lead at once, %v into the step", l, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond) // polling the electors
	}
}

// TestNATSRollingUpgrade: three replicas of the version that elected in
// the shared LegacyBucket are replaced one by one with this version's,
// which elect in their own bucket (two stopped gracefully, the last
// killed). At no time do two replicas lead, old or new; a new one leads at
// the end, in an epoch above the old leader's, and takes over the KV
// fence the old leader held.
func TestNATSRollingUpgrade(t *testing.T) {
	s := embedded.NATSTest(t)
	session, every := 2*time.Second, 200*time.Millisecond
	cfg := func(id string) Config {
		return Config{Cluster: "n", ID: id, Name: "up", Session: session, Every: every, LegacyBucket: LegacyBucket}
	}
	var all []*replica
	for i := range 3 {
		all = append(all, start(t, newV0(embedded.Connect(t, s), cfg(fmt.Sprintf("old%d", i)))))
	}
	_, oldEpoch := waitLeader(t, all, 4*session)
	js := embedded.Connect(t, s)
	ctx := context.Background()
	qkv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "up_quotas", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKVFence(js, qkv).Put(ctx, oldEpoch, "p.t", []byte("old")); err != nil {
		t.Fatalf("the old leader's fenced write: %v", err)
	}
	for i := range 3 {
		if i < 2 {
			all[i].e.Release(ctx) // a rolling upgrade stops a pod gracefully
		}
		all[i].kill()
		all = append(all, start(t, NewNATS(embedded.Connect(t, s), "", cfg(fmt.Sprintf("new%d", i)))))
		atMostOne(t, all, session+4*every)
	}
	_, newEpoch := waitLeader(t, all[3:], 2*session)
	atMostOne(t, all, session)
	if newEpoch <= oldEpoch {
		t.Errorf("epoch went from %d to %d, want higher", oldEpoch, newEpoch)
	}
	if _, err := NewKVFence(js, qkv).Put(ctx, newEpoch, "p.t", []byte("new")); err != nil {
		t.Errorf("the new leader's fenced write: %v", err)
	}
	if _, err := NewKVFence(js, qkv).Put(ctx, oldEpoch, "p.t", []byte("old again")); !errors.Is(err, ErrFenced) {
		t.Errorf("the old leader's write after the new one's: %v, want ErrFenced", err)
	}
}

// TestNATSReleaseLeavesNothing: a released key leaves no marker behind
// for good (the bucket has no age limit): the bucket's stream empties.
func TestNATSReleaseLeavesNothing(t *testing.T) {
	js := embedded.JetStreamTest(t)
	r := start(t, NewNATS(js, "", Config{Cluster: "n", ID: "r0", Name: "gone", Session: 2 * time.Second, Every: 100 * time.Millisecond}))
	waitLeader(t, []*replica{r}, 5*time.Second)
	r.e.Release(context.Background())
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := js.Stream(ctx, "KV_"+Bucket("gone"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages left in the bucket 5s after the release", info.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond) // polling the stream
	}
}

// TestNATSLegacyBucketOutOfReach: on an account whose permissions do not
// reach the bucket of earlier versions, a replica that looks it up never
// leads and says how to skip it (ha.ignoreLegacyBuckets); one that skips
// it leads.
func TestNATSLegacyBucketOutOfReach(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "lb", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.INFO.KV_" + LegacyBucket, "$KV." + LegacyBucket + ".>"}},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func() jetstream.JetStream {
		nc, err := natsgo.Connect(s.ClientURL(), natsgo.UserInfo("lb", "pw"), natsgo.ErrorHandler(func(*natsgo.Conn, *natsgo.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	cfg := Config{Cluster: "n", ID: "r0", Name: "acl", Session: 2 * time.Second, Every: 200 * time.Millisecond, LegacyBucket: LegacyBucket}
	looks := NewNATS(connect(), "", cfg)
	err = looks.round(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ha.ignoreLegacyBuckets: true") {
		t.Fatalf("round: %v, want an error naming ha.ignoreLegacyBuckets", err)
	}
	if _, ok := looks.Leading(time.Now()); ok {
		t.Fatalf("a replica that could not look the legacy bucket up leads")
	}
	t.Log(err)
	looks.Release(context.Background())
	cfg.LegacyBucket = ""
	skips := start(t, NewNATS(connect(), "", cfg))
	waitLeader(t, []*replica{skips}, 4*time.Second)
}

// TestNATSUpgradeNoWayBack: once this version led, an earlier version's
// replica (one restarted during the rollout) does not lead again while
// replicas of this version run: handovers between them keep the legacy
// key (an old leader now would hold an epoch the KV fences refuse). When
// none of this version is left, the old replica leads after the legacy
// bucket's age limit.
func TestNATSUpgradeNoWayBack(t *testing.T) {
	s := embedded.NATSTest(t)
	session, every := 2*time.Second, 100*time.Millisecond
	cfg := func(id string) Config {
		return Config{Cluster: "n", ID: id, Name: "back", Session: session, Every: every, LegacyBucket: LegacyBucket}
	}
	old1 := start(t, newV0(embedded.Connect(t, s), cfg("old1")))
	waitLeader(t, []*replica{old1}, 4*session)
	news := []*replica{start(t, NewNATS(embedded.Connect(t, s), "", cfg("new0"))), start(t, NewNATS(embedded.Connect(t, s), "", cfg("new1")))}
	atMostOne(t, append([]*replica{old1}, news...), 3*every)
	old1.e.Release(context.Background())
	old1.kill()
	lead, _ := waitLeader(t, news, 2*session)
	old2 := start(t, newV0(embedded.Connect(t, s), cfg("old2")))
	for round := range 4 {
		news[lead].e.Release(context.Background())
		news[lead].kill()
		news[lead] = start(t, NewNATS(embedded.Connect(t, s), "", cfg(fmt.Sprintf("new%d-%d", lead, round))))
		all := append([]*replica{old2}, news...)
		deadline := time.Now().Add(2 * session)
		for lead = -1; lead < 0; {
			l := leaders(all, time.Now())
			switch {
			case len(l) > 1:
				t.Fatalf("handover %d: replicas %v lead at once", round, l)
			case len(l) == 1 && l[0] == 0:
				t.Fatalf("handover %d: the old replica leads again", round)
			case len(l) == 1:
				lead = l[0] - 1
			case time.Now().After(deadline):
				t.Fatalf("handover %d: no leader within %v", round, 2*session)
			}
			time.Sleep(10 * time.Millisecond) // polling the electors
		}
		atMostOne(t, all, 3*every)
	}
	// Nothing of this version left: the old one leads once the legacy
	// key expired.
	for _, r := range news {
		r.e.Release(context.Background())
		r.kill()
	}
	waitLeader(t, []*replica{old2}, 3*session)
}

// slowLink forwards TCP connections to addr, holding every chunk for
// delay each way: a server some way off, which loopback cannot be.
func slowLink(tb testing.TB, addr string, delay time.Duration) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				time.Sleep(delay) // the link's latency
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = dst.Close()
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	return ln.Addr().String()
}

// TestNATSDistantServer: an election round is a few requests in sequence
// (more while the legacy bucket exists); with 60 ms each way to the
// server and a 100 ms interval it takes longer than the interval, and a
// replica still leads.
func TestNATSDistantServer(t *testing.T) {
	s := embedded.NATSTest(t)
	if _, err := embedded.Connect(t, s).CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: LegacyBucket, History: 1, TTL: 6 * time.Second}); err != nil {
		t.Fatal(err)
	}
	nc, err := natsgo.Connect("nats://"+slowLink(t, s.Addr().String(), 60*time.Millisecond), natsgo.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, NewNATS(js, "", Config{Cluster: "n", ID: "far", Name: "far", Session: 3 * time.Second, Every: 100 * time.Millisecond, LegacyBucket: LegacyBucket}))
	waitLeader(t, []*replica{r}, 20*time.Second)
}
