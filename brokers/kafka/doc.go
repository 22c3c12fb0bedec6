// Package kafka is lagbridge's Kafka observer: once per cycle it reads, for
// every watched (consumer group, topic) pair, the log start, end and
// committed offset of each partition and the timestamp of the oldest
// unconsumed record, and returns them as plain [lag.Sample] values. The math
// on those values (rates, time to drain, status) belongs to package lag.
//
// # What is watched
//
// A group is watched when its name passes [Config.Groups]; a topic when its
// name passes [Config.Topics] and it is not internal. A pair (group, topic)
// is reported when the group has committed offsets for the topic, or its
// members subscribe to it or are assigned it, or (a classic group in a
// rebalance, which Kafka describes without its members' subscriptions)
// was reported at the last cycle. A classic group's liveness in
// PreparingRebalance reads from the assignments where its coordinator
// still shows them there (Kafka 4.x: a broker that answers DescribeGroups
// v6), and is unknown on Kafka 3.x, whose classic coordinator shows every
// member without one outside Stable (read idle, the group was abandoned
// after Rules.AbandonAfter of rebalance), and in CompletingRebalance.
// Classic groups and KIP-848
// ("consumer" protocol) groups are both covered; an Empty group that still
// has commits keeps being measured, so its lag grows with the log end. Share
// groups are not observed (their progress is not a committed offset).
//
// # What is measured, per partition
//
//   - LogStart: the log start offset (ListOffsets, timestamp -2).
//   - End: the last stable offset (ListOffsets, timestamp -1, read_committed).
//     Records of open transactions are therefore not lag yet, and aborted
//     records never are; on a topic without transactions LSO equals the high
//     watermark.
//   - Committed: the group's committed offset, -1 when it has none.
//   - Lag: End minus the consumer position, where the position is the
//     committed offset, or the log start offset when retention removed
//     records the group had not consumed (those will never be consumed, so
//     they are counted as consumed). A partition without a commit has no
//     known position (where the group starts depends on its reset policy; a
//     group started at the end commits nothing on an idle partition), so
//     its lag is unknown, as kafka-consumer-groups shows it ("-"): it is
//     reported with Committed -1, Lag 0 and HeadKnown false, no head is
//     fetched for it, and lag.Tracker counts it in State.Uncommitted, not in
//     the lag, head age or status of the target. When the head
//     fetch shows that the records from the position onwards are only
//     transaction markers, aborted records or compacted-away offsets, the
//     position moves past them, so a caught-up consumer of a transactional
//     topic has lag 0, not 1. Lag counts offsets from there on, so markers
//     and aborted records after the head still count (one pending
//     transactional record and its commit marker are lag 2), as in Kafka's
//     own tools. Negative values (a commit ahead of the LSO, or offsets read
//     a moment apart) are clamped to 0.
//   - HeadTime: the timestamp of the first consumable record at or after the
//     position, read with a Fetch (read_committed, decompressed by
//     kgo.ProcessFetchPartition). The first record at or after, not at: the
//     record at the committed offset may be a marker or compacted away.
//
// A worked example: log start 10, end 30. Committed 5 (retention removed 5
// to 9): lag 20, not 25, and the head is the record at offset 10. Committed
// 29, and offset 29 is a commit marker: lag 0. No commit: lag unknown
// (reported as 0 with Committed -1), not 20 and not 30.
//
// # Cost of one cycle
//
// Five sequential phases, each bounded by Config.RequestTimeout: one
// Metadata request (to the broker that answered last time, then the others);
// one ListGroups per broker; one DescribeGroups and
// (when KIP-848 groups exist) one ConsumerGroupDescribe per group
// coordinator (and, beside them, one ApiVersions to the coordinator of a
// classic group in PreparingRebalance not answered within 10 minutes, or
// reached on a new connection since: a broker restarted, perhaps rolled
// back to 3.x, is asked again; one whose ApiVersions failed has no answer
// kept, and is asked at every cycle until it answers);
// OffsetFetch to each coordinator for its groups, batched so
// that each answer stays within a quarter of kgo.BrokerMaxReadBytes
// (planned from each group's answer last cycle, or from the cluster's
// partition count for a group not seen before: one request per coordinator
// in a warm cycle at 1,000 groups of 200 partitions); two ListOffsets per
// partition leader (log start, and end under read_committed) for the
// partitions of watched pairs only; and at most one Fetch per partition leader for head records,
// none when every head is cached. The OffsetFetch and ListOffsets answers
// are decoded into storage kept from cycle to cycle, so a warm cycle
// allocates little beyond the samples it returns. At 10,000 partitions and
// 1,000 groups (200,000 group-partitions) a cycle against an in-process
// kfake broker on two cores takes about 0.1-0.2 s with warm heads and
// 0.25-0.4 s with every head fetched, broker work included; with the broker
// in another process a warm cycle allocates about 9 MB beyond the 34 MB of
// samples it returns (BenchmarkObserve, broker=process, beyond-B/op).
// Heads are cached by (topic, partition, offset), so a group whose committed offset did not move costs no
// fetch, except that a cached head record is read again once a minute:
// compaction can remove it (the new head is then newer and the lag smaller),
// so on a compacted topic a removed head is reported for at most that long.
// Until the new read answers, the cached head stands. One Fetch carries each
// partition once; when several groups wait on different offsets of one
// partition, the cycle fetches one of them (rotating from cycle to cycle)
// and any others that the returned bytes happen to cover, and the rest
// report HeadKnown false until their turn.
//
// # Failures
//
// Observe returns an error only when nothing could be observed (no broker
// answered Metadata or ListGroups). A broker that fails ListGroups with a
// transport error (timeout, closed connection) is not asked again in that
// cycle: the partitions it leads are stale at once, so one hung broker costs
// one RequestTimeout per cycle rather than one per phase. A partition whose offsets could not be
// read is returned with Stale and Err and no lag (a lag computed from a fresh
// end and a missing commit would be a spike); a group whose offsets could not
// be fetched, or whose coordinator did not answer ListGroups, is returned with
// Sample.Err and stale partitions for the pairs it had in the last good
// cycle. Keeping previous values is the lag.Tracker's job.
//
// This package imports franz-go (kgo, kadm, kmsg, sasl) and lag. It must not
// import the daemon's other packages (quota, publishers, cmd), viper, or a
// metrics library: callers label and export what it returns.
package kafka
