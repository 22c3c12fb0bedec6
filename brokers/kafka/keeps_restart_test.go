package kafka

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
)

// TestKeepsBrokerRestart: broker node 0 answers as Kafka 4.x (DescribeGroups
// v6), then is replaced on the same address and node ID by a broker at
// Kafka 3.9's versions (a rolled-back broker). A group rebalancing there
// within keepsRecheck is asked again (a new connection): unknown, not idle.
func TestKeepsBrokerRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	// rebalancing starts a classic group where a holds "reb" and b's join
	// holds it in PreparingRebalance; returns the stop func.
	var o *Observer
	seen := func(group string) *lag.Sample {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			smp, err := o.Observe(ctxT(t))
			if err == nil {
				if s := find(smp, group, "reb"); s != nil {
					return s
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s never observed", group)
		return nil
	}
	rebalancing := func(c *kfake.Cluster, group string) func() {
		cl := newClient(t, c)
		adm := kadm.NewClient(cl)
		createTopic(t, adm, "reb", 2, nil)
		ctx := ctxT(t)
		jr, err := testutil.JoinClassic(ctx, cl, group, "", "reb")
		if err == nil {
			err = testutil.SyncClassic(ctx, cl, jr, group, "reb", map[string][]int32{jr.MemberID: {0, 1}})
		}
		if err != nil {
			t.Fatalf("a: %v", err)
		}
		t.Logf("%s before: %s", group, seen(group).GroupState)
		return joinPreparing(t, c, adm, group, "reb")
	}

	c4 := newCluster(t, kfake.Ports(port))
	o = newObserver(t, c4, nil)
	stop := rebalancing(c4, "g4")
	s := mustFind(t, observe(t, o), "g4", "reb")
	t.Logf("4.x broker: %s live %s", s.GroupState, s.Live)
	stop()
	c4.Close()

	c3 := newCluster(t, kfake.Ports(port), kfake.MaxVersions(kversion.V3_9_0()))
	stop = rebalancing(c3, "g3")
	defer stop()
	got := seen("g3")
	t.Logf("same node, now at 3.9's versions: %s live %s", got.GroupState, got.Live)
	if got.Live != lag.LiveUnknown {
		t.Errorf("rolled-back broker: live %s, want unknown (as a fresh observer reads it)", got.Live)
	}
}
