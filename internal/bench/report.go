package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Targets are issue 12's done-when figures for the lagbridge runs.
type Targets struct {
	// MinAdmitted is the share of their offer producers get while the
	// consumer has spare capacity (0.99): before the drop, and after
	// the restore plus one commit and one observation interval.
	MinAdmitted float64
	// MaxExcessRatio bounds the measured excess after the drop over
	// [ExcessBound], for rows that read commits only (1.2).
	MaxExcessRatio float64
	// For rows whose consumer tells its position (commit per poll, the
	// ttl guard, the hook): MinGoodputShare of the best possible goodput
	// (0.95), MaxDeadShare (0.01), MaxHeadAgeP99 (the deadline), judged
	// on the true head age (Result.TrueHeadAgeP99), not the daemon's.
	MinGoodputShare float64
	MaxDeadShare    float64
	MaxHeadAgeP99   time.Duration
}

// DefaultTargets returns issue 12's targets for a scenario.
func DefaultTargets(scn Scenario) Targets {
	return Targets{MinAdmitted: 0.99, MaxExcessRatio: 1.2, MinGoodputShare: 0.95, MaxDeadShare: 0.01, MaxHeadAgeP99: scn.Deadline}
}

// tellsPosition reports whether a consumer's broker-side position is close
// to its real one: it commits after every poll, or reports it.
func tellsPosition(k ConsumerKind) bool {
	return k == CommitPerPoll || k == Guard || k.reports() || k == AckEach
}

// Check lists the targets the lagbridge run lb misses, in words, next to
// naive, the naive run of the same row and load (nil when there is none):
// never worse than naive; no false throttling; for rows that read commits
// only, the excess within MaxExcessRatio of the bound; for rows whose
// consumer tells its position, goodput, dead work and the true head age
// (the bench's measure: the daemon's is the system under test's estimate).
// Empty when it meets all.
func (t Targets) Check(lb Result, naive *Result) []string {
	var miss []string
	if naive != nil {
		if lb.GoodputShare < naive.GoodputShare {
			miss = append(miss, fmt.Sprintf("goodput %s < naive's %s", pct(lb.GoodputShare), pct(naive.GoodputShare)))
		}
		if lb.DeadShare > naive.DeadShare {
			miss = append(miss, fmt.Sprintf("dead work %s > naive's %s", pct(lb.DeadShare), pct(naive.DeadShare)))
		}
	}
	for _, p := range []Phase{lb.Phases[0], lb.Phases[2]} {
		if p.FalseThrottleSeconds > 0 {
			m := fmt.Sprintf("%d false-throttle seconds %s", p.FalseThrottleSeconds, phaseWords(p.Name))
			if p.MachineSeconds > 0 {
				m += fmt.Sprintf(" (%d with the consumer held back by the machine, work waiting)", p.MachineSeconds)
			}
			miss = append(miss, m)
		}
	}
	for _, p := range []Phase{lb.Phases[0], lb.Phases[2]} {
		if p.Spare && p.AdmittedShare < t.MinAdmitted {
			miss = append(miss, fmt.Sprintf("admitted %s of the offer %s", pct(p.AdmittedShare), phaseWords(p.Name)))
		}
	}
	if !lb.Row.Consumer.reports() && lb.Bound > 0 && lb.Excess > t.MaxExcessRatio*lb.Bound {
		miss = append(miss, fmt.Sprintf("excess after the drop %s > %.1fx the bound %s", num(math.Round(lb.Excess)), t.MaxExcessRatio, num(math.Round(lb.Bound))))
	}
	if tellsPosition(lb.Row.Consumer) {
		if !(lb.GoodputShare >= t.MinGoodputShare) {
			miss = append(miss, fmt.Sprintf("goodput %s < %s", pct(lb.GoodputShare), pct(t.MinGoodputShare)))
		}
		if !(lb.DeadShare <= t.MaxDeadShare) {
			miss = append(miss, fmt.Sprintf("dead work %s > %s", pct(lb.DeadShare), pct(t.MaxDeadShare)))
		}
		if lb.TrueHeadAgeP99 == Never || lb.TrueHeadAgeP99 > t.MaxHeadAgeP99 {
			miss = append(miss, fmt.Sprintf("true head age p99 %s > %s", dur(lb.TrueHeadAgeP99), dur(t.MaxHeadAgeP99)))
		}
	}
	return miss
}

