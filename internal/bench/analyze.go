package bench

import (
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/ttl"
)

// Never is the value of a reaction or recovery time that did not happen
// within the run.
const Never time.Duration = -1

// Totals are the producer-side counts of a run that the series do not
// hold.
type Totals struct {
	// Attempts is every message handed to the broker client, first tries
	// and retries; Retries the retries among them; Failed the messages
	// that were finally not delivered after trying the broker.
	Attempts, Retries, Failed int64
	// Overflow counts the requests of Sync and Batch producers that found
	// their handlers' queue full and were lost before reaching a client.
	Overflow int64
	// Expired counts the requests of Sync producers whose deadline passed
	// while they waited in their handlers' queue (every handler busy for
	// the whole deadline, as on a machine that stalled): lost before
	// reaching a client, on either side, and no refusal of the SDK.
	Expired int64
	// Shed counts the messages the SDK refused locally (never sent), by
	// reason (rate, throttled, stop, expired, ...).
	Shed map[string]int64
	// MaxThrottle is the longest throttle a broker asked of a naive or
	// legacy producer (throttle_time_ms), 0 for none.
	MaxThrottle time.Duration
}

// ClassResult is what one producer class got.
type ClassResult struct {
	Producer    string
	Criticality ttl.Criticality
	// Offered, Acked (stored by the broker), Good (processed within the
	// deadline), Dead (processed after it) and Skipped (expired, skipped
	// by a guard) messages.
	Offered, Acked, Good, Dead, Skipped int64
}

// Result is one run's figures. Rates are msg/s, shares are fractions
// (0.95 is 95%); times are Never when the event did not happen in the run.
type Result struct {
	// Row is the matrix row the run belongs to.
	Row Row
	// Interval is the daemon's observation interval in the run: Row's,
	// except for a naive run that rows of other intervals share (see
	// Row.naiveKey), which keeps the one it ran at.
	Interval time.Duration
	// Scenario is the scenario the run ran (the row's, scaled).
	Scenario Scenario
	// Broker is the cluster's name: kfake, kafka, embedded-nats or nats.
	Broker string
	Mode   string
	// Load is the offered load as a multiple of Scenario.Slow; Offered is
	// that load in msg/s.
	Load, Offered float64
	// Duration of the run.
	Duration time.Duration

	// Requested messages (the offered ones), Acked by the broker, Good,
	// Dead and Skipped (see ClassResult).
	Requested, Acked, Good, Dead, Skipped int64
	Totals                                Totals

	// Goodput is Good per second of the run.
	Goodput float64
	// GoodputShare is Good over the most any system could have processed
	// usefully: the integral of min(offered, capacity) over the run.
	GoodputShare float64
	// SlowGoodputShare is the same over the slow phase only, where the
	// most is min(offered, Slow) x SlowFor.
	SlowGoodputShare float64
	// DeadShare is Dead / (Good + Dead): the share of processing spent on
	// dead work.
	DeadShare float64

	// TrueHeadAgeP50, P99 and Max are over the bench's own measure of the
	// head age, one per bin (Series.TrueHeadAge): the age of the oldest
	// record stored and not processed yet. The head age target is judged
	// on TrueHeadAgeP99. Never when not measured.
	TrueHeadAgeP50, TrueHeadAgeP99, TrueHeadAgeMax time.Duration
	// HeadAgeP50, P99 and Max are over the daemon's observations of the
	// consumer group's head age, one per bin (time-weighted): what the
	// controller acts on, shown as the daemon's.
	HeadAgeP50, HeadAgeP99, HeadAgeMax time.Duration
	// AgeP99 and AgeMax are the age of the processed messages when their
	// processing ended (the consumer's view), at AgeBucket resolution.
	AgeP99, AgeMax time.Duration

	// Reaction is the time from the drop until the acked produce rate over
	// the last 500 ms is at most 1.1x the reduced capacity and stays so
	// over the next second.
	Reaction time.Duration
	// Recovery is the time from the restore until the goodput (over the
	// last 500 ms or less) is at least 90% of min(offered, Normal) and
	// stays so over the next second; RecoveryAdmitted the same for the
	// acked produce rate.
	Recovery, RecoveryAdmitted time.Duration
	// Amplification is broker attempts per requested message (retry
	// amplification; below 1 when the SDK sheds before sending).
	Amplification float64

	Classes []ClassResult

	// Refused is the messages the SDK refused before sending them;
	// RefusedAbove those of them the token bucket refused while the
	// producer's rate in force was at least its offer (Series.RefusedAbove).
	Refused, RefusedAbove int64
	// Phases are the figures before the drop, in the slow phase, and
	// after it once the restored capacity can be known (see
	// [PhaseBounds]).
	Phases [3]Phase
	// Blind is the window between the slow phase and the after one
	// [restore, restore + commit interval + observation interval): an
	// observer that reads commits cannot know yet that capacity has
	// returned, so issue 12 does not judge it; shown, not judged.
	Blind Phase
	// FalseThrottleSeconds counts the whole seconds of the run in which
	// producers were refused while the consumer had spare capacity
	// (processed less than 90% of its capacity in that second); the
	// phases (and Blind) split them by the window each second starts in.
	FalseThrottleSeconds int

	// Bound is the excess an observer that sees only commits cannot
	// avoid after the drop: (AdmittedBefore - Slow) x (CommitGap +
	// observation interval), messages; Excess is the measured one (see
	// [ExcessAfterDrop]); AdmittedBefore the mean acked rate before the
	// drop (msg/s).
	Excess, Bound, AdmittedBefore float64
	// CommitGap is the commit interval the bound takes: for a consumer
	// whose commits the bench sees (CommitMeasured), the longest its
	// progress stayed invisible around the drop in this run (see
	// [CommitGapAt]); for the others the row's setting
	// (ConsumerKind.CommitInterval).
	CommitGap      time.Duration
	CommitMeasured bool
	// Phase is where the consumer's commits fell between the daemon's
	// readings, and where it was started (see [RunPhase]).
	Phase RunPhase

	// EndLag and EndHeadAge are the backlog the run leaves behind (the
	// daemon's last observation); EndTrueHeadAge the bench's last measure
	// of the head age (Never when none).
	EndLag                     int64
	EndHeadAge, EndTrueHeadAge time.Duration

	// Schedule is how the run kept its schedule from start to end (see
	// [ScheduleOf] and [Stall]).
	Schedule Schedule

	Series *Series
}

