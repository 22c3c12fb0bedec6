package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerPerPollOfferNotCapacity replays the first 12 readings of
// lagbridge bench kafka/commit-per-poll/sync/1s at 10x (kfake, the naive
// side, which the daemon reads too; main at 205e8a1, 2026-12-04 23:28
// UTC): a franz-go consumer of 2,000 msg/s committing after each poll,
// 4,000 msg/s offered from the start, read every second. Its first
// measured reading (lag 3,982, head 0.999 s, 704 msg/s committed in one
// commit) reads as a commit timer's uncommitted work: unlimited, the
// offer taken for its capacity (3,997/s). At the next reading nothing was
// committed and the head was 2.0 s old, which a consumer keeping up with
// the offer and committing once an interval cannot show; main kept the
// offer as the capacity ("saturated: capacity 3997/s", 3,006/s admitted)
// and the queue grew. The estimate goes back to what the commits
// measured: the reading drains (a new message would wait 2 s at the
// consumer's real rate). The same readings with the head at that reading
// one interval old (a 1 s auto-commit whose commit fell just after the
// reading) keep the offer: red against the mutant that refutes it at any
// reading that measured nothing.
func TestControllerPerPollOfferNotCapacity(t *testing.T) {
	for _, c := range []struct {
		name string
		head time.Duration // the head at reading 2; 0: as recorded
		want Rule
	}{
		{"as recorded", 0, RuleDrain},
		{"head of one interval", time.Second, RuleSaturated},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := 0
			edit := func(st *lag.State) {
				if k++; k == 3 && c.head > 0 {
					st.HeadAge = c.head
				}
			}
			ds := replayEdited(t, "cpp1s-10x-offerstart.jsonl", 0, newCtl(t, ControllerConfig{Interval: time.Second}), edit)
			if d := ds[1]; d.Rule != RuleUnlimited {
				t.Fatalf("first measured reading (lag %d, head %v): %s at %.0f/s (%s), want %s", d.Lag, d.HeadAge, d.Rule, d.Rate, d.Reason, RuleUnlimited)
			}
			d := ds[2]
			if d.Rule != c.want || c.want == RuleDrain && d.Capacity >= 2000 || c.want == RuleSaturated && d.Capacity < 3900 {
				t.Fatalf("reading 2 (lag %d, head %v): %s at %.0f/s, capacity %.0f (%s), want %s", d.Lag, d.HeadAge, d.Rule, d.Rate, d.Capacity, d.Reason, c.want)
			}
			// The next commit measures the rate (2,092 msg/s): the 704
			// from the first commit is a lower bound, not held while the
			// head is late.
			if d := ds[3]; c.want == RuleDrain && d.Capacity < 1500 {
				t.Fatalf("reading 3 (lag %d, head %v): capacity %.0f (%s), want the rate its commits measured", d.Lag, d.HeadAge, d.Capacity, d.Reason)
			}
		})
	}
}
