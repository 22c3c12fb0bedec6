package producerclient

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes the producer's counters as lagbridge_client_* metrics.
// It reads the same atomics the hot path writes, at scrape time, so
// metrics cost the hot path nothing beyond those atomic adds.
type collector struct {
	c *core

	admitted, rejected, attempts, retries, acked, brokerErrs, advisory     *prometheus.Desc
	inFlight, quotaRate, quotaSignal, leaseValid, leaseVersion, leaseAge   *prometheus.Desc
	throttle, budget, leaseErrors, leaseMalformed, leaseExpired, unhandled *prometheus.Desc
	leaseFailovers, leasePlans                                             *prometheus.Desc
}

func newCollector(c *core) *collector {
	pl := prometheus.Labels{"producer": c.cfg.Producer}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("lagbridge_client_"+name, help, labels, pl)
	}
	return &collector{
		c:              c,
		admitted:       d("admitted_total", "Messages admitted by the local quota (before any broker attempt).", "topic"),
		rejected:       d("rejected_total", "Messages handed back to the caller with an error, by reason (rate, in_flight, throttled, stop, quota_unavailable, closed, expired, broker, retry_budget, canceled, partition).", "topic", "reason"),
		attempts:       d("attempts_total", "Sends to the broker, first attempts and retries.", "topic"),
		retries:        d("retries_total", "Retries granted by the retry budget.", "topic"),
		acked:          d("acked_total", "Messages acknowledged by the broker.", "topic"),
		brokerErrs:     d("broker_errors_total", "Failed broker attempts.", "topic"),
		advisory:       d("advisory_violations_total", "Messages an enforced lease would have refused, sent anyway: over an advisory lease's rate, and every one under an advisory stop.", "topic"),
		inFlight:       d("in_flight", "Messages admitted and not yet finally acknowledged or failed.", "topic"),
		quotaRate:      d("quota_rate", "Enforced rate in messages per second (+Inf: unlimited).", "topic"),
		quotaSignal:    d("quota_signal", "Signal of the enforced quota: 0 ok, 1 slow-down, 2 stop, 3 avoid-partitions.", "topic"),
		leaseValid:     d("lease_valid", "1 while a lease from the daemon applies, 0 on the safe quota.", "topic"),
		leaseVersion:   d("lease_version", "Version of the current lease (0 on the safe quota).", "topic"),
		leaseAge:       d("lease_age_seconds", "Time since the current lease arrived (absent on the safe quota).", "topic"),
		throttle:       d("throttle_probability", "Adaptive throttling's current local rejection probability.", "topic"),
		budget:         d("retry_budget_tokens", "Retries the shared retry budget would allow now."),
		leaseErrors:    d("lease_errors_total", "Failed requests to the lease source."),
		leaseMalformed: d("lease_malformed_total", "Leases or lease sets skipped as malformed, stream events over the size cap, lease sets with a garbled version, leases for new topics beyond 256, and lease plans dropped as invalid."),
		leaseExpired:   d("lease_expired_total", "Leases that expired without a refresh (the safe quota applied)."),
		unhandled:      d("unhandled_failures_total", "Async failures with no callback to hand the message to (logged)."),
		leaseFailovers: d("lease_failovers_total", "Moves to the next daemon URL after the current one stopped working."),
		leasePlans:     d("lease_plans_total", "Lease plans that took effect: no newer lease came by the time a lease said its rate changes (protocol 1.2)."),
	}
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.admitted, m.rejected, m.attempts, m.retries, m.acked, m.brokerErrs,
		m.advisory, m.inFlight, m.quotaRate, m.quotaSignal, m.leaseValid, m.leaseVersion, m.leaseAge, m.throttle,
		m.budget, m.leaseErrors, m.leaseMalformed, m.leaseExpired, m.unhandled, m.leaseFailovers, m.leasePlans} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	now := c.clock.Now()
	mono := c.mono.nanos()
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for name, t := range *c.topics.Load() {
		counter(m.admitted, t.admitted.Load(), name)
		for r := range t.rejected {
			counter(m.rejected, t.rejected[r].Load(), name, reasonNames[r])
		}
		counter(m.attempts, t.attempts.Load(), name)
		counter(m.retries, t.retries.Load(), name)
		counter(m.acked, t.accepted.Load(), name)
		counter(m.brokerErrs, t.brokerErrs.Load(), name)
		counter(m.advisory, t.advisory.Load(), name)
		gauge(m.inFlight, float64(t.inflight.count()), name)
		v := t.view.Load()
		rate := v.rate
		if v.closed {
			rate = 0
		}
		gauge(m.quotaRate, rate, name)
		gauge(m.quotaSignal, float64(v.signal), name)
		valid := 0.0
		if v.fromLease {
			valid = 1
			gauge(m.leaseAge, math.Max(0, now.Sub(v.received).Seconds()), name)
		}
		gauge(m.leaseValid, valid, name)
		gauge(m.leaseVersion, float64(v.version), name)
		gauge(m.throttle, t.throttle.probability(mono), name)
	}
	gauge(m.budget, c.budget.Tokens())
	o := c.leases
	counter(m.leaseErrors, o.errorsTotal.Load())
	counter(m.leaseMalformed, o.malformed.Load())
	counter(m.leaseExpired, o.expiredTotal.Load())
	counter(m.unhandled, c.unhandled.Load())
	counter(m.leaseFailovers, o.failovers.Load())
	counter(m.leasePlans, o.plannedTotal.Load())
}

