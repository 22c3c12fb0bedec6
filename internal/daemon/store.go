// Package daemon holds the running parts of lagbridge that are not broker
// specific: one observation loop per cluster, the store of current states the
// loops write and the HTTP API and metrics read, and the HTTP server.
//
// It declares what it needs from a broker ([Source]) and knows nothing of
// franz-go or nats.go; cmd/lagbridge wires the adapters in.
package daemon

import (
	"sort"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// ClusterStatus is what the store knows of one cluster's observation loop.
type ClusterStatus struct {
	Name string   `json:"name"`
	Kind lag.Kind `json:"kind"`
	// Observed is true once one cycle returned data (ready).
	Observed bool `json:"observed"`
	// LastCycle and LastSuccess are the start times of the newest cycle
	// and of the newest cycle that returned data.
	LastCycle   time.Time     `json:"lastCycle"`
	LastSuccess time.Time     `json:"lastSuccess"`
	Duration    time.Duration `json:"-"`
	Err         string        `json:"error,omitempty"`
	Targets     int           `json:"targets"`
}

// Store holds the newest states of every cluster. Loops write one cluster
// at a time; readers get consistent copies. Safe for concurrent use.
type Store struct {
	mu       sync.RWMutex
	clusters map[string]*clusterEntry
	order    []string
	// subs are notified (non-blocking) after each update.
	subs map[chan struct{}]struct{}
}

type clusterEntry struct {
	status ClusterStatus
	states []lag.State
	// failedFrom and failed: the start of the first cycle and how many
	// cycles ended, while none returned data (see Readiness).
	failedFrom time.Time
	failed     int
}

// unreachedGrace and unreachedCycles: a cluster none of whose cycles
// returned data counts as unreached (named, not waited for by /readyz)
// only once at least unreachedCycles of them failed over at least
// unreachedGrace; before, it is still starting. One failed cycle (a
// metadata timeout, a NATS server up a second late) would otherwise let a
// pod turn ready without it and a rollout move on.
const (
	unreachedGrace  = 5 * time.Second
	unreachedCycles = 3
)

// NewStore returns a store expecting the named clusters; readiness waits
// for all of them.
func NewStore(clusters map[string]lag.Kind) *Store {
	s := &Store{clusters: make(map[string]*clusterEntry), subs: make(map[chan struct{}]struct{})}
	for name, kind := range clusters {
		s.clusters[name] = &clusterEntry{status: ClusterStatus{Name: name, Kind: kind}}
		s.order = append(s.order, name)
	}
	sort.Strings(s.order)
	return s
}

// Update replaces a cluster's states and status. states must not be
// modified by the caller afterwards.
func (s *Store) Update(st ClusterStatus, states []lag.State) {
	s.mu.Lock()
	e := s.clusters[st.Name]
	if e == nil {
		e = &clusterEntry{}
		s.clusters[st.Name] = e
		s.order = append(s.order, st.Name)
		sort.Strings(s.order)
	}
	st.Targets = len(states)
	if !st.Observed && !st.LastCycle.IsZero() {
		if e.failed == 0 {
			e.failedFrom = st.LastCycle
		}
		e.failed++
	}
	e.status, e.states = st, states
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// Subscribe returns a channel that receives a token (coalesced) after each
// update, and a function that ends the subscription.
func (s *Store) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}
}

// Clusters returns every cluster's status, sorted by name.
func (s *Store) Clusters() []ClusterStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ClusterStatus, 0, len(s.order))
	for _, n := range s.order {
		out = append(out, s.clusters[n].status)
	}
	return out
}

// States returns the current states of every cluster, sorted by target.
// The slices are shared snapshots: read only.
func (s *Store) States() []lag.State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []lag.State
	for _, n := range s.order {
		out = append(out, s.clusters[n].states...)
	}
	return out
}

// Ready reports whether every cluster was observed once (a cycle returned
// data), and the names of those that were not. /readyz asks less
// (Readiness).
func (s *Store) Ready() (bool, []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var missing []string
	for _, n := range s.order {
		if !s.clusters[n].status.Observed {
			missing = append(missing, n)
		}
	}
	return len(missing) == 0, missing
}

// Readiness sorts the clusters for /readyz: those observed once, those
// whose first cycle has not ended yet or whose failed cycles are still
// fewer than unreachedCycles or span less than unreachedGrace (starting),
// and those whose every cycle failed beyond that (unreached, with the
// newest cycle's error in Err).
func (s *Store) Readiness() (observed, starting []string, unreached []ClusterStatus) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.order {
		switch st := s.clusters[n].status; {
		case st.Observed:
			observed = append(observed, n)
		case st.LastCycle.IsZero(), s.clusters[n].failed < unreachedCycles, st.LastCycle.Sub(s.clusters[n].failedFrom) < unreachedGrace:
			starting = append(starting, n)
		default:
			unreached = append(unreached, st)
		}
	}
	return observed, starting, unreached
}
