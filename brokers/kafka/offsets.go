package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupOffsets is one group's OffsetFetch answer. The observer keeps the
// answers from cycle to cycle and refills them in place, so a cycle
// allocates nothing for the groups and topics it saw before.
type groupOffsets struct {
	err    string // the whole group failed
	topics map[string]*topicOffsets
	cycle  uint64 // the cycle that last answered for the group
	size   int    // bytes of its last answer, 0 when unknown
}

// topicOffsets holds a group's commits on one topic, by partition.
type topicOffsets struct {
	committed []int64          // -1: no commit
	errs      map[int32]string // per-partition errors, usually empty
	cycle     uint64           // the cycle that last answered for the topic
}

// offsetsAnswer is one OffsetFetch response (v8+, groups batched), decoded
// without kmsg's per-partition structs into slices reused from cycle to
// cycle: at a thousand groups this is the largest response of a cycle.
type offsetsAnswer struct {
	groups []answerGroup
}

type answerGroup struct {
	name   string
	code   int16
	topics []answerTopic
	size   int // bytes of the answer, 0 when decoded by kmsg
}

type answerTopic struct {
	name  string   // v8-v9
	id    [16]byte // v10+
	parts []answerPart
}

type answerPart struct {
	partition int32
	offset    int64
	code      int16
}

// reused is the state of a request whose response decodes into storage
// kept from cycle to cycle: ResponseKind takes spare (kgo calls it once per
// attempt), and the caller hands the answer back after use. A response kgo
// abandons (a canceled request) keeps its own storage.
type reused[T any] struct {
	spare *T
	// set by the request's goroutine, read after it ends:
	answer *T
	err    error
}

// take returns the spare storage, or new storage when an earlier attempt
// or an abandoned response holds it.
func (r *reused[T]) take() *T {
	t := r.spare
	r.spare = nil
	if t == nil {
		t = new(T)
	}
	return t
}

// release hands the answer back for the next cycle.
func (r *reused[T]) release() { r.spare, r.answer = r.answer, nil }

// offsetFetchReq is the OffsetFetch request sent to one coordinator for all
// its groups.
type offsetFetchReq struct {
	kmsg.OffsetFetchRequest
	reused[offsetsAnswer]
}

// ResponseKind returns a response that decodes into r's spare answer.
func (r *offsetFetchReq) ResponseKind() kmsg.Response {
	resp := &offsetFetchResp{into: r.take()}
	resp.Version = r.Version
	return resp
}

// offsetFetchResp decodes v8+ responses into an offsetsAnswer; older
// versions (one group per request) are decoded by kmsg and the groups are
// asked again through kgo's sharded path.
type offsetFetchResp struct {
	kmsg.OffsetFetchResponse
	into *offsetsAnswer
}

var errMalformedOffsetFetch = errors.New("malformed OffsetFetch response")

// ReadFrom decodes src, the response body after its header.
func (r *offsetFetchResp) ReadFrom(src []byte) error {
	if r.Version < 8 {
		return r.OffsetFetchResponse.ReadFrom(src)
	}
	w := wire{b: src}
	r.ThrottleMillis = w.int32()
	a := r.into
	a.groups = resize(a.groups, w.arrayLen(5))
	for i := range a.groups {
		g := &a.groups[i]
		left := len(w.b)
		w.setString(&g.name)
		minTopic := 3
		if r.Version >= 10 {
			minTopic = 18
		}
		g.topics = resize(g.topics, w.arrayLen(minTopic))
		for j := range g.topics {
			t := &g.topics[j]
			if r.Version >= 10 {
				t.name, t.id = "", w.uuid()
			} else {
				w.setString(&t.name)
				t.id = [16]byte{}
			}
			t.parts = resize(t.parts, w.arrayLen(20))
			for k := range t.parts {
				p := &t.parts[k]
				p.partition = w.int32()
				p.offset = w.int64()
				w.int32() // leader epoch
				w.bytes() // metadata
				p.code = w.int16()
				w.skipTags()
			}
			w.skipTags()
		}
		g.code = w.int16()
		w.skipTags()
		g.size = left - len(w.b)
	}
	w.skipTags()
	if w.bad {
		a.groups = a.groups[:0]
		return errMalformedOffsetFetch
	}
	return nil
}

// resize returns s with length n, keeping the elements (and so the slices
// they hold) of its whole capacity.
func resize[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	return append(s[:cap(s)], make([]T, n-cap(s))...)
}

// wire reads Kafka's flexible (KIP-482) encoding; any short or malformed
// field sets bad, after which every read returns zero.
type wire struct {
	b   []byte
	bad bool
}

func (w *wire) next(n uint64) []byte {
	if w.bad || n > uint64(len(w.b)) {
		w.bad, w.b = true, nil
		return nil
	}
	s := w.b[:n]
	w.b = w.b[n:]
	return s
}

func (w *wire) int16() int16 {
	if s := w.next(2); s != nil {
		return int16(binary.BigEndian.Uint16(s))
	}
	return 0
}

func (w *wire) int32() int32 {
	if s := w.next(4); s != nil {
		return int32(binary.BigEndian.Uint32(s))
	}
	return 0
}

