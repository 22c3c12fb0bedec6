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
