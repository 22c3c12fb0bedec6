package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// StartPhase is when a run starts its consumer (and so its commit timer)
// against the daemon's observation cycles: --phase. A consumer's
// auto-commit timer runs from its start, so the bench's 5 s rows,
// started as soon as the daemon is ready, measured mostly one commit
// phase (a commit about 0.1 s after a reading in 7 of 9 runs, results.md
// session 34, probehold). Real consumers' timers fall anywhere in the
// interval. The zero value starts the consumer at once (the default).
type StartPhase struct {
	// Set: wait for the phase; otherwise start at once.
	Set bool
	// Random: a phase drawn uniformly from [0, the row's interval) for
	// each run; otherwise At (modulo the interval).
	Random bool
	At     time.Duration
}

// ParseStartPhase parses --phase: "" (start at once), "random", or a
// non-negative duration ("450ms").
func ParseStartPhase(s string) (StartPhase, error) {
	switch s = strings.TrimSpace(s); s {
	case "":
		return StartPhase{}, nil
	case "random":
		return StartPhase{Set: true, Random: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return StartPhase{}, fmt.Errorf("--phase: %q is neither a non-negative duration nor random", s)
	}
	return StartPhase{Set: true, At: d}, nil
}

// String is the phase as --phase takes it; "" when not set.
func (p StartPhase) String() string {
	switch {
	case !p.Set:
		return ""
	case p.Random:
		return "random"
	}
	return p.At.String()
}

// pick is the phase of one run at the row's interval iv: At modulo iv,
// or a draw from [0, iv) when Random; -1 when not set.
func (p StartPhase) pick(iv time.Duration) time.Duration {
	switch {
	case !p.Set || iv <= 0:
		return -1
	case p.Random:
		return rand.N(iv)
	}
	return p.At % iv
}

// phaseWait is how long to wait at now before starting the consumer so
// that it starts phase after one of the daemon's cycles, the last of
// which began at last, every iv: at last + phase + k iv, the first such
// time at least minPhaseWait after now (the wait itself never shorter,
// so a start is never read as "at once" by a cycle just due).
func phaseWait(last time.Time, iv, phase time.Duration, now time.Time) time.Duration {
	at := last.Add(phase)
	if d := now.Add(minPhaseWait).Sub(at); d > 0 {
		at = at.Add((d + iv - 1) / iv * iv)
	}
	return at.Sub(now)
}

// minPhaseWait: see phaseWait.
const minPhaseWait = 20 * time.Millisecond

// waitPhase waits until phase after one of the daemon's cycles (see
// phaseWait); at once when the daemon has no cycle yet.
func waitPhase(ctx context.Context, d *daemon, iv, phase time.Duration) error {
	last := d.lastCycle()
	if last.IsZero() {
		return nil
	}
	t := time.NewTimer(phaseWait(last, iv, phase, time.Now()))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lastCycle is when the daemon's last observation cycle began (its
// clusters' latest); zero when none has run.
func (d *daemon) lastCycle() time.Time {
	var last time.Time
	for _, c := range d.app.Store.Clusters() {
		if c.LastCycle.After(last) {
			last = c.LastCycle
		}
	}
	return last
}

// RunPhase is where a run's consumer committed, and was started, against
// the daemon's cycles.
type RunPhase struct {
	// Commit is the median time from the daemon's last cycle to each of
	// the consumer's commits (see [CommitPhase]), when CommitKnown (the
	// bench sees the consumer's commits, and one followed a cycle).
	Commit      time.Duration
	CommitKnown bool
	// Start is how long after a cycle the consumer was started (--phase,
	// see [StartPhase]), when StartSet; otherwise it started at once.
	Start    time.Duration
	StartSet bool
}

// CommitPhase is the median time from the daemon's last cycle to each
// commit of the consumer (commits and cycles as in Series: times from the
// run's start); -1 when no commit follows a cycle. At a 1 s interval a
// 5 s auto-commit's phase is where its commit falls between readings:
// 0.1 s and a commit seen at the next reading is dated only within the
// interval (results.md, session 34, probehold). It is a pure function.
//
// Example: cycles at 0, 1, 2 s and commits at 0.12 and 2.3 s: phases
// 0.12 and 0.3 s, median 0.3 s (the upper of an even count).
func CommitPhase(commits [][]time.Duration, cycles []time.Duration) time.Duration {
	if len(cycles) == 0 {
		return -1
	}
	cy := slices.Clone(cycles)
	slices.Sort(cy)
	var ph []time.Duration
	for _, cs := range commits {
		for _, c := range cs {
			i, _ := slices.BinarySearch(cy, c+1) // the cycles at or before c: cy[:i]
			if i > 0 {
				ph = append(ph, c-cy[i-1])
			}
		}
	}
	if len(ph) == 0 {
		return -1
	}
	slices.Sort(ph)
	return ph[len(ph)/2]
}
