package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/replica"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestStandIn: three replicas own one shard each of three, on one NATS KV
// channel (no heartbeats: their records alone tell them alive), with a
// clock the test moves (the moment a replica falls silent
// is what no broker plays on cue; the records travel through the real
// server). When "a" stops writing (killed, or paused), the assignment
// still names it, as Kafka's does until the session runs out: after the
// silence, and not before, both others name the same stand-in for its
// shard; the stand-in observes it from its next Offer and writes it from
// the one after, with a's last decision in place of its own that has no
// rates yet. a writing again ends the stand-in; so does the assignment
// naming a new owner, which has the silence to write its first record.
// (Without the stand-in the shard waited for the assignment: the session
// plus a look at the group plus a cycle, over 6 s by default.)
func TestStandIn(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_standin")
	const silence, step = 2 * time.Second, 250 * time.Millisecond
	var clk struct {
		sync.Mutex
		now time.Time
	}
	clk.now = t0
	now := func() time.Time { clk.Lock(); defer clk.Unlock(); return clk.now }
	// topics[s] is a topic in shard s of 3.
	var topics []string
	for i := 0; len(topics) < 3; i++ {
		if name := fmt.Sprintf("topic-%d", i); Of(name, 3) == len(topics) {
			topics = append(topics, name)
		}
	}
	ids := []string{"a", "b", "c"}
	type side struct {
		x   *Exchange
		a   *fixed
		eng *decisions
	}
	sides := map[string]side{}
	for i, id := range ids {
		eng := &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}}
		d := decided(topics[i], float64(10*(i+1)))
		eng.own[d.Target] = d
		a := &fixed{owned: []int{i}, owners: slices.Clone(ids), n: 3}
		x := NewExchange(ExchangeConfig{Channel: ch, Engine: eng, ID: id, Expire: time.Minute, Interval: 100 * time.Millisecond,
			Silence: silence, Now: now})
		x.Add(a)
		x.Start(context.Background())
		t.Cleanup(x.Close)
		sides[id] = side{x, a, eng}
	}
	waitFor := func(what string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(5 * time.Millisecond) // polling the channel
		}
	}
	// cycle moves the clock a step and has the writers offer; it waits
	// until every running replica has read every record written.
	cycle := func(writers ...string) time.Time {
		t.Helper()
		clk.Lock()
		clk.now = clk.now.Add(step)
		at := clk.now
		clk.Unlock()
		var want []int
		for _, id := range writers {
			x := sides[id].x
			// The shards written: those owned at this Offer and the
			// previous one.
			x.mu.Lock()
			before := x.owned["c"]
			x.mu.Unlock()
			x.Offer("c", at)
			x.mu.Lock()
			for _, s := range x.owned["c"] {
				if slices.Contains(before, s) {
					want = append(want, s)
				}
			}
			x.mu.Unlock()
		}
		for _, id := range writers {
			for _, s := range want {
				waitFor(fmt.Sprintf("%s read shard %d at %v", id, s, at.Sub(t0)), func() bool {
					r, ok := sides[id].x.Remote("c", s)
					return ok && !r.At.Before(at)
				})
			}
		}
		return at
	}
	observers := func(id string) ([]string, []bool) { return sides[id].x.Observers("c", now()) }
	waitFor("the watches started", func() bool {
		return sides["a"].x.Synced() && sides["b"].x.Synced() && sides["c"].x.Synced()
	})

	if obs, stand := observers("b"); !slices.Equal(obs, ids) || slices.Contains(stand, true) {
		t.Fatalf("before any record: %v %v, want the assignment (a new owner has the silence to write)", obs, stand)
	}
	for range 4 {
		cycle(ids...)
	}
	// a falls silent. Within the silence nobody stands in.
	var silentAt time.Time
	for i := 0; ; i++ {
		at := cycle("b", "c")
		if i == 0 {
			silentAt = at.Add(-step) // a's last record was read then
		}
		obs, stand := observers("b")
		if at.Sub(silentAt) < silence {
			if stand[0] || obs[0] != "a" {
				t.Fatalf("%v after a's last record: shard 0 observed by %s (stand-in %v), want a", at.Sub(silentAt), obs[0], stand[0])
			}
			continue
		}
		if !stand[0] || obs[0] == "a" || obs[0] == "" {
			t.Fatalf("%v after a's last record: shard 0 observed by %q (stand-in %v), want a stand-in", at.Sub(silentAt), obs[0], stand[0])
		}
		break
	}
	obsB, _ := observers("b")
	obsC, _ := observers("c")
	if !slices.Equal(obsB, obsC) || obsB[1] != "b" || obsB[2] != "c" {
		t.Fatalf("b names %v, c names %v: want the same, each its own shard", obsB, obsC)
	}
	si := obsB[0]
	other := map[string]string{"b": "c", "c": "b"}[si]
	// The stand-in observes shard 0 from the Offer that named it (its
	// next cycle observes the shard's topics: its engine has only just
	// begun, without rates) and writes it from the next one.
	if !sides[si].x.StandsIn("c", 0) || sides[other].x.StandsIn("c", 0) {
		t.Fatalf("%s stands in %v, %s %v; want only %s", si, sides[si].x.StandsIn("c", 0), other, sides[other].x.StandsIn("c", 0), si)
	}
	if r, _ := sides[other].x.Remote("c", 0); r.Owner != "a" {
		t.Fatalf("shard 0 written by %s at the Offer that gained it", r.Owner)
	}
	sides[si].eng.mu.Lock()
	tg := decided(topics[0], 0).Target
	sides[si].eng.own[tg] = quota.Decision{Target: tg, Policy: "p", Rate: quota.Unlimited, At: now(), Rule: quota.RuleRatesUnknown}
	sides[si].eng.mu.Unlock()
	cycle("b", "c")
	if r, _ := sides[other].x.Remote("c", 0); r.Owner != si || len(r.Decisions) != 1 || r.Decisions[0].Rate != 10 {
		t.Fatalf("shard 0 as the stand-in wrote it: %+v, want %s's record with a's decision (10)", r, si)
	}

	// a was paused and resumes: its records end the stand-in, at the
	// Offer after they are read (two cycles; a few more allowed for a
	// loaded machine, where the watch may deliver a's record after a
	// cycle's Offer, and the bucket keeps one value per key).
	for i := 0; i < 2 || (i < 8 && sides[si].x.StandsIn("c", 0)); i++ {
		cycle(ids...)
	}
	if sides[si].x.StandsIn("c", 0) {
		t.Errorf("a writes again, yet %s still stands in for it after 8 cycles", si)
	}
	if obs, stand := observers(other); obs[0] != "a" || stand[0] {
		t.Errorf("a writes again: %s names %q (stand-in %v), want a", other, obs[0], stand[0])
	}

	// A pause reads as a slow cycle: a is taken for silent only after
	// twice its longest recent interval between records, which decays
	// by an eighth per record.
	for range 20 {
		cycle(ids...)
	}
	// a is killed; once a stand-in observes, the assignment moves
	// shard 0 to the other replica: the stand-in stops at once, and the
	// new owner is not stood in for while it starts to write.
	for range int(silence/step) + 2 {
		cycle("b", "c")
	}
	if !sides[si].x.StandsIn("c", 0) {
		t.Fatalf("a killed: %s does not stand in", si)
	}
	for _, id := range ids {
		sides[id].a.mu.Lock()
		sides[id].a.owners = []string{other, "b", "c"}
		sides[id].a.mu.Unlock()
	}
	sides[other].a.set(0, slices.Index(ids, other))
	for i := range int(silence/step) - 1 {
		cycle("b", "c")
		if sides[si].x.StandsIn("c", 0) {
			t.Fatalf("%d cycles after the assignment moved shard 0 to %s, %s still stands in", i+1, other, si)
		}
		if obs, stand := observers(si); obs[0] != other || stand[0] {
			t.Fatalf("%d cycles after the move: %s names %q (stand-in %v), want %s", i+1, si, obs[0], stand[0], other)
		}
	}
	if r, _ := sides[si].x.Remote("c", 0); r.Owner != other {
		t.Errorf("shard 0's record after the move: written by %s, want %s", r.Owner, other)
	}
}

