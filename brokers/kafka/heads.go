package kafka

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/lag"
)

// headKey names a head lookup: the first consumable record at or after
// offset in one partition.
type headKey struct {
	topic     string
	partition int32
	offset    int64
}

// topicHeads is the head cache of one topic: per partition, entries sorted
// by offset. A pair looks its topic up once, then each partition by index
// and binary search, so a cycle of 200,000 (group, partition) pairs costs
// 2,000 map lookups, not 200,000.
type topicHeads struct {
	id    [16]byte // a recreated topic (new ID) starts a new cache
	parts [][]headEntry
}

// headRefresh is how long a cached head (an entry with pos >= 0) is used
// before it is read again. Records never change at an offset, but
// compaction removes them: the record at a cached head may be gone, the
// true head newer and the lag smaller. Re-reading bounds how long such a
// head is reported; until the new read answers, the cached head stands.
// Entries without a record (pos -1) need no refresh: compaction adds none.
const headRefresh = time.Minute

// headEntry is a cached head lookup, dropped when no pair used it in a
// cycle and read again after headRefresh.
type headEntry struct {
	// offset is the key: the position the lookup starts at.
	offset int64
	// pos is the offset of the first consumable record at or after
	// offset, or -1 when none was seen before scanned.
	pos int64
	// ts is that record's timestamp in Unix milliseconds.
	ts int64
	// scanned, when pos is -1: offsets [offset, scanned) hold no
	// consumable record (only markers, aborted or compacted offsets).
	scanned int64
	// seen is the last cycle that used this entry.
	seen uint64
	// read is when the entry was read (the cycle's time).
	read time.Time
}

// topicHeads returns the cache slots of ti, one per partition, creating or
// resetting them as needed. Slots stay put for the rest of the cycle.
func (o *Observer) topicHeads(ti *topicInfo) [][]headEntry {
	th := o.heads[ti.name]
	if th == nil || th.id != ti.id {
		th = &topicHeads{id: ti.id}
		o.heads[ti.name] = th
	}
	if len(th.parts) < len(ti.parts) {
		th.parts = append(th.parts, make([][]headEntry, len(ti.parts)-len(th.parts))...)
	}
	return th.parts[:len(ti.parts)]
}

func searchHead(slot []headEntry, off int64) (int, bool) {
	return slices.BinarySearchFunc(slot, off, func(e headEntry, off int64) int { return cmp.Compare(e.offset, off) })
}

// lookupHead returns the entry for off and marks it used, or nil.
func (o *Observer) lookupHead(slot *[]headEntry, off int64) *headEntry {
	i, ok := searchHead(*slot, off)
	if !ok {
		return nil
	}
	e := &(*slot)[i]
	e.seen = o.cycle
	return e
}

func storeHead(slot *[]headEntry, e headEntry) {
	i, ok := searchHead(*slot, e.offset)
	if ok {
		(*slot)[i] = e
		return
	}
	*slot = slices.Insert(*slot, i, e)
}

// headNeed is a head to fetch: key's head, reading from offset from.
type headNeed struct {
	key    headKey
	slot   *[]headEntry // the cache slot of key's partition
	from   int64
	leader int32
	topic  *topicInfo
	// refresh: the sample already holds a cached head (older than
	// headRefresh); the fetch only replaces it when it answers.
	refresh bool
}

type pendingHead struct {
	ps   *lag.PartitionSample
	need headNeed
}

// partFetch is one partition in a head fetch and what it returned.
type partFetch struct {
	topic     *topicInfo
	partition int32
	leader    int32
	lo, hi    int   // its needs: pending[lo:hi]
	from      int64 // the offset fetched

	done bool
	err  string
	recs []recTime // consumable records in [from, next), ascending
	next int64     // every offset below next was read
	// fallback is the header of a batch the broker truncated at the
	// partition byte limit, when nothing else was read.
	fbFirst, fbLast, fbTS int64
	fbOK                  bool
}

type recTime struct{ off, ts int64 }

