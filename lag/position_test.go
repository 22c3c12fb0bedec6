package lag

import (
	"math"
	"strings"
	"testing"
	"time"
)

// sim is a partition written at a steady rate from t0 (record o written at
// t0 + o/produce seconds) and read by a consumer that commits its position
// every commitEvery, starting at commitPhase.
type sim struct {
	produce     float64 // records per second
	behind      float64 // the consumer's real lag in seconds of production
	commitEvery time.Duration
	commitPhase time.Duration
}

func (s sim) end(at time.Duration) int64 { return int64(at.Seconds() * s.produce) }

// real is the consumer's real position at at.
func (s sim) real(at time.Duration) int64 { return max(0, s.end(at-sec(s.behind))) }

// committed is the position of the newest commit made by at.
func (s sim) committed(at time.Duration) int64 {
	if at < s.commitPhase {
		return 0
	}
	n := (at - s.commitPhase) / s.commitEvery
	return s.real(s.commitPhase + n*s.commitEvery)
}

// written is when record o was written.
func (s sim) written(o int64) time.Time { return t0.Add(sec(float64(o) / s.produce)) }

// reading is what a broker adapter reads at at.
func (s sim) reading(at time.Duration) PartitionSample {
	end, c := s.end(at), s.committed(at)
	p := PartitionSample{Partition: 0, End: end, Committed: c, Lag: end - c, HeadKnown: true}
	if c < end {
		p.HeadTime = s.written(c)
	}
	return p
}

// TestCommitCadence is the 5 s auto-commit consumer of franz-go's and
// Java's defaults, read every second: 1,000 records/s written, consumed at
// the same pace half a second behind. By its commits alone it reads
// stalled four seconds in five, 5x faster in the fifth, and up to 5.5 s
// behind (lagging against a 2 s deadline). The Tracker learns the 5 s
// cadence, keeps the consume rate steady, and estimates the position to
// within half an observation interval of consumption.
func TestCommitCadence(t *testing.T) {
	s := sim{produce: 1000, behind: 0.5, commitEvery: 5 * time.Second, commitPhase: sec(0.3)}
	tr := NewTracker(func(Target) Rules { return Rules{LagAge: 2 * time.Second} })
	var worstCommitted, worstEstimate int64
	var worstAge time.Duration
	for i := 1; i <= 60; i++ {
		at := time.Duration(i) * time.Second
		now := t0.Add(at)
		st := tr.Observe(sample(now, 1, s.reading(at)), now)
		if i < 17 { // three commits seen: two intervals, a measured rate
			continue
		}
		realLag := s.end(at) - s.real(at)
		realAge := now.Sub(s.written(s.real(at)))
		if st.CommitInterval != 5*time.Second {
			t.Fatalf("%v: commit interval %v, want 5s", at, st.CommitInterval)
		}
		if math.Abs(st.ConsumeRate-1000) > 100 || st.ConsumeRateInstant <= 0 {
			t.Fatalf("%v: consume rate %.0f (instant %.0f), want 1000 +- 10%% and never 0", at, st.ConsumeRate, st.ConsumeRateInstant)
		}
		if st.Status != StatusOK {
			t.Fatalf("%v: status %s (%s), want ok: the consumer is 0.5 s behind", at, st.Status, st.Reason)
		}
		if st.CommittedLag != s.end(at)-s.committed(at) {
			t.Fatalf("%v: committed lag %d, want the broker's %d", at, st.CommittedLag, s.end(at)-s.committed(at))
		}
		if st.Lag != st.CommittedLag && (st.Source != SourceEstimate || st.Uncertainty <= 0 || st.Uncertainty > 6*time.Second) {
			t.Fatalf("%v: source %q uncertainty %v for an estimate", at, st.Source, st.Uncertainty)
		}
		worstCommitted = max(worstCommitted, abs(st.CommittedLag-realLag))
		worstEstimate = max(worstEstimate, abs(st.Lag-realLag))
		worstAge = max(worstAge, st.HeadAge-realAge, realAge-st.HeadAge)
	}
	t.Logf("worst error against the real lag: commits %d, estimate %d; head age error %v", worstCommitted, worstEstimate, worstAge)
	// Half an observation interval of consumption, plus rounding.
	if worstEstimate > 550 {
		t.Fatalf("estimate off the real lag by up to %d records, want <= 550", worstEstimate)
	}
	if worstCommitted < 4000 {
		t.Fatalf("the commits alone were off by only %d: the case does not test the estimate", worstCommitted)
	}
	if worstAge > sec(0.55) {
		t.Fatalf("estimated head age off by up to %v, want <= 0.55s", worstAge)
	}
}

func abs(x int64) int64 { return max(x, -x) }

