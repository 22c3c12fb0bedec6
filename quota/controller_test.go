package quota

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// st builds a fresh, saturated-looking state at t0+at seconds.
func st(at float64, lagN int64, consume, produce float64) lag.State {
	return lag.State{
		Target: ordersK, At: leaseT0.Add(time.Duration(at * float64(time.Second))), Status: lag.StatusOK,
		Lag: lagN, ConsumeRate: consume, ConsumeRateInstant: consume, ProduceRate: produce, ProduceRateInstant: produce,
		RatesKnown: true, Members: 1,
	}
}

// reported is s as read from the consumer's own reports: a position that
// moves with every message handled.
func reported(s lag.State) lag.State {
	s.Source = lag.SourceConsumer
	return s
}

func newCtl(tb testing.TB, cfg ControllerConfig) *Controller {
	tb.Helper()
	c, err := NewController(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestControllerRules walks the controller through short histories; each
// case checks the last decision. The law itself is exercised end to end by
// the simulations; these pin each branch.
func TestControllerRules(t *testing.T) {
	pol := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	cases := []struct {
		name   string
		policy Policy
		states []lag.State
		now    float64 // seconds; 0: the last state's At
		rate   float64 // want
		signal Signal
		rule   Rule
		held   bool
	}{
		{
			// The first observation has no rates: nothing to judge.
			name:   "rates unknown",
			states: []lag.State{{Target: ordersK, At: leaseT0, Status: lag.StatusOK}},
			rate:   inf, signal: SignalOK, rule: RuleRatesUnknown,
		},
		{
			// Caught up: unlimited.
			name:   "healthy",
			states: []lag.State{st(1, 0, 800, 800)},
			rate:   inf, signal: SignalOK, rule: RuleUnlimited,
		},
		{
			// Backlog of 0.3 s at 400/s (engage is 0.4 s): still
			// unlimited.
			name:   "small backlog",
			states: []lag.State{st(1, 120, 400, 500)},
			rate:   inf, signal: SignalOK, rule: RuleUnlimited,
		},
		{
			// 1.5 s of wait (target 0.5 s): drain: 400 + (200-600)/2.
			name:   "drain",
			states: []lag.State{st(1, 600, 400, 800)},
			rate:   200, signal: SignalSlowDown, rule: RuleSaturated,
		},
		{
			// A new message would wait 3 s > 2 s: admit nothing but the
			// floor.
			name:   "dead on arrival",
			states: []lag.State{st(1, 1200, 400, 800)},
			rate:   5, signal: SignalSlowDown, rule: RuleDrain,
		},
		{
			// Lag and nothing consumed for three intervals by the
			// consumer's own report (a position that moves once per
			// poll), longer than the budget: it consumed less than the
			// 100 messages it could hold in 3 s, a wait of over 70 s:
			// the floor only, still slow-down (lag has not declared a
			// stop yet).
			name: "nothing consumed",
			states: []lag.State{reported(st(1, 100, 0, 800)), reported(st(2, 900, 0, 800)),
				reported(st(3, 1700, 0, 800)), reported(st(4, 2500, 0, 800))},
			rate: 5, signal: SignalSlowDown, rule: RuleDrain,
		},
		{
			// Lag and no commit this interval, the cadence not learned
			// yet: no evidence that nothing was consumed (it may commit
			// every 5 s, the auto-commit default); unlimited.
			name:   "nothing committed, cadence unknown",
			states: []lag.State{st(1, 100, 0, 800)},
			rate:   inf, signal: SignalOK, rule: RuleUnlimited,
		},
		{
			// lag says stopped: stop at the floor.
			name: "stopped",
			states: []lag.State{func() lag.State {
				s := st(1, 100, 0, 0)
				s.Status, s.Reason = lag.StatusStopped, "no members"
				return s
			}()},
			rate: 5, signal: SignalStop, rule: RuleConsumerStopped,
		},
		{
			// Hard age: a 3 s wait passes a 2.5 s hard age: stop.
			name:   "hard age",
			policy: Policy{Name: "p", MaxAge: 2 * time.Second, HardAge: 2500 * time.Millisecond},
			states: []lag.State{st(1, 1200, 400, 800)},
			rate:   0, signal: SignalStop, rule: RuleHardAge,
		},
		{
			// Caught up after being limited with the producers using
			// it all: the rate rises by at least x1.5, and to the law at
			// the capacity the consumer showed with work queued (400/s):
			// caught up at the 200/s it was given, it is not taken to be
			// slower.
			name:   "probe",
			states: []lag.State{st(1, 600, 400, 800), st(2, 0, 200, 200)},
			rate:   500, signal: SignalSlowDown, rule: RuleProbe,
		},
		{
			// The rate unused three times in a row: unlimited again.
			name:   "release",
			states: []lag.State{st(1, 600, 400, 800), st(2, 0, 100, 100), st(3, 0, 100, 100), st(4, 0, 100, 100)},
			rate:   inf, signal: SignalOK, rule: RuleRelease,
		},
		{
			// Stale state within MaxHold: the last decision, held.
			name: "stale held",
			states: []lag.State{st(1, 600, 400, 800), func() lag.State {
				s := st(1, 600, 400, 800)
				s.Status, s.Reason = lag.StatusStale, "broker down"
				return s
			}()},
			now:  20,
			rate: 200, signal: SignalSlowDown, rule: RuleHold, held: true,
		},
		{
			// Stale beyond MaxHold (30 s): fail open.
			name: "stale fail-open",
			states: []lag.State{st(1, 600, 400, 800), func() lag.State {
				s := st(1, 600, 400, 800)
				s.Status = lag.StatusStale
				return s
			}()},
			now:  32,
			rate: inf, signal: SignalOK, rule: RuleFailOpen,
		},
		{
			// The same observation twice: the same decision.
			name:   "same observation",
			states: []lag.State{st(1, 600, 400, 800), st(1, 9999, 1, 1)},
			rate:   200, signal: SignalSlowDown, rule: RuleSaturated,
		},
		{
			// Limited at 200, then a backlog of 0.3 s (between E/2 and E)
			// that the consumer keeps up with at the capacity it showed:
			// follow the law, which fills toward the setpoint: 400 +
			// (200-120)/2.
			name:   "follow",
			states: []lag.State{st(1, 600, 400, 800), st(2, 120, 400, 380)},
			rate:   440, signal: SignalSlowDown, rule: RuleFollow,
		},
		{
			// A saturated target whose consumer is then abandoned: it
			// binds no producer, whatever its lag.
			name: "abandoned",
			states: []lag.State{st(1, 600, 400, 800), func() lag.State {
				s := st(2, 5000, 0, 800)
				s.Status, s.Reason = lag.StatusAbandoned, "no member for 10m"
				return s
			}()},
			rate: inf, signal: SignalOK, rule: RuleAbandoned,
		},
		{
			// An invalid policy never throttles.
			name:   "invalid policy",
			policy: Policy{Name: "bad"},
			states: []lag.State{st(1, 1200, 400, 800)},
			rate:   inf, signal: SignalOK, rule: RuleInvalidPolicy,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctl := newCtl(t, ControllerConfig{})
			p := c.policy
			if p.Name == "" {
				p = pol
			}
			var d Decision
			for i, s := range c.states {
				now := s.At
				if i == len(c.states)-1 && c.now > 0 {
					now = leaseT0.Add(time.Duration(c.now * float64(time.Second)))
				}
				d = ctl.Step(s, p, now)
			}
			if !close(d.Rate, c.rate) || d.Signal != c.signal || d.Held != c.held || d.Rule != c.rule {
				t.Fatalf("got rate %v signal %v held %v rule %v (%s); want %v %v %v %v", d.Rate, d.Signal, d.Held, d.Rule, d.Reason, c.rate, c.signal, c.held, c.rule)
			}
			if d.Signal == SignalSlowDown && d.RetryAfter <= 0 {
				t.Errorf("slow-down without retry-after")
			}
			if d.Signal != SignalSlowDown && d.RetryAfter != 0 {
				t.Errorf("retry-after %v with %v", d.RetryAfter, d.Signal)
			}
		})
	}
}

// TestControllerRetryAfter: the time the excess backlog takes to drain at
// capacity - rate, at least one interval, at most MaxRetryAfter.
func TestControllerRetryAfter(t *testing.T) {
	ctl := newCtl(t, ControllerConfig{MaxRetryAfter: 5 * time.Second})
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	// Wait 1.5 s, target 0.5 s: 400 excess messages at 400-200 = 200/s: 2 s.
	if d := ctl.Step(st(1, 600, 400, 800), p, leaseT0.Add(time.Second)); d.RetryAfter != 2*time.Second {
		t.Fatalf("retry-after %v, want 2s", d.RetryAfter)
	}
	// Nothing consumed for 3 s (by the consumer's report, whose
	// position moves once per poll): under 200/s, a wait of over 15 s
	// at it: capped.
	for k := 2; k <= 4; k++ {
		s := reported(st(float64(k), int64(600+800*(k-1)), 0, 800))
		d := ctl.Step(s, p, s.At)
		if k == 4 && d.RetryAfter != 5*time.Second {
			t.Fatalf("retry-after %v (%s), want the 5s cap", d.RetryAfter, d.Reason)
		}
	}
}

// TestControllerAvoidPartitions: a few late partitions are listed (head
// older than MaxAge); half or more are not "a few"; one partition is never
// listed.
func TestControllerAvoidPartitions(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	mk := func(heads ...float64) lag.State {
		s := st(1, 0, 1000, 1000)
		for i, h := range heads {
			ps := lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: int32(i), End: 100}, HeadAge: time.Duration(h * float64(time.Second))}
			if h > 0 {
				ps.Lag = 10
				s.Lag += 10
			}
			s.Partitions = append(s.Partitions, ps)
		}
		return s
	}
	cases := []struct {
		name  string
		heads []float64
		want  []int32
	}{
		{"one late of four", []float64{0, 3, 0.1, 0}, []int32{1}},       // listed
		{"two late of five", []float64{5, 0, 0, 2.5, 0}, []int32{0, 3}}, // listed, sorted
		{"half late", []float64{3, 3, 0, 0}, nil},                       // not a few: the target's problem
		{"single partition", []float64{9}, nil},                         // nowhere else to go
		{"at maxAge", []float64{2, 0, 0}, nil},                          // not over
	}
	for _, c := range cases {
		ctl := newCtl(t, ControllerConfig{})
		d := ctl.Step(mk(c.heads...), p, leaseT0.Add(time.Second))
		if !slices.Equal(d.AvoidPartitions, c.want) {
			t.Errorf("%s: avoid %v, want %v", c.name, d.AvoidPartitions, c.want)
		}
		if wantSig := SignalOK; len(c.want) > 0 && d.Signal != SignalAvoidPartitions || len(c.want) == 0 && d.Signal != wantSig {
			t.Errorf("%s: signal %v", c.name, d.Signal)
		}
		if wantRule := RuleUnlimited; len(c.want) > 0 && d.Rule != RuleAvoidPartitions || len(c.want) == 0 && d.Rule != wantRule {
			t.Errorf("%s: rule %v", c.name, d.Rule)
		}
	}
}

