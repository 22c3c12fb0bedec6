package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestWorkersStuckWorker runs the Workers consumer on kfake over two
// partitions of 200 stored records each, its hook reporting to a test
// endpoint, with partition 1's worker stuck on offset 50: partition 0's
// worker finishes all of its records, partition 1's none past 50; the
// hook reports in keep mode (partition 1's position is the stuck record,
// not the end of what was polled; partition 0 is idle at its end); the
// true head age is the stuck record's age. Once the worker is let go,
// everything is finished and reported so.
func TestWorkersStuckWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake for a few seconds")
	}
	const n, stuckAt = 200, 50
	scn := Scenario{Normal: 1000, Slow: 1000, NormalFor: time.Minute, Deadline: time.Hour,
		Classes: []Class{{Producer: "p", Criticality: 1, Share: 1}}}
	w, rec, created := storedTwo(t, n)
	url, reported, _ := reportSink(t)
	release := make(chan struct{})
	stall := func(ctx context.Context, r *kgo.Record) {
		if r.Partition == 1 && r.Offset == stuckAt {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}
	c, err := startWorkersConsumer(context.Background(), w, scn, rec, true, url, slog.New(slog.NewTextHandler(io.Discard, nil)), stall)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	processed := func() int { return processedOf(rec) }
	state := func() string {
		return fmt.Sprintf("%d processed, reported %+v and %+v", processed(), reported(0), reported(1))
	}
	waitUntil(t, "partition 0 finished and the stuck record reported", state, func() bool {
		p0, p1 := reported(0), reported(1)
		return processed() >= n+stuckAt && p0.Idle && p0.Position == n &&
			p1.Position == stuckAt && p1.HeadTimeMs == created(stuckAt).UnixMilli()
	})
	if k := processed(); k != n+stuckAt {
		t.Errorf("%d processed with partition 1 stuck at %d, want %d", k, stuckAt, n+stuckAt)
	}
	now := time.Now()
	// Round(0): the wall clock, as the creation time the record carries.
	if got, want := rec.heads.age(now), now.Round(0).Sub(created(stuckAt)); got != want {
		t.Errorf("true head age %v with a worker stuck on a record %v old", got, want)
	}

	close(release)
	waitUntil(t, "everything finished and reported", state, func() bool {
		p1 := reported(1)
		return processed() == 2*n && p1.Idle && p1.Position == n
	})
	if a := rec.heads.age(time.Now()); a != 0 {
		t.Errorf("all finished, true head age %v, want 0", a)
	}
}

// reportSink is a test endpoint for the consumer hook's reports: its URL,
// the last report of each partition, and how many reports it took.
func reportSink(t *testing.T) (string, func(p int32) quotaproto.ConsumerPartition, func() int) {
	var mu sync.Mutex
	last := map[int32]quotaproto.ConsumerPartition{}
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var rep quotaproto.ConsumerReport
		if r.URL.Path != quotaproto.PathConsumerReport || json.NewDecoder(r.Body).Decode(&rep) != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		n++
		for _, tp := range rep.Topics {
			for _, p := range tp.Partitions {
				last[p.Partition] = p
			}
		}
		mu.Unlock()
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ts.Close)
	reported := func(p int32) quotaproto.ConsumerPartition {
		mu.Lock()
		defer mu.Unlock()
		return last[p]
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	return ts.URL, reported, count
}

// processedOf counts the records rec's one class processed (good or
// dead).
func processedOf(rec *recorder) int {
	var k int64
	for b := range rec.n {
		k += rec.good[0][b].Load() + rec.dead[0][b].Load()
	}
	return int(k)
}

// waitUntil polls cond every 10ms until it holds, failing after 15s with
// what and state().
func waitUntil(t *testing.T, what string, state func() string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened (%s)", what, state())
		}
	}
}

// storedTwo is a kfake world with n records stored in each of partitions
// 0 and 1, record i of each created at created(i), 5 s ago and 1 ms apart.
func storedTwo(t *testing.T, n int) (w *world, rec *recorder, created func(int) time.Time) {
	t.Helper()
	start := time.Now()
	w, rec = headsWorld(t, BrokerKafka, start)
	base := start.Add(-5 * time.Second)
	created = func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
	storeParts(t, w, rec, n, []int32{0, 1}, created)
	return w, rec, created
}

// storeParts stores n records in each of parts, record i of each created
// at created(i), and records their acks as the bench's producers do.
func storeParts(t *testing.T, w *world, rec *recorder, n int, parts []int32, created func(int) time.Time) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.kafkaAddrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for _, p := range parts {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: w.topic, Partition: p, Value: encode(created(i), 0), Timestamp: created(i)})
		}
	}
	for _, res := range cl.ProduceSync(context.Background(), rs...) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		rec.ackedAt(0, kafkaAt(res.Record))
	}
}

// TestWorkerRows checks that the workers rows run by name only: valid,
// outside both matrices, selected by a --rows pattern that says
// "workers", with the same consumer without the hook on the naive side.
func TestWorkerRows(t *testing.T) {
	for _, r := range WorkerRows() {
		if errs := r.validate(); len(errs) > 0 {
			t.Errorf("%s: %v", r.Name(), errs)
		}
		if back, err := ParseRow(r.Name()); err != nil || back != r {
			t.Errorf("ParseRow(%q) = %+v, %v", r.Name(), back, err)
		}
		if slices.Contains(FullMatrix(), r) {
			t.Errorf("%s is in the full matrix", r.Name())
		}
		if !r.Consumer.reports() || r.Consumer.naive() != workersPlain || r.Consumer.CommitInterval() != 5*time.Second {
			t.Errorf("%s: reports %v, naive %s, commit interval %v", r.Name(), r.Consumer.reports(), r.Consumer.naive(), r.Consumer.CommitInterval())
		}
	}
	if got := namedRows(WorkerRows(), string(Workers), []string{"kafka/workers/sync/1s", "kafka/hook/sync/1s"}); len(got) != 1 || got[0].Name() != "kafka/workers/sync/1s" {
		t.Errorf("--rows kafka/workers/sync/1s,kafka/hook/sync/1s: %v", got)
	}
	if got := namedRows(WorkerRows(), string(Workers), []string{"*/1s"}); len(got) != 0 {
		t.Errorf("--rows */1s selects %v", got)
	}
	var out, errb strings.Builder
	if code := listRows(FullMatrix(), nil, &out, &errb); code != 0 || !strings.Contains(errb.String(), "kafka/workers/sync/250ms") {
		t.Errorf("--list: exit %d, stderr %q does not name the workers rows", code, errb.String())
	}
}
