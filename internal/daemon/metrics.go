package daemon

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/lag"
)

// Metrics exports the store's states and the loops' own health. The
// per-target gauges are computed from the store at scrape time, so targets
// that disappear leave no stale series behind and a scrape sees one
// consistent cycle per cluster.
type Metrics struct {
	store *Store

	observeDuration *prometheus.HistogramVec
	observeErrors   *prometheus.CounterVec
	earlyCycles     *prometheus.CounterVec
	fastCycles      *prometheus.CounterVec

	lagDesc, ageDesc, consumeDesc, produceDesc, drainDesc *prometheus.Desc
	statusDesc, staleDesc, membersDesc, uncommittedDesc   *prometheus.Desc
	lastSuccessDesc, targetsDesc                          *prometheus.Desc
	estLagDesc, estAgeDesc, intervalDesc, uncertaintyDesc *prometheus.Desc
	sourceDesc, liveDesc, skippedDesc                     *prometheus.Desc
}

var targetLabels = []string{"cluster", "topic", "group"}

// NewMetrics registers lagbridge's daemon metrics on reg.
func NewMetrics(reg prometheus.Registerer, store *Store) *Metrics {
	m := &Metrics{
		store: store,
		observeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lagbridge_observe_duration_seconds",
			Help:    "Duration of one observation cycle of a cluster.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"cluster"}),
		observeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lagbridge_observe_errors_total",
			Help: "Observation cycles of a cluster that returned no data.",
		}, []string{"cluster"}),
		earlyCycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lagbridge_observe_early_cycles_total",
			Help: "Observation cycles of a cluster run before the interval was up because a consumer's own report showed a target late (the message in hand older than the engage threshold).",
		}, []string{"cluster"}),
		fastCycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lagbridge_observe_engaged_cycles_total",
			Help: "Observation cycles of a cluster followed by the next sooner than the interval (at the engaged interval, or 4 times what the observation took when that is longer), because a policy was engaged on the cluster (a target limited or its wait above the engage threshold) or was until a few cycles before, an unlimited target was near its capacity (nearCapacity), or a Kafka target's trial of the engaged cadence was probing.",
		}, []string{"cluster"}),
		lagDesc: prometheus.NewDesc("lagbridge_consumer_lag_messages", "Unconsumed messages of a consumer group (Kafka) or consumer (NATS: pending plus ack pending).", targetLabels, nil),
		ageDesc: prometheus.NewDesc("lagbridge_head_age_seconds", "Age of the oldest unconsumed message.", targetLabels, nil),
		estLagDesc: prometheus.NewDesc("lagbridge_estimated_lag_messages",
			"Unconsumed messages at the consumer's best known position (its fresh report, else its commits advanced by the measured rate between commits); what the status and the quotas use.", targetLabels, nil),
		estAgeDesc: prometheus.NewDesc("lagbridge_estimated_head_age_seconds",
			"Age of the oldest unconsumed message at the consumer's best known position.", targetLabels, nil),
		intervalDesc: prometheus.NewDesc("lagbridge_commit_interval_seconds",
			"Learned time between moves of the consumer's committed offsets (the longest over its partitions); 0 while unknown.", targetLabels, nil),
		uncertaintyDesc: prometheus.NewDesc("lagbridge_position_uncertainty_seconds",
			"How old the exact knowledge behind the estimated figures is (time since the commit or report they extrapolate from); 0 when exact.", targetLabels, nil),
		sourceDesc: prometheus.NewDesc("lagbridge_lag_source",
			"1 for where the estimated figures come from (commits, estimate, consumer, first-seen), 0 for the others.", append(targetLabels[:3:3], "source"), nil),
		liveDesc: prometheus.NewDesc("lagbridge_consumer_live",
			"1 when a consumer is attached to the target, 0 when none is, -1 when the broker does not say.", targetLabels, nil),
		skippedDesc: prometheus.NewDesc("lagbridge_consumer_skipped_total",
			"Messages the consumer skipped as expired (the ttl guard's skips: counted from NATS MSG_TERMINATED advisories, or from the counts a Kafka consumer's hook reports) since the daemon first saw the target: part of the consumption, no measure of the consumer's capacity. Absent while the skips are not counted.", targetLabels, nil),
		consumeDesc: prometheus.NewDesc("lagbridge_consume_rate", "Smoothed consume rate in messages per second.", targetLabels, nil),
		produceDesc: prometheus.NewDesc("lagbridge_produce_rate", "Smoothed produce rate in messages per second.", targetLabels, nil),
		drainDesc:   prometheus.NewDesc("lagbridge_time_to_drain_seconds", "Time to consume the backlog at current rates; +Inf when it does not shrink.", targetLabels, nil),
		statusDesc:  prometheus.NewDesc("lagbridge_target_status", "1 for the target's current status (ok, lagging, stalled, stopped, stale, abandoned), 0 for the others.", append(targetLabels[:3:3], "status"), nil),
		staleDesc:   prometheus.NewDesc("lagbridge_target_stale", "1 when the target's data is old or partial.", targetLabels, nil),
		membersDesc: prometheus.NewDesc("lagbridge_group_members", "Live consumers of the target; -1 when unknown.", targetLabels, nil),
		uncommittedDesc: prometheus.NewDesc("lagbridge_partitions_without_commit",
			"Partitions of the target without a committed offset (Kafka): their lag is unknown and counted nowhere else.", targetLabels, nil),
		lastSuccessDesc: prometheus.NewDesc("lagbridge_last_observe_success_timestamp_seconds",
			"Unix time of the start of the newest observation cycle that returned data.", []string{"cluster"}, nil),
		targetsDesc: prometheus.NewDesc("lagbridge_targets", "Targets watched on a cluster.", []string{"cluster"}, nil),
	}
	reg.MustRegister(m.observeDuration, m.observeErrors, m.earlyCycles, m.fastCycles, m)
	return m
}