func (w *wire) int64() int64 {
	if s := w.next(8); s != nil {
		return int64(binary.BigEndian.Uint64(s))
	}
	return 0
}

func (w *wire) uuid() (id [16]byte) {
	copy(id[:], w.next(16))
	return id
}

func (w *wire) uvarint() uint64 {
	if w.bad {
		return 0
	}
	v, n := binary.Uvarint(w.b)
	if n <= 0 {
		w.bad, w.b = true, nil
		return 0
	}
	w.b = w.b[n:]
	return v
}

// arrayLen reads a compact array length (null is empty) and checks it
// against the bytes left, each element taking at least size bytes.
func (w *wire) arrayLen(size int) int {
	n := w.uvarint()
	if n == 0 {
		return 0
	}
	n--
	if n > uint64(len(w.b)/size) {
		w.bad, w.b = true, nil
		return 0
	}
	return int(n)
}

// bytes reads a compact (nullable) string or bytes.
func (w *wire) bytes() []byte {
	n := w.uvarint()
	if n == 0 {
		return nil
	}
	return w.next(n - 1)
}

// setString sets *s to the next compact string, allocating only when it
// differs from *s.
func (w *wire) setString(s *string) {
	if b := w.bytes(); string(b) != *s {
		*s = string(b)
	}
}

func (w *wire) skipTags() {
	for n := w.uvarint(); n > 0 && !w.bad; n-- {
		w.uvarint() // tag
		w.next(w.uvarint())
	}
}

// Sizes of an OffsetFetch answer (v8+) used to plan batches: per
// partition (partition, offset, leader epoch, empty metadata, error code,
// tags) and, generously, per topic and per group besides their names.
const (
	answerPerPartition = 20
	answerPerTopic     = 24
	answerPerGroup     = 16
)

// coordFetches holds the OffsetFetch batches of one coordinator.
type coordFetches struct {
	reqs []*offsetFetchReq
	size int // planned answer bytes of reqs[len(reqs)-1]
}

// fetchOffsets reads the committed offsets of groups: OffsetFetch requests
// to each group's coordinator (the broker that listed it), as few as keep
// every answer within the observer's answer budget, all in parallel, and
// decoded into the observer's reused answers. A group's answer is planned
// at its size last cycle, a group not answered before at the size of
// commits on every partition of the cluster. Groups whose coordinator moved
// or did not answer, and every group when a broker only speaks OffsetFetch
// before v8, are asked again through kgo's sharded path, which looks
// coordinators up. The result holds an entry for each group some broker
// answered for.
func (o *Observer) fetchOffsets(ctx context.Context, groups []string, listed map[string]listedGroup, topics map[string]*topicInfo, byID map[[16]byte]*topicInfo) map[string]*groupOffsets {
	unknown := answerPerGroup
	for name, ti := range topics {
		unknown += answerPerTopic + len(name) + answerPerPartition*len(ti.parts)
	}
	for _, cf := range o.offsetReqs {
		cf.reqs, cf.size = cf.reqs[:0], 0
	}
	for _, g := range groups {
		c := listed[g].coordinator
		cf := o.offsetReqs[c]
		if cf == nil {
			cf = new(coordFetches)
			o.offsetReqs[c] = cf
		}
		size := unknown + len(g)
		if known := o.offsets[g]; known != nil && known.size > 0 {
			size = known.size
		}
		if n := len(cf.reqs); n == 0 || cf.size+size > o.answerBudget && len(cf.reqs[n-1].Groups) > 0 {
			cf.reqs = resize(cf.reqs, n+1)
			if cf.reqs[n] == nil {
				cf.reqs[n] = &offsetFetchReq{OffsetFetchRequest: kmsg.NewOffsetFetchRequest()}
			}
			cf.reqs[n].Groups, cf.size = cf.reqs[n].Groups[:0], 0
		}
		r := cf.reqs[len(cf.reqs)-1]
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		r.Groups = append(r.Groups, rg)
		cf.size += size
	}
	var wg sync.WaitGroup
	for c, cf := range o.offsetReqs {
		if len(cf.reqs) == 0 {
			delete(o.offsetReqs, c)
			continue
		}
		clear(cf.reqs[len(cf.reqs):cap(cf.reqs)]) // batches no longer needed
		for _, r := range cf.reqs {
			wg.Go(func() {
				r.answer, r.err = nil, nil
				kresp, err := o.cl.Broker(int(c)).RetriableRequest(ctx, r)
				if err != nil {
					r.err = brokerErrE(c, err)
					return
				}
				if resp := kresp.(*offsetFetchResp); resp.Version >= 8 {
					r.answer = resp.into
				}
			})
		}
	}
	wg.Wait()

	var again []string
	for _, cf := range o.offsetReqs {
		for _, r := range cf.reqs {
			o.offsetAnswer(ctx, r, topics, byID, &again)
		}
	}
	if len(again) > 0 {
		o.fetchOffsetsSharded(ctx, again, topics, byID)
	}
	// Forget what no broker answered this cycle.
	for name, g := range o.offsets {
		if g.cycle != o.cycle {
			delete(o.offsets, name)
			continue
		}
		for t, tofs := range g.topics {
			if tofs.cycle != o.cycle {
				delete(g.topics, t)
			}
		}
	}
	return o.offsets
}