// Analyze computes a run's figures from its series. It is a pure function.
func Analyze(scn Scenario, row Row, broker, mode string, load float64, s *Series, tot Totals) Result {
	n := s.Bins()
	bin := s.Bin.Seconds()
	r := Result{Row: row, Interval: row.Interval, Scenario: scn, Broker: broker, Mode: mode, Load: load, Offered: load * scn.Slow,
		Duration: time.Duration(n) * s.Bin, Totals: tot, Series: s}
	for c, cl := range scn.Classes {
		cr := ClassResult{Producer: cl.Producer, Criticality: cl.Criticality,
			Offered: sum(s.Offered[c]), Acked: sum(s.Acked[c]), Good: sum(s.Good[c]), Dead: sum(s.Dead[c]), Skipped: sum(s.Skipped[c])}
		r.Classes = append(r.Classes, cr)
		r.Requested += cr.Offered
		r.Acked += cr.Acked
		r.Good += cr.Good
		r.Dead += cr.Dead
		r.Skipped += cr.Skipped
	}
	if d := r.Duration.Seconds(); d > 0 {
		r.Goodput = float64(r.Good) / d
	}
	good := total(s.Good)
	acked := total(s.Acked)
	drop, restore := int(scn.DropAt()/s.Bin), int(scn.RecoverAt()/s.Bin)
	var best, slowBest, slowGood float64
	for i := range n {
		capa := scn.Capacity(time.Duration(i)*s.Bin + s.Bin/2)
		best += math.Min(r.Offered, capa) * bin
		if i >= drop && i < restore {
			slowBest += math.Min(r.Offered, capa) * bin
			slowGood += float64(good[i])
		}
	}
	r.GoodputShare = ratio(float64(r.Good), best)
	r.SlowGoodputShare = ratio(slowGood, slowBest)
	r.DeadShare = ratio(float64(r.Dead), float64(r.Good+r.Dead))

	ages := known(s.HeadAge, 0, n)
	r.HeadAgeP50, r.HeadAgeP99, r.HeadAgeMax = seconds(quantile(ages, 0.5)), seconds(quantile(ages, 0.99)), seconds(quantile(ages, 1))
	truth := known(s.TrueHeadAge, 0, n)
	r.TrueHeadAgeP50, r.TrueHeadAgeP99, r.TrueHeadAgeMax = seconds(quantile(truth, 0.5)), seconds(quantile(truth, 0.99)), seconds(quantile(truth, 1))
	r.AgeP99, r.AgeMax = histQuantile(s.Ages, 0.99), histQuantile(s.Ages, 1)

	window, hold := int(500*time.Millisecond/s.Bin), int(time.Second/s.Bin)
	window, hold = max(window, 1), max(hold, 1)
	limit := 1.1 * scn.Slow
	r.Reaction = firstSustained(acked, drop, restore, window, hold, bin, func(v float64) bool { return v <= limit }, s.Bin)
	want := 0.9 * math.Min(r.Offered, scn.Normal)
	r.Recovery = firstSustained(good, restore, n, window, hold, bin, func(v float64) bool { return v >= want }, s.Bin)
	r.RecoveryAdmitted = firstSustained(acked, restore, n, window, hold, bin, func(v float64) bool { return v >= want }, s.Bin)
	r.Amplification = ratio(float64(tot.Attempts), float64(r.Requested))

	refused := total(s.Refused)
	r.Refused = sum(refused)
	above := make([]int64, len(refused))
	if len(s.RefusedAbove) > 0 {
		above = total(s.RefusedAbove)
	}
	r.RefusedAbove = sum(above)
	processed := total(s.Good)
	for i, v := range total(s.Dead) {
		processed[i] += v
	}
	r.Phases, r.Blind = phases(scn, row, s, r.Offered, processed, refused, above)
	r.FalseThrottleSeconds = len(FalseThrottle(scn, s.Bin, processed, refused))
	r.AdmittedBefore = rate(acked, 0, drop, bin)
	r.Excess = ExcessAfterDrop(acked, s.Bin, drop, restore, scn.Slow)
	r.CommitGap = row.Consumer.CommitInterval()
	if row.Consumer.recordsCommits() && len(s.Commits) > 0 {
		r.CommitGap, r.CommitMeasured = CommitGapAt(s.Commits, scn.DropAt(), scn.DropAt(), scn.RecoverAt()), true
	}
	if row.Consumer.recordsCommits() {
		r.Phase.Commit = CommitPhase(s.Commits, s.Cycles)
		r.Phase.CommitKnown = r.Phase.Commit >= 0
	}
	r.Bound = ExcessBound(r.AdmittedBefore, scn.Slow, r.CommitGap, row.Interval)

	r.Schedule = ScheduleOf(s, 0, r.Duration)

	r.EndLag, r.EndHeadAge, r.EndTrueHeadAge = -1, Never, Never
	for i := len(s.TrueHeadAge) - 1; i >= 0; i-- {
		if !math.IsNaN(s.TrueHeadAge[i]) {
			r.EndTrueHeadAge = seconds(s.TrueHeadAge[i])
			break
		}
	}
	for i := n - 1; i >= 0; i-- {
		if !math.IsNaN(s.Lag[i]) {
			r.EndLag = int64(s.Lag[i])
			r.EndHeadAge = seconds(s.HeadAge[i])
			break
		}
	}
	return r
}

