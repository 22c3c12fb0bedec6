package replica

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// encodeDecisions is a decisions record as a leader writes it.
func encodeDecisions(tb testing.TB, rec decisionsRecord) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(rec); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestStandInAgainstFreshRecord: a follower decides the leader is silent
// and, at that very moment, a fresh record of the leader arrives on the
// channel's goroutine. Whichever comes first, the follower ends serving
// the leader's sets: it never stands in against a leader it has just
// heard from.
func TestStandInAgainstFreshRecord(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := quotaserver.NewHub()
	t.Cleanup(hub.Close)
	const silence = time.Second
	r := New(Config{Elector: &role{}, Hub: hub, Lifetime: time.Minute, Silence: silence, Log: log})
	eng, err := engine.New(engine.Config{Hub: r.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetEngine(eng)
	r.synced, r.lastLeader = true, time.Now().Add(-2*silence)
	rate := 5.0
	fresh := encodeDecisions(t, decisionsRecord{At: time.Now(), By: "leader", Rates: []targetRate{{Target: ordersTarget, Rate: &rate}}})
	done := make(chan struct{})
	started := false
	r.sink.beforeAct = func(on bool) {
		if !on || started {
			return
		}
		started = true
		// The record arrives between the decision and the start: give
		// it all the time it needs unless it waits for the start.
		go func() { r.followDecisions(fresh); close(done) }()
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	r.checkSilence(time.Now())
	<-done
	if !started {
		t.Fatal("the follower did not take the leader for silent")
	}
	r.sink.mu.Lock()
	acting := r.sink.acting
	r.sink.mu.Unlock()
	if acting {
		t.Error("the follower stands in although the leader's fresh record was read")
	}
}

// slowSets is a channel whose set writes each take delay: a broker far
// away, or many producers.
type slowSets struct {
	Channel
	delay time.Duration
}

func (c slowSets) Put(ctx context.Context, k string, v []byte) error {
	if strings.HasPrefix(k, kindSet+".") {
		time.Sleep(c.delay)
	}
	return c.Channel.Put(ctx, k, v)
}

// TestSlowLeaderNotSilent: on the embedded nats-server, a leader whose
// sets take three times Silence to write (40 producers, 40 ms each), their
// producers reporting as producers do, still renews its decisions record:
// its follower never stands in against it.
func TestSlowLeaderNotSilent(t *testing.T) {
	js := embedded.JetStreamTest(t)
	const silence = 500 * time.Millisecond
	set := func(c *Config) { c.Silence = silence }
	lead := newNodeWith(t, slowSets{NewNATS(js, NATSBucket("slow")), 40 * time.Millisecond}, true, set)
	follow := newNodeWith(t, NewNATS(js, NATSBucket("slow")), false, set)
	report := func() { reportForty(t, lead, "p") }
	report()
	waitHeard(t, follow)
	end := time.Now().Add(3 * time.Second)
	for next := time.Now(); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(next) {
			report()
			next = time.Now().Add(200 * time.Millisecond)
		}
		follow.rep.sink.mu.Lock()
		acting := follow.rep.sink.acting
		follow.rep.sink.mu.Unlock()
		if acting {
			t.Fatal("the follower stands in against a leader that writes its sets")
		}
	}
}

// reportForty has forty producers (prefix0 to prefix39) report the topic
// orders to lead, as producers do.
func reportForty(t *testing.T, lead *node, prefix string) {
	t.Helper()
	for i := range 40 {
		if _, err := lead.rep.Report(quotaproto.Report{Producer: fmt.Sprintf("%s%d", prefix, i), Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitHeard waits until follow has read a decisions record of the leader.
func waitHeard(t *testing.T, follow *node) {
	t.Helper()
	waitFor(t, "the follower heard from the leader", func() bool {
		follow.rep.mu.Lock()
		defer follow.rep.mu.Unlock()
		return !follow.rep.lastLeader.IsZero()
	})
}

// TestStandInHoldsWhileLeaderRewrites: a follower standing in hears from
// a leader that took over and is still rewriting its sets (its records
// say so): it goes on serving its own sets, which are newer than the
// lost leader's it would serve instead, until a record says the sets are
// written.
func TestStandInHoldsWhileLeaderRewrites(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := quotaserver.NewHub()
	t.Cleanup(hub.Close)
	const silence = time.Second
	r := New(Config{Elector: &role{}, Hub: hub, Lifetime: time.Minute, Silence: silence, Log: log})
	eng, err := engine.New(engine.Config{Hub: r.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetEngine(eng)
	r.synced, r.lastLeader = true, time.Now().Add(-2*silence)
	acting := func() bool {
		r.sink.mu.Lock()
		defer r.sink.mu.Unlock()
		return r.sink.acting
	}
	r.checkSilence(time.Now())
	if !acting() {
		t.Fatal("the follower does not stand in for a silent leader")
	}
	r.followDecisions(encodeDecisions(t, decisionsRecord{At: time.Now(), By: "next", Rewriting: true}))
	r.checkSilence(time.Now())
	if !acting() {
		t.Error("the follower stopped standing in while the new leader rewrites its sets")
	}
	r.followDecisions(encodeDecisions(t, decisionsRecord{At: time.Now(), By: "next"}))
	if acting() {
		t.Error("the follower stands in after the new leader wrote its sets")
	}
	r.checkSilence(time.Now())
	if acting() {
		t.Error("the follower stands in again after the new leader wrote its sets")
	}
}

// TestClientQuotaStandIn: on the embedded nats-server, three replicas;
// the leader dies. Once the followers stand in, exactly one of them (the
// same, by both followers' reading) writes the client quotas, and only
// until the lost leader's session could end; a new leader's record ends
// it at once.
func TestClientQuotaStandIn(t *testing.T) {
	js := embedded.JetStreamTest(t)
	const silence, session = 300 * time.Millisecond, 1500 * time.Millisecond
	mk := func(id string, lead bool) *node {
		return newNodeWith(t, NewNATS(js, NATSBucket("cq")), lead, func(c *Config) { c.Silence, c.Session, c.ID = silence, session, id })
	}
	lead, f1, f2 := mk("r0", true), mk("r1", false), mk("r2", false)
	if _, err := f1.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	waitPresent(t, lead, f1, f2)
	writers := func(now time.Time) (ids []string, until time.Time) {
		for _, n := range []*node{f1, f2} {
			if u, ok := n.rep.ClientQuotaStandIn(now); ok {
				ids, until = append(ids, n.rep.cfg.ID), u
			}
		}
		return ids, until
	}
	if ids, _ := writers(time.Now()); len(ids) != 0 {
		t.Fatalf("%v write client quotas while the leader lives", ids)
	}
	lead.stop()
	waitFor(t, "both followers stand in", func() bool { return f1.rep.sink.isActing() && f2.rep.sink.isActing() })
	ids, until := writers(time.Now())
	f1.rep.mu.Lock()
	first, last := f1.rep.rankFirst(), f1.rep.lastLeader
	f1.rep.mu.Unlock()
	if len(ids) != 1 || ids[0] != first || first == "r0" {
		t.Fatalf("client quota writers %v while standing in, want exactly the live follower ranked first (%s)", ids, first)
	}
	if want := last.Add(session - session/5); !until.Equal(want) {
		t.Errorf("the stand-in writes until %v, want the lost leader's last record + 4/5 of the session (%v)", until, want)
	}
	if ids, _ := writers(until); len(ids) != 0 {
		t.Errorf("%v write client quotas when the lost leader's session may end", ids)
	}
	// A new leader's first record (still rewriting) ends it at once.
	next := f1
	if first == "r1" {
		next = f2
	}
	next.el.lead.Store(true)
	waitFor(t, "the stand-in read the new leader's record", func() bool {
		ids, _ := writers(time.Now())
		return len(ids) == 0
	})
	if time.Now().After(until) {
		t.Skip("the machine was too slow to tell the new leader's record from the stand-in's deadline")
	}
}

// TestServeBeforeClientQuotas: on the embedded nats-server, three
// replicas whose followers serve their own sets after Config.Serve, a
// third of Silence; the leader dies. The followers serve their own sets
// once it has been silent for Serve, well before Silence (the sets it
// left may have been made for one interval: a step down to 0), while
// the client quotas wait: no follower writes them until the leader has
// been silent for Silence, then exactly one does.
func TestServeBeforeClientQuotas(t *testing.T) {
	js := embedded.JetStreamTest(t)
	const serve, silence, session = 200 * time.Millisecond, 600 * time.Millisecond, 3 * time.Second
	mk := func(id string, lead bool) *node {
		return newNodeWith(t, NewNATS(js, NATSBucket("sv")), lead, func(c *Config) {
			c.Serve, c.Silence, c.Session, c.ID = serve, silence, session, id
		})
	}
	lead, f1, f2 := mk("r0", true), mk("r1", false), mk("r2", false)
	if _, err := f1.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	waitPresent(t, lead, f1, f2)
	lead.stop()
	waitFor(t, "both followers serve their own sets", func() bool { return f1.rep.sink.isActing() && f2.rep.sink.isActing() })
	f1.rep.mu.Lock()
	last := f1.rep.lastLeader
	f1.rep.mu.Unlock()
	if since := time.Since(last); since >= silence {
		t.Fatalf("the followers served their own sets %v after the leader's last record, want after Serve (%v), before Silence (%v)", since, serve, silence)
	}
	writers := func(now time.Time) (ids []string) {
		for _, n := range []*node{f1, f2} {
			if _, ok := n.rep.ClientQuotaStandIn(now); ok {
				ids = append(ids, n.rep.cfg.ID)
			}
		}
		return ids
	}
	if ids := writers(last.Add(silence)); len(ids) != 0 {
		t.Errorf("%v write client quotas %v after the leader's last record, before Silence (%v)", ids, silence, silence)
	}
	if ids := writers(last.Add(silence + 50*time.Millisecond)); len(ids) != 1 {
		t.Errorf("client quota writers %v past Silence, want exactly one", ids)
	}
}

// TestClientQuotaStandInStalledRead: the followers' reads of the lease
// state stall (on a Kafka lease topic of one partition, a transaction the
// killed leader left open holds every later record, presence included,
// from them until the next leader's first write or the broker's abort): the newest presence
// records they read grow older than Silence. They still name one and the
// same stand-in, never each itself.
func TestClientQuotaStandInStalledRead(t *testing.T) {
	const silence, session = time.Second, 10 * time.Second
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	stalled := time.Now().Add(-3 * silence) // the last record read
	var first []string
	for _, id := range []string{"r1", "r2", "r3"} {
		r := New(Config{Elector: &role{}, Lifetime: time.Minute, Silence: silence, Session: session, ID: id, Log: log})
		r.present = map[string]time.Time{"r0": stalled, "r1": stalled.Add(-100 * time.Millisecond),
			"r2": stalled.Add(-200 * time.Millisecond), "r3": stalled.Add(-300 * time.Millisecond), "gone": stalled.Add(-2 * silence)}
		r.leaderID = "r0"
		r.sink.acting = true
		r.standFrom, r.lastLeader = stalled, stalled
		if _, ok := r.ClientQuotaStandIn(time.Now()); ok {
			first = append(first, id)
		}
		if got := r.rankFirst(); got == "r0" || got == "gone" || got == "" {
			t.Errorf("%s ranks %q first: the lost leader, a replica gone, or none", id, got)
		}
	}
	if len(first) != 1 {
		t.Fatalf("client quota writers %v with the reads stalled, want exactly one", first)
	}
}

// TestSlowLeaderNotSilentKafka: on the lease state topic, a leader whose
// publish is slow to commit (three times Silence between the produce of
// its sets and their commit: many producers' sets, a slow transaction
// coordinator) still renews its decisions record: its follower never
// stands in against it. The record waits neither for the publish's lock
// nor, on a partition of its own, behind the open transaction that
// hides everything after it on its partition from read_committed readers.
func TestSlowLeaderNotSilentKafka(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
			topic := leaseTopic("slow")
			t.Cleanup(func() { deleteTopic(opts, topic) }) // after the replicas stopped
			slowLeaderKafka(t, opts, topic)
		})
	}
}

// slowLeaderKafka runs TestSlowLeaderNotSilentKafka on topic.
func slowLeaderKafka(t *testing.T, opts []kgo.Opt, topic string) {
	const silence = 600 * time.Millisecond
	set := func(c *Config) { c.Silence, c.Interval = silence, 100*time.Millisecond }
	slow := NewKafka(opts, topic).(*kafkaChannel)
	var slowed atomic.Int32
	slow.beforeCommit = func(recs []*kgo.Record) {
		if strings.HasPrefix(string(recs[0].Key), kindSet+".") {
			slowed.Add(1)
			time.Sleep(3 * silence)
		}
	}
	t.Cleanup(slow.Close)
	lead := newNodeWith(t, leaderWrites{slow}, true, set)
	plain := NewKafka(opts, topic)
	t.Cleanup(plain.Close)
	follow := newNodeWith(t, plain, false, set)
	// Producers come and go: every publish writes sets.
	round := 0
	report := func() {
		round++
		reportForty(t, lead, fmt.Sprintf("p%d-", round))
	}
	report()
	waitHeard(t, follow)
	// At least 5 s, and two slow publishes over (on a loaded machine the
	// first may take long to come).
	end, limit := time.Now().Add(5*time.Second), time.Now().Add(30*time.Second)
	for next := time.Now(); time.Now().Before(limit) && (time.Now().Before(end) || slowed.Load() < 3); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(next) {
			report()
			next = time.Now().Add(200 * time.Millisecond)
		}
		if follow.rep.sink.isActing() {
			t.Fatalf("the follower stands in against a leader that writes its sets (%d slow commits)", slowed.Load())
		}
	}
	if slowed.Load() < 3 {
		t.Errorf("%d slow commits of the sets began within 30 s, want 3 or more", slowed.Load())
	}
}

// deleteTopic deletes a test's topic.
func deleteTopic(opts []kgo.Opt, topic string) {
	if cl, err := kgo.NewClient(opts...); err == nil {
		_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic)
		cl.Close()
	}
}

// leaderWrites gives a leader's writes (its sets, the deletions of a
// publish, its decisions record) an epoch, as leader.Fence does under a
// real election: the test's role has no lease.
type leaderWrites struct{ *kafkaChannel }

func (c leaderWrites) Put(ctx context.Context, k string, v []byte) error {
	if strings.HasPrefix(k, kindSet+".") || k == decisionsKey {
		ctx = leader.WithEpoch(ctx, 1)
	}
	return c.kafkaChannel.Put(ctx, k, v)
}

func (c leaderWrites) PutAll(ctx context.Context, es []entry) error {
	return c.kafkaChannel.PutAll(leader.WithEpoch(ctx, 1), es)
}

// waitPresent waits until each of the three replicas heard the others'
// presence and f1 read the leader's record.
func waitPresent(t *testing.T, lead, f1, f2 *node) {
	t.Helper()
	waitFor(t, "every replica heard the others' presence and the leader", func() bool {
		for _, n := range []*node{lead, f1, f2} {
			n.rep.mu.Lock()
			k := len(n.rep.present)
			n.rep.mu.Unlock()
			if k < 3 {
				return false
			}
		}
		f1.rep.mu.Lock()
		defer f1.rep.mu.Unlock()
		return !f1.rep.lastLeader.IsZero()
	})
}
