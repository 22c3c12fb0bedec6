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
	// Shed counts the messages the SDK refused locally (never sent), by
	// reason (rate, throttled, stop, expired, ...).
	Shed map[string]int64
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

	// HeadAgeP50, P99 and Max are over the daemon's observations of the
	// consumer group's head age, one per bin (time-weighted).
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

	// EndLag and EndHeadAge are the backlog the run leaves behind (the
	// daemon's last observation).
	EndLag     int64
	EndHeadAge time.Duration

	Series *Series
}

// Analyze computes a run's figures from its series. It is a pure function.
func Analyze(scn Scenario, broker, mode string, load float64, s *Series, tot Totals) Result {
	n := s.Bins()
	bin := s.Bin.Seconds()
	r := Result{Broker: broker, Mode: mode, Load: load, Offered: load * scn.Slow,
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

	var ages []float64
	for _, a := range s.HeadAge {
		if !math.IsNaN(a) {
			ages = append(ages, a)
		}
	}
	slices.Sort(ages)
	r.HeadAgeP50, r.HeadAgeP99, r.HeadAgeMax = seconds(quantile(ages, 0.5)), seconds(quantile(ages, 0.99)), seconds(quantile(ages, 1))
	r.AgeP99, r.AgeMax = histQuantile(s.Ages, 0.99), histQuantile(s.Ages, 1)

	window, hold := int(500*time.Millisecond/s.Bin), int(time.Second/s.Bin)
	window, hold = max(window, 1), max(hold, 1)
	limit := 1.1 * scn.Slow
	r.Reaction = firstSustained(acked, drop, restore, window, hold, bin, func(v float64) bool { return v <= limit }, s.Bin)
	want := 0.9 * math.Min(r.Offered, scn.Normal)
	r.Recovery = firstSustained(good, restore, n, window, hold, bin, func(v float64) bool { return v >= want }, s.Bin)
	r.RecoveryAdmitted = firstSustained(acked, restore, n, window, hold, bin, func(v float64) bool { return v >= want }, s.Bin)
	r.Amplification = ratio(float64(tot.Attempts), float64(r.Requested))

	r.EndLag, r.EndHeadAge = -1, Never
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
