package bench

import (
	"sync"
	"time"
)

// heads measures the true head age of a run from the bench's own records:
// per partition (a Kafka partition; a NATS stream is partition 0, its
// stream sequence the offset), the creation time of every record the
// broker acknowledged to a producer, by offset, and how far the consumers
// got. The head of a partition is its lowest offset not processed yet
// whose record was acknowledged; the true head age at a moment is the
// oldest head's age then, 0 when every acknowledged record is processed.
//
// Processed means finished or skipped: a record whose processing ended
// (the consumer's pacer let it go), or an expired one a ttl guard skipped
// (marked when the guard skips it). A record being processed is not processed yet, so with a poll of a
// thousand records in hand the head is the record being processed, not the
// poll's first (the daemon's head age for a consumer that reports what it
// holds reads the latter). Consumers process a partition in offset order
// (every consumer of the bench does: franz-go returns a partition's records
// in order and the bench's loops keep it; a JetStream consumer delivers a
// stream in sequence order), so the consumers' position in a partition is
// one past the highest offset processed; a record processed again (a
// rebalance, a guard's rewind) moves nothing.
//
// A record acknowledged after the consumers processed it (its ack was on
// its way) was never unprocessed and is not counted. A record the broker
// stored without its producer learning it (a timeout after the write) is
// not counted either: the measure is of what producers were told was
// stored.
//
// Memory: 8 bytes per acknowledged record not yet processed, plus the
// processed ones of up to half the slice (the prefix is dropped once it
// is half of it): 4,000 msg/s stored for a minute with nothing processed
// is 2 MB. Offsets start at 0 (a fresh topic or stream per run); an offset
// maxSpan or more beyond the first one kept is not tracked.
//
// Safe for concurrent use: acks (producer callbacks), processing (consumer
// goroutines) and the sampler share one mutex, held for an append or a
// short scan.
type heads struct {
	mu    sync.Mutex
	parts []partHeads
}

// partHeads is one partition: created[i] is the creation time (unix
// nanoseconds) of the record at offset base+i, 0 while unknown (not
// acknowledged yet, or dropped); next is the lowest offset not processed.
type partHeads struct {
	created []int64
	base    int64
	next    int64
}

// maxSpan bounds how far beyond a partition's position an offset is
// tracked (16 Mi records, 128 MB): more is not a bench run's topic.
const maxSpan = 1 << 24

// part returns partition p's state, growing the table; nil for a
// negative p. Called with mu held.
func (h *heads) part(p int32) *partHeads {
	if p < 0 {
		return nil
	}
	for int(p) >= len(h.parts) {
		h.parts = append(h.parts, partHeads{})
	}
	return &h.parts[p]
}

// stored records that the record at offset off of partition p, created at
// created, was acknowledged to its producer.
func (h *heads) stored(p int32, off int64, created time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ph := h.part(p)
	if ph == nil || off < ph.next || off < ph.base || off-ph.base >= maxSpan {
		return
	}
	i := int(off - ph.base)
	for i >= len(ph.created) {
		ph.created = append(ph.created, 0)
	}
	ph.created[i] = created.UnixNano()
}

// processed records that the consumers finished (or skipped) the record at
// offset off of partition p.
func (h *heads) processed(p int32, off int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ph := h.part(p)
	if ph == nil || off < ph.next {
		return
	}
	ph.next = off + 1
	// Drop the processed prefix once it is half of what is kept.
	if done := ph.next - ph.base; done > 4096 && done > int64(len(ph.created))/2 {
		if done >= int64(len(ph.created)) {
			ph.created = ph.created[:0]
		} else {
			ph.created = append(ph.created[:0], ph.created[done:]...)
		}
		ph.base = ph.next
	}
}

// age returns the true head age at now: the largest over the partitions of
// now minus the creation time of the partition's head (its lowest
// unprocessed offset whose record was acknowledged), 0 when there is none.
func (h *heads) age(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldest time.Duration
	for i := range h.parts {
		ph := &h.parts[i]
		for j := max(ph.next-ph.base, 0); j < int64(len(ph.created)); j++ {
			if c := ph.created[j]; c != 0 {
				oldest = max(oldest, now.Sub(time.Unix(0, c)))
				break
			}
		}
	}
	return oldest
}