// fetchHeads reads the heads of pending with at most one Fetch per
// partition leader, in parallel, caches what it learns and fills each
// pending sample's Lag and head.
func (o *Observer) fetchHeads(ctx context.Context, byID map[[16]byte]*topicInfo, pending []pendingHead) {
	slices.SortFunc(pending, func(a, b pendingHead) int {
		return cmp.Or(
			strings.Compare(a.need.key.topic, b.need.key.topic),
			cmp.Compare(a.need.key.partition, b.need.key.partition),
			cmp.Compare(a.need.from, b.need.from),
		)
	})
	var parts []partFetch
	for lo := 0; lo < len(pending); {
		n := pending[lo].need
		hi := lo + 1
		distinct := 1
		for hi < len(pending) && pending[hi].need.key.topic == n.key.topic && pending[hi].need.key.partition == n.key.partition {
			if pending[hi].need.from != pending[hi-1].need.from {
				distinct++
			}
			hi++
		}
		// One offset per partition per fetch: the lowest, which
		// covers the most of the others; when that left some unread in
		// earlier cycles, rotate so that every group gets its turn.
		pick := int(o.starve[tpKey{n.key.topic, n.key.partition}] % uint32(distinct))
		from := n.from
		for i, d := lo, 0; i < hi; i++ {
			if i > lo && pending[i].need.from != pending[i-1].need.from {
				d++
			}
			if d == pick {
				from = pending[i].need.from
				break
			}
		}
		parts = append(parts, partFetch{topic: n.topic, partition: n.key.partition, leader: n.leader, lo: lo, hi: hi, from: from})
		lo = hi
	}

	byLeader := map[int32][]int{}
	for i := range parts {
		byLeader[parts[i].leader] = append(byLeader[parts[i].leader], i)
	}
	if len(parts) == 0 {
		return
	}
	fns := make([]func(context.Context), 0, len(byLeader))
	for leader, idx := range byLeader {
		fns = append(fns, func(ctx context.Context) { o.fetchFrom(ctx, leader, idx, parts, byID) })
	}
	o.phase(ctx, fns...)

	starve := map[tpKey]uint32{}
	for i := range parts {
		pf := &parts[i]
		all := true
		for _, ph := range pending[pf.lo:pf.hi] {
			all = o.resolve(ph, pf) && all
		}
		if !all {
			k := tpKey{pf.topic.name, pf.partition}
			starve[k] = o.starve[k] + 1
		}
	}
	o.starve = starve
}

type tpKey struct {
	topic     string
	partition int32
}

// fetchFrom issues one Fetch to leader for parts[idx...] and records the
// results in parts (each index is written by exactly one goroutine).
func (o *Observer) fetchFrom(ctx context.Context, leader int32, idx []int, parts []partFetch, byID map[[16]byte]*topicInfo) {
	// Rotate the order so that partitions left out by the response byte
	// limit come first in a later cycle.
	if n := len(idx); n > 1 {
		r := int(o.cycle % uint64(n))
		idx = append(idx[r:len(idx):len(idx)], idx[:r]...)
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = o.cfg.HeadFetchMaxBytes
	req.IsolationLevel = 1 // read_committed: no open or aborted records
	topicAt := map[*topicInfo]int{}
	type tp struct {
		t *topicInfo
		p int32
	}
	where := make(map[tp]int, len(idx))
	for _, i := range idx {
		pf := &parts[i]
		where[tp{pf.topic, pf.partition}] = i
		ti, ok := topicAt[pf.topic]
		if !ok {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = pf.topic.name
			rt.TopicID = pf.topic.id
			req.Topics = append(req.Topics, rt)
			ti = len(req.Topics) - 1
			topicAt[pf.topic] = ti
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = pf.partition
		rp.FetchOffset = pf.from
		rp.PartitionMaxBytes = o.cfg.HeadFetchPartitionBytes
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, rp)
	}

	fail := func(why string) {
		for _, i := range idx {
			parts[i].err = why
		}
	}
	kresp, err := o.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		fail(brokerErr(leader, err))
		return
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		fail(brokerErr(leader, err))
		return
	}
	for i := range resp.Topics {
		rt := &resp.Topics[i]
		var ti *topicInfo
		if rt.TopicID != ([16]byte{}) {
			ti = byID[rt.TopicID]
		}
		if ti == nil {
			for t := range topicAt {
				if t.name == rt.Topic {
					ti = t
					break
				}
			}
		}
		if ti == nil {
			continue
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			k, ok := where[tp{ti, rp.Partition}]
			if !ok {
				continue
			}
			parseHead(&parts[k], rp, o.decompressor)
		}
	}
	for _, i := range idx {
		if !parts[i].done && parts[i].err == "" {
			parts[i].err = "partition missing from fetch response"
		}
	}
}

