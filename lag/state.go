package lag

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Status is a target's health in one word. The rules that choose it are
// listed in [Rules] and [Evaluate].
type Status string

// The statuses, from best to worst. Their order is that of the rules.
const (
	// StatusOK: nothing unconsumed, or the oldest unconsumed message is
	// younger than Rules.LagAge.
	StatusOK Status = "ok"
	// StatusLagging: the consumer makes progress but the oldest
	// unconsumed message is older than Rules.LagAge.
	StatusLagging Status = "lagging"
	// StatusStalled: there is work, the consumer is (or may be) present,
	// and it has not consumed anything for Rules.StallAfter.
	StatusStalled Status = "stalled"
	// StatusStopped: like stalled, but the group has no members at all.
	StatusStopped Status = "stopped"
	// StatusStale: the data is too old to judge (observation failing).
	StatusStale Status = "stale"
	// StatusAbandoned: no live consumer has been attached for the grace
	// period (see Sample.Live). Reported, never obeyed: an abandoned
	// target binds no producer.
	StatusAbandoned Status = "abandoned"
)

// Source names where a State's position, lag and head age come from.
type Source string

// The sources, from least to most exact between commits.
const (
	// SourceCommits: the broker's committed offsets (NATS: ack floors) as
	// they are.
	SourceCommits Source = "commits"
	// SourceEstimate: the committed position advanced by the measured
	// consume rate times the time since the commit, clamped by the end.
	SourceEstimate Source = "estimate"
	// SourceConsumer: the consumer's own fresh report (Report).
	SourceConsumer Source = "consumer"
)

// Rules are the thresholds of the status rules, all in time. The zero value
// means the defaults noted on each field.
type Rules struct {
	// LagAge is the head age above which a progressing consumer is
	// lagging. Default 10s. A quota policy sets it to its maxAge.
	LagAge time.Duration
	// StallAfter is how long a consumer with work may go without
	// consuming anything before it is stalled or stopped. The oldest
	// unconsumed message must also be at least this old, so a message
	// that arrived a moment ago on a quiet topic is not evidence of a
	// stopped consumer. Default 30s.
	StallAfter time.Duration
	// StaleAfter is how old the last good observation may be before the
	// target is stale. Default 10s.
	StaleAfter time.Duration
	// RateWindow is the time constant of the exponentially weighted rates:
	// a step change in rate is 63% reflected after one RateWindow.
	// Default 2s.
	RateWindow time.Duration
}

// DefaultRules are the rules used when a field of Rules is zero.
var DefaultRules = Rules{
	LagAge:     10 * time.Second,
	StallAfter: 30 * time.Second,
	StaleAfter: 10 * time.Second,
	RateWindow: 2 * time.Second,
}

// withDefaults fills zero fields from DefaultRules.
func (r Rules) withDefaults() Rules {
	if r.LagAge <= 0 {
		r.LagAge = DefaultRules.LagAge
	}
	if r.StallAfter <= 0 {
		r.StallAfter = DefaultRules.StallAfter
	}
	if r.StaleAfter <= 0 {
		r.StaleAfter = DefaultRules.StaleAfter
	}
	if r.RateWindow <= 0 {
		r.RateWindow = DefaultRules.RateWindow
	}
	return r
}

