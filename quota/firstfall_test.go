package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// fallRecordings are lagbridge bench runs on kfake and the embedded
// nats-server at 250 ms (main at 92a6fe4, session 35, firstread), cut
// 2 s after the drop from 2,000 to 400 msg/s: commit per poll at 5x and
// 2x and NATS ack each at 5x. Reading fallAt is the first after the drop.
var fallRecordings = []string{"cpp250-5x-fall.jsonl", "nats250-5x-fall.jsonl", "cpp250-2x-fall.jsonl"}

const fallAt = 40

// TestControllerFirstFall: the first reading after the drop shows the
// consumer consumed 398-748/s of 796-2,030/s produced, its lag up by 100-320
// in the interval and the record at its commit 0.13-0.17 s old. Valued at
// the estimate from before the drop (806-2,018/s), that backlog was a wait
// of 121-158 ms, under the engage wait, and the readings stayed unlimited
// ("wait 158ms <= engage 200ms"); the cut came a reading later, with 0.25 s
// more of the offer admitted past the new capacity. Now the reading is
// RuleFall, at the saturated law of what the consumer consumed, and no
// reading before the drop is limited (2,000 offered to a consumer of
// 2,000 at 5x).
func TestControllerFirstFall(t *testing.T) {
	for _, name := range fallRecordings {
		t.Run(name, func(t *testing.T) {
			ds := replayStates(t, name, 250*time.Millisecond)
			for i, d := range ds[:fallAt] {
				if !d.IsUnlimited() {
					t.Errorf("decision %d (before the drop): %s at %.0f/s (%s), want unlimited", i, d.Rule, d.Rate, d.Reason)
				}
			}
			rec := readRecording(t, name)
			d, consumed := ds[fallAt], rec[fallAt].State.ConsumeRateInstant
			if d.Rule != RuleFall || d.Rate > 1.1*consumed {
				t.Fatalf("decision %d (the first after the drop, %.0f/s consumed): %s at %.0f/s (%s), want %s at about that (the law at it)", fallAt, consumed, d.Rule, d.Rate, d.Reason, RuleFall)
			}
			if d.Capacity > consumed+1 {
				t.Errorf("decision %d: capacity %.0f/s, want what the reading consumed, %.0f/s", fallAt, d.Capacity, consumed)
			}
		})
	}
}

// TestControllerFallNeedsAQueue is TestControllerFirstFall with the head at
// the commit at the first reading after the drop edited to within the
// standing wait and E/2: that reading then shows no record that waited, a
// commit's timing, not a fall, and it stays unlimited as before.
func TestControllerFallNeedsAQueue(t *testing.T) {
	for _, name := range fallRecordings {
		t.Run(name, func(t *testing.T) {
			i := -1
			ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
				if i++; i == fallAt {
					st.HeadAge = 80 * time.Millisecond
				}
			})
			if d := ds[fallAt]; d.Rule == RuleFall || !d.IsUnlimited() {
				t.Errorf("decision %d, head at the commit 80 ms: %s at %.0f/s (%s), want unlimited", fallAt, d.Rule, d.Rate, d.Reason)
			}
		})
	}
}

// TestControllerFallPredictedWait: at 2x the new capacity values the first
// reading's backlog at about the engage wait (0.19-0.26 s in session 34's
// runs): the backlog grows at (P - C)/C seconds of wait a second, past E
// before the next decision can act. cpp250-2x-fall's first reading after
// the drop with its lag edited to 70 (a wait of 176 ms at the 398/s it
// consumed, under E) engages on the wait predicted at the next decision,
// 176 ms + (796 - 398)/398 x 0.25 s.
func TestControllerFallPredictedWait(t *testing.T) {
	i := -1
	ds := replayEdited(t, "cpp250-2x-fall.jsonl", 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
		if i++; i == fallAt {
			st.Lag = 70
		}
	})
	d := ds[fallAt]
	if d.Wait >= 200*time.Millisecond {
		t.Fatalf("decision %d: wait %s, want under the engage wait: the case tests nothing", fallAt, d.Wait)
	}
	if d.Rule != RuleFall {
		t.Errorf("decision %d, wait %s: %s at %.0f/s (%s), want %s", fallAt, d.Wait, d.Rule, d.Rate, d.Reason, RuleFall)
	}
}