// parseHead decodes one partition of a head fetch into pf.
func parseHead(pf *partFetch, rp *kmsg.FetchResponseTopicPartition, dec kgo.Decompressor) {
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		pf.err = err.Error()
		return
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         pf.from,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          pf.topic.name,
		Partition:      pf.partition,
	}, rp, dec, nil)
	if fp.Err != nil && len(fp.Records) == 0 {
		pf.err = fp.Err.Error()
		return
	}
	pf.done = true
	pf.next = max(next, pf.from)
	pf.recs = make([]recTime, 0, len(fp.Records))
	for _, r := range fp.Records {
		pf.recs = append(pf.recs, recTime{off: r.Offset, ts: r.Timestamp.UnixMilli()})
	}
	if len(pf.recs) == 0 && pf.next == pf.from {
		pf.fbFirst, pf.fbLast, pf.fbTS, pf.fbOK = truncatedBatchHead(rp.RecordBatches)
	}
}

// truncatedBatchHead reads the header of a v2 record batch that the broker
// cut at the partition byte limit (Kafka returns the first bytes of a batch
// larger than the limit). The records cannot be decoded, but the header
// gives the offsets the batch spans and a timestamp: the batch's first
// timestamp, or its max timestamp under LogAppendTime or when the first is
// a delete horizon. The head time is then approximate, older by at most the
// batch's time span. Control and transactional batches are not used (their
// records may be markers or aborted).
func truncatedBatchHead(raw []byte) (first, last, ts int64, ok bool) {
	const headerLen = 61
	if len(raw) < headerLen || raw[16] != 2 {
		return 0, 0, 0, false
	}
	be := binary.BigEndian
	length := int64(int32(be.Uint32(raw[8:])))
	if length+12 <= int64(len(raw)) {
		return 0, 0, 0, false // a whole batch: it was decoded, or is corrupt
	}
	attrs := be.Uint16(raw[21:])
	const (
		logAppendTime = 0x08
		transactional = 0x10
		control       = 0x20
		deleteHorizon = 0x40
	)
	if attrs&(transactional|control) != 0 {
		return 0, 0, 0, false
	}
	first = int64(be.Uint64(raw[0:]))
	last = first + int64(int32(be.Uint32(raw[23:])))
	ts = int64(be.Uint64(raw[27:]))
	if attrs&(logAppendTime|deleteHorizon) != 0 {
		ts = int64(be.Uint64(raw[35:]))
	}
	return first, last, ts, true
}

// resolve fills ph's sample from pf and caches what pf tells about ph. It
// reports whether pf covered ph.
func (o *Observer) resolve(ph pendingHead, pf *partFetch) bool {
	ps, from := ph.ps, ph.need.from
	if !pf.done {
		if pf.err != "" && !ph.need.refresh {
			ps.Err = "head fetch: " + pf.err
		}
		return true // a failure, not starvation
	}
	if from < pf.from {
		return false // another group's offset was fetched this cycle
	}
	e := headEntry{offset: ph.need.key.offset, pos: -1, seen: o.cycle, read: o.at}
	i, _ := slices.BinarySearchFunc(pf.recs, from, func(r recTime, off int64) int { return cmp.Compare(r.off, off) })
	switch {
	case i < len(pf.recs):
		e.pos, e.ts = pf.recs[i].off, pf.recs[i].ts
	case from < pf.next:
		e.scanned = pf.next
	case pf.fbOK && pf.fbFirst <= from && from <= pf.fbLast:
		e.pos, e.ts = from, pf.fbTS
	default:
		return false // beyond what the response covered
	}
	storeHead(ph.need.slot, e)
	applyHead(ps, e, ps.End)
	return true
}

// sweepHeads drops cache entries no pair used this cycle, which bounds the
// cache by the number of (group, partition) pairs with lag.
func (o *Observer) sweepHeads() {
	for name, th := range o.heads {
		n := 0
		for p := range th.parts {
			th.parts[p] = slices.DeleteFunc(th.parts[p], func(e headEntry) bool { return e.seen != o.cycle })
			n += len(th.parts[p])
		}
		if n == 0 {
			delete(o.heads, name)
		}
	}
}

// cachedHeads counts the entries in the head cache.
func (o *Observer) cachedHeads() int {
	n := 0
	for _, th := range o.heads {
		for _, slot := range th.parts {
			n += len(slot)
		}
	}
	return n
}
