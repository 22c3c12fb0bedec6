package lag

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/importcheck"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var tg = Target{Kind: KindKafka, Cluster: "c1", Topic: "orders", Group: "billing"}

// part builds a fresh partition reading with its head at headAt (zero: no head).
func part(id int32, end, lag int64, headAt time.Time) PartitionSample {
	return PartitionSample{Partition: id, End: end, Lag: lag, Committed: end - lag, HeadTime: headAt, HeadKnown: !headAt.IsZero()}
}

func sample(at time.Time, members int, parts ...PartitionSample) Sample {
	return Sample{Target: tg, At: at, Members: members, Partitions: parts}
}

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// TestRules is the proof of each status rule: every case feeds a history of
// samples and checks the verdict of the last one.
func TestRules(t *testing.T) {
	rules := Rules{LagAge: 10 * time.Second, StallAfter: 30 * time.Second, StaleAfter: 5 * time.Second}
	type step struct {
		at      time.Duration // since t0
		members int
		end     int64
		lag     int64
		headAt  time.Duration // since t0; <0: no head known
		skip    bool          // the observation failed: a sample with Err and no partitions
	}
	cases := []struct {
		name  string
		steps []step
		now   time.Duration // evaluation time since t0; 0 means the last step's
		want  Status
		rule  string
	}{
		{
			// Nothing has been written for an hour and nothing is
			// unconsumed: a quiet topic, not a stopped consumer.
			name:  "quiet topic is ok",
			steps: []step{{at: 0, end: 10}, {at: time.Hour, end: 10}},
			want:  StatusOK, rule: "caught-up",
		},
		{
			// After an hour of silence one message arrives and waits 2 s:
			// no consumption "for an hour", but the head is young, and the
			// consumer was caught up a second ago.
			name:  "low throughput after silence is ok",
			steps: []step{{at: 0, end: 10}, {at: time.Hour, end: 10}, {at: time.Hour + sec(2), end: 11, lag: 1, headAt: time.Hour}},
			want:  StatusOK, rule: "within-age",
		},
		{
			// The consumer makes progress but the head is 15 s old.
			name: "progressing but over age is lagging",
			steps: []step{
				{at: 0, end: 1000, lag: 500, headAt: -sec(10), members: 1},
				{at: sec(5), end: 2000, lag: 1000, headAt: -sec(10), members: 1},
			},
			want: StatusLagging, rule: "over-age",
		},
		{
			// Lag, members present, nothing consumed for 31 s, head 40 s
			// old: the consumer is there but stuck.
			name: "no progress with members is stalled",
			steps: []step{
				{at: 0, end: 100, lag: 50, headAt: -sec(9), members: 2},
				{at: sec(31), end: 200, lag: 150, headAt: -sec(9), members: 2},
			},
			want: StatusStalled, rule: "no-progress",
		},
		{
			// Same, with an empty group: nobody is consuming.
			name: "no progress and no members is stopped",
			steps: []step{
				{at: 0, end: 100, lag: 50, headAt: -sec(9), members: 0},
				{at: sec(31), end: 200, lag: 150, headAt: -sec(9), members: 0},
			},
			want: StatusStopped, rule: "no-progress",
		},
		{
			// Unknown membership (-1) is not evidence of absence.
			name: "no progress with unknown members is stalled",
			steps: []step{
				{at: 0, end: 100, lag: 50, headAt: -sec(9), members: -1},
				{at: sec(31), end: 200, lag: 150, headAt: -sec(9), members: -1},
			},
			want: StatusStalled, rule: "no-progress",
		},
		{
			// No progress for 31 s of watching, but the only waiting
			// message is 5 s old: too early to call it stopped.
			name: "young head is not a stall",
			steps: []step{
				{at: 0, end: 100, lag: 0, members: 0},
				{at: sec(20), end: 100, lag: 0, members: 0},
				{at: sec(51), end: 101, lag: 1, headAt: sec(46), members: 0},
			},
			want: StatusOK, rule: "within-age",
		},
		{
			// The last good observation is 6 s old (> StaleAfter 5 s):
			// whatever it said, it is stale now.
			name:  "old data is stale",
			steps: []step{{at: 0, end: 100, lag: 0}, {at: sec(6), skip: true}},
			want:  StatusStale, rule: "stale",
		},
		{
			// Failing observations shorter than StaleAfter keep the last
			// verdict (no flapping on one lost cycle).
			name:  "one lost cycle keeps the verdict",
			steps: []step{{at: 0, end: 100, lag: 0}, {at: sec(1), skip: true}},
			want:  StatusOK, rule: "caught-up",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(func(Target) Rules { return rules })
			var st State
			for _, s := range c.steps {
				at := t0.Add(s.at)
				if s.skip {
					st = tr.Observe(Sample{Target: tg, At: at, Err: "broker down"}, at)
					continue
				}
				var head time.Time
				if s.lag > 0 && s.headAt >= -time.Hour {
					head = t0.Add(s.headAt)
				}
				st = tr.Observe(sample(at, s.members, part(0, s.end, s.lag, head)), at)
			}
			if c.now != 0 {
				st = tr.States(t0.Add(c.now))[0]
			}
			if st.Status != c.want || st.Rule != c.rule {
				t.Fatalf("status %s (rule %s: %s), want %s (rule %s)", st.Status, st.Rule, st.Reason, c.want, c.rule)
			}
		})
	}
}