// Stall says how the machine stalled r's run, in words, or "" when the
// run kept its schedule: the load generator sent a message more than the
// row's observation interval after its schedule said, or the daemon's
// observations came more than two intervals apart (a cycle missed), or
// the consumer let a message go more than the deadline after a consumer
// at its capacity with the same work waiting would have. The first two
// delay what lagbridge sees and does by more than the targets allow for
// (the excess bound counts one commit and one observation interval); the
// third is a queue the machine made that the consumer's capacity would
// not have, and a consumer the machine starved reads as one with spare
// capacity in the false-throttle seconds. Such a run says little about
// lagbridge. The consumer's lateness adds up every small delay while work
// waits (0.01-0.32 s in runs at a load average of 3-7 on 2 cores, and
// 1.27 s once in a naive run at 10x), hence the deadline rather than the
// interval; it is measured for the NATS consumers only (0 for the Kafka
// ones). It is a pure function.
//
// The interval is the run's own (Result.Interval): a naive run observed
// every second and shared with a 250 ms row is judged at 1 s.
//
// Example: a 250 ms row whose generator sent 1.5 s late once, and whose
// daemon observed 0.25 s apart: "generator 1.50s late at 8.10s".
func Stall(r Result) string {
	sc, iv := r.Schedule, r.Interval
	if iv == 0 {
		iv = r.Row.Interval
	}
	var out []string
	if sc.Behind > iv {
		out = append(out, fmt.Sprintf("generator %s late at %s", dur(sc.Behind), dur(sc.BehindAt)))
	}
	if sc.Consumer > r.Scenario.Deadline {
		out = append(out, fmt.Sprintf("consumer %s behind its capacity at %s", dur(sc.Consumer), dur(sc.ConsumerAt)))
	}
	// No cycles: nothing observed the run (a series built by hand).
	if sc.Cycles > 0 && sc.Gap > 2*iv {
		out = append(out, fmt.Sprintf("observations %s apart at %s", dur(sc.Gap), dur(sc.GapAt)))
	}
	return strings.Join(out, ", ")
}

// phaseWords names a phase in a miss: "before the drop", "after the
// restore" (+ commit + observation interval).
func phaseWords(name string) string {
	switch name {
	case "before":
		return "before the drop"
	case "after":
		return "after the restore"
	}
	return name
}

// falseSeconds is a run's false-throttle seconds per window, before / slow
// / blind / after, with the whole run's in parentheses.
func falseSeconds(r Result) string {
	return fmt.Sprintf("%d / %d / %d / %d (%d)", r.Phases[0].FalseThrottleSeconds, r.Phases[1].FalseThrottleSeconds,
		r.Blind.FalseThrottleSeconds, r.Phases[2].FalseThrottleSeconds, r.FalseThrottleSeconds)
}

// aboveRefused is the refusals with the rate in force above the offer,
// per window: before / slow / blind / after (whole run).
func aboveRefused(r Result) string {
	return fmt.Sprintf("%d / %d / %d / %d (%d)", r.Phases[0].RefusedAbove, r.Phases[1].RefusedAbove,
		r.Blind.RefusedAbove, r.Phases[2].RefusedAbove, r.RefusedAbove)
}

// aboveSeconds is the false-throttle seconds in which every refusal had
// the rate in force above the offer, per window.
func aboveSeconds(r Result) string {
	return fmt.Sprintf("%d / %d / %d / %d", r.Phases[0].AboveOnlySeconds, r.Phases[1].AboveOnlySeconds,
		r.Blind.AboveOnlySeconds, r.Phases[2].AboveOnlySeconds)
}

