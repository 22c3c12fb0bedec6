// Package ttlmetrics holds the Prometheus metrics of the consumer-side TTL
// guards (ttl/kafkaguard, ttl/natsguard). Create one [Metrics] per process
// (per Registerer) and give it to every guard; guards share the series.
//
// It imports prometheus/client_golang and the ttl core only; it must not
// import broker clients or the daemon.
//
// # Metrics
//
// All are counters with a topic label (the Kafka topic, or the NATS
// stream):
//
//	lagbridge_ttl_consumed_total{topic}                messages the guards received
//	lagbridge_ttl_expired_total{topic,reason}          skipped as dead work (reason: deadline, max-age)
//	lagbridge_ttl_late_total{topic}                    handled, but the handler returned at/after the deadline
//	lagbridge_ttl_handler_errors_total{topic}          handler returned an error
//	lagbridge_ttl_malformed_headers_total{topic}       a lagbridge header was malformed (judged as absent)
//	lagbridge_ttl_deadletter_total{topic,reason}       expired messages forwarded to the dead-letter destination
//	lagbridge_ttl_deadletter_errors_total{topic}       forwards that failed (the message is redelivered)
//	lagbridge_ttl_settle_errors_total{topic}           acks of expired messages that failed (NATS)
//
// The dead-work ratio is computed in PromQL, not exported as a gauge
// (ratios of counters aggregate correctly across instances, a ratio gauge
// does not):
//
//	# share of consumed messages that arrived already dead (skipped)
//	sum by (topic) (rate(lagbridge_ttl_expired_total[5m]))
//	  / sum by (topic) (rate(lagbridge_ttl_consumed_total[5m]))
//	# share that was dead work done anyway (expired while being handled)
//	sum by (topic) (rate(lagbridge_ttl_late_total[5m]))
//	  / sum by (topic) (rate(lagbridge_ttl_consumed_total[5m]))
//
// Processed messages are consumed - expired - handler errors. To tell
// guards of different consumer groups apart, register through
// prometheus.WrapRegistererWith(prometheus.Labels{"group": ...}, reg).
package ttlmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/ttl"
)

// Metrics is the set of consumer-side TTL counters. It is safe for
// concurrent use. A nil *Metrics records nothing.
type Metrics struct {
	consumed, late, handlerErrors, malformed, deadLetterErrors, settleErrors *prometheus.CounterVec
	expired, deadLettered                                                    *prometheus.CounterVec

	topics sync.Map // topic -> *Topic
}

// New creates the counters and registers them on reg (never the global
// registry unless that is what reg is). It returns the registration error,
// e.g. prometheus.AlreadyRegisteredError when reg already holds them.
func New(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		consumed:         counter("lagbridge_ttl_consumed_total", "Messages received by a consumer-side TTL guard.", "topic"),
		expired:          counter("lagbridge_ttl_expired_total", "Messages skipped as dead work (acknowledged or committed past without handling), by reason.", "topic", "reason"),
		late:             counter("lagbridge_ttl_late_total", "Messages handled whose handler returned at or after their deadline (dead work done).", "topic"),
		handlerErrors:    counter("lagbridge_ttl_handler_errors_total", "Live messages whose handler returned an error.", "topic"),
		malformed:        counter("lagbridge_ttl_malformed_headers_total", "Messages with a malformed lagbridge header, judged as if it were absent.", "topic"),
		deadLettered:     counter("lagbridge_ttl_deadletter_total", "Expired messages forwarded to the dead-letter destination, by reason.", "topic", "reason"),
		deadLetterErrors: counter("lagbridge_ttl_deadletter_errors_total", "Dead-letter forwards that failed; the message is delivered again.", "topic"),
		settleErrors:     counter("lagbridge_ttl_settle_errors_total", "Acknowledgements of expired messages that failed.", "topic"),
	}
	for _, c := range []prometheus.Collector{m.consumed, m.expired, m.late, m.handlerErrors, m.malformed,
		m.deadLettered, m.deadLetterErrors, m.settleErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Topic returns the counters of one topic (or stream), creating its series
// on first use (all at zero, so that rate() works from the first
// increment). The result is cached: after the first call per topic this is
// one sync.Map lookup. A nil m returns nil, whose methods do nothing.
func (m *Metrics) Topic(topic string) *Topic {
	if m == nil {
		return nil
	}
	if t, ok := m.topics.Load(topic); ok {
		return t.(*Topic)
	}
	t := &Topic{
		consumed:         m.consumed.WithLabelValues(topic),
		late:             m.late.WithLabelValues(topic),
		handlerErrors:    m.handlerErrors.WithLabelValues(topic),
		malformed:        m.malformed.WithLabelValues(topic),
		deadLetterErrors: m.deadLetterErrors.WithLabelValues(topic),
		settleErrors:     m.settleErrors.WithLabelValues(topic),
	}
	for _, r := range ttl.ExpiredReasons {
		t.expired[r] = m.expired.WithLabelValues(topic, r.String())
		t.deadLettered[r] = m.deadLettered.WithLabelValues(topic, r.String())
	}
	actual, _ := m.topics.LoadOrStore(topic, t)
	return actual.(*Topic)
}

// Topic is one topic's counters. Each method is one atomic add; all are
// safe for concurrent use and do nothing on a nil *Topic.
type Topic struct {
	consumed, late, handlerErrors, malformed, deadLetterErrors, settleErrors prometheus.Counter
	expired, deadLettered                                                    [ttl.NumReasons]prometheus.Counter
}

// Consumed counts one received message.
func (t *Topic) Consumed() {
	if t != nil {
		t.consumed.Inc()
	}
}

// Expired counts one message skipped for r (Live and unknown reasons are
// ignored).
func (t *Topic) Expired(r ttl.Reason) {
	if t != nil && int(r) < len(t.expired) && t.expired[r] != nil {
		t.expired[r].Inc()
	}
}

// Late counts one message handled at or after its deadline.
func (t *Topic) Late() {
	if t != nil {
		t.late.Inc()
	}
}

// HandlerError counts one handler error.
func (t *Topic) HandlerError() {
	if t != nil {
		t.handlerErrors.Inc()
	}
}

// Malformed counts one message with a malformed lagbridge header.
func (t *Topic) Malformed() {
	if t != nil {
		t.malformed.Inc()
	}
}

// DeadLettered counts one expired message forwarded for r.
func (t *Topic) DeadLettered(r ttl.Reason) {
	if t != nil && int(r) < len(t.deadLettered) && t.deadLettered[r] != nil {
		t.deadLettered[r].Inc()
	}
}

// DeadLetterFailed counts one failed forward.
func (t *Topic) DeadLetterFailed() {
	if t != nil {
		t.deadLetterErrors.Inc()
	}
}

// SettleFailed counts one failed acknowledgement of an expired message.
func (t *Topic) SettleFailed() {
	if t != nil {
		t.settleErrors.Inc()
	}
}