// TestStoppedLagKeepsGrowing: a group that stopped committing keeps its lag
// growing with the end offset (it must not freeze at the last commit).
func TestStoppedLagKeepsGrowing(t *testing.T) {
	tr := NewTracker(nil)
	head := t0.Add(-time.Second)
	var last int64
	for i := range 10 {
		at := t0.Add(sec(float64(i)))
		end := int64(1000 + 100*i)
		st := tr.Observe(sample(at, 0, part(0, end, end-1000, head)), at)
		if i > 0 && st.Lag <= last {
			t.Fatalf("step %d: lag %d did not grow past %d", i, st.Lag, last)
		}
		last = st.Lag
		if i > 1 && math.Abs(st.ProduceRate-100) > 1e-6 {
			t.Fatalf("produce rate %v, want 100", st.ProduceRate)
		}
		if st.ConsumeRate != 0 {
			t.Fatalf("consume rate %v, want 0", st.ConsumeRate)
		}
		if i > 0 && st.TimeToDrain != Never {
			t.Fatalf("time to drain %v, want Never", st.TimeToDrain)
		}
	}
}

// TestRatesStepDrop is the mission's example: 2,000 msg/s consumed, then 400.
// The instantaneous rate shows the drop within one interval; the smoothed one
// follows with time constant RateWindow (63% after 2 s, 95% after 6 s).
func TestRatesStepDrop(t *testing.T) {
	tr := NewTracker(func(Target) Rules { return Rules{RateWindow: 2 * time.Second} })
	var consumed, produced int64
	var st State
	for i := 0; i <= 20; i++ {
		at := t0.Add(sec(float64(i)))
		st = tr.Observe(sample(at, 1, part(0, produced, produced-consumed, at.Add(-sec(0.1)))), at)
		rate := int64(2000)
		if i >= 10 {
			rate = 400
		}
		consumed += rate
		produced += 2000
		if i == 10 {
			if math.Abs(st.ConsumeRate-2000) > 1 {
				t.Fatalf("before the drop: smoothed consume rate %v, want 2000", st.ConsumeRate)
			}
		}
		if i == 11 {
			if math.Abs(st.ConsumeRateInstant-400) > 1e-6 {
				t.Fatalf("one interval after the drop: instant rate %v, want 400", st.ConsumeRateInstant)
			}
			// One interval of 1 s with tau 2 s: 2000 - (1-e^-0.5)*1600.
			want := 2000 - (1-math.Exp(-0.5))*1600
			if math.Abs(st.ConsumeRate-want) > 1e-6 {
				t.Fatalf("smoothed after 1 s: %v, want %v", st.ConsumeRate, want)
			}
		}
	}
	if math.Abs(st.ConsumeRate-400) > 400*0.05 {
		t.Fatalf("10 s after the drop: smoothed %v, want 400 +- 5%%", st.ConsumeRate)
	}
	if st.ProduceRate != 2000 {
		t.Fatalf("produce rate %v, want 2000", st.ProduceRate)
	}
}