// firstSustained returns the time from bin `from` to the first bin
// boundary k in (from, to] where the rate over the bins [max(from, k-window), k)
// satisfies ok and the rate over [k, k+hold) (cut at to) does too; Never
// when there is none.
func firstSustained(counts []int64, from, to, window, hold int, bin float64, ok func(float64) bool, width time.Duration) time.Duration {
	to = min(to, len(counts))
	for k := from + 1; k <= to; k++ {
		if !ok(rate(counts, max(from, k-window), k, bin)) {
			continue
		}
		if end := min(k+hold, to); end > k && !ok(rate(counts, k, end, bin)) {
			continue
		}
		return time.Duration(k-from) * width
	}
	return Never
}

// known returns the values of v in the bins [from, to) that are not NaN,
// sorted (none when v is shorter).
func known(v []float64, from, to int) []float64 {
	var out []float64
	for i := from; i < min(to, len(v)); i++ {
		if !math.IsNaN(v[i]) {
			out = append(out, v[i])
		}
	}
	slices.Sort(out)
	return out
}

// rate is the mean rate in msg/s over the bins [a, b).
func rate(counts []int64, a, b int, bin float64) float64 {
	if b <= a {
		return math.NaN()
	}
	var n int64
	for _, c := range counts[a:b] {
		n += c
	}
	return float64(n) / (float64(b-a) * bin)
}

// total sums per-class counters bin by bin.
func total(c [][]int64) []int64 {
	if len(c) == 0 {
		return nil
	}
	out := make([]int64, len(c[0]))
	for _, row := range c {
		for i, v := range row {
			out[i] += v
		}
	}
	return out
}

