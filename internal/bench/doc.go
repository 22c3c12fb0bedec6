// Package bench is `lagbridge bench`: the overload benchmark matrix of
// issues 7 and 12. Each row of the matrix (see [Row], [FullMatrix],
// [ShortMatrix]) is a consumer as people run it (franz-go's default
// autocommit, autocommit 1 s, commit per poll, the ttl guard, the consumer
// hook; NATS acking each message or in batches), a producer (synchronous
// per request, asynchronous, batches), the daemon's observation interval
// and sometimes an extra (an abandoned second group, a drop before the
// first commit). Every row runs at each offered load twice, in one process
// and one run:
//
//   - naive: producers at a fixed offered rate, three retries per failure,
//     no lagbridge (the daemon watches, nobody listens);
//   - lagbridge: the same producers through the producer SDK
//     (producerclient, Drop mode) under the running daemon (internal/app,
//     a quota policy with maxAge = the consumers' deadline).
//
// Clients use their libraries' defaults unless the row is about a setting.
//
// The scenario (see [DefaultScenario]): a consumer of 2,000 msg/s drops to
// 400 msg/s for a while and recovers; a message consumed more than 2 s
// after it was produced is dead work (it still costs the consumer its
// processing time unless a guard skips it unprocessed); the offered load is
// 2x, 5x and 10x of the reduced capacity, split across three producers of
// different criticality. Every run is bounded in time and prints progress.
//
// [Run] reports per row and load goodput, dead work, head age, refusals
// and false throttling per phase, the excess admitted after the drop next
// to what commits alone allow ([ExcessBound]), and the targets a lagbridge
// run misses ([Targets.Check]), as markdown (bench.md) with a detailed
// side-by-side table per row, a PNG chart over time (bench.png) and one
// CSV per run, all written to Options.OutDir. [Analyze], [Markdown],
// [Chart] and [CSV] are pure functions of the recorded series.
//
// [RunHot] (`lagbridge bench --hot-partition`) is issue 17's other
// scenario: six partitions, one consumed 100x slower than the others,
// keyless and keyed producers, naive and lagbridge side by side, with the
// refusals per partition and partition 0's head age and dead work.
//
// Everything listens on 127.0.0.1 (kfake and an embedded nats-server, fresh
// for every run) unless Options.KafkaBrokers or Options.NATSURL name a real
// cluster, where each run uses its own topic (stream) and consumer groups,
// deleted at the end.
//
// This is wiring and measurement: only cmd/lagbridge imports it. It imports
// the daemon (internal/app, internal/config), the SDK, the ttl guards and
// the broker clients; nothing in the daemon or the SDK may import it.
package bench
