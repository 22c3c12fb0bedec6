package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/enforce"
	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/kafkaguard"
)

// TestRealKafkaTTLGuardSlowConsumer: on the real broker, records produced
// with short deadlines behind a slow consumer are skipped, counted and
// forwarded to the dead-letter topic (exactly those, with reason and
// origin), records older than maxAge likewise, the live ones are handled,
// and everything is committed: count in = processed + expired.
func TestRealKafkaTTLGuardSlowConsumer(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, dlqTopic, group := unique("ttl-orders"), unique("ttl-orders-dlq"), unique("ttl-worker")
	createTopic(t, addr, topic, 1, nil)
	createTopic(t, addr, dlqTopic, 1, nil)

	// 20 records: even ones live for an hour, odd ones 300ms from now;
	// then 2 records two hours old without a deadline (max-age).
	now := time.Now()
	short := now.Add(300 * time.Millisecond)
	var recs []*kgo.Record
	for i := range 20 {
		d := now.Add(time.Hour)
		if i%2 == 1 {
			d = short
		}
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: now,
			Headers: []kgo.RecordHeader{{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(d))}}})
	}
	for i := 20; i < 22; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: now.Add(-2 * time.Hour)})
	}
	if err := client(t, addr).ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cons := client(t, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	g, err := kafkaguard.New(kafkaguard.Config{MaxAge: time.Hour, DeadLetter: &kafkaguard.DeadLetter{Client: cons, Topic: dlqTopic}})
	if err != nil {
		t.Fatal(err)
	}
	var handled []string
	ctx := ctxT(t, 60*time.Second)
	for seen := 0; seen < len(recs); {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("saw %d of %d records", seen, len(recs))
		}
		batch := fs.Records()
		seen += len(batch)
		done, err := g.Process(ctx, batch, func(ctx context.Context, r *kgo.Record) error {
			if d, ok := ctx.Deadline(); !ok || d.After(now.Add(time.Hour)) {
				t.Errorf("record %s: handler deadline %v %v", r.Value, d, ok)
			}
			handled = append(handled, string(r.Value))
			if len(handled) == 1 {
				// The slow consumer: the first record's work outlasts the
				// short deadlines.
				time.Sleep(time.Until(short) + 50*time.Millisecond)
			}
			return nil
		})
		if err != nil || len(done) != len(batch) {
			t.Fatalf("process: done %d of %d: %v", len(done), len(batch), err)
		}
		if err := cons.CommitRecords(ctx, done...); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"0", "2", "4", "6", "8", "10", "12", "14", "16", "18"}; !slices.Equal(handled, want) {
		t.Fatalf("handled %v, want %v", handled, want)
	}
	s := g.Stats()
	want := ttl.Stats{Received: 22, Processed: 10, Expired: 12, DeadLettered: 12,
		ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 10, ttl.ReasonMaxAge: 2}}
	if s != want || !s.Balanced() {
		t.Fatalf("stats %+v\nwant  %+v", s, want)
	}
	t.Logf("in %d = processed %d + expired %d (deadline %d, max-age %d); dead-lettered %d",
		s.Received, s.Processed, s.Expired, s.ExpiredBy[ttl.ReasonDeadline], s.ExpiredBy[ttl.ReasonMaxAge], s.DeadLettered)

	// Committed past everything, as Kafka's own tool sees it.
	rows, err := kafkatest.GroupsDescribe(t, group)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].CurrentOffset != 22 || rows[0].Lag != 0 {
		t.Fatalf("kafka-consumer-groups: %+v, want offset 22 lag 0", rows)
	}

	// The dead-letter topic holds exactly the expired records.
	dlq := client(t, addr, kgo.ConsumeTopics(dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]string{}
	for n := 0; n < 12; {
		fs := dlq.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("dead letters: %d of 12: %v", n, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h[ttl.HeaderOriginTopic] != topic || h[ttl.HeaderOriginPartition] != "0" || h[ttl.HeaderOriginOffset] != string(r.Value) {
				t.Errorf("dead letter %s: origin %v", r.Value, h)
			}
			got[string(r.Value)] = h[ttl.HeaderExpiredReason]
		})
	}
	wantDLQ := map[string]string{"20": "max-age", "21": "max-age"}
	for i := 1; i < 20; i += 2 {
		wantDLQ[strconv.Itoa(i)] = "deadline"
	}
	if fmt.Sprint(got) != fmt.Sprint(wantDLQ) {
		t.Fatalf("dead letters %v, want %v", got, wantDLQ)
	}
	// Nothing more arrives: exactly the expired ones.
	short2, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if extra := dlq.PollFetches(short2).Records(); len(extra) != 0 {
		t.Fatalf("%d extra dead letters", len(extra))
	}
}