// TestEstimateStopsWithTheConsumer: a 5 s committer that stops right after
// a commit. The estimate advances at most one commit interval plus one
// reading past the last commit, then the lag grows with production, the
// measured rate decays, and the target is stalled once StallAfter has
// passed since the estimated progress stopped, not earlier.
func TestEstimateStopsWithTheConsumer(t *testing.T) {
	s := sim{produce: 1000, behind: 0.5, commitEvery: 5 * time.Second, commitPhase: sec(0.3)}
	rules := Rules{LagAge: 2 * time.Second, StallAfter: 30 * time.Second}
	tr := NewTracker(func(Target) Rules { return rules })
	stopAt := 30*time.Second + sec(0.3) // the last commit
	var st State
	for i := 1; i <= 80; i++ {
		at := time.Duration(i) * time.Second
		now := t0.Add(at)
		p := s.reading(at)
		if at > stopAt {
			c := s.committed(stopAt)
			p = PartitionSample{Partition: 0, End: s.end(at), Committed: c, Lag: s.end(at) - c, HeadKnown: true, HeadTime: s.written(c)}
		}
		st = tr.Observe(sample(now, 1, p), now)
		switch {
		case at == 40*time.Second:
			// Ten seconds after the last commit: the estimate went at
			// most 5 s + 1 s past it.
			if maxPos := s.committed(stopAt) + 6000; st.Partitions[0].Position > maxPos {
				t.Fatalf("at %v: estimated position %d past %d", at, st.Partitions[0].Position, maxPos)
			}
			if st.ConsumeRate > 500 {
				t.Fatalf("at %v: consume rate %.0f, want decaying", at, st.ConsumeRate)
			}
		case at < 66*time.Second && st.Status == StatusStalled:
			t.Fatalf("at %v: stalled before StallAfter after the estimated progress stopped (%v)", at, st.LastProgress.Sub(t0))
		}
	}
	if st.Status != StatusStalled {
		t.Fatalf("status %s (%s), want stalled", st.Status, st.Reason)
	}
}

// TestDateRecord is the worked example of the Tracker's doc.
func TestDateRecord(t *testing.T) {
	at := func(s float64) int64 { return t0.Add(sec(s)).UnixNano() }
	pt := &partTrack{ends: []endPoint{{off: 2000, first: at(2), last: at(2)}, {off: 3000, first: at(4), last: at(4)}}}
	if got := pt.dateRecord(1000, t0, 2500); !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("record 2500 dated %v, want 12:00:03", got.Sub(t0))
	}
	// First sight: end 5,000 from 12:00:00 to 12:00:10, then 5,600 at
	// 12:00:11: record 5,000 was written after 12:00:10.
	pt = &partTrack{ends: []endPoint{{off: 5000, first: at(0), last: at(10)}, {off: 5600, first: at(11), last: at(11)}, {off: 6200, first: at(13), last: at(13)}}}
	if got := pt.dateRecord(5000, t0, 5000); !got.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("record 5000 dated %v, want 12:00:10", got.Sub(t0))
	}
	// Clock skew: an end point dated before the anchor never dates a
	// record before it.
	pt = &partTrack{ends: []endPoint{{off: 2000, first: at(-5), last: at(-5)}}}
	if got := pt.dateRecord(1000, t0, 1500); got.Before(t0) {
		t.Fatalf("record dated %v, before its anchor", got.Sub(t0))
	}
}

// TestFirstSight: a group with live members and no commit is measured from
// the end offset when first seen live; never seen live, its lag stays
// unknown; its first commit takes over.
func TestFirstSight(t *testing.T) {
	none := func(end int64) PartitionSample { return PartitionSample{Partition: 0, End: end, Committed: -1} }
	live := func(at time.Time, live Liveness, p PartitionSample) Sample {
		s := sample(at, 1, p)
		s.Live = live
		return s
	}
	rules := Rules{LagAge: 2 * time.Second}
	t.Run("live", func(t *testing.T) {
		tr := NewTracker(func(Target) Rules { return rules })
		var st State
		// Idle topic for 10 s, then 600 records/s.
		for i := 0; i <= 13; i++ {
			at := t0.Add(time.Duration(i) * time.Second)
			end := int64(5000)
			if i > 10 {
				end += int64(i-10) * 600
			}
			st = tr.Observe(live(at, LiveYes, none(end)), at)
		}
		t.Logf("lag %d head age %v source %s status %s (%s)", st.Lag, st.HeadAge, st.Source, st.Status, st.Reason)
		if st.Lag != 1800 || st.Source != SourceFirstSight || st.Uncommitted != 0 {
			t.Fatalf("lag %d source %q uncommitted %d, want 1800 from first sight, counted", st.Lag, st.Source, st.Uncommitted)
		}
		if st.HeadAge != 3*time.Second || st.Status != StatusLagging {
			t.Fatalf("head age %v status %s, want 3s (written after the reading at 12:00:10), lagging", st.HeadAge, st.Status)
		}
		// Production is measured; consumption, unknown without a
		// commit, is not invented.
		if !st.RatesKnown || st.ProduceRateInstant != 600 || st.ConsumeRate != 0 {
			t.Fatalf("rates known %v produce %v consume %v, want known, 600, 0", st.RatesKnown, st.ProduceRateInstant, st.ConsumeRate)
		}
		// The first commit takes over, and what lies between the
		// first-sight position and it was consumed (the consumer was
		// at or before the end when first seen): a move like any
		// commit's, 7,300 - 5,000 in this interval.
		at := t0.Add(14 * time.Second)
		st = tr.Observe(live(at, LiveYes, part(0, 7400, 100, at.Add(-sec(0.1)))), at)
		if st.Source != SourceCommits || st.Lag != 100 || st.ConsumeRateInstant != 2300 || st.Corrected {
			t.Fatalf("after the first commit: source %q lag %d instant consume %v corrected %v, want commits, 100, 2300, false",
				st.Source, st.Lag, st.ConsumeRateInstant, st.Corrected)
		}
	})
	t.Run("first commit behind first sight", func(t *testing.T) {
		// A consumer that started before it was first seen (reset to
		// earliest) commits behind the first-sight position: it
		// corrects it, and counts nothing consumed.
		tr := NewTracker(func(Target) Rules { return rules })
		for i := 0; i <= 3; i++ {
			at := t0.Add(time.Duration(i) * time.Second)
			tr.Observe(live(at, LiveYes, none(5000+int64(i)*600)), at)
		}
		at := t0.Add(4 * time.Second)
		st := tr.Observe(live(at, LiveYes, part(0, 7400, 4000, at.Add(-sec(8)))), at)
		if st.Source != SourceCommits || st.Lag != 4000 || st.ConsumeRateInstant != 0 || !st.Corrected {
			t.Fatalf("source %q lag %d instant consume %v corrected %v, want commits, 4000, 0, true",
				st.Source, st.Lag, st.ConsumeRateInstant, st.Corrected)
		}
	})
	t.Run("never live", func(t *testing.T) {
		for _, l := range []Liveness{LiveNo, LiveUnknown} {
			tr := NewTracker(func(Target) Rules { return rules })
			var st State
			for i := range 5 {
				at := t0.Add(time.Duration(i) * time.Second)
				st = tr.Observe(live(at, l, none(5000+int64(i)*100)), at)
			}
			if st.Lag != 0 || st.Uncommitted != 1 || st.Source != "" {
				t.Fatalf("%s: lag %d uncommitted %d source %q, want unknown", l, st.Lag, st.Uncommitted, st.Source)
			}
		}
	})
}

