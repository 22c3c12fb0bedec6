// Package producerclient is lagbridge's producer SDK: a thin wrapper around
// a franz-go *kgo.Client ([KafkaProducer]) or a NATS [jetstream.JetStream]
// ([NATSProducer]) that honours the caller's half of the backpressure
// contract a broker hides:
//
//   - Quotas. Each topic (Kafka topic, NATS stream) has a lease from the
//     lagbridge daemon: a rate and burst (a token bucket), and a signal (ok,
//     slow-down with a retry-after hint, stop, avoid-partitions). Leases are
//     pushed over HTTP (long-poll or server-sent events, see quotaproto) or
//     read from a NATS KV bucket. Without a valid lease the producer runs on
//     a safe quota, open by default (fail-static: a lease is kept until it
//     expires), so the daemon is never a new single point of failure.
//   - An in-flight cap per topic, and per call the choice of [Block] (wait
//     for capacity up to the context's deadline) or [Drop] (fail at once).
//   - One retry layer: franz-go's and nats.go's own retries are turned off
//     ([KafkaClientOpts], [NewNATS]); the SDK retries broker failures under
//     one shared [RetryBudget] (a ratio of requests with a floor, or
//     gRPC-style tokens), honours the lease's retry-after and stop, and
//     throttles adaptively when the broker rejects most requests (the SRE
//     book's requests vs K*accepts over two minutes). A broker answer that
//     is the request's own fault (a Kafka topic that does not exist, a
//     record too large, not authorized; a JetStream refusal of the message
//     itself) is a stop and counts toward neither: it says nothing about
//     the broker's load. Nor does a subject that JetStream's stream list
//     says no stream captures (asked once when no stream answered a
//     publish, the answer cached for a second), which is a slow-down
//     carrying jetstream.ErrStreamNotFound, not a stop: the list holds only
//     the streams' own subjects, so a subject that an account mapping or
//     an import leads to a stream without a leader reads the same. A missing Kafka topic or NATS
//     stream is retried once, the first time a producer hears it for the
//     topic or subject (one created a moment ago that the broker's
//     metadata lists ~100 ms late), then not again. A Kafka partition
//     whose leader moved or is not elected yet (NOT_LEADER_FOR_PARTITION,
//     LEADER_NOT_AVAILABLE) is retried within the retry budget and does
//     not count toward the adaptive throttle.
//   - Deadline and criticality travel with every message as the
//     lagbridge-deadline and lagbridge-criticality headers (format in the
//     ttl package); a context deadline becomes the message's deadline; on
//     NATS streams that allow it, Nats-TTL too. The defaults are written
//     by leaving the header out (the format reads no criticality header as
//     CRITICAL and no deadline header as no deadline), so default traffic
//     costs no header bytes.
//   - Typed errors. A message the SDK does not deliver comes back to the
//     caller inside a [*RejectError] that matches one signal ([ErrSlowDown],
//     [ErrStop], [ErrAvoidPartitions]) and one reason ([ErrRateLimited],
//     [ErrThrottled], [ErrQuotaUnavailable], [ErrClosed], ...) with
//     errors.Is. Nothing is dropped quietly.
//   - Metrics (lagbridge_client_*) on an injected prometheus.Registerer.
//
// Rejection is the cheapest path: the admit check is a few atomic
// operations and no allocation (see BenchmarkAdmit).
//
// # Goroutines
//
// A producer starts, and its Close stops and waits for: the lease owner
// (the one goroutine that writes lease state) and its sources (reporter,
// watcher or stream reader, or KV watcher) when leases are configured; the
// NATS producer's ack collector; and one short-lived goroutine per pending
// retry. Every exported method is safe for concurrent use.
//
// # Imports
//
// This package imports the client libraries it wraps (franz-go, nats.go),
// client_golang, and lagbridge's quotaproto and ttl. It must never import
// viper or any daemon package (internal/*, quota, lag, brokers): producers
// link it into their own binaries. A test enforces this.
package producerclient
