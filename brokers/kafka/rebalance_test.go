package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/lag"
)

// TestRebalanceNoCommits: a classic group without commits whose member
// holds the topic stays observed while a second member's join holds the
// group in PreparingRebalance. Kafka describes a classic group outside
// Stable without its members' subscriptions and assignments
// (GroupMetadata.summary: summaryNoMetadata), and kfake does the same, so
// the topic was listed by nothing and the pair left for the rebalance: the
// daemon logged "target gone", and its tracker forgot the group (a group
// without commits is measured from first sight: its lag restarted from 0
// at every rebalance). The topics of the last cycle are kept, as for a
// group that could not be described, and the liveness is unknown.
func TestRebalanceNoCommits(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "reb", 2, nil)
	produceN(t, cl, "reb", 0, 3, 0)
	const group = "joiners"
	ctx := ctxT(t)

	// join sends a classic JoinGroup for the topic (retrying once with
	// the member id the broker asks for) and returns the member id.
	join := func(ctx context.Context, member string) (string, *kmsg.JoinGroupResponse, error) {
		meta := kmsg.NewConsumerMemberMetadata()
		meta.Topics = []string{"reb"}
		for {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
			req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30_000, 30_000
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name, p.Metadata = "range", meta.AppendTo(nil)
			req.Protocols = append(req.Protocols, p)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return "", nil, err
			}
			err = kerr.ErrorForCode(resp.ErrorCode)
			if errors.Is(err, kerr.MemberIDRequired) {
				member = resp.MemberID
				continue
			}
			return resp.MemberID, resp, err
		}
	}
	// Member a joins alone, leads, and assigns itself both partitions.
	a, jr, err := join(ctx, "")
	if err != nil {
		t.Fatalf("join a: %v", err)
	}
	asg := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = "reb", []int32{0, 1}
	asg.Topics = append(asg.Topics, at)
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = group, jr.Generation, a
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	sa := kmsg.NewSyncGroupRequestGroupAssignment()
	sa.MemberID, sa.MemberAssignment = a, asg.AppendTo(nil)
	sync.GroupAssignment = append(sync.GroupAssignment, sa)
	sresp, err := sync.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(sresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("sync a: %v", err)
	}

	o := newObserver(t, c, nil)
	s := mustFind(t, observe(t, o), group, "reb")
	if s.GroupState != "Stable" || s.Live != lag.LiveYes {
		t.Fatalf("before the rebalance: state %q live %s, want Stable, live", s.GroupState, s.Live)
	}

	// Member b joins: the group waits for a to rejoin (it never does,
	// for its 30 s rebalance timeout) in PreparingRebalance.
	jctx, stopJoin := context.WithCancel(context.Background())
	joined := make(chan struct{})
	go func() { defer close(joined); _, _, _ = join(jctx, "") }()
	defer func() { stopJoin(); <-joined }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		dg, err := adm.DescribeGroups(ctx, group)
		if err == nil && dg[group].State == "PreparingRebalance" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group never went PreparingRebalance: %v %+v", err, dg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := observe(t, o)
	s = find(got, group, "reb")
	if s == nil {
		t.Fatalf("in PreparingRebalance the group without commits left: %s", dump(got))
	}
	// kfake, unlike Kafka 4.x, clears the assignments in
	// PreparingRebalance too: no member holds the topic, idle.
	if s.Live != lag.LiveNo || s.GroupState != "PreparingRebalance" {
		t.Errorf("in the rebalance: state %q live %s, want PreparingRebalance, idle", s.GroupState, s.Live)
	}
}
