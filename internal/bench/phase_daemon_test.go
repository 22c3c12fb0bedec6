package bench

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestWaitPhaseOnDaemon: waitPhase aligns to the daemon's own cycles, not
// to a guess. On kfake with the daemon observing every 400 ms, from a
// moment a third of an interval after a cycle began (so that neither
// waiting from now nor not waiting passes), waitPhase returns phase after
// a cycle began: the daemon's next cycle then begins interval - phase
// later, within 50 ms.
func TestWaitPhaseOnDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake and the daemon for a few seconds")
	}
	ctx := context.Background()
	w, _ := headsWorld(t, BrokerKafka, time.Now())
	const iv, tol = 400 * time.Millisecond, 50 * time.Millisecond
	d, err := startDaemon(ctx, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, testScenario(), w, iv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.stop() }()
	// nextCycle waits for a cycle to begin after last (its start is in the
	// store once it has read), at most 3 intervals.
	nextCycle := func(last time.Time) time.Time {
		for deadline := time.Now().Add(3 * iv); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if c := d.lastCycle(); c.After(last) {
				return c
			}
		}
		t.Fatalf("no daemon cycle began within %v after %v", 3*iv, last)
		return time.Time{}
	}
	nextCycle(time.Time{})
	for _, phase := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 330 * time.Millisecond} {
		nextCycle(d.lastCycle())
		time.Sleep(iv / 3)
		if err := waitPhase(ctx, d, iv, phase); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		next := nextCycle(d.lastCycle())
		if got, want := next.Sub(at), iv-phase; got < want-tol || got > want+tol {
			t.Errorf("phase %v: the daemon's next cycle began %v after waitPhase returned, want %v ± %v", phase, got, want, tol)
		}
	}
}
