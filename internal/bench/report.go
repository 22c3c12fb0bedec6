package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Targets are issue 7's done-when figures for the lagbridge runs.
type Targets struct {
	// MinGoodputShare of the best possible goodput (0.95).
	MinGoodputShare float64
	// MaxDeadShare of processing spent on dead work (0.01).
	MaxDeadShare float64
	// MaxHeadAgeP99 is the deadline (2s).
	MaxHeadAgeP99 time.Duration
	// MaxReaction (2s) and MaxRecovery (5s).
	MaxReaction, MaxRecovery time.Duration
}

// DefaultTargets returns issue 7's targets for a scenario.
func DefaultTargets(scn Scenario) Targets {
	return Targets{MinGoodputShare: 0.95, MaxDeadShare: 0.01, MaxHeadAgeP99: scn.Deadline,
		MaxReaction: 2 * time.Second, MaxRecovery: 5 * time.Second}
}

// Check lists the targets r misses, in words; empty when it meets all.
func (t Targets) Check(r Result) []string {
	var miss []string
	if !(r.GoodputShare >= t.MinGoodputShare) {
		miss = append(miss, fmt.Sprintf("goodput %s < %s", pct(r.GoodputShare), pct(t.MinGoodputShare)))
	}
	if !(r.DeadShare <= t.MaxDeadShare) {
		miss = append(miss, fmt.Sprintf("dead work %s > %s", pct(r.DeadShare), pct(t.MaxDeadShare)))
	}
	if r.HeadAgeP99 == Never || r.HeadAgeP99 > t.MaxHeadAgeP99 {
		miss = append(miss, fmt.Sprintf("head age p99 %s > %s", dur(r.HeadAgeP99), dur(t.MaxHeadAgeP99)))
	}
	if r.Reaction == Never || r.Reaction > t.MaxReaction {
		miss = append(miss, fmt.Sprintf("reaction %s > %s", dur(r.Reaction), dur(t.MaxReaction)))
	}
	if r.Recovery == Never || r.Recovery > t.MaxRecovery {
		miss = append(miss, fmt.Sprintf("recovery %s > %s", dur(r.Recovery), dur(t.MaxRecovery)))
	}
	return miss
}

// Markdown renders the results side by side: per broker one table whose
// columns are, per load, the naive run and the lagbridge run. Then the
// targets and the definitions. It is a pure function.
func Markdown(scn Scenario, interval time.Duration, guard bool, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Consumer capacity %s msg/s, %s msg/s from %s to %s, then %s msg/s again until %s; deadline %s; "+
		"producers %s; daemon observation interval %s; lagbridge side: SDK in Drop mode%s.\n\n",
		num(scn.Normal), num(scn.Slow), dur(scn.DropAt()), dur(scn.RecoverAt()), num(scn.Normal), dur(scn.Duration()), dur(scn.Deadline),
		mix(scn), dur(interval), map[bool]string{true: ", consumers behind the ttl guard", false: ", consumers without the ttl guard"}[guard])
	for _, broker := range brokersOf(results) {
		var cols []Result
		for _, r := range results {
			if r.Broker == broker {
				cols = append(cols, r)
			}
		}
		fmt.Fprintf(&b, "### %s\n\n", brokerTitle(broker))
		b.WriteString("| |")
		for _, r := range cols {
			fmt.Fprintf(&b, " %sx %s |", num(r.Load), r.Mode)
		}
		b.WriteString("\n|---|")
		for range cols {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		row := func(name string, f func(Result) string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, r := range cols {
				fmt.Fprintf(&b, " %s |", f(r))
			}
			b.WriteString("\n")
		}
		row("offered, msg/s", func(r Result) string { return num(r.Offered) })
		row("**goodput**, msg/s", func(r Result) string { return "**" + num(r.Goodput) + "**" })
		row("**goodput, % of possible**", func(r Result) string { return "**" + pct(r.GoodputShare) + "**" })
		row("goodput in the slow phase, % of possible", func(r Result) string { return pct(r.SlowGoodputShare) })
		row("**dead work**, % of processed", func(r Result) string { return fmt.Sprintf("**%s** (%d)", pct(r.DeadShare), r.Dead) })
		row("expired, skipped unprocessed", func(r Result) string { return fmt.Sprint(r.Skipped) })
		row("**head age** p50 / **p99** / max", func(r Result) string {
			return fmt.Sprintf("%s / **%s** / %s", dur(r.HeadAgeP50), dur(r.HeadAgeP99), dur(r.HeadAgeMax))
		})
		row("age when processed, p99 / max", func(r Result) string { return dur(r.AgeP99) + " / " + dur(r.AgeMax) })
		row("**reaction** (produced <= 1.1x capacity)", func(r Result) string { return "**" + dur(r.Reaction) + "**" })
		row("**recovery** (goodput >= 90%)", func(r Result) string { return "**" + dur(r.Recovery) + "**" })
		row("recovery (produced >= 90%)", func(r Result) string { return dur(r.RecoveryAdmitted) })
		row("broker attempts / requested", func(r Result) string {
			return fmt.Sprintf("%.2f (%d retries)", r.Amplification, r.Totals.Retries)
		})
		row("shed by the SDK before sending", func(r Result) string {
			var n int64
			for _, v := range r.Totals.Shed {
				n += v
			}
			return fmt.Sprint(n)
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
		row("left in the queue at the end (head age)", func(r Result) string {
			if r.EndLag < 0 {
				return "-"
			}
			return fmt.Sprintf("%d (%s)", r.EndLag, dur(r.EndHeadAge))
		})
		b.WriteString("\n")
		t := DefaultTargets(scn)
		for _, r := range cols {
			if r.Mode != ModeLagbridge {
				continue
			}
			if miss := t.Check(r); len(miss) > 0 {
				fmt.Fprintf(&b, "- %sx lagbridge: misses %s.\n", num(r.Load), strings.Join(miss, "; "))
			} else {
				fmt.Fprintf(&b, "- %sx lagbridge: meets every target (goodput >= 95%%, dead work <= 1%%, head age p99 <= %s, reaction <= 2s, recovery <= 5s).\n", num(r.Load), dur(scn.Deadline))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString(definitions)
	return b.String()
}

const definitions = `Definitions. *Possible* goodput is the integral over the run of min(offered, capacity): what a perfect system would process usefully. *Good*: processed within the deadline of its production; *dead work*: processed after it (it still cost the consumer its processing time); *skipped*: expired messages the ttl guard committed past without processing (they cost nothing but are not goodput). *Head age*: the daemon's observation of the age of the oldest unconsumed message, sampled every bin. *Reaction*: from the drop until the rate the broker stores, over 500 ms, is at most 1.1x the reduced capacity and stays so for the next second. *Recovery*: from the restore until goodput over the last 500 ms is at least 90% of min(offered, restored capacity) and stays so for a second. *Broker attempts / requested*: produce attempts (first tries and retries) per message the application asked to send; below 1 when the SDK sheds before sending. *Stored / good*: per producer, messages the broker stored and messages processed within their deadline, as a share of what that producer offered. A time of "never" did not happen within the run.
`

func brokersOf(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if !slices.Contains(out, r.Broker) {
			out = append(out, r.Broker)
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
