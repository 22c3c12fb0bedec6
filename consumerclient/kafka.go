package consumerclient

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// KafkaReporter reports a franz-go consumer's position from hooks: put
// [KafkaReporter.Hook] in kgo.WithHooks of one client. Safe for concurrent
// use.
//
// What it reports, per partition: a record returned by a poll is in hand
// until the next poll starts, when everything returned before is finished
// (the poll loop asks for more only once it is done with what it has).
// While records are in hand, the position is the first of them and the
// head time its timestamp, the age of the work the consumer is doing; with
// none, the partition is idle at the offset after the last record polled.
// A ttl/kafkaguard Guard with the reporter as its Progress finishes
// records one by one instead, as it handles or skips them.
//
// With Config.KeepUntilFinished, a polled record stays in hand until the
// consumer says it is finished ([KafkaReporter.Done] for that record,
// [KafkaReporter.Finished] for it and every earlier one of its partition),
// whatever the polls: for a consumer that hands records to workers (a
// goroutine per partition, a pool) and polls on. The head time is then the
// partition's oldest unfinished record's, and the position counts what was
// finished, in any order (see [KafkaReporter.Done]).
//
// With a consumer group it reports only the partitions the client owns:
// partitions revoked or lost are dropped at the next report. Without one
// (kgo.ConsumePartitions), set Config.Group to the group whose commits the
// daemon watches; every partition polled is then reported.
type KafkaReporter struct {
	s *sender

	mu sync.Mutex
	cl *kgo.Client
	// polled is set by the first poll: kgo calls OnNewClient from inside
	// NewClient, before the client may be used; once it is polled it is
	// whole.
	polled bool
	group  string // cfg.Group, else the client's consumer group
	parts  map[topicPartition]*kafkaPart
	hand   []*kafkaPart // partitions that got records since the last poll start
	// last is the partition of the last record seen: a poll hands
	// records partition by partition, so most lookups end here.
	last *kafkaPart
	// moved is when the consumer last took records (the first record a
	// poll handed out) or finished one (Finished): it has finished none
	// of what it holds since (see snapshot); taking says the next record
	// polled starts a poll's records.
	moved  time.Time
	taking bool
	// keep is Config.KeepUntilFinished: a poll finishes nothing.
	keep bool
	// warnedFull: the warning that a partition holds keepMax records
	// was logged.
	warnedFull bool
	// born numbers the partitions as they are first seen (kafkaPart.born):
	// a report forgets only those it asked the client about.
	born uint64
	// asked, for tests, runs in snapshot once the client was asked what
	// it owns, before r.mu is taken again.
	asked func()
}

type topicPartition struct {
	topic     string
	partition int32
}

// kafkaPart is one partition's records in hand, oldest first:
// inHand[head:], offsets increasing. A record finished out of order (Done)
// stays there, its tsMs negated, until every record before it is finished;
// inHand[head] is never finished.
type kafkaPart struct {
	tp     topicPartition
	inHand []handRecord
	head   int
	done   int   // the records of inHand[head:] finished out of order
	next   int64 // the offset after the last record polled
	// taken is when the partition last went from nothing in hand to
	// something (KeepUntilFinished: its heldMs counts from then at most).
	taken time.Time
	// skipped counts the records the guard skipped as expired since the
	// partition was assigned (Skipped): a running count, reported.
	skipped int64
	// born is KafkaReporter.born when the partition was first seen.
	born uint64
}

type handRecord struct {
	offset int64
	tsMs   int64
}

// NewKafkaReporter validates cfg and starts the reporter's goroutine (it
// sends nothing until its hook has seen records). Close stops it. The
// error wraps [ErrInvalidConfig], or is a metrics registration error.
func NewKafkaReporter(cfg Config) (*KafkaReporter, error) {
	r := &KafkaReporter{group: cfg.Group, parts: make(map[topicPartition]*kafkaPart), keep: cfg.KeepUntilFinished}
	s, err := newSender(cfg, quotaproto.KindKafka, r.snapshot)
	if err != nil {
		return nil, err
	}
	r.s = s
	return r, nil
}

