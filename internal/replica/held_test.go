package replica

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// serveHTTP serves the quota protocol of n as its daemon does (the
// replicator is the quota server's engine); the server is closed with the
// test, or by the returned func (a killed leader's connections end).
func serveHTTP(t *testing.T, n *node) (string, func()) {
	t.Helper()
	mux := http.NewServeMux()
	quotaserver.New(n.hub, n.rep, quotaserver.Auth{Mode: quotaserver.AuthNone}, prometheus.NewRegistry()).Register(mux)
	srv := httptest.NewServer(mux)
	var once sync.Once
	end := func() { once.Do(func() { srv.CloseClientConnections(); srv.Close() }) }
	t.Cleanup(end)
	return srv.URL, end
}

// servedP is the version of producer p's set n's hub serves.
func servedP(n *node) uint64 {
	set, _, _ := n.hub.Current("p")
	return set.Version
}

// syncP reports producer p to the follower f and waits until f serves
// the leader's set of it.
func syncP(t *testing.T, lead, f *node) {
	t.Helper()
	if _, err := f.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower serves the leader's set", func() bool { return servedP(lead) > 1 && servedP(f) == servedP(lead) })
}

// watchSet is GET /v1/leases/watch of producer p with ?version=held, as the
// SDK's watcher asks.
func watchSet(t *testing.T, base string, held uint64, wait time.Duration) quotaproto.LeaseSet {
	t.Helper()
	resp, err := http.Get(base + quotaproto.PathWatch + "?producer=p&version=" + strconv.FormatUint(held, 10) + "&timeout=" + wait.String())
	return decodeSet(t, "watch", resp, err)
}

// decodeSet is the lease set of an answer of the quota server (what: the
// request, for the failure).
func decodeSet(t *testing.T, what string, resp *http.Response, err error) quotaproto.LeaseSet {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set quotaproto.LeaseSet
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&set) != nil {
		t.Fatalf("%s: status %d", what, resp.StatusCode)
	}
	return set
}

// reportSet is POST /v1/leases of producer p with ?version=held, as the
// SDK's reporter sends it.
func reportSet(t *testing.T, base string, held uint64) quotaproto.LeaseSet {
	t.Helper()
	body := `{"producer":"p","topics":[{"topic":"orders"}]}`
	resp, err := http.Post(base+quotaproto.PathLeases+"?version="+strconv.FormatUint(held, 10), "application/json", strings.NewReader(body))
	return decodeSet(t, "report", resp, err)
}

// streamFirst is the first set of GET /v1/leases/stream of producer p with
// Last-Event-ID: held, as the SDK's streamer asks.
func streamFirst(t *testing.T, base string, held uint64) quotaproto.LeaseSet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+quotaproto.PathStream+"?producer=p", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Last-Event-ID", strconv.FormatUint(held, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var set quotaproto.LeaseSet
			if err := json.Unmarshal([]byte(data), &set); err != nil {
				t.Fatal(err)
			}
			return set
		}
	}
	t.Fatalf("stream: no set (%v)", sc.Err())
	return quotaproto.LeaseSet{}
}

// TestFailoverNeverServedOlder: the leader's write of a set fails (the
// channel loses it: the moment no broker plays on cue); it serves the set
// to its producer all the same and is killed. The producer fails over to
// a follower, which has
// not stood in (it never does here: Silence is 0), telling it the version
// it holds, as the SDK does (a watch's or a report's ?version=, a
// stream's Last-Event-ID): the follower serves it a set above that version, never
// the older replicated one, and goes on doing so, through its takeover.
func TestFailoverNeverServedOlder(t *testing.T) {
	for _, how := range []string{"watch", "stream", "report"} {
		t.Run(how, func(t *testing.T) {
			js := embedded.JetStreamTest(t)
			bucket := NATSBucket("held" + how)
			lch := &unread{Channel: NewNATS(js, bucket)}
			lead, f := newNode(t, lch, true), newNode(t, NewNATS(js, bucket), false)
			leadURL, kill := serveHTTP(t, lead)
			fURL, _ := serveHTTP(t, f)
			syncP(t, lead, f)
			served := servedP
			written := served(lead)
			lch.lost.Store(true)
			lead.eng.Renumber(written)
			held := watchSet(t, leadURL, written, 5*time.Second).Version // the producer's push
			if held <= written {
				t.Fatalf("the leader pushed version %d, want above %d", held, written)
			}
			time.Sleep(50 * time.Millisecond) // its write, lost
			lead.stop()
			kill()
			if v := served(f); v >= held {
				t.Fatalf("the follower serves version %d: the lost write landed (held %d)", v, held)
			}
			var got quotaproto.LeaseSet
			switch how {
			case "watch":
				got = watchSet(t, fURL, held, time.Second)
			case "stream":
				got = streamFirst(t, fURL, held)
			default:
				got = reportSet(t, fURL, held)
			}
			if got.Version <= held {
				t.Fatalf("after the failover the follower answered version %d, below the %d the producer holds", got.Version, held)
			}
			if len(got.Leases) != 1 || got.Leases[0].Topic != "orders" {
				t.Errorf("the follower's set: %+v, want the orders lease", got)
			}
			if v := served(f); v != got.Version {
				t.Errorf("the follower serves version %d after answering %d", v, got.Version)
			}
			// A producer that holds what the follower serves changes
			// nothing.
			f.rep.Held("p", got.Version)
			if v := served(f); v != got.Version {
				t.Errorf("the follower serves version %d after a producer held its own %d", v, got.Version)
			}
			before := served(f)
			f.el.lead.Store(true)
			waitFor(t, "the follower leads", f.rep.sink.isLeading)
			if v := served(f); v < before {
				t.Errorf("the new leader serves version %d after %d", v, before)
			}
		})
	}
}