// TestAbandoned is the rule table of liveness: a target with no live
// consumer from its first reading on is abandoned at once (never-live);
// one seen live (LiveYes, or LiveUnknown, which counts as live) keeps
// binding for AbandonAfter after the last live reading, then is
// abandoned; either binds again from the first live reading. Whatever
// its lag.
func TestAbandoned(t *testing.T) {
	rules := Rules{AbandonAfter: time.Minute, StallAfter: 30 * time.Second}
	cases := []struct {
		name string
		live []Liveness // one reading every 10 s
		want Status
		rule string
	}{
		// A daemon restart beside a dead group: abandoned at the first reading.
		{"dead at first sight", []Liveness{LiveNo}, StatusAbandoned, "never-live"},
		// And it stays so, whatever AbandonAfter.
		{"dead since first sight", []Liveness{LiveNo, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo}, StatusAbandoned, "never-live"},
		// Seen live once, idle for 50 s: the grace keeps it binding (stopped: no members, no progress).
		{"live then idle within the grace", []Liveness{LiveYes, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo}, StatusStopped, "no-progress"},
		// Idle for a minute since the live reading: abandoned.
		{"live then idle past the grace", []Liveness{LiveYes, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo}, StatusAbandoned, "abandoned"},
		// Dead from first sight, then a consumer joins: it binds at once
		// (head an hour old: lagging).
		{"dead then live", []Liveness{LiveNo, LiveNo, LiveYes}, StatusLagging, "over-age"},
		// Dead, live once, idle since: the grace counts from the live reading.
		{"dead, live, idle within the grace", []Liveness{LiveNo, LiveYes, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo}, StatusStopped, "no-progress"},
		// A rebalance: one idle reading among live ones.
		{"rebalance", []Liveness{LiveYes, LiveYes, LiveYes, LiveNo, LiveYes, LiveYes, LiveYes}, StatusStalled, "no-progress"},
		// Unknown counts as live: never abandoned.
		{"unknown", []Liveness{LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown}, StatusStalled, "no-progress"},
		// A reading that cannot tell after idle ones keeps the last known:
		// one unanswered describe does not revive a dead group (it made
		// it bind for AbandonAfter: stopped, then its producers stopped).
		{"dead, unknown once", []Liveness{LiveNo, LiveNo, LiveUnknown}, StatusAbandoned, "never-live"},
		{"dead, unknown once, dead", []Liveness{LiveNo, LiveNo, LiveUnknown, LiveNo, LiveNo}, StatusAbandoned, "never-live"},
		{"live, idle past the grace through an unknown", []Liveness{LiveYes, LiveNo, LiveNo, LiveNo, LiveNo, LiveUnknown, LiveNo, LiveNo}, StatusAbandoned, "abandoned"},
		// Unknown after a live reading is live, as before.
		{"live, unknown", []Liveness{LiveYes, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown, LiveUnknown}, StatusStalled, "no-progress"},
		// Unknown at first sight, idle since: seen live, so the grace applies.
		{"unknown then idle within the grace", []Liveness{LiveUnknown, LiveNo, LiveNo, LiveNo, LiveNo, LiveNo}, StatusStopped, "no-progress"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(func(Target) Rules { return rules })
			var st State
			for i, l := range c.live {
				at := t0.Add(time.Duration(i) * 10 * time.Second)
				members := 1
				if l == LiveNo {
					members = 0
				}
				s := sample(at, members, part(0, 1000, 500, t0.Add(-time.Hour)))
				s.Live = l
				st = tr.Observe(s, at)
			}
			if st.Status != c.want || st.Rule != c.rule {
				t.Fatalf("status %s (%s: %s), want %s (%s)", st.Status, st.Rule, st.Reason, c.want, c.rule)
			}
			// States re-evaluates to the same verdict.
			if again := tr.States(st.At)[0]; again.Status != st.Status || again.Rule != st.Rule {
				t.Fatalf("States: %s (%s), Observe: %s (%s)", again.Status, again.Rule, st.Status, st.Rule)
			}
		})
	}
}

