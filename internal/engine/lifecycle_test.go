package engine

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestShortFuncs holds the package's functions to 80 lines (issue 15).
func TestShortFuncs(t *testing.T) { importcheck.ShortFuncs(t, ".", 80) }

// TestNew: every problem of a config at once, and the defaults of a zero
// one.
func TestNew(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want []string // in the error, each
	}{
		{"a bad policy", Config{Policies: []quota.Policy{{Name: "p"}, {Name: "p", MaxAge: time.Second}}}, []string{"policies[1].name"}},
		{"negative MaxProducers", Config{MaxProducers: -1}, []string{"MaxProducers must be >= 0"}},
		{"a bad lease config", Config{Lease: quota.LeaseConfig{Lifetime: -time.Second}}, []string{"lifetime"}},
		{"a bad controller config", Config{Controller: quota.ControllerConfig{Setpoint: 2}}, []string{"setpoint"}},
		{"all of them at once", Config{Policies: []quota.Policy{{Name: ""}}, MaxProducers: -1,
			Lease: quota.LeaseConfig{Lifetime: -time.Second}, Controller: quota.ControllerConfig{Setpoint: 2}},
			[]string{"policies[0]", "MaxProducers", "lifetime", "setpoint"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := New(c.cfg)
			if err == nil || e != nil {
				t.Fatalf("New = %v, %v; want an error", e, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}

	before := uint64(time.Now().UnixMicro())
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	lease := quota.LeaseConfig{}.WithDefaults()
	if e.lifetime != lease.Lifetime || e.interval != lease.Interval || e.maxProducers != DefaultMaxProducers ||
		e.log == nil || e.now == nil || e.version < before {
		t.Fatalf("defaults: lifetime %v interval %v maxProducers %d version %d (want >= %d)",
			e.lifetime, e.interval, e.maxProducers, e.version, before)
	}
	e.Start(context.Background()) // no publishers: no goroutine
	e.Close()
	e.Close()
}

// outage is a Publisher that fails while down is set, a fault the test
// switches at an exact moment; it counts its calls.
type outage struct {
	down  atomic.Bool
	calls atomic.Int32
}

func (o *outage) Name() string { return "outage" }

func (o *outage) Publish(context.Context, publish.Snapshot) error {
	o.calls.Add(1)
	if o.down.Load() {
		return errors.New("unreachable")
	}
	return nil
}

// eventually polls cond until it holds or d passes.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			tb.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startPublishing returns an engine with one policy, publishing to pubs
// from its goroutines until the test ends, and the context they run under.
func startPublishing(t *testing.T, c *clock, log *slog.Logger, pubs ...publish.Publisher) (*Engine, context.Context) {
	t.Helper()
	e, err := New(Config{Hub: quotaserver.NewHub(), Now: c.Now, Logger: log,
		Policies:   []quota.Policy{{Name: "p", MaxAge: 2 * time.Second}},
		Lease:      quota.LeaseConfig{Interval: time.Second, VersionBase: 100},
		Publishers: pubs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.Start(ctx)
	t.Cleanup(e.Close)
	return e, ctx
}

// TestPublishingGoroutine: Start runs the publishers on every change: a
// report's set reaches a real NATS KV bucket (embedded nats-server), a
// publisher that fails is warned about once per outage and its recovery
// logged; Close stops the goroutine, twice without harm, and nothing is
// published after it.
func TestPublishingGoroutine(t *testing.T) {
	js := embedded.JetStreamTest(t)
	var logs testutil.Buffer
	down := &outage{}
	down.down.Store(true)
	c := &clock{now: t0}
	e, ctx := startPublishing(t, c, slog.New(slog.NewTextHandler(&logs, nil)), &publish.KVPublisher{JS: js, Bucket: "engine-test"}, down)

	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 100, consume: 200}
	w.cycles(2)
	if _, err := e.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 50}}}); err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	eventually(t, 10*time.Second, "the bucket", func() bool {
		var err error
		kv, err = js.KeyValue(ctx, "engine-test")
		return err == nil
	})
	eventually(t, 10*time.Second, "checkout's lease in the bucket", func() bool {
		_, err := kv.Get(ctx, quotaproto.KVKey("checkout", "orders"))
		return err == nil
	})
	// More publishes while the outage lasts: a cycle's kick while the
	// goroutine is still publishing the last one coalesces with the
	// next, so cycle until it was called three times.
	eventually(t, 10*time.Second, "the failing publisher called again", func() bool {
		w.cycles(1)
		return down.calls.Load() >= 3
	})
	if n := strings.Count(logs.String(), "publishing quotas failed"); n != 1 {
		t.Fatalf("%d warnings for one outage, want 1:\n%s", n, &logs)
	}
	down.down.Store(false)
	w.cycles(1)
	eventually(t, 10*time.Second, "the recovery logged", func() bool { return strings.Count(logs.String(), "publishing quotas recovered") == 1 })

	e.Close()
	e.Close()
	calls := down.calls.Load()
	w.cycles(2)
	if got := down.calls.Load(); got != calls {
		t.Fatalf("published %d times after Close", got-calls)
	}
}

