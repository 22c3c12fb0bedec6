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
}

type topicPartition struct {
	topic     string
	partition int32
}

// kafkaPart is one partition's records in hand, oldest first.
type kafkaPart struct {
	tp     topicPartition
	inHand []handRecord
	next   int64 // the offset after the last record polled
	// skipped counts the records the guard skipped as expired since the
	// partition was assigned (Skipped): a running count, reported.
	skipped int64
}

type handRecord struct {
	offset int64
	tsMs   int64
}

// NewKafkaReporter validates cfg and starts the reporter's goroutine (it
// sends nothing until its hook has seen records). Close stops it. The
// error wraps [ErrInvalidConfig], or is a metrics registration error.
func NewKafkaReporter(cfg Config) (*KafkaReporter, error) {
	r := &KafkaReporter{group: cfg.Group, parts: make(map[topicPartition]*kafkaPart)}
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

// OnPollStart finishes every record in hand: the loop asks for more.
func (h *kafkaHook) OnPollStart(context.Context) {
	r := (*KafkaReporter)(h)
	r.mu.Lock()
	r.polled = r.cl != nil
	r.taking = true
	for _, p := range r.hand {
		p.inHand = p.inHand[:0]
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
	if len(p.inHand) == 0 {
		r.hand = append(r.hand, p)
	}
	p.inHand = append(p.inHand, handRecord{rec.Offset, ts})
	p.next = rec.Offset + 1
	r.mu.Unlock()
}

// part returns the state of a partition, creating it. r.mu is held.
func (r *KafkaReporter) part(topic string, partition int32) *kafkaPart {
	if p := r.last; p != nil && p.tp.partition == partition && p.tp.topic == topic {
		return p
	}
	tp := topicPartition{topic, partition}
	p := r.parts[tp]
	if p == nil {
		p = &kafkaPart{tp: tp}
		r.parts[tp] = p
	}
	r.last = p
	return p
}

// Finished says that rec and every earlier record of its partition are
// finished (handled, or skipped as dead work): the position moves past
// rec before the next poll. ttl/kafkaguard calls it as its Progress.
func (r *KafkaReporter) Finished(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.parts[topicPartition{rec.Topic, rec.Partition}]
	if p == nil {
		return
	}
	n := 0
	for n < len(p.inHand) && p.inHand[n].offset <= rec.Offset {
		n++
	}
	if n > 0 {
		r.moved = time.Now()
	}
	p.inHand = p.inHand[:copy(p.inHand, p.inHand[n:])]
	p.next = max(p.next, rec.Offset+1)
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
	cl, group := r.cl, r.group
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
	r.mu.Lock()
	defer r.mu.Unlock()
	byTopic := make(map[string][]quotaproto.ConsumerPartition)
	heldMs := min(max(now.Sub(r.moved).Milliseconds(), 0), quotaproto.MaxHeldMs)
	for tp, p := range r.parts {
		if managed {
			if _, ok := owned[tp.topic][tp.partition]; !ok {
				// Revoked or lost: no longer ours to report.
				delete(r.parts, tp)
				if r.last == p {
					r.last = nil
				}
				continue
			}
		}
		cp := quotaproto.ConsumerPartition{Partition: tp.partition, Position: p.next, Idle: true}
		if len(p.inHand) > 0 {
			cp = quotaproto.ConsumerPartition{Partition: tp.partition, Position: p.inHand[0].offset, HeadTimeMs: p.inHand[0].tsMs,
				Held: min(int64(len(p.inHand)), quotaproto.MaxHeld), HeldMs: heldMs}
		}
		// Always given, 0 too: a report without it is a count the
		// daemon does not know (see quotaproto.ConsumerPartition).
		cp.Skipped = new(int64)
		*cp.Skipped = p.skipped
		byTopic[tp.topic] = append(byTopic[tp.topic], cp)
	}
	if managed {
		// A revoked partition may still be listed in hand.
		r.hand = slices.DeleteFunc(r.hand, func(p *kafkaPart) bool { return r.parts[p.tp] != p })
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
