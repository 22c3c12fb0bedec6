package daemon

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
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
	// of 400/s, session 30). One whose commits moved at about every
	// reading is probed at EngagedInterval for a short trial that tells
	// the two apart (see engaged); Engaged is then asked about it too.
	Engaged func(fine []lag.Target) bool
	// NearCapacity, when set, reports whether one of the targets fine is
	// unlimited but produced to near its capacity
	// (engine.Engine.NearCapacity); it counts as Engaged for them. Asked
	// about the targets read from the brokers that are fine by their acks
	// (a NATS consumer acking within the engaged interval) and about the
	// Kafka targets read from commits that passed the loop's trial (see
	// engaged), while they count as fine; not about one fine only by a
	// commit cadence learned at readings made fast for another target
	// (lag/ learns it from the readings' own spacing). A Kafka trial
	// candidate near its capacity starts the trial as an engaged one
	// does: a consumer whose commits move at about every fast reading
	// passes it and switches the cluster, one whose commits come about
	// once a second (a 1 s auto-commit) fails it within trialMiss+1
	// probes and waits trialWait cycles or more before the next
	// (lagbridge bench kafka/commit-per-poll/sync/1s at 5x: p99 3.9-4.3 s
	// -> 0.9-2.6 s; results.md, session 36, nearkafka). Nor those whose
	// consumer reports: a report's position is the poll in hand, a standing queue of a poll's work
	// (0.21 s for the bench's hook at 2,000 msg/s) that the faster
	// readings' engage threshold (0.2 s at 250 ms) reads as saturated,
	// and once engaged the target keeps the cluster fast (lagbridge
	// bench kafka/hook/sync/1s at 5x: limited from 6 s on with no drop
	// yet, 5 false-throttle seconds before it in one run of two;
	// results.md, session 34, nearcap).
	NearCapacity func(fine []lag.Target) bool
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
	var tr trial
	var lastFed time.Time // the last cycle that was no probe of a trial began
	var states []lag.State

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
		fast := l.EngagedInterval > 0 && l.EngagedInterval < l.Interval && l.Engaged != nil
		var resume time.Time // after a failed probe: the interval's next cycle
		if tr.probes && began.Sub(lastFed) < l.Interval-l.EngagedInterval/2 {
			// A probe of a trial (see trial): between the interval's
			// cycles, read for the trial alone. One that failed (a broker
			// error, a timeout) says nothing of the commits and is not
			// fed either: the trial fails, back to the interval.
			if err != nil {
				tr.fail()
			}
			if err != nil || !tr.probe(samples) {
				quiet = engagedHold // failed: back to the interval at once
				resume = lastFed.Add(l.Interval)
			}
		} else {
			lastFed = began
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
			states = tracker.States(at)
			l.Store.Update(status, states)
			if l.Metrics != nil {
				l.Metrics.observed(l.Name, dur, err)
			}
			if l.OnCycle != nil {
				l.OnCycle(at, states)
			}
			if fast {
				fine, coarse := l.engaged(states, &tr)
				quiet = nextQuiet(quiet, fine, coarse)
			} else {
				quiet = nextQuiet(quiet, false, false)
			}
		}
		if quiet >= engagedHold && tr.on != nil {
			// Back at the interval while a trial ran: it ends, neither
			// passed nor failed (the policy let go, or a coarse target
			// is engaged too).
			tr.on, tr.probes = nil, false
		}
		cadence := l.Interval
		if fast && quiet < engagedHold {
			cadence = engagedCadence(l.Interval, l.EngagedInterval, took)
			if tr.on != nil && cadence > l.EngagedInterval*5/4 {
				// An observation too slow for the engaged interval: at
				// readings 340 ms apart a 1 s auto-commit moves at every
				// third and would pass. The trial fails.
				probing := tr.probes
				tr.fail()
				if probing {
					quiet, cadence = engagedHold, l.Interval
					if began.After(lastFed) {
						resume = lastFed.Add(l.Interval)
					}
				}
			}
		}
		ended := time.Now()
		read := newestAt(samples)
		regular := ended.Add(nextWait(began, ended, read, cadence, ended))
		if !resume.IsZero() {
			regular = resume
			if regular.Before(ended) {
				regular = ended
			}
		}
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
//
// A Kafka target read from commits whose cadence, learned at the
// interval's readings, is about the interval or less (CommitInterval at
// most 1.5 Interval: its commits moved at most readings) may be finer
// than the readings can show. When a policy is engaged on such a target
// (and no coarse one is), the loop cycles at the engaged interval for a
// trial of trialCycles readings (see trial). While no fine target keeps
// the cycles fast, those between the interval's are probes: Run hands
// their samples to the trial alone (trial.probe), and lag/, the store
// and OnCycle see the interval's readings as before, so a target that
// fails gives the controller main's inputs. (Fed to the controller, a
// trial's 0.2 s span that held one poll's commit read a consumer of
// 400/s at 2,000-2,140/s right after the drop, and commit per poll at 5x
// lost in both pairs, results.md session 32.) The target fails, and
// the cluster keeps the interval (the next cycle an interval after the
// last one read), at the trialMiss-th reading in a row that saw its
// commits not move with work to commit; it passes at the trial's end,
// and then counts as fine for trialCycles fast cycles and while its
// cadence, learned at them, stays within about trialMiss engaged
// intervals (passedFine). A candidate no policy is engaged on but near
// its capacity (NearCapacity) is tried the same way; once it passed, it
// is asked again at each reading while it counts as fine (by passedFine
// or by its cadence relearned within the engaged interval), so the
// cluster stays fast while it stays near its capacity. In a cluster
// already fast for a fine target every trial reading is read: the
// target passes once its cadence is learned fine (lag.State.MovesWithin)
// or at the end with one within passedFine. A failed trial waits trialWait interval cycles or more
// before the next (see trial.fail). After the switch lag/ reads the
// commits exactly while the cadence learned at the interval is not yet
// relearned (partTrack.seenGap), and quota/ measures the first short
// span from the middle of the longer one before it (moveSpan).
func (l *Loop) engaged(states []lag.State, tr *trial) (fine, coarse bool) {
	var fs, cs, ts, ns []lag.Target
	var failed bool
	passed := make(map[lag.Target]int, len(tr.passed))
	near := make(map[lag.Target]bool, len(tr.near))
	for _, st := range states {
		grace, ok := tr.passed[st.Target]
		switch {
		case st.MovesWithin(l.EngagedInterval):
			fs = append(fs, st.Target)
			switch {
			case st.Source == lag.SourceConsumer:
			case st.AcksWithin(l.EngagedInterval):
				// Fine by its acks, not by a commit cadence learned at
				// readings made fast for another target (lag/ learns it
				// from their own spacing).
				ns = append(ns, st.Target)
			case ok || tr.isNear(st.Target) || tr.onTrial(st.Target):
				// Fine by commits that passed a trial (or pass it by
				// this): NearCapacity is asked about it while it
				// counts as fine. One that passed a trial started by
				// NearCapacity alone stays in passed too (see near).
				sticky := tr.near[st.Target] || tr.onTrial(st.Target) && tr.byNear
				near[st.Target] = sticky
				if sticky {
					passed[st.Target] = max(grace-1, 0)
				}
				ns = append(ns, st.Target)
			}
		case ok && (grace > 0 || l.passedFine(st)):
			passed[st.Target] = max(grace-1, 0)
			fs = append(fs, st.Target)
			if st.Source != lag.SourceConsumer {
				near[st.Target] = tr.near[st.Target]
				ns = append(ns, st.Target)
			}
		case tr.on != nil && tr.onTrial(st.Target):
			if tr.step(st) {
				ts = append(ts, st.Target)
			} else {
				cs = append(cs, st.Target)
				failed = true
			}
		case tr.on == nil && tr.wait == 0 && l.candidate(st):
			ts = append(ts, st.Target)
		default:
			cs = append(cs, st.Target)
		}
	}
	tr.passed, tr.near = passed, near
	switch {
	case tr.on != nil && failed:
		tr.fail()
	case tr.on != nil && len(ts) == 0:
		tr.pass() // every target on trial is fine by now
	case tr.on != nil:
		if tr.left--; tr.left > 0 {
			break
		}
		// The trial ran its course without a gap: each target passes
		// when its cadence, learned at the fast spacing, is within the
		// gap a trial allows.
		for _, st := range states {
			if !tr.onTrial(st.Target) {
				continue
			}
			if tr.probes || l.passedFine(st) {
				// Passed by probes, its cadence not yet relearned:
				// fine for trialCycles fast cycles while it is.
				tr.passed[st.Target] = trialCycles
				tr.markNear(st.Target)
				fs = append(fs, st.Target)
			} else {
				cs = append(cs, st.Target)
				failed = true
			}
		}
		ts = nil
		if failed {
			tr.fail()
		} else {
			tr.pass()
		}
	case tr.wait > 0:
		tr.wait--
	}
	fineEngaged := len(fs) > 0 && l.Engaged(fs) || l.near(ns)
	trialEngaged := len(ts) > 0 && (l.Engaged(ts) || l.near(ts))
	if trialEngaged && tr.on == nil {
		// Only the candidates a policy is engaged on, or near their
		// capacity: one whose commits stop without either must not
		// fail the trial for them.
		ts = slices.DeleteFunc(ts, func(t lag.Target) bool {
			one := []lag.Target{t}
			return !l.Engaged(one) && !l.near(one)
		})
		tr.start(ts, states)
		tr.probes = !fineEngaged
		tr.byNear = !l.Engaged(ts)
	}
	if fineEngaged {
		tr.probes = false // the cycles are fast for a fine target: each is read
	}
	switch fine = fineEngaged || trialEngaged; {
	case failed && !fine:
		return false, true // the trial failed: back to the interval at once
	case !fine:
		return false, false
	}
	coarse = len(cs) > 0 && l.Engaged(cs)
	if coarse && tr.on != nil {
		tr.on, tr.probes = nil, false // read at the interval again: no trial
	}
	return fine, coarse
}