// held is a Publisher that, once armed, blocks in Publish until released:
// a broker slow to answer (Kafka 4.3.1 took 4.7 s over an AlterClientQuotas
// on a loaded machine), a fault the test switches at an exact moment.
type held struct {
	armed   atomic.Bool
	blocked chan struct{} // closed when it blocks
	release chan struct{}
}

func (h *held) Name() string { return "held" }

func (h *held) Publish(ctx context.Context, _ publish.Snapshot) error {
	if !h.armed.CompareAndSwap(true, false) {
		return nil
	}
	close(h.blocked)
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil
}

// sets is a Publisher that records the producers of each snapshot.
type sets struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *sets) Name() string { return "sets" }

func (s *sets) Publish(_ context.Context, snap publish.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range snap.Sets {
		s.seen[set.Producer] = true
	}
	return nil
}

func (s *sets) has(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[p]
}

// TestSlowPublisherHoldsNoOther: while one publisher is held in a write
// (the Kafka client quotas behind a slow broker), another (in HA the lease
// replication, whose write serves the SDK producers their sets) still
// publishes every change. Before each publisher had its own goroutine, the
// second waited for the first's write, up to its 10 s timeout.
func TestSlowPublisherHoldsNoOther(t *testing.T) {
	c := &clock{now: t0}
	rec := &sets{seen: map[string]bool{}}
	slow := &held{blocked: make(chan struct{}), release: make(chan struct{})}
	e, _ := startPublishing(t, c, slog.New(slog.DiscardHandler), rec, slow)
	defer close(slow.release)

	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 100, consume: 200}
	w.cycles(2)
	slow.armed.Store(true)
	if _, err := e.Report(quotaproto.Report{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 50}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "checkout's set published", func() bool { return rec.has("checkout") })
	select {
	case <-slow.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow publisher was never called")
	}
	if _, err := e.Report(quotaproto.Report{Producer: "billing", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 50}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "billing's set published while another publisher is held", func() bool {
		w.cycles(1)
		return rec.has("billing")
	})
}

// TestReadViews: Rules, ClusterDecisions and budget answer from the
// policies and the latest cycle.
func TestReadViews(t *testing.T) {
	c := &clock{now: t0}
	e, _ := newEngine(t, c, quota.Policy{Name: "p", MaxAge: 2 * time.Second, ProcessingTime: 200 * time.Millisecond,
		Match: quota.Match{Topic: "orders"}})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 100, consume: 200}
	w.cycles(2)

	base := lag.Rules{LagAge: time.Minute}
	rules := e.Rules(base)
	other := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "payments", Group: "g"}
	cases := []struct {
		name   string
		target lag.Target
		age    time.Duration
	}{
		{"a policy's target: its maxAge", target, 2 * time.Second},
		{"no policy: the base rules", other, time.Minute},
	}
	for _, tc := range cases {
		if got := rules(tc.target).LagAge; got != tc.age {
			t.Errorf("%s: lag age %v, want %v", tc.name, got, tc.age)
		}
	}

	ds := e.ClusterDecisions("c1")
	if len(ds) != 1 || ds[target].Policy != "p" {
		t.Fatalf("c1's decisions %+v", ds)
	}
	delete(ds, target) // a copy: the engine keeps its own
	if len(e.ClusterDecisions("c1")) != 1 || len(e.ClusterDecisions("c2")) != 0 {
		t.Fatal("ClusterDecisions shares the engine's map, or invents a cluster")
	}
	if got := e.budget("p"); got != 1800*time.Millisecond {
		t.Errorf("budget of p %v, want 1.8s", got)
	}
	if got := e.budget("gone"); got != 0 {
		t.Errorf("budget of an unknown policy %v, want 0", got)
	}
}

// TestReportRefusals: a report with a bad topic entry (the HTTP layer
// validates reports first; these reach the engine from its other callers)
// is refused with an error that says why, and records nothing: no lease,
// no set, not even the producer, on the topic observed either.
func TestReportRefusals(t *testing.T) {
	cases := []struct {
		name  string
		topic quotaproto.TopicDemand
		is    error
	}{
		{"an unknown criticality", quotaproto.TopicDemand{Topic: "payments", Criticality: "URGENT"}, quota.ErrUnknownName},
		{"a negative demand", quotaproto.TopicDemand{Topic: "payments", Demand: -1}, quota.ErrInvalidReport},
		{"a NaN demand", quotaproto.TopicDemand{Topic: "payments", Demand: math.NaN()}, quota.ErrInvalidReport},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: t0}
			e, hub := newEngine(t, c, quota.Policy{Name: "p", MaxAge: 2 * time.Second})
			w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 100, consume: 200}
			w.cycles(2)
			_, err := e.Report(quotaproto.Report{Producer: "svc", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 10}, tc.topic}})
			if !errors.Is(err, tc.is) {
				t.Fatalf("Report: %v, want an error matching %v", err, tc.is)
			}
			if _, _, ok := hub.Current("svc"); ok {
				t.Fatal("a refused report published a set")
			}
			if n := len(e.Leases()); n != 0 {
				t.Fatalf("%d leases after a refused report", n)
			}
			if known, _ := e.producerStats(); known != 0 {
				t.Fatalf("%d producers kept after a refused report", known)
			}
		})
	}
}
