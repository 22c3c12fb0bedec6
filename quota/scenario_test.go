package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The step drop of the mission: a consumer serving 2,000 msg/s drops to 400
// msg/s (mid-interval, the unfavourable case: the first observation after
// the drop sees only half of it), stays there for a minute, and recovers to
// 2,000. MaxAge is 2 s. The producers offer a multiple of 400 throughout.
const (
	dropAt    = 20.5
	recoverAt = 80.5
	dropEnd   = 100.0
	highCap   = 2000.0
	lowCap    = 400.0
)

func dropCapacity(t float64) float64 { return capacityDropped(dropAt, recoverAt)(t) }

// capacityDropped is the capacity of a consumer serving highCap msg/s
// that drops to lowCap from drop to restore (seconds).
func capacityDropped(drop, restore float64) func(t float64) float64 {
	return func(t float64) float64 {
		if t >= drop && t < restore {
			return lowCap
		}
		return highCap
	}
}

type dropFigures struct {
	interval time.Duration
	offered  float64
	// Intervals after the drop (1 = the first observation after it).
	capK    int // Decision.Capacity within 10% of 400
	cutK    int // allowed rate <= 1.1 x the new capacity (400)
	settleK int // allowed rate within 10% of 400 from here until the recovery
	// Seconds after the drop.
	detect        float64 // the observation that cut the rate
	detectBacklog float64 // lag at that observation, messages
	headUnder     float64 // true head age <= MaxAge from here until the recovery
	bound         float64 // detect + detectBacklog/400: no controller can do better once it detects at detect
	headMax       float64 // true head age over the overload phase, seconds
	headP99       float64
	steadyCV      float64 // CV of the allowed rate over the last 30 s of overload
	steadyHeadMax float64 // true head age max over the last 30 s of overload
	// Seconds after the recovery.
	recovery float64 // allowed rate >= 90% of 2,000 (or unlimited) from here on
	stops    int     // stop signals (there must be none: retrying helps here)
}

func runDrop(tb testing.TB, interval time.Duration, offered float64) (*simResult, dropFigures) {
	tb.Helper()
	res := runSim(tb, simConfig{
		interval:  interval,
		duration:  time.Duration(dropEnd * float64(time.Second)),
		capacity:  dropCapacity,
		policy:    drainPolicy(),
		producers: producersOffering(4, offered),
	})
	f := dropFigures{interval: interval, offered: offered, capK: -1, cutK: -1, settleK: -1, recovery: -1}
	over := res.between(dropAt, recoverAt)
	for k, s := range over {
		if f.capK < 0 && math.Abs(s.dec.Capacity-lowCap) <= 0.1*lowCap {
			f.capK = k + 1
		}
		if f.cutK < 0 && s.dec.Rate <= 1.1*lowCap {
			f.cutK = k + 1
			f.detect = s.t - dropAt
			f.detectBacklog = float64(s.dec.Lag)
		}
		if math.Abs(s.dec.Rate-lowCap) > 0.1*lowCap {
			f.settleK = -1
		} else if f.settleK < 0 {
			f.settleK = k + 1
		}
		if s.dec.Signal == SignalStop {
			f.stops++
		}
	}
	f.bound = f.detect + f.detectBacklog/lowCap
	if u := res.headUnderFrom(dropAt, recoverAt, drainPolicy().MaxAge.Seconds()); u >= 0 {
		f.headUnder = u - dropAt
	} else {
		f.headUnder = -1
	}
	f.headMax, f.headP99 = res.headStats(dropAt, recoverAt)
	var rates []float64
	for _, s := range res.between(recoverAt-30, recoverAt) {
		rates = append(rates, s.dec.Rate)
	}
	f.steadyCV = cv(rates)
	f.steadyHeadMax, _ = res.headStats(recoverAt-30, recoverAt)
	f.recovery = res.sustained(recoverAt, dropEnd, func(s simStep) bool { return s.dec.Rate >= 0.9*highCap })
	return res, f
}

func (f dropFigures) String() string {
	return fmt.Sprintf("interval %v offered %.0f (%.0fx): capacity seen at interval %d, rate cut at %d (t+%.2fs, lag %.0f), "+
		"within 10%% of 400 from interval %d; head age max %.2fs p99 %.2fs, <= maxAge from t+%.2fs (bound t+%.2fs); "+
		"steady CV %.4f head max %.2fs; recovery to >= 1800/s in %.2fs",
		f.interval, f.offered, f.offered/lowCap, f.capK, f.cutK, f.detect, f.detectBacklog, f.settleK,
		f.headMax, f.headP99, f.headUnder, f.bound, f.steadyCV, f.steadyHeadMax, f.recovery)
}