// State is what lagbridge knows about one target at one instant.
type State struct {
	Target Target `json:"target"`
	// At is the time of the newest fresh observation folded in.
	At time.Time `json:"at"`
	// Status and Reason: the verdict of the first rule that matched, and
	// why, in words.
	Status Status `json:"status"`
	Reason string `json:"reason"`
	// Rule names the rule that matched (see Evaluate).
	Rule string `json:"rule"`

	GroupState string `json:"groupState,omitempty"`
	Members    int    `json:"members"`

	// Source says where Lag and HeadAge come from (empty: commits).
	Source Source `json:"source,omitempty"`
	// CommitInterval is the consumer's learned commit cadence: the typical
	// time between moves of its committed offsets; 0 while unknown.
	CommitInterval time.Duration `json:"commitInterval,omitempty"`
	// Uncertainty is how long ago the position used was last known
	// exactly (time since the commit an estimate extrapolates from, or
	// since the consumer's report); 0 when exact.
	Uncertainty time.Duration `json:"uncertainty,omitempty"`
	// CommittedLag and CommittedHeadAge are the broker's own figures (from
	// commits alone) when Source is not SourceCommits; otherwise equal to
	// Lag and HeadAge.
	CommittedLag     int64         `json:"committedLag"`
	CommittedHeadAge time.Duration `json:"committedHeadAge"`

	// Lag is the sum of unconsumed messages over the partitions.
	Lag int64 `json:"lag"`
	// HeadAge is now minus the oldest unconsumed message's timestamp, over
	// partitions with lag whose head is known; 0 with no lag.
	HeadAge time.Duration `json:"headAge"`
	// HeadAgeKnown is false when some partition has lag but its head time
	// could not be read; HeadAge then covers only the known ones.
	HeadAgeKnown bool `json:"headAgeKnown"`
	// Uncommitted is the number of partitions without a committed offset
	// (Committed -1). Their lag and head age are unknown, so they count in
	// none of Lag, HeadAge, the rates and the status rules; Reason
	// mentions them. A target whose partitions all lack a commit has Lag 0.
	Uncommitted int `json:"uncommitted,omitempty"`

	// ProduceRate and ConsumeRate are exponentially weighted rates in
	// messages per second (time constant Rules.RateWindow). RatesKnown is
	// false until two fresh observations were seen.
	ProduceRate float64 `json:"produceRate"`
	ConsumeRate float64 `json:"consumeRate"`
	// ProduceRateInstant and ConsumeRateInstant are over the last
	// observation interval only, for controllers that must react fast.
	ProduceRateInstant float64 `json:"produceRateInstant"`
	ConsumeRateInstant float64 `json:"consumeRateInstant"`
	RatesKnown         bool    `json:"ratesKnown"`

	// TimeToDrain is Lag / (ConsumeRate - ProduceRate): 0 with no lag,
	// and Never (-1) when the backlog is not shrinking.
	TimeToDrain time.Duration `json:"timeToDrain"`

	// LastProgress is the last time the consumer consumed something or had
	// nothing to consume.
	LastProgress time.Time `json:"lastProgress"`

	// Stale is true when the status comes from old data (see StaleAfter)
	// or some partitions could not be observed (then Partial is set too).
	Stale   bool   `json:"stale"`
	Partial bool   `json:"partial,omitempty"`
	Err     string `json:"err,omitempty"`

	Partitions []PartitionState `json:"partitions"`
}

// Never is the TimeToDrain of a backlog that does not shrink.
const Never time.Duration = -1

// PartitionState is one partition of a State.
type PartitionState struct {
	PartitionSample
	// HeadAge is now minus HeadTime when the partition has lag.
	HeadAge time.Duration `json:"headAge"`
	// ObservedAt is when these values were read (older than the State's
	// At when the partition is stale).
	ObservedAt time.Time `json:"observedAt"`
}

// Tracker folds successive Samples of each target into States. It keeps one
// small record per target and per partition.
//
// A Tracker is not safe for concurrent use: one observation loop owns it.
type Tracker struct {
	rules   func(Target) Rules
	targets map[Target]*track
}

type track struct {
	state      State
	parts      map[int32]PartitionState
	lastFresh  time.Time
	haveRates  bool
	haveSample bool
}

// NewTracker returns a Tracker. rules gives the thresholds for a target;
// nil means DefaultRules for all.
func NewTracker(rules func(Target) Rules) *Tracker {
	if rules == nil {
		rules = func(Target) Rules { return DefaultRules }
	}
	return &Tracker{rules: rules, targets: make(map[Target]*track)}
}

