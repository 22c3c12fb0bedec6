package app

import (
	"context"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/publish"
)

// switched is an election whose outcome the test sets: the moment a
// replica gains or loses leadership, which no broker plays on cue.
type switched struct {
	leader.Single
	lead bool
}

func (s *switched) Leading(time.Time) (int64, bool) { return 1, s.lead }

// recorder counts publishes and resets.
type recorder struct{ published, resets int }

func (r *recorder) Publish(context.Context, publish.Snapshot) error { r.published++; return nil }
func (r *recorder) Name() string                                    { return "recorder" }
func (r *recorder) Reset()                                          { r.resets++ }

// TestGated: a follower publishes nothing; a replica that becomes leader
// forgets what its publisher wrote before, once, then publishes.
func TestGated(t *testing.T) {
	e := &switched{Single: leader.Single{Name: "c"}}
	r := &recorder{}
	var el elections
	el.add(e)
	p := el.gate("c", r)
	steps := []struct {
		name              string
		lead              bool
		published, resets int
	}{
		{"following", false, 0, 0},
		{"becomes leader", true, 1, 1},
		{"stays leader", true, 2, 1},
		{"deposed", false, 2, 1},
		{"leader again", true, 3, 2},
	}
	for _, s := range steps {
		e.lead = s.lead
		if err := p.Publish(context.Background(), publish.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		if r.published != s.published || r.resets != s.resets {
			t.Errorf("%s: published %d, resets %d; want %d, %d", s.name, r.published, r.resets, s.published, s.resets)
		}
	}
	if got := el.gate("other", r); got != publish.Publisher(r) {
		t.Errorf("a cluster without election is gated: %T", got)
	}
}

// deadlined records whether each publish ran under a deadline.
type deadlined struct {
	recorder
	deadline []time.Time
}

func (d *deadlined) Publish(ctx context.Context, s publish.Snapshot) error {
	dl, _ := ctx.Deadline()
	d.deadline = append(d.deadline, dl)
	return d.recorder.Publish(ctx, s)
}

// TestGatedStandIn: a follower that stands in for a silent leader
// (replica.Replicator.ClientQuotaStandIn) publishes under the stand-in's
// deadline, having forgotten what it wrote before; it stops when the
// stand-in ends, and forgets once more when it leads.
func TestGatedStandIn(t *testing.T) {
	e := &switched{Single: leader.Single{Name: "c"}}
	d := &deadlined{}
	var el elections
	el.add(e)
	p := el.gate("c", d)
	var in bool
	until := time.Now().Add(time.Minute)
	standIn([]publish.Publisher{p, el.gate("c", &recorder{})}, e, func(time.Time) (time.Time, bool) { return until, in }, nil)
	steps := []struct {
		name              string
		lead, in          bool
		published, resets int
	}{
		{"following", false, false, 0, 0},
		{"standing in", false, true, 1, 1},
		{"still standing in", false, true, 2, 1},
		{"the stand-in ended", false, false, 2, 1},
		{"standing in again", false, true, 3, 2},
		{"leads", true, true, 4, 3},
	}
	for _, s := range steps {
		e.lead, in = s.lead, s.in
		if err := p.Publish(context.Background(), publish.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		if d.published != s.published || d.resets != s.resets {
			t.Errorf("%s: published %d, resets %d; want %d, %d", s.name, d.published, d.resets, s.published, s.resets)
		}
	}
	if !gatedBy([]publish.Publisher{d, p}, e) || gatedBy([]publish.Publisher{d, p}, &switched{}) || gatedBy([]publish.Publisher{d}, e) {
		t.Error("gatedBy: only a publisher gated by the election counts")
	}
	for i, dl := range d.deadline[:3] {
		if dl.After(until) || dl.IsZero() {
			t.Errorf("stand-in publish %d: deadline %v, want by %v", i, dl, until)
		}
	}
}

// roled is an election whose role the test sets (RoleUnknown: not
// answered yet, as the election of a cluster the replica cannot reach).
type roled struct {
	leader.Single
	role leader.Role
}

func (r *roled) Role(time.Time) leader.Role { return r.role }
func (r *roled) Leading(time.Time) (int64, bool) {
	return 3, r.role == leader.RoleLeader
}

// TestReadyElections: /readyz with replicas waits for the election of
// every cluster observed, not for that of a cluster never observed
// (unreached), nor, once the replica was ready, for one reached later
// (its election answers a few cycles after it: the replica would leave
// service meanwhile).
func TestReadyElections(t *testing.T) {
	a, b := &roled{Single: leader.Single{Name: "a"}, role: leader.RoleLeader}, &roled{Single: leader.Single{Name: "b"}}
	app := &App{}
	app.el.add(a)
	app.el.add(b)
	steps := []struct {
		name      string
		unreached []string
		ok        bool
		roles     string
	}{
		// b observed, its election silent: not ready, as before.
		{"starting", nil, false, "leader of a (epoch 3); not yet synced of b"},
		// b never observed: its election is not waited for.
		{"b unreached", []string{"b"}, true, "leader of a (epoch 3); election not answered yet of b"},
		// b reached later, its election not answered yet: ready was
		// answered once, so it stays.
		{"b reached later", nil, true, "leader of a (epoch 3); election not answered yet of b"},
	}
	for _, s := range steps {
		roles, ok := app.ready(s.unreached)
		if ok != s.ok || roles != s.roles {
			t.Errorf("%s: %v %q, want %v %q", s.name, ok, roles, s.ok, s.roles)
		}
	}
	b.role = leader.RoleFollower
	if roles, ok := app.ready(nil); !ok || roles != "leader of a (epoch 3); follower of b" {
		t.Errorf("b answered: %v %q", ok, roles)
	}
}