// TestCombineTopic: the minimum over the groups of a topic, enforced ones
// first.
func TestCombineTopic(t *testing.T) {
	g := func(group string, rate float64, sig Signal, advisory bool, avoid ...int32) Decision {
		tg := ordersK
		tg.Group = group
		d := Decision{Target: tg, Policy: "pol-" + group, Rate: rate, Signal: sig, Advisory: advisory, AvoidPartitions: avoid, Reason: group + " reason", Rule: RuleUnlimited}
		if sig == SignalSlowDown {
			d.RetryAfter = time.Duration(rate) * time.Millisecond
			d.Rule = RuleSaturated
		}
		return d
	}
	// gone is an abandoned group's decision, as Step makes it (unlimited,
	// ok); the figures a stale record could still carry must not leak.
	gone := func(group string) Decision {
		d := g(group, inf, SignalOK, false)
		d.Rule, d.HeadAge = RuleAbandoned, time.Hour
		return d
	}
	cases := []struct {
		name     string
		in       []Decision
		rate     float64
		signal   Signal
		policy   string
		advisory bool
		avoid    []int32
		retry    time.Duration
		rule     Rule
	}{
		{name: "none", rate: inf, signal: SignalOK}, // no readers: no limit
		{name: "one", in: []Decision{g("a", 100, SignalSlowDown, false)}, rate: 100, signal: SignalSlowDown, policy: "pol-a", retry: 100 * time.Millisecond},
		{name: "slowest binds", in: []Decision{g("a", inf, SignalOK, false), g("b", 300, SignalSlowDown, false), g("c", 500, SignalSlowDown, false)}, rate: 300, signal: SignalSlowDown, policy: "pol-b", retry: 500 * time.Millisecond, rule: RuleSaturated},
		{name: "worst signal", in: []Decision{g("a", 100, SignalSlowDown, false), g("b", 200, SignalStop, false)}, rate: 100, signal: SignalStop, policy: "pol-a"},
		{name: "avoid union", in: []Decision{g("a", inf, SignalAvoidPartitions, false, 3, 1), g("b", inf, SignalAvoidPartitions, false, 1, 2)}, rate: inf, signal: SignalAvoidPartitions, policy: "pol-a", avoid: []int32{1, 2, 3}},
		{name: "advisory ignored", in: []Decision{g("a", 10, SignalSlowDown, true), g("b", 800, SignalOK, false)}, rate: 800, signal: SignalOK, policy: "pol-b"},
		{name: "all advisory", in: []Decision{g("a", 10, SignalSlowDown, true), g("b", 800, SignalOK, true)}, rate: 10, signal: SignalSlowDown, policy: "pol-a", advisory: true, retry: 10 * time.Millisecond, rule: RuleSaturated},
		// An abandoned group binds nothing, neither rate nor head age.
		{name: "abandoned ignored", in: []Decision{gone("a"), g("b", 800, SignalOK, false)}, rate: 800, signal: SignalOK, policy: "pol-b", rule: RuleUnlimited},
		// Only abandoned groups: unlimited, ok, and the rule says why.
		{name: "all abandoned", in: []Decision{gone("a"), gone("b")}, rate: inf, signal: SignalOK, policy: "pol-a", rule: RuleAbandoned},
		// An abandoned enforced group does not make an advisory one binding
		// as if it were enforced, nor the result enforced.
		{name: "abandoned and advisory", in: []Decision{gone("a"), g("b", 10, SignalSlowDown, true)}, rate: 10, signal: SignalSlowDown, policy: "pol-b", advisory: true, retry: 10 * time.Millisecond, rule: RuleSaturated},
	}
	for _, c := range cases {
		d := CombineTopic(c.in)
		if !close(d.Rate, c.rate) || d.Signal != c.signal || d.Policy != c.policy || d.Advisory != c.advisory || !slices.Equal(d.AvoidPartitions, c.avoid) || d.RetryAfter != c.retry {
			t.Errorf("%s: got rate %v signal %v policy %q advisory %v avoid %v retry %v", c.name, d.Rate, d.Signal, d.Policy, d.Advisory, d.AvoidPartitions, d.RetryAfter)
		}
		if c.rule != RuleNone && d.Rule != c.rule {
			t.Errorf("%s: rule %v, want %v (the binding decision's)", c.name, d.Rule, c.rule)
		}
		if d.HeadAge >= time.Hour {
			t.Errorf("%s: head age %v of an abandoned group", c.name, d.HeadAge)
		}
		if len(c.in) > 0 && (d.Target.Group != "" || TopicOf(d.Target) != ordersT) {
			t.Errorf("%s: target %v", c.name, d.Target)
		}
	}
	// CombineTopics groups by topic.
	other := g("x", 5, SignalSlowDown, false)
	other.Target.Topic = "payments"
	out := CombineTopics([]Decision{g("a", 100, SignalOK, false), other, g("b", 50, SignalSlowDown, false)})
	if len(out) != 2 || out[0].Target.Topic != "orders" || out[0].Rate != 50 || out[1].Target.Topic != "payments" || out[1].Rate != 5 {
		t.Fatalf("CombineTopics: %+v", out)
	}
}