// Observe folds one Sample into its target's state and returns the new
// State; now is the current time (head ages and staleness are measured
// against it; normally s.At).
//
// Partitions of s that are Stale keep their previous values, so one
// unreachable broker produces partial results flagged stale, never a lag
// spike or drop. A sample with Err and no partitions keeps the whole previous
// state and only ages it. A sample without Err that read at least one
// partition lists all the target has: partitions it does not list (a topic
// recreated with fewer partitions) are dropped.
func (t *Tracker) Observe(s Sample, now time.Time) State {
	tr := t.targets[s.Target]
	if tr == nil {
		tr = &track{parts: make(map[int32]PartitionState)}
		t.targets[s.Target] = tr
	}
	r := t.rules(s.Target).withDefaults()
	st := &tr.state
	st.Target = s.Target
	st.Err = s.Err

	fresh := 0
	var dProduced, dConsumed int64
	var rateParts int
	for _, p := range s.Partitions {
		prev, had := tr.parts[p.Partition]
		if p.Stale {
			if had {
				prev.Stale = true
				prev.Err = p.Err
				tr.parts[p.Partition] = prev
			} else {
				// Nothing to keep: remember that it exists and is
				// unknown; it counts no lag.
				tr.parts[p.Partition] = PartitionState{PartitionSample: PartitionSample{
					Partition: p.Partition, Committed: -1, Stale: true, Err: p.Err,
				}}
			}
			continue
		}
		fresh++
		// Without a commit on either side the consumed position is
		// unknown: no rate from this pair.
		if had && !prev.Stale && tr.haveSample && p.Committed >= 0 && prev.Committed >= 0 {
			dp := p.End - prev.End
			dc := (p.End - p.Lag) - (prev.End - prev.Lag)
			// A shrinking end offset means the partition was recreated
			// or the counter reset: no rate from this pair.
			if dp >= 0 {
				dProduced += dp
				// A consumed position that moved back (an offset reset
				// to earlier) is not negative consumption; count none.
				dConsumed += max(dc, 0)
				rateParts++
			}
		}
		// A head that could not be read this time but whose position did
		// not move is still the same message. The position is the commit,
		// or the log start when retention deleted past the commit: then
		// the log start moving is the position moving.
		if !p.HeadKnown && p.Lag > 0 && p.Committed >= 0 && had && prev.HeadKnown && position(prev.PartitionSample) == position(p) {
			p.HeadTime, p.HeadKnown = prev.HeadTime, true
		}
		tr.parts[p.Partition] = PartitionState{PartitionSample: p, ObservedAt: s.At}
	}
	// Every partition s lists is in tr.parts now; more there means some
	// are gone from the target.
	if s.Err == "" && fresh > 0 && len(tr.parts) > len(s.Partitions) {
		listed := make(map[int32]bool, len(s.Partitions))
		for _, p := range s.Partitions {
			listed[p.Partition] = true
		}
		for id := range tr.parts {
			if !listed[id] {
				delete(tr.parts, id)
			}
		}
	}

	if fresh > 0 {
		if tr.haveSample && rateParts > 0 {
			dt := s.At.Sub(tr.lastFresh).Seconds()
			if dt > 0 {
				ip, ic := float64(dProduced)/dt, float64(dConsumed)/dt
				st.ProduceRateInstant, st.ConsumeRateInstant = ip, ic
				if !tr.haveRates {
					st.ProduceRate, st.ConsumeRate = ip, ic
					tr.haveRates = true
				} else {
					// alpha = 1 - e^(-dt/tau): exact for any interval,
					// so irregular cycles weigh what they cover.
					alpha := 1 - math.Exp(-dt/r.RateWindow.Seconds())
					st.ProduceRate += alpha * (ip - st.ProduceRate)
					st.ConsumeRate += alpha * (ic - st.ConsumeRate)
				}
				st.RatesKnown = true
				if dConsumed > 0 {
					st.LastProgress = s.At
				}
			}
		}
		tr.haveSample = true
		tr.lastFresh = s.At
		st.At = s.At
		st.GroupState = s.GroupState
		st.Members = s.Members
	}

	t.summarize(tr, now)
	if st.Lag == 0 && fresh > 0 {
		st.LastProgress = s.At
	}
	if st.LastProgress.IsZero() && fresh > 0 {
		// First sight of a target with lag: progress unknown, count from
		// here so that a stall is only declared after StallAfter of our own
		// watching.
		st.LastProgress = s.At
	}
	Evaluate(st, r, now, tr.lastFresh)
	return t.snapshot(tr)
}

// position is where the consumer of p reads next: its commit, or the log
// start when retention deleted past the commit.
func position(p PartitionSample) int64 { return max(p.Committed, p.LogStart) }

// summarize recomputes the sums over partitions as of now.
func (t *Tracker) summarize(tr *track, now time.Time) {
	st := &tr.state
	st.Lag, st.HeadAge, st.HeadAgeKnown, st.Partial, st.Uncommitted = 0, 0, true, false, 0
	st.Partitions = st.Partitions[:0]
	for id, p := range tr.parts {
		p.HeadAge = 0
		if p.Stale {
			st.Partial = true
		}
		switch {
		case p.Committed < 0:
			// No commit: lag unknown, not counted. A stale
			// placeholder for a partition never read is not
			// counted either.
			if !p.ObservedAt.IsZero() {
				st.Uncommitted++
			}
		case p.Lag > 0:
			st.Lag += p.Lag
			if p.HeadKnown {
				// A head stamped in the future (producer clock skew) is
				// age 0, not negative.
				p.HeadAge = max(now.Sub(p.HeadTime), 0)
				st.HeadAge = max(st.HeadAge, p.HeadAge)
			} else {
				st.HeadAgeKnown = false
			}
		}
		tr.parts[id] = p
		st.Partitions = append(st.Partitions, p)
	}
	sort.Slice(st.Partitions, func(i, j int) bool { return st.Partitions[i].Partition < st.Partitions[j].Partition })
	switch net := st.ConsumeRate - st.ProduceRate; {
	case st.Lag == 0:
		st.TimeToDrain = 0
	case !st.RatesKnown || net <= 0:
		st.TimeToDrain = Never
	default:
		st.TimeToDrain = time.Duration(float64(st.Lag) / net * float64(time.Second))
	}
}