// offsetAnswer stores the answer to r, or adds its groups to again when
// they are to be asked through kgo's sharded path.
func (o *Observer) offsetAnswer(ctx context.Context, r *offsetFetchReq, topics map[string]*topicInfo, byID map[[16]byte]*topicInfo, again *[]string) {
	switch {
	case r.err != nil && ctx.Err() != nil:
		for _, g := range r.Groups {
			o.groupOffsets(g.Group).err = r.err.Error()
		}
		return
	case r.answer == nil:
		for _, g := range r.Groups {
			*again = append(*again, g.Group)
		}
		return
	}
	for i := range r.answer.groups {
		ag := &r.answer.groups[i]
		if moved(ag.code) {
			*again = append(*again, ag.name)
			continue
		}
		o.applyOffsets(ag, topics, byID)
	}
	r.release()
}

// moved reports whether a group's error means its coordinator is elsewhere
// or not ready: kgo's sharded path looks it up and retries.
func moved(code int16) bool {
	err := kerr.ErrorForCode(code)
	return errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress)
}

// fetchOffsetsSharded asks for groups through kgo, which finds each group's
// coordinator and retries retriable errors.
func (o *Observer) fetchOffsetsSharded(ctx context.Context, groups []string, topics map[string]*topicInfo, byID map[[16]byte]*topicInfo) {
	req := kmsg.NewPtrOffsetFetchRequest()
	for _, g := range groups {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		req.Groups = append(req.Groups, rg)
	}
	var a offsetsAnswer
	for _, sh := range o.cl.RequestSharded(ctx, req) {
		var err error
		if sh.Err != nil {
			err = sh.Err
		} else {
			err = kerr.ErrorForCode(sh.Resp.(*kmsg.OffsetFetchResponse).ErrorCode)
		}
		if err != nil {
			why := brokerErr(sh.Meta.NodeID, err)
			for _, g := range sh.Req.(*kmsg.OffsetFetchRequest).Groups {
				o.groupOffsets(g.Group).err = why
			}
			continue
		}
		a.fromKmsg(sh.Resp.(*kmsg.OffsetFetchResponse))
		for i := range a.groups {
			o.applyOffsets(&a.groups[i], topics, byID)
		}
	}
}

// fromKmsg refills a from a response kmsg decoded.
func (a *offsetsAnswer) fromKmsg(resp *kmsg.OffsetFetchResponse) {
	a.groups = resize(a.groups, len(resp.Groups))
	for i, rg := range resp.Groups {
		g := &a.groups[i]
		g.name, g.code, g.size = rg.Group, rg.ErrorCode, 0
		g.topics = resize(g.topics, len(rg.Topics))
		for j, rt := range rg.Topics {
			t := &g.topics[j]
			t.name, t.id = rt.Topic, rt.TopicID
			t.parts = resize(t.parts, len(rt.Partitions))
			for k, rp := range rt.Partitions {
				t.parts[k] = answerPart{partition: rp.Partition, offset: rp.Offset, code: rp.ErrorCode}
			}
		}
	}
}

// groupOffsets returns the group's entry, marked as answered this cycle and
// cleared of an earlier error.
func (o *Observer) groupOffsets(name string) *groupOffsets {
	g := o.offsets[name]
	if g == nil {
		g = &groupOffsets{topics: make(map[string]*topicOffsets)}
		o.offsets[name] = g
	}
	if g.cycle != o.cycle {
		g.cycle, g.err = o.cycle, ""
	}
	return g
}

// applyOffsets stores one group's answer for the watched topics.
func (o *Observer) applyOffsets(ag *answerGroup, topics map[string]*topicInfo, byID map[[16]byte]*topicInfo) {
	g := o.groupOffsets(ag.name)
	g.size = ag.size
	if err := kerr.ErrorForCode(ag.code); err != nil {
		g.err = err.Error()
		return
	}
	for i := range ag.topics {
		at := &ag.topics[i]
		info := topics[at.name]
		if info == nil {
			info = byID[at.id]
		}
		if info == nil || !info.watched {
			continue
		}
		tofs := g.topics[info.name]
		if tofs == nil {
			tofs = new(topicOffsets)
			g.topics[info.name] = tofs
		}
		tofs.cycle = o.cycle
		n := len(info.parts)
		tofs.committed = slices.Grow(tofs.committed[:0], n)[:n]
		for p := range tofs.committed {
			tofs.committed[p] = -1
		}
		clear(tofs.errs)
		for _, ap := range at.parts {
			if ap.partition < 0 || int(ap.partition) >= n {
				continue
			}
			if err := kerr.ErrorForCode(ap.code); err != nil {
				if tofs.errs == nil {
					tofs.errs = make(map[int32]string)
				}
				tofs.errs[ap.partition] = err.Error()
				continue
			}
			tofs.committed[ap.partition] = max(ap.offset, -1)
		}
	}
}