// TestDecisionJSON: round trip, with an unlimited rate as "unlimited": true.
func TestDecisionJSON(t *testing.T) {
	for _, rate := range []float64{42, inf} {
		d := Decision{Target: ordersK, Policy: "p", At: leaseT0, Rate: rate, Signal: SignalAvoidPartitions, AvoidPartitions: []int32{4}, Wait: lag.Never}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Decision
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Rate != rate && !(math.IsInf(rate, 1) && back.IsUnlimited()) || back.Signal != d.Signal || back.Target != ordersK || back.Wait != lag.Never {
			t.Fatalf("%s -> %+v", b, back)
		}
		if strings.Contains(string(b), `"unlimited":true`) != math.IsInf(rate, 1) {
			t.Fatalf("encoding %s", b)
		}
	}
}

// TestControllerConfigValidate: every problem at once, wrapping
// ErrInvalidConfig; the zero value is valid.
func TestControllerConfigValidate(t *testing.T) {
	if err := (ControllerConfig{}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := ControllerConfig{Interval: -1, Setpoint: 1.5, Engage: 2, Probe: -1, Smoothing: -1, StepThreshold: -1, ReleaseRatio: 0.95, ReleaseAfter: -1, MaxHold: -1, MaxRetryAfter: -1, AvoidBelow: 2}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("%v", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 11 {
		t.Fatalf("%d problems, want 11:\n%v", n, err)
	}
	if _, err := NewController(ControllerConfig{Setpoint: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("%v", err)
	}
}

// TestControllerForget: per-target records can be dropped.
func TestControllerForget(t *testing.T) {
	ctl := newCtl(t, ControllerConfig{})
	ctl.Step(st(1, 0, 1, 1), plainPolic, leaseT0)
	if ctl.Len() != 1 {
		t.Fatal(ctl.Len())
	}
	ctl.Forget(ordersK)
	if ctl.Len() != 0 {
		t.Fatal(ctl.Len())
	}
}

// TestControllerIgnoresSkipBursts: while the head is past MaxAge, a consumer
// that skips expired messages (the ttl guard) shows a burst of
// "consumption" that costs it nothing; the controller must not read it as
// capacity and open the quota. Once the head is live again, a real rise
// counts.
func TestControllerIgnoresSkipBursts(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	late := func(s lag.State, age time.Duration) lag.State { s.HeadAge = age; return s }
	// Saturated at 400 msg/s with a head past the deadline.
	c.Step(late(st(1, 1200, 400, 400), 3*time.Second), p, leaseT0.Add(time.Second))
	d := c.Step(late(st(1.25, 1100, 400, 400), 2500*time.Millisecond), p, leaseT0.Add(1250*time.Millisecond))
	before := d.Capacity
	// The guard skips 600 expired messages in one interval: 2,800 msg/s.
	d = c.Step(late(st(1.5, 400, 2800, 400), 500*time.Millisecond), p, leaseT0.Add(1500*time.Millisecond))
	if d.Capacity > before*1.01 || d.Rate > 2*before {
		t.Fatalf("skip burst read as capacity: capacity %.0f (was %.0f), rate %.0f", d.Capacity, before, d.Rate)
	}
	// The head is live now: a real rise of capacity is taken.
	d = c.Step(late(st(1.75, 300, 2000, 400), 200*time.Millisecond), p, leaseT0.Add(1750*time.Millisecond))
	if d.Capacity < 1500 {
		t.Fatalf("a real rise after the head is live again was ignored: capacity %.0f", d.Capacity)
	}
}

// TestControllerPausesOnStepDown: the observation whose interval straddles
// a capacity drop shows a mix of the old and the new rate; the controller
// admits nothing for that interval (when the backlog keeps the consumer
// busy meanwhile) and follows the law again on the next, clean one.
func TestControllerPausesOnStepDown(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	at := func(s float64) time.Time { return leaseT0.Add(time.Duration(s * float64(time.Second))) }
	saturated := func(c *Controller) {
		// Saturated at 2,000 msg/s, wait 0.25 s (the setpoint at 250 ms),
		// from the reading that shows the position moving in two
		// observations in a row (before it, half a commit of standing
		// wait is allowed for: see TestControllerUnlearnedStandingWait).
		for i, s := range []float64{1, 1.25, 1.5} {
			if d := c.Step(st(s, 500, 2000, 2000), p, at(s)); i > 1 && !d.CapacityKnown {
				t.Fatalf("not saturated at %.2fs: %s", s, d.Reason)
			}
		}
	}
	cases := []struct {
		name    string
		backlog int64
		inst    float64 // the straddling interval's consume rate
		paused  bool
	}{
		// 2,000 -> 400 a fifth into the interval: 720/s seen, 1.3 s of
		// backlog at it: pause.
		{name: "drop, backlog covers the pause", backlog: 940, inst: 720, paused: true},
		// The same drop with less than one interval of work queued at
		// the rate seen: pausing would starve the consumer; the law.
		{name: "drop, backlog too small", backlog: 150, inst: 720, paused: false},
		// A dip within StepThreshold is noise, not a step.
		{name: "dip", backlog: 520, inst: 1700, paused: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
			saturated(c)
			d := c.Step(st(1.75, tc.backlog, tc.inst, 2000), p, at(1.75))
			if paused := d.Rate == p.MinRate && d.Rule == RuleStepDown; paused != tc.paused {
				t.Fatalf("paused = %v, want %v: rate %.0f, %s", paused, tc.paused, d.Rate, d.Reason)
			}
			if !tc.paused {
				return
			}
			// The next interval is clean: 400/s, 500 queued (1.25 s):
			// the law drains toward the setpoint, it does not stay shut.
			d = c.Step(st(2, 500, 400, 0), p, at(2))
			if d.Rate <= p.MinRate || d.Rate >= 400 || d.Rule != RuleSaturated {
				t.Fatalf("after the pause: rate %.0f (want in (5, 400)), %s", d.Rate, d.Reason)
			}
		})
	}
}

// TestControllerSetpointIsOneLoopDelay: the standing wait steered to is
// Setpoint of the budget, but at most one observation interval.
func TestControllerSetpointIsOneLoopDelay(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	for _, tc := range []struct {
		interval time.Duration
		want     time.Duration
	}{
		{interval: time.Second, want: 500 * time.Millisecond},            // 0.25 x 2 s
		{interval: 250 * time.Millisecond, want: 250 * time.Millisecond}, // one interval
		{interval: 100 * time.Millisecond, want: 100 * time.Millisecond},
	} {
		c := newCtl(t, ControllerConfig{Interval: tc.interval})
		dt := tc.interval.Seconds()
		var d Decision
		// Saturated at 400 msg/s with the wait at 2x the setpoint.
		for i := 1; i <= 8; i++ {
			s := float64(i) * dt
			d = c.Step(st(s, int64(800*tc.want.Seconds()), 400, 400), p, leaseT0.Add(time.Duration(s*float64(time.Second))))
		}
		if d.TargetWait != tc.want {
			t.Errorf("interval %s: target wait %s, want %s", tc.interval, d.TargetWait, tc.want)
		}
		// Draining toward it: allowed below the capacity.
		if !d.CapacityKnown || d.Rate >= 400 {
			t.Errorf("interval %s: rate %.0f (capacity known %v), want < 400: %s", tc.interval, d.Rate, d.CapacityKnown, d.Reason)
		}
	}
}

// TestControllerSkipBurstAsHeadTurnsLate: a burst seen in the very
// observation in which the head passed MaxAge is skipping, not capacity.
func TestControllerSkipBurstAsHeadTurnsLate(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	aged := func(s lag.State, age time.Duration) lag.State { s.HeadAge = age; return s }
	c.Step(aged(st(1, 700, 400, 0), 1600*time.Millisecond), p, leaseT0.Add(time.Second))
	d := c.Step(aged(st(1.25, 690, 400, 0), 1800*time.Millisecond), p, leaseT0.Add(1250*time.Millisecond))
	before := d.Capacity
	d = c.Step(aged(st(1.5, 550, 1600, 0), 2010*time.Millisecond), p, leaseT0.Add(1500*time.Millisecond))
	if d.Capacity > before*1.01 {
		t.Fatalf("skip burst read as capacity: %.0f (was %.0f)", d.Capacity, before)
	}
}

// TestRuleText: every rule has a distinct name that round-trips through
// MarshalText/UnmarshalText; a name this version does not know (a newer
// replica's) reads as RuleNone, an empty one is an error.
func TestRuleText(t *testing.T) {
	seen := map[string]bool{}
	for r := RuleNone; int(r) < len(ruleNames); r++ {
		b, err := r.MarshalText()
		if err != nil || seen[string(b)] || strings.HasPrefix(string(b), "Rule(") {
			t.Fatalf("%d: %q %v (duplicate or unnamed)", r, b, err)
		}
		seen[string(b)] = true
		var back Rule
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Fatalf("%q -> %v, %v", b, back, err)
		}
	}
	r := RuleDrain
	if err := r.UnmarshalText([]byte("sideways")); err != nil || r != RuleNone {
		t.Fatalf("a rule of a newer version: %v, %v, want none, no error", r, err)
	}
	if err := r.UnmarshalText(nil); err == nil {
		t.Fatal("empty rule name accepted")
	}
	var d Decision
	if err := json.Unmarshal([]byte(`{"rule":"from-a-newer-version","rate":5}`), &d); err != nil || d.Rule != RuleNone {
		t.Fatalf("a decision with a newer version's rule: %v, %v, want decoded with rule none", d.Rule, err)
	}
}

// TestControllerCommitCadence: a consumer that commits less often than it
// is observed (State.CommitInterval). Its position moves in jumps: an
// interval without a commit is not a consumer that consumed nothing, and
// the lag it shows holds work it has done and not committed yet.
func TestControllerCommitCadence(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	const dt = 0.25 // observed every 250 ms
	// cad is a state of a consumer committing every ci, at step k.
	cad := func(k int, lagN int64, consume, produce float64, ci time.Duration) lag.State {
		s := st(float64(k)*dt, lagN, consume, produce)
		s.CommitInterval, s.Source = ci, lag.SourceCommits
		return s
	}
	// saturated: four observations of a consumer at 400/s with a second of
	// work queued, committing every second, each with a commit (the
	// consume rate is what moved since the last one).
	saturated := func(c *Controller) {
		for k := 1; k <= 4; k++ {
			c.Step(cad(k, 400, 400, 400, time.Second), p, leaseT0.Add(time.Duration(float64(k)*dt*float64(time.Second))))
		}
	}
	type obs struct {
		lag              int64
		consume, produce float64
	}
	cases := []struct {
		name  string
		ci    time.Duration
		prep  func(*Controller)
		then  []obs // observed every 250 ms after prep
		rule  Rule  // of the last decision
		check func(t *testing.T, d Decision)
	}{
		{
			// Saturated, then 250 ms without a commit: the consume rate
			// reads 0. That is no step down and no dead-on-arrival wait:
			// the capacity is unknown, not 0; the backlog is what was
			// left plus what was produced less what the consumer does at
			// its capacity (400 + 100 - 100), and the law drains it:
			// 400 + (100 - 350) / 1.75 = 257.
			name: "no commit in the interval",
			ci:   time.Second,
			prep: saturated,
			then: []obs{{lag: 500, consume: 0, produce: 400}},
			rule: RuleSaturated,
			check: func(t *testing.T, d Decision) {
				if math.Abs(d.Rate-257.1) > 0.1 || d.Wait != 875*time.Millisecond || d.Capacity != 400 {
					t.Errorf("rate %.1f wait %v capacity %.0f, want 257.1, 875ms, 400 (held)", d.Rate, d.Wait, d.Capacity)
				}
			},
		},
		{
			// The commit is overdue (no move for more than 1.5 commit
			// intervals plus one observation): nothing consumed is taken
			// at its word.
			name: "commit overdue",
			ci:   time.Second,
			prep: saturated,
			then: []obs{{500, 0, 400}, {600, 0, 400}, {700, 0, 400}, {800, 0, 400}, {900, 0, 400}, {1000, 0, 400}, {1100, 0, 400}, {1200, 0, 400}},
			rule: RuleDrain,
		},
		{
			// Unlimited, the first sighting of a consumer whose commit is
			// not in the interval: no rate to judge by yet; unlimited.
			name: "first sighting without a commit",
			ci:   5 * time.Second,
			then: []obs{{lag: 2000, consume: 0, produce: 800}},
			rule: RuleUnlimited,
		},
		{
			// Limited and probing, then a reading between 5 s commits:
			// nothing new is known of the consumer: the rate is kept.
			name: "await the commit",
			ci:   5 * time.Second,
			prep: func(c *Controller) {
				c.Step(cad(1, 1200, 400, 800, 5*time.Second), p, leaseT0.Add(250*time.Millisecond))
				c.Step(cad(2, 0, 900, 300, 5*time.Second), p, leaseT0.Add(500*time.Millisecond))
			},
			then: []obs{{lag: 100, consume: 0, produce: 400}},
			rule: RuleAwaitCommit,
			check: func(t *testing.T, d Decision) {
				// The probe of the commit before set 1028.6/s.
				if math.Abs(d.Rate-1028.6) > 0.1 {
					t.Errorf("rate %.1f, want the rate in force (1028.6) kept", d.Rate)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
			k := 0
			if tc.prep != nil {
				tc.prep(c)
				k = 4
			}
			var d Decision
			for _, o := range tc.then {
				k++
				at := leaseT0.Add(time.Duration(float64(k) * dt * float64(time.Second)))
				d = c.Step(cad(k, o.lag, o.consume, o.produce, tc.ci), p, at)
			}
			if d.Rule != tc.rule {
				t.Fatalf("rule %v (%s), want %v", d.Rule, d.Reason, tc.rule)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// TestControllerCommitSlack: the lag of a consumer that commits every 5 s,
// observed every second, holds what it consumed since its last commit. The
// same lag with the same rates is a queue when the position is exact, and
// mostly uncommitted work when the commit is 2 s old (State.Uncertainty):
// only the first engages.
func TestControllerCommitSlack(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	for _, tc := range []struct {
		name    string
		src     lag.Source
		ci, unc time.Duration
		engaged bool
	}{
		{name: "exact position", src: lag.SourceConsumer, engaged: true},
		{name: "estimate between commits", src: lag.SourceEstimate, ci: 5 * time.Second, unc: 2 * time.Second, engaged: true},
		{name: "commit 2s old", src: lag.SourceCommits, ci: 5 * time.Second, unc: 2 * time.Second, engaged: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			var d Decision
			for k := 1; k <= 2; k++ {
				// 900 of lag at 400/s, the producers at 400/s.
				s := st(float64(k), 900, 400, 400)
				s.Source, s.CommitInterval, s.Uncertainty = tc.src, tc.ci, tc.unc
				s.HeadAge, s.HeadAgeKnown = 2250*time.Millisecond, true
				d = c.Step(s, p, s.At)
			}
			if got := d.IsUnlimited(); got == tc.engaged {
				t.Fatalf("unlimited %v (rule %v: %s), want engaged %v", got, d.Rule, d.Reason, tc.engaged)
			}
		})
	}
}

// TestControllerNeverLocks: the lock of the issue. A target limited by a
// false start, whose consumer consumed 800 msg/s before and now keeps up
// with the 25 msg/s it is allowed, showing a standing lag of a few
// messages in flight (a wait of 0.24 s at 25/s: above the engage threshold
// of a 250 ms interval). The producers are refused (they use the whole
// rate). The consumer has capacity to spare: the rate is probed up every
// interval, never followed at the standing lag, until the producers no
// longer use it all, and then released.
func TestControllerNeverLocks(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	at := func(k int) time.Time { return leaseT0.Add(time.Duration(k) * 250 * time.Millisecond) }
	// Unlimited at 800/s, then a burst of lag the consumer does not
	// drain in the interval: limited.
	c.Step(st(0.25, 0, 800, 800), p, at(1))
	d := c.Step(st(0.5, 1000, 300, 800), p, at(2))
	if d.IsUnlimited() {
		t.Fatalf("not limited by the burst: %s", d.Reason)
	}
	// The burst drained; the rate sits far below what the consumer did.
	rate := 25.0
	c.targets[ordersK].rate = rate
	for k := 3; k < 40; k++ {
		offered := 800.0
		produced := min(offered, rate)
		d = c.Step(st(float64(k)*0.25, 6, produced, produced), p, at(k))
		if d.Rule == RuleFollow || d.Rule == RuleSaturated || d.Rule == RuleDrain {
			t.Fatalf("k=%d: rate %.0f under rule %v (%s): the standing lag locks the quota", k, d.Rate, d.Rule, d.Reason)
		}
		if d.IsUnlimited() {
			t.Logf("released at k=%d (%.2fs after the lock)", k, float64(k-3)*0.25)
			return
		}
		if d.Rate < rate {
			t.Fatalf("k=%d: rate cut from %.0f to %.0f with spare capacity", k, rate, d.Rate)
		}
		rate = d.Rate
	}
	t.Fatalf("still limited at %.0f/s after 9 s", rate)
}

// TestControllerCaughtUpAtCommit: a consumer that commits every 5 s,
// observed every second through lag's estimate (its position advanced at
// the rate measured from commit to commit, 400/s). Limited at 400/s from
// t=6, its producers get 600/s through in the next seconds: the estimate reads a backlog growing by 200/s.
// When the consumer was caught up at its last commit (the record at the
// committed position was written after the commit), that backlog is the
// estimate's, not evidence of saturation: the rule is probe, capped at one
// probe step above what the consumer kept up with (400 x 1.5) until the
// next commit. When it was behind (its head half a second old at the
// commit), or once that commit is overdue, the estimate is believed.
func TestControllerCaughtUpAtCommit(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	const ci = 5 * time.Second
	// state is the observation at second k: commits at 0.5 s and 5.5 s
	// (dated as lag dates them); headAtCommit is the age the committed
	// record had when it was committed.
	state := func(k int, headAtCommit time.Duration, lagN int64, produce float64) lag.State {
		s := st(float64(k), lagN, 400, produce)
		s.Source, s.CommitInterval = lag.SourceEstimate, ci
		last := leaseT0.Add(500 * time.Millisecond)
		if k >= 6 {
			last = last.Add(ci)
		}
		sinceCommit := s.At.Sub(last)
		s.Uncertainty = sinceCommit
		s.HeadAge, s.HeadAgeKnown = time.Duration(float64(lagN)/400*float64(time.Second)), true
		s.Partitions = []lag.PartitionState{{
			PartitionSample:  lag.PartitionSample{Partition: 0, Committed: 1, End: 1 + lagN + int64(400*sinceCommit.Seconds()), HeadKnown: true},
			Source:           lag.SourceEstimate,
			LastCommit:       last,
			CommittedLag:     lagN + int64(400*sinceCommit.Seconds()),
			CommittedHeadAge: headAtCommit + sinceCommit,
			CommitInterval:   ci,
		}}
		return s
	}
	for _, tc := range []struct {
		name         string
		headAtCommit time.Duration
		until        int // the last second observed
		rule         Rule
	}{
		{name: "caught up at the commit", headAtCommit: 0, until: 8, rule: RuleProbe},
		{name: "behind at the commit", headAtCommit: 500 * time.Millisecond, until: 8, rule: RuleSaturated},
		{name: "caught up, next commit overdue", headAtCommit: 0, until: 15, rule: RuleDrain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			var d Decision
			for k := 1; k <= tc.until; k++ {
				lagN, produce := int64(0), 400.0
				if k > 6 {
					lagN, produce = int64(200*(k-6)), 600
				}
				d = c.Step(state(k, tc.headAtCommit, lagN, produce), p, leaseT0.Add(time.Duration(k)*time.Second))
				if k == 6 {
					// Limited at what it consumes, the producers bound.
					c.targets[ordersK].limited, c.targets[ordersK].rate, c.targets[ordersK].release = true, 400, 0
				}
			}
			if d.Rule != tc.rule {
				t.Fatalf("rule %v (rate %.0f: %s), want %v", d.Rule, d.Rate, d.Reason, tc.rule)
			}
			if d.Rule == RuleProbe && d.Rate > 600 {
				t.Errorf("rate %.0f, want at most 600 (one probe step above the 400/s it kept up with)", d.Rate)
			}
		})
	}
}

// TestControllerZeroRateReleased: a limited target whose rate in force is 0
// (a drain with MinRate 0) and whose consumer is caught up cannot be probed
// up (0 x 1.5 is 0) and its producers, refused everything, leave nothing
// unused: it is released after ReleaseAfter observations, never locked.
func TestControllerZeroRateReleased(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	c.Step(st(1, 0, 0, 0), p, leaseT0.Add(time.Second))
	c.targets[ordersK].limited, c.targets[ordersK].rate = true, 0
	var d Decision
	for k := 2; k <= 5; k++ {
		d = c.Step(st(float64(k), 0, 0, 0), p, leaseT0.Add(time.Duration(k)*time.Second))
	}
	if d.Rule != RuleRelease && !(d.Rule == RuleUnlimited && d.IsUnlimited()) {
		t.Fatalf("rule %v rate %.0f (%s), want released", d.Rule, d.Rate, d.Reason)
	}
}

// TestControllerEstimateMeasuredByCommits: a consumer read between its 5 s
// commits through lag/'s estimate. The estimate is a model: a reading in
// which it consumed little does not lower the capacity estimate; a commit
// that finds the consumer behind measures what it consumed since the
// previous commit, and that lowers it; a commit that finds it caught up
// only raises it.
func TestControllerEstimateMeasuredByCommits(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	// state is the observation at second k of a consumer whose last
	// commit was at commitAt with its committed offset at committed;
	// headAtCommit is the age the committed record had then.
	state := func(k int, lagN int64, consume, produce float64, commitAt float64, committed int64, headAtCommit time.Duration) lag.State {
		s := st(float64(k), lagN, consume, produce)
		s.Source, s.CommitInterval = lag.SourceEstimate, 5*time.Second
		last := leaseT0.Add(time.Duration(commitAt * float64(time.Second)))
		since := s.At.Sub(last)
		s.Partitions = []lag.PartitionState{{
			PartitionSample:  lag.PartitionSample{Partition: 0, Committed: committed, End: committed + lagN, HeadKnown: true},
			Source:           lag.SourceEstimate,
			LastCommit:       last,
			CommittedLag:     lagN,
			CommittedHeadAge: headAtCommit + since,
			CommitInterval:   5 * time.Second,
		}}
		return s
	}
	for _, tc := range []struct {
		name  string
		third lag.State // the reading after two that showed 400/s
		want  float64   // Decision.Capacity after it
	}{
		{
			// The estimate consumed 100/s: no commit since, nothing
			// measured; the capacity stays 400/s.
			name:  "estimate only",
			third: state(3, 900, 100, 500, 0.5, 1000, time.Second),
			want:  400,
		},
		{
			// A commit at 2.5 s, 500 past the one at 0.5 s (250/s), the
			// record there 1 s old when committed: behind, measured.
			name:  "commit behind",
			third: state(3, 900, 100, 500, 2.5, 1500, time.Second),
			want:  250,
		},
		{
			// The same commit with its record fresh when committed:
			// caught up, 250/s is only what it was given.
			name:  "commit caught up",
			third: state(3, 900, 100, 500, 2.5, 1500, 0),
			want:  400,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			c.Step(state(1, 400, 400, 800, 0.5, 1000, time.Second), p, leaseT0.Add(time.Second))
			c.Step(state(2, 600, 400, 600, 0.5, 1000, time.Second), p, leaseT0.Add(2*time.Second))
			d := c.Step(tc.third, p, tc.third.At)
			if math.Abs(d.Capacity-tc.want) > 1 {
				t.Fatalf("capacity %.0f/s, want %.0f/s (rule %s: %s)", d.Capacity, tc.want, d.Rule, d.Reason)
			}
		})
	}
}

// TestControllerStandIn: a limited target, caught up, its producers using
// a third of the rate (they hold another replica's leases). Standing in
// for a silent leader, the controller keeps the rate in force for as long
// as that lasts, and probes up from it once the producers use it; not
// standing in, it releases the target (the producers "left the rate
// unused"). A cut is made standing in as ever.
func TestControllerStandIn(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	for _, standIn := range []bool{false, true} {
		c := newCtl(t, ControllerConfig{})
		c.StandIn(standIn)
		c.Step(reported(st(1, 0, 100, 100)), p, leaseT0.Add(time.Second))
		c.targets[ordersK].limited, c.targets[ordersK].rate = true, 300
		var d Decision
		for k := 2; k <= 12; k++ {
			d = c.Step(reported(st(float64(k), 0, 100, 100)), p, leaseT0.Add(time.Duration(k)*time.Second))
			if standIn && (d.IsUnlimited() || d.Rate != 300) {
				t.Fatalf("standing in, second %d: rate %v (%s), want 300 kept", k, d.Rate, d.Reason)
			}
		}
		if !standIn {
			if !d.IsUnlimited() {
				t.Errorf("not standing in: rate %v (%s), want released", d.Rate, d.Reason)
			}
			continue
		}
		// The producers use the rate: probing goes on.
		d = c.Step(reported(st(13, 0, 300, 300)), p, leaseT0.Add(13*time.Second))
		if d.IsUnlimited() || d.Rate <= 300 {
			t.Errorf("standing in, the rate used: rate %v (%s), want probed above 300", d.Rate, d.Reason)
		}
		// The consumer falls behind: cut.
		d = c.Step(reported(st(14, 2000, 100, 300)), p, leaseT0.Add(14*time.Second))
		if d.IsUnlimited() || d.Rate >= 300 {
			t.Errorf("standing in, a backlog: rate %v (%s), want cut", d.Rate, d.Reason)
		}
	}
}

// TestControllerIdleReportSlack: a consumer whose hook reports every
// 250 ms, observed every 250 ms, limited to 560/s after a burst while it
// can do 2,000/s. Its last report, 200 ms old, said it had nothing in
// hand; the 112 messages written since read as a wait of 0.2 s at 560/s,
// at the engage threshold of a 250 ms interval. That lag is the report's
// age, not work waiting: the rate is probed up. A report 200 ms old with
// work in hand is believed as it is (how far the consumer got through
// it is unknown): the same figures read as a consumer at its limit.
func TestControllerIdleReportSlack(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	for _, tc := range []struct {
		name   string
		inHand bool
	}{
		{name: "idle when it reported"},
		{name: "work in hand when it reported", inHand: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
			at := func(k int) time.Time { return leaseT0.Add(time.Duration(k) * 250 * time.Millisecond) }
			c.Step(reported(st(0.25, 0, 800, 800)), p, at(1))
			if d := c.Step(reported(st(0.5, 1000, 300, 800)), p, at(2)); d.IsUnlimited() {
				t.Fatalf("not limited by the burst: %s", d.Reason)
			}
			rate := 560.0
			c.targets[ordersK].rate = rate
			var d Decision
			for k := 3; k < 12; k++ {
				s := reported(st(float64(k)*0.25, 112, rate, rate))
				s.Uncertainty, s.HeadAge, s.HeadAgeKnown = 200*time.Millisecond, 200*time.Millisecond, true
				rep := lag.Report{At: s.At.Add(-200 * time.Millisecond), Position: 888}
				if tc.inHand {
					rep.HeadTime = s.At.Add(-200 * time.Millisecond)
				}
				s.Partitions = []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: 1000, Lag: 112, Reported: rep},
					Source: lag.SourceConsumer, Position: 888, Uncertainty: s.Uncertainty}}
				d = c.Step(s, p, s.At)
				if d.IsUnlimited() {
					break
				}
				if !tc.inHand && d.Rule != RuleProbe {
					t.Fatalf("k=%d: rule %v (%s): the report's age read as a queue", k, d.Rule, d.Reason)
				}
				rate = d.Rate
			}
			if tc.inHand && d.Rule != RuleSaturated && d.Rule != RuleFollow {
				t.Fatalf("rule %v (%s), want saturated or follow: work in hand is believed", d.Rule, d.Reason)
			}
		})
	}
}