// machineSeconds is the false-throttle seconds the machine made (see
// MachineHeld), per window.
func machineSeconds(r Result) string {
	return fmt.Sprintf("%d / %d / %d / %d", r.Phases[0].MachineSeconds, r.Phases[1].MachineSeconds,
		r.Blind.MachineSeconds, r.Phases[2].MachineSeconds)
}

// shedReasons is what the SDK refused before sending, by reason
// (lagbridge_client_rejected_total's labels: rate, in_flight, throttled,
// stop, expired, ...), most first, ties by name: "none" when nothing.
// It tells the quota's refusals (rate, stop) from the SDK's own checks.
func shedReasons(shed map[string]int64) string {
	type kv struct {
		why string
		n   int64
	}
	var all []kv
	for why, n := range shed {
		if n > 0 {
			all = append(all, kv{why, n})
		}
	}
	if len(all) == 0 {
		return "none"
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.n != b.n {
			return int(b.n - a.n)
		}
		return strings.Compare(a.why, b.why)
	})
	parts := make([]string, len(all))
	for i, e := range all {
		parts[i] = fmt.Sprintf("%s %d", e.why, e.n)
	}
	return strings.Join(parts, ", ")
}

// pair is a row's naive and lagbridge results at one load.
type pair struct {
	row        Row
	load       float64
	naive, lbr *Result
	broker     string
}

// pairs groups results by row and load, in their order.
func pairs(results []Result) []*pair {
	var out []*pair
	for i := range results {
		r := &results[i]
		var cur *pair
		for _, p := range out {
			if p.row == r.Row && p.load == r.Load {
				cur = p
			}
		}
		if cur == nil {
			cur = &pair{row: r.Row, load: r.Load, broker: r.Broker}
			out = append(out, cur)
		}
		if r.Mode == ModeNaive {
			cur.naive = r
		} else {
			cur.lbr = r
		}
	}
	return out
}

// Misses returns, per row and load, what its lagbridge run misses (see
// Targets.Check); rows that meet every target are left out.
func Misses(scn Scenario, results []Result) map[string][]string {
	t := DefaultTargets(scn)
	out := map[string][]string{}
	for _, p := range pairs(results) {
		if p.lbr == nil {
			continue
		}
		if m := t.Check(*p.lbr, p.naive); len(m) > 0 {
			out[fmt.Sprintf("%s %sx", p.row.Name(), num(p.load))] = m
		}
	}
	return out
}