// Close stops reporting and waits for the goroutine; the daemon falls back
// to commits once the last report is no longer fresh. Idempotent. The hook
// may still be called afterwards (it only updates memory).
func (r *KafkaReporter) Close() { r.s.close() }

// Hook returns the hook to pass to kgo.WithHooks: it implements
// kgo.HookNewClient, kgo.HookClientClosed, kgo.HookPollStart and
// kgo.HookFetchRecordUnbuffered. Use it in one client only.
func (r *KafkaReporter) Hook() kgo.Hook { return (*kafkaHook)(r) }

type kafkaHook KafkaReporter

var (
	_ kgo.HookNewClient                  = (*kafkaHook)(nil)
	_ kgo.HookClientClosed               = (*kafkaHook)(nil)
	_ kgo.HookPollStart                  = (*kafkaHook)(nil)
	_ kgo.HookFetchRecordUnbuffered      = (*kafkaHook)(nil)
	_ interface{ Finished(*kgo.Record) } = (*KafkaReporter)(nil)
	_ interface{ Done(*kgo.Record) }     = (*KafkaReporter)(nil)
)

// OnNewClient remembers the client, to learn its group and which
// partitions it owns.
func (h *kafkaHook) OnNewClient(cl *kgo.Client) {
	r := (*KafkaReporter)(h)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cl != nil {
		r.s.cfg.Logger.Warn("consumerclient: a KafkaReporter's hook is used in a second client; ignoring it")
		return
	}
	r.cl = cl
	if r.group == "" {
		r.group, _ = cl.OptValue(kgo.ConsumerGroup).(string)
	}
	if r.group == "" {
		r.s.cfg.Logger.Warn("consumerclient: no Config.Group and the client has no consumer group; nothing will be reported")
	}
}

// OnClientClosed stops reporting the client's partitions.
func (h *kafkaHook) OnClientClosed(cl *kgo.Client) {
	r := (*KafkaReporter)(h)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cl == cl {
		r.polled = false
		clear(r.parts)
		r.hand, r.last = r.hand[:0], nil
	}
}

// OnPollStart finishes every record in hand: the loop asks for more
// (unless KeepUntilFinished: then the records wait for Done or Finished).
func (h *kafkaHook) OnPollStart(context.Context) {
	r := (*KafkaReporter)(h)
	r.mu.Lock()
	r.polled = r.cl != nil
	r.taking = !r.keep
	for _, p := range r.hand {
		p.clear()
	}
	r.hand = r.hand[:0]
	r.mu.Unlock()
}

// OnFetchRecordUnbuffered puts a polled record in hand. Records dropped
// from the client's buffers (polled false) were never handed out.
func (h *kafkaHook) OnFetchRecordUnbuffered(rec *kgo.Record, polled bool) {
	if !polled {
		return
	}
	r := (*KafkaReporter)(h)
	ts := rec.Timestamp.UnixMilli()
	if ts <= 0 {
		// A record without a usable timestamp: count its age from now.
		ts = time.Now().UnixMilli()
	}
	r.mu.Lock()
	if r.taking {
		r.moved, r.taking = time.Now(), false
	}
	p := r.part(rec.Topic, rec.Partition)
	full := false
	if r.keep {
		full = r.keepRecord(p, rec.Offset)
	} else if !p.holds() {
		r.hand = append(r.hand, p)
	}
	p.push(handRecord{rec.Offset, ts})
	p.next = rec.Offset + 1
	r.mu.Unlock()
	if full {
		r.s.cfg.Logger.Warn("consumerclient: a partition has the most unfinished records a KafkaReporter keeps in hand; "+
			"the oldest are taken as finished from now on, and the reported lag is short of what waits: "+
			"a consumer that calls Done or Finished for each record it finishes (and Revoked for the partitions "+
			"whose queues it drops) gets here only with that many records waiting in its queues",
			"topic", rec.Topic, "partition", rec.Partition, "records", keepMax)
	}
}