// TestStandInSlowWriter: an owner whose records come every 3 s (its
// cycles are that slow) is not taken for silent 2.5 s after one, past a
// 2 s silence, once its interval is known (from its second record): its
// recent interval between records counts double. Once it writes nothing
// for twice that, it is stood in for.
func TestStandInSlowWriter(t *testing.T) {
	var at time.Time
	x := NewExchange(ExchangeConfig{Engine: &decisions{}, ID: "b", Expire: time.Minute, Silence: 2 * time.Second,
		Now: func() time.Time { return at }})
	x.Add(&fixed{owners: []string{"a", "b"}})
	write := func(owner string, shard int) {
		t.Helper()
		b, err := encodeRecord(Record{Owner: owner, Cluster: "c", Shard: shard, Count: 2, At: at})
		if err != nil {
			t.Fatal(err)
		}
		x.apply(recordKey("c", shard), b)
	}
	at = t0
	x.Observers("c", at) // the assignment seen
	for i := range 4 {
		at = t0.Add(time.Duration(i) * 3 * time.Second)
		write("a", 0)
		for ms := 0; ms < 3000; ms += 250 {
			at = t0.Add(time.Duration(i)*3*time.Second + time.Duration(ms)*time.Millisecond)
			write("b", 1)
			if obs, stand := x.Observers("c", at); i > 0 && (obs[0] != "a" || stand[0]) {
				t.Fatalf("%v after a's record (written every 3 s): shard 0 observed by %s (stand-in %v)", time.Duration(ms)*time.Millisecond, obs[0], stand[0])
			}
		}
	}
	last := at.Add(-2750 * time.Millisecond)
	for at.Sub(last) < 6*time.Second {
		at = at.Add(250 * time.Millisecond)
		write("b", 1)
	}
	if obs, stand := x.Observers("c", at); obs[0] != "b" || !stand[0] {
		t.Errorf("%v after a's last record: shard 0 observed by %s (stand-in %v), want b standing in", at.Sub(last), obs[0], stand[0])
	}
}