// TestControllerOneSecondCommitsAlternate: franz-go's 1 s auto-commit read
// every second, its timer just after the observations (lagbridge bench,
// kafka/autocommit-1s/sync/1s): healthy, it reads a whole commit behind
// (lag 800 at 800/s, head 1.0 s); after a spell of overload, one reading
// sees a commit of everything (lag 3, 1,597 consumed in the interval), the
// next a commit of a few records (lag 797, 3 consumed, head 1.0 s): a
// whole commit of uncommitted work, no queue. The low readings are
// measured over the move before too (which spans two commits), since the
// head shows no queue beyond the standing wait learned while healthy.
// Before, each low reading was believed: capacity 3 msg/s, a wait of
// 4 min, drain, every other second after the consumer's capacity returned.
func TestControllerOneSecondCommitsAlternate(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{})
	k := 0
	step := func(lagN int64, consume, produce float64, head time.Duration) Decision {
		k++
		s := st(float64(k), lagN, consume, produce)
		s.CommitInterval, s.Source = time.Second, lag.SourceCommits
		s.HeadAge, s.HeadAgeKnown = head, true
		return c.Step(s, p, leaseT0.Add(time.Duration(k)*time.Second))
	}
	alternate := func(n int, check func(Decision)) {
		for i := range n {
			if i%2 == 0 {
				check(step(797, 3, 800, 997*time.Millisecond))
			} else {
				check(step(3, 1597, 800, 0))
			}
		}
	}
	for range 8 {
		// Healthy, the timer in phase: a whole commit behind at every
		// reading (lag/ read a head of 1.0 s); the standing wait is
		// learned.
		step(800, 800, 800, time.Second)
	}
	var d Decision
	for i := range 4 {
		// Overloaded: 400/s consumed of 800, the backlog growing.
		d = step(int64(1200+400*i), 400, 800, time.Duration(1+i)*time.Second+500*time.Millisecond)
	}
	if d.IsUnlimited() {
		t.Fatalf("not limited by the overload: %s (%s)", d.Rule, d.Reason)
	}
	// The capacity returns: the backlog is drained within the interval.
	step(800, 2400, 800, time.Second)
	var last Decision
	alternate(12, func(d Decision) {
		if d.Rule == RuleDrain || d.Rule == RuleStepDown {
			t.Fatalf("reading %d: %s at %.0f/s: %s", k, d.Rule, d.Rate, d.Reason)
		}
		last = d
	})
	if !last.IsUnlimited() {
		t.Fatalf("still limited at %.0f/s after 12 readings of a consumer keeping up: %s (%s)", last.Rate, last.Rule, last.Reason)
	}
}

