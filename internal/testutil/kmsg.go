package testutil

import "github.com/twmb/franz-go/pkg/kmsg"

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