// near asks NearCapacity, when set, about ts (none: no).
func (l *Loop) near(ts []lag.Target) bool {
	return len(ts) > 0 && l.NearCapacity != nil && l.NearCapacity(ts)
}

// candidate reports whether st may be finer than the readings show: a
// Kafka target read from commits whose cadence learned at the
// interval's readings is about one reading or less (see engaged).
func (l *Loop) candidate(st lag.State) bool {
	return st.Target.Kind == lag.KindKafka && st.Source != lag.SourceConsumer &&
		st.CommitInterval > 0 && st.CommitInterval <= l.Interval*3/2
}

// passedFine reports whether a target that passed a trial (or is at its
// end) still counts as fine: its cadence, learned at the fast readings,
// about trialMiss engaged intervals or less (and half of one for the
// readings' jitter: a cadence of three readings learned at readings
// 250 ms apart measured 752 ms, lagbridge bench). A 1 s auto-commit
// learns 1 s.
func (l *Loop) passedFine(st lag.State) bool {
	return st.CommitInterval > 0 && st.CommitInterval <= (2*trialMiss+1)*l.EngagedInterval/2
}

// trial is the loop's trial of the engaged cadence on targets read from
// commits (see Loop.engaged). Owned by Run's goroutine.
type trial struct {
	// on holds the targets on trial; nil: no trial.
	on map[lag.Target]*onTrial
	// left is how many more trial readings may come before it ends.
	left int
	// wait is how many cycles to go before the next trial may start;
	// backoff is the wait after the next failure (0: trialWait).
	wait, backoff int
	// passed holds the targets that passed a trial, as long as their
	// cadence stays fine (Loop.passedFine), with the fast cycles they
	// count as fine before that (a trial by probes: lag/ learned their
	// cadence at the interval's readings).
	passed map[lag.Target]int
	// near holds the targets read from commits that passed a trial and
	// count as fine since (in passed, or their cadence relearned within
	// the engaged interval): Loop.engaged asks NearCapacity about them.
	// True for one whose trial NearCapacity alone started (byNear): it
	// stays in passed while its cadence is relearned within the engaged
	// interval, so through a drop it counts as fine while passedFine
	// (commits within about trialMiss fast readings) rather than as
	// coarse once that cadence drifts past 1.5 engaged intervals; the
	// cluster then stays fast through the slow phase (guard 5x: p99
	// 0.96 / 1.52 s, against 3.32 s with main's rule for it, session 36,
	// nearkafka). A trial a policy started keeps main's rule.
	near map[lag.Target]bool
	// byNear: the trial on was started by NearCapacity alone (no policy
	// engaged on its targets).
	byNear bool
	// probes: the trial's readings between the interval's are probes,
	// read by the trial alone (no fine target keeps the cycles fast):
	// lag/ and the controller see the interval's readings as before, so
	// a target that fails the trial gives them main's inputs.
	probes bool
}