// TestLastActive: a reading that sees no consumer attached (LiveNo) but
// says when the broker last saw one take work (Sample.LastActive, NATS's
// last delivery or acknowledgement) counts the target as seen live then:
// the first reading after a daemon restart binds a consumer that fetched a
// moment ago, and only one whose last activity is past the grace is
// abandoned. LastActive never moves LastLive back, nor past the reading.
func TestLastActive(t *testing.T) {
	rules := Rules{AbandonAfter: time.Minute, StallAfter: 30 * time.Second}
	cases := []struct {
		name     string
		first    Liveness      // the first reading's Live, at t0
		active   time.Duration // the second reading's LastActive from t0; 0: none
		want     Status
		rule     string
		lastLive time.Duration // State.LastLive from t0; -1: zero
	}{
		// The daemon's first reading is the second here: Live no.
		{"no activity known", LiveNo, 0, StatusAbandoned, "never-live", -1},
		// Delivered 5 s before the reading (at +10 s): live then, binds.
		{"active a moment ago", LiveNo, 5 * time.Second, StatusLagging, "over-age", 5 * time.Second},
		// Last delivered two minutes before the first reading: past the grace.
		{"active long ago", LiveNo, -2 * time.Minute, StatusAbandoned, "abandoned", -2 * time.Minute},
		// The broker's clock ahead of the daemon's: counted at the reading.
		{"active after the reading", LiveNo, time.Minute, StatusLagging, "over-age", 10 * time.Second},
		// Seen live at t0; an older activity does not move LastLive back.
		{"older than seen live", LiveYes, -time.Hour, StatusLagging, "over-age", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(func(Target) Rules { return rules })
			s := sample(t0, 0, part(0, 1000, 500, t0.Add(-time.Hour)))
			s.Live = c.first
			if c.first == LiveYes {
				tr.Observe(s, t0)
			}
			at := t0.Add(10 * time.Second)
			s = sample(at, 0, part(0, 1000, 500, t0.Add(-time.Hour)))
			s.Live = LiveNo
			if c.active != 0 {
				s.LastActive = t0.Add(c.active)
			}
			st := tr.Observe(s, at)
			if st.Status != c.want || st.Rule != c.rule {
				t.Fatalf("status %s (%s: %s), want %s (%s)", st.Status, st.Rule, st.Reason, c.want, c.rule)
			}
			want := time.Time{}
			if c.lastLive != -1 {
				want = t0.Add(c.lastLive)
			}
			if !st.LastLive.Equal(want) {
				t.Errorf("LastLive %v, want %v", st.LastLive, want)
			}
		})
	}
}

// TestConsumingWithoutMembersIsNotAbandoned: a Kafka consumer that assigns
// its partitions itself and commits to the group (Flink's checkpoints, any
// assign-and-commit consumer) is never a member of the group, so every
// reading says LiveNo; its commits moving, or its own fresh reports, show
// that it consumes, and such a target is never abandoned. A group whose
// commits stand still is, as before, also while retention moves its
// position (the log start) past its commit.
func TestConsumingWithoutMembersIsNotAbandoned(t *testing.T) {
	rules := Rules{AbandonAfter: time.Minute, StallAfter: 30 * time.Second, ReportFresh: 3 * time.Second}
	cases := []struct {
		name      string
		commit    func(i int) int64 // the committed offset at reading i
		reports   bool              // the consumer reports its position at every reading
		retention bool              // the log start passes the commit, 100 a reading
		want      Status
	}{
		{"commits moving", func(i int) int64 { return 500 + int64(i)*100 }, false, false, StatusLagging},
		{"commits standing", func(int) int64 { return 500 }, false, false, StatusAbandoned},
		{"retention past a standing commit", func(int) int64 { return 500 }, false, true, StatusAbandoned},
		{"fresh reports", func(int) int64 { return 500 }, true, false, StatusLagging},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(func(Target) Rules { return rules })
			var st State
			// Five minutes, one reading every 10 s; the end grows by
			// 100 a reading and the head stays 20 s old.
			for i := range 31 {
				at := t0.Add(time.Duration(i) * 10 * time.Second)
				end := 1000 + int64(i)*100
				p := part(0, end, end-c.commit(i), at.Add(-20*time.Second))
				if c.retention {
					p.LogStart = 600 + int64(i)*100
					p.Lag = end - p.LogStart
				}
				if c.reports {
					p.Reported = Report{At: at, Position: c.commit(i) + 50, HeadTime: at.Add(-20 * time.Second)}
				}
				s := sample(at, 0, p)
				s.Live = LiveNo
				st = tr.Observe(s, at)
				// The first reading cannot see a commit move: never
				// live so far, abandoned (never-live) until the second.
				// A fresh report shows it from the first.
				firstDead := i == 0 && !c.reports
				if c.want != StatusAbandoned && st.Status == StatusAbandoned && !(firstDead && st.Rule == "never-live") {
					t.Fatalf("reading %d: abandoned (%s: %s) while consuming", i, st.Rule, st.Reason)
				}
			}
			if st.Status != c.want {
				t.Fatalf("status %s (%s: %s), want %s", st.Status, st.Rule, st.Reason, c.want)
			}
		})
	}
}