// keepMax is how many unfinished records a partition keeps in hand at
// most with KeepUntilFinished: beyond it the oldest is taken as finished,
// and a warning logged once. The records finished out of order behind an
// unfinished one wait in the slice too, up to keepMax of them (see
// keepRecord): 2 x keepMax x 16 bytes, 8 MiB, a partition at most, and
// the slack append leaves (a quarter more at that size).
const keepMax = 1 << 18

// keepRoom is the room, in records, a partition's slice keeps with
// KeepUntilFinished however few it holds (64 KiB); beyond it, a slice a
// quarter full or less is given back (see kafkaPart.shrink).
const keepRoom = 4096

// keepRecord makes room for a record of p polled at offset with
// KeepUntilFinished. A record polled again (an offset before the last
// one polled: the partition was assigned again, or the consumer sought
// back) forgets what was in hand: those records come again. It reports
// whether the partition holds keepMax unfinished records for the first
// time in the reporter's life (the caller warns). r.mu is held.
func (r *KafkaReporter) keepRecord(p *kafkaPart, offset int64) (full bool) {
	if offset < p.next {
		p.clear()
	}
	if !p.holds() {
		p.taken = time.Now()
	}
	if p.held() >= keepMax {
		full, r.warnedFull = !r.warnedFull, true
		p.finishThrough(p.inHand[p.head].offset)
	}
	if len(p.inHand)-p.head >= 2*keepMax {
		// At least keepMax of them finished out of order behind a
		// stuck one: dropping them costs one copy a record.
		p.inHand, p.head, p.done = p.unfinished(p.inHand[:0]), 0, 0
	}
	return full
}

// part returns the state of a partition, creating it. r.mu is held.
func (r *KafkaReporter) part(topic string, partition int32) *kafkaPart {
	if p := r.last; p != nil && p.tp.partition == partition && p.tp.topic == topic {
		return p
	}
	tp := topicPartition{topic, partition}
	p := r.parts[tp]
	if p == nil {
		r.born++
		p = &kafkaPart{tp: tp, born: r.born}
		r.parts[tp] = p
	}
	r.last = p
	return p
}

// Finished says that rec and every earlier record of its partition are
// finished (handled, or skipped as dead work): the position moves past
// rec before the next poll. ttl/kafkaguard calls it as its Progress. A
// record of a partition the reporter no longer has (revoked) is ignored.
func (r *KafkaReporter) Finished(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.parts[topicPartition{rec.Topic, rec.Partition}]
	if p == nil {
		return
	}
	if p.finishThrough(rec.Offset) {
		r.moved = time.Now()
	}
	p.next = max(p.next, rec.Offset+1)
	if r.keep {
		p.shrink()
	}
}

// Done says that rec is finished, and nothing else, in any order: a
// partition's records finished out of order (a pool of workers) are
// reported as a count, the position being the offset after the last
// record polled less the records in hand not finished (held), so that the
// lag the daemon reads is the records not finished, in the broker or in
// hand, and the position moves with every Done; the head time is that of
// the oldest unfinished record. A record not in hand (finished already,
// or polled before its partition was revoked) is ignored. A late Done for
// a record polled again since (its partition assigned again, or a seek
// back) finishes the new copy in hand, whose offset it shares: until that
// copy's own Done, the lag reads one short.
// Cost: a clock read, a lock and a binary search over the partition's
// records in hand; no allocation (BenchmarkKafkaHookKeep).
func (r *KafkaReporter) Done(rec *kgo.Record) {
	now := time.Now() // read outside the lock: the clock is most of the cost
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.parts[topicPartition{rec.Topic, rec.Partition}]
	if p == nil || !p.finishOne(rec.Offset) {
		return
	}
	if now.After(r.moved) {
		r.moved = now // (a Done of another goroutine may have set a later one)
	}
	if r.keep {
		p.shrink()
	}
}

// Revoked forgets the records in hand of partitions (topic to partition
// numbers, as kgo.OnPartitionsRevoked and kgo.OnPartitionsLost give them):
// call it from those callbacks with KeepUntilFinished when the consumer
// drops what it queued for them. Without it, the reporter forgets a
// partition at its next report once the client no longer owns it, or when
// it polls one of its records again; a partition revoked and assigned
// again in between, whose queued records the consumer dropped, would keep
// them in hand for good.
func (r *KafkaReporter) Revoked(partitions map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range partitions {
		for _, n := range ps {
			r.forget(topicPartition{t, n})
		}
	}
}

