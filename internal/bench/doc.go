// Package bench is `lagbridge bench`: the closed-loop overload benchmark of
// issue 7. It runs one scenario twice per offered load, in one process and
// one run:
//
//   - naive: producers at a fixed offered rate, three retries per failure,
//     no lagbridge (the daemon watches, nobody listens);
//   - lagbridge: the same producers through the producer SDK
//     (producerclient, Drop mode) under the running daemon (internal/app,
//     a quota policy with maxAge = the consumers' deadline), and consumers
//     behind the ttl guard (ttl/kafkaguard, ttl/natsguard) that skip dead
//     work.
//
// The scenario (see [DefaultScenario]): a consumer of 2,000 msg/s drops to
// 400 msg/s for a while and recovers; a message consumed more than 2 s
// after it was produced is dead work (it still costs the consumer its
// processing time unless a guard skips it unprocessed); the offered load is
// 2x, 5x and 10x of the reduced capacity, split across three producers of
// different criticality. Every run is bounded in time and prints progress.
//
// [Run] reports per run goodput, dead work, head age, reaction and
// recovery times, retry amplification and what each criticality got, as a
// side-by-side markdown table (bench.md) and a PNG chart over time
// (bench.png), both written to Options.OutDir. [Analyze], [Markdown] and
// [Chart] are pure functions of the recorded series.
//
// Everything listens on 127.0.0.1 (kfake and an embedded nats-server, fresh
// for every run) unless Options.KafkaBrokers or Options.NATSURL name a real
// cluster, where each run uses its own topic (stream) and consumer group,
// deleted at the end.
//
// This is wiring and measurement: only cmd/lagbridge imports it. It imports
// the daemon (internal/app, internal/config), the SDK, the ttl guards and
// the broker clients; nothing in the daemon or the SDK may import it.
package bench