// TestConsumerReport: a fresh report overrides the commits, a report older
// than ReportFresh falls back to them, an idle report dates the records
// that came after it.
func TestConsumerReport(t *testing.T) {
	rules := Rules{ReportFresh: 3 * time.Second}
	withReport := func(p PartitionSample, r Report) PartitionSample { p.Reported = r; return p }
	head := t0.Add(-10 * time.Second)
	cases := []struct {
		name    string
		report  Report
		lag     int64
		headAge time.Duration
		source  Source
	}{
		// The consumer handles record 9,900, written 0.5 s ago; it
		// committed 9,000 long ago.
		{"fresh", Report{At: t0.Add(-time.Second), Position: 9900, HeadTime: t0.Add(-sec(0.5))}, 100, sec(0.5), SourceConsumer},
		// Four seconds old: the commit stands.
		{"old", Report{At: t0.Add(-4 * time.Second), Position: 9900, HeadTime: t0.Add(-sec(0.5))}, 1000, 10 * time.Second, SourceCommits},
		// A position past the end (clocks, races) is the end.
		{"past the end", Report{At: t0, Position: 20000}, 0, 0, SourceConsumer},
		// None.
		{"none", Report{}, 1000, 10 * time.Second, SourceCommits},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(func(Target) Rules { return rules })
			st := tr.Observe(sample(t0, 1, withReport(part(0, 10000, 1000, head), c.report)), t0)
			if st.Lag != c.lag || st.HeadAge != c.headAge || st.Source != c.source || st.CommittedLag != 1000 {
				t.Fatalf("lag %d head age %v source %q committed lag %d; want %d, %v, %q, 1000",
					st.Lag, st.HeadAge, st.Source, st.CommittedLag, c.lag, c.headAge, c.source)
			}
		})
	}
	t.Run("nats sequences", func(t *testing.T) {
		// A NATS consumer: ack floor 4,999 (Committed 5,000, a stream
		// sequence), 300 unprocessed, End a counter of 1,200. It
		// reports sequence 5,200 in hand: 200 past the floor.
		tr := NewTracker(func(Target) Rules { return rules })
		s := Sample{Target: Target{Kind: KindNATS, Cluster: "js", Topic: "S", Group: "c"}, At: t0, Members: 1, Partitions: []PartitionSample{{
			End: 1200, Committed: 5000, Lag: 300, LogStart: 4000, HeadTime: head, HeadKnown: true,
			Reported: Report{At: t0, Position: 5200, HeadTime: t0.Add(-time.Second)},
		}}}
		st := tr.Observe(s, t0)
		if st.Lag != 100 || st.HeadAge != time.Second || st.Source != SourceConsumer {
			t.Fatalf("lag %d head age %v source %q; want 100, 1s, consumer", st.Lag, st.HeadAge, st.Source)
		}
	})
	t.Run("nats report past the end", func(t *testing.T) {
		// An unfiltered NATS consumer acking out of order: ack floor
		// 4,999, last sequence 10,000, 300 unprocessed. A report of
		// any sequence past the last, up to the largest int64 the
		// protocol lets through, is the end: lag 0, never more than the
		// commits say.
		for _, seq := range []int64{10_500, math.MaxInt64 - 1000, math.MaxInt64} {
			tr := NewTracker(func(Target) Rules { return rules })
			s := Sample{Target: Target{Kind: KindNATS, Cluster: "js", Topic: "S", Group: "c"}, At: t0, Members: 1, Partitions: []PartitionSample{{
				End: 10001, Committed: 5000, Lag: 300, LogStart: 1, HeadTime: head, HeadKnown: true,
				Reported: Report{At: t0, Position: seq},
			}}}
			if st := tr.Observe(s, t0); st.Lag != 0 || st.Source != SourceConsumer {
				t.Errorf("report of sequence %d: lag %d source %q; want 0, consumer", seq, st.Lag, st.Source)
			}
		}
	})
	t.Run("reports stop", func(t *testing.T) {
		tr := NewTracker(func(Target) Rules { return rules })
		r := Report{At: t0, Position: 10000}
		tr.Observe(sample(t0, 1, withReport(part(0, 10000, 1000, head), r)), t0)
		// The overlay keeps the last report; the tracker ages it.
		now := t0.Add(4 * time.Second)
		st := tr.States(now)[0]
		if st.Source != SourceCommits || st.Lag != 1000 {
			t.Fatalf("4 s after the last report: source %q lag %d, want the commits' 1000", st.Source, st.Lag)
		}
	})
	t.Run("idle report dates later records", func(t *testing.T) {
		tr := NewTracker(func(Target) Rules { return rules })
		tr.Observe(sample(t0, 1, part(0, 10000, 0, time.Time{})), t0)
		at := t0.Add(time.Second)
		// Caught up at 10,000 at t0; 200 records came in the second since.
		st := tr.Observe(sample(at, 1, withReport(part(0, 10200, 200, t0.Add(sec(0.5))), Report{At: t0, Position: 10000})), at)
		if st.Source != SourceConsumer || st.Lag != 200 || st.HeadAge != time.Second {
			t.Fatalf("source %q lag %d head age %v, want consumer, 200, 1s (written after the report at t0)", st.Source, st.Lag, st.HeadAge)
		}
	})
}

// TestPruneAndFail: targets the adapter no longer lists leave at once; a
// failed cycle's cause shows in Err and, once stale, in the reason.
func TestPruneAndFail(t *testing.T) {
	other := Target{Kind: KindKafka, Cluster: "c1", Topic: "gone", Group: "billing"}
	tr := NewTracker(nil)
	keep := sample(t0, 1, part(0, 10, 0, time.Time{}))
	tr.Observe(keep, t0)
	tr.Observe(Sample{Target: other, At: t0, Members: 1, Partitions: []PartitionSample{part(0, 10, 0, time.Time{})}}, t0)
	if gone := tr.Prune([]Sample{keep, keep}); len(gone) != 1 || gone[0] != other || tr.Len() != 1 {
		t.Fatalf("prune: gone %v, %d left; want %v gone, 1 left", gone, tr.Len(), other)
	}
	if gone := tr.Prune([]Sample{keep}); len(gone) != 0 {
		t.Fatalf("prune again: %v", gone)
	}
	// Once a cycle: nothing leaving costs no allocation.
	if n := testing.AllocsPerRun(100, func() { tr.Prune([]Sample{keep}) }); n != 0 {
		t.Fatalf("prune with nothing gone: %v allocations", n)
	}
	tr.Fail("metadata: broker 1: EOF")
	st := tr.States(t0.Add(time.Minute))[0]
	if st.Status != StatusStale || st.Err != "metadata: broker 1: EOF" || !strings.HasSuffix(st.Reason, "metadata: broker 1: EOF") {
		t.Fatalf("status %s err %q reason %q", st.Status, st.Err, st.Reason)
	}
	// A stale partition's error is the cause when the sample has none.
	at := t0.Add(2 * time.Minute)
	tr.Observe(sample(at, 1, PartitionSample{Partition: 0, Stale: true, Err: "list offsets: broker 2: EOF"}), at)
	if st := tr.States(at)[0]; !strings.HasSuffix(st.Reason, "partition 0: list offsets: broker 2: EOF") {
		t.Fatalf("reason %q does not name the partition's error", st.Reason)
	}
}