// TestSimStepDrop is issue 3's done-when for the controller, at the default
// 1 s interval, for producers offering 2x, 5x and 10x the new capacity.
//
// What is asserted, and why that and not more: the quota reacts within two
// intervals (the capacity estimate is within 10% of 400 and the allowed rate
// is at most 10% above what the consumer does); the head age is back under
// MaxAge no later than two intervals after the physical bound (the backlog
// already admitted when the drop was detected has to be consumed at 400/s:
// nothing a quota does can make it younger); in the minute of steady
// overload the allowed rate is within 10% of 400 and does not oscillate
// (CV < 2%) and the head age stays under MaxAge; after the recovery the
// allowed rate is back to 90% of 2,000 within 5 s. The exact figures are
// logged.
func TestSimStepDrop(t *testing.T) {
	for _, mult := range []float64{2, 5, 10} {
		t.Run(fmt.Sprintf("%.0fx", mult), func(t *testing.T) {
			_, f := runDrop(t, time.Second, mult*lowCap)
			t.Log(f)
			if f.capK < 1 || f.capK > 2 {
				t.Errorf("capacity estimate within 10%% of 400 at interval %d, want <= 2", f.capK)
			}
			if f.cutK < 1 || f.cutK > 2 {
				t.Errorf("allowed rate cut to <= 110%% of 400 at interval %d, want <= 2", f.cutK)
			}
			if f.headUnder < 0 || f.headUnder > f.bound+2 {
				t.Errorf("head age under maxAge from t+%.2fs, want <= bound t+%.2fs + 2 intervals", f.headUnder, f.bound)
			}
			if f.settleK < 0 || f.settleK > 40 {
				t.Errorf("allowed rate within 10%% of 400 only from interval %d", f.settleK)
			}
			if f.steadyCV > 0.02 {
				t.Errorf("allowed rate CV %.4f over steady overload, want < 0.02", f.steadyCV)
			}
			if f.steadyHeadMax > 2 {
				t.Errorf("head age max %.2fs in steady overload, want <= maxAge 2s", f.steadyHeadMax)
			}
			if f.recovery < 0 || f.recovery > 5 {
				t.Errorf("recovery to 90%% of 2000 took %.2fs, want <= 5s", f.recovery)
			}
			if f.stops > 0 {
				t.Errorf("%d stop signals without a hard age", f.stops)
			}
		})
	}
}

// TestSimSlowRamp: the consumer slows from 2,000 to 400 msg/s over a minute
// while the producers keep offering 2,000. A ramp is what the smoothing and
// the backlog term must follow without a step to react to: the head age
// must never pass MaxAge, retrying always helps (no stop), and at the end
// the allowed rate sits within 10% of the consume rate.
func TestSimSlowRamp(t *testing.T) {
	res := runSim(t, simConfig{duration: 90 * time.Second, capacity: slowRamp, policy: drainPolicy(), producers: producersOffering(4, 2000)})
	headMax, p99 := res.headStats(0, 90)
	t.Logf("slow ramp 2000 -> 400 over 60s, offered 2000: head age max %.2fs p99 %.2fs", headMax, p99)
	if headMax > 2 {
		t.Errorf("head age reached %.2fs, want <= maxAge 2s", headMax)
	}
	for _, s := range res.steps {
		if s.dec.Signal == SignalStop {
			t.Fatalf("t=%.0f: stop signal on a ramp", s.t)
		}
	}
	for _, s := range res.between(75, 90) {
		if math.Abs(s.dec.Rate-lowCap) > 0.1*lowCap {
			t.Errorf("t=%.0f: rate %.1f not within 10%% of 400", s.t, s.dec.Rate)
		}
	}
}