// TestTimeToDrain: 12,000 behind, consuming 2,000/s net of 400/s produced
// drains in 7.5 s.
func TestTimeToDrain(t *testing.T) {
	tr := NewTracker(nil)
	at1, at2 := t0, t0.Add(time.Second)
	tr.Observe(sample(at1, 1, part(0, 100_000, 13_600, at1)), at1)
	st := tr.Observe(sample(at2, 1, part(0, 100_400, 12_000, at1)), at2)
	if st.ProduceRate != 400 || st.ConsumeRate != 2000 {
		t.Fatalf("rates %v/%v, want 400/2000", st.ProduceRate, st.ConsumeRate)
	}
	if want := sec(7.5); st.TimeToDrain != want {
		t.Fatalf("time to drain %v, want %v", st.TimeToDrain, want)
	}
}

// TestPartialIsNoSpike: one partition's broker fails; its last values are
// kept and flagged, the sum does not jump, the rates come from the others.
func TestPartialIsNoSpike(t *testing.T) {
	tr := NewTracker(nil)
	h := t0.Add(-sec(1))
	tr.Observe(sample(t0, 1, part(0, 1000, 10, h), part(1, 5000, 20, h)), t0)
	at := t0.Add(time.Second)
	st := tr.Observe(sample(at, 1, part(0, 1100, 10, h), PartitionSample{Partition: 1, Stale: true, Err: "broker 2: i/o timeout"}), at)
	if st.Lag != 30 {
		t.Fatalf("lag %d, want 30 (10 fresh + 20 kept)", st.Lag)
	}
	if !st.Stale || !st.Partial || st.Partitions[1].Err == "" || !st.Partitions[1].Stale {
		t.Fatalf("want partial stale state with partition 1 flagged: %+v", st)
	}
	if st.ProduceRate != 100 {
		t.Fatalf("produce rate %v, want 100 (from partition 0 only)", st.ProduceRate)
	}
	// The partition comes back: no spike either, and it is fresh again.
	at = at.Add(time.Second)
	st = tr.Observe(sample(at, 1, part(0, 1200, 10, h), part(1, 5100, 20, h)), at)
	if st.Partial || st.Lag != 30 {
		t.Fatalf("after recovery: partial %v lag %d", st.Partial, st.Lag)
	}
}

// TestEdgeCases covers the numeric care: future heads, offset resets,
// unread heads, recreated partitions.
func TestEdgeCases(t *testing.T) {
	t.Run("head in the future is age 0", func(t *testing.T) {
		tr := NewTracker(nil)
		st := tr.Observe(sample(t0, 1, part(0, 10, 5, t0.Add(time.Minute))), t0)
		if st.HeadAge != 0 || !st.HeadAgeKnown {
			t.Fatalf("head age %v known %v", st.HeadAge, st.HeadAgeKnown)
		}
	})
	t.Run("offset reset backward is not negative consumption", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, part(0, 1000, 0, time.Time{})), t0)
		at := t0.Add(time.Second)
		st := tr.Observe(sample(at, 1, part(0, 1000, 1000, t0)), at)
		if st.ConsumeRate != 0 || st.ProduceRate != 0 {
			t.Fatalf("rates %v/%v, want 0/0", st.ProduceRate, st.ConsumeRate)
		}
	})
	t.Run("unread head with unmoved commit keeps the old head", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, part(0, 100, 50, t0.Add(-sec(3)))), t0)
		at := t0.Add(time.Second)
		p := part(0, 110, 60, time.Time{}) // same committed offset 50
		st := tr.Observe(sample(at, 1, p), at)
		if !st.HeadAgeKnown || st.HeadAge != sec(4) {
			t.Fatalf("head age %v known %v, want 4s known", st.HeadAge, st.HeadAgeKnown)
		}
	})
	t.Run("unread head with moved commit is unknown", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, part(0, 100, 50, t0.Add(-sec(3)))), t0)
		at := t0.Add(time.Second)
		st := tr.Observe(sample(at, 1, part(0, 110, 40, time.Time{})), at)
		if st.HeadAgeKnown {
			t.Fatalf("head age known after the commit moved without a new head")
		}
	})
	t.Run("recreated partition gives no rate", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, part(0, 5000, 0, time.Time{})), t0)
		at := t0.Add(time.Second)
		st := tr.Observe(sample(at, 1, part(0, 10, 0, time.Time{})), at)
		if st.RatesKnown {
			t.Fatalf("rates from a shrinking end offset: %+v", st)
		}
	})
	t.Run("forget drops targets not seen", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, part(0, 1, 0, time.Time{})), t0)
		if gone := tr.Forget(t0.Add(time.Second)); len(gone) != 1 || tr.Len() != 0 {
			t.Fatalf("forget: %v, len %d", gone, tr.Len())
		}
	})
}