// TestStandInHeartbeat: a replica whose cycle stalls (it writes no record
// of its shard) is alive by its heartbeats, every 50 ms: no one stands
// in, three times the silence long. Closed (killed), it is stood in for.
func TestStandInHeartbeat(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_beat")
	const silence = time.Second
	mk := func(id string, owned int) *Exchange {
		x := NewExchange(ExchangeConfig{Channel: ch, Engine: &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}},
			ID: id, Expire: time.Minute, Interval: 50 * time.Millisecond, Silence: silence, Beat: 50 * time.Millisecond})
		x.Add(&fixed{owned: []int{owned}, owners: []string{"a", "b"}})
		x.Start(context.Background())
		return x
	}
	a, b := mk("a", 0), mk("b", 1)
	t.Cleanup(b.Close)
	b.Observers("c", time.Now()) // the assignment seen
	// a never offers (its cycle stalls); b does, every 50 ms.
	for end := time.Now().Add(3 * silence); time.Now().Before(end); time.Sleep(50 * time.Millisecond) { // b's cycles
		b.Offer("c", time.Now())
		if obs, stand := b.Observers("c", time.Now()); obs[0] != "a" || stand[0] {
			t.Fatalf("a heartbeats, yet shard 0 is observed by %q (stand-in %v)", obs[0], stand[0])
		}
	}
	a.Close()
	closed := time.Now()
	for {
		b.Offer("c", time.Now())
		obs, stand := b.Observers("c", time.Now())
		if stand[0] && obs[0] == "b" {
			break // (not before the silence: TestStandIn, on its clock)
		}
		if time.Since(closed) > 10*silence {
			t.Fatalf("a closed %v ago: shard 0 observed by %q (stand-in %v), want b standing in", time.Since(closed), obs[0], stand[0])
		}
		time.Sleep(50 * time.Millisecond) // b's cycles
	}
	b.Offer("c", time.Now()) // the cycle's end that takes the shard on
	if !b.StandsIn("c", 0) {
		t.Error("b names itself the stand-in but does not observe shard 0")
	}
}