// TestLongCadenceIsNotAStall: a consumer that keeps up but commits once a
// minute, with StallAfter 30 s. Its commits alone show no progress for 60 s
// with a head 60 s old, which the no-progress rule would call stalled;
// once the cadence is known (the second commit), the estimate moves
// between commits and the target is never stalled.
func TestLongCadenceIsNotAStall(t *testing.T) {
	s := sim{produce: 100, behind: 1, commitEvery: time.Minute, commitPhase: 30 * time.Second}
	tr := NewTracker(func(Target) Rules { return Rules{StallAfter: 30 * time.Second, LagAge: 2 * time.Minute} })
	stalledBefore := false
	for i := 1; i <= 120; i++ {
		at := time.Duration(i) * 5 * time.Second
		now := t0.Add(at)
		st := tr.Observe(sample(now, 1, s.reading(at)), now)
		if st.CommitInterval == 0 {
			stalledBefore = stalledBefore || st.Status == StatusStalled
			continue
		}
		if st.Status == StatusStalled {
			t.Fatalf("%v: stalled (%s) with a cadence of %v", at, st.Reason, st.CommitInterval)
		}
	}
	if !stalledBefore {
		t.Fatal("the commits alone never read stalled before the cadence was known: the case does not test the estimate")
	}
}

// TestCadenceLearnedWhenCaughtUpAtCommits: a consumer that commits every
// 5 s and is caught up at each commit, because its producers were held
// back (a quota at 0) and were given work only after the commit: every move
// leaves no lag, and every reading between two moves sees some. Its cadence
// is learned (before, only intervals that started with lag at the move
// counted, so a drained consumer's cadence was never learned and its
// commits were read as they are: nothing consumed four seconds in five).
func TestCadenceLearnedWhenCaughtUpAtCommits(t *testing.T) {
	// 300 records are written in [5k+1.5, 5k+4.5) of every 5 s cycle;
	// the consumer commits everything written by 5k+0.5.
	end := func(at float64) int64 {
		cycles := math.Floor(at / 5)
		in := min(max(at-5*cycles-1.5, 0), 3)
		return int64(300*cycles + 100*in)
	}
	tr := NewTracker(nil)
	var st State
	for s := 1; s <= 26; s++ {
		at := float64(s)
		commit := math.Floor((at-0.5)/5)*5 + 0.5
		e, c := end(at), end(commit)
		p := PartitionSample{Partition: 0, End: e, Committed: c, Lag: e - c, HeadKnown: true}
		if p.Lag > 0 {
			p.HeadTime = t0.Add(sec(5*math.Floor(at/5) + 1.5))
		}
		st = tr.Observe(sample(t0.Add(sec(at)), 1, p), t0.Add(sec(at)))
	}
	if st.CommitInterval != 5*time.Second {
		t.Fatalf("commit interval %v, want 5s", st.CommitInterval)
	}
}

// consumerRun drives a Tracker with one partition written at prod(t)
// records/s and read by a consumer of capacity capa(t) records/s that
// commits the position it reached every 5 s (from 0.3 s), read every
// second for until seconds. each is called after every reading with the
// state and the true end and position.
func consumerRun(tb testing.TB, prod, capa func(t float64) float64, until float64, each func(at float64, st State, end, real float64)) {
	tb.Helper()
	tr := NewTracker(func(Target) Rules { return Rules{LagAge: 2 * time.Second} })
	const step = 0.01
	var end, real, committed float64
	var times []float64 // times[k]: when record k was written
	headAt := func(pos int64) time.Time {
		if pos < int64(len(times)) {
			return t0.Add(sec(times[pos]))
		}
		return t0.Add(sec(until))
	}
	nextCommit := 0.3
	for k := 1; float64(k)*step <= until+1e-9; k++ {
		t := float64(k) * step
		before := end
		end += prod(t) * step
		for range int(end) - int(before) {
			times = append(times, t)
		}
		real = min(end, real+capa(t)*step)
		if t >= nextCommit-1e-9 {
			committed = real
			nextCommit += 5
		}
		if k%100 != 0 {
			continue
		}
		e, c := int64(end), int64(committed)
		p := PartitionSample{Partition: 0, End: e, Committed: c, Lag: e - c, HeadKnown: true}
		if p.Lag > 0 {
			p.HeadTime = headAt(c)
		}
		now := t0.Add(sec(t))
		each(t, tr.Observe(sample(now, 1, p), now), end, real)
	}
}

