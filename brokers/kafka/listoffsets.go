package kafka

import (
	"context"
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// leaderLists holds the two ListOffsets requests of one partition leader:
// log start, and end under read_committed (the last stable offset).
type leaderLists struct {
	start, end listOffsetsReq
}

// listOffsetsReq is a ListOffsets request to one leader.
type listOffsetsReq struct {
	kmsg.ListOffsetsRequest
	reused[offsetsListed]
}

// offsetsListed is one ListOffsets response, decoded without kmsg's
// per-partition structs into slices reused from cycle to cycle.
type offsetsListed struct {
	topics []listedTopic
}

type listedTopic struct {
	name  string
	parts []listedPart
}

type listedPart struct {
	partition int32
	code      int16
	offset    int64
}

// ResponseKind returns a response that decodes into r's spare answer.
func (r *listOffsetsReq) ResponseKind() kmsg.Response {
	resp := &listOffsetsResp{into: r.take()}
	resp.Version = r.Version
	return resp
}

// listOffsetsResp decodes v6+ (flexible) responses itself and older ones
// through kmsg.
type listOffsetsResp struct {
	kmsg.ListOffsetsResponse
	into *offsetsListed
}

var errMalformedListOffsets = errors.New("malformed ListOffsets response")

// ReadFrom decodes src, the response body after its header.
func (r *listOffsetsResp) ReadFrom(src []byte) error {
	a := r.into
	if r.Version < 6 {
		if err := r.ListOffsetsResponse.ReadFrom(src); err != nil {
			return err
		}
		a.topics = resize(a.topics, len(r.Topics))
		for i, rt := range r.Topics {
			t := &a.topics[i]
			t.name = rt.Topic
			t.parts = resize(t.parts, len(rt.Partitions))
			for j, rp := range rt.Partitions {
				t.parts[j] = listedPart{partition: rp.Partition, code: rp.ErrorCode, offset: rp.Offset}
			}
		}
		return nil
	}
	w := wire{b: src}
	r.ThrottleMillis = w.int32()
	a.topics = resize(a.topics, w.arrayLen(3))
	for i := range a.topics {
		t := &a.topics[i]
		w.setString(&t.name)
		t.parts = resize(t.parts, w.arrayLen(27))
		for j := range t.parts {
			p := &t.parts[j]
			p.partition = w.int32()
			p.code = w.int16()
			w.int64() // timestamp
			p.offset = w.int64()
			w.int32() // leader epoch
			w.skipTags()
		}
		w.skipTags()
	}
	w.skipTags()
	if w.bad {
		a.topics = a.topics[:0]
		return errMalformedListOffsets
	}
	return nil
}

// add appends partition p of topic to the request, after the partitions
// added before (a topic's partitions are added together).
func (r *listOffsetsReq) add(topic string, p int32, ts int64) {
	n := len(r.Topics)
	if n == 0 || r.Topics[n-1].Topic != topic {
		r.Topics = resize(r.Topics, n+1)
		rt := &r.Topics[n]
		rt.Topic, rt.Partitions = topic, rt.Partitions[:0]
		n++
	}
	rt := &r.Topics[n-1]
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = p, ts
	rt.Partitions = append(rt.Partitions, rp)
}

// listOffsets fills logStart and end of every partition of the needed
// topics: two ListOffsets per partition leader (the leader this cycle's
// metadata names), all in parallel, decoded into the observer's reused
// answers. Partitions whose leader moved, or whose leader did not answer,
// are asked again through kgo's sharded path, which refreshes leaders.
func (o *Observer) listOffsets(ctx context.Context, topics map[string]*topicInfo) {
	timeout := int32(o.cfg.attemptTimeout().Milliseconds())
	for _, l := range o.listReqs {
		l.start.Topics, l.end.Topics = l.start.Topics[:0], l.end.Topics[:0]
	}
	for _, ti := range topics {
		if !ti.needed {
			continue
		}
		for p := range ti.parts {
			pi := &ti.parts[p]
			if pi.err != "" {
				continue
			}
			l := o.listReqs[pi.leader]
			if l == nil {
				l = &leaderLists{start: listOffsetsReq{ListOffsetsRequest: kmsg.NewListOffsetsRequest()}, end: listOffsetsReq{ListOffsetsRequest: kmsg.NewListOffsetsRequest()}}
				l.end.IsolationLevel = 1
				o.listReqs[pi.leader] = l
			}
			l.start.add(ti.name, int32(p), -2)
			l.end.add(ti.name, int32(p), -1)
		}
	}
	if len(o.listReqs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.RequestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for leader, l := range o.listReqs {
		if len(l.start.Topics) == 0 {
			delete(o.listReqs, leader)
			continue
		}
		for _, r := range []*listOffsetsReq{&l.start, &l.end} {
			r.TimeoutMillis = timeout
			wg.Go(func() {
				r.answer, r.err = nil, nil
				kresp, err := o.cl.Broker(int(leader)).RetriableRequest(ctx, r)
				if err != nil {
					r.err = err
					return
				}
				r.answer = kresp.(*listOffsetsResp).into
			})
		}
	}
	wg.Wait()

	// The partitions to ask again, start and end.
	again := [2]*listOffsetsReq{{ListOffsetsRequest: kmsg.NewListOffsetsRequest()}, {ListOffsetsRequest: kmsg.NewListOffsetsRequest()}}
	again[1].IsolationLevel = 1
	for leader, l := range o.listReqs {
		for k, r := range []*listOffsetsReq{&l.start, &l.end} {
			ts := int64(k - 2) // -2: log start, -1: end
			if r.err != nil {
				if ctx.Err() != nil {
					failListed(topics, &r.ListOffsetsRequest, "list offsets: "+brokerErr(leader, r.err))
					continue
				}
				for _, rt := range r.Topics {
					for _, rp := range rt.Partitions {
						again[k].add(rt.Topic, rp.Partition, ts)
					}
				}
				continue
			}
			for _, lt := range r.answer.topics {
				ti := topics[lt.name]
				for _, lp := range lt.parts {
					pi := ti.part(lp.partition)
					switch {
					case pi == nil:
					case leaderMoved(lp.code):
						again[k].add(lt.name, lp.partition, ts)
					default:
						applyListed(pi, k, lp.code, lp.offset)
					}
				}
			}
			r.release()
		}
	}
	var shards [2][]kgo.ResponseShard
	var fns []func(context.Context)
	for k, r := range again {
		if len(r.Topics) > 0 {
			r.TimeoutMillis = timeout
			fns = append(fns, func(ctx context.Context) { shards[k] = o.cl.RequestSharded(ctx, &r.ListOffsetsRequest) })
		}
	}
	if len(fns) == 0 {
		return
	}
	o.phase(ctx, fns...)
	for k := range shards {
		for _, sh := range shards[k] {
			if sh.Err != nil {
				failListed(topics, sh.Req.(*kmsg.ListOffsetsRequest), "list offsets: "+brokerErr(sh.Meta.NodeID, sh.Err))
				continue
			}
			for _, rt := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
				ti := topics[rt.Topic]
				for _, rp := range rt.Partitions {
					if pi := ti.part(rp.Partition); pi != nil {
						applyListed(pi, k, rp.ErrorCode, rp.Offset)
					}
				}
			}
		}
	}
}

// applyListed records one partition's answer: its log start (k 0) or end
// (k 1), or its error.
func applyListed(pi *partInfo, k int, code int16, off int64) {
	if err := kerr.ErrorForCode(code); err != nil {
		if pi.err == "" {
			pi.err = "list offsets: " + err.Error()
		}
		return
	}
	if k == 0 {
		pi.logStart, pi.startOK = off, true
	} else {
		pi.end, pi.endOK = off, true
	}
}

// failListed marks every partition of req with why.
func failListed(topics map[string]*topicInfo, req *kmsg.ListOffsetsRequest, why string) {
	for _, rt := range req.Topics {
		ti := topics[rt.Topic]
		for _, rp := range rt.Partitions {
			if pi := ti.part(rp.Partition); pi != nil && pi.err == "" {
				pi.err = why
			}
		}
	}
}

// leaderMoved reports whether a partition's error means its leader is
// elsewhere or not ready: kgo's sharded path refreshes leaders and retries.
func leaderMoved(code int16) bool {
	switch kerr.ErrorForCode(code) {
	case kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.UnknownLeaderEpoch, kerr.FencedLeaderEpoch, kerr.OffsetNotAvailable:
		return true
	}
	return false
}