// TestMoveKeepsUnreached: a shard moves from a to b, whose first cycles
// with it reach only one of its two topics (the other's group not
// described yet, a cycle that timed out): b's records carry a's decision
// of the other while it is younger than the expiry, so that no replica
// drops it from its leases. (Written as b decided, the record dropped the
// topic: every replica gave it the open lease of a topic nobody
// observes.)
func TestMoveKeepsUnreached(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_unreached")
	// Two topics in shard 0 of 2.
	var topics []string
	for i := 0; len(topics) < 2; i++ {
		if name := fmt.Sprintf("topic-%d", i); Of(name, 2) == 0 {
			topics = append(topics, name)
		}
	}
	const expire = 10 * time.Second
	mk := func(id string, owned []int, own ...quota.Decision) (*Exchange, *fixed) {
		eng := &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}}
		for _, d := range own {
			eng.own[d.Target] = d
		}
		a := &fixed{owned: owned}
		x := NewExchange(ExchangeConfig{Channel: ch, Engine: eng, ID: id, Expire: expire, Interval: 50 * time.Millisecond})
		x.Add(a)
		x.Start(context.Background())
		t.Cleanup(x.Close)
		return x, a
	}
	xa, fa := mk("a", []int{0}, decided(topics[0], 10), decided(topics[1], 20))
	xb, fb := mk("b", []int{1}, decided(topics[1], 30))
	waitRecord := func(what string, f func(Record) bool) Record {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if r, ok := xb.Remote("c", 0); ok && f(r) {
				return r
			}
			if time.Now().After(deadline) {
				r, _ := xb.Remote("c", 0)
				t.Fatalf("%s: not within 10s; shard 0: %+v", what, r)
			}
			time.Sleep(10 * time.Millisecond) // polling the channel
		}
	}
	for !xa.Synced() || !xb.Synced() {
		time.Sleep(10 * time.Millisecond) // the watches start
	}
	xa.Offer("c", t0)
	xa.Offer("c", t0.Add(time.Second))
	waitRecord("a's record", func(r Record) bool { return r.Owner == "a" && len(r.Decisions) == 2 })
	// Shard 0 moves to b; b's engine decides only topics[1].
	fa.set()
	fb.set(0, 1)
	at := t0.Add(2 * time.Second)
	xb.Offer("c", at) // gained: not written
	xb.Offer("c", at.Add(time.Second))
	r := waitRecord("b's record", func(r Record) bool { return r.Owner == "b" })
	got := map[string]float64{}
	for _, d := range r.Decisions {
		got[d.Target.Topic] = d.Rate
	}
	if len(got) != 2 || got[topics[0]] != 10 || got[topics[1]] != 30 {
		t.Errorf("b's first record of shard 0: %v, want a's decision of %s (10) and its own of %s (30)", got, topics[0], topics[1])
	}
	// Past the expiry of a's decision (made at t0), b's record is its own.
	xb.Offer("c", t0.Add(expire))
	r = waitRecord("b's later record", func(r Record) bool { return r.At.Equal(t0.Add(expire)) })
	if len(r.Decisions) != 1 || r.Decisions[0].Target.Topic != topics[1] {
		t.Errorf("b's record past the expiry: %+v, want its own decision only", r.Decisions)
	}
}

// TestStandInCounts: during a rolling change of ha.shards the replicas of
// either count write the same keys, heartbeats included. A replica of 4
// shards counts only the writers of 4 alive: the owner of a shard of 4
// that went silent is not kept alive by a replica id of the other count's
// writes, and only a writer of 4 stands in.
func TestStandInCounts(t *testing.T) {
	at := t0
	x := NewExchange(ExchangeConfig{Engine: &decisions{}, ID: "b", Expire: time.Minute, Silence: 2 * time.Second,
		Now: func() time.Time { return at }})
	x.Add(&fixed{owners: []string{"a", "b", "c", "b"}, n: 4})
	beat := func(owner string, count int) {
		t.Helper()
		b, err := encodeRecord(Record{Owner: owner, Cluster: "c", Shard: -1, Count: count, At: at})
		if err != nil {
			t.Fatal(err)
		}
		x.apply(recordKey("c", -1), b)
	}
	x.Observers("c", at) // the assignment seen
	for range 12 {
		at = at.Add(250 * time.Millisecond)
		beat("b", 4)
		beat("a", 2) // "a" of 4 is silent; an "a" of 2 writes
		beat("c", 2) // and "c" of 4 too, its id alive among the 2s
	}
	obs, stand := x.Observers("c", at)
	if !stand[0] || obs[0] != "b" || !stand[2] || obs[2] != "b" {
		t.Errorf("owners a and c of 4 silent, only b of 4 writing: observers %v (stand-in %v), want b for shards 0 and 2", obs, stand)
	}
	if _, ok := x.Remote("c", -1); ok {
		t.Error("a heartbeat kept as a shard's record")
	}
}

// snapshots is the real channel as a reader that falls behind reads it:
// each Watch ends once the state is read (synced), and the exchange reads
// it again an Interval later, so it sees each key's value at that moment,
// not every write (NATS KV keeps one value per key; a compacted topic,
// once compacted, too). reads counts the reads done. A reader's lag is
// what the broker cannot play on cue.
type snapshots struct {
	Channel
	reads *atomic.Int64
}

func (s snapshots) Watch(ctx context.Context, f func(string, []byte), synced func()) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := s.Channel.Watch(wctx, f, func() { synced(); s.reads.Add(1); cancel() })
	if ctx.Err() != nil || err != nil {
		return err
	}
	return errors.New("read again")
}

