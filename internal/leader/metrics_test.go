package leader

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEpochWhileLeading: a leader confirmed in a new epoch (a Kafka
// rebalance it kept partition 0 through) is told, and the epoch gauge
// follows it; the count of changes does not move, since the role did not.
func TestEpochWhileLeading(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	var l lease
	w := m.Watch("k")
	l.onRole = func(r Role, epoch int64, _ bool) { w(r, epoch) }
	t0 := time.Unix(1000, 0)
	l.confirm(t0, 7, 4*time.Second)
	l.confirm(t0.Add(time.Second), 7, 4*time.Second) // same epoch: nothing new
	l.confirm(t0.Add(2*time.Second), 9, 4*time.Second)
	if got := testutil.ToFloat64(m.epoch.WithLabelValues("k")); got != 9 {
		t.Errorf("lagbridge_ha_epoch = %v, want 9 (the epoch it leads in)", got)
	}
	if got := testutil.ToFloat64(m.changes.WithLabelValues("k", RoleLeader.String())); got != 1 {
		t.Errorf("leadership changes to leader = %v, want 1 (one role change)", got)
	}
	l.follow(t0.Add(3 * time.Second))
	if got := testutil.ToFloat64(m.leader.WithLabelValues("k")); got != 0 {
		t.Errorf("lagbridge_ha_leader after following = %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.epoch.WithLabelValues("k")); got != 9 {
		t.Errorf("lagbridge_ha_epoch after following = %v, want 9 (the epoch it last led in)", got)
	}
}