// late is a channel whose set writes wait, once held is set, until
// released: a leader's write still on its way when its producer fails
// over.
type late struct {
	Channel
	mu      sync.Mutex
	held    bool
	pending [][2]string
}

func (c *late) Put(ctx context.Context, k string, v []byte) error {
	if kind, _, err := quotaproto.ParseKVKey(k); err == nil && kind == kindSet {
		c.mu.Lock()
		if c.held {
			c.pending = append(c.pending, [2]string{k, string(v)})
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
	}
	return c.Channel.Put(ctx, k, v)
}

func (c *late) release(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	for _, kv := range c.pending {
		if err := c.Channel.Put(context.Background(), kv[0], []byte(kv[1])); err != nil {
			t.Error(err)
		}
	}
	c.pending = nil
}

// TestHeldSetReadLater: the leader lives, but its write of the set a
// producer holds has not reached the follower the producer moved to. The
// follower serves its own set above the held one; once it reads the
// leader's set it serves that (numbered above its own), and the leader's
// next set as the leader numbers it: the two agree again.
func TestHeldSetReadLater(t *testing.T) {
	js := embedded.JetStreamTest(t)
	lch := &late{Channel: NewNATS(js, NATSBucket("late"))}
	lead, f := newNode(t, lch, true), newNode(t, NewNATS(js, NATSBucket("late")), false)
	syncP(t, lead, f)
	served := servedP
	lch.mu.Lock()
	lch.held = true
	lch.mu.Unlock()
	before := served(lead)
	lead.eng.Renumber(before)
	waitFor(t, "the leader serves its next set", func() bool { return served(lead) > before })
	held := served(lead)
	f.rep.Held("p", held)
	own := served(f)
	if own <= held {
		t.Fatalf("the follower serves version %d to a producer holding %d", own, held)
	}
	lch.release(t)
	waitFor(t, "the follower serves the leader's set above its own", func() bool { return served(f) > own })
	if v := served(f); v != own+1 {
		t.Errorf("the follower serves version %d after its own %d, want %d", v, own, own+1)
	}
	lead.eng.Renumber(served(f))
	waitFor(t, "the follower serves the leader's next set as numbered", func() bool { return served(f) == served(lead) })
}

// stalled is a channel whose set writes, once on is set, wait until
// released or their context ends: a leader's write on its way (a Kafka
// transaction, a KV put) when the leader is killed.
type stalled struct {
	Channel
	on      atomic.Bool
	release chan struct{}
}

func (c *stalled) Put(ctx context.Context, k string, v []byte) error {
	if kind, _, err := quotaproto.ParseKVKey(k); err == nil && kind == kindSet && c.on.Load() {
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Channel.Put(ctx, k, v)
}

// TestLeaderServesOnceWritten: the leader serves a new version of a
// producer's set only once its write landed: while the write is on its
// way the producer's watch gets nothing new, and a leader killed then
// leaves the followers serving the set its producers hold. A new
// producer's first set is served at once (no other set of it exists).
func TestLeaderServesOnceWritten(t *testing.T) {
	js := embedded.JetStreamTest(t)
	lch := &stalled{Channel: NewNATS(js, NATSBucket("stalled")), release: make(chan struct{})}
	lead, f := newNode(t, lch, true), newNode(t, NewNATS(js, NATSBucket("stalled")), false)
	leadURL, kill := serveHTTP(t, lead)
	syncP(t, lead, f)
	served := servedP

	lch.on.Store(true)
	written := served(lead)
	lead.eng.Renumber(written)
	if got := watchSet(t, leadURL, written, 300*time.Millisecond).Version; got != written {
		t.Fatalf("the leader pushed version %d before its write landed (written %d)", got, written)
	}
	close(lch.release) // it lands
	waitFor(t, "the leader serves its set once written", func() bool { return served(lead) > written })
	waitFor(t, "the follower reads it", func() bool { return served(f) == served(lead) })

	lch.release = make(chan struct{})
	written = served(lead)
	lead.eng.Renumber(written)
	time.Sleep(200 * time.Millisecond)
	if v := served(lead); v != written {
		t.Fatalf("the leader serves version %d, its write of it on its way (written %d)", v, written)
	}
	lead.stop()
	kill()
	if v := served(f); v != written {
		t.Errorf("the follower serves version %d after the kill, want the last written and served %d", v, written)
	}

	// A new producer's first set is served by the leader at once.
	n := newNode(t, NewNATS(js, NATSBucket("stalled2")), true)
	set, err := n.rep.Report(quotaproto.Report{Producer: "q", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	if cur, _, ok := n.hub.Current("q"); !ok || cur.Version != set.Version {
		t.Errorf("a new producer's first set: served %+v, answered %d", cur, set.Version)
	}
}

// TestLeaderServesOnceWrittenKafka: TestLeaderServesOnceWritten's kill on
// a Kafka lease topic (kfake and the real broker): the leader's
// transaction of a new set is held before its commit, the leader serves
// the set it had, and once killed its follower serves that one too.
func TestLeaderServesOnceWrittenKafka(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
			topic := leaseTopic("held")
			t.Cleanup(func() { deleteTopic(opts, topic) })
			ch := NewKafka(opts, topic).(*kafkaChannel)
			var hold atomic.Bool
			release := make(chan struct{})
			ch.beforeCommit = func(recs []*kgo.Record) {
				if hold.Load() && strings.HasPrefix(string(recs[0].Key), kindSet+".") {
					<-release
				}
			}
			t.Cleanup(ch.Close)
			lead := newNode(t, leaderWrites{ch}, true)
			plain := NewKafka(opts, topic)
			t.Cleanup(plain.Close)
			f := newNode(t, plain, false)
			if _, err := lead.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
				t.Fatal(err)
			}
			served := func(n *node) uint64 {
				set, _, _ := n.hub.Current("p")
				return set.Version
			}
			waitFor(t, "the follower serves the leader's set", func() bool { return served(lead) > 1 && served(f) == served(lead) })
			hold.Store(true)
			written := served(lead)
			lead.eng.Renumber(written)
			time.Sleep(300 * time.Millisecond)
			if v := served(lead); v != written {
				t.Errorf("the leader serves version %d, its transaction of it not committed (written %d)", v, written)
			}
			// Killed: its context ends, then the held commit goes
			// on and finds it ended (no commit).
			stopped := make(chan struct{})
			go func() { lead.stop(); close(stopped) }()
			time.Sleep(100 * time.Millisecond)
			close(release)
			<-stopped
			if v := served(lead); v != written {
				t.Errorf("the stopped leader serves version %d, its write not committed (written %d)", v, written)
			}
			time.Sleep(300 * time.Millisecond) // a commit would be read by now
			if v := served(f); v != written {
				t.Errorf("the follower serves version %d after the kill, want the last written and served %d", v, written)
			}
		})
	}
}