// forget drops the state of tp. r.mu is held.
func (r *KafkaReporter) forget(tp topicPartition) {
	p := r.parts[tp]
	if p == nil {
		return
	}
	delete(r.parts, tp)
	if r.last == p {
		r.last = nil
	}
	if i := slices.Index(r.hand, p); i >= 0 {
		r.hand = slices.Delete(r.hand, i, i+1)
	}
}

// holds says whether the partition has a record in hand.
func (p *kafkaPart) holds() bool { return p.head < len(p.inHand) }

// held is how many records in hand are not finished.
func (p *kafkaPart) held() int { return len(p.inHand) - p.head - p.done }

// clear finishes every record in hand.
func (p *kafkaPart) clear() { p.inHand, p.head, p.done = p.inHand[:0], 0, 0 }

// unfinished appends the unfinished records in hand to dst (which may be
// p.inHand[:0]: it writes no further than it reads) and returns it.
func (p *kafkaPart) unfinished(dst []handRecord) []handRecord {
	for _, h := range p.inHand[p.head:] {
		if h.tsMs > 0 {
			dst = append(dst, h)
		}
	}
	return dst
}

// shrink gives back a slice with room for more than keepRoom records once
// its unfinished records fill a quarter of it or less: they move to one
// of twice their number (at least keepRoom; none when there are none).
// Each move at least halves the room, so it costs at most one copy a
// record polled, and an allocation a halving (KeepUntilFinished: the
// default mode keeps its room, one poll's records).
func (p *kafkaPart) shrink() {
	if cap(p.inHand) > keepRoom && 4*p.held() <= cap(p.inHand) {
		p.giveBack()
	}
}

// giveBack moves the unfinished records to a new slice (see shrink).
func (p *kafkaPart) giveBack() {
	n := p.held()
	var s []handRecord
	if n > 0 {
		s = p.unfinished(make([]handRecord, 0, max(2*n, keepRoom)))
	}
	p.inHand, p.head, p.done = s, 0, 0
}

// push puts a record in hand, after the others. The finished records
// before head are dropped once they are half of the slice, and those
// finished out of order behind an unfinished one (Done) once they are half
// of what is in hand and the slice is full, so that each record is copied
// once on average.
func (p *kafkaPart) push(rec handRecord) {
	switch {
	case p.head > 0 && p.head*2 >= len(p.inHand):
		p.inHand = p.inHand[:copy(p.inHand, p.inHand[p.head:])]
		p.head = 0
	case p.done > 0 && len(p.inHand) == cap(p.inHand) && p.done*2 >= len(p.inHand)-p.head:
		p.inHand, p.head, p.done = p.unfinished(p.inHand[:0]), 0, 0
	}
	p.inHand = append(p.inHand, rec)
}

// finishThrough finishes the records in hand up to offset; it says
// whether it finished any.
func (p *kafkaPart) finishThrough(offset int64) bool {
	from := p.head
	for p.holds() && p.inHand[p.head].offset <= offset {
		if p.inHand[p.head].tsMs < 0 {
			p.done--
		}
		p.head++
	}
	moved := p.head > from
	p.dropFinished()
	return moved
}

// finishOne finishes the record in hand at offset, if any (it says so).
func (p *kafkaPart) finishOne(offset int64) bool {
	recs := p.inHand[p.head:]
	i, ok := slices.BinarySearchFunc(recs, offset, func(h handRecord, o int64) int { return cmp.Compare(h.offset, o) })
	if !ok || recs[i].tsMs < 0 {
		return false
	}
	recs[i].tsMs = -recs[i].tsMs
	p.done++
	p.dropFinished()
	return true
}

// dropFinished moves head past the records finished out of order that are
// now first.
func (p *kafkaPart) dropFinished() {
	for p.holds() && p.inHand[p.head].tsMs < 0 {
		p.head++
		p.done--
	}
	if !p.holds() {
		p.clear()
	}
}