// TestEstimateBetweenCommits: the position estimated between the 5 s
// commits of a consumer, against where it really is.
func TestEstimateBetweenCommits(t *testing.T) {
	step := func(at, before, after float64) func(float64) float64 {
		return func(t float64) float64 {
			if t < at {
				return before
			}
			return after
		}
	}
	t.Run("caught up, its producers given twice as much", func(t *testing.T) {
		// A consumer of 1,000/s written at 100/s, then (a quota raised)
		// at 200/s from 30.5 s: caught up at its commits, it keeps up
		// with the new rate between them. Read at the rate it consumed
		// from commit to commit (100/s), the estimate fell behind by
		// 100 records a second, a backlog that was not there.
		worst := 0.0
		consumerRun(t, step(30.5, 100, 200), func(float64) float64 { return 1000 }, 45, func(at float64, st State, end, real float64) {
			if at > 30 {
				worst = max(worst, float64(st.Lag)-(end-real))
			}
		})
		if worst > 20 {
			t.Fatalf("the estimated lag exceeded the real one by up to %.0f records, want <= 20", worst)
		}
	})
	t.Run("idle with nothing to commit, then written to", func(t *testing.T) {
		// Written at 100/s until 20 s, then nothing until 33.5 s (the
		// producers stick to other partitions: franz-go's default
		// partitioner), then 300/s, to a consumer of 1,000/s. Its
		// last move is the commit of 20.3 s; the commits of 25.3 and
		// 30.3 s had nothing to move. Seen with nothing to consume at
		// 33 s, it is caught up from then on, not since a commit more
		// than one commit interval old: read so, everything written
		// from 33.5 s to its next commit (35.3 s) was a backlog.
		worst := 0.0
		prod := func(t float64) float64 {
			switch {
			case t < 20:
				return 100
			case t < 33.5:
				return 0
			}
			return 300
		}
		consumerRun(t, prod, func(float64) float64 { return 1000 }, 35.2, func(at float64, st State, end, real float64) {
			if at > 33.5 {
				worst = max(worst, float64(st.Lag)-(end-real))
			}
		})
		if worst > 150 {
			t.Fatalf("the estimated lag exceeded the real one by up to %.0f records, want <= 150", worst)
		}
	})
	t.Run("drained, its producers resume", func(t *testing.T) {
		// A consumer of 100/s written at 150/s (behind at every commit),
		// its producers held back from 20 s to 32 s (it drains its
		// backlog of 1,000 and catches up), then writing at 300/s: it is
		// still a consumer of 100/s, and the estimate does not take it
		// for a faster one because it caught up while given nothing.
		prod := func(t float64) float64 {
			switch {
			case t < 20:
				return 150
			case t < 32:
				return 0
			}
			return 300
		}
		worst := 0.0
		consumerRun(t, prod, func(float64) float64 { return 100 }, 45, func(at float64, st State, end, real float64) {
			if at > 33 {
				worst = max(worst, (end-real)-float64(st.Lag))
			}
		})
		if worst > 150 {
			t.Fatalf("the estimated lag fell short of the real one by up to %.0f records, want <= 150", worst)
		}
	})
	t.Run("a commit behind the estimate", func(t *testing.T) {
		// Written at 500/s; the consumer's capacity drops from 1,000/s
		// to 200/s at 21 s. The estimate runs ahead until the next
		// commit, which lands behind it: that reading says so
		// (Corrected), and the consume rate is counted again from the
		// commit at the next reading (and every one that is not itself
		// a correction), not held at 0 until the consumer passes the
		// position the estimate had reached.
		var corrected []float64
		zeroAfter := 0
		consumerRun(t, func(float64) float64 { return 500 }, step(21, 1000, 200), 45, func(at float64, st State, end, real float64) {
			if st.Corrected {
				corrected = append(corrected, at)
			}
			if len(corrected) > 0 && !st.Corrected && st.ConsumeRateInstant <= 0 {
				t.Logf("%.0f s: lag %d, source %s, consumed nothing", at, st.Lag, st.Source)
				zeroAfter++
			}
		})
		if len(corrected) == 0 {
			t.Fatal("no reading was Corrected")
		}
		if zeroAfter > 0 {
			t.Fatalf("after the correction at %.0f s, %d readings that were no correction consumed nothing", corrected[0], zeroAfter)
		}
	})
}

// TestCadenceRelearnedWhileCaughtUp replays the first eleven readings of a
// kfake run (quota/testdata/ac1s1s-corrected.jsonl): a consumer that
// auto-commits every 1 s, read every 1 s, written to at 800/s over six
// partitions. Its commits land about when the readings are taken, so two
// of its first three intervals read 2 s (a commit just after a reading is
// seen one reading late). From the fourth reading on it is caught up at
// every commit and its committed offsets move at every reading while
// records keep coming: those moves show a 1 s cadence. Before, they were
// not counted (no lag at the move, none between), the 2 s stuck, and
// the eleventh reading estimated lag 0 where the commits showed 441.
func TestCadenceRelearnedWhileCaughtUp(t *testing.T) {
	// Per reading: the offset in ms after t0, then end and committed per
	// partition (-1: no commit yet).
	readings := []struct {
		ms    int
		parts [6][2]int64
	}{
		{285, [6][2]int64{{160, -1}, {123, -1}, {88, -1}, {145, -1}, {124, -1}, {139, -1}}},
		{1286, [6][2]int64{{265, 265}, {264, 264}, {194, 192}, {287, 286}, {249, 249}, {321, 321}}},
		{2285, [6][2]int64{{425, 265}, {380, 264}, {341, 192}, {418, 286}, {396, 249}, {420, 321}}},
		{3286, [6][2]int64{{531, 425}, {530, 380}, {495, 341}, {514, 418}, {545, 396}, {565, 420}}},
		{4287, [6][2]int64{{705, 705}, {658, 658}, {589, 589}, {629, 629}, {695, 695}, {704, 704}}},
		{5286, [6][2]int64{{867, 705}, {770, 658}, {741, 589}, {788, 629}, {802, 695}, {812, 704}}},
		{6288, [6][2]int64{{989, 989}, {915, 915}, {849, 849}, {946, 946}, {951, 951}, {930, 930}}},
		{7288, [6][2]int64{{1147, 1147}, {1013, 1013}, {980, 980}, {1052, 1052}, {1064, 1064}, {1124, 1124}}},
		{8289, [6][2]int64{{1232, 1232}, {1163, 1160}, {1139, 1138}, {1212, 1212}, {1188, 1188}, {1248, 1248}}},
		{9290, [6][2]int64{{1438, 1438}, {1257, 1257}, {1294, 1294}, {1322, 1322}, {1310, 1310}, {1362, 1359}}},
		{10291, [6][2]int64{{1533, 1466}, {1417, 1337}, {1434, 1375}, {1459, 1378}, {1456, 1375}, {1484, 1411}}},
	}
	tr := NewTracker(func(Target) Rules { return Rules{LagAge: 2 * time.Second} })
	var st State
	for _, rd := range readings {
		now := t0.Add(time.Duration(rd.ms) * time.Millisecond)
		var ps []PartitionSample
		for i, ec := range rd.parts {
			p := PartitionSample{Partition: int32(i), End: ec[0], Committed: ec[1], HeadKnown: true}
			if ec[1] >= 0 {
				p.Lag = ec[0] - ec[1]
			}
			if p.Lag > 0 {
				p.HeadTime = now.Add(-500 * time.Millisecond)
			}
			ps = append(ps, p)
		}
		st = tr.Observe(sample(now, 1, ps...), now)
	}
	if st.CommitInterval > 1500*time.Millisecond {
		t.Errorf("commit interval %v, want about 1s", st.CommitInterval)
	}
	if st.CommittedLag != 441 || st.Lag != st.CommittedLag {
		t.Errorf("lag %d (source %s) where the commits show %d: want the commits as they are", st.Lag, st.Source, st.CommittedLag)
	}
}

