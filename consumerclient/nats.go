package consumerclient

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// MaxInHand bounds the messages a [NATSReporter] tracks per stream;
// messages received beyond it are not tracked (the report then shows the
// oldest tracked ones, which are older still).
const MaxInHand = 1 << 16

// NATSReporter reports a JetStream consumer's position from the messages
// the application handles: call Received when a message reaches the
// handler and Done when the handler is finished with it (whether its ack
// goes now or later in a batch), or use [NATSReporter.Wrap]. Safe for
// concurrent use: handlers may run in parallel and finish out of order.
//
// What it reports, per stream: with messages in hand, the smallest stream
// sequence among them and its stored timestamp, the oldest work this
// instance is doing; with none, idle at the sequence after the last one
// done. The daemon combines the reports of the consumer's instances (give
// each a distinct Config.Member, or leave it empty for a random one).
//
// With messages in hand it also says how many stream sequences it holds
// from that sequence on, up to the highest sequence received (received,
// in hand or done while an older one still is), and for how long it has
// finished none (since the last Done, or the Received that found none in
// hand): it finished fewer than it holds in that time, a bound of its
// capacity the daemon reads before the position moves (protocol 1.3's
// held and heldMs, as the Kafka hook reports them). Sequences, not
// messages: on a filtered consumer the sequences between carry other
// subjects' messages, and a message redelivered at an old sequence counts
// every sequence from it to the highest; either makes the count larger
// and the bound looser (the daemon then lowers the quota less, and climbs
// back less after a stall).
//
// The daemon reads the count only while one member reports alone: it
// takes that member for the whole consumer. Give every instance a
// reporter, every daemon replica's URL (a replica uses only the reports
// it received itself) and a distinct Member; an instance without one, or
// two sharing a Member, make one member's count read as the consumer's.
type NATSReporter struct {
	s *sender

	mu      sync.Mutex
	group   string // cfg.Group, else the consumer of the first message
	streams map[string]*natsStream
}

type natsStream struct {
	inHand map[uint64]int64 // stream sequence -> stored time, Unix ms
	next   uint64           // after the highest sequence done
	// high is the highest sequence received; moved is when a message
	// was last done, or received with none in hand (see snapshot).
	high  uint64
	moved time.Time
}

// NewNATSReporter validates cfg and starts the reporter's goroutine (it
// sends nothing until a message was received). Close stops it. The error
// wraps [ErrInvalidConfig], or is a metrics registration error.
func NewNATSReporter(cfg Config) (*NATSReporter, error) {
	r := &NATSReporter{group: cfg.Group, streams: make(map[string]*natsStream)}
	s, err := newSender(cfg, quotaproto.KindNATS, r.snapshot)
	if err != nil {
		return nil, err
	}
	r.s = s
	return r, nil
}

// Close stops reporting and waits for the goroutine; the daemon falls back
// to the consumer's ack floor once the last report is no longer fresh.
// Idempotent. Received and Done may still be called afterwards.
func (r *NATSReporter) Close() { r.s.close() }

// Received puts msg in hand. Messages without JetStream metadata, or of
// another consumer than Config.Group, are ignored.
func (r *NATSReporter) Received(msg jetstream.Msg) {
	r.update(msg, func(st *natsStream, md *jetstream.MsgMetadata) {
		st.high = max(st.high, md.Sequence.Stream)
		if len(st.inHand) == 0 {
			st.moved = time.Now()
		}
		if len(st.inHand) >= MaxInHand {
			return
		}
		ts := md.Timestamp.UnixMilli()
		if ts <= 0 {
			ts = time.Now().UnixMilli()
		}
		st.inHand[md.Sequence.Stream] = ts
	})
}

// Done takes msg out of hand: the handler is finished with it, whether it
// acknowledged it, will acknowledge it in a batch, or gave up on it (a
// message redelivered later is received again).
func (r *NATSReporter) Done(msg jetstream.Msg) {
	r.update(msg, func(st *natsStream, md *jetstream.MsgMetadata) {
		delete(st.inHand, md.Sequence.Stream)
		st.next = max(st.next, md.Sequence.Stream+1)
		st.moved = time.Now()
	})
}

// update runs f under the lock with the state of msg's stream, unless msg
// has no JetStream metadata or belongs to another consumer.
func (r *NATSReporter) update(msg jetstream.Msg, f func(*natsStream, *jetstream.MsgMetadata)) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.stream(md); st != nil {
		f(st, md)
	}
}

// Wrap returns a handler for consumer.Consume that reports around h.
func (r *NATSReporter) Wrap(h jetstream.MessageHandler) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		r.Received(msg)
		defer r.Done(msg)
		h(msg)
	}
}

// stream returns md's stream state, or nil when md belongs to another
// consumer than the reporter's. r.mu is held.
func (r *NATSReporter) stream(md *jetstream.MsgMetadata) *natsStream {
	if r.group == "" {
		if !quotaproto.ValidGroup(md.Consumer) {
			return nil
		}
		r.group = md.Consumer
	}
	if md.Consumer != r.group {
		return nil
	}
	st := r.streams[md.Stream]
	if st == nil {
		st = &natsStream{inHand: make(map[uint64]int64)}
		r.streams[md.Stream] = st
	}
	return st
}

// snapshot is the sender's view: per stream, the oldest message in hand
// with what it holds from there (see NATSReporter), or idle.
func (r *NATSReporter) snapshot(now time.Time) (string, []quotaproto.ConsumerTopic) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byTopic := make(map[string][]quotaproto.ConsumerPartition, len(r.streams))
	for name, st := range r.streams {
		p := quotaproto.ConsumerPartition{Position: int64(min(st.next, 1<<62)), Idle: true}
		first := true
		for seq, ts := range st.inHand {
			if first || int64(seq) < p.Position {
				p = quotaproto.ConsumerPartition{Position: int64(min(seq, 1<<62)), HeadTimeMs: ts}
				first = false
			}
		}
		if p.Idle && st.next == 0 {
			continue // nothing received yet
		}
		if !p.Idle {
			p.Held = int64(min(st.high-uint64(p.Position)+1, quotaproto.MaxHeld))
			p.HeldMs = min(max(now.Sub(st.moved).Milliseconds(), 0), quotaproto.MaxHeldMs)
		}
		byTopic[name] = []quotaproto.ConsumerPartition{p}
	}
	return r.group, sortedTopics(byTopic)
}
