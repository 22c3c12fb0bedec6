package replica

import (
	"testing"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestSink: a follower's hub serves the replicated sets, never the
// engine's; on leading it serves the engine's sets, all at once and only
// them; a follower again serves replicated sets as they come.
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
		{"leading serves the engine's sets", func() { s.follow(set("y", 9)); s.Publish(set("a", 10)); s.lead(true) }, map[string]uint64{"a": 10, "y": 0}},
		{"replicated sets are ignored while leading", func() { s.follow(set("a", 3)) }, map[string]uint64{"a": 10}},
		{"engine changes are served while leading", func() { s.Publish(set("b", 11)); s.Remove("a") }, map[string]uint64{"a": 0, "b": 11}},
		{"following again", func() { s.lead(false); s.follow(set("b", 12)); s.Publish(set("b", 13)) }, map[string]uint64{"b": 12}},
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
