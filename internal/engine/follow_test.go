package engine

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestFollowerTakesOverLimited: a follower whose own observations of a
// target were healthy (its controller never engaged, or released) while
// the leader kept the target limited continues, once it takes over, from
// the leader's decision it followed: its first decisions are limited, not
// its own unlimited ones.
func TestFollowerTakesOverLimited(t *testing.T) {
	p := quota.Policy{Name: "p", MaxAge: 2 * time.Second}
	c := &clock{now: t0}
	leader, _ := newEngine(t, c, p)
	(&world{tr: lag.NewTracker(nil), c: c, e: leader, produce: 1000, consume: 100}).cycles(6)
	cut := leader.Decisions()
	if len(cut) != 1 || cut[0].IsUnlimited() {
		t.Fatalf("the leader's decisions %+v, want one cut", cut)
	}
	cases := []struct {
		name    string
		follow  []quota.Decision
		limited bool
		// floor is the least rate while caught up, msg/s.
		floor float64
	}{
		{"not following: its own, unlimited", nil, false, 0},
		{"following the leader's cut: limited", cut, true, cut[0].Rate},
		{"following a pause, the producers paused: limited at the leader's capacity", []quota.Decision{{Target: target, Rate: 0, Capacity: 100}}, true, 100},
		{"following an unlimited leader: unlimited", []quota.Decision{{Target: target, Rate: quota.Unlimited}}, false, 0},
		{"a target it does not decide: ignored", []quota.Decision{{Target: lag.Target{Cluster: "c1", Topic: "other", Group: "g"}, Rate: 5}}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: c.now}
			follower, _ := newEngine(t, c, p)
			w := &world{tr: lag.NewTracker(nil), c: c, e: follower, produce: 100, consume: 2000}
			w.cycles(6)
			if d := follower.Decisions(); len(d) != 1 || !d[0].IsUnlimited() {
				t.Fatalf("the follower's own decisions %+v, want unlimited", d)
			}
			follower.Follow(tc.follow)
			if tc.follow != nil && tc.follow[0].Rate == 0 {
				w.produce = 0 // the producers obey the leader's pause until they get the new leader's leases
			}
			// Taken over: its next decisions are what producers get.
			for i := range 3 {
				w.cycles(1)
				d := follower.Decisions()[0]
				if got := !d.IsUnlimited(); got != tc.limited {
					t.Errorf("cycle %d after: decision %v (%s), limited %v, want %v", i, d.Rate, d.Reason, got, tc.limited)
				}
				if tc.limited && d.Rate < tc.floor {
					t.Errorf("cycle %d after: rate %v below %v while caught up", i, d.Rate, tc.floor)
				}
			}
		})
	}
}