// onTrial is a target on trial: its committed position (the sum over
// partitions) at the last reading, and the readings in a row since its
// commits last moved.
type onTrial struct {
	pos  int64
	miss int
}

// trialCycles is how many fast readings a trial takes: enough for a
// cadence learned at 1 s readings (the median of 8 intervals) to be
// relearned at the fast ones from moves at least every trialMiss of them.
const trialCycles = 12

// trialMiss is how many fast readings in a row may see no move of a
// target's commits before its trial fails: a commit per poll of about
// half a second's records (2,000 msg/s with a backlog of 700-1,700,
// lagbridge bench kafka/commit-per-poll/sync/1s at 10x before the drop)
// moves at most every second or third 250 ms reading; a 1 s auto-commit
// misses three in a row at each of its commits.
const trialMiss = 3

// trialWait is the interval cycles a first failed trial waits before the
// next; each failure in a row doubles it, up to trialWaitMax. A 1 s
// auto-commit, which fails each trial within its first trialMiss+1
// readings (its commits a second apart), is read at 250 ms for 3-4
// readings at 4, 8, 16, 32, 64 s and then every 64 s while a policy is
// engaged on it.
const (
	trialWait    = 4
	trialWaitMax = 64
)

func (tr *trial) start(ts []lag.Target, states []lag.State) {
	tr.on, tr.left = make(map[lag.Target]*onTrial, len(ts)), trialCycles
	for _, st := range states {
		if slices.Contains(ts, st.Target) {
			tr.on[st.Target] = &onTrial{pos: committed(st)}
		}
	}
}

