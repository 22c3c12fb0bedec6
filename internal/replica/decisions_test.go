package replica

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// consumer plays one consumer group of "orders" taking consume msg/s of
// produce msg/s, observed once per (fake) second.
type consumer struct {
	tr               *lag.Tracker
	at               time.Time
	end, done        int64
	produce, consume int64
}

var ordersTarget = lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "orders", Group: "g"}

// cycle observes one more second and steps e with it; it returns e's
// decision.
func (c *consumer) cycle(e *engine.Engine) quota.Decision {
	c.at = c.at.Add(time.Second)
	c.end += c.produce
	c.done = min(c.done+c.consume, c.end)
	backlog := c.end - c.done
	head := c.at.Add(-time.Duration(float64(backlog) / float64(max(c.produce, 1)) * float64(time.Second)))
	st := c.tr.Observe(lag.Sample{Target: ordersTarget, At: c.at, Members: 1, Partitions: []lag.PartitionSample{{
		End: c.end, Lag: backlog, Committed: c.done, HeadTime: head, HeadKnown: true}}}, c.at)
	e.OnCycle("c1", c.at, []lag.State{st})
	return e.Decisions()[0]
}

// TestFollowerAdoptsLeaderDecisions: on the embedded nats-server, a
// follower whose own observations are healthy, beside a leader that cut
// the rate, adopts the leader's decision through the bucket: its next
// decisions are limited; once the leader is silent its controller keeps
// the adopted rate its producers leave unused; and when it takes over, it
// continues from the leader's last decision.
func TestFollowerAdoptsLeaderDecisions(t *testing.T) {
	s := embedded.NATSTest(t)
	js := embedded.Connect(t, s)
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	start := time.Unix(1_700_000_000, 0)
	follow := newNode(t, NewNATS(js, NATSBucket("d")), false, p)
	fc := &consumer{tr: lag.NewTracker(nil), at: start, produce: 100, consume: 2000}
	for range 6 {
		if d := fc.cycle(follow.eng); !d.IsUnlimited() {
			t.Fatalf("the follower's own decision %+v, want unlimited", d)
		}
	}
	lead := newNode(t, NewNATS(js, NATSBucket("d")), true, p)
	lc := &consumer{tr: lag.NewTracker(nil), at: start, produce: 1000, consume: 100}
	var cut quota.Decision
	for range 6 {
		cut = lc.cycle(lead.eng)
	}
	if cut.IsUnlimited() {
		t.Fatalf("the leader's decision %+v, want a cut", cut)
	}
	waitFor(t, "the follower's decision is limited", func() bool {
		return !fc.cycle(follow.eng).IsUnlimited()
	})
	// The leader is lost: no more records. The producers still hold its
	// last sets, so the rate the follower's controller adopted goes
	// unused: it keeps it (Replicator.holdUnused) rather than probe it up
	// and release it, which it then served when it stood in (session 11).
	lead.el.lead.Store(false)
	waitFor(t, "the leader deposed", func() bool { return !lead.rep.sink.isLeading() })
	waitFor(t, "the follower holds unused rates", follow.rep.holding.Load)
	fc.produce = 10
	for i := range 8 {
		if d := fc.cycle(follow.eng); d.IsUnlimited() {
			t.Fatalf("second %d with the leader silent: the follower released on its own (%s)", i, d.Reason)
		}
	}
	follow.el.lead.Store(true)
	waitFor(t, "the follower leads", follow.rep.sink.isLeading)
	if d := fc.cycle(follow.eng); d.IsUnlimited() {
		t.Errorf("the new leader's first decision %v (%s), want the lost leader's cut continued", d.Rate, d.Reason)
	}
}

// TestLeaderRegainsItsOwnRegime: a replica that took over (continuing
// from the lost leader's last decision) and then went on on its own
// (released), whose lease lapses and comes back with no other leader
// writing meanwhile, keeps its own regime: it does not adopt once more
// the decisions of the leader before it.
func TestLeaderRegainsItsOwnRegime(t *testing.T) {
	js := embedded.JetStreamTest(t)
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	start := time.Unix(1_700_000_000, 0)
	follow := newNode(t, NewNATS(js, NATSBucket("regain")), false, p)
	fc := &consumer{tr: lag.NewTracker(nil), at: start, produce: 100, consume: 2000}
	for range 6 {
		fc.cycle(follow.eng)
	}
	lead := newNode(t, NewNATS(js, NATSBucket("regain")), true, p)
	lc := &consumer{tr: lag.NewTracker(nil), at: start, produce: 1000, consume: 100}
	for range 6 {
		lc.cycle(lead.eng)
	}
	waitFor(t, "the follower's decision is limited", func() bool {
		return !fc.cycle(follow.eng).IsUnlimited()
	})
	lead.el.lead.Store(false)
	waitFor(t, "the leader deposed", func() bool { return !lead.rep.sink.isLeading() })
	follow.el.lead.Store(true)
	waitFor(t, "the follower leads", follow.rep.sink.isLeading)
	waitFor(t, "the new leader released on its own", func() bool {
		return fc.cycle(follow.eng).IsUnlimited()
	})
	// Its lease lapses and comes back: nobody else led.
	follow.el.lead.Store(false)
	waitFor(t, "the lease lapsed", func() bool { return !follow.rep.sink.isLeading() })
	follow.el.lead.Store(true)
	waitFor(t, "it leads again", follow.rep.sink.isLeading)
	if d := fc.cycle(follow.eng); !d.IsUnlimited() {
		t.Errorf("the decision after the lapse %v (%s), want its own, unlimited, not the leader's before it", d.Rate, d.Reason)
	}
}

