package quota

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSimulationReport prints the figures the README quotes. Run it with
//
//	go test -run TestSimulationReport -v ./quota
//
// Without -v it runs the same simulations (so the figures stay computable)
// and prints nothing. Every number comes from the deterministic simulator in
// sim_test.go; the same input gives the same table on every machine.
func TestSimulationReport(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nStep drop 2,000 -> 400 msg/s at t=20.5 s (mid-interval), recovery to 2,000 at t=80.5 s; MaxAge 2 s; 4 producers.\n")
	fmt.Fprintf(&b, "Intervals are counted from the drop (1 = first observation after it). Seconds are after the drop (recovery: after the recovery).\n\n")
	fmt.Fprintf(&b, "| interval | offered | capacity seen | rate cut | rate within 10%% of 400 | lag at cut | head age max | head age p99 | head age <= MaxAge from | bound | steady CV | steady head max | recovery >= 90%% |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, iv := range []time.Duration{time.Second, 250 * time.Millisecond, 100 * time.Millisecond} {
		for _, mult := range []float64{2, 5, 10} {
			_, f := runDrop(t, iv, mult*lowCap)
			under, bound := fmt.Sprintf("%.2f s", f.headUnder), fmt.Sprintf("%.2f s", f.bound)
			if f.headMax <= drainPolicy().MaxAge.Seconds() {
				under, bound = "never over", "-"
			}
			fmt.Fprintf(&b, "| %v | %.0f (%.0fx) | %d | %d | %d | %.0f | %.2f s | %.2f s | %s | %s | %.4f | %.2f s | %.2f s |\n",
				iv, f.offered, mult, f.capK, f.cutK, f.settleK, f.detectBacklog, f.headMax, f.headP99, under, bound, f.steadyCV, f.steadyHeadMax, f.recovery)
		}
	}
	fmt.Fprintf(&b, "\n'bound' is when the head age could be back under MaxAge at the earliest once the drop is detected: the\n"+
		"backlog at the cut has to be consumed at 400 msg/s (detection time + lag at cut / 400). No quota can do better.\n")

	// Commit cadence.
	fmt.Fprintf(&b, "\nThe same drop seen through commits: consumers committing every 250 ms and every 5 s (auto-commit default), 800 msg/s offered to 2,000 then 400.\n\n")
	fmt.Fprintf(&b, "| interval | commits | offered | admitted before the drop | after recovery | excess after the drop (bound) | slow-phase goodput | steady head max |\n|---|---|---|---|---|---|---|---|\n")
	for _, iv := range []time.Duration{time.Second, 250 * time.Millisecond} {
		for _, ci := range []time.Duration{250 * time.Millisecond, 5 * time.Second} {
			for _, mult := range []float64{2, 10} {
				_, f := runCadence(t, iv, ci, mult*lowCap)
				before, after := "-", "-"
				if mult*lowCap < highCap {
					before, after = fmt.Sprintf("%.1f%%", 100*f.spareBefore), fmt.Sprintf("%.1f%%", 100*f.spareAfter)
				}
				fmt.Fprintf(&b, "| %v | %v | %.0f (%.0fx) | %s | %s | %.0f (%.0f) | %.0f%% | %.2f s |\n",
					iv, ci, mult*lowCap, mult, before, after, f.excess, f.bound, 100*f.slowGoodput, f.steadyHeadMax)
			}
		}
	}
	fmt.Fprintf(&b, "\n'excess' is what was admitted after the drop beyond the consumer's 400 msg/s until the allowed rate was first within 10%% of it;\n"+
		"'bound' is what an observer of commits cannot avoid: (rate before the drop - 400) x (commit interval + observation interval).\n")

	// Strict priority.
	p := drainPolicy()
	p.Producers = []ProducerSpec{{ID: "critical-plus", Criticality: CriticalPlus}, {ID: "sheddable-a", Criticality: Sheddable, Weight: 3}, {ID: "sheddable-b", Criticality: Sheddable}}
	ps := []*simProducer{
		{id: "critical-plus", offer: constant(200)},
		{id: "critical", offer: constant(400)},
		{id: "sheddable-plus", crit: SheddablePlus, offer: constant(300)},
		{id: "sheddable-a", offer: constant(300)},
		{id: "sheddable-b", offer: constant(300)},
	}
	runSim(t, simConfig{duration: 60 * time.Second, capacity: constant(1000), policy: p, producers: ps, window: [2]float64{30, 60}})
	fmt.Fprintf(&b, "\nStrict priority: 1,500 msg/s offered to a 1,000 msg/s consumer, steady state (t = 30..60 s).\n\n")
	fmt.Fprintf(&b, "| producer | criticality | weight | offered | admitted | share of offer |\n|---|---|---|---|---|---|\n")
	for _, sp := range ps {
		crit, w := sp.crit, 1.0
		if s, ok := p.Producer(sp.id); ok {
			crit, w = s.Criticality, s.EffectiveWeight()
		}
		fmt.Fprintf(&b, "| %s | %v | %.0f | %.0f/s | %.0f/s | %.1f%% |\n", sp.id, crit, w, sp.winOffered/30, sp.winAdmitted/30, 100*sp.winAdmitted/sp.winOffered)
	}

	// Other scenarios, one line each.
	fmt.Fprintf(&b, "\nOther scenarios (1 s interval, MaxAge 2 s):\n\n")
	{
		res := runSim(t, simConfig{duration: 90 * time.Second, capacity: constant(lowCap), noise: 0.05, seed: 42, policy: drainPolicy(), producers: producersOffering(4, 4000)})
		var rates, cons []float64
		for _, s := range res.between(30, 90) {
			rates = append(rates, s.dec.Rate)
			cons = append(cons, s.consumeInst)
		}
		hm, hp := res.headStats(30, 90)
		fmt.Fprintf(&b, "- steady 10x overload, consumer 400 msg/s ±5%% per second, one minute: allowed-rate CV %.4f (consume-rate CV %.4f), head age max %.2f s, p99 %.2f s\n", cv(rates), cv(cons), hm, hp)
	}
	{
		res := runSim(t, simConfig{duration: 50 * time.Second, capacity: step(30.5, lowCap, highCap), policy: drainPolicy(), producers: producersOffering(4, 4000)})
		rec := res.sustained(30.5, 50, func(s simStep) bool { return s.dec.Rate >= 0.9*highCap })
		fmt.Fprintf(&b, "- recovery 400 -> 2,000 msg/s under 4,000 offered: allowed rate >= 1,800 msg/s (and staying there) %.2f s after the recovery\n", rec)
	}
	{
		res := runSim(t, simConfig{duration: 90 * time.Second, capacity: slowRamp, policy: drainPolicy(), producers: producersOffering(4, 2000)})
		hm, hp := res.headStats(0, 90)
		fmt.Fprintf(&b, "- slow ramp 2,000 -> 400 msg/s over 60 s, 2,000 offered: head age max %.2f s, p99 %.2f s\n", hm, hp)
	}
	{
		bs := make([]*simProducer, 4)
		for i := range bs {
			bs[i] = &simProducer{id: fmt.Sprintf("b%d", i), offer: burstyOffer(uint64(i+1), 1000)}
		}
		res := runSim(t, simConfig{duration: 120 * time.Second, capacity: constant(2500), policy: drainPolicy(), producers: bs})
		var off, adm float64
		for _, p := range bs {
			off += p.offered
			adm += p.admitted
		}
		hm, hp := res.headStats(0, 120)
		fmt.Fprintf(&b, "- bursty on/off producers (mean 2,000, peaks 4,000) on a 2,500 msg/s consumer: goodput %.1f%% of the offer, head age max %.2f s, p99 %.2f s\n", 100*adm/off, hm, hp)
	}
	if testing.Verbose() {
		fmt.Fprint(os.Stdout, b.String())
	}
}
