package testutil

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsetsError is the answer to req with code (a Kafka error code) on
// every partition it asks for: a broker's refusal, for a kfake control
// function.
func ListOffsetsError(req *kmsg.ListOffsetsRequest, code int16) *kmsg.ListOffsetsResponse {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// JoinClassic sends a classic JoinGroup for group as a "consumer" member
// subscribing to topic (range assignor, session and rebalance timeouts
// 30 s), again with the member id the broker asks for (MEMBER_ID_REQUIRED),
// and returns the answer; a refusal's code is the error. The call blocks
// until the join completes, as a broker holds a join until the group's
// other members rejoin: send it from its own client (on one kgo client a
// second member's join waiting there failed the first's rejoin with
// UNKNOWN_MEMBER_ID on Kafka 3.9.1 and 4.3.1).
func JoinClassic(ctx context.Context, r kmsg.Requestor, group, member, topic string) (*kmsg.JoinGroupResponse, error) {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30_000, 30_000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", meta.AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, r)
		if err != nil {
			return nil, err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		if errors.Is(err, kerr.MemberIDRequired) && member == "" {
			member = resp.MemberID
			continue
		}
		return resp, err
	}
}

// SyncClassic sends the leader's SyncGroup of a classic group joined with
// JoinClassic, assigning each member of assign its partitions of topic.
func SyncClassic(ctx context.Context, r kmsg.Requestor, join *kmsg.JoinGroupResponse, group, topic string, assign map[string][]int32) error {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = group, join.Generation, join.MemberID
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	for m, parts := range assign {
		asg := kmsg.NewConsumerMemberAssignment()
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = topic, parts
		asg.Topics = append(asg.Topics, at)
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID, sa.MemberAssignment = m, asg.AppendTo(nil)
		req.GroupAssignment = append(req.GroupAssignment, sa)
	}
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}
