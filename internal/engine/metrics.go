package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/quota"
)

// Collector exports the engine's decisions and grants at scrape time:
//
//	lagbridge_quota_rate{cluster,topic,group}          allowed produce rate, msg/s (+Inf: unlimited)
//	lagbridge_quota_signal{cluster,topic,group,signal} 1 for the current signal, 0 for the others
//	lagbridge_quota_retry_after_seconds{cluster,topic,group}
//	lagbridge_quota_grant{cluster,topic,producer}      a producer's granted rate, msg/s (+Inf: unlimited);
//	                                                   only with ProducerGrants
//	lagbridge_quota_producers{cluster,topic}           producers holding a lease
//	lagbridge_quota_refused_producers{cluster,topic}   unlisted producers refused a share (no grant series)
//	lagbridge_quota_known_producers                    producer ids kept (bounded by quota.maxProducers)
//	lagbridge_quota_reports_busy_total                 reports of new ids refused for want of room (503)
type Collector struct {
	// ProducerGrants turns on lagbridge_quota_grant, one series per
	// producer and topic (every producer's id and grant, to whoever reads
	// /metrics). Default false. Set it before the first scrape.
	ProducerGrants bool

	e                                          *Engine
	rate, signal, retryAfter, grant, producers *prometheus.Desc
	refused, known, busy                       *prometheus.Desc
}

// NewCollector registers the engine's metrics on reg.
func NewCollector(reg prometheus.Registerer, e *Engine) *Collector {
	t := []string{"cluster", "topic", "group"}
	c := &Collector{
		e:          e,
		rate:       prometheus.NewDesc("lagbridge_quota_rate", "Allowed produce rate of a target in messages per second; +Inf when unlimited. Under signal stop the SDK admits none of it (in mode advise it sends anyway): it is the policy's minRate, which reaches only a Kafka client quota (kafkaClientQuota).", t, nil),
		signal:     prometheus.NewDesc("lagbridge_quota_signal", "1 for the target's current signal (ok, slow-down, stop, avoid-partitions), 0 for the others.", append(t[:3:3], "signal"), nil),
		retryAfter: prometheus.NewDesc("lagbridge_quota_retry_after_seconds", "Retry-after hint sent with slow-down.", t, nil),
		grant:      prometheus.NewDesc("lagbridge_quota_grant", "Rate granted to a producer on a topic in messages per second; +Inf when unlimited. Under signal stop the SDK admits none of it (in mode advise it sends anyway): only a Kafka client quota (kafkaClientQuota) lets it through.", []string{"cluster", "topic", "producer"}, nil),
		producers:  prometheus.NewDesc("lagbridge_quota_producers", "Producers holding a lease on a topic.", []string{"cluster", "topic"}, nil),
		refused:    prometheus.NewDesc("lagbridge_quota_refused_producers", "Producers a topic's policy does not list that were refused a share (a stop lease).", []string{"cluster", "topic"}, nil),
		known:      prometheus.NewDesc("lagbridge_quota_known_producers", "Producer ids the daemon keeps leases for (at most quota.maxProducers).", nil, nil),
		busy:       prometheus.NewDesc("lagbridge_quota_reports_busy_total", "Reports from new producer ids refused because the daemon keeps quota.maxProducers already (answered 503).", nil, nil),
	}
	reg.MustRegister(c)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rate
	ch <- c.signal
	ch <- c.retryAfter
	ch <- c.grant
	ch <- c.producers
	ch <- c.refused
	ch <- c.known
	ch <- c.busy
}

var signals = []quota.Signal{quota.SignalOK, quota.SignalSlowDown, quota.SignalStop, quota.SignalAvoidPartitions}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	for _, d := range c.e.Decisions() {
		lv := []string{d.Target.Cluster, d.Target.Topic, d.Target.Group}
		g(c.rate, d.Rate, lv...)
		for _, s := range signals {
			v := 0.0
			if d.Signal == s {
				v = 1
			}
			g(c.signal, v, append(lv, s.String())...)
		}
		g(c.retryAfter, d.RetryAfter.Seconds(), lv...)
	}
	count, refused := map[quota.Topic]int{}, map[quota.Topic]int{}
	for _, l := range c.e.Leases() {
		if l.Refused {
			// Counted, not a series each: anyone may report new ids.
			refused[l.Topic]++
			continue
		}
		if c.ProducerGrants {
			g(c.grant, l.Rate, l.Topic.Cluster, l.Topic.Name, l.Producer)
		}
		count[l.Topic]++
	}
	for t, n := range count {
		g(c.producers, float64(n), t.Cluster, t.Name)
	}
	for t, n := range refused {
		g(c.refused, float64(n), t.Cluster, t.Name)
	}
	known, busy := c.e.producerStats()
	g(c.known, float64(known))
	ch <- prometheus.MustNewConstMetric(c.busy, prometheus.CounterValue, float64(busy))
}
