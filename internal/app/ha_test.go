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
