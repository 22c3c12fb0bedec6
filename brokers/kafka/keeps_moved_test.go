package kafka

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
)

// TestKeepsCoordinatorMoved (review-kafka3): a classic group in
// PreparingRebalance whose coordinator moves between the cycle's
// ListGroups and its DescribeGroups is described by another broker than
// the one that listed it, whose keepsAssignments answer is not the
// describer's (in a cluster of 3.x and 4.x brokers, a 4.x lister's answer
// would read a 3.x describe's empty assignments as idle): that cycle reads
// live unknown. The move is kfake's RehashCoordinators at the first
// DescribeGroups of a cycle, repeated until it lands on another broker.
// Red on 1675f45 (idle, from the lister's answer).
func TestKeepsCoordinatorMoved(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(3))
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "reb", 2, nil)
	ctx := ctxT(t)
	const group = "gm"
	jr, err := testutil.JoinClassic(ctx, cl, group, "", "reb")
	if err == nil {
		err = testutil.SyncClassic(ctx, cl, jr, group, "reb", map[string][]int32{jr.MemberID: {0, 1}})
	}
	if err != nil {
		t.Fatalf("a: %v", err)
	}
	// First seen Stable: a group in a rebalance keeps the last cycle's
	// topics.
	o := newObserver(t, c, nil)
	var s *lag.Sample
	for deadline := time.Now().Add(10 * time.Second); s == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never observed")
		}
		s = find(observe(t, o), group, "reb")
	}
	defer joinPreparing(t, c, adm, group, "reb")()

	s = mustFind(t, observe(t, o), group, "reb")
	// kfake at its default (4.x) versions, whose describe shows no
	// assignment in PreparingRebalance: idle, from the lister's answer.
	if s.GroupState != "PreparingRebalance" || s.Live != lag.LiveNo {
		t.Fatalf("before the move: %s live %s, want PreparingRebalance, idle", s.GroupState, s.Live)
	}
	var move atomic.Bool
	c.ControlKey(int16(kmsg.DescribeGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if move.CompareAndSwap(true, false) {
			c.RehashCoordinators()
		}
		return nil, nil, false
	})
	for i := 0; ; i++ {
		lister := c.CoordinatorFor(group)
		move.Store(true)
		s := mustFind(t, observe(t, o), group, "reb")
		if c.CoordinatorFor(group) == lister {
			if i == 20 {
				t.Fatal("the coordinator never moved")
			}
			continue
		}
		if s.GroupState != "PreparingRebalance" || s.Live != lag.LiveUnknown {
			t.Fatalf("described by another broker than the lister: %s live %s, want PreparingRebalance, live unknown", s.GroupState, s.Live)
		}
		return
	}
}