// Skipped counts rec as skipped as expired (ttl/kafkaguard calls it, as
// its kafkaguard.Skipper, before Finished): each report carries the
// partition's running count (quotaproto.ConsumerPartition.Skipped), so
// that the daemon does not read a backlog the guard skipped in one go as
// the consumer's capacity.
func (r *KafkaReporter) Skipped(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.parts[topicPartition{rec.Topic, rec.Partition}]; p != nil && p.skipped < quotaproto.MaxSkipped {
		p.skipped++
	}
}

// snapshot is the sender's view: the partitions the client owns, each in
// hand or idle. A partition in hand says how many records it holds and
// for how long none was finished (since the poll, or the last Finished):
// the consumer works through a poll's records before it polls again, so
// it finished fewer than all it holds in that time, a bound of its
// capacity the daemon can read before the position moves.
func (r *KafkaReporter) snapshot(now time.Time) (string, []quotaproto.ConsumerTopic) {
	r.mu.Lock()
	cl, group, born, asked := r.cl, r.group, r.born, r.asked
	if !r.polled {
		cl = nil
	}
	r.mu.Unlock()
	// Ask the client what it owns without holding r.mu: franz-go calls
	// the hooks with its own locks held.
	var owned map[string]map[int32]kgo.EpochOffset
	managed := false
	if cl != nil {
		if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
			managed = true
			owned = cl.CommittedOffsets()
			for t, ps := range cl.UncommittedOffsets() {
				if owned == nil {
					owned = make(map[string]map[int32]kgo.EpochOffset)
				}
				if owned[t] == nil {
					owned[t] = make(map[int32]kgo.EpochOffset)
				}
				for p, o := range ps {
					owned[t][p] = o
				}
			}
		}
	}
	if asked != nil {
		asked()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	byTopic := make(map[string][]quotaproto.ConsumerPartition)
	heldMs := min(max(now.Sub(r.moved).Milliseconds(), 0), quotaproto.MaxHeldMs)
	for tp, p := range r.parts {
		if managed {
			// Not owned: revoked or lost, no longer ours to report,
			// unless first polled since the client was asked.
			if _, ok := owned[tp.topic][tp.partition]; !ok && p.born <= born {
				r.forget(tp)
				continue
			}
		}
		cp := quotaproto.ConsumerPartition{Partition: tp.partition, Position: p.next, Idle: true}
		if p.holds() {
			ms := heldMs
			if r.keep {
				ms = min(ms, max(now.Sub(p.taken).Milliseconds(), 0))
			}
			first := p.inHand[p.head]
			pos := first.offset
			if r.keep {
				// A count: the records finished, in any order (see Done).
				pos = p.next - int64(p.held())
			}
			cp = quotaproto.ConsumerPartition{Partition: tp.partition, Position: pos, HeadTimeMs: first.tsMs,
				Held: min(int64(p.held()), quotaproto.MaxHeld), HeldMs: ms}
		}
		// Always given, 0 too: a report without it is a count the
		// daemon does not know (see quotaproto.ConsumerPartition).
		cp.Skipped = new(int64)
		*cp.Skipped = p.skipped
		// Each record finished as it is, whatever the polls: the
		// partition's moves are its own consumer's.
		cp.OwnPace = r.keep
		byTopic[tp.topic] = append(byTopic[tp.topic], cp)
	}
	return group, sortedTopics(byTopic)
}

// sortedTopics turns byTopic into topics in name order, partitions in
// number order (stable reports are easier to read and to test).
func sortedTopics(byTopic map[string][]quotaproto.ConsumerPartition) []quotaproto.ConsumerTopic {
	out := make([]quotaproto.ConsumerTopic, 0, len(byTopic))
	for t, ps := range byTopic {
		slices.SortFunc(ps, func(a, b quotaproto.ConsumerPartition) int { return cmp.Compare(a.Partition, b.Partition) })
		out = append(out, quotaproto.ConsumerTopic{Topic: t, Partitions: ps})
	}
	slices.SortFunc(out, func(a, b quotaproto.ConsumerTopic) int { return cmp.Compare(a.Topic, b.Topic) })
	return out
}
