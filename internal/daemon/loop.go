package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// Source is what the daemon needs from a broker adapter: one observation
// cycle at a time. brokers/kafka.Observer and brokers/nats.Observer
// implement it.
type Source interface {
	// Observe returns one Sample per watched target. A non-nil error means
	// nothing could be observed this cycle; partial failures are reported
	// inside the samples.
	Observe(ctx context.Context) ([]lag.Sample, error)
}

// Reports is what the daemon needs from the consumers' own reports
// (quotaserver.Consumers implements it).
type Reports interface {
	// Overlay sets PartitionSample.Reported on the partitions of s that
	// a consumer reported on recently enough as of now. Safe for
	// concurrent use.
	Overlay(s *lag.Sample, now time.Time)
}

// Loop observes one cluster every Interval and keeps its states in a Store.
type Loop struct {
	Name     string
	Kind     lag.Kind
	Source   Source
	Interval time.Duration
	// Timeout bounds one cycle; default Interval*3 capped below by 2s.
	Timeout time.Duration
	// Rules gives the status thresholds per target; nil: lag.DefaultRules.
	Rules   func(lag.Target) lag.Rules
	Store   *Store
	Metrics *Metrics
	// Logger carries the cluster's name (the daemon's: cluster=NAME); nil:
	// slog.Default() with it.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests may inject one.
	Now func() time.Time
	// OnCycle, when set, runs after each cycle with the new states (the
	// quota controller hangs here). It runs on the loop's goroutine. A
	// target that left (see Run) is absent from states; the engine
	// forgets what it had of it.
	OnCycle func(now time.Time, states []lag.State)
	// Reports, when set, folds the consumers' own reports into every
	// sample before the tracker sees it.
	Reports Reports
	// Urgent, when set with Reports, is the age past which the message a
	// consumer reports having in hand makes its target late enough for a
	// decision now rather than at the next cycle (the engine's
	// engage threshold, engine.Engine.Urgent); 0 for a target whose
	// reports never bring a cycle forward. See Wake.
	Urgent func(lag.Target) time.Duration
	// Engaged, when set with an EngagedInterval shorter than Interval,
	// reports after each cycle (after OnCycle, on the loop's goroutine)
	// whether a policy is engaged on one of the targets fine, those whose
	// position the cycle's states say moves at least every
	// EngagedInterval (lag.State.MovesWithin: a consumer's fresh reports,
	// a commit or ack cadence that fine): a target limited or its
	// predicted wait above the engage threshold (engine.Engine.Engaged).
	// It is not asked when no target is that fine. The cycles then come
	// every EngagedInterval, and go back to Interval once it has said no
	// (or was not asked) for engagedHold cycles in a row. See
	// engagedCadence. A target read from commits made every second keeps
	// the interval's readings: at a shorter spacing a span holds a whole
	// commit or none, and its consumption reads lumpy (a commit per poll
	// of a second's records read at 250 ms: 1,018-1,525/s for a consumer
	// of 400/s, session 30).
	Engaged func(fine []lag.Target) bool
	// EngagedInterval is the cadence while Engaged; 0, or not shorter
	// than Interval: the cycles never come faster than Interval.
	EngagedInterval time.Duration

	wakes wakes
}

// Run observes until ctx is done. It runs on the caller's goroutine and
// returns ctx's error.
//
// A cycle that returned samples lists every target the cluster still has
// (the adapters list a target they could not read as stale, with why):
// the targets it does not list (a deleted topic or group, an expired or
// deleted NATS consumer) leave the store, the metrics and OnCycle's states
// at once. A cycle that returned nothing keeps every target, ageing
// towards stale with the cycle's error as their Err.
func (l *Loop) Run(ctx context.Context) error {
	now := l.Now
	if now == nil {
		now = time.Now
	}
	log := l.Logger
	if log == nil {
		log = slog.Default().With("cluster", l.Name)
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = max(3*l.Interval, 2*time.Second)
	}
	tracker := lag.NewTracker(l.Rules)
	status := ClusterStatus{Name: l.Name, Kind: l.Kind}
	failures := 0             // failed cycles in a row
	var failedSince time.Time // the first of them began
	quiet := engagedHold      // cycles since Engaged last said yes

	t := time.NewTimer(l.Interval)
	defer t.Stop()
	for {
		// What was reported before the cycle reads it is in the cycle.
		l.wakes.take()
		start, began := now(), time.Now() // the cadence keeps to the real clock
		cctx, cancel := context.WithTimeout(ctx, timeout)
		samples, err := l.Source.Observe(cctx)
		took := time.Since(began)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		at := now()
		dur := at.Sub(start)
		status.LastCycle, status.Duration = start, dur
		// The first failure in a row at WARN, the rest at DEBUG, the
		// recovery at INFO with the count (as groupmember.Failures): a
		// cluster down for hours logs two lines, and says for how long.
		if err != nil {
			status.Err = err.Error()
			failures++
			level := slog.LevelDebug
			if failures == 1 {
				level, failedSince = slog.LevelWarn, start
			}
			log.Log(ctx, level, "observation failed", "err", err, "samples", len(samples), "failures", failures)
		} else {
			if failures > 0 {
				log.Info("observation recovered", "failures", failures, "since", failedSince, "for", at.Sub(failedSince).Round(time.Millisecond))
			}
			failures = 0
			status.Err = ""
		}
		// A partial failure still returns what it could read: use it (the
		// samples flag what is stale) and count the error all the same.
		if err == nil || len(samples) > 0 {
			status.LastSuccess, status.Observed = start, true
			for _, s := range samples {
				if l.Reports != nil {
					l.Reports.Overlay(&s, at)
				}
				tracker.Observe(s, at)
			}
			for _, g := range tracker.Prune(samples) {
				log.Info("target gone", "target", g.String())
			}
		} else {
			tracker.Fail(err.Error())
		}
		states := tracker.States(at)
		l.Store.Update(status, states)
		if l.Metrics != nil {
			l.Metrics.observed(l.Name, dur, err)
		}
		if l.OnCycle != nil {
			l.OnCycle(at, states)
		}
		fast := l.EngagedInterval > 0 && l.EngagedInterval < l.Interval && l.Engaged != nil
		if fast {
			switch fine, coarse := l.engaged(states); {
			case coarse:
				quiet = engagedHold // back to the interval at once
			case fine:
				quiet = 0
			case quiet < engagedHold:
				quiet++
			}
		} else if quiet < engagedHold {
			quiet++
		}
		cadence := l.Interval
		if fast && quiet < engagedHold {
			cadence = engagedCadence(l.Interval, l.EngagedInterval, took)
		}
		ended := time.Now()
		read := newestAt(samples)
		regular := ended.Add(nextWait(began, ended, read, cadence, ended))
		var seen map[lag.Target]time.Duration
		if l.Urgent != nil && l.Reports != nil {
			seen = headAges(states)
		}
		early, err := l.waitNext(ctx, t, regular, earliestEarly(began, ended, read, cadence),
			func() bool { return l.lateReport(samples, seen, now()) })
		if err != nil {
			return err
		}
		if early && l.Metrics != nil {
			l.Metrics.early(l.Name)
		}
		if cadence < l.Interval && l.Metrics != nil {
			l.Metrics.fast(l.Name)
		}
	}
}

