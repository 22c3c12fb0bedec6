package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestReportedPoll: the poll start reportedPoll reads, and when it reads
// none (a partition read otherwise, at its own pace, without a count or a
// HeldFor, or two partitions whose reports show different poll starts);
// a partition without lag is left out. And moveSpan takes it only from a
// poll start seen at the move before (movePollAt at moveAt), never to
// shorten the readings' span.
func TestReportedPoll(t *testing.T) {
	at := leaseT0
	part := func(lagN int64, src lag.Source, edit func(*lag.Report)) lag.PartitionState {
		rep := lag.Report{At: at, Position: 10, HeadTime: at.Add(-time.Second), Held: 100, HeldFor: 300 * time.Millisecond}
		if edit != nil {
			edit(&rep)
		}
		return lag.PartitionState{PartitionSample: lag.PartitionSample{End: 10 + lagN, Lag: lagN, Reported: rep},
			Source: src, Position: 10}
	}
	cons := lag.SourceConsumer
	poll := at.Add(-300 * time.Millisecond)
	cases := []struct {
		name  string
		parts []lag.PartitionState
		want  time.Time
	}{
		{"one partition: At - HeldFor", []lag.PartitionState{part(500, cons, nil)}, poll},
		{"two of one poll", []lag.PartitionState{part(500, cons, nil), part(40, cons, nil)}, poll},
		{"two polls (two members): none", []lag.PartitionState{part(500, cons, nil), part(40, cons, func(r *lag.Report) { r.HeldFor = 100 * time.Millisecond })}, time.Time{}},
		{"no lag: left out", []lag.PartitionState{part(0, cons, func(r *lag.Report) { r.HeldFor = time.Millisecond }), part(500, cons, nil)}, poll},
		{"own pace: none", []lag.PartitionState{part(500, cons, func(r *lag.Report) { r.OwnPace = true })}, time.Time{}},
		{"no HeldFor (older reporter): none", []lag.PartitionState{part(500, cons, func(r *lag.Report) { r.HeldFor = 0 })}, time.Time{}},
		{"no count: none", []lag.PartitionState{part(500, cons, func(r *lag.Report) { r.Held = 0 })}, time.Time{}},
		{"nothing in hand: none", []lag.PartitionState{part(500, cons, func(r *lag.Report) { r.HeadTime = time.Time{} })}, time.Time{}},
		{"a partition read from commits: none", []lag.PartitionState{part(500, cons, nil), part(40, lag.SourceCommits, nil)}, time.Time{}},
	}
	for _, c := range cases {
		st := &lag.State{Source: cons, Partitions: c.parts}
		if got := reportedPoll(st); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got.Sub(at), c.want.Sub(at))
		}
	}

	st := &lag.State{At: at.Add(200 * time.Millisecond), Source: cons, Partitions: []lag.PartitionState{part(500, cons, nil)}}
	v := &reading{dt: 0.25}
	before := poll.Add(-400 * time.Millisecond) // 0.4 s between the poll starts
	for _, c := range []struct {
		name       string
		movePollAt time.Time
		movePoll   time.Time
		span, want float64
	}{
		{"poll starts farther apart: theirs", at.Add(-50 * time.Millisecond), before, 0.25, 0.4},
		{"closer: the readings'", at.Add(-50 * time.Millisecond), before, 0.5, 0.5},
		{"seen before the move before: the readings'", at.Add(-300 * time.Millisecond), before, 0.25, 0.25},
		{"none at the move before: the readings'", at.Add(-50 * time.Millisecond), time.Time{}, 0.25, 0.25},
		{"a later poll start before (another member): the readings'", at.Add(-50 * time.Millisecond), poll.Add(time.Second), 0.25, 0.25},
	} {
		tc := &control{moveAt: at.Add(-50 * time.Millisecond), movePollAt: c.movePollAt, movePoll: c.movePoll}
		if got := moveSpan(tc, st, v, c.span, 1); (got-c.want)*(got-c.want) > 1e-12 {
			t.Errorf("moveSpan, %s: %.3f s, want %.3f s", c.name, got, c.want)
		}
	}
}
