package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// slowSender's sync calls each take hold whatever their context, as a
// producer on a machine that stalled; it counts the calls it was given
// and tells each on started.
type slowSender struct {
	hold    time.Duration
	calls   atomic.Int64
	started chan struct{}
}

func (s *slowSender) async(context.Context, int, time.Time) {}
func (s *slowSender) sync(context.Context, int, time.Time) {
	s.calls.Add(1)
	s.started <- struct{}{}
	time.Sleep(s.hold)
}
func (s *slowSender) batch(context.Context, int, []time.Time) {}
func (s *slowSender) allowed() float64                        { return 0 }
func (s *slowSender) close() Totals                           { return Totals{} }

// TestFleetExpiredInQueue: a request whose deadline passes while every
// handler is busy is counted as expired in the queue and never handed to
// the producer, where the SDK would count it as refused (its context is
// done) and a naive client as failed.
func TestFleetExpiredInQueue(t *testing.T) {
	const deadline = 100 * time.Millisecond
	s := &slowSender{hold: 3 * deadline, started: make(chan struct{}, syncHandlers)}
	scn := Scenario{Deadline: deadline, Classes: []Class{{Share: 1}}}
	f := newFleet(Sync, s, scn, newRecorder(1, time.Minute, time.Second))
	for range syncHandlers {
		f.send(context.Background(), 0, time.Now())
	}
	for range syncHandlers {
		<-s.started
	}
	// Every handler now holds a request for three deadlines; the next
	// ones wait in the queue past theirs.
	for range 3 {
		f.send(context.Background(), 0, time.Now())
	}
	time.Sleep(5 * deadline)
	tot := f.close()
	if got := s.calls.Load(); got != syncHandlers {
		t.Errorf("requests handed to the producer = %d, want %d (the ones that waited past their deadline kept back)", got, syncHandlers)
	}
	if tot.Expired != 3 {
		t.Errorf("Expired = %d, want 3", tot.Expired)
	}
}