// TestVanishedPartitionsDropped pins that a fresh sample lists all of a
// target's partitions: a topic deleted and recreated with fewer partitions
// leaves no ghost of the old ones (their lag and an ever older head would
// make the target stopped). Samples that cannot say which partitions exist
// (a whole-target error, or nothing read) drop nothing.
func TestVanishedPartitionsDropped(t *testing.T) {
	old := t0.Add(-sec(5))
	four := sample(t0, 0, part(0, 10, 0, time.Time{}), part(1, 10, 0, time.Time{}), part(2, 10, 0, time.Time{}), part(3, 15, 5, old))

	tr := NewTracker(nil)
	tr.Observe(four, t0)
	// The group failed this cycle: the observer lists the partitions it
	// knew, stale, with the target's error; nothing is dropped.
	at := t0.Add(time.Second)
	failed := sample(at, -1, PartitionSample{Partition: 0, Committed: -1, Stale: true, Err: "offset fetch: timeout"})
	failed.Err = "offset fetch: timeout"
	if st := tr.Observe(failed, at); len(st.Partitions) != 4 || st.Lag != 5 {
		t.Fatalf("after a failed sample: %d partitions, lag %d; want the 4 kept, lag 5", len(st.Partitions), st.Lag)
	}
	// Every listed partition stale (no Err): it says nothing read.
	at = at.Add(time.Second)
	if st := tr.Observe(sample(at, 0, PartitionSample{Partition: 0, Committed: -1, Stale: true, Err: "broker 1: i/o timeout"}), at); len(st.Partitions) != 4 {
		t.Fatalf("after an all-stale sample: %d partitions, want 4 kept", len(st.Partitions))
	}

	// Recreated with two partitions, caught up: the old 2 and 3 are gone.
	for range 3 {
		at = at.Add(time.Minute)
		st := tr.Observe(sample(at, 0, part(0, 1, 0, time.Time{}), part(1, 0, 0, time.Time{})), at)
		t.Logf("recreated: %d partitions, lag %d, head age %v, status %s", len(st.Partitions), st.Lag, st.HeadAge, st.Status)
		if len(st.Partitions) != 2 || st.Lag != 0 || st.HeadAge != 0 || st.Status != StatusOK {
			t.Fatalf("after the recreate: %d partitions, lag %d, head age %v, status %s (%s); want 2, 0, 0, ok",
				len(st.Partitions), st.Lag, st.HeadAge, st.Status, st.Reason)
		}
	}
	if st := tr.States(at.Add(time.Second))[0]; len(st.Partitions) != 2 {
		t.Fatalf("States: %d partitions, want 2", len(st.Partitions))
	}
}

