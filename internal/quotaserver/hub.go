// Package quotaserver serves lagbridge's quota protocol over HTTP (see
// producerclient/quotaproto and docs/quota-protocol.yaml): producers report
// demand and receive leases, and changes are pushed to them by long-poll or
// server-sent events the moment the daemon publishes them.
package quotaserver

import (
	"sync"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// Hub holds the current LeaseSet of every producer and wakes the watchers of
// a producer when its set changes. Safe for concurrent use. Publishing is
// O(1) per producer and never blocks on slow watchers: each waiter holds a
// channel that is closed on change.
type Hub struct {
	mu      sync.Mutex
	sets    map[string]*hubEntry
	closed  bool
	closeCh chan struct{}
}

type hubEntry struct {
	set     quotaproto.LeaseSet
	changed chan struct{} // closed and replaced when set.Version changes
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{sets: make(map[string]*hubEntry), closeCh: make(chan struct{})}
}

// Publish stores set as its producer's current set. Watchers are woken when
// the version differs from the stored one; it reports whether they were.
func (h *Hub) Publish(set quotaproto.LeaseSet) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sets[set.Producer]
	if e == nil {
		h.sets[set.Producer] = &hubEntry{set: set, changed: make(chan struct{})}
		return true
	}
	changed := e.set.Version != set.Version
	e.set = set
	if changed {
		close(e.changed)
		e.changed = make(chan struct{})
	}
	return changed
}

// Remove forgets a producer (its lease expired); its watchers are woken and
// find it gone.
func (h *Hub) Remove(producer string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.sets[producer]; e != nil {
		close(e.changed)
		delete(h.sets, producer)
	}
}

// Current returns the producer's set, a channel closed at its next change,
// and whether the producer is known.
func (h *Hub) Current(producer string) (quotaproto.LeaseSet, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sets[producer]
	if e == nil {
		return quotaproto.LeaseSet{}, nil, false
	}
	return e.set, e.changed, true
}

// All returns every producer's set.
func (h *Hub) All() []quotaproto.LeaseSet {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]quotaproto.LeaseSet, 0, len(h.sets))
	for _, e := range h.sets {
		out = append(out, e.set)
	}
	return out
}

// Done is closed by Close: long-polls and streams end so that the HTTP
// server can shut down without waiting for them.
func (h *Hub) Done() <-chan struct{} { return h.closeCh }

// Close ends every watch and stream. Idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.closeCh)
	}
}