func sum(v []int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a / b
}

// quantile of sorted values (nearest rank); NaN for none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// histQuantile is the upper edge of the bucket holding quantile q of an
// AgeBucket histogram; Never when it is empty.
func histQuantile(h []int64, q float64) time.Duration {
	n := sum(h)
	if n == 0 {
		return Never
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= rank {
			return time.Duration(i+1) * AgeBucket
		}
	}
	return time.Duration(len(h)) * AgeBucket
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) {
		return Never
	}
	return time.Duration(s * float64(time.Second))
}

// Phase is one phase's figures. Rates are msg/s, shares fractions.
type Phase struct {
	// Name is "before" (the drop), "slow", "blind" (from the restore
	// until the after phase), or "after" (the restore, plus one commit
	// interval and one observation interval).
	Name string
	// From and To bound the phase, from the start of the run.
	From, To time.Duration
	// Offered, Acked, Refused, Good and Dead count the phase's messages.
	Offered, Acked, Refused, Good, Dead int64
	// Goodput is Good per second of the phase; DeadShare Dead / (Good +
	// Dead); AdmittedShare Acked / Offered.
	Goodput, DeadShare, AdmittedShare float64
	// Spare is true when the offered rate (the run's load, not the
	// measured offer) is below the consumer's capacity in the phase:
	// producers should then get (nearly) all they offer.
	Spare bool
	// TrueHeadAgeP99 over the phase's bins (the bench's measure), and
	// HeadAgeP99 over the daemon's observations in them.
	TrueHeadAgeP99, HeadAgeP99 time.Duration
	// FalseThrottleSeconds: the whole seconds of the run (counted from
	// its start) that start in this phase in which producers were refused
	// while the consumer had spare capacity (see [FalseThrottle]).
	FalseThrottleSeconds int
	// RefusedAbove: of Refused, those with the rate in force at least
	// the offer (Series.RefusedAbove); AboveOnlySeconds: of
	// FalseThrottleSeconds, those in which every refusal was one of them.
	RefusedAbove     int64
	AboveOnlySeconds int
	// MachineSeconds: of FalseThrottleSeconds, those the machine made:
	// the consumer had work waiting and fell behind its capacity's
	// schedule by the shortfall (see [MachineHeld]).
	MachineSeconds int
}

// PhaseBounds returns the three phases of a run: before the drop [0,
// drop), the slow phase [drop, restore), and after [restore + commit
// interval + observation interval, end): before that, nobody who reads
// commits can know that capacity has returned. The after phase is empty
// when the run ends first.
func PhaseBounds(scn Scenario, row Row) [3][2]time.Duration {
	after := min(scn.RecoverAt()+row.Consumer.CommitInterval()+row.Interval, scn.Duration())
	return [3][2]time.Duration{{0, scn.DropAt()}, {scn.DropAt(), scn.RecoverAt()}, {after, scn.Duration()}}
}

func phases(scn Scenario, row Row, s *Series, offer float64, processed, refused, above []int64) (out [3]Phase, blind Phase) {
	false1 := FalseThrottle(scn, s.Bin, processed, refused)
	below := make([]int64, len(refused))
	for i := range refused {
		below[i] = refused[i] - above[i]
	}
	kept := FalseThrottle(scn, s.Bin, processed, below)
	machine := MachineHeld(scn, s.Bin, processed, s.ConsumerBehind, false1)
	b := PhaseBounds(scn, row)
	fill := func(p *Phase, b [2]time.Duration) {
		from, to := int(b[0]/s.Bin), min(int(b[1]/s.Bin), s.Bins())
		for i := from; i < to; i++ {
			p.RefusedAbove += above[i]
		}
		p.AboveOnlySeconds = p.FalseThrottleSeconds - countIn(kept, b)
		p.MachineSeconds = countIn(machine, b)
	}
	for k, name := range [3]string{"before", "slow", "after"} {
		out[k] = phase(name, b[k], scn, s, offer, refused, false1)
		fill(&out[k], b[k])
	}
	bb := [2]time.Duration{min(scn.RecoverAt(), b[2][0]), b[2][0]}
	blind = phase("blind", bb, scn, s, offer, refused, false1)
	fill(&blind, bb)
	return out, blind
}

// countIn counts the seconds of secs that start in [b[0], b[1]).
func countIn(secs []int, b [2]time.Duration) int {
	n := 0
	for _, sec := range secs {
		if at := time.Duration(sec) * time.Second; at >= b[0] && at < b[1] {
			n++
		}
	}
	return n
}