// Markdown renders the matrix: one summary line per row and load, naive
// and lagbridge side by side, with the targets each lagbridge run misses;
// then, per row, the detailed side-by-side table; then the definitions.
// It is a pure function.
func Markdown(scn Scenario, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Consumer capacity %s msg/s, %s msg/s from %s to %s, then %s msg/s again until %s%s; deadline %s; "+
		"producers %s; lagbridge side: SDK in Drop mode under the daemon (policy maxAge %s).\n\n",
		num(scn.Normal), num(scn.Slow), dur(scn.DropAt()), dur(scn.RecoverAt()), num(scn.Normal), dur(scn.Duration()),
		phaseNote(scn, rowsOf(results)), dur(scn.Deadline), mix(scn), dur(scn.Deadline))
	b.WriteString("| row | load | goodput, % of possible (naive / lagbridge) | dead work | true head age p99 (daemon's) | refused before / slow / blind / after (whole run) | false-throttle s before / slow / blind / after (whole run) | admitted before / after | excess after the drop / bound (ratio), its commit interval | lagbridge misses |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	t := DefaultTargets(scn)
	for _, p := range pairs(results) {
		name := p.row.Name()
		if p.row.Star {
			name += " *"
		}
		if p.broker == "kafka" || p.broker == "nats" {
			name += " (real)"
		}
		if p.naive == nil || p.lbr == nil {
			continue
		}
		n, l := p.naive, p.lbr
		ph := l.Phases
		adm := func(x Phase) string {
			if math.IsNaN(x.AdmittedShare) {
				return "-"
			}
			s := pct(x.AdmittedShare)
			if !x.Spare {
				s += " (no spare)"
			}
			return s
		}
		excess := "-"
		if !l.Row.Consumer.reports() {
			excess = fmt.Sprintf("%s / %s", num(math.Round(l.Excess)), num(math.Round(l.Bound)))
			if l.Bound > 0 {
				excess += fmt.Sprintf(" (%.2f)", l.Excess/l.Bound)
			}
			excess += ", " + commitWords(*l) + timerWords(*l)
		}
		misses := "meets every target"
		if m := t.Check(*l, n); len(m) > 0 {
			misses = strings.Join(m, "; ")
		}
		var stalls []string
		for _, x := range []*Result{n, l} {
			if s := Stall(*x); s != "" {
				stalls = append(stalls, x.Mode+": "+s)
			}
		}
		if len(stalls) > 0 {
			misses += " (the machine stalled the run, " + strings.Join(stalls, "; ") + ")"
		}
		fmt.Fprintf(&b, "| %s | %sx | %s / **%s** | %s / **%s** | %s (%s) / **%s** (%s) | %d / %d / %d / %d (%d) | %s | %s / %s | %s | %s |\n",
			name, num(p.load), pct(n.GoodputShare), pct(l.GoodputShare), pct(n.DeadShare), pct(l.DeadShare),
			dur(n.TrueHeadAgeP99), dur(n.HeadAgeP99), dur(l.TrueHeadAgeP99), dur(l.HeadAgeP99), ph[0].Refused, ph[1].Refused, l.Blind.Refused, ph[2].Refused, l.Refused, falseSeconds(*l),
			adm(ph[0]), adm(ph[2]), excess, misses)
	}
	b.WriteString("\nRows marked * are the ones to run on real Kafka and NATS as well. ")
	b.WriteString("Targets: never worse than naive (goodput, dead work); no false throttling before the drop and after the restore + one commit + one observation interval (0 false-throttle seconds there, and >= 99% admitted where the offer is below capacity; the slow phase and the blind window between the restore and the after phase are shown, not judged); rows that read commits only: excess after the drop <= 1.2x the bound; commit per poll, the guard, the hook, the workers, ack each: goodput >= 95%, dead work <= 1%, true head age p99 <= the deadline (the bench's own measure; the daemon's in parentheses). A run the machine stalled (its load generator late by more than the row's observation interval, the daemon's observations more than two intervals apart, or its consumer with work waiting more than the deadline behind its capacity) says so after the misses: run that cell again alone before reading it as lagbridge's.\n\n")
	for _, row := range rowsOf(results) {
		var cols []Result
		for _, r := range results {
			if r.Row == row {
				cols = append(cols, r)
			}
		}
		if len(cols) == 0 {
			continue
		}
		fmt.Fprintf(&b, "### %s: %s\n\n", row.Name(), brokerTitle(cols[0].Broker))
		detail(&b, scn, cols)
	}
	b.WriteString(definitions)
	return b.String()
}

