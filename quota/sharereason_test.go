package quota

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestReasonNamesTheRateWithShares: a limited decision that gives avoided
// partitions a share of the keyless records sets the topic's rate above
// the law's rate for the other partitions (withShares), and its reason,
// which names the law's rate ("probing from 325/s", "a probe to 325/s"),
// also names the rate the decision grants, so that a reader of
// /v1/quotas, /v1/events or `lagbridge why` can tell why the two differ.
// Before, a probe read "caught up: probing from 325/s" on a decision of
// 346/s, and nothing in it said where the 21/s came from.
func TestReasonNamesTheRateWithShares(t *testing.T) {
	named := regexp.MustCompile(`(?:probing from|a probe to|probing from \d+/s to) (\d+)/s`)
	checked, unexplained := 0, 0
	for _, commits := range []time.Duration{0, 250 * time.Millisecond} {
		t.Run(fmt.Sprint("commits ", commits), func(t *testing.T) {
			for _, s := range keylessHotSim(t, commits).between(0, 60) {
				d := s.dec
				if d.IsUnlimited() || sumShares(d.PartitionShares) <= 0 {
					continue
				}
				m := named.FindStringSubmatch(d.Reason)
				if m == nil {
					continue
				}
				checked++
				law, _ := strconv.ParseFloat(m[1], 64)
				granted := fmt.Sprintf("%.0f/s", d.Rate)
				if fmt.Sprintf("%.0f/s", law) == granted || regexp.MustCompile(`\b`+regexp.QuoteMeta(granted)).MatchString(d.Reason[len(m[0]):]) {
					continue
				}
				unexplained++
				if unexplained <= 2 {
					t.Errorf("t=%.2f: rate %.1f/s, reason names %s/s only: %s", s.t, d.Rate, m[1], d.Reason)
				}
			}
		})
	}
	t.Logf("%d limited decisions with shares name a probe rate; %d of them do not name the rate granted", checked, unexplained)
	if checked == 0 {
		t.Fatal("no limited decision with shares named a probe rate: the case tests nothing")
	}
}