// TestActedFollowerKeepsItsRegime: a follower that served its own sets
// while the leader was silent (Config.Silence) takes over from its own
// regime, which the producers obeyed meanwhile: it does not go back to
// the lost leader's last decision, and does not release at once a rate
// the producers leave unused.
func TestActedFollowerKeepsItsRegime(t *testing.T) {
	js := embedded.JetStreamTest(t)
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	start := time.Unix(1_700_000_000, 0)
	ch := func() Channel { return NewNATS(js, NATSBucket("acted")) }
	follow := newNodeWith(t, ch(), false, func(c *Config) { c.Silence = 200 * time.Millisecond }, p)
	fc := &consumer{tr: lag.NewTracker(nil), at: start, produce: 100, consume: 2000}
	for range 6 {
		fc.cycle(follow.eng)
	}
	lead := newNode(t, ch(), true, p)
	lc := &consumer{tr: lag.NewTracker(nil), at: start, produce: 1000, consume: 100}
	var cut quota.Decision
	for range 6 {
		cut = lc.cycle(lead.eng)
	}
	waitFor(t, "the follower's decision is limited", func() bool {
		return !fc.cycle(follow.eng).IsUnlimited()
	})
	lead.stop()
	waitFor(t, "the follower serves its own sets", func() bool {
		follow.rep.sink.mu.Lock()
		defer follow.rep.sink.mu.Unlock()
		return follow.rep.sink.acting
	})
	// Its producers use its rate: it probes up from the lost leader's
	// cut, until they leave it unused, and keeps it (standing in).
	fc.produce = 1500
	var own quota.Decision
	waitFor(t, "the follower probed well above the lost leader's cut and keeps the rate", func() bool {
		prev := own
		own = fc.cycle(follow.eng)
		return !own.IsUnlimited() && own.Rate >= 4*cut.Rate && own.Rate == prev.Rate
	})
	follow.el.lead.Store(true)
	waitFor(t, "the follower leads", follow.rep.sink.isLeading)
	// Its own regime, the rate its producers leave unused not released
	// for the first ReleaseAfter observations after it took over: they
	// held the lost leader's leases until now.
	for i := range 4 {
		if d := fc.cycle(follow.eng); d.IsUnlimited() || d.Rate < own.Rate {
			t.Errorf("decision %d after taking over: %v (%s), want its own regime (%v), neither the lost leader's cut (%v) again nor released", i, d.Rate, d.Reason, own.Rate, cut.Rate)
		}
	}
}

// followCount is an engine that counts the decisions it is given to follow.
type followCount struct {
	*engine.Engine
	followed int
}

func (f *followCount) Follow(ds []quota.Decision) { f.followed += len(ds) }

// TestOwnDecisionsReadBack: a replica reads its own decisions record back
// from the channel, possibly after its lease lapsed: it neither adopts it
// as a leader's nor takes it for a leader's sign of life; another
// replica's record it adopts.
func TestOwnDecisionsReadBack(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rate := 5.0
	for _, tc := range []struct {
		name  string
		own   bool
		adopt int
	}{
		{"its own record", true, 0},
		{"another replica's record", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := quotaserver.NewHub()
			t.Cleanup(hub.Close)
			r := New(Config{Elector: &role{}, Hub: hub, Lifetime: time.Minute, Silence: time.Second, Log: log})
			eng, err := engine.New(engine.Config{Hub: r.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			f := &followCount{Engine: eng}
			r.SetEngine(f)
			by := "another"
			if tc.own {
				by = r.self
			}
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			rec := decisionsRecord{At: time.Now(), By: by, Rates: []targetRate{{Target: ordersTarget, Rate: &rate}}}
			if err := json.NewEncoder(zw).Encode(rec); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			r.followDecisions(buf.Bytes())
			if f.followed != tc.adopt {
				t.Errorf("followed %d decisions, want %d", f.followed, tc.adopt)
			}
			if got := !r.lastLeader.IsZero(); got != !tc.own {
				t.Errorf("taken for a leader's sign of life: %v, want %v", got, !tc.own)
			}
		})
	}
}