// TestStandInBeatsPerReplica: a and b heartbeat (their cycles stall: no
// record of their shards), a always just before b; c reads the lease
// state only as it stands at each read. Both are alive to c twice the
// silence long: each replica heartbeats under its own key. (Under the
// one key all shared, c read only b's beat and stood b in for a after
// the silence.)
func TestStandInBeatsPerReplica(t *testing.T) {
	ch := replica.NewNATS(embedded.JetStreamTest(t), "lagbridge_leases_beats")
	const silence, step = 2 * time.Second, 250 * time.Millisecond
	var clk struct {
		sync.Mutex
		now time.Time
	}
	clk.now = t0
	now := func() time.Time { clk.Lock(); defer clk.Unlock(); return clk.now }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(id string, c Channel, owned int) *Exchange {
		x := NewExchange(ExchangeConfig{Channel: c, Engine: &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}},
			ID: id, Expire: time.Minute, Interval: 10 * time.Millisecond, Silence: silence, Now: now, Log: log})
		x.Add(&fixed{owned: []int{owned}, owners: []string{"a", "b", "c"}, n: 3})
		return x
	}
	ctx := context.Background()
	a, b := mk("a", ch, 0), mk("b", ch, 1) // their beats are written by the test
	reads := &atomic.Int64{}
	c := mk("c", snapshots{ch, reads}, 2)
	c.Start(ctx)
	t.Cleanup(c.Close)
	c.Observers("c", now()) // the assignment seen
	for i := range int(2 * silence / step) {
		clk.Lock()
		clk.now = clk.now.Add(step)
		at := clk.now
		clk.Unlock()
		for _, x := range []*Exchange{a, b} {
			if err := x.beatOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// A read that started after both beats ended.
		for n, deadline := reads.Load(), time.Now().Add(10*time.Second); reads.Load() < n+2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("c read nothing for 10s")
			}
		}
		if obs, stand := c.Observers("c", at); stand[0] || stand[1] {
			t.Fatalf("step %d, %v after the first beats: observers %v (stand-in %v), want a and b alive", i, at.Sub(t0), obs, stand)
		}
	}
}

// TestBeatKeysForgotten: the heartbeat key of a replica gone (killed, its
// id never coming back) and the one key earlier versions shared are
// deleted by a replica that read no write to them for the expiry (a
// minute here); its own key and a live replica's stay.
func TestBeatKeysForgotten(t *testing.T) {
	js := embedded.JetStreamTest(t)
	const bucket = "lagbridge_leases_forget"
	ch := replica.NewNATS(js, bucket)
	var clk struct {
		sync.Mutex
		now time.Time
	}
	clk.now = t0
	now := func() time.Time { clk.Lock(); defer clk.Unlock(); return clk.now }
	mk := func(id string, beat time.Duration) *Exchange {
		x := NewExchange(ExchangeConfig{Channel: ch, Engine: &decisions{own: map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}},
			ID: id, Expire: time.Minute, Interval: 10 * time.Millisecond, Silence: 2 * time.Second, Beat: beat, Now: now})
		x.Add(&fixed{owners: []string{"b", "live"}})
		return x
	}
	ctx := context.Background()
	if err := mk("gone", 0).beatOnce(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := encodeRecord(Record{Owner: "old", Cluster: "c", Shard: -1, Count: 2, At: now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Put(ctx, recordKey("c", -1), old); err != nil {
		t.Fatal(err)
	}
	live := mk("live", 0)
	b := mk("b", 20*time.Millisecond)
	b.Start(ctx)
	t.Cleanup(b.Close)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	exists := func(k string) bool {
		_, err := kv.Get(ctx, k)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	advance := func(d time.Duration) {
		t.Helper()
		clk.Lock()
		clk.now = clk.now.Add(d)
		clk.Unlock()
		if err := live.beatOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // b's beats, every 20 ms
	}
	gone, shared := beatKey("c", "gone"), recordKey("c", -1)
	for !b.Synced() {
		time.Sleep(5 * time.Millisecond)
	}
	advance(59 * time.Second)
	if !exists(gone) || !exists(shared) {
		t.Fatalf("59s after b read them: %s kept %v, %s kept %v; want both kept until the expiry", gone, exists(gone), shared, exists(shared))
	}
	advance(2 * time.Second)
	for deadline := time.Now().Add(10 * time.Second); exists(gone) || exists(shared); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("61s after b read them: %s kept %v, %s kept %v; want both deleted", gone, exists(gone), shared, exists(shared))
		}
	}
	for _, k := range []string{beatKey("c", "b"), beatKey("c", "live")} {
		if !exists(k) {
			t.Errorf("%s deleted: its replica beats", k)
		}
	}
}