// TestKeptHeadFollowsLogStart pins when an unread head keeps the previous
// head time: only when the position, max(Committed, LogStart), did not
// move. A commit below the log start does not move, but retention moving
// the log start moves the position: the old head is a deleted record.
func TestKeptHeadFollowsLogStart(t *testing.T) {
	old := t0.Add(-2 * time.Hour) // the record at offset 5
	first := PartitionSample{Partition: 0, LogStart: 0, End: 1000, Committed: 5, Lag: 995, HeadTime: old, HeadKnown: true}
	t.Run("retention moved the log start past the commit", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, first), t0)
		at := t0.Add(time.Second)
		st := tr.Observe(sample(at, 1, PartitionSample{Partition: 0, LogStart: 900, End: 1000, Committed: 5, Lag: 100, Err: "head fetch: timeout"}), at)
		t.Logf("head age %v known %v", st.HeadAge, st.HeadAgeKnown)
		if st.HeadAgeKnown || st.HeadAge != 0 {
			t.Fatalf("head age %v (known %v): the age of offset 5, deleted; the position is 900 and its head unread", st.HeadAge, st.HeadAgeKnown)
		}
	})
	t.Run("log start moved but stays below the commit", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, first), t0)
		at := t0.Add(time.Second)
		st := tr.Observe(sample(at, 1, PartitionSample{Partition: 0, LogStart: 3, End: 1000, Committed: 5, Lag: 995, Err: "head fetch: timeout"}), at)
		if want := 2*time.Hour + time.Second; !st.HeadAgeKnown || st.HeadAge != want {
			t.Fatalf("head age %v (known %v), want %v kept: the position is still 5", st.HeadAge, st.HeadAgeKnown, want)
		}
	})
	t.Run("retention moved the log start again, commit below both", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, PartitionSample{Partition: 0, LogStart: 100, End: 1000, Committed: 5, Lag: 900, HeadTime: old, HeadKnown: true}), t0)
		at := t0.Add(time.Second)
		st := tr.Observe(sample(at, 1, PartitionSample{Partition: 0, LogStart: 100, End: 1000, Committed: 5, Lag: 900}), at)
		if !st.HeadAgeKnown {
			t.Fatalf("unmoved log start above the commit: head not kept")
		}
		at = at.Add(time.Second)
		st = tr.Observe(sample(at, 1, PartitionSample{Partition: 0, LogStart: 200, End: 1000, Committed: 5, Lag: 800}), at)
		if st.HeadAgeKnown {
			t.Fatalf("log start moved from 100 to 200 above commit 5: head age %v kept", st.HeadAge)
		}
	})
}

// TestUncommittedPartitions pins the treatment of partitions without a
// committed offset (Committed -1), as Kafka's own tools show them (lag
// "-"): their lag and head age are unknown, so they count in neither Lag,
// HeadAge nor the rates, cannot make a target stalled or stopped, and are
// counted in Uncommitted and named in Reason.
func TestUncommittedPartitions(t *testing.T) {
	none := func(id int32, logStart, end int64) PartitionSample {
		return PartitionSample{Partition: id, LogStart: logStart, End: end, Committed: -1}
	}
	t.Run("next to committed ones", func(t *testing.T) {
		tr := NewTracker(nil)
		var st State
		for i := range 3 {
			at := t0.Add(time.Duration(i) * time.Minute)
			// Partition 1 was never consumed by this group and holds
			// records a day old; partition 0 is caught up.
			st = tr.Observe(sample(at, 0, part(0, 100, 0, time.Time{}), none(1, 0, 1000)), at)
		}
		t.Logf("status %s: %s", st.Status, st.Reason)
		if st.Lag != 0 || st.HeadAge != 0 || st.Status != StatusOK || st.Uncommitted != 1 {
			t.Fatalf("lag %d head age %v status %s uncommitted %d; want 0, 0, ok, 1", st.Lag, st.HeadAge, st.Status, st.Uncommitted)
		}
		if !strings.Contains(st.Reason, "1 of 2 partitions without a committed offset") {
			t.Fatalf("reason %q does not name the partition without a commit", st.Reason)
		}
	})
	t.Run("on every partition, no members, for an hour", func(t *testing.T) {
		tr := NewTracker(nil)
		var st State
		for i := range 61 {
			at := t0.Add(time.Duration(i) * time.Minute)
			st = tr.Observe(sample(at, 0, none(0, 0, 500+int64(i)), none(1, 10, 20)), at)
		}
		if st.Lag != 0 || st.Status != StatusOK || st.Uncommitted != 2 || st.RatesKnown {
			t.Fatalf("lag %d status %s (%s) uncommitted %d rates known %v; want 0, ok, 2, no rates",
				st.Lag, st.Status, st.Reason, st.Uncommitted, st.RatesKnown)
		}
	})
	t.Run("first commit is no consumption burst", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(sample(t0, 1, part(0, 100, 0, time.Time{}), none(1, 0, 1000)), t0)
		at := t0.Add(time.Second)
		tr.Observe(sample(at, 1, part(0, 110, 0, time.Time{}), none(1, 0, 1000)), at)
		at = at.Add(time.Second)
		// The group commits 1000 on partition 1: it started at the end.
		st := tr.Observe(sample(at, 1, part(0, 120, 0, time.Time{}), part(1, 1000, 0, time.Time{})), at)
		if st.ConsumeRateInstant != 10 || st.ProduceRateInstant != 10 || st.Uncommitted != 0 {
			t.Fatalf("instant rates %v/%v uncommitted %d; want 10/10 (partition 0 only), 0",
				st.ProduceRateInstant, st.ConsumeRateInstant, st.Uncommitted)
		}
	})
	t.Run("stale placeholder is not counted", func(t *testing.T) {
		tr := NewTracker(nil)
		st := tr.Observe(sample(t0, 1, part(0, 10, 0, time.Time{}), PartitionSample{Partition: 1, Committed: -1, Stale: true, Err: "x"}), t0)
		if st.Uncommitted != 0 {
			t.Fatalf("uncommitted %d for a partition never read", st.Uncommitted)
		}
	})
}