// TestSimRecoveryFromOverload: a consumer at 400 msg/s under 10x overload
// (the quota at 400, the queue at its setpoint) gets its 2,000 back. The
// quota must not stay stuck (Pulsar's flaw): the allowed rate is at 90% of
// 2,000 within 5 s and stays there.
func TestSimRecoveryFromOverload(t *testing.T) {
	res := runSim(t, simConfig{duration: 50 * time.Second, capacity: step(30.5, lowCap, highCap), policy: drainPolicy(), producers: producersOffering(4, 4000)})
	rec := res.sustained(30.5, 50, func(s simStep) bool { return s.dec.Rate >= 0.9*highCap })
	var admitted float64
	for _, s := range res.between(40, 50) {
		admitted += s.produceInst / 10
	}
	t.Logf("recovery 400 -> 2000 under 4000 offered: allowed rate >= 1800/s from t+%.2fs; produce rate over the last 10 s %.0f/s", rec, admitted)
	if rec < 0 || rec > 5 {
		t.Errorf("recovery took %.2fs, want <= 5s", rec)
	}
	if admitted < 0.9*highCap {
		t.Errorf("goodput %.0f/s after recovery, want >= 1800", admitted)
	}
}

// TestSimNoOscillation: a minute of steady 10x overload with a consumer
// whose speed varies ±5% from one second to the next. The allowed rate
// follows the capacity without a limit cycle: its coefficient of variation
// stays close to that of the noise itself, and the head age stays under
// MaxAge.
func TestSimNoOscillation(t *testing.T) {
	res := runSim(t, simConfig{duration: 90 * time.Second, capacity: constant(lowCap), noise: 0.05, seed: 42, policy: drainPolicy(), producers: producersOffering(4, 4000)})
	var rates, caps []float64
	for _, s := range res.between(30, 90) {
		rates = append(rates, s.dec.Rate)
		caps = append(caps, s.consumeInst)
	}
	headMax, p99 := res.headStats(30, 90)
	t.Logf("steady overload 4000 on 400±5%%: allowed rate CV %.4f (consume rate CV %.4f), head age max %.2fs p99 %.2fs", cv(rates), cv(caps), headMax, p99)
	if c := cv(rates); c > 0.05 {
		t.Errorf("allowed rate CV %.4f, want < 0.05", c)
	}
	if headMax > 2 {
		t.Errorf("head age %.2fs, want <= 2s", headMax)
	}
	// No limit cycle: the rate changes direction no more often than noise
	// would make it, and never swings by more than 20%.
	for i := 1; i < len(rates); i++ {
		if math.Abs(rates[i]-rates[i-1]) > 0.2*lowCap {
			t.Errorf("rate swings from %.0f to %.0f", rates[i-1], rates[i])
		}
	}
}

// TestSimStoppedConsumer: the consumer disappears (capacity 0, no members)
// and comes back 40 s later. The rate falls to the floor within two
// intervals (slow-down: nothing is consumed), the signal turns to stop once
// lag declares the consumer stopped, the floor keeps flowing (MinRate 20),
// and after the restart the quota opens again by itself.
func TestSimStoppedConsumer(t *testing.T) {
	down := func(t float64) bool { return t >= 20.5 && t < 60.5 }
	p := drainPolicy()
	p.MinRate = 20
	res := runSim(t, simConfig{
		duration: 90 * time.Second,
		capacity: func(t float64) float64 {
			if down(t) {
				return 0
			}
			return highCap
		},
		members: func(t float64) int {
			if down(t) {
				return 0
			}
			return 1
		},
		policy:    p,
		producers: producersOffering(2, 1000),
	})
	floorAt, stopAt := -1.0, -1.0
	for _, s := range res.between(20.5, 60.5) {
		if floorAt < 0 && s.dec.Rate <= p.MinRate {
			floorAt = s.t - 20.5
		}
		if stopAt < 0 && s.dec.Signal == SignalStop {
			stopAt = s.t - 20.5
		}
	}
	var floorFlow float64
	for _, s := range res.between(30, 60) {
		floorFlow += s.produceInst / 30
	}
	open := res.sustained(60.5, 90, func(s simStep) bool { return s.dec.IsUnlimited() && s.dec.Signal == SignalOK })
	t.Logf("stopped consumer: rate at the floor after %.1fs, stop after %.1fs, produce rate while stopped %.1f/s (floor %v), unlimited again %.1fs after restart", floorAt, stopAt, floorFlow, p.MinRate, open)
	if floorAt < 0 || floorAt > 2 {
		t.Errorf("rate at the floor after %.1fs, want within 2 intervals", floorAt)
	}
	if stopAt < 0 || stopAt > 5+3 {
		t.Errorf("stop signal after %.1fs, want once lag says stopped (StallAfter 5s + a few intervals)", stopAt)
	}
	if math.Abs(floorFlow-p.MinRate) > 2 {
		t.Errorf("produce rate while stopped %.1f, want the floor %v", floorFlow, p.MinRate)
	}
	if open < 0 || open > 10 {
		t.Errorf("quota open again %.1fs after the restart, want <= 10s", open)
	}
}

