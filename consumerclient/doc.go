// Package consumerclient lets a consumer tell the lagbridge daemon where it
// really is: per partition it owns, the first offset (Kafka) or stream
// sequence (NATS) it has not finished, and the timestamp of the message it
// has in hand, or that it is idle. The daemon then measures lag and head age
// from that instead of from commits, which franz-go and the Java client make
// every 5 s by default, or from a NATS ack floor that moves once per batch.
// With it, a deadline of a couple of seconds holds whatever the commit
// interval.
//
// Kafka (franz-go), with no change to the poll loop:
//
//	rep, err := consumerclient.NewKafkaReporter(consumerclient.Config{URL: "http://lagbridge:9464"})
//	...
//	defer rep.Close()
//	cl, err := kgo.NewClient(kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
//		kgo.WithHooks(rep.Hook()))
//
// A record returned by a poll is in hand until the next poll starts (then
// everything before it is finished); a ttl/kafkaguard guard with the
// reporter as its Progress says so record by record instead. So the
// default fits a poll loop that handles what it polled before it polls
// again. A consumer that hands records to other goroutines and polls on
// (a goroutine per partition, a worker pool) would have them reported
// finished while they wait in its queues, and the daemon trusts fresh
// reports over the commits: give it Config.KeepUntilFinished, and a
// record stays in hand until the consumer says it is finished, Done for
// one record (in any order), Finished for it and every earlier one of its
// partition. The head time is then the oldest unfinished record's, and
// the position a count of the records finished (the offset after the
// last polled less the unfinished in hand), so that the lag is the
// records not finished and one slow record reads as its own age, not as
// a backlog of what the other workers finished after it:
//
//	rep, err := consumerclient.NewKafkaReporter(consumerclient.Config{
//		URL: "http://lagbridge:9464", KeepUntilFinished: true})
//	...
//	forget := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
//		stopWorkers(m) // the workers of m drop their queues
//		rep.Revoked(m)
//	}
//	cl, err := kgo.NewClient(kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
//		kgo.WithHooks(rep.Hook()), kgo.OnPartitionsRevoked(forget), kgo.OnPartitionsLost(forget))
//	...
//	// each worker, for each record of its queue:
//	handle(rec)
//	rep.Done(rec)
//
// A partition in hand also says how many records it holds and for how
// long the consumer has finished none (since the poll, or the last
// finished record; with KeepUntilFinished, since the last finished record
// or since the partition took its first record in hand): the daemon
// bounds the consumer's capacity by it before the position moves.
//
// NATS JetStream: wrap the handler, or call Received and Done around each
// message (a ttl/natsguard guard with the reporter as its Progress does):
//
//	rep, err := consumerclient.NewNATSReporter(consumerclient.Config{URL: "http://lagbridge:9464"})
//	...
//	cc, err := consumer.Consume(rep.Wrap(handle))
//
// It also says how many messages it holds from its oldest in hand on and
// for how long it has finished none, as the Kafka hook does.
//
// Each reporter owns one goroutine, started by its constructor and stopped
// by Close, that sends a report every Config.Interval (250ms by default) to
// POST /v1/consumers/report (see producerclient/quotaproto). A daemon that
// is down or slow never blocks or breaks the consumer: a report that cannot
// be sent is dropped and counted, and the next one carries the news. When
// reports stop, the daemon falls back to commits within a few seconds.
//
// It imports franz-go, nats.go, client_golang and the protocol's wire
// types (quotaproto); never the daemon's packages or viper.
package consumerclient
