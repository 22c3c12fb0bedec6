package bench

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"strconv"
	"time"
)

// CSV renders one run's series, one row per bin: time (s, end of the
// bin), consumer capacity, and per second over that bin the offered,
// stored, good, dead and skipped counts; the bench's true head age (s, at
// the bin's end); then the sampled daemon and SDK figures (the daemon's
// head age s, lag, allowed and decided msg/s, the decision's capacity
// estimate, predicted wait and reason), the SDK's refusals per second, and
// how the run kept its schedule: how late the load generator sent and the
// consumer let a message go at worst (s, see Series.Behind and
// Series.ConsumerBehind) and the daemon's observation cycles that ended
// in the bin; then the consumer's commits (or acks) made in the bin and
// the longest time a committer had gone without one when it made one of
// them (s; empty when none, or when the bench does not see the
// consumer's commits, Series.Commits).
// Empty cells are unknown; "inf" is unlimited. It is a pure function.
func CSV(r Result) []byte {
	s, scn := r.Series, r.Scenario
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"t_s", "capacity", "offered", "stored", "good", "dead", "skipped", "true_head_age_s", "daemon_head_age_s", "lag",
		"allowed", "decided", "decision_capacity", "decision_wait_s", "decision_reason", "refused", "generator_late_s", "consumer_late_s", "cycles", "commits", "commit_gap_s"})
	rate := 1 / s.Bin.Seconds()
	f := func(v float64) string {
		switch {
		case math.IsNaN(v):
			return ""
		case math.IsInf(v, 1):
			return "inf"
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	val := func(v []float64, i int) float64 {
		if i < len(v) {
			return v[i]
		}
		return math.NaN()
	}
	per := func(c [][]int64, i int) string {
		var n int64
		for _, row := range c {
			n += row[i]
		}
		return f(float64(n) * rate)
	}
	cycles := make([]int, s.Bins())
	for _, c := range s.Cycles {
		if i := int(c / s.Bin); i >= 0 && i < len(cycles) {
			cycles[i]++
		}
	}
	commits, gaps := make([]int, s.Bins()), make([]float64, s.Bins())
	for i := range gaps {
		gaps[i] = math.NaN()
	}
	for _, cs := range s.Commits {
		for k, c := range cs {
			i := int(c / s.Bin)
			if i < 0 || i >= len(commits) {
				continue
			}
			commits[i]++
			if k > 0 && !(gaps[i] >= (c - cs[k-1]).Seconds()) {
				gaps[i] = (c - cs[k-1]).Seconds()
			}
		}
	}
	for i := range s.Bins() {
		t := time.Duration(i+1) * s.Bin
		_ = w.Write([]string{fmt.Sprintf("%.3f", t.Seconds()), f(scn.Capacity(t - s.Bin/2)),
			per(s.Offered, i), per(s.Acked, i), per(s.Good, i), per(s.Dead, i), per(s.Skipped, i),
			f(round3(val(s.TrueHeadAge, i))), f(round3(s.HeadAge[i])), f(s.Lag[i]), f(round3(s.Allowed[i])), f(round3(s.Decided[i])),
			f(round3(s.Capacity[i])), f(round3(s.Wait[i])), s.Reason[i], per(s.Refused, i),
			f(round3(val(s.Behind, i))), f(round3(val(s.ConsumerBehind, i))), strconv.Itoa(cycles[i]),
			strconv.Itoa(commits[i]), f(round3(gaps[i]))})
	}
	w.Flush()
	return b.Bytes()
}

func round3(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	return math.Round(v*1000) / 1000
}