// ttlSeed writes to a 2-partition topic, relative to now: partition 0 gets
// 10 records two hours old then 5 ten seconds old; partition 1 5 records
// ten seconds old.
func ttlSeed(tb testing.TB, addr, topic string, now time.Time) {
	tb.Helper()
	createTopic(tb, addr, topic, 2, nil)
	prod := client(tb, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(tb, prod, topic, 0, 10, func(int) time.Time { return now.Add(-2 * time.Hour) })
	produce(tb, prod, topic, 0, 5, func(int) time.Time { return now.Add(-10 * time.Second) })
	produce(tb, prod, topic, 1, 5, func(int) time.Time { return now.Add(-10 * time.Second) })
}

func ttlCommit(tb testing.TB, adm *kadm.Client, group, topic string, at map[int32]int64) {
	tb.Helper()
	os := make(kadm.Offsets)
	for p, o := range at {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(ctxT(tb, 30*time.Second), group, os); err != nil {
		tb.Fatal(err)
	}
}

// ttlCommitted reads the group's committed offsets with Kafka's own
// kafka-consumer-groups tool.
func ttlCommitted(tb testing.TB, group string) map[int32]int64 {
	tb.Helper()
	rows, err := kafkatest.GroupsDescribe(tb, group)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int32]int64{}
	for _, r := range rows {
		out[r.Partition] = r.CurrentOffset
	}
	return out
}

// TestRealKafkaOffsetMoveEmptyGroup: on the real broker the mover's dry run
// reports the move and changes nothing; the real run advances partition 0
// of the empty group past its two-hour-old records to the first record
// younger than maxAge and leaves partition 1 (head within the hard age)
// alone; kafka-consumer-groups confirms both.
func TestRealKafkaOffsetMoveEmptyGroup(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group := unique("ttl-move"), unique("ttl-empty")
	now := time.Now()
	ttlSeed(t, addr, topic, now)
	cl := client(t, addr)
	adm := kadm.NewClient(cl)
	ttlCommit(t, adm, group, topic, map[int32]int64{0: 2, 1: 0})

	reg := prometheus.NewPedanticRegistry()
	metrics, err := enforce.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m := enforce.NewKafkaMover(cl, enforce.KafkaMoverConfig{Cluster: "real", Metrics: metrics})
	mv, err := m.Enforce(ctxT(t, 30*time.Second), group, topic, time.Minute, 30*time.Minute, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if mv.Applied || mv.Skipped != 8 || len(mv.Partitions) != 2 || !mv.Partitions[0].Move || mv.Partitions[0].Target != 10 || mv.Partitions[1].Move {
		t.Fatalf("dry run: %+v", mv)
	}
	if got := ttlCommitted(t, group); got[0] != 2 || got[1] != 0 {
		t.Fatalf("dry run changed the offsets: %v", got)
	}
	t.Logf("dry run: %s", mv.Partitions[0].Why)

	mv, err = m.Enforce(ctxT(t, 30*time.Second), group, topic, time.Minute, 30*time.Minute, false, now)
	if err != nil || !mv.Applied || mv.Skipped != 8 {
		t.Fatalf("move: %+v %v", mv, err)
	}
	if got := ttlCommitted(t, group); got[0] != 10 || got[1] != 0 {
		t.Fatalf("after the move: %v, want p0=10 p1=0", got)
	}
	want := fmt.Sprintf(`
# HELP lagbridge_ttl_skipped_records_total Records (offsets) an empty consumer group's committed offsets were moved past because they were older than the hard age.
# TYPE lagbridge_ttl_skipped_records_total counter
lagbridge_ttl_skipped_records_total{cluster="real",group=%q,topic=%q} 8
`, group, topic)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lagbridge_ttl_skipped_records_total"); err != nil {
		t.Fatal(err)
	}
}

// TestRealKafkaOffsetMoveRefusesActiveGroup: a group with a live member
// (classic and KIP-848 protocols) is refused, in dry run and for real, and
// its offsets stay; Kafka itself rejects an outside commit to it.
func TestRealKafkaOffsetMoveRefusesActiveGroup(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		// Classic protocol.
		{"classic", nil},
		// KIP-848 consumer protocol (Kafka 4.x).
		{"kip848", []kgo.Opt{kgo.ServerSideBalancer()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic, group := unique("ttl-active"), unique("ttl-active-"+tc.name)
			now := time.Now()
			ttlSeed(t, addr, topic, now)
			cl := client(t, addr)
			adm := kadm.NewClient(cl)
			ttlCommit(t, adm, group, topic, map[int32]int64{0: 0, 1: 0})

			// A member that joins and stays (it never polls, so it neither
			// consumes nor commits).
			client(t, addr, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit()}, tc.opts...)...)
			m := enforce.NewKafkaMover(cl, enforce.KafkaMoverConfig{Cluster: "real"})
			deadline := time.Now().Add(45 * time.Second)
			for {
				// Poll the real broker until the member shows: the mover
				// refuses as soon as it sees it.
				mv, err := m.Enforce(ctxT(t, 30*time.Second), group, topic, time.Minute, time.Minute, true, now)
				if errors.Is(err, enforce.ErrGroupActive) {
					t.Logf("refused: %v (state %s, members %d)", err, mv.State, mv.Members)
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("member never showed; last move %+v", mv)
				}
				time.Sleep(200 * time.Millisecond) // polling the broker, not waiting for a result
			}
			mv, err := m.Enforce(ctxT(t, 30*time.Second), group, topic, time.Minute, time.Minute, false, now)
			if !errors.Is(err, enforce.ErrGroupActive) || mv.Applied || mv.Members == 0 {
				t.Fatalf("real run on an active group: %+v %v", mv, err)
			}
			// Kafka's own check (the window between our check and a commit).
			resp, err := adm.CommitOffsets(ctxT(t, 30*time.Second), group, kadm.OffsetsFromRecords(kgo.Record{Topic: topic, Partition: 0, Offset: 9}))
			if err == nil {
				err = resp.Error()
			}
			if !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.IllegalGeneration) &&
				!errors.Is(err, kerr.StaleMemberEpoch) && !errors.Is(err, kerr.RebalanceInProgress) {
				t.Fatalf("outside commit to an active group: %v, want a member error", err)
			}
			t.Logf("Kafka rejects an outside commit: %v", err)
			off, err := adm.FetchOffsets(ctxT(t, 30*time.Second), group)
			if err != nil {
				t.Fatal(err)
			}
			for p := int32(0); p < 2; p++ {
				if o, _ := off.Lookup(topic, p); o.At != 0 {
					t.Fatalf("partition %d moved to %d", p, o.At)
				}
			}
		})
	}
}
