package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Schedule is how well a run kept to its schedule over a window: how late
// the load generator sent, and how far apart the daemon's observations
// came. A machine that stalls (a loaded host, a pause of the process)
// delays both; lagbridge cannot react to a drop it has not observed, nor
// refuse messages the generator has not sent yet.
type Schedule struct {
	// Behind is the latest the load generator sent a message after its
	// schedule said, in a bin ending at BehindAt (from the start of the
	// run).
	Behind, BehindAt time.Duration
	// Gap is the longest time between two observation cycles of the
	// daemon (or from the last one to the end of the window), ending at
	// GapAt; Cycles counts the cycles in the window.
	Gap, GapAt time.Duration
	Cycles     int
	// Consumer is the latest the consumer let a message go after its
	// capacity's schedule (Series.ConsumerBehind), in a bin ending at
	// ConsumerAt: a consumer that fell behind its own pace formed a queue
	// its capacity would not have.
	Consumer, ConsumerAt time.Duration
}

// ScheduleOf returns how the run recorded in s kept its schedule over
// [from, to) (from the start of the run). It is a pure function.
//
// Example: cycles at 2.0, 2.25, 3.9 and 4.1 s and a window [2 s, 4.5 s):
// Gap 1.65 s ending at 3.9 s, 3 cycles (the last gap, 4.1 to 4.5 s, is
// shorter).
func ScheduleOf(s *Series, from, to time.Duration) Schedule {
	var sc Schedule
	sc.Behind, sc.BehindAt = worstIn(s.Behind, s.Bin, from, to)
	sc.Consumer, sc.ConsumerAt = worstIn(s.ConsumerBehind, s.Bin, from, to)
	last := from
	for _, c := range s.Cycles {
		if c < from {
			last = c
			continue
		}
		if c >= to {
			break
		}
		sc.Cycles++
		if c-last > sc.Gap {
			sc.Gap, sc.GapAt = c-last, c
		}
		last = c
	}
	if to-last > sc.Gap {
		sc.Gap, sc.GapAt = to-last, to
	}
	return sc
}

// worstIn is the largest of the bins (seconds, each bin long) over
// [from, to), and the end of its bin; 0, 0 when none is above 0.
func worstIn(secs []float64, bin, from, to time.Duration) (worst, at time.Duration) {
	lo, hi := max(0, int(from/bin)), min(len(secs), int((to+bin-1)/bin))
	for i := lo; i < hi; i++ {
		if b := time.Duration(secs[i] * float64(time.Second)); b > worst {
			worst, at = b, time.Duration(i+1)*bin
		}
	}
	return worst, at
}

// String says it in one line.
func (sc Schedule) String() string {
	return fmt.Sprintf("generator at worst %s late (at %s); daemon: %d cycles, longest gap %s (ending at %s); consumer at worst %s behind its capacity (at %s)",
		dur(sc.Behind), dur(sc.BehindAt), sc.Cycles, dur(sc.Gap), dur(sc.GapAt), dur(sc.Consumer), dur(sc.ConsumerAt))
}

// Timeline renders r's series over [from, to) in rows of step (a multiple
// of the series' bin): per row the offered, stored and refused rates, the
// SDK's allowed and the daemon's decided rate, the decision's rule, the
// daemon's head age, the true one and the lag (those six at the end of the
// row), how late the generator sent at worst and the daemon's cycles in
// the row; then every change of rule in the window with its reason. It is
// a pure function.
func Timeline(r Result, from, to, step time.Duration) string {
	s := r.Series
	per := max(1, int(step/s.Bin))
	lo, hi := max(0, int(from/s.Bin)), min(s.Bins(), int(to/s.Bin))
	offered, acked, refused := total(s.Offered), total(s.Acked), total(s.Refused)
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s %7s %7s %7s %7s %7s %-15s %6s %6s %6s %6s %6s\n",
		"t (s)", "offered", "stored", "refused", "allowed", "decided", "rule", "head", "true", "lag", "late", "cycles")
	for i := lo; i < hi; i += per {
		j := min(i+per, hi)
		secs := float64(j-i) * s.Bin.Seconds()
		sc := ScheduleOf(s, time.Duration(i)*s.Bin, time.Duration(j)*s.Bin)
		fmt.Fprintf(&b, "%4.1f-%-6.1f %7s %7s %7s %7s %7s %-15s %6s %6s %6s %6s %6d\n",
			(time.Duration(i) * s.Bin).Seconds(), (time.Duration(j) * s.Bin).Seconds(),
			num(float64(sum(offered[i:j]))/secs), num(float64(sum(acked[i:j]))/secs), num(float64(sum(refused[i:j]))/secs),
			rateStr(s.Allowed[j-1]), rateStr(s.Decided[j-1]), orDash(ruleAt(s, j-1)), secStr(s.HeadAge[j-1]), secStr(trueAt(s, j-1)), rateStr(s.Lag[j-1]),
			dur(sc.Behind), sc.Cycles)
	}
	prev := ruleAt(s, lo-1)
	for i := lo; i < hi; i++ {
		if r := ruleAt(s, i); r != prev && r != "" {
			prev = r
			fmt.Fprintf(&b, "%5.1fs %s: %s\n", (time.Duration(i+1) * s.Bin).Seconds(), r, clip(s.Reason[i], 220))
		}
	}
	return b.String()
}

// trueAt is s.TrueHeadAge[i], NaN when there is none.
func trueAt(s *Series, i int) float64 {
	if i < 0 || i >= len(s.TrueHeadAge) {
		return math.NaN()
	}
	return s.TrueHeadAge[i]
}

// ruleAt is s.Rule[i], "" when there is none.
func ruleAt(s *Series, i int) string {
	if i < 0 || i >= len(s.Rule) {
		return ""
	}
	return s.Rule[i]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
