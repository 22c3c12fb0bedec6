package shard

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the assignments' series, labelled by cluster:
// lagbridge_ha_shards (the cluster's shard count),
// lagbridge_ha_shards_owned (the shards this replica observes; -1 before
// the assignment answered), lagbridge_ha_shard_changes_total (times the
// shards it observes changed: rebalances) and
// lagbridge_ha_shards_standing_in (the shards it observes for a silent
// owner, see Exchange.Observers).
type Metrics struct {
	count, owned, standing *prometheus.GaugeVec
	changes                *prometheus.CounterVec
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		count: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lagbridge_ha_shards",
			Help: "The number of shards the cluster's observation is split into."}, []string{"cluster"}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lagbridge_ha_shards_owned",
			Help: "The shards of the cluster this replica observes; -1 before the assignment answered."}, []string{"cluster"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lagbridge_ha_shard_changes_total",
			Help: "Times the shards of the cluster this replica observes changed (rebalances)."}, []string{"cluster"}),
		standing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lagbridge_ha_shards_standing_in",
			Help: "The shards of the cluster this replica observes in place of their assigned owner, whose records went silent, until it writes again or the assignment moves them."},
			[]string{"cluster"}),
	}
	reg.MustRegister(m.count, m.owned, m.changes, m.standing)
	return m
}

// StandIn is the ExchangeConfig.OnStandIn that keeps
// lagbridge_ha_shards_standing_in.
func (m *Metrics) StandIn(cluster string, shards []int) {
	m.standing.WithLabelValues(cluster).Set(float64(len(shards)))
}

// Watch starts the cluster's series and returns the Config.OnChange that
// keeps them.
func (m *Metrics) Watch(cluster string, count int) func([]int) {
	m.count.WithLabelValues(cluster).Set(float64(count))
	m.owned.WithLabelValues(cluster).Set(-1)
	m.changes.WithLabelValues(cluster)
	m.standing.WithLabelValues(cluster)
	return func(owned []int) {
		m.owned.WithLabelValues(cluster).Set(float64(len(owned)))
		m.changes.WithLabelValues(cluster).Inc()
	}
}
