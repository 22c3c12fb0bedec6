package daemon

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// maxPending bounds the targets a loop remembers as reported on between
// two looks (see wakes): beyond it, the next look checks every target of
// the last cycle instead, so a flood of reports naming targets that do
// not exist costs no memory.
const maxPending = 1024

// wakes is what Wake hands to the loop's goroutine: the targets reported
// on since its last look, and a signal. The zero value is ready.
type wakes struct {
	mu      sync.Mutex
	ch      chan struct{} // capacity 1; made on first use
	pending map[lag.Target]struct{}
	all     bool // more than maxPending targets: look at every one
}

// signal returns the channel Wake signals on.
func (w *wakes) signal() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	return w.ch
}

// add records t and signals, without blocking.
func (w *wakes) add(t lag.Target) {
	w.mu.Lock()
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	if len(w.pending) >= maxPending {
		w.all = true
	} else {
		if w.pending == nil {
			w.pending = make(map[lag.Target]struct{})
		}
		w.pending[t] = struct{}{}
	}
	ch := w.ch
	w.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// take returns and forgets the targets recorded since the last take.
func (w *wakes) take() (pending map[lag.Target]struct{}, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pending, all = w.pending, w.all
	w.pending, w.all = nil, false
	return pending, all
}

// Wake tells the loop that a consumer reported on t: a target of its kind,
// on its cluster or, with an empty Cluster, on every cluster of its kind
// (quotaserver.Consumers calls it after storing each report; other targets
// are ignored). It never blocks. The loop's goroutine then looks at the
// reports of t (see Urgent) and, if they show t late, runs its next cycle
// early: no sooner than a quarter of an interval after the last
// cycle's readings. Safe for concurrent use, before and during Run.
func (l *Loop) Wake(t lag.Target) {
	if t.Kind != l.Kind || (t.Cluster != "" && t.Cluster != l.Name) {
		return
	}
	l.wakes.add(t)
}

// waitNext waits until regular (the next cycle on the loop's cadence) or,
// when a consumer's report shows a target late (late), until earliest if
// that is sooner. It reports whether the cycle it waited for is an early
// one; a cancelled ctx returns its error.
func (l *Loop) waitNext(ctx context.Context, t *time.Timer, regular, earliest time.Time, late func() bool) (bool, error) {
	t.Reset(max(time.Until(regular), 0))
	wake := l.wakes.signal()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
			return armed, nil
		case <-wake:
		}
		if armed || !earliest.Before(regular) || !late() {
			continue
		}
		d := time.Until(earliest)
		if d <= 0 {
			return true, nil
		}
		t.Reset(d)
		armed = true
	}
}

// lateReport reports whether, as of now, a fresh consumer report about a
// target recorded by Wake (one of the last cycle's samples) shows the
// message the consumer has in hand older than the target's Urgent age,
// and by at least half of it older than the head age the last cycle
// decided on: news the next regular cycle would act on up to an interval
// late. Only what a report says counts: a message it showed in hand is
// not taken to be held still after it (the consumer may have finished it
// since), so a report that stood still never brings a cycle forward by
// itself.
func (l *Loop) lateReport(samples []lag.Sample, seen map[lag.Target]time.Duration, now time.Time) bool {
	pending, all := l.wakes.take()
	if l.Urgent == nil || l.Reports == nil || (len(pending) == 0 && !all) {
		return false
	}
	for i := range samples {
		s := &samples[i]
		if !all && !reportedOn(pending, s.Target) {
			continue
		}
		urgent := l.Urgent(s.Target)
		if urgent <= 0 {
			continue
		}
		if age := inHandAge(l.Reports, *s, now); age > max(urgent, seen[s.Target]+urgent/2) {
			return true
		}
	}
	return false
}

// headAges returns the head age of each of a cycle's states, by target:
// lateReport looks one up per reported target, on every wake.
func headAges(states []lag.State) map[lag.Target]time.Duration {
	m := make(map[lag.Target]time.Duration, len(states))
	for _, st := range states {
		m[st.Target] = st.HeadAge
	}
	return m
}

// reportedOn reports whether pending holds t or t on every cluster.
func reportedOn(pending map[lag.Target]struct{}, t lag.Target) bool {
	if _, ok := pending[t]; ok {
		return true
	}
	t.Cluster = ""
	_, ok := pending[t]
	return ok
}

// inHandAge is the age of the oldest message the consumer reports having
// in hand on s's partitions, at the time it said so (fresh reports only,
// merged as for a cycle as of now); 0 when it reports none. s is not
// modified.
func inHandAge(r Reports, s lag.Sample, now time.Time) time.Duration {
	s.Partitions = slices.Clone(s.Partitions)
	r.Overlay(&s, now)
	var age time.Duration
	for _, p := range s.Partitions {
		if rep := p.Reported; !rep.IsZero() && !rep.HeadTime.IsZero() {
			age = max(age, rep.At.Sub(rep.HeadTime))
		}
	}
	return age
}
