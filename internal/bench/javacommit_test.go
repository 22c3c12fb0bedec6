package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestJavaAutoCommitAtPollTimes runs the autocommit-5s-java consumer on a
// backlog of 4,000 records at 200 msg/s (polls of 500 records, 2.5 s each)
// and watches its commits arrive at kfake: each commits exactly what the
// consumer had processed when it was sent, give or take the few records
// processed while it travelled (at most 25, 125 ms), because Java's
// consumer commits in poll(), between two polls' records; and each comes
// at least the interval (5 s, less 100 ms for the trip) after the one
// before. franz-go's timer autocommit, which commits what the previous
// poll returned at ticks that fall inside a poll, commits 0-500 records
// behind what was processed (red with javaPoll committing on a 5 s timer
// instead: "commit 1 of 3 at offset 500 with 938 processed").
func TestJavaAutoCommitAtPollTimes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake for about 20s")
	}
	type commit struct {
		at                time.Time
		offset, processed int64
	}
	var (
		mu      sync.Mutex
		commits []commit
	)
	c, start := startJavaOnBacklog(t, 4000, func(rec *recorder, offset int64) {
		if offset > 0 {
			mu.Lock()
			commits = append(commits, commit{time.Now(), offset, int64(processedOf(rec))})
			mu.Unlock()
		}
	})
	const want = 3
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		k := len(commits)
		mu.Unlock()
		if k >= want {
			break
		}
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(commits) < want {
		t.Fatalf("%d commits in 30s, want %d", len(commits), want)
	}
	for i, cm := range commits[:want] {
		if d := cm.processed - cm.offset; d < 0 || d > 25 {
			t.Errorf("commit %d of %d at offset %d with %d processed: not made between two polls", i+1, want, cm.offset, cm.processed)
		}
		if i > 0 {
			if gap := cm.at.Sub(commits[i-1].at); gap < javaCommitInterval-100*time.Millisecond {
				t.Errorf("commit %d of %d %v after the one before, want at least %v", i+1, want, gap, javaCommitInterval)
			}
		}
		t.Logf("commit %d at %v: offset %d, %d processed", i+1, cm.at.Sub(start).Round(time.Millisecond), cm.offset, cm.processed)
	}
}

// TestJavaAutoCommitRow checks that the Java consumer's row reads by name
// and is a Kafka row only.
func TestJavaAutoCommitRow(t *testing.T) {
	r, err := ParseRow("kafka/autocommit-5s-java/sync/1s")
	if err != nil || r.Consumer != JavaAutoCommit5s || r.Consumer.naive() != JavaAutoCommit5s || r.Consumer.CommitInterval() != 5*time.Second {
		t.Errorf("kafka/autocommit-5s-java/sync/1s: %+v, %v", r, err)
	}
	if _, err := ParseRow("nats/autocommit-5s-java/sync/1s"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nats/autocommit-5s-java/sync/1s: %v, want ErrInvalidOptions", err)
	}
}

// TestJavaAutoCommitWakesIdlePoll: with 600 records stored and none
// produced after, the third poll waits for records that never come; Java's
// poll wakes at the commit's time, so what the first two returned (600) is
// committed about 5 s after the consumer started.
func TestJavaAutoCommitWakesIdlePoll(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake for about 6s")
	}
	const n = 600
	committed := make(chan int64, 16)
	_, began := startJavaOnBacklog(t, n, func(_ *recorder, offset int64) { committed <- offset })
	select {
	case off := <-committed:
		if off != n || time.Since(began) > javaCommitInterval+time.Second {
			t.Errorf("first commit at offset %d, %v after the start; want %d within %v", off, time.Since(began), n, javaCommitInterval+time.Second)
		}
	case <-time.After(javaCommitInterval + 3*time.Second):
		t.Errorf("no commit %v after the start: the waiting poll did not wake for it", javaCommitInterval+3*time.Second)
	}
}

// TestCommitsRecorded: the consumers that commit in their own loop record
// each commit the broker received (Series.Commits, what the excess bound's
// commit interval is measured from), and only those: commit per poll,
// Java's auto-commit, the ttl guard and marks-20ms on a backlog, every
// commit counted at kfake is in the recorder once the consumer has
// committed everything (red without the recording: none recorded). The
// NATS consumers' acks: TestAcksRecorded.
func TestCommitsRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake for about 7s")
	}
	for _, kind := range []ConsumerKind{CommitPerPoll, JavaAutoCommit5s, Guard, Marks20ms} {
		t.Run(string(kind), func(t *testing.T) {
			const n = 600
			var (
				mu   sync.Mutex
				seen []int64
			)
			_, rec, _ := startOnBacklog(t, kind, 2000, n, func(_ *recorder, offset int64) {
				mu.Lock()
				seen = append(seen, offset)
				mu.Unlock()
			})
			counts := func() (broker, recorded int, last int64) {
				mu.Lock()
				broker = len(seen)
				if broker > 0 {
					last = seen[broker-1]
				}
				mu.Unlock()
				rec.commitMu.Lock()
				defer rec.commitMu.Unlock()
				if len(rec.commits) > 0 {
					recorded = len(rec.commits[0])
				}
				return broker, recorded, last
			}
			state := func() string {
				b, r, last := counts()
				return fmt.Sprintf("%d commits at the broker (last at offset %d), %d recorded", b, last, r)
			}
			waitUntil(t, "every record committed and every commit recorded", state, func() bool {
				b, r, last := counts()
				return last == n && b == r
			})
		})
	}
}