// TestObserveDoesNotAlias: a returned State must not change when the
// tracker moves on (the HTTP API serves snapshots while the loop runs).
func TestObserveDoesNotAlias(t *testing.T) {
	tr := NewTracker(nil)
	st := tr.Observe(sample(t0, 1, part(0, 10, 5, t0)), t0)
	tr.Observe(sample(t0.Add(time.Second), 1, part(0, 20, 15, t0)), t0.Add(time.Second))
	if st.Partitions[0].Lag != 5 {
		t.Fatalf("snapshot changed: %+v", st.Partitions[0])
	}
}

func TestImportsOnlyStdlib(t *testing.T) { importcheck.Only(t, ".") }

func BenchmarkObserve(b *testing.B) {
	tr := NewTracker(nil)
	parts := make([]PartitionSample, 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		for p := range parts {
			parts[p] = part(int32(p), int64(i*100), 10, at.Add(-time.Second))
		}
		tr.Observe(sample(at, 1, parts...), at)
	}
}

// TestSkippedCounted: the messages a consumer terminated as expired
// (PartitionSample.Skipped, the NATS observer's count of the ttl guard's
// skips) are the part of the interval's consumption it skipped:
// SkipRateInstant over the same interval as ConsumeRateInstant, Skipped
// their total. A reading repeated with the same At (the NATS observer
// between two refreshes) counts them once.
func TestSkippedCounted(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(sec(s)) }
	skipped := func(p PartitionSample, n int64) PartitionSample { p.Skipped = n; return p }
	tr := NewTracker(nil)
	tr.Observe(sample(at(0), 1, skipped(part(0, 1000, 1000, at(-2.5)), 3)), at(0))
	st := tr.Observe(sample(at(1), 1, skipped(part(0, 1000, 0, time.Time{}), 990)), at(1))
	if st.ConsumeRateInstant != 1000 || st.SkipRateInstant != 990 || st.Skipped != 993 {
		t.Fatalf("consumed %.0f/s, skipped %.0f/s, %d in all; want 1000, 990, 993", st.ConsumeRateInstant, st.SkipRateInstant, st.Skipped)
	}
	st = tr.Observe(sample(at(1), 1, skipped(part(0, 1000, 0, time.Time{}), 990)), at(1.5))
	if st.Skipped != 993 {
		t.Fatalf("the same reading again: %d skipped in all, want 993", st.Skipped)
	}
	st = tr.Observe(sample(at(2), 1, part(0, 1400, 0, time.Time{})), at(2))
	if st.ConsumeRateInstant != 400 || st.SkipRateInstant != 0 || st.Skipped != 993 {
		t.Fatalf("consumed %.0f/s, skipped %.0f/s, %d in all; want 400, 0, 993", st.ConsumeRateInstant, st.SkipRateInstant, st.Skipped)
	}
	// Whether anybody counts: the newest sample's word.
	for _, on := range []bool{true, false} {
		smp := sample(at(3), 1, part(0, 1800, 0, time.Time{}))
		smp.SkipsCounted = on
		if st = tr.Observe(smp, at(3)); st.SkipsCounted != on {
			t.Errorf("SkipsCounted %v from a sample that says %v", st.SkipsCounted, on)
		}
	}
}