// phase computes one window's figures; b bounds it, falseSecs are the
// run's false-throttle seconds (see [FalseThrottle]), counted in the
// window they start in.
func phase(name string, b [2]time.Duration, scn Scenario, s *Series, offer float64, refused []int64, falseSecs []int) Phase {
	from, to := int(b[0]/s.Bin), min(int(b[1]/s.Bin), s.Bins())
	p := Phase{Name: name, From: b[0], To: b[1]}
	if to <= from {
		p.Goodput, p.DeadShare, p.AdmittedShare, p.HeadAgeP99, p.TrueHeadAgeP99 = math.NaN(), math.NaN(), math.NaN(), Never, Never
		return p
	}
	offered, acked, good, dead := total(s.Offered), total(s.Acked), total(s.Good), total(s.Dead)
	for i := from; i < to; i++ {
		p.Offered += offered[i]
		p.Acked += acked[i]
		p.Refused += refused[i]
		p.Good += good[i]
		p.Dead += dead[i]
	}
	secs := float64(to-from) * s.Bin.Seconds()
	p.Goodput = float64(p.Good) / secs
	p.DeadShare = ratio(float64(p.Dead), float64(p.Good+p.Dead))
	p.AdmittedShare = ratio(float64(p.Acked), float64(p.Offered))
	p.Spare = offer < scn.Capacity(b[0])
	p.HeadAgeP99 = seconds(quantile(known(s.HeadAge, from, to), 0.99))
	p.TrueHeadAgeP99 = seconds(quantile(known(s.TrueHeadAge, from, to), 0.99))
	for _, sec := range falseSecs {
		if at := time.Duration(sec) * time.Second; at >= b[0] && at < b[1] {
			p.FalseThrottleSeconds++
		}
	}
	return p
}

// FalseThrottle returns the whole seconds k of the run (from its start)
// in which producers were refused (refused in [k, k+1) > 0) while the
// consumer had spare capacity: it processed less than 90% of what its
// capacity allowed in that second. processed and refused are per bin of
// width bin. It is a pure function.
//
// Example: capacity 2,000 msg/s, a second with 800 processed and 5
// refused is a false-throttle second (800 < 1,800); one with 1,950
// processed and 5,000 refused is not (the consumer was busy).
func FalseThrottle(scn Scenario, bin time.Duration, processed, refused []int64) []int {
	per := int(time.Second / bin)
	if per < 1 {
		return nil
	}
	var out []int
	for k := 0; (k+1)*per <= len(processed); k++ {
		var rf int64
		for i := k * per; i < (k+1)*per; i++ {
			rf += refused[i]
		}
		if p, capa := second(scn, bin, processed, k); rf > 0 && float64(p) < 0.9*capa {
			out = append(out, k)
		}
	}
	return out
}

// second returns what the consumer processed in the whole second k of
// the run (processed is per bin of width bin) and what its capacity
// allowed in it.
func second(scn Scenario, bin time.Duration, processed []int64, k int) (p int64, capa float64) {
	per := int(time.Second / bin)
	for i := k * per; i < (k+1)*per; i++ {
		p += processed[i]
		capa += scn.Capacity(time.Duration(i)*bin+bin/2) * bin.Seconds()
	}
	return p, capa
}