// startJavaOnBacklog starts kfake, a bench world on it with n records
// stored (dated a millisecond apart up to now), a hook that calls onCommit
// with each partition-0 offset the world's group commits, and then the
// autocommit-5s-java consumer at 200 msg/s; it returns the consumer and
// when it started. All stop at the test's end.
func startJavaOnBacklog(t *testing.T, n int, onCommit func(rec *recorder, offset int64)) (*consumer, time.Time) {
	t.Helper()
	c, _, began := startOnBacklog(t, JavaAutoCommit5s, 200, n, onCommit)
	return c, began
}

// startOnBacklog is startJavaOnBacklog for a consumer of kind at capacity
// msg/s; it returns the consumer, its recorder and when it started.
func startOnBacklog(t *testing.T, kind ConsumerKind, capacity float64, n int, onCommit func(rec *recorder, offset int64)) (*consumer, *recorder, time.Time) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	start := time.Now()
	w, err := startWorld(context.Background(), Options{KafkaBrokers: kc.ListenAddrs()}, Row{Broker: BrokerKafka}, runID(start))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	rec := newRecorder(1, time.Minute, 100*time.Millisecond)
	rec.begin(start)
	storeBacklog(t, w, rec, n, func(i int) time.Time { return start.Add(time.Duration(i-n) * time.Millisecond) })
	kc.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r := req.(*kmsg.OffsetCommitRequest); r.Group == w.group {
			for _, tp := range r.Topics {
				for _, p := range tp.Partitions {
					if p.Partition == 0 {
						onCommit(rec, p.Offset)
					}
				}
			}
		}
		return nil, nil, false
	})
	scn := Scenario{Normal: capacity, Slow: capacity, NormalFor: time.Minute, Deadline: time.Hour,
		Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
	began := time.Now()
	c, err := startConsumer(context.Background(), w, scn, rec, kind, 1, "", slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, rec, began
}

// TestAcksRecorded is TestCommitsRecorded for the NATS consumers on the
// embedded nats-server: ack each and ack batch, on a backlog, record each
// ack they sent (Series.Commits, the excess bound's commit interval), and
// only those: once the consumer's ack floor is the last message, every
// ack the server routed (a plain subscriber on $JS.ACK.> receives a copy
// of each) is in the recorder, as many as there (red without the
// recording: none recorded; red recording each message's ack in ack
// batch: 600 recorded for a few acks).
func TestAcksRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded nats-server for about 2s")
	}
	for _, kind := range []ConsumerKind{AckEach, AckBatch} {
		t.Run(string(kind), func(t *testing.T) {
			const n = 600
			start := time.Now()
			w, rec := headsWorld(t, BrokerNATS, start)
			storeBacklog(t, w, rec, n, func(i int) time.Time { return start.Add(time.Duration(i-n) * time.Millisecond) })
			var routed atomic.Int64
			sub, err := w.nc.Subscribe("$JS.ACK.>", func(*natsgo.Msg) { routed.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			if err := w.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			scn := Scenario{Normal: 2000, Slow: 2000, NormalFor: time.Minute, Deadline: time.Hour,
				Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
			c, err := startConsumer(context.Background(), w, scn, rec, kind, 1, "", slog.New(slog.NewTextHandler(io.Discard, nil)), false)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			counts := func() (acks, recorded int, floor uint64) {
				rec.commitMu.Lock()
				if len(rec.commits) > 0 {
					recorded = len(rec.commits[0])
				}
				rec.commitMu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if jc, err := w.js.Consumer(ctx, w.topic, w.group); err == nil {
					if info, err := jc.Info(ctx); err == nil {
						floor = info.AckFloor.Stream
					}
				}
				return int(routed.Load()), recorded, floor
			}
			state := func() string {
				a, r, floor := counts()
				return fmt.Sprintf("%d acks at the server (ack floor at stream sequence %d), %d recorded", a, floor, r)
			}
			waitUntil(t, "every message acked and every ack recorded", state, func() bool {
				a, r, floor := counts()
				return floor == n && a == r
			})
			if a, _, _ := counts(); kind == AckBatch && a >= n {
				t.Errorf("ack batch: %d acks for %d messages, want one a batch", a, n)
			}
		})
	}
}
