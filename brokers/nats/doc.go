// Package nats is lagbridge's NATS JetStream observer: it reads stream and
// consumer state through the JetStream API and reports one lag.Sample per
// watched consumer (durable or ephemeral, pull or push, one filter subject
// or several). It does the I/O only; the lag package does the math.
//
// It imports nats.go (core and jetstream) and lag. It must not import the
// quota, producerclient, ttl or cmd packages, nor viper: configuration
// arrives as a plain [Config].
//
// # What one sample holds
//
// Each sample has a single PartitionSample with Partition 0. From the
// consumer info (NumPending, NumAckPending, NumRedelivered, AckFloor,
// Delivered) and the stream state read right after it (FirstSeq, LastSeq,
// Msgs):
//
//   - Lag = NumPending + NumAckPending: messages not yet processed
//     (undelivered plus delivered-but-unacknowledged), after the
//     cross-checks below.
//   - AckPending = NumAckPending, Redelivered = NumRedelivered.
//   - Committed = AckFloor.Stream + 1: the first stream sequence not yet
//     acknowledged (for a consumer created with DeliverNew or a start
//     sequence, the server sets the floor just below its start). It is
//     never -1: a consumer always has a floor.
//   - LogStart = the stream's FirstSeq.
//   - End, a counter of messages made available to this consumer, so that
//     ΔEnd is production and Δ(End-Lag) is consumption:
//     unfiltered consumers (no filter, ">", or the stream's own subject
//     set): End = LastSeq + 1, exact, in stream sequences.
//     Filtered consumers: End = Delivered.Consumer + NumPending, in
//     deliveries, minus the deliveries known to be redeliveries. The
//     consumer sequence counts every redelivery and the stream holds no
//     per-filter "ever published" counter, so redeliveries are told from
//     acknowledgements by the consumer's last-ack time, AckFloor.Last,
//     which the server stamps on every ack and term (never on a nak or an
//     in-progress): between two readings with the same stamp nothing was
//     acknowledged, so the growth of Delivered.Consumer minus
//     NumAckPending is redeliveries (or ack-pending messages removed from
//     the stream) and is taken out of End. A consumer that only receives
//     redeliveries thus consumes nothing, as an unfiltered one: its End
//     moves by the change in NumPending + NumAckPending, its consumed
//     position by removals only. Approximation: redeliveries in a refresh
//     interval that also saw an acknowledgement (or a stamp reset by a
//     server restart or a leader change) still count, raising the produce
//     and the consume rate by them (lag is unaffected). AckNone consumers
//     have no redeliveries and count deliveries as they are.
//     End never decreases for the same consumer (nor falls below Lag): a
//     drop (undelivered messages removed by a purge, MaxAge or MaxMsgs; a
//     consumer reset) is kept as an offset, so removal reads as
//     consumption. The offset restarts when the stream or consumer is
//     recreated or its filters change. For a filtered consumer End is not
//     in stream sequences and must not be compared with LogStart or
//     Committed; only its deltas mean something.
//   - HeadTime: the stored timestamp of the oldest unprocessed message:
//     the first stored message with sequence > AckFloor.Stream matching a
//     filter subject (">" when unfiltered), read with a "next by subject"
//     get: direct get when the stream has AllowDirect, the MSG.GET API
//     otherwise; one get per filter, the earliest wins. Cached per consumer
//     by (ack floor, identity) while that message is still stored, so an
//     ack floor that does not move costs no get. HeadKnown is false when
//     Lag is 0 (nothing to date) or the get failed (Err says why).
//     Caveat: a head message deleted individually (DeleteMsg) while the
//     ack floor stays put keeps its cached time until the floor moves.
//   - Members and GroupState: a push consumer reports 1 ("active") when
//     its deliver subject has a subscriber (PushBound), else 0
//     ("inactive"). A pull consumer reports NumWaiting ("active") when it
//     has waiting pull requests; with none it reports -1 ("idle"), since a
//     live client between two fetches also has none. A paused consumer
//     reports "paused".
//   - Skipped: the messages the consumer terminated as expired since the
//     previous refresh (the ttl guard's terms, counted from the server's
//     MSG_TERMINATED advisories; see skips.go): the part of the
//     consumption that cost it nothing.
//
// Worked example, unfiltered consumer: stream FirstSeq 1, LastSeq 100,
// Msgs 100; consumer AckFloor.Stream 40, Delivered.Stream 60, NumAckPending
// 5, NumPending 40. Lag 45, AckPending 5, Committed 41, LogStart 1, End
// 101, End-Lag 56. Then MaxAge removes sequences 1..80 (FirstSeq 81, Msgs
// 20) with nothing acked: the server now reports NumPending 20 (81..100)
// but still NumAckPending 5 for messages that are gone. Stored after the
// floor: min(20, 100 - max(40, 80)) = 20, so Lag is clamped to 20, End
// stays 101 and End-Lag rises to 81 (removal reads as consumption).
//
// # Cross-checks
//
// No single counter is trusted. With the stream listed at the start of the
// cycle (before) and read again right after the consumer infos (after):
//
//   - NumPending <= before.Msgs + (after.LastSeq - before.LastSeq): the
//     undelivered messages are stored ones. Otherwise Err "pending exceeds
//     stream messages: ..." and NumPending is clamped.
//   - Unfiltered consumers (except DeliverLastPerSubject): NumPending >=
//     the stored messages after Delivered.Stream that existed at the start
//     of the cycle, (before.LastSeq - max(Delivered.Stream, FirstSeq-1))
//     minus the interior deletes. NumPending is a running counter in the
//     server and was seen stuck low after MaxAge expiry. Otherwise Err
//     "pending below stored messages after delivered: ..." and raised.
//   - NumPending + NumAckPending <= after.LastSeq - AckFloor.Stream: each
//     unprocessed message has its own sequence after the floor. Otherwise
//     Err "unprocessed exceeds sequences after ack floor: ..." and clamped.
//     A floor beyond LastSeq (stream reset) is reported too.
//   - Not an error, a clamp: Lag <= the number of stored messages after the
//     ack floor, min(Msgs, LastSeq - max(AckFloor.Stream, FirstSeq-1)).
//     After a purge or MaxAge removal (LogStart jumping past the ack floor)
//     lag counts only what is stored.
//
// Messages published after the start of the cycle are not held against
// NumPending: the server counts a publish a moment after acknowledging it.
// Likewise End (from the stream read) can include messages published after
// the consumer read, which Lag does not count yet: the offset is of the
// same size from cycle to cycle and cancels in the rates.
//
// A PartitionSample with Err set and Stale false holds this cycle's
// values, clamped; Err is a warning (failed cross-check, unreadable head).
// Stale true means the values are from an earlier cycle.
//
// # API load
//
// Per cycle: ceil(streams/256) STREAM.LIST pages; then for each watched
// stream that is due: ceil(consumers/256) CONSUMER.LIST pages (which carry
// the full consumer infos, so no per-consumer CONSUMER.INFO is needed), one
// STREAM.INFO, and one get per filter of each lagging consumer whose ack
// floor moved. A stream is due once per Config.InfoInterval; its second
// refresh is delayed by a stable per-stream share of Jitter*InfoInterval,
// spreading the refreshes of streams first read together. Between
// refreshes Observe repeats the stream's last samples with their original
// At (the core must not read a repeated At as a new observation); they are
// marked Stale once older than 3*InfoInterval. Every listing is bounded by
// Config.MaxListPages. Stats counts all of it.
//
// # Connection
//
// New connects with unlimited reconnects. While the connection is down
// Observe fails at once with ErrNotConnected; once nats.go has reconnected
// it works again. Close drains the connection. The connection holds one
// subscription of the observer's, to the MSG_TERMINATED advisories
// ($JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>), which needs permission
// to subscribe there: without it the skips are not counted (one warning).
package nats
