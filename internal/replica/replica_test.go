package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/quota"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestSink: a follower's hub serves the replicated sets, never the
// engine's; on leading it serves only the engine's producers, each a new
// version once its write landed (a new producer's at once); a follower
// again serves replicated sets as they come.
func TestSink(t *testing.T) {
	hub := quotaserver.NewHub()
	s := &sink{hub: hub, own: map[string]quotaproto.LeaseSet{}}
	set := func(p string, v uint64) quotaproto.LeaseSet { return quotaproto.LeaseSet{Producer: p, Version: v} }
	served := func(p string) uint64 {
		got, _, ok := hub.Current(p)
		if !ok {
			return 0
		}
		return got.Version
	}
	steps := []struct {
		name string
		do   func()
		want map[string]uint64 // producer -> served version; 0: none
	}{
		{"engine set while following is not served", func() { s.Publish(set("a", 5)) }, map[string]uint64{"a": 0}},
		{"replicated sets are served", func() { s.follow(set("a", 7)); s.follow(set("x", 8)) }, map[string]uint64{"a": 7, "x": 8}},
		{"replicated removal", func() { s.unfollow("x") }, map[string]uint64{"a": 7, "x": 0}},
		{"leading keeps a served set until the engine's landed, and only the engine's producers", func() {
			s.follow(set("y", 9))
			s.Publish(set("a", 10))
			s.lead(true)
		}, map[string]uint64{"a": 7, "y": 0}},
		{"leading serves the engine's set once written", func() { s.landed([]quotaproto.LeaseSet{set("a", 10)}) }, map[string]uint64{"a": 10}},
		{"replicated sets are ignored while leading", func() { s.follow(set("a", 3)) }, map[string]uint64{"a": 10}},
		{"a new producer's set is served at once while leading", func() { s.Publish(set("b", 11)); s.Remove("a") }, map[string]uint64{"a": 0, "b": 11}},
		{"a new version waits for its write", func() { s.Publish(set("b", 12)) }, map[string]uint64{"b": 11}},
		{"a newer one meanwhile: the written one is served", func() {
			s.Publish(set("b", 13))
			s.landed([]quotaproto.LeaseSet{set("b", 12)})
		}, map[string]uint64{"b": 12}},
		{"an older write landing late is not", func() {
			s.landed([]quotaproto.LeaseSet{set("b", 13)})
			s.landed([]quotaproto.LeaseSet{set("b", 12)})
		}, map[string]uint64{"b": 13}},
		{"following again", func() { s.lead(false); s.follow(set("b", 14)); s.Publish(set("b", 15)) }, map[string]uint64{"b": 14}},
		{"a set replicated while leading is served once following", func() {
			s.lead(true)
			s.follow(set("c", 20))
			s.lead(false)
		}, map[string]uint64{"c": 20}},
	}
	for _, st := range steps {
		st.do()
		for p, v := range st.want {
			if got := served(p); got != v {
				t.Errorf("%s: %s served at version %d, want %d", st.name, p, got, v)
			}
		}
	}
}

// role is an election whose outcome the test sets: which replica leads is
// what no broker plays on cue.
type role struct {
	leader.Single
	lead atomic.Bool
}

func (r *role) Leading(time.Time) (int64, bool) { return 1, r.lead.Load() }
func (r *role) Role(time.Time) leader.Role {
	if r.lead.Load() {
		return leader.RoleLeader
	}
	return leader.RoleFollower
}

// node is one replica: engine, served hub, replicator on a shared channel.
type node struct {
	hub *quotaserver.Hub
	eng *engine.Engine
	rep *Replicator
	el  *role
	// stop ends the replica as a kill would: it writes nothing more.
	stop func()
}

func newNode(tb testing.TB, ch Channel, lead bool, policies ...quota.Policy) *node {
	return newNodeWith(tb, ch, lead, nil, policies...)
}