// detail writes one row's side-by-side table: per load, naive and
// lagbridge.
func detail(b *strings.Builder, scn Scenario, cols []Result) {
	b.WriteString("| |")
	for _, r := range cols {
		fmt.Fprintf(b, " %sx %s |", num(r.Load), r.Mode)
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	row := func(name string, f func(Result) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, r := range cols {
			fmt.Fprintf(b, " %s |", f(r))
		}
		b.WriteString("\n")
	}
	row("offered, msg/s", func(r Result) string { return num(r.Offered) })
	row("**goodput**, msg/s", func(r Result) string { return "**" + num(r.Goodput) + "**" })
	row("**goodput, % of possible**", func(r Result) string { return "**" + pct(r.GoodputShare) + "**" })
	for k, name := range []string{"before the drop", "slow phase", "after the restore"} {
		row("goodput, msg/s / dead work / true head age p99 (daemon's), "+name, func(r Result) string {
			p := r.Phases[k]
			return fmt.Sprintf("%s / %s / %s (%s)", num(math.Round(p.Goodput)), pct(p.DeadShare), dur(p.TrueHeadAgeP99), dur(p.HeadAgeP99))
		})
	}
	row("**dead work**, % of processed", func(r Result) string { return fmt.Sprintf("**%s** (%d)", pct(r.DeadShare), r.Dead) })
	row("expired, skipped unprocessed", func(r Result) string { return fmt.Sprint(r.Skipped) })
	row("**true head age** p50 / **p99** / max", func(r Result) string {
		return fmt.Sprintf("%s / **%s** / %s", dur(r.TrueHeadAgeP50), dur(r.TrueHeadAgeP99), dur(r.TrueHeadAgeMax))
	})
	row("daemon's head age p50 / p99 / max", func(r Result) string {
		return fmt.Sprintf("%s / %s / %s", dur(r.HeadAgeP50), dur(r.HeadAgeP99), dur(r.HeadAgeMax))
	})
	row("age when processed, p99 / max", func(r Result) string { return dur(r.AgeP99) + " / " + dur(r.AgeMax) })
	row("refused by the SDK, before / slow / blind / after (whole run)", func(r Result) string {
		return fmt.Sprintf("%d / %d / %d / %d (%d)", r.Phases[0].Refused, r.Phases[1].Refused, r.Blind.Refused, r.Phases[2].Refused, r.Refused)
	})
	row("of which with the rate in force above the offer (the bucket's burst)", aboveRefused)
	row("false-throttle seconds, before / slow / blind / after (whole run)", falseSeconds)
	row("of which with only refusals above the offer", aboveSeconds)
	row("of which with the consumer held back by the machine, work waiting (NATS rows)", machineSeconds)
	row("admitted before the drop / after the restore, % of offered", func(r Result) string {
		return pct(r.Phases[0].AdmittedShare) + " / " + pct(r.Phases[2].AdmittedShare)
	})
	row("excess admitted after the drop / bound", func(r Result) string {
		return fmt.Sprintf("%s / %s: (%s - %s)/s x (%s + I %s)", num(math.Round(r.Excess)), num(math.Round(r.Bound)),
			num(math.Round(r.AdmittedBefore)), num(r.Scenario.Slow), commitWords(r), shortDur(r.Interval))
	})
	row("reaction (produced <= 1.1x capacity)", func(r Result) string { return dur(r.Reaction) })
	row("recovery (goodput >= 90%)", func(r Result) string { return dur(r.Recovery) })
	row("broker attempts / requested", func(r Result) string {
		return fmt.Sprintf("%.2f (%d retries)", r.Amplification, r.Totals.Retries)
	})
	row("requests lost at full handler queues / expired in them", func(r Result) string {
		return fmt.Sprintf("%d / %d", r.Totals.Overflow, r.Totals.Expired)
	})
	row("longest broker throttle (throttle_time_ms) / longest consumer idle with demand held", func(r Result) string {
		return dur(r.Totals.MaxThrottle) + " / " + dur(longestIdle(r.Series))
	})
	for c := range scn.Classes {
		cl := scn.Classes[c]
		row(fmt.Sprintf("%s (%s): stored / good, %% of offered", cl.Criticality, pctPlain(cl.Share)), func(r Result) string {
			if c >= len(r.Classes) {
				return "-"
			}
			x := r.Classes[c]
			return pct(ratio(float64(x.Acked), float64(x.Offered))) + " / " + pct(ratio(float64(x.Good), float64(x.Offered)))
		})
	}
	row("schedule: generator late at worst / daemon's longest gap between observations / consumer behind its capacity at worst", func(r Result) string {
		sc := r.Schedule
		return fmt.Sprintf("%s / %s / %s", dur(sc.Behind), dur(sc.Gap), dur(sc.Consumer))
	})
	row("left in the queue at the end (true head age / daemon's)", func(r Result) string {
		if r.EndLag < 0 {
			return "-"
		}
		return fmt.Sprintf("%d (%s / %s)", r.EndLag, dur(r.EndTrueHeadAge), dur(r.EndHeadAge))
	})
	b.WriteString("\n")
}

const definitions = `Definitions. *Possible* goodput is the integral over the run of min(offered, capacity): what a perfect system would process usefully. *Good*: processed within the deadline of its production; *dead work*: processed after it (it still cost the consumer its processing time); *skipped*: expired messages the ttl guard committed past without processing (they cost nothing but are not goodput). *True head age*: the bench's own measure at the end of every bin, from its records of what the broker acknowledged to the producers (partition and offset; a NATS stream's sequence) and what the consumers processed: the age of the oldest record stored and not yet processed or skipped (per partition, its lowest such offset; the record being processed counts), 0 when there is none; the head age target is judged on it. *Daemon's head age*: the daemon's observation of the age of the oldest unconsumed message, sampled every bin: what the controller acts on, an estimate (for a consumer hook, the first record of the poll in hand, up to a poll's work older than the record being processed). *Reaction*: from the drop until the rate the broker stores, over 500 ms, is at most 1.1x the reduced capacity and stays so for the next second. *Recovery*: from the restore until goodput over the last 500 ms is at least 90% of min(offered, restored capacity) and stays so for a second. *Broker attempts / requested*: produce attempts (first tries and retries) per message the application asked to send; below 1 when the SDK sheds before sending. *Stored / good*: per producer, messages the broker stored and messages processed within their deadline, as a share of what that producer offered. A time of "never" did not happen within the run.
`

func rowsOf(rs []Result) []Row {
	var out []Row
	for _, r := range rs {
		if !slices.Contains(out, r.Row) {
			out = append(out, r.Row)
		}
	}
	return out
}

// brokerTitle names a world's cluster (see startWorld) for the table.
func brokerTitle(b string) string {
	switch b {
	case "kfake":
		return "Kafka (embedded kfake)"
	case "kafka":
		return "Kafka (real cluster)"
	case "embedded-nats":
		return "NATS JetStream (embedded nats-server)"
	case "nats":
		return "NATS JetStream (real server)"
	}
	return b
}

func mix(scn Scenario) string {
	parts := make([]string, len(scn.Classes))
	for i, c := range scn.Classes {
		parts[i] = fmt.Sprintf("%s %s %s", c.Producer, c.Criticality, pctPlain(c.Share))
	}
	return strings.Join(parts, ", ")
}

// commitWords is the commit interval r's excess bound took and where it
// came from: "C 1.25s measured" (the longest gap between commits around
// the drop in the run, Result.CommitMeasured) or "C 5.00s set" (the
// row's setting).
func commitWords(r Result) string {
	how := "set"
	if r.CommitMeasured {
		how = "measured"
	}
	return fmt.Sprintf("C %s %s", dur(r.CommitGap), how)
}

// timerWords is where r's consumer committed and was started against
// the daemon's cycles (RunPhase), for the table; "" when neither is known.
// Where the commits fell is said only of a consumer that commits at most
// once a reading (its commit interval at least the row's): the phase of
// commits made more often (a commit per poll, acks every 50 ms) is spread
// over the interval, and their median says nothing (ack batch at 1 s read
// "commits 0.20s after a reading" for acks 70 ms apart).
func timerWords(r Result) string {
	var w string
	if r.Phase.CommitKnown && r.CommitGap >= r.Row.Interval {
		w += fmt.Sprintf(", commits %s after a reading", dur(r.Phase.Commit))
	}
	if r.Phase.StartSet {
		w += fmt.Sprintf(" (consumer started %s after one, --phase)", dur(r.Phase.Start))
	}
	return w
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return commas(int64(v))
	}
	if math.Abs(v) >= 100 {
		return commas(int64(math.Round(v)))
	}
	return fmt.Sprintf("%.1f", v)
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func pctPlain(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }

func dur(d time.Duration) string {
	if d == Never {
		return "never"
	}
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