// TestControllerFallCases is TestControllerFirstFall's 5x commit per poll
// (1,716/s consumed of 2,011/s at the first reading after the drop, lag 20
// -> 345, the record at the commit 0.17 s old) with that reading, or the
// one before, edited.
func TestControllerFallCases(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*lag.State)
		at   int // the reading edited
		fall bool
	}{
		// A lumpy move: 50 records more produced than consumed in the
		// interval, within what a healthy consumer holds consumed and
		// not committed (the standing wait and E/4 at the estimate, 127):
		// no work the whole span.
		{"lumpy, 1,400/s of 1,600/s", func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1400, 1600 }, fallAt, false},
		// A burst the consumer keeps consuming at its estimate through:
		// its capacity did not fall.
		{"burst, 1,900/s of 3,000/s", func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1900, 3000 }, fallAt, false},
		// The position an estimate between commits (lag.SourceEstimate):
		// a model of the consumer, not a measure of it.
		{"estimated", func(st *lag.State) { st.Source = lag.SourceEstimate }, fallAt, false},
		// The same lumpy move after a reading with 300 queued: the
		// consumer had work from the start of the span.
		{"lumpy after a backlog of 300", func(st *lag.State) { st.Lag = 300 }, fallAt - 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := -1
			ds := replayEdited(t, "cpp250-5x-fall.jsonl", 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
				i++
				if i == c.at {
					c.edit(st)
				}
				if c.at == fallAt-1 && i == fallAt {
					st.ConsumeRateInstant, st.ProduceRateInstant = 1400, 1600
				}
			})
			if d := ds[fallAt]; (d.Rule == RuleFall) != c.fall {
				t.Errorf("decision %d: %s at %.0f/s (%s), want %s: %v", fallAt, d.Rule, d.Rate, d.Reason, RuleFall, c.fall)
			}
		})
	}
}

// TestControllerFallNotAtATimer is TestControllerFirstFall's recordings
// with the commit interval lag/ learned edited to 1 s, a commit timer read
// every 250 ms: a move between its commits is the timer's phase, not a
// rate, so no reading is a fall.
func TestControllerFallNotAtATimer(t *testing.T) {
	for _, name := range fallRecordings {
		t.Run(name, func(t *testing.T) {
			ds := replayEdited(t, name, 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
				if st.CommitInterval > 0 {
					st.CommitInterval = time.Second
				}
			})
			for i, d := range ds {
				if d.Rule == RuleFall {
					t.Errorf("decision %d, commits every second: %s at %.0f/s (%s), want no %s", i, d.Rule, d.Rate, d.Reason, RuleFall)
				}
			}
		})
	}
}

// TestControllerFallNotWhileBehind replays lagbridge bench
// --rows kafka/guard/sync/250ms --loads 5 on kfake (dbb578e, 07:52 UTC,
// review-firstread), cut 2 s after the drop. The consumer, offered its
// capacity (2,000 = 2,000), was still warming up: 1,468 and 1,718 msg/s
// consumed of ~2,000 produced, lag 33 -> 420; then a move of 1,292/s, the
// head 0.13 s, read as a fall at reading 7 (1.76 s): 1,249/s decided, 170
// messages refused and a false-throttle second before the drop, where it
// stayed unlimited before ("wait 191ms <= engage 201ms"). A fall is a
// change from a consumer that kept up over the moves before: every
// decision before the drop is unlimited, and the first after it engages.
func TestControllerFallNotWhileBehind(t *testing.T) {
	ds := replayStates(t, "guard250-5x-startfall.jsonl", 250*time.Millisecond)
	for i, d := range ds[:fallAt] {
		if !d.IsUnlimited() {
			t.Errorf("decision %d (before the drop): %s at %.0f/s (%s), want unlimited", i, d.Rule, d.Rate, d.Reason)
		}
	}
	if d := ds[fallAt]; d.IsUnlimited() {
		t.Errorf("decision %d (the first after the drop): %s (%s), want engaged", fallAt, d.Rule, d.Reason)
	}
}