// Stats is a snapshot of a producer's counters (the same numbers as the
// lagbridge_client_* metrics).
type Stats struct {
	Topics map[string]TopicStats
	// RetryBudgetTokens is what the retry budget would allow now.
	RetryBudgetTokens float64
	// Lease source counters.
	LeaseErrors, LeaseMalformed, LeaseExpired, LeasesApplied uint64
	// LeaseFailovers counts moves to the next daemon URL; LeaseURL is the
	// daemon the HTTP lease sources talk to now ("" without one).
	LeaseFailovers uint64
	LeaseURL       string
	// LeasePlans counts lease plans that took effect (no newer lease
	// came by the time a lease said its rate changes).
	LeasePlans uint64
	// UnhandledFailures counts async failures without a callback.
	UnhandledFailures uint64
}

// TopicStats are one topic's counters.
type TopicStats struct {
	// Admitted by the local quota; Attempts sent to the broker (first
	// tries and retries); Retries granted; Acked by the broker;
	// BrokerErrors failed attempts; AdvisoryViolations what an enforced
	// lease would have refused: over an advisory lease's rate, and every
	// message under an advisory stop.
	Admitted, Attempts, Retries, Acked, BrokerErrors, AdvisoryViolations uint64
	// Rejected by reason: rate, in_flight, throttled, stop,
	// quota_unavailable, closed, expired, broker, retry_budget, canceled,
	// partition (a keyed record bound for an avoided partition, see
	// PartitionBusyError).
	Rejected map[string]uint64
	// InFlight now.
	InFlight int64
	// ThrottleProbability now.
	ThrottleProbability float64
}

// RejectedTotal sums Rejected.
func (s TopicStats) RejectedTotal() uint64 {
	var n uint64
	for _, v := range s.Rejected {
		n += v
	}
	return n
}

func (c *core) stats() Stats {
	s := Stats{Topics: map[string]TopicStats{}, RetryBudgetTokens: c.budget.Tokens(),
		LeaseErrors: c.leases.errorsTotal.Load(), LeaseMalformed: c.leases.malformed.Load(),
		LeaseExpired: c.leases.expiredTotal.Load(), LeasesApplied: c.leases.appliedTotal.Load(),
		UnhandledFailures: c.unhandled.Load(), LeaseFailovers: c.leases.failovers.Load(),
		LeasePlans: c.leases.plannedTotal.Load()}
	if eps := c.leases.endpoints; len(eps) > 0 {
		s.LeaseURL = eps[c.leases.current.Load()]
	}
	mono := c.mono.nanos()
	for name, t := range *c.topics.Load() {
		ts := TopicStats{Admitted: t.admitted.Load(), Attempts: t.attempts.Load(), Retries: t.retries.Load(),
			Acked: t.accepted.Load(), BrokerErrors: t.brokerErrs.Load(), AdvisoryViolations: t.advisory.Load(),
			InFlight: t.inflight.count(), ThrottleProbability: t.throttle.probability(mono),
			Rejected: map[string]uint64{}}
		for r := range t.rejected {
			if n := t.rejected[r].Load(); n > 0 {
				ts.Rejected[reasonNames[r]] = n
			}
		}
		s.Topics[name] = ts
	}
	return s
}
