package kafka

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
)

// TestRebalanceNoCommits: a classic group without commits whose member
// holds the topic stays observed while a second member's join holds the
// group in PreparingRebalance. Kafka describes a classic group outside
// Stable without its members' subscriptions (and 3.x without their
// assignments: GroupMetadata.summaryNoMetadata), kfake without either, so
// the topic was listed by nothing and the pair left for the rebalance: the
// daemon logged "target gone", and its tracker forgot the group (a group
// without commits is measured from first sight: its lag restarted from 0
// at every rebalance). The topics of the last cycle are kept, as for a
// group that could not be described.
//
// The liveness in PreparingRebalance reads from the assignments where the
// coordinator keeps them there (keepsAssignments: Kafka 4.x, kfake's
// versions by default), unknown elsewhere: Kafka 3.x's classic
// coordinator shows every member with none, and the group read idle, so
// a rebalance longer than Rules.AbandonAfter abandoned it (kfake with
// Kafka 3.9's versions: idle on 8a18310). The coordinator is asked once,
// not at every cycle.
func TestRebalanceNoCommits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kfake.Opt
		want lag.Liveness
	}{
		// kfake, unlike Kafka 4.x, clears the assignments in
		// PreparingRebalance: no member holds the topic, idle.
		{"4.x", nil, lag.LiveNo},
		{"3.9", []kfake.Opt{kfake.MaxVersions(kversion.V3_9_0())}, lag.LiveUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRebalanceNoCommits(t, tc.opts, tc.want)
		})
	}
}

// apiVersionsCount counts the ApiVersions requests a client writes.
type apiVersionsCount struct{ n atomic.Int32 }

func (h *apiVersionsCount) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.ApiVersions) {
		h.n.Add(1)
	}
}

func testRebalanceNoCommits(t *testing.T, opts []kfake.Opt, want lag.Liveness) {
	c := newCluster(t, opts...)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "reb", 2, nil)
	produceN(t, cl, "reb", 0, 3, 0)
	const group = "joiners"
	ctx := ctxT(t)

	// Member a joins alone, leads, and assigns itself both partitions.
	jr, err := testutil.JoinClassic(ctx, cl, group, "", "reb")
	if err == nil {
		err = testutil.SyncClassic(ctx, cl, jr, group, "reb", map[string][]int32{jr.MemberID: {0, 1}})
	}
	if err != nil {
		t.Fatalf("a joins and syncs: %v", err)
	}

	var asks apiVersionsCount
	o := newObserver(t, c, nil, kgo.WithHooks(&asks))
	s := mustFind(t, observe(t, o), group, "reb")
	if s.GroupState != "Stable" || s.Live != lag.LiveYes {
		t.Fatalf("before the rebalance: state %q live %s, want Stable, live", s.GroupState, s.Live)
	}

	// Member b joins: the group waits for a to rejoin (it never does,
	// for its 30 s rebalance timeout) in PreparingRebalance.
	defer joinPreparing(t, c, adm, group, "reb")()
	for cycle := range 3 {
		before := asks.n.Load()
		got := observe(t, o)
		s = find(got, group, "reb")
		if s == nil {
			t.Fatalf("cycle %d: in PreparingRebalance the group without commits left: %s", cycle, dump(got))
		}
		if s.Live != want || s.GroupState != "PreparingRebalance" {
			t.Errorf("cycle %d in the rebalance: state %q live %s, want PreparingRebalance, %s", cycle, s.GroupState, s.Live, want)
		}
		if n := asks.n.Load() - before; cycle > 0 && n != 0 {
			t.Errorf("cycle %d in the rebalance wrote %d ApiVersions, want 0: the coordinator's answer is kept", cycle, n)
		} else if cycle == 0 && n != 1 {
			// Not asked in Stable, once in the rebalance.
			t.Errorf("cycle 0 in the rebalance wrote %d ApiVersions, want 1", n)
		}
	}
	// a rejoins: both joined, the group waits for the leader's sync in
	// CompletingRebalance, where liveness is unknown on every version.
	if _, err := testutil.JoinClassic(ctx, cl, group, jr.MemberID, "reb"); err != nil {
		t.Fatalf("a rejoins: %v", err)
	}
	s = mustFind(t, observe(t, o), group, "reb")
	if s.GroupState != "CompletingRebalance" || s.Live != lag.LiveUnknown {
		t.Errorf("after both joined: state %q live %s, want CompletingRebalance, unknown", s.GroupState, s.Live)
	}
}

// TestKeepsAssignments: the brokers' own ApiVersions answers (session 33's
// probe): Kafka 3.9.1's classic coordinator, which describes a classic
// group's members without assignments in PreparingRebalance, lists
// ConsumerGroupHeartbeat too, so only DescribeGroups v6 tells 4.x apart.
func TestKeepsAssignments(t *testing.T) {
	answer := func(describeMax, heartbeatMax int16) *kmsg.ApiVersionsResponse {
		resp := kmsg.NewPtrApiVersionsResponse()
		for _, k := range [][3]int16{{int16(kmsg.DescribeGroups), 0, describeMax}, {int16(kmsg.ConsumerGroupHeartbeat), 0, heartbeatMax}} {
			ak := kmsg.NewApiVersionsResponseApiKey()
			ak.ApiKey, ak.MinVersion, ak.MaxVersion = k[0], k[1], k[2]
			resp.ApiKeys = append(resp.ApiKeys, ak)
		}
		return resp
	}
	for _, tc := range []struct {
		name string
		resp *kmsg.ApiVersionsResponse
		want bool
	}{
		{"3.9.1", answer(5, 0), false},
		{"4.3.1", answer(6, 1), true},
		{"no answer for DescribeGroups", kmsg.NewPtrApiVersionsResponse(), false},
	} {
		if got := keepsAssignments(tc.resp); got != tc.want {
			t.Errorf("%s: keepsAssignments %v, want %v", tc.name, got, tc.want)
		}
	}
}