// TestControllerFallBounds is TestControllerFirstFall's 5x commit per poll
// (717/s consumed of 2,011/s at the first reading after the drop, the
// estimate 2,016/s, the head at the commit 0.17 s, the two moves before
// 2,022/s of 1,994/s and 2,000/s of 2,000/s) with readings edited to each
// side of fell's bounds: the learned cadence at most 1.5 readings, the
// move under 75% of the estimate, the head past the standing wait
// (about 13 ms here) and E/2 (100 ms) and known, and each of the two
// moves before at least 75% of the produced or the estimate, the smaller.
// The cases were red against the mutants of these bounds that every other
// test passed (the comments say which; mutants36, session 36:
// docs/results.md).
func TestControllerFallBounds(t *testing.T) {
	every := func(ci time.Duration) func(int, *lag.State) {
		return func(_ int, st *lag.State) {
			if st.CommitInterval > 0 {
				st.CommitInterval = ci
			}
		}
	}
	at := func(k int, edit func(*lag.State)) func(int, *lag.State) {
		return func(i int, st *lag.State) {
			if i == k {
				edit(st)
			}
		}
	}
	for _, c := range []struct {
		name string
		edit func(int, *lag.State)
		fall bool
	}{
		// The learned cadence: moves at every reading, but lag/ learned
		// commits 1.8 readings apart (2x or 2.5x allowed, or no bound: a
		// fall). The head at the commit edited to 0.3 s, so that the
		// commit's age the cadence discounts from it does not bring it
		// within the standing wait (which alone kept the reading
		// unlimited).
		{"cadence 450 ms learned", func(i int, st *lag.State) {
			every(450*time.Millisecond)(i, st)
			if i == fallAt {
				st.HeadAge = 300 * time.Millisecond
			}
		}, false},
		// 1.4 readings: within (1.2x allowed: none).
		{"cadence 350 ms learned", every(350 * time.Millisecond), true},
		// The share: 77% of the estimate is no fall (87.5% allowed: a
		// fall), 72% is.
		{"1,550/s of 2,400/s", at(fallAt, func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1550, 2400 }), false},
		{"1,450/s of 2,400/s", at(fallAt, func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1450, 2400 }), true},
		// Work the whole span: 110 records more produced than consumed
		// over the move are within what a healthy consumer holds (the
		// standing wait and E/4 at the estimate, about 127; E/4 alone,
		// 101, or the floor and E/8, 77: a fall), 150 are past it (the
		// floor and E/2, 228: none).
		{"1,400/s of 1,840/s", at(fallAt, func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1400, 1840 }), false},
		{"1,400/s of 2,000/s", at(fallAt, func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1400, 2000 }), true},
		// The head at the commit not known (HeadAgeKnown false): no
		// queue shown (without the test: a fall on the recorded age).
		{"head not known", at(fallAt, func(st *lag.State) { st.HeadAgeKnown = false }), false},
		// The head at the commit: 108 ms is within the standing wait and
		// E/2, 113 ms (E/2 alone, 100 ms, or E/4 with the floor: a fall);
		// 120 ms is past it (E with the floor, 213 ms: none).
		{"head 108 ms", at(fallAt, func(st *lag.State) { st.HeadAge = 108 * time.Millisecond }), false},
		{"head 120 ms", at(fallAt, func(st *lag.State) { st.HeadAge = 120 * time.Millisecond }), true},
		// The move before: 74% of the produced is behind (a ratio of 0.5
		// or 0.6: a fall), 76% kept up (0.9: none).
		{"move before at 74%", at(fallAt-1, func(st *lag.State) { st.ConsumeRateInstant = 0.74 * st.ProduceRateInstant }), false},
		{"move before at 76%", at(fallAt-1, func(st *lag.State) { st.ConsumeRateInstant = 0.76 * st.ProduceRateInstant }), true},
		// The move two before counts too (the first alone: a fall).
		{"move two before at 70%", at(fallAt-2, func(st *lag.State) { st.ConsumeRateInstant = 0.7 * st.ProduceRateInstant }), false},
		// Of the smaller of the produced and the estimate: 1,900/s of
		// 3,000/s kept up with the estimate (75% of the produced alone:
		// none), 800/s of 1,000/s with what was produced (75% of the
		// estimate alone: none).
		{"move before 1,900/s of 3,000/s", at(fallAt-1, func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 1900, 3000 }), true},
		{"move before 800/s of 1,000/s", at(fallAt-1, func(st *lag.State) { st.ConsumeRateInstant, st.ProduceRateInstant = 800, 1000 }), true},
		// Nothing produced over the move before: it shows nothing kept
		// up with (without the produced > 0 test: a fall).
		{"nothing produced over the move before", at(fallAt-1, func(st *lag.State) { st.ProduceRateInstant = 0 }), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := -1
			ds := replayEdited(t, "cpp250-5x-fall.jsonl", 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
				i++
				c.edit(i, st)
			})
			if d := ds[fallAt]; (d.Rule == RuleFall) != c.fall {
				t.Errorf("decision %d: %s at %.0f/s (%s), want %s: %v", fallAt, d.Rule, d.Rate, d.Reason, RuleFall, c.fall)
			}
		})
	}
}