// observed records one cycle; called by Loop.
func (m *Metrics) observed(cluster string, d time.Duration, err error) {
	m.observeDuration.WithLabelValues(cluster).Observe(d.Seconds())
	c := m.observeErrors.WithLabelValues(cluster)
	if err != nil {
		c.Inc()
	}
	m.earlyCycles.WithLabelValues(cluster) // from 0, as the errors: rate() sees the first
}

// early counts one early cycle; called by Loop.
func (m *Metrics) early(cluster string) { m.earlyCycles.WithLabelValues(cluster).Inc() }

// fast counts one cycle followed at the engaged interval; called by Loop.
func (m *Metrics) fast(cluster string) { m.fastCycles.WithLabelValues(cluster).Inc() }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.lagDesc, m.ageDesc, m.consumeDesc, m.produceDesc, m.drainDesc,
		m.statusDesc, m.staleDesc, m.membersDesc, m.uncommittedDesc, m.lastSuccessDesc, m.targetsDesc,
		m.estLagDesc, m.estAgeDesc, m.intervalDesc, m.uncertaintyDesc, m.sourceDesc, m.liveDesc, m.skippedDesc} {
		ch <- d
	}
}

var allStatuses = []lag.Status{lag.StatusOK, lag.StatusLagging, lag.StatusStalled, lag.StatusStopped, lag.StatusStale, lag.StatusAbandoned}

var allSources = []lag.Source{lag.SourceCommits, lag.SourceEstimate, lag.SourceConsumer, lag.SourceFirstSight}

// Collect implements prometheus.Collector; it reads the store.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	for _, c := range m.store.Clusters() {
		gauge(m.targetsDesc, float64(c.Targets), c.Name)
		if !c.LastSuccess.IsZero() {
			gauge(m.lastSuccessDesc, float64(c.LastSuccess.UnixNano())/1e9, c.Name)
		}
	}
	for _, s := range m.store.States() {
		lv := []string{s.Target.Cluster, s.Target.Topic, s.Target.Group}
		gauge(m.lagDesc, float64(s.CommittedLag), lv...)
		gauge(m.ageDesc, s.CommittedHeadAge.Seconds(), lv...)
		gauge(m.estLagDesc, float64(s.Lag), lv...)
		gauge(m.estAgeDesc, s.HeadAge.Seconds(), lv...)
		gauge(m.intervalDesc, s.CommitInterval.Seconds(), lv...)
		gauge(m.uncertaintyDesc, s.Uncertainty.Seconds(), lv...)
		if s.Source != "" {
			for _, src := range allSources {
				gauge(m.sourceDesc, b2f(s.Source == src), append(lv, string(src))...)
			}
		}
		live := -1.0
		switch s.Live {
		case lag.LiveYes:
			live = 1
		case lag.LiveNo:
			live = 0
		}
		gauge(m.liveDesc, live, lv...)
		if s.SkipsCounted {
			// Left out while nobody counts (NATS: no permission to the
			// advisories, a server before 2.10.4; Kafka: no fresh
			// report with a count): a 0 would read as none skipped.
			ch <- prometheus.MustNewConstMetric(m.skippedDesc, prometheus.CounterValue, float64(s.Skipped), lv...)
		}
		gauge(m.consumeDesc, s.ConsumeRate, lv...)
		gauge(m.produceDesc, s.ProduceRate, lv...)
		drain := s.TimeToDrain.Seconds()
		if s.TimeToDrain == lag.Never {
			drain = math.Inf(1)
		}
		gauge(m.drainDesc, drain, lv...)
		for _, st := range allStatuses {
			v := 0.0
			if s.Status == st {
				v = 1
			}
			gauge(m.statusDesc, v, append(lv, string(st))...)
		}
		gauge(m.staleDesc, b2f(s.Stale), lv...)
		gauge(m.membersDesc, float64(s.Members), lv...)
		gauge(m.uncommittedDesc, float64(s.Uncommitted), lv...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