// MachineHeld returns those of the false-throttle seconds secs (see
// [FalseThrottle]) that the machine made: seconds in which the consumer
// had work waiting and let it go later than a consumer at its capacity
// would have, by enough to account for the shortfall. behind is the
// consumer's lateness per bin (Series.ConsumerBehind: how late it let a
// message go at worst, behind its capacity's schedule while work waited;
// nil or empty when not measured, then none is the machine's). The
// lateness adds up while work waits and restarts when the consumer runs
// dry, so its growth over a second, from the last bin of the second
// before in which the consumer processed anything to the last such bin
// of this one (0 when it fell), is the time the machine took from a
// consumer with work waiting; the second is the machine's when what it
// processed plus that time at its capacity reaches the 90% FalseThrottle
// asks. A consumer that idled in the second restarts its lateness and
// has no growth to show. It is a pure function.
//
// Why: on 2 cores the consumer of a NATS row at 10x, its backlog a few
// hundred messages all along, was late by 0.13-0.24 s more in each of
// the 4 false-throttle seconds after the restore of
// nats/ack-batch/sync/1s in session 35's matrix (1,514-1,766 processed
// of 2,000): seconds in which it never idled.
//
// Example: capacity 2,000 msg/s, 1,700 processed and 5 refused, the
// lateness 0.10 s at the end of the second before and 0.25 s at the end
// of this one: 1,700 + 0.15 x 2,000 = 2,000 >= 1,800, the machine's.
func MachineHeld(scn Scenario, bin time.Duration, processed []int64, behind []float64, secs []int) []int {
	per := int(time.Second / bin)
	if per < 1 || len(behind) == 0 || len(secs) == 0 {
		return nil
	}
	// ends[k] is the lateness at the last bin of second k (or before)
	// in which the consumer processed anything.
	n := min(len(processed), len(behind)) / per
	ends := make([]float64, n)
	last := 0.0
	for k := range n {
		for i := k * per; i < (k+1)*per; i++ {
			if processed[i] > 0 {
				last = behind[i]
			}
		}
		ends[k] = last
	}
	var out []int
	for _, k := range secs {
		if k >= n {
			continue
		}
		grew := ends[k]
		if k > 0 {
			grew -= ends[k-1]
		}
		if grew <= 0 {
			continue
		}
		p, capa := second(scn, bin, processed, k)
		end := scn.Capacity(time.Duration((k+1)*per)*bin - bin/2)
		if float64(p)+grew*end >= 0.9*capa {
			out = append(out, k)
		}
	}
	return out
}

// ExcessAfterDrop is the most the admitted messages ran ahead of the
// reduced capacity at any moment of the slow phase: the maximum over k in
// (drop, restore] of acked[drop:k] - slow x (k - drop) x bin, in messages
// (0 when they never ran ahead). acked is per bin of width bin; drop and
// restore are bin indexes. It is a pure function.
//
// Example: bins of 1 s, slow 400 msg/s, 1,000 acked in each of the first
// three seconds after the drop and 100 after: the excess peaks after three
// seconds at 3,000 - 1,200 = 1,800.
func ExcessAfterDrop(acked []int64, bin time.Duration, drop, restore int, slow float64) float64 {
	restore = min(restore, len(acked))
	var cum, best float64
	for k := drop; k < restore; k++ {
		cum += float64(acked[k])
		best = math.Max(best, cum-slow*float64(k+1-drop)*bin.Seconds())
	}
	return best
}

// ExcessBound is what an observer that sees only commits must admit after
// a drop before it can know: (before - after) x (commitInterval +
// interval), in messages, where before is the rate admitted before the
// drop and after the capacity after it (msg/s); 0 when before <= after.
// The commit interval is how long the consumer's progress stays invisible,
// the observation interval how long until the next look. It is a pure
// function.
//
// Example: 800 msg/s admitted, capacity 400 after the drop, 5 s commits,
// observed every 1 s: (800 - 400) x 6 = 2,400 messages.
func ExcessBound(before, after float64, commitInterval, interval time.Duration) float64 {
	if !(before > after) {
		return 0
	}
	return (before - after) * (commitInterval + interval).Seconds()
}

// CommitGapAt is the commit interval a consumer really had over [from,
// to]: the longest time one committer went without a commit, over each
// committer's gaps between consecutive commits that overlap [from, to]
// (a gap before a committer's first commit starts at 0, the start of the
// run; one still open after its last commit ends at end). commits are
// each committer's commit times, ascending. It is a pure function.
//
// A committer with no commit at all is left out, as one the recorder
// never saw is (a member given no partition commits nothing).
//
// For the excess bound, from = to = the drop: the gap in force at the
// drop (a poll in hand, worked through at the reduced capacity before it
// is committed) keeps the drop out of sight until it ends. The polls that
// begin after the drop hold what was admitted after it, the excess the
// bound is compared with; counting their gaps would let the bound grow
// with the excess.
//
// Example: commits at 9.96 s, 10.02 s and 11.27 s, a drop at 10 s: the
// gap in force at the drop is 9.96 s to 10.02 s, the commit interval
// 0.06 s (the 1.25 s gap after it is a poll of records admitted after the
// drop); over [10 s, 11 s] it would be 1.25 s.
func CommitGapAt(commits [][]time.Duration, from, to, end time.Duration) time.Duration {
	var longest time.Duration
	for _, cs := range commits {
		if len(cs) == 0 {
			continue
		}
		prev := time.Duration(0)
		for _, c := range append(slices.Clone(cs), max(end, to)) {
			if c > from && prev <= to {
				longest = max(longest, c-prev)
			}
			if prev > to {
				break
			}
			prev = c
		}
	}
	return longest
}