// TestControllerFallWaitBounds is TestControllerFallPredictedWait's
// reading edited to each side of fallWait's one interval: with its lag at
// 24 (a wait of 57 ms at the 398/s it consumed of 796/s) the wait
// predicted at the next decision is 57 + 251 ms, past E (201 ms): a fall
// (half an interval, 183 ms: unlimited); with its lag at 20 and 630/s
// produced (a fall by work the whole span, 59 records over the span
// against about 51) it is 47 + 146 ms, under E: unlimited (two
// intervals, 339 ms: a fall). Each was red against that mutant of
// fallWait, which every other test passed (mutants36, session 36).
func TestControllerFallWaitBounds(t *testing.T) {
	for _, c := range []struct {
		lag      int64
		produced float64 // 0: as recorded (796/s)
		fall     bool
	}{
		{24, 0, true},
		{20, 630, false},
	} {
		i := -1
		ds := replayEdited(t, "cpp250-2x-fall.jsonl", 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
			if i++; i == fallAt {
				st.Lag = c.lag
				if c.produced > 0 {
					st.ProduceRateInstant = c.produced
				}
			}
		})
		if d := ds[fallAt]; (d.Rule == RuleFall) != c.fall || d.IsUnlimited() == c.fall {
			t.Errorf("lag %d, %.0f/s produced: decision %d %s at %.0f/s, wait %s (%s), want %s: %v", c.lag, c.produced, fallAt, d.Rule, d.Rate, d.Wait, d.Reason, RuleFall, c.fall)
		}
	}
}

// TestControllerFallNotInAStallShadow is TestControllerFirstFall's 5x
// commit per poll with the first reading after the drop, and every one
// after it, 0.5 s late (a gap of 751 ms between readings, past gapRatio
// intervals): a stall the observer shared (observerStall) is not read as
// a fall, so the reading keeps the estimate (2,016/s) under
// RuleObserverStall, as every shadowed reading does. Red without fell's
// shadow test: the move alone (717/s) taken as the capacity in the
// shadow (mutants36, session 36).
func TestControllerFallNotInAStallShadow(t *testing.T) {
	i := -1
	ds := replayEdited(t, "cpp250-5x-fall.jsonl", 0, newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond}), func(st *lag.State) {
		if i++; i >= fallAt {
			st.At = st.At.Add(500 * time.Millisecond)
		}
	})
	if d := ds[fallAt]; d.Rule != RuleObserverStall || d.Capacity < 2000 {
		t.Errorf("decision %d, 751 ms after the one before: %s at %.0f/s, capacity %.0f/s (%s), want %s keeping the estimate", fallAt, d.Rule, d.Rate, d.Capacity, d.Reason, RuleObserverStall)
	}
}