// engaged asks Engaged about the targets of states whose position moves
// at least every EngagedInterval (fine: a policy is engaged on one) and,
// when one is, about the others (coarse: one read from coarser commits is
// engaged too). The cycles are the cluster's, so fast ones would read a
// coarse target at the engaged interval as well, where its commits come
// about once a reading and its consumption reads lumpy (commit per poll
// at 10x: p99 10.39 s against 4.01 s, results.md session 30): such a
// cluster goes back to the interval at once, as it was before the engaged
// cadence, while that target is engaged.
func (l *Loop) engaged(states []lag.State) (fine, coarse bool) {
	var fs, cs []lag.Target
	for _, st := range states {
		if st.MovesWithin(l.EngagedInterval) {
			fs = append(fs, st.Target)
		} else {
			cs = append(cs, st.Target)
		}
	}
	if len(fs) == 0 || !l.Engaged(fs) {
		return false, false
	}
	return true, len(cs) > 0 && l.Engaged(cs)
}

// engagedHold is how many cycles in a row Engaged must say no before the
// cycles go back from EngagedInterval to Interval: 2 s at the default
// 250 ms, so that a quota that was just unlimited again, and the drop it
// may meet next, are still watched closely.
const engagedHold = 8

// observeCostFactor bounds what observing costs the brokers while engaged:
// a cycle starts no sooner than this many times the last observation took
// after the one before. A cluster of 10,000 partitions observes in 95-166
// ms (BenchmarkObserve): at most one cycle every 0.4-0.7 s.
const observeCostFactor = 4

// engagedCadence is the cycles' cadence while a policy is engaged, for an
// interval, a configured engaged interval and a last observation that
// took took: the engaged interval, but no faster than observeCostFactor x
// took, and never slower than the interval.
func engagedCadence(interval, engaged, took time.Duration) time.Duration {
	return min(max(engaged, observeCostFactor*took), interval)
}

// minEarlySpan is the shortest span an early cycle reads rates over: the
// reporters' default period (consumerclient.DefaultInterval). A reported
// position moves when a poll starts, so over a shorter span it reads as
// moved by a whole poll or not at all: at a 250 ms interval, early cycles
// a sixteenth of a second apart (the quarter interval) swung the
// capacity estimate and cost goodput (kafka/hook/sync/250ms at 10x, two
// runs each: 66.1 / 70.6% against 95.0 / 89.7% without them, 34 false-
// throttle seconds against 5 and 12).
const minEarlySpan = 250 * time.Millisecond

// earliestEarly is the soonest an early cycle (see Wake) may follow one
// that started at start, ended at end and read its samples at read (as
// for nextWait): a quarter of an interval after the readings, and at
// least minEarlySpan, so that at most one early cycle comes per quarter
// interval and no rate is read over a shorter span. At an interval of
// minEarlySpan or less that is never before the next regular cycle: only
// slower loops cycle early.
func earliestEarly(start, end, read time.Time, interval time.Duration) time.Time {
	if read.Before(start) || read.After(end) {
		read = end
	}
	return read.Add(max(interval/4, minEarlySpan))
}

// nextWait is how long to wait, at now, before the next cycle of one that
// started at start, ended at end and read its samples at read (their
// newest At; zero: none): until start + interval (a steady cadence), but
// never less than half an interval after read. A cycle that runs late
// is followed by the next half an interval after its readings, not at
// once: a time.Ticker's buffered tick started it a few milliseconds
// after them, and the rates over that span (lag/, quota/) read
// whatever a commit moved in it as consumed within a few milliseconds.
// read counts only when the observer's clock agrees with
// the loop's (within [start, end]); else end stands for it.
func nextWait(start, end, read time.Time, interval time.Duration, now time.Time) time.Duration {
	if read.Before(start) || read.After(end) {
		read = end
	}
	next := start.Add(interval)
	if earliest := read.Add(interval / 2); earliest.After(next) {
		next = earliest
	}
	return max(next.Sub(now), 0)
}

// newestAt is the newest At of samples; zero when there are none.
func newestAt(samples []lag.Sample) time.Time {
	var at time.Time
	for i := range samples {
		if samples[i].At.After(at) {
			at = samples[i].At
		}
	}
	return at
}
