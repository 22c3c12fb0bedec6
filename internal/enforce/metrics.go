package enforce

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the broker-side enforcement actions:
//
//	lagbridge_ttl_skipped_records_total{cluster,topic,group}         offsets committed past by offset moves
//	lagbridge_ttl_offset_moves_total{cluster,topic,group,outcome}    applied: offsets moved; dry-run: would have moved; refused: the group has members
//	lagbridge_ttl_stream_drift{cluster,stream}                       1 when the last check found the stream out of line with its policy
//	lagbridge_ttl_stream_updates_total{cluster,stream}               stream configs updated
//
// Skipped records are counted in offsets: with transactions or compaction
// an offset range holds fewer records, so it is an upper bound. A nil
// *Metrics counts nothing. Safe for concurrent use.
type Metrics struct {
	skipped       *prometheus.CounterVec
	moves         *prometheus.CounterVec
	drift         *prometheus.GaugeVec
	streamUpdates *prometheus.CounterVec
}

// Move outcomes, the values of the outcome label.
const (
	OutcomeApplied = "applied"
	OutcomeDryRun  = "dry-run"
	OutcomeRefused = "refused"
)

// NewMetrics creates the metrics and registers them on reg; it returns the
// registration error (prometheus.AlreadyRegisteredError when reg holds
// them already).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lagbridge_ttl_skipped_records_total",
			Help: "Records (offsets) an empty consumer group's committed offsets were moved past because they were older than the hard age.",
		}, []string{"cluster", "topic", "group"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lagbridge_ttl_offset_moves_total",
			Help: "Offset moves past dead records, by outcome (applied, dry-run, refused because the group has members).",
		}, []string{"cluster", "topic", "group", "outcome"}),
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lagbridge_ttl_stream_drift",
			Help: "1 when the last check found the stream's MaxAge or AllowMsgTTL out of line with its policy, else 0.",
		}, []string{"cluster", "stream"}),
		streamUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lagbridge_ttl_stream_updates_total",
			Help: "Stream configurations updated to match their policy.",
		}, []string{"cluster", "stream"}),
	}
	for _, c := range []prometheus.Collector{m.skipped, m.moves, m.drift, m.streamUpdates} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) move(cluster, topic, group, outcome string, skipped int64) {
	if m == nil {
		return
	}
	m.moves.WithLabelValues(cluster, topic, group, outcome).Inc()
	if outcome == OutcomeApplied && skipped > 0 {
		m.skipped.WithLabelValues(cluster, topic, group).Add(float64(skipped))
	}
}

func (m *Metrics) streamChecked(cluster, stream string, drift, updated bool) {
	if m == nil {
		return
	}
	v := 0.0
	if drift && !updated {
		v = 1
	}
	m.drift.WithLabelValues(cluster, stream).Set(v)
	if updated {
		m.streamUpdates.WithLabelValues(cluster, stream).Inc()
	}
}