// TestSimHardAgeStop: with HardAge 4 s, the 10x drop makes a new message's
// predicted wait pass the hard age: retrying cannot help, the signal is
// stop, in one unbroken stretch; it returns to slow-down once the backlog
// is drained under it.
func TestSimHardAgeStop(t *testing.T) {
	p := drainPolicy()
	p.HardAge = 4 * time.Second
	res := runSim(t, simConfig{duration: 60 * time.Second, capacity: step(20.5, highCap, lowCap), policy: p, producers: producersOffering(4, 4000)})
	var stops []float64
	for _, s := range res.steps {
		if s.dec.Signal == SignalStop {
			stops = append(stops, s.t)
			if s.dec.Wait < 2*time.Second && s.dec.HeadAge < 4*time.Second {
				t.Errorf("t=%.0f: stop with wait %v and head age %v under the hard age", s.t, s.dec.Wait, s.dec.HeadAge)
			}
		}
	}
	t.Logf("hard age 4s: stop at t=%v", stops)
	if len(stops) == 0 || stops[0] > 22.5 {
		t.Fatalf("stop signals at %v, want one within two intervals of the drop at 20.5", stops)
	}
	for i := 1; i < len(stops); i++ {
		if stops[i] != stops[i-1]+1 {
			t.Errorf("stop signals at %v: the signal flapped", stops)
			break
		}
	}
	if last := res.steps[len(res.steps)-1].dec.Signal; last != SignalSlowDown {
		t.Errorf("final signal %v, want slow-down (steady overload, under the hard age)", last)
	}
}

// burstyOffer returns an offer that, every 0.5 s, is either 0 or peak, drawn
// from a seeded source: mean peak/2.
func burstyOffer(seed uint64, peak float64) func(float64) float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	slots := make([]float64, 1000)
	for i := range slots {
		if r.IntN(2) == 1 {
			slots[i] = peak
		}
	}
	return func(t float64) float64 { return slots[int(t*2)%len(slots)] }
}

// TestSimBursty: four on/off producers (each 0 or 1,000 msg/s every half
// second: mean 2,000, peaks 4,000) against a 2,500 msg/s consumer. The
// consumer has room on average, so the quota must neither choke the bursts
// (goodput >= 95% of the offer) nor let the queue pass MaxAge (p99).
func TestSimBursty(t *testing.T) {
	ps := make([]*simProducer, 4)
	for i := range ps {
		ps[i] = &simProducer{id: fmt.Sprintf("b%d", i), offer: burstyOffer(uint64(i+1), 1000)}
	}
	res := runSim(t, simConfig{duration: 120 * time.Second, capacity: constant(2500), policy: drainPolicy(), producers: ps})
	var off, adm float64
	for _, p := range ps {
		off += p.offered
		adm += p.admitted
	}
	headMax, p99 := res.headStats(0, 120)
	stops := 0
	for _, s := range res.steps {
		if s.dec.Signal == SignalStop {
			stops++
		}
	}
	t.Logf("bursty: goodput %.1f%% of the offer, head age max %.2fs p99 %.2fs", 100*adm/off, headMax, p99)
	if adm < 0.95*off {
		t.Errorf("admitted %.0f of %.0f offered, want >= 95%%", adm, off)
	}
	if p99 > 2 {
		t.Errorf("head age p99 %.2fs, want <= 2s", p99)
	}
	if stops > 0 {
		t.Errorf("%d stop signals", stops)
	}
}

