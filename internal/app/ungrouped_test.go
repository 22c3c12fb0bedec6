package app

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestWarnsLiveGroupOutsidePolicy: a consumer group renamed (or a
// policy's match.group misspelt) leaves the group the policy names
// abandoned and the live one matched by no policy, so the topic's
// producers are unlimited while its consumer drowns; found in a new
// user's trial on real Kafka (group nu4-billing-v2 under a policy naming
// nu4-billing: "all 1 groups abandoned: unlimited", head age 25 s), where
// the daemon said nothing: the policy does apply to a target, the
// abandoned one. The warning names the live group, once; a group left out
// on purpose beside a live group the policy binds is not named.
func TestWarnsLiveGroupOutsidePolicy(t *testing.T) {
	store := daemon.NewStore(map[string]lag.Kind{"k": lag.KindKafka})
	specs := []quota.Policy{{Name: "orders", Match: quota.Match{Topic: "orders", Group: "billing"}, MaxAge: 2 * time.Second}}
	pols, err := quota.NewPolicies(specs)
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	u := newUngrouped(pols, specs, store, slog.New(slog.NewTextHandler(&logs, nil)))
	state := func(topic, group string, st lag.Status) lag.State {
		return lag.State{Target: lag.Target{Kind: lag.KindKafka, Cluster: "k", Topic: topic, Group: group}, Status: st}
	}
	run := func(states ...lag.State) {
		for range 2 * recheckCycles {
			store.Update(daemon.ClusterStatus{Name: "k", Kind: lag.KindKafka, Observed: true}, states)
			u.cycle()
		}
	}
	// The policy binds its live group: analytics, left out, is not named.
	run(state("orders", "billing", lag.StatusOK), state("orders", "analytics", lag.StatusOK))
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("warned beside a live group the policy binds:\n%s", logs.String())
	}
	// The group was renamed: billing abandoned, billing-v2 live.
	run(state("orders", "billing", lag.StatusAbandoned), state("orders", "billing-v2", lag.StatusLagging),
		state("other", "billing-v3", lag.StatusOK)) // a topic no policy names: not ours to judge
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "group=billing-v2") || !strings.Contains(warned[0], "policy=orders") ||
		!strings.Contains(warned[0], "topic=orders") || !strings.Contains(warned[0], "group_pattern=billing") {
		t.Fatalf("want one warning naming group billing-v2 under policy orders; got:\n%s", logs.String())
	}
}