// TestReportedSkipsCounted: a Kafka consumer's reports carry the running
// count of the records its guard skipped (Report.Skipped); the growth
// between two readings of the same member is the partition's Skipped. A
// new member (a rebalance) or a count that went back (a restarted
// reporter) restarts it and counts nothing: its total is no interval's.
func TestReportedSkipsCounted(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(sec(s)) }
	reported := func(s float64, end, pos, skipped int64, member string) Sample {
		p := part(0, end, 0, time.Time{})
		p.Committed = 0
		p.Reported = Report{At: at(s), Position: pos, Skipped: skipped, SkipsGiven: true, Member: member}
		return sample(at(s), 1, p)
	}
	tr := NewTracker(nil)
	steps := []struct {
		s              float64
		end, pos, skip int64
		member         string
		wantRate       float64
		wantTotal      int64
	}{
		{0, 1000, 1000, 40, "m1", 0, 0},      // first sight: a total, no interval's
		{1, 2000, 2000, 940, "m1", 900, 900}, // 1,000 consumed, 900 of them skipped
		{2, 2400, 2400, 940, "m1", 0, 900},   // 400 done
		{3, 2800, 2800, 30, "m2", 0, 900},    // a new member: restart
		{4, 3200, 3200, 80, "m2", 50, 950},   // +50
		{5, 3600, 3600, 10, "m2", 0, 950},    // went back: restart
	}
	for _, c := range steps {
		st := tr.Observe(reported(c.s, c.end, c.pos, c.skip, c.member), at(c.s))
		if st.Skipped != c.wantTotal || (c.s > 0 && st.SkipRateInstant != c.wantRate) {
			t.Fatalf("at +%.0fs: %d skipped in all, %.0f/s; want %d, %.0f/s", c.s, st.Skipped, st.SkipRateInstant, c.wantTotal, c.wantRate)
		}
	}
	// A member whose reports carried no count (none skipped yet): its
	// first skips are growth, not a new member's total (lagbridge demo:
	// 6 of 591 counted, the first burst of each partition lost).
	tr = NewTracker(nil)
	for i, c := range []struct{ skip, wantTotal int64 }{{0, 0}, {0, 0}, {300, 300}, {420, 420}} {
		s := float64(i)
		if st := tr.Observe(reported(s, 1000*int64(i+1), 1000*int64(i+1), c.skip, "m1"), at(s)); st.Skipped != c.wantTotal {
			t.Fatalf("member m1's reading %d (count %d): %d skipped in all, want %d", i, c.skip, st.Skipped, c.wantTotal)
		}
	}
}