// TestControllerFreshSeesStuckGroup: a controller that starts (a restart,
// a takeover) while a group with live members has not moved its position
// for 78 s: 1,500 unconsumed, the head 78 s old, 20 msg/s produced. Its
// first reading measures: nothing consumed over those 78 s, so a new
// message would wait without bound, and producers are throttled as for
// any other consumer. Before, the first sighting started the span at that
// reading ("when it last committed is unknown"): wait 0s <= engage,
// unlimited, for one more commit interval and a half.
func TestControllerFreshSeesStuckGroup(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	for _, tc := range []struct {
		name string
		mk   func(s *lag.State)
	}{
		{name: "no commit yet, first seen 78 s ago", mk: func(s *lag.State) {
			s.Source, s.Uncertainty = lag.SourceFirstSight, 78*time.Second
		}},
		{name: "committed, last moved 78 s ago", mk: func(s *lag.State) {
			s.Source = lag.SourceCommits
			s.Partitions = []lag.PartitionState{{PartitionSample: lag.PartitionSample{Partition: 0, End: 9500, Committed: 8000, Lag: 1500},
				LastCommit: s.At.Add(-78 * time.Second)}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			s := st(100, 1500, 0, 20)
			s.HeadAge, s.HeadAgeKnown, s.Status = 78*time.Second, true, lag.StatusLagging
			tc.mk(&s)
			d := c.Step(s, p, s.At)
			if d.IsUnlimited() || d.Rule != RuleDrain {
				t.Fatalf("rule %s at %v/s (%s), want drain", d.Rule, d.Rate, d.Reason)
			}
		})
	}
}

// TestControllerOneSecondCommitsProbe: the consumer of
// TestControllerOneSecondCommitsAlternate, limited by a spell of overload,
// gets its capacity back: each reading, a whole commit behind, shows the
// lag of the last second's production, already consumed (the head no
// older than the standing wait), while the probe raises the rate. That
// lag is the standing wait at the rate produced, not at the capacity the
// consumer showed when saturated: taken at the latter, the lag of a probe's
// second (800 at 800/s) read as more than half a second of queue at
// 500/s, saturated, and the rate fell back.
func TestControllerOneSecondCommitsProbe(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{})
	k := 0
	step := func(lagN int64, consume, produce float64, head time.Duration) Decision {
		k++
		s := st(float64(k), lagN, consume, produce)
		s.CommitInterval, s.Source = time.Second, lag.SourceCommits
		s.HeadAge, s.HeadAgeKnown = head, true
		return c.Step(s, p, leaseT0.Add(time.Duration(k)*time.Second))
	}
	for range 8 {
		step(800, 800, 800, time.Second) // healthy, a commit behind
	}
	for i := range 4 {
		step(int64(1200+400*i), 400, 800, time.Duration(1+i)*time.Second+500*time.Millisecond)
	}
	d := step(400, 2400, 400, time.Second) // the capacity returns
	if d.IsUnlimited() {
		t.Fatalf("not limited by the overload: %s (%s)", d.Rule, d.Reason)
	}
	prev := 400.0
	for range 6 {
		if d.IsUnlimited() {
			return
		}
		// Producers use the rate in force (up to 800/s); the reading
		// shows the last second's production as lag, and what was
		// produced the second before as consumed.
		prod := min(d.Rate, 800)
		d = step(int64(prod), prev, prod, time.Second)
		if d.Rule == RuleSaturated || d.Rule == RuleDrain || d.Rule == RuleFollow {
			t.Fatalf("reading %d, producing %.0f/s: %s at %.0f/s (%s), want a probe", k, prod, d.Rule, d.Rate, d.Reason)
		}
		prev = prod
	}
	if !d.IsUnlimited() {
		t.Fatalf("still limited at %.0f/s: %s (%s)", d.Rate, d.Rule, d.Reason)
	}
}