// TestSimJoinLeave: 100 producers of 30 msg/s each join at random times in
// the first 30 s and leave at random times between 40 and 80 s, against a
// 1,500 msg/s consumer (peak offer 3,000). Every allocation keeps the
// invariant (checked inside runSim), every step has exactly one lease per
// producer that reported within the TTL, producers that left lose their
// lease after the TTL, versions only grow, and the queue stays within
// MaxAge once the controller has engaged.
func TestSimJoinLeave(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	ps := make([]*simProducer, 100)
	for i := range ps {
		ps[i] = &simProducer{id: fmt.Sprintf("j%03d", i), offer: constant(30), from: math.Round(r.Float64() * 30), to: 40 + math.Round(r.Float64()*40)}
	}
	res := runSim(t, simConfig{duration: 100 * time.Second, capacity: constant(1500), policy: drainPolicy(), producers: ps})
	ttl := 10.0 // the default lease lifetime at 1 s intervals
	versions := map[string]uint64{}
	for _, s := range res.steps {
		want := 0
		for _, p := range ps {
			// A producer's last report is at the last whole second before
			// it left; it counts until TTL after that.
			if s.t >= p.from && s.t-math.Ceil(p.to-1) <= ttl {
				want++
			}
		}
		if len(s.leases) != want {
			t.Fatalf("t=%.0f: %d leases, want %d", s.t, len(s.leases), want)
		}
		for _, l := range s.leases {
			if l.Version < versions[l.Producer] {
				t.Fatalf("t=%.0f: %s version went back %d -> %d", s.t, l.Producer, versions[l.Producer], l.Version)
			}
			versions[l.Producer] = l.Version
		}
	}
	headMax, p99 := res.headStats(10, 100)
	t.Logf("join/leave: %d producers, head age max %.2fs p99 %.2fs after 10 s", len(ps), headMax, p99)
	if headMax > 2 {
		t.Errorf("head age %.2fs, want <= 2s", headMax)
	}
}

// TestSimStrictPriority: 1,500 msg/s offered against 1,000 of capacity.
// CRITICAL_PLUS and CRITICAL are served in full (every class is the one the
// policy lists: an unlisted producer's declared class counts for nothing),
// SHEDDABLE_PLUS next, and SHEDDABLE takes the cut, split 3:1 by weight;
// one SHEDDABLE producer does not report its demand (unknown: wants
// everything) and still gets only its weighted share of the remainder.
func TestSimStrictPriority(t *testing.T) {
	p := drainPolicy()
	p.Producers = []ProducerSpec{
		{ID: "cp", Criticality: CriticalPlus},
		{ID: "c1", Criticality: Critical},
		{ID: "c2", Criticality: Critical},
		{ID: "sp", Criticality: SheddablePlus},
		{ID: "s1", Criticality: Sheddable, Weight: 3},
		{ID: "s2", Criticality: Sheddable},
	}
	ps := []*simProducer{
		{id: "cp", crit: Critical, offer: constant(200)}, // the policy makes it CRITICAL_PLUS
		{id: "c1", offer: constant(200)},
		{id: "c2", offer: constant(200)},
		{id: "sp", crit: SheddablePlus, offer: constant(300)},
		{id: "s1", offer: constant(300)},
		{id: "s2", offer: constant(300), unknown: true},
	}
	res := runSim(t, simConfig{duration: 60 * time.Second, capacity: constant(1000), policy: p, producers: ps, window: [2]float64{30, 60}})
	share := map[string]float64{}
	for _, p := range ps {
		share[p.id] = p.winAdmitted / p.winOffered
		t.Logf("%s: admitted %.1f%% of its offer (%.0f/s)", p.id, 100*share[p.id], p.winAdmitted/30)
	}
	for _, id := range []string{"cp", "c1", "c2"} {
		if share[id] < 0.97 {
			t.Errorf("%s got %.1f%%, want >= 97%% (critical traffic is protected)", id, 100*share[id])
		}
	}
	if share["sp"] < 0.9 {
		t.Errorf("sp got %.1f%%, want >= 90%% (served before sheddable)", 100*share["sp"])
	}
	if share["s1"] > 0.3 || share["s2"] > 0.3 {
		t.Errorf("sheddable got %.1f%% and %.1f%%, want the cut", 100*share["s1"], 100*share["s2"])
	}
	if r := ps[4].winAdmitted / ps[5].winAdmitted; math.Abs(r-3) > 0.3 {
		t.Errorf("s1:s2 = %.2f, want 3 (weights 3:1)", r)
	}
	headMax, _ := res.headStats(10, 60)
	if headMax > 2 {
		t.Errorf("head age %.2fs, want <= 2s", headMax)
	}
}

