package integration

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/lag"
)

// TestRealKafkaMatchesKafkaTooling: lag per partition agrees with Kafka's
// own kafka-consumer-groups on the same (now empty) group, and head age is
// measured from the known timestamp of the record at the committed offset.
func TestRealKafkaMatchesKafkaTooling(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group := unique("orders"), unique("billing")
	createTopic(t, addr, topic, 3, nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	prod := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 3; p++ {
		produce(t, prod, topic, p, 100, func(i int) time.Time { return base.Add(time.Duration(int(p)*1000+i) * time.Second) })
	}
	consumeAndCommit(t, addr, group, topic, 250) // 250 of 3x100: every partition has a commit

	o := observer(t, addr, group)
	s := observeUntil(t, o, topic, group, func(s lag.Sample) bool { return totalLag(s) == 300-250 && s.Members == 0 })
	rows, err := kafkatest.GroupsDescribe(t, group)
	if err != nil {
		t.Fatal(err)
	}
	// kafka-consumer-groups lists only the partitions an inactive group
	// committed (and shows lag "-" for an active group's others);
	// lagbridge reports the others too, with no commit and unknown lag
	// (Lag 0, no head), which counts in no total.
	seen := map[int32]bool{}
	for _, r := range rows {
		seen[r.Partition] = true
		p := s.Partitions[r.Partition]
		if p.End != r.LogEndOffset || p.Committed != r.CurrentOffset || p.Lag != r.Lag {
			t.Errorf("partition %d: lagbridge end=%d committed=%d lag=%d; kafka-consumer-groups %+v", r.Partition, p.End, p.Committed, p.Lag, r)
		}
	}
	for _, p := range s.Partitions {
		if !seen[p.Partition] && (p.Committed != -1 || p.Lag != 0 || p.HeadKnown) {
			t.Errorf("uncommitted partition %d: committed=%d lag=%d head known %v, want -1, 0 and no head", p.Partition, p.Committed, p.Lag, p.HeadKnown)
		}
		if p.Lag > 0 {
			// The head is the record at the committed offset.
			c := p.Committed
			want := base.Add(time.Duration(int(p.Partition)*1000+int(c)) * time.Second)
			if !p.HeadKnown || !p.HeadTime.Equal(want) {
				t.Errorf("partition %d: head %v (known %v), want the timestamp of offset %d: %v", p.Partition, p.HeadTime, p.HeadKnown, c, want)
			}
		}
	}
	t.Logf("lagbridge and kafka-consumer-groups agree on %d partitions, total lag %d", len(rows), kafkatest.TotalLag(rows))

	// The group is empty; its lag keeps growing with the end offset.
	produce(t, prod, topic, 0, 25, func(int) time.Time { return time.Now() })
	observeUntil(t, o, topic, group, func(s lag.Sample) bool { return totalLag(s) == 300-250+25 })

	// Fold the readings: an empty group with work waiting, never seen
	// live since the tracker started, is abandoned from its first reading
	// (rule never-live), before StallAfter could call it stopped.
	tr := lag.NewTracker(func(lag.Target) lag.Rules { return lag.Rules{StallAfter: time.Second} })
	s1 := observeUntil(t, o, topic, group, func(lag.Sample) bool { return true })
	tr.Observe(s1, s1.At)
	st := tr.States(s1.At.Add(2 * time.Second))[0]
	if st.Status != lag.StatusAbandoned || st.Rule != "never-live" || st.Members != 0 {
		t.Fatalf("status %s (%s: %s), members %d; want abandoned (never-live)", st.Status, st.Rule, st.Reason, st.Members)
	}
}

// TestRealKafkaConsumerProtocolGroup: a KIP-848 ("consumer" protocol)
// group is discovered and measured like a classic one, live and after it
// empties.
func TestRealKafkaConsumerProtocolGroup(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group := unique("events"), unique("kip848")
	createTopic(t, addr, topic, 2, nil)
	prod := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, prod, topic, 0, 40, func(int) time.Time { return time.Now() })
	produce(t, prod, topic, 1, 40, func(int) time.Time { return time.Now() })

	// A live member that consumed 30 and committed them, still in the group.
	live := client(t, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := ctxT(t, 60*time.Second)
	got := 0
	for got < 30 {
		recs := live.PollRecords(ctx, 30-got).Records()
		if ctx.Err() != nil {
			t.Fatalf("consume: %v", ctx.Err())
		}
		if err := live.CommitRecords(ctx, recs...); err != nil {
			t.Fatalf("commit: %v", err)
		}
		got += len(recs)
	}
	// The 30 may have come from one partition or both; a partition the
	// member committed nothing on has unknown lag (as kafka-consumer-groups
	// shows "-"), not its whole log.
	committed30 := func(s lag.Sample) bool {
		var sum int64
		for _, p := range s.Partitions {
			sum += max(p.Committed, 0)
		}
		return len(s.Partitions) == 2 && sum == 30
	}
	o := observer(t, addr, group)
	s := observeUntil(t, o, topic, group, func(s lag.Sample) bool { return committed30(s) && s.Members == 1 })
	t.Logf("live KIP-848 group: state %q members %d lag %d\n%s", s.GroupState, s.Members, totalLag(s), dump(s))
	for _, p := range s.Partitions {
		if p.Committed < 0 && (p.Lag != 0 || p.HeadKnown) || p.Committed >= 0 && p.Lag != p.End-p.Committed {
			t.Fatalf("partition %d: lag %d with commit %d of %d\n%s", p.Partition, p.Lag, p.Committed, p.End, dump(s))
		}
	}
	live.Close()
	s = observeUntil(t, o, topic, group, func(s lag.Sample) bool { return committed30(s) && s.Members == 0 })
	rows, err := kafkatest.GroupsDescribe(t, group)
	if err != nil {
		t.Fatal(err)
	}
	var committedLag int64
	for _, p := range s.Partitions {
		if p.Committed >= 0 {
			committedLag += p.Lag
		}
	}
	if kafkatest.TotalLag(rows) != committedLag {
		t.Fatalf("kafka-consumer-groups says %d on committed partitions, lagbridge %d: %+v\n%s", kafkatest.TotalLag(rows), committedLag, rows, dump(s))
	}
}

// TestRealKafkaTransactions: commit markers and aborted records occupy
// offsets but are not lag: a consumer that read everything has lag 0, not 1
// per transaction (the classic phantom lag).
func TestRealKafkaTransactions(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group := unique("txn"), unique("txn-reader")
	createTopic(t, addr, topic, 1, nil)
	tx := client(t, addr, kgo.TransactionalID(unique("tx")), kgo.DefaultProduceTopic(topic))
	ctx := ctxT(t, 60*time.Second)
	for i, commit := range []bool{true, false, true} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			tx.Produce(ctx, &kgo.Record{Value: []byte{byte(i), byte(j)}}, nil)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	// 10 committed records; the log holds 15 records and 3 markers.
	consumeAndCommit(t, addr, group, topic, 10)
	o := observer(t, addr, group)
	s := observeUntil(t, o, topic, group, func(s lag.Sample) bool { return s.Members == 0 })
	if l := totalLag(s); l != 0 {
		t.Fatalf("lag %d after consuming every committed record, want 0:\n%s", l, dump(s))
	}
	t.Logf("end offset %d, committed %d, lag 0", s.Partitions[0].End, s.Partitions[0].Committed)
}