// TestLeaderServesAboveHeld: a follower that stood in after the new
// leader renumbered its sets, not yet having read them (under load, in
// TestHALeaseReplication on Kafka: r2 stood in 5.7 ms after r1 took
// over), serves its producers versions above the leader's, and the
// leader's own after its (numbered above them) until the set changes. A
// producer of that follower that fails over to the leader tells it the
// version it holds: the leader serves it its set above that version (once
// written), not the lower one the producer's version guard ignores until
// its leases expire, and the follower then serves the leader's numbers
// again. Red before: the leader answered its lower version for as long as
// the set did not change.
func TestLeaderServesAboveHeld(t *testing.T) {
	js := embedded.JetStreamTest(t)
	lch := &late{Channel: NewNATS(js, NATSBucket("above"))}
	lead, f := newNode(t, lch, true), newNode(t, NewNATS(js, NATSBucket("above")), false)
	leadURL, _ := serveHTTP(t, lead)
	syncP(t, lead, f)
	served := servedP
	// The follower serves above the leader's set: its own, then the
	// leader's renumbered above it (the stand-in after the takeover).
	lch.mu.Lock()
	lch.held = true
	lch.mu.Unlock()
	before := served(lead)
	lead.eng.Renumber(before)
	waitFor(t, "the leader serves its next set", func() bool { return served(lead) > before })
	f.rep.Held("p", served(lead))
	lch.release(t)
	leader := served(lead)
	waitFor(t, "the follower serves the leader's set above its own", func() bool { return served(f) > leader })
	held := served(f)
	// The follower's producer fails over to the leader.
	var got uint64
	for deadline := time.Now().Add(10 * time.Second); got <= held && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = watchSet(t, leadURL, held, time.Second).Version
	}
	if got <= held {
		t.Fatalf("the leader answers version %d to a producer holding %d (the follower's)", got, held)
	}
	waitFor(t, "the follower serves the leader's version again", func() bool { return served(f) == served(lead) })
	// A producer holding what the leader serves changes nothing.
	lead.rep.Held("p", got)
	time.Sleep(100 * time.Millisecond)
	if v := served(lead); v != got {
		t.Errorf("the leader serves version %d after a producer held its own %d", v, got)
	}
}