// TestSimAvoidPartitions: eight partitions, one of them served by a slow
// consumer thread (100 msg/s for its 200 msg/s share) while the others have
// plenty of room. The aggregate is fine, so the signal is avoid-partitions
// with [3]; unkeyed producers that write around it keep its head age near
// MaxAge, where producers that ignore it let it grow without bound.
func TestSimAvoidPartitions(t *testing.T) {
	run := func(honor bool) (*simResult, float64) {
		ps := producersOffering(4, 1600)
		for _, p := range ps {
			p.honorAvoid = honor
		}
		res := runSim(t, simConfig{
			duration:   90 * time.Second,
			partitions: 8,
			capacity:   constant(4000),
			partCap: func(p int, _ float64) float64 {
				if p == 3 {
					return 100
				}
				return -1
			},
			policy:    drainPolicy(),
			producers: ps,
		})
		headMax, _ := res.headStats(30, 90)
		return res, headMax
	}
	res, honored := run(true)
	seen := false
	for _, s := range res.steps {
		if len(s.dec.AvoidPartitions) > 0 {
			seen = true
			if !slices.Equal(s.dec.AvoidPartitions, []int32{3}) || s.dec.Signal != SignalAvoidPartitions {
				t.Fatalf("t=%.0f: avoid %v signal %v, want [3] avoid-partitions", s.t, s.dec.AvoidPartitions, s.dec.Signal)
			}
		}
	}
	if !seen {
		t.Fatal("partition 3 was never listed")
	}
	_, ignored := run(false)
	t.Logf("avoid-partitions: head age max after 30 s %.2fs when producers write around [3], %.2fs when they do not", honored, ignored)
	if honored > 3.5 {
		t.Errorf("head age %.2fs with avoidance, want near maxAge", honored)
	}
	if ignored < 10 {
		t.Errorf("head age %.2fs without avoidance: the scenario does not stress partition 3", ignored)
	}
}

// TestSimStaleData: observation fails from t=30 to t=60. lag keeps the old
// state until it is stale (3 s), the controller holds its last decision
// (MaxHold 10 s), then fails open; when observation returns, the quota is
// back within one interval.
func TestSimStaleData(t *testing.T) {
	fails := func(t float64) bool { return t > 30 && t <= 60 }
	res := runSim(t, simConfig{
		duration:     80 * time.Second,
		capacity:     constant(lowCap),
		observeFails: fails,
		policy:       drainPolicy(),
		producers:    producersOffering(4, 2000),
		ctl:          ControllerConfig{MaxHold: 10 * time.Second},
	})
	var heldUntil, openFrom, backAt float64 = -1, -1, -1
	for _, s := range res.steps {
		switch {
		case s.t > 30 && s.t <= 60 && s.dec.Held && !s.dec.IsUnlimited():
			heldUntil = s.t
		case s.t > 30 && s.t <= 60 && s.dec.IsUnlimited() && openFrom < 0:
			openFrom = s.t
		case s.t > 60 && !s.dec.IsUnlimited() && backAt < 0:
			backAt = s.t
		}
	}
	t.Logf("stale: held until t=%.0f, open from t=%.0f, limited again at t=%.0f", heldUntil, openFrom, backAt)
	if heldUntil < 38 || heldUntil > 40 {
		t.Errorf("held until t=%.0f, want until the last fresh decision (t=30) + MaxHold 10s", heldUntil)
	}
	if openFrom < 40 || openFrom > 41 {
		t.Errorf("open from t=%.0f, want right after the hold", openFrom)
	}
	if backAt != 61 {
		t.Errorf("limited again at t=%.0f, want 61 (the first observation)", backAt)
	}
}

// TestSimAdvisory: the same 10x drop under an advise-only policy: the
// decisions and leases are computed and marked advisory, producers do not
// throttle, and the queue grows as it would without lagbridge.
func TestSimAdvisory(t *testing.T) {
	p := drainPolicy()
	p.Mode = ModeAdvise
	res := runSim(t, simConfig{duration: 40 * time.Second, capacity: step(20.5, highCap, lowCap), policy: p, producers: producersOffering(4, 4000)})
	last := res.steps[len(res.steps)-1]
	if !last.dec.Advisory || last.dec.IsUnlimited() || last.dec.Signal != SignalSlowDown {
		t.Fatalf("decision %+v, want advisory slow-down with a finite rate", last.dec)
	}
	for _, l := range last.leases {
		if !l.Advisory {
			t.Fatalf("lease %+v not advisory", l)
		}
	}
	if headMax, _ := res.headStats(20, 40); headMax < 10 {
		t.Errorf("head age %.2fs: advisory leases throttled the producers", headMax)
	}
}

// slowRamp is a consumer slowing from highCap to lowCap over 60 s, from
// t = 10 s.
func slowRamp(t float64) float64 {
	switch {
	case t < 10:
		return highCap
	case t < 70:
		return highCap - (highCap-lowCap)*(t-10)/60
	}
	return lowCap
}