// TestControllerOneSecondCommitsAlternateHealthy: the consumer of
// TestControllerOneSecondCommitsAlternate whose commits alternate between
// everything and a few records from its first readings on (its timer a
// little off the daemon's; lagbridge bench): no reading on its own keeps
// up (one consumed 3 msg/s of 800, the next 1,597), but every two do, and
// its standing wait is learned from them. Before, it was learned only from
// readings that kept up on their own, the ones right after a full commit
// (a wait of 0), and the next low reading drained the healthy consumer:
// capacity 66 msg/s, a wait of 11.5 s.
func TestControllerOneSecondCommitsAlternateHealthy(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{})
	for k := 1; k <= 16; k++ {
		s := st(float64(k), 3, 1597, 800)
		if k%2 == 0 {
			s = st(float64(k), 797, 3, 800)
			s.HeadAge = 997 * time.Millisecond
		}
		s.CommitInterval, s.Source, s.HeadAgeKnown = time.Second, lag.SourceCommits, true
		if d := c.Step(s, p, leaseT0.Add(time.Duration(k)*time.Second)); !d.IsUnlimited() {
			t.Fatalf("reading %d: %s at %.0f/s (%s), want unlimited", k, d.Rule, d.Rate, d.Reason)
		}
	}
}

// TestControllerFirstCommitDue: a live group without a commit, measured
// from first sight. Its first commit is overdue (nothing consumed, drain)
// once both the time since first sight and the age of its oldest record
// are past firstCommitDue (6.5 s at 1 s): franz-go's and Java's auto-commit
// timer starts when the consumer joins, before it is seen. Read each second
// from first sight on, a busy topic (records from first sight on) is
// drained at 7 s, not at 6 s; before, at 8.5 s (1.5 x 5 s plus an
// interval). A controller that first reads the group 9 s after first sight
// (a restart, a takeover), with records that came 1 s ago, does not drain
// it: a consumer may have consumed them and wait for its next commit
// (before, it was drained at that reading).
func TestControllerFirstCommitDue(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	busy := func(sec float64) (int64, time.Duration) {
		return int64(800 * sec), time.Duration(sec * float64(time.Second))
	}
	quiet := func(float64) (int64, time.Duration) { return 50, time.Second }
	for _, tc := range []struct {
		name     string
		from, at int // the readings, seconds after first sight
		state    func(sec float64) (int64, time.Duration)
		drain    bool
	}{
		{name: "busy topic, 7 s", from: 1, at: 7, state: busy, drain: true},
		{name: "busy topic, 6 s", from: 1, at: 6, state: busy},
		{name: "quiet topic read first at 9 s", from: 9, at: 9, state: quiet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			var d Decision
			for k := tc.from; k <= tc.at; k++ {
				sec := float64(k)
				lagN, head := tc.state(sec)
				s := st(sec, lagN, 0, 800)
				s.Source, s.Uncertainty = lag.SourceFirstSight, time.Duration(k)*time.Second
				s.HeadAge, s.HeadAgeKnown = head, true
				d = c.Step(s, p, s.At)
			}
			if got := d.Rule == RuleDrain; got != tc.drain {
				t.Fatalf("%d s after first sight: rule %s at %v/s (%s), want drain %v", tc.at, d.Rule, d.Rate, d.Reason, tc.drain)
			}
		})
	}
}

