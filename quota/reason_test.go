package quota

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestUnlimitedReasonTrue replays every recording in testdata and checks
// that an unlimited decision's reason never says "wait A <= engage B"
// with A over B: such a target stayed unlimited because the queue the
// controller read (less the standing wait, or an estimate it does not
// believe yet) was within the engage wait, and the reason must say so.
func TestUnlimitedReasonTrue(t *testing.T) {
	names, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	within := regexp.MustCompile(`^wait (\S+) <= engage (\S+):`)
	queuedLess := regexp.MustCompile(`^wait \S+, queued (\S+?)( \(the head at the commit less the standing wait \S+\))?(?: less (\S+) of startup allowance \(the standing wait not learned yet\))? <= engage (\S+): unlimited$`)
	var over int
	for _, n := range names {
		if !strings.HasSuffix(n.Name(), ".jsonl") {
			continue
		}
		interval := 250 * time.Millisecond
		if strings.HasPrefix(n.Name(), "ac1s1s") {
			interval = time.Second
		}
		for i, d := range replayStates(t, n.Name(), interval) {
			if d.Rule != RuleUnlimited {
				continue
			}
			m := within.FindStringSubmatch(d.Reason)
			if m == nil {
				over++
				if q := queuedLess.FindStringSubmatch(d.Reason); q != nil {
					queued, err1 := time.ParseDuration(q[1])
					allowance, err2 := time.ParseDuration(q[3])
					engage, err3 := time.ParseDuration(q[4])
					if q[3] == "" {
						allowance, err2 = 0, nil
					}
					if err1 != nil || err2 != nil || err3 != nil || queued-allowance > engage {
						t.Errorf("%s reading %d: %q", n.Name(), i, d.Reason)
					}
				} else if !strings.HasSuffix(d.Reason, ": unlimited") || !strings.Contains(d.Reason, "to spare") && !strings.Contains(d.Reason, "estimated since") {
					t.Errorf("%s reading %d: reason %q", n.Name(), i, d.Reason)
				}
				continue
			}
			w, err1 := time.ParseDuration(m[1])
			e, err2 := time.ParseDuration(m[2])
			if err1 != nil || err2 != nil || w > e {
				t.Errorf("%s reading %d: %q", n.Name(), i, d.Reason)
			}
		}
	}
	t.Logf("%d unlimited decisions with the wait over the engage wait, each saying why", over)
}
