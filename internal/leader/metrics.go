package leader

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the elections' series, labelled by cluster:
// lagbridge_ha_leader (1 while this replica leads, 0 while it follows,
// -1 before the election answered), lagbridge_ha_epoch (the epoch this
// replica leads in, or last led in) and lagbridge_ha_leadership_changes_total
// {role} (times it became leader or follower: failovers).
type Metrics struct {
	leader  *prometheus.GaugeVec
	epoch   *prometheus.GaugeVec
	changes *prometheus.CounterVec
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lagbridge_ha_leader",
			Help: "1 while this replica leads the cluster's publishing, 0 while it follows, -1 before the election answered."}, []string{"cluster"}),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lagbridge_ha_epoch",
			Help: "The leadership epoch this replica leads in, or last led in (Kafka group generation, NATS KV revision)."}, []string{"cluster"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lagbridge_ha_leadership_changes_total",
			Help: "Times this replica became leader or follower of the cluster's publishing."}, []string{"cluster", "role"}),
	}
	reg.MustRegister(m.leader, m.epoch, m.changes)
	return m
}

// Watch starts the cluster's series at -1 and returns the Config.OnRole
// that keeps them: a new epoch while leading moves the epoch, not the
// count of changes.
func (m *Metrics) Watch(cluster string) func(Role, int64) {
	m.leader.WithLabelValues(cluster).Set(-1)
	m.epoch.WithLabelValues(cluster)
	var mu sync.Mutex
	last := RoleUnknown
	return func(r Role, epoch int64) {
		mu.Lock()
		same := r == last
		last = r
		mu.Unlock()
		switch r {
		case RoleLeader:
			m.leader.WithLabelValues(cluster).Set(1)
			m.epoch.WithLabelValues(cluster).Set(float64(epoch))
		case RoleFollower:
			m.leader.WithLabelValues(cluster).Set(0)
		default:
			return
		}
		if same {
			return
		}
		m.changes.WithLabelValues(cluster, r.String()).Inc()
	}
}