// TestControllerFirstCommitKeepsUp: the first commit of a group first seen
// without one, as lagbridge bench's plain 5 s auto-commit row showed it
// (800 msg/s offered to a consumer of 2,000): first seen at 0 s, its first
// commit made at 5.5 s a poll behind, read at 6 s with lag 760 and a head
// 0.96 s old. What it moved past the first-sight position (4,040 in 6 s)
// is a lower bound of its rate, not its capacity: it is no evidence of
// saturation while the record at the commit had waited less than the
// budget (0.46 s here), and producers stay unlimited, also at the next
// reading without a commit (read as a capacity, it limited them to 592/s
// for 4 s from that reading on). A first commit whose record had waited
// more than half the budget (lag 3,000 and a head 4 s old at the reading,
// or lag 1,704 and 2.13 s: a consumer that fell behind before its first
// commit, as in two runs of the +no-commit-yet row) is read: drained.
func TestControllerFirstCommitKeepsUp(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	for _, tc := range []struct {
		name  string
		lagN  int64
		head  time.Duration
		drain bool
	}{
		{name: "a poll behind", lagN: 760, head: 960 * time.Millisecond},
		{name: "behind the budget", lagN: 3000, head: 4 * time.Second, drain: true},
		{name: "behind half the budget", lagN: 1704, head: 2130 * time.Millisecond, drain: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			for k := 1; k <= 5; k++ {
				s := st(float64(k), int64(800*k), 0, 800)
				s.Source, s.Uncertainty = lag.SourceFirstSight, time.Duration(k)*time.Second
				s.HeadAge, s.HeadAgeKnown = time.Duration(k)*time.Second, true
				if d := c.Step(s, p, s.At); !d.IsUnlimited() {
					t.Fatalf("%d s after first sight: %s at %v/s (%s), want unlimited", k, d.Rule, d.Rate, d.Reason)
				}
			}
			s := st(6, tc.lagN, float64(4800-tc.lagN), 800)
			s.Source, s.HeadAge, s.HeadAgeKnown = lag.SourceCommits, tc.head, true
			s.Partitions = []lag.PartitionState{{PartitionSample: lag.PartitionSample{Partition: 0, End: 4800, Committed: 4800 - tc.lagN, Lag: tc.lagN},
				LastCommit: s.At.Add(-500 * time.Millisecond)}}
			d := c.Step(s, p, s.At)
			if d.IsUnlimited() == tc.drain || (d.Rule == RuleDrain) != tc.drain {
				t.Fatalf("first commit: %s at %v/s (%s), want drain %v (else unlimited)", d.Rule, d.Rate, d.Reason, tc.drain)
			}
			if tc.drain {
				return
			}
			// A second later, no commit since: 800 more written.
			s = st(7, tc.lagN+800, 0, 800)
			s.Source, s.HeadAge, s.HeadAgeKnown = lag.SourceCommits, tc.head+time.Second, true
			s.Partitions = []lag.PartitionState{{PartitionSample: lag.PartitionSample{Partition: 0, End: 5600, Committed: 4800 - tc.lagN, Lag: tc.lagN + 800},
				LastCommit: s.At.Add(-1500 * time.Millisecond)}}
			if d := c.Step(s, p, s.At); !d.IsUnlimited() {
				t.Fatalf("a second after the first commit: %s at %v/s (%s), want unlimited", d.Rule, d.Rate, d.Reason)
			}
		})
	}
}