// snapshot returns a copy of the state that shares no memory with the
// tracker.
func (t *Tracker) snapshot(tr *track) State {
	s := tr.state
	s.Partitions = append([]PartitionState(nil), tr.state.Partitions...)
	return s
}

// Evaluate applies the status rules to st as of now, in order; the first that
// matches sets Status, Rule and Reason:
//
//  1. stale: the newest fresh observation is older than StaleAfter, or
//     there never was one. (Partial data sets Stale but judges on.)
//  2. caught-up: no lag. OK, however long ago the last message came:
//     a quiet topic is not a stopped consumer.
//  3. no-progress: there is lag, nothing was consumed for StallAfter, and
//     the oldest unconsumed message is itself at least StallAfter old:
//     stopped when the group has no members, else stalled.
//  4. over-age: the oldest unconsumed message is older than LagAge:
//     lagging.
//  5. within-age: OK.
//
// Partitions without a committed offset (State.Uncommitted) take part in no
// rule: their lag is unknown. Reason ends with their number when there are
// any, so a target whose partitions all lack a commit is OK (caught-up) and
// says why.
func Evaluate(st *State, r Rules, now, lastFresh time.Time) {
	r = r.withDefaults()
	st.Stale = st.Partial
	set := func(s Status, rule, reason string) { st.Status, st.Rule, st.Reason = s, rule, reason }
	since := now.Sub(lastFresh)
	switch {
	case lastFresh.IsZero():
		st.Stale = true
		set(StatusStale, "stale", "never observed: "+orNone(st.Err))
	case since > r.StaleAfter:
		st.Stale = true
		set(StatusStale, "stale", fmt.Sprintf("last good observation %s ago (> %s): %s", since.Round(time.Millisecond), r.StaleAfter, orNone(st.Err)))
	case st.Lag == 0:
		set(StatusOK, "caught-up", "nothing unconsumed")
	case now.Sub(st.LastProgress) >= r.StallAfter && st.HeadAge >= r.StallAfter:
		idle := now.Sub(st.LastProgress).Round(time.Millisecond)
		if st.Members == 0 {
			set(StatusStopped, "no-progress", fmt.Sprintf("%d unconsumed, nothing consumed for %s, no members", st.Lag, idle))
		} else {
			set(StatusStalled, "no-progress", fmt.Sprintf("%d unconsumed, nothing consumed for %s", st.Lag, idle))
		}
	case st.HeadAge > r.LagAge:
		set(StatusLagging, "over-age", fmt.Sprintf("head age %s > %s", st.HeadAge.Round(time.Millisecond), r.LagAge))
	default:
		set(StatusOK, "within-age", fmt.Sprintf("head age %s <= %s", st.HeadAge.Round(time.Millisecond), r.LagAge))
	}
	if st.Uncommitted > 0 {
		st.Reason += fmt.Sprintf("; %d of %d partitions without a committed offset (lag unknown, not counted)", st.Uncommitted, len(st.Partitions))
	}
}

func orNone(s string) string {
	if s == "" {
		return "no error reported"
	}
	return s
}

// States re-evaluates every tracked target as of now (ageing head ages and
// staleness without new samples) and returns them sorted by target.
func (t *Tracker) States(now time.Time) []State {
	out := make([]State, 0, len(t.targets))
	for tg, tr := range t.targets {
		t.summarize(tr, now)
		Evaluate(&tr.state, t.rules(tg), now, tr.lastFresh)
		out = append(out, t.snapshot(tr))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target.String() < out[j].Target.String() })
	return out
}

// Forget drops targets whose last fresh observation is older than cutoff
// (groups deleted, consumers removed) and returns them.
func (t *Tracker) Forget(cutoff time.Time) []Target {
	var gone []Target
	for tg, tr := range t.targets {
		if tr.lastFresh.Before(cutoff) {
			gone = append(gone, tg)
			delete(t.targets, tg)
		}
	}
	return gone
}

// Len is the number of tracked targets.
func (t *Tracker) Len() int { return len(t.targets) }
