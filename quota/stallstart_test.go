package quota

import (
	"testing"
	"time"
)

// TestControllerStallStartRelearns replays lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on Kafka 4.3.1 (main at e5339ee, load
// average 14; the lagbridge side): 800 msg/s offered to a consumer of
// 2,000 that franz-go auto-commits every second, read every second, the
// capacity dropping to 400 msg/s at the bench's 10 s. The first fresh
// reading fell inside a stall of the machine (1.26 s after the one before,
// 103 msg/s consumed, head 2.07 s): drain. The reading after it consumed
// 864 msg/s, and from then on, limited before its standing wait was
// learned, every reading showed half a second of uncommitted work (head
// at the commit 0.49-0.51 s, about the law's setpoint) with the consumer
// consuming what it was allowed: read as the queue the law holds, the
// capacity fell to what was admitted ("saturated: capacity 181/s, wait
// 492ms, target 500ms") and the rate stayed at 150-270 msg/s for the rest
// of the run (8 s before the drop and 13 s after the restore in which
// producers were refused while the consumer idled). The consumer had shown
// more than the probe would admit, so after three readings of a head held
// where it was, a relearn trial is let through (unlearnedStale), and the
// head it leaves is learned as the standing wait.
func TestControllerStallStartRelearns(t *testing.T) {
	ds := replayStates(t, "ac1s1s-kafka-stallstart.jsonl", time.Second)
	if len(ds) != 14 {
		t.Fatalf("%d decisions, want 14", len(ds))
	}
	if ds[1].Rule != RuleDrain || ds[7].Rule != RuleSaturated {
		t.Fatalf("decisions 1 and 7: %s and %s, want the recorded drain and saturated: the case tests nothing", ds[1].Rule, ds[7].Rule)
	}
	wantRelearnWithin(t, ds, 7, 4)
	if d := ds[13]; !d.IsUnlimited() {
		t.Errorf("decision 13 (%s): %s at %.0f/s (%s), want unlimited: the consumer kept up with every probe", d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
	}
}

// TestControllerStallRestoreRelearns replays another run of that row (e5339ee
// with committedSight, 36870a2; load average 16; the lagbridge side):
// its first fresh reading drained in a stall of the machine too, and the
// real drop at 10 s drained again; from the restore at 30 s the consumer
// of 2,000 was held at 270-300 msg/s (head at the commit 0.41-0.45 s,
// "saturated: capacity 271/s, wait 424ms, target 500ms") for the rest of
// the run. Its drains had consumed more than a probe above that, so it is
// tried within three readings of a head held, and released.
func TestControllerStallRestoreRelearns(t *testing.T) {
	ds := replayStates(t, "ac1s1s-kafka-stallstart2.jsonl", time.Second)
	if len(ds) != 37 {
		t.Fatalf("%d decisions, want 37", len(ds))
	}
	wantRelearnWithin(t, ds, 29, 4)
	if d := ds[36]; !d.IsUnlimited() {
		t.Errorf("decision 36 (%s): %s at %.0f/s (%s), want unlimited: the consumer kept up with every probe", d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
	}
}

// wantRelearnWithin: one of the n decisions from ds[from] on is a relearn
// trial (RuleRelearn) that raised the rate.
func wantRelearnWithin(t *testing.T, ds []Decision, from, n int) {
	t.Helper()
	for _, d := range ds[from : from+n] {
		if d.Rule == RuleRelearn {
			return
		}
	}
	for i, d := range ds[from : from+n] {
		t.Logf("decision %d (%s): %s at %.0f/s (%s)", from+i, d.At.Format("15:04:05.000"), d.Rule, d.Rate, d.Reason)
	}
	t.Errorf("no %s decision within %d readings from %d", RuleRelearn, n, from)
}

// TestSimStallStartRelearns: the simulator's version, a fake clock's
// stall. A new group that auto-commits every second, read every second
// (its commit timer 0.3 s after the observations: 0.7 s of uncommitted
// work at each reading), consumes 40 msg/s for its first 1.5 s, then
// 2,000 msg/s, against 800 msg/s offered. The second reading drains, the
// third consumes 1,590 msg/s; the target stays limited, and from t=7 each
// reading shows its 0.7 s standing wait with the consumer consuming what
// it is allowed: "saturated: capacity 798/s, wait 714ms", the rate 712
// msg/s, falling to 543 msg/s by t=20 (56.8% of the offer admitted from
// t=12 on, the consumer idle at a third of its capacity). The wait is
// over the setpoint but the law's rate not below the capacity estimate by
// the margin trialUnderCut needs, so no trial came. Now the relearn trial
// comes at t=10 and the offer is admitted from t=12 on.
func TestSimStallStartRelearns(t *testing.T) {
	wantSlowStartAdmitted(t, 0.3, 1.5)
}

// TestUnlearnedFloorPartial: a target limited after two healthy readings
// (a small standing wait seen, not learned) whose consumer is held at its
// capacity, its head at the commit steady at 0.6 s, gets no relearn trial
// unless it once consumed a probe step above the capacity estimate, as a
// target that saw none; a standing wait told by a trial is learned.
func TestUnlearnedFloorPartial(t *testing.T) {
	v := &reading{measured: true, commits: true, learned: true, headKnown: true, binding: true,
		dt: 1, cadence: 1, budget: 2, engageWait: 0.4, headAge: 0.6,
		consumed: 400, produced: 400, prevProduced: 400, prevCap: 400}
	base := control{limited: true, floorSeen: 2, floor: 0.05, prevHead: 0.6}
	const step = 0.5
	for _, tc := range []struct {
		name  string
		shown float64
		told  bool
		want  bool
	}{
		{"consumed no more than allowed", 0, false, false},
		{"consumed a step above the estimate", 640, false, true},
		{"a standing wait told by a trial", 0, true, true},
	} {
		c := base
		c.shown, c.floorTold = tc.shown, tc.told
		if got := staleStanding(&c, v, step); got != tc.want {
			t.Errorf("%s: staleStanding = %v, want %v", tc.name, got, tc.want)
		}
	}
}