// TestControllerAdoptHoldsUnusedRate: a follower takes over a limited
// target whose consumer is caught up, adopting the former leader's 100/s
// (Adopt), while its producers still send 40/s (they hold the former
// leader's leases, or its Kafka client quotas throttle them). A rate they
// have not had is no evidence of capacity: it is kept while the adoption's
// grace runs, not probed up (on a takeover on Kafka 4.3.1 it went 127,
// 190, 285, 427/s in four intervals for a 100/s consumer, and the
// producers used it all at once); once they use it, probing goes on.
func TestControllerAdoptHoldsUnusedRate(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	c.Step(reported(st(1, 0, 100, 100)), p, leaseT0.Add(time.Second))
	c.Adopt(Decision{Target: ordersK, Rate: 100, Capacity: 100})
	var d Decision
	for k := 2; k <= 4; k++ {
		d = c.Step(reported(st(float64(k), 0, 40, 40)), p, leaseT0.Add(time.Duration(k)*time.Second))
		if d.IsUnlimited() || d.Rate != 100 {
			t.Fatalf("second %d after the takeover, the rate unused: rate %v (%s: %s), want 100 kept", k, d.Rate, d.Rule, d.Reason)
		}
	}
	d = c.Step(reported(st(5, 0, 100, 100)), p, leaseT0.Add(5*time.Second))
	if d.IsUnlimited() || d.Rate <= 100 {
		t.Errorf("the rate used: rate %v (%s: %s), want probed above 100", d.Rate, d.Rule, d.Reason)
	}
}

// TestControllerOneSecondCommitsStartup: a healthy consumer that
// auto-commits every second, read every second, in its first readings
// (lagbridge bench, kafka/autocommit-1s at 2x, kfake): 800 msg/s produced,
// its commits alternating between a whole second of records and a few, the
// head at its commit about 1.0 s old whenever it has lag. lag/ learns the
// cadence at the fourth reading, which is one of the few records (3 msg/s
// consumed, lag 834). Before, that reading restarted the capacity estimate
// at 3 msg/s (the lag, a second of uncommitted work, read as work queued)
// and the controller drained the healthy consumer (wait 4m38s), then again
// two readings later (6.1 s): producers refused before any overload. The
// head at its commit was no older than the one it showed keeping up: the
// reading is a lower bound of its capacity. A capacity drop is still seen:
// the head at the commit ages past the standing wait.
func TestControllerOneSecondCommitsStartup(t *testing.T) {
	replayOneSecondCommits(t, 4, [][3]float64{
		{797, 800, 1.005}, {803, 794, 1.006}, {37, 1566, 0.03}, {834, 3, 1.023},
		{0, 1634, 0}, {688, 112, 1.001}, {0, 1488, 0}, {812, 0, 1.0}, {20, 1592, 0.02},
	})
}

// TestControllerNearEmptyFollowHolds: a limited consumer whose position is
// its own (reported by the hook, or committed every poll) that consumed a
// little less than was produced in an interval (405/s of 433/s: a poll
// still in hand when it was observed) while its backlog is near empty
// (75 messages, a wait under E/2). Before, the rule was follow, the rate
// was cut to the law, whose capacity estimate is what the producers had
// been allowed, and the count towards release restarted: 3,175/s cut to
// 918/s of an 800/s offer while the consumer sat idle (lagbridge bench,
// kafka/hook/sync/1s at 2x, after the restore). The rate in force is
// held, and so is the count.
func TestControllerNearEmptyFollowHolds(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	for _, source := range []lag.Source{lag.SourceConsumer, lag.SourceCommits} {
		t.Run(string(source), func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			mk := func(s lag.State) lag.State { s.Source = source; return s }
			c.Step(mk(st(1, 0, 800, 800)), p, leaseT0.Add(time.Second))
			if d := c.Step(mk(st(2, 1000, 300, 800)), p, leaseT0.Add(2*time.Second)); d.IsUnlimited() {
				t.Fatalf("not limited by the burst: %s", d.Reason)
			}
			// Caught up since at the 550/s the producers were allowed
			// (the capacity estimate), probing: 941/s in force.
			for k := 3; k < 6; k++ {
				c.Step(mk(st(float64(k), 20, 550, 550)), p, leaseT0.Add(time.Duration(k)*time.Second))
			}
			// (Probing from what the consumer showed, it may have been
			// released by now: limited again, as the case is.)
			c.targets[ordersK].limited = true
			c.targets[ordersK].rate, c.targets[ordersK].release = 941, 1
			s := mk(st(6, 75, 405, 433))
			if source == lag.SourceConsumer {
				// It reported itself idle 100 ms ago: the lag was
				// written since.
				s.Uncertainty = 100 * time.Millisecond
				s.Partitions = []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: 1000, Lag: 75,
					Reported: lag.Report{At: s.At.Add(-s.Uncertainty), Position: 925}},
					Source: lag.SourceConsumer, Position: 925, Uncertainty: s.Uncertainty}}
			}
			d := c.Step(s, p, leaseT0.Add(6*time.Second))
			if d.Rule != RuleFollow {
				t.Fatalf("rule %v (%s), want follow", d.Rule, d.Reason)
			}
			if d.Rate < 941 {
				t.Fatalf("rate %.0f/s (%s): cut below the 941/s in force with the backlog near empty", d.Rate, d.Reason)
			}
			if n := c.targets[ordersK].release; n != 1 {
				t.Fatalf("count towards release %d, want 1 kept", n)
			}
		})
	}
}

// TestControllerNearEmptyBindingProbes: as TestControllerNearEmptyFollowHolds,
// but the producers use the whole rate in force (they are refused): after
// the restore in lagbridge bench (kafka/hook/sync/1s at 2x), 339/s in
// force for an 800/s offer, 336/s produced, 301/s consumed, lag 35 (a
// wait of 21 ms). Holding the rate refused the producers for another
// interval while the consumer sat idle; it is probed up.
func TestControllerNearEmptyBindingProbes(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second, MinRate: 5}
	c := newCtl(t, ControllerConfig{})
	c.Step(reported(st(1, 0, 800, 800)), p, leaseT0.Add(time.Second))
	if d := c.Step(reported(st(2, 1000, 300, 800)), p, leaseT0.Add(2*time.Second)); d.IsUnlimited() {
		t.Fatalf("not limited by the burst: %s", d.Reason)
	}
	for k := 3; k < 6; k++ {
		c.Step(reported(st(float64(k), 20, 300, 300)), p, leaseT0.Add(time.Duration(k)*time.Second))
	}
	tc := c.targets[ordersK]
	tc.limited, tc.rate, tc.release, tc.capacity = true, 339, 0, 274
	d := c.Step(reported(st(6, 35, 301, 336)), p, leaseT0.Add(6*time.Second))
	if d.Rule != RuleProbe || d.Rate < 1.4*339 {
		t.Fatalf("rule %v at %.0f/s (%s), want a probe from the 339/s in force", d.Rule, d.Rate, d.Reason)
	}
}
