package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// nearLoop is a loop at 1 s, engaged at 250 ms, whose Engaged and
// NearCapacity hooks say what *engaged and *near say at each call; asked
// records whether NearCapacity was asked about tg since it was last reset.
func nearLoop(tg lag.Target, engaged, near *bool, asked *bool) *Loop {
	return &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
		Engaged: func([]lag.Target) bool { return *engaged },
		NearCapacity: func(ts []lag.Target) bool {
			if slices.Contains(ts, tg) {
				*asked = true
			}
			return *near
		}}
}

// kafkaAt is a reading of tg read from commits (src SourceCommits) or
// from its consumer's reports (SourceConsumer) whose commit cadence lag/
// learned is every, committed at pos with 1,000 to commit.
func kafkaAt(tg lag.Target, src lag.Source, every time.Duration, pos int64) []lag.State {
	return []lag.State{{Target: tg, Source: src, CommitInterval: every,
		Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: pos + 1000, Committed: pos, Lag: 1000}, CommittedLag: 1000}}}}
}

// TestTrialPolicyPassedStillAsked: a Kafka target whose trial a policy
// started (not NearCapacity) and that passed it once its cadence was
// relearned at the fast readings (a commit every 50 ms: MovesWithin) is
// asked about by NearCapacity while it stays fine by that cadence, also
// once the policy let go: near its capacity, the cluster stays fast.
// Such a target is in near but not in passed (main's rule for a trial a
// policy started). Red when the fine-by-cadence case does not take a
// target in near (tr.isNear): the policy lets go and the cluster falls
// back to the interval with the target still near (mutants36's survivor,
// session 36).
func TestTrialPolicyPassedStillAsked(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	engaged, near, asked := true, false, false
	l := nearLoop(tg, &engaged, &near, &asked)
	var tr trial
	l.engaged(kafkaAt(tg, lag.SourceCommits, time.Second, 1000), &tr) // a commit at about every 1 s reading: a candidate
	if tr.on == nil || tr.byNear {
		t.Fatalf("no trial a policy started: %+v", tr)
	}
	l.engaged(kafkaAt(tg, lag.SourceCommits, 50*time.Millisecond, 1500), &tr) // relearned at the fast readings
	if _, in := tr.passed[tg]; tr.on != nil || in || !tr.isNear(tg) {
		t.Fatalf("after a reading fine by its cadence: %+v, want passed, asked about, not kept in passed", tr)
	}
	engaged, near = false, true // the policy let go; produced near its capacity
	for i := range 2 * engagedHold {
		asked = false
		fine, coarse := l.engaged(kafkaAt(tg, lag.SourceCommits, 50*time.Millisecond, int64(2000+500*i)), &tr)
		if !fine || coarse || !asked {
			t.Fatalf("reading %d after the policy let go, near its capacity: fine %v, coarse %v, NearCapacity asked %v; want fine, asked (trial %+v)", i+1, fine, coarse, asked, tr)
		}
	}
}

// TestTrialPolicyPassedNotSticky: a target whose trial a policy started
// keeps main's rule however it passed: it leaves passed once its cadence
// is relearned within the engaged interval, and when that cadence then
// drifts to 500 ms (within passedFine, not MovesWithin at 250 ms) it is
// a candidate again and a new trial starts (TestTrialNearSticky feeds
// that state in; here the trial gets there). It passed either by moving
// within the engaged interval during the trial, or by probes (its
// cadence still the interval's: fine for trialCycles cycles, its grace)
// and then a reading kept by that grace before the cadence is relearned.
// Red when such a target is read as near-sticky: byNear's term in sticky
// removed or byNear forced true (the first way), the grace case's near
// value forced true (the second; mutants36's survivors, session 36).
func TestTrialPolicyPassedNotSticky(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	for _, how := range []string{"by its cadence", "by probes, then its grace"} {
		engaged, near, asked := true, false, false
		l := nearLoop(tg, &engaged, &near, &asked)
		var tr trial
		l.engaged(kafkaAt(tg, lag.SourceCommits, time.Second, 1000), &tr)
		if tr.on == nil || tr.byNear {
			t.Fatalf("%s: no trial a policy started: %+v", how, tr)
		}
		pos := int64(1000)
		if how == "by its cadence" {
			pos += 500
			l.engaged(kafkaAt(tg, lag.SourceCommits, 50*time.Millisecond, pos), &tr)
		} else {
			for range trialCycles { // moves at every reading, the cadence still 1 s
				pos += 500
				l.engaged(kafkaAt(tg, lag.SourceCommits, time.Second, pos), &tr)
			}
			if tr.on != nil || tr.passed[tg] != trialCycles {
				t.Fatalf("%s: not passed with a grace after %d readings that moved: %+v", how, trialCycles, tr)
			}
			pos += 500
			if fine, _ := l.engaged(kafkaAt(tg, lag.SourceCommits, time.Second, pos), &tr); !fine || tr.near[tg] {
				t.Errorf("%s: the reading after the pass: fine %v, trial %+v; want fine by its grace, not near-sticky", how, fine, tr)
			}
			pos += 500
			l.engaged(kafkaAt(tg, lag.SourceCommits, 250*time.Millisecond, pos), &tr) // relearned
		}
		if _, in := tr.passed[tg]; tr.on != nil || in || tr.near[tg] {
			t.Errorf("%s: once fine by its cadence: %+v, want passed, out of passed, not near-sticky", how, tr)
		}
		pos += 500
		fine, coarse := l.engaged(kafkaAt(tg, lag.SourceCommits, 500*time.Millisecond, pos), &tr)
		if !fine || coarse || tr.on == nil {
			t.Errorf("%s: at a 500 ms cadence, engaged: fine %v, coarse %v, trial %+v; want a new trial (main's rule)", how, fine, coarse, tr)
		}
	}
}

// TestTrialReportedNotAsked: a Kafka target that passed a trial
// NearCapacity alone started (near-sticky) and whose consumer then
// reports (its reports fresh: Source SourceConsumer, fine by them) is no
// longer asked about by NearCapacity: a report's position is the poll in
// hand, a standing queue the engaged threshold reads as saturated
// (kafka/hook/sync/1s at 5x, session 34, nearcap). The cluster keeps the
// interval unless a policy is engaged, and the target leaves passed and
// near. Red when the fine-by-cadence case takes a reported source
// (mutants36's survivor, session 36).
func TestTrialReportedNotAsked(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	engaged, near, asked := false, true, false
	l := nearLoop(tg, &engaged, &near, &asked)
	var tr trial
	l.engaged(kafkaAt(tg, lag.SourceCommits, time.Second, 1000), &tr)
	if tr.on == nil || !tr.byNear {
		t.Fatalf("no trial NearCapacity started: %+v", tr)
	}
	l.engaged(kafkaAt(tg, lag.SourceCommits, 50*time.Millisecond, 1500), &tr)
	if _, in := tr.passed[tg]; tr.on != nil || !in || !tr.near[tg] {
		t.Fatalf("after a reading fine by its cadence: %+v, want passed, near-sticky", tr)
	}
	asked = false
	fine, coarse := l.engaged(kafkaAt(tg, lag.SourceConsumer, 50*time.Millisecond, 2000), &tr)
	if _, in := tr.passed[tg]; fine || coarse || asked || in || tr.isNear(tg) {
		t.Errorf("its consumer reporting: fine %v, coarse %v, NearCapacity asked %v, trial %+v; want not fine, not asked, out of passed and near", fine, coarse, asked, tr)
	}
}