// newNodeWith is newNode with the replicator's config changed by set.
func newNodeWith(tb testing.TB, ch Channel, lead bool, set func(*Config), policies ...quota.Policy) *node {
	tb.Helper()
	n := &node{hub: quotaserver.NewHub(), el: &role{}}
	n.el.lead.Store(lead)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Channel: ch, Elector: n.el, Hub: n.hub, Lifetime: time.Minute, Interval: 20 * time.Millisecond, Log: log}
	if set != nil {
		set(&cfg)
	}
	n.rep = New(cfg)
	eng, err := engine.New(engine.Config{Policies: policies, Hub: n.rep.Sink(), Publishers: []publish.Publisher{n.rep}, Logger: log,
		Lease: quota.LeaseConfig{Interval: time.Second}})
	if err != nil {
		tb.Fatal(err)
	}
	n.eng = eng
	n.rep.SetEngine(eng)
	ctx, cancel := context.WithCancel(context.Background())
	n.rep.Start(ctx)
	eng.Start(ctx)
	n.stop = func() { cancel(); eng.Close(); n.rep.Close() }
	tb.Cleanup(func() { n.stop(); n.hub.Close() })
	return n
}

// TestReplicasOnNATS: two replicas on the embedded nats-server. A report
// to the follower reaches the leader's engine through the bucket, and the
// follower serves the leader's set (its version), not its own; when the
// roles swap, the new leader serves its own sets above every version it
// read.
func TestReplicasOnNATS(t *testing.T) {
	s := embedded.NATSTest(t)
	js := embedded.Connect(t, s)
	lead, follow := newNode(t, NewNATS(js, NATSBucket("t")), true), newNode(t, NewNATS(js, NATSBucket("t")), false)
	if _, err := follow.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	served := func(n *node) uint64 {
		set, _, _ := n.hub.Current("p")
		return set.Version
	}
	waitFor(t, "the follower serves the leader's set", func() bool {
		return served(lead) > 1 && served(follow) == served(lead)
	})
	if !follow.rep.Synced() {
		t.Error("the follower read the bucket but is not synced")
	}
	before := served(lead)
	lead.el.lead.Store(false)
	follow.el.lead.Store(true)
	waitFor(t, "the new leader's set is served by both, above the old one", func() bool {
		return served(follow) > before && served(lead) == served(follow)
	})
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	tb.Fatalf("not within 10s: %s", what)
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// publishOnRenumber is an engine whose publishing goroutine runs the
// instant Renumber wakes it, before Renumber's caller goes on: the
// scheduling under which a take-over's sets once reached the channel only
// at the engine's next change.
type publishOnRenumber struct {
	*engine.Engine
	tb  testing.TB
	rep *Replicator
}

func (e publishOnRenumber) Renumber(floor uint64) {
	e.Engine.Renumber(floor)
	e.rep.sink.mu.Lock()
	snap := publish.Snapshot{}
	for _, set := range e.rep.sink.own {
		snap.Sets = append(snap.Sets, set)
	}
	e.rep.sink.mu.Unlock()
	if err := e.rep.Publish(context.Background(), snap); err != nil {
		e.tb.Error(err)
	}
}

// TestTakeoverWritesRenumbered: a replica that starts leading writes its
// renumbered sets at once, whenever its publishing goroutine runs: the
// followers serve them without waiting for the engine's next change.
func TestTakeoverWritesRenumbered(t *testing.T) {
	s := embedded.NATSTest(t)
	js := embedded.Connect(t, s)
	hub, el := quotaserver.NewHub(), &role{}
	t.Cleanup(hub.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rep := New(Config{Channel: NewNATS(js, NATSBucket("takeover")), Elector: el, Hub: hub, Lifetime: time.Minute, Log: log})
	eng, err := engine.New(engine.Config{Hub: rep.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	rep.SetEngine(publishOnRenumber{Engine: eng, tb: t, rep: rep})
	if _, err := eng.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	el.lead.Store(true)
	rep.checkRole()

	served, _, ok := hub.Current("p")
	if !ok {
		t.Fatal("the new leader serves no set")
	}
	kv, err := js.KeyValue(context.Background(), NATSBucket("takeover"))
	if err != nil {
		t.Fatalf("the new leader wrote nothing: %v", err)
	}
	e, err := kv.Get(context.Background(), key(kindSet, "p"))
	if err != nil {
		t.Fatalf("the new leader's set is not in the channel: %v", err)
	}
	var rec setRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Set.Version != served.Version {
		t.Errorf("the channel holds version %d, the new leader serves %d", rec.Set.Version, served.Version)
	}
}

// TestSinkActing: while the leader is silent a follower's hub serves the
// engine's sets numbered above the highest version read, and once a leader
// writes again the replicated ones, never below a version it served: a
// producer's version guard neither freezes nor sees its set go back.
func TestSinkActing(t *testing.T) {
	hub := quotaserver.NewHub()
	s := &sink{hub: hub, own: map[string]quotaproto.LeaseSet{}, acts: map[string]acted{}}
	set := func(p string, v uint64) quotaproto.LeaseSet { return quotaproto.LeaseSet{Producer: p, Version: v} }
	served := func(p string) uint64 {
		got, _, ok := hub.Current(p)
		if !ok {
			return 0
		}
		return got.Version
	}
	steps := []struct {
		name string
		do   func()
		want map[string]uint64 // producer -> served version; 0: none
	}{
		{"the leader's set is served", func() { s.follow(set("a", 100)); s.Publish(set("a", 5)) }, map[string]uint64{"a": 100}},
		{"acting serves the engine's set above the highest version read", func() { s.act(true, 120) }, map[string]uint64{"a": 121}},
		{"an engine set new to acting is served too", func() { s.Publish(set("b", 6)) }, map[string]uint64{"a": 121, "b": 121}},
		{"the engine's set changed: the next version", func() { s.Publish(set("a", 7)) }, map[string]uint64{"a": 122}},
		{"the same engine set again keeps its version", func() { s.Publish(set("a", 7)) }, map[string]uint64{"a": 122}},
		{"the lost leader's set rewritten is not served while acting", func() { s.follow(set("a", 100)) }, map[string]uint64{"a": 122}},
		{"acting again starts above what it served", func() { s.act(false, 0); s.act(true, 90) }, map[string]uint64{"a": 124}},
		{"a leader writes again: its set above what acting served", func() { s.act(false, 0) }, map[string]uint64{"a": 125, "b": 121}},
		{"its rewrite keeps that version", func() { s.follow(set("a", 100)) }, map[string]uint64{"a": 125}},
		{"its new set, above, is served as it is", func() { s.follow(set("a", 5000)); s.follow(set("b", 5001)) }, map[string]uint64{"a": 5000, "b": 5001}},
		{"leading serves the engine's sets once written", func() {
			s.Publish(set("a", 6000))
			s.lead(true)
			s.landed([]quotaproto.LeaseSet{set("a", 6000)})
		}, map[string]uint64{"a": 6000}},
		{"a leader does not act", func() {
			if s.act(true, 1) {
				t.Error("act changed the sink of a leader")
			}
		}, map[string]uint64{"a": 6000}},
	}
	for _, st := range steps {
		st.do()
		for p, v := range st.want {
			if got := served(p); got != v {
				t.Errorf("%s: %s served at version %d, want %d", st.name, p, got, v)
			}
		}
	}
	if h := s.highest(); h != 0 {
		t.Errorf("highest after leading: %d, want 0 (only the leader's own)", h)
	}
}

// TestFollowerServesOwnWhileLeaderSilent: on the embedded nats-server, a
// leader dies (it stops writing; no other leads yet). Its followers serve
// their own sets once its decisions went unrenewed for Silence, at versions
// above the lost leader's, and when one of them takes over, the other
// serves the new leader's sets; no producer's served version ever goes
// back.
func TestFollowerServesOwnWhileLeaderSilent(t *testing.T) {
	js := embedded.JetStreamTest(t)
	const silence = 300 * time.Millisecond
	mk := func(lead bool) *node {
		return newNodeWith(t, NewNATS(js, NATSBucket("silent")), lead, func(c *Config) { c.Silence = silence })
	}
	lead, f1, f2 := mk(true), mk(false), mk(false)
	if _, err := f1.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	served := func(n *node) uint64 {
		set, _, _ := n.hub.Current("p")
		return set.Version
	}
	waitFor(t, "the followers serve the leader's set", func() bool {
		return served(lead) > 1 && served(f1) == served(lead) && served(f2) == served(lead)
	})
	lost := served(lead)
	// The followers' versions, watched until the end: never back.
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var last [2]uint64
		for {
			for i, n := range []*node{f1, f2} {
				if v := served(n); v < last[i] {
					done <- fmt.Errorf("follower %d served version %d after %d", i+1, v, last[i])
					return
				} else {
					last[i] = v
				}
			}
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	killed := time.Now()
	lead.stop()
	waitFor(t, "both followers serve their own sets, above the lost leader's", func() bool {
		return served(f1) > lost && served(f2) > lost
	})
	f1.rep.mu.Lock()
	last := f1.rep.lastLeader
	f1.rep.mu.Unlock()
	if d := time.Since(last); d < silence {
		t.Errorf("the followers served their own sets %v after the leader's last write, want after Silence %v", d, silence)
	}
	t.Logf("the followers serve their own sets %v after the leader's end (Silence %v)", time.Since(killed).Round(time.Millisecond), silence)
	f1.el.lead.Store(true)
	waitFor(t, "the other follower serves the new leader's set", func() bool {
		return f1.rep.sink.isLeading() && served(f2) == served(f1) && served(f1) > lost
	})
	close(stop)
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// unread is a channel whose set writes, once lost is set, fail and never
// reach the readers: the leader serves its sets all the same (its
// producers are not left without them while its channel fails), and is
// killed before a write lands. The moment is what no broker plays on cue.
type unread struct {
	Channel
	lost atomic.Bool
}

func (c *unread) Put(ctx context.Context, k string, v []byte) error {
	if kind, _, err := quotaproto.ParseKVKey(k); err == nil && kind == kindSet && c.lost.Load() {
		return errors.New("the set's write timed out")
	}
	return c.Channel.Put(ctx, k, v)
}

// TestStandInAboveUnreadSets: the lost leader served a set that no
// follower read. The followers standing in serve versions above it all the
// same (above the wall clock in microseconds, which every set version is
// at least): the producer's SDK takes them, rather than holding the lost
// leader's set until a new leader renumbers.
func TestStandInAboveUnreadSets(t *testing.T) {
	js := embedded.JetStreamTest(t)
	const silence = 300 * time.Millisecond
	lch := &unread{Channel: NewNATS(js, NATSBucket("unread"))}
	lead := newNodeWith(t, lch, true, func(c *Config) { c.Silence = silence })
	f := newNodeWith(t, NewNATS(js, NATSBucket("unread")), false, func(c *Config) { c.Silence = silence })
	syncP(t, lead, f)
	served := servedP
	lch.lost.Store(true)
	lead.eng.Renumber(served(lead))
	waitFor(t, "the leader serves a set above the one written", func() bool { return served(lead) > served(f) })
	time.Sleep(50 * time.Millisecond) // its write, lost
	unreadV := served(lead)
	lead.stop()
	waitFor(t, "the follower stands in", func() bool { return f.rep.sink.isActing() })
	if v := served(f); v <= unreadV {
		t.Errorf("the follower standing in serves version %d, below the lost leader's last %d", v, unreadV)
	}
}