// commitsLearnedAtOneSecond is a consumer committing every 200 ms, 0.3 s
// behind, read at 1 s for 20 s: the tracker has learned its cadence at
// 1 s readings.
func commitsLearnedAtOneSecond() (sim, *Tracker) {
	s := sim{produce: 2000, behind: 0.3, commitEvery: 200 * time.Millisecond, commitPhase: sec(0.1)}
	tr := NewTracker(func(Target) Rules { return Rules{LagAge: 2 * time.Second} })
	for i := 1; i <= 20; i++ {
		at := time.Duration(i) * time.Second
		tr.Observe(sample(t0.Add(at), 1, s.reading(at)), t0.Add(at))
	}
	return s, tr
}

// readsCommitsAfterStop reads s's commits stopped at stop every 250 ms for
// a second after, and wants the committed figures at each reading, not an
// estimate run past them.
func readsCommitsAfterStop(t *testing.T, tr *Tracker, s sim, stop time.Duration, learned string) {
	t.Helper()
	c := s.committed(stop)
	for at := stop + 250*time.Millisecond; at <= stop+time.Second; at += 250 * time.Millisecond {
		now := t0.Add(at)
		p := PartitionSample{Partition: 0, End: s.end(at), Committed: c, Lag: s.end(at) - c, HeadKnown: true, HeadTime: s.written(c)}
		st := tr.Observe(sample(now, 1, p), now)
		if st.Lag != st.CommittedLag || st.Source != SourceCommits {
			t.Errorf("%v after the commits stopped: lag %d from %s, want the committed %d (commit interval %v, %s)",
				at-stop, st.Lag, st.Source, st.CommittedLag, st.CommitInterval, learned)
		}
	}
}

// TestFasterReadingsKeepCommitsExact: a consumer seen to commit at every
// 1 s reading has a learned cadence of 1 s, a measure of the readings, not
// of it. When the readings come every 250 ms (the daemon's loop observes
// faster while a policy is engaged) and the commits stop (the consumer is
// slowed in a long poll), it is read from its commits until it is seen to
// skip a reading, not estimated a cadence plus a reading past its last
// commit at its old rate: on kfake that estimate read a consumer slowed
// to 400 msg/s as caught up 0.2 s after its drop was seen, and the quota
// was opened to 9,267-13,901 msg/s (commit per poll, 5x, session 30).
// Red without seenGap: the estimated lag falls short of the committed.
func TestFasterReadingsKeepCommitsExact(t *testing.T) {
	s, tr := commitsLearnedAtOneSecond()
	stop := 20 * time.Second
	readsCommitsAfterStop(t, tr, s, stop, "learned at 1 s readings")
}

// TestFasterReadingsRunKeepCommitsExact: as TestFasterReadingsKeepCommitsExact,
// but the commits go on at the first two 250 ms readings after the 1 s ones
// (the daemon's trial of the engaged cadence on a commit-read target, or
// its switch as a policy engages) and stop only then: the cadence learned
// at 1 s is still most of the median, and the readings that follow must
// read the commit, not run an estimate a second past it. Red when seenGap
// keeps only the newest move's spacing (the second fast move resets it
// to 250 ms: lag from estimate below the committed at every reading after
// the stop).
func TestFasterReadingsRunKeepCommitsExact(t *testing.T) {
	s, tr := commitsLearnedAtOneSecond()
	stop := 20*time.Second + 500*time.Millisecond
	for _, at := range []time.Duration{stop - 250*time.Millisecond, stop} {
		if st := tr.Observe(sample(t0.Add(at), 1, s.reading(at)), t0.Add(at)); st.Lag != st.CommittedLag {
			t.Fatalf("%v: lag %d from %s, want the committed %d at a reading that saw a commit", at, st.Lag, st.Source, st.CommittedLag)
		}
	}
	readsCommitsAfterStop(t, tr, s, stop, "most of it learned at 1 s readings")
}