// isNear reports whether NearCapacity is asked about t (see near).
func (tr *trial) isNear(t lag.Target) bool {
	_, ok := tr.near[t]
	return ok
}

// markNear records that t passed the trial on: asked about (see near),
// and sticky when the trial was started by NearCapacity alone.
func (tr *trial) markNear(t lag.Target) {
	if tr.near == nil {
		tr.near = make(map[lag.Target]bool)
	}
	tr.near[t] = tr.near[t] || tr.byNear
}

func (tr *trial) onTrial(t lag.Target) bool {
	_, ok := tr.on[t]
	return ok
}

// step records a trial reading of st and reports whether it may go on:
// its commits moved since the last reading, or it had nothing to commit
// (no committed lag), within trialMiss readings.
func (tr *trial) step(st lag.State) bool {
	idle := true
	for i := range st.Partitions {
		if st.Partitions[i].CommittedLag > 0 {
			idle = false
		}
	}
	return tr.stepAt(st.Target, committed(st), idle)
}

// stepAt is step for target t at committed position pos (idle: nothing
// to commit).
func (tr *trial) stepAt(t lag.Target, pos int64, idle bool) bool {
	o := tr.on[t]
	if idle || pos > o.pos {
		o.miss = 0
	} else {
		o.miss++
	}
	o.pos = pos
	return o.miss < trialMiss
}

func (tr *trial) pass() { tr.on, tr.backoff, tr.probes = nil, 0, false }

// probe steps the trial with a probe's samples and reports whether it
// goes on or passed (false: it failed). A trial by probes passes at its
// end when no target on it failed.
func (tr *trial) probe(samples []lag.Sample) bool {
	if tr.on == nil {
		return true
	}
	for i := range samples {
		s := &samples[i]
		if !tr.onTrial(s.Target) {
			continue
		}
		var pos int64
		idle := true
		for _, p := range s.Partitions {
			if p.Committed > 0 {
				pos += p.Committed
			}
			if p.Lag > 0 {
				idle = false
			}
		}
		if !tr.stepAt(s.Target, pos, idle) {
			tr.fail()
			return false
		}
	}
	if tr.left--; tr.left <= 0 {
		if tr.passed == nil {
			tr.passed = make(map[lag.Target]int, len(tr.on))
		}
		for t := range tr.on {
			tr.passed[t] = trialCycles
			tr.markNear(t)
		}
		tr.pass()
	}
	return true
}

func (tr *trial) fail() {
	tr.on, tr.probes = nil, false
	tr.wait = cmp.Or(tr.backoff, trialWait)
	tr.backoff = min(tr.wait*2, trialWaitMax)
}

// committed is the sum of st's committed offsets (partitions without a
// commit count none).
func committed(st lag.State) int64 {
	var n int64
	for i := range st.Partitions {
		if c := st.Partitions[i].Committed; c > 0 {
			n += c
		}
	}
	return n
}

// nextQuiet is the count of cycles since Engaged last said yes after a
// cycle that found a policy engaged on a fine target (or one on trial),
// and on a coarse one (see Loop.engaged): 0 for fine alone, engagedHold
// (back to the interval at once) for coarse, one more otherwise.
func nextQuiet(quiet int, fine, coarse bool) int {
	switch {
	case coarse:
		return engagedHold
	case fine:
		return 0
	}
	return min(quiet+1, engagedHold)
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