// A report's count is counted only as far as it can be true: its growth
// between back-to-back fresh reports of the same member, capped at the
// partition's move in the reading, summed without wrapping. Each case
// read the count's jump as one reading's skips before (kskips review,
// findings 1-3).
func TestReportedSkipsBounded(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(sec(s)) }
	obs := func(tr *Tracker, s float64, end, committed int64, rep Report) State {
		p := part(0, end, end-committed, time.Time{})
		p.Committed = committed
		p.Reported = rep
		return tr.Observe(sample(at(s), 1, p), at(s))
	}
	// 1. A sender that stripped `skipped` (an older replica refused it)
	// sends it again: the upgraded daemon saw m1 at 0, then its running
	// count since it started (2,000,000) in a reading that moved 400.
	// Absent is not 0: the count restarts, nothing is counted. A count
	// given as 0 that jumps counts at most the move.
	for _, given := range []bool{false, true} {
		tr := NewTracker(nil)
		for i := range 5 {
			pos := int64(1000 * (i + 1))
			obs(tr, float64(i), pos, 0, Report{At: at(float64(i)), Position: pos, SkipsGiven: given, Member: "m1"})
		}
		st := obs(tr, 5, 5400, 0, Report{At: at(5), Position: 5400, Skipped: 2_000_000, SkipsGiven: true, Member: "m1"})
		if want := map[bool]int64{false: 0, true: 400}[given]; st.Skipped != want || st.SkipRateInstant > st.ConsumeRateInstant {
			t.Errorf("a lifetime count after reports that gave it: %v, in a reading that moved 400: %d skipped, %.0f/s against %.0f/s consumed; want %d",
				given, st.Skipped, st.SkipRateInstant, st.ConsumeRateInstant, want)
		}
	}
	// 2. The reports lapse for 60 s (the commits count the gap, 400/s,
	// 300/s of it skipped), then come back from the same member: the
	// gap's growth is no one reading's.
	tr := NewTracker(nil)
	obs(tr, 0, 1000, 900, Report{At: at(0), Position: 1000, Skipped: 10, SkipsGiven: true, Member: "m1"})
	obs(tr, 1, 1400, 1000, Report{At: at(1), Position: 1400, Skipped: 20, SkipsGiven: true, Member: "m1"})
	for s := int64(2); s <= 61; s++ {
		obs(tr, float64(s), 1400+400*(s-1), 1400+400*(s-2), Report{At: at(1), Position: 1400, Skipped: 20, SkipsGiven: true, Member: "m1"})
	}
	st := obs(tr, 62, 1400+400*61, 1400+400*60, Report{At: at(62), Position: 1400 + 400*61, Skipped: 20 + 300*61, SkipsGiven: true, Member: "m1"})
	if st.Skipped != 10 || st.SkipRateInstant != 0 {
		t.Errorf("reports back after a 60 s lapse: %d skipped in all, %.0f/s; want 10, 0/s", st.Skipped, st.SkipRateInstant)
	}
	if st = obs(tr, 63, 1400+400*62, 1400+400*60, Report{At: at(63), Position: 1400 + 400*62, Skipped: 20 + 300*62, SkipsGiven: true, Member: "m1"}); st.Skipped != 310 {
		t.Errorf("the next report: %d skipped in all, want 310 (counting again)", st.Skipped)
	}
	// 3. A reporter alternating 0 and MaxSkipped on 1,024 partitions:
	// no partition counts more than it moved, no sum goes negative.
	tr = NewTracker(nil)
	for i := range 4 {
		var ps []PartitionSample
		for id := int32(0); id < 1024; id++ {
			p := part(id, int64(100*(i+1)), 0, time.Time{})
			p.Committed = 0
			p.Reported = Report{At: at(float64(i)), Position: int64(100 * (i + 1)), Skipped: int64(i%2) << 53, SkipsGiven: true, Member: "m1"}
			ps = append(ps, p)
		}
		st = tr.Observe(sample(at(float64(i)), 1, ps...), at(float64(i)))
		if st.Skipped < 0 || st.Skipped > int64(1024*100*i) || st.SkipRateInstant < 0 {
			t.Fatalf("reading %d: %d skipped in all, %g/s; want 0 to the moves' %d", i, st.Skipped, st.SkipRateInstant, 1024*100*i)
		}
		for _, p := range st.Partitions {
			if p.Skipped < 0 || p.Skipped > 100 {
				t.Fatalf("reading %d, partition %d: %d skipped, want 0 to its move (100)", i, p.Partition, p.Skipped)
			}
		}
	}
}

// addSat saturates instead of wrapping.
func TestAddSat(t *testing.T) {
	if got := addSat(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Errorf("addSat(MaxInt64-1, 5) = %d, want MaxInt64", got)
	}
	if got := addSat(3, 4); got != 7 {
		t.Errorf("addSat(3, 4) = %d, want 7", got)
	}
}
