package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLegacyRows(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"kafka/commit-per-poll/legacy/1s", true},
		{"kafka/autocommit-5s/legacy/250ms", true},
		{"nats/ack-each/legacy/1s", false}, // client quotas are Kafka's
	}
	for _, c := range cases {
		_, err := ParseRow(c.name)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, r := range LegacyRows() {
		if errs := r.validate(); len(errs) > 0 {
			t.Errorf("%s: %v", r.Name(), errs)
		}
	}
}

// TestLegacyRowsSelected: the legacy rows are in no matrix; a --rows
// pattern that names them picks them, and no other pattern does.
func TestLegacyRowsSelected(t *testing.T) {
	cases := []struct {
		patterns []string
		want     int
	}{
		{[]string{"legacy"}, 2},
		{[]string{"kafka/*/legacy/1s"}, 2},
		{[]string{"commit-per-poll/legacy"}, 1},
		{[]string{"kafka/commit-per-poll/*"}, 0},
		{[]string{"1s"}, 0},
		{nil, 0},
	}
	for _, c := range cases {
		if got := namedRows(LegacyRows(), string(Legacy), c.patterns); len(got) != c.want {
			t.Errorf("%q: %d rows, want %d", c.patterns, len(got), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Command(context.Background(), []string{"--rows", "legacy", "--list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, r := range LegacyRows() {
		if !strings.Contains(stdout.String(), r.Name()) {
			t.Errorf("--rows legacy --list does not list %s:\n%s", r.Name(), stdout.String())
		}
	}
}

// TestListSaysWhatRunsByName: --list names, on stderr, the rows that run
// only by name (before: not a word, so `--rows legacy` was found only in
// docs/benchmark.md), and a --rows pattern that matches nothing is exit
// 2 with the pattern, as a run of it is (before: an empty list, exit 0).
func TestListSaysWhatRunsByName(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Command(context.Background(), []string{"--list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, r := range LegacyRows() {
		if strings.Contains(stdout.String(), r.Name()) || !strings.Contains(stderr.String(), r.Name()) {
			t.Errorf("--list: %s not named on stderr alone:\nstdout:\n%s\nstderr:\n%s", r.Name(), stdout.String(), stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "--hot-partition") {
		t.Errorf("--list does not name --hot-partition: %s", stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	code := Command(context.Background(), []string{"--rows", "kafak/*", "--list"}, &stdout, &stderr)
	if code != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), "no row matches --rows kafak/*") {
		t.Errorf("--rows kafak/* --list: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

func TestThrottlesKeepsTheLongest(t *testing.T) {
	var th throttles
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { th.OnBrokerThrottle(kgo.BrokerMetadata{}, time.Duration(i)*time.Millisecond, false) })
	}
	wg.Wait()
	if got := th.Longest(); got != 49*time.Millisecond {
		t.Fatalf("longest %v, want 49ms", got)
	}
}

func TestLongestIdle(t *testing.T) {
	bins := func(xs ...int64) [][]int64 { return [][]int64{xs} }
	cases := []struct {
		name                 string
		offered, acked, good []int64
		want                 time.Duration
	}{
		{"always consuming", []int64{5, 5, 5, 5}, []int64{5, 5, 5, 5}, []int64{5, 5, 5, 5}, 0},
		{"idle, nothing offered", []int64{0, 0, 0, 0}, []int64{0, 0, 0, 0}, []int64{0, 0, 0, 0}, 0},
		{"idle while demand is held back", []int64{5, 5, 5, 5, 5}, []int64{5, 0, 0, 0, 5}, []int64{5, 0, 0, 0, 5}, 300 * time.Millisecond},
		{"idle, all offered acked (nothing held)", []int64{5, 5, 5}, []int64{5, 5, 5}, []int64{5, 0, 5}, 0},
	}
	for _, c := range cases {
		s := &Series{Bin: 100 * time.Millisecond, Offered: bins(c.offered...), Acked: bins(c.acked...), Good: bins(c.good...)}
		if got := longestIdle(s); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLegacyExpiredRequestNotWritten pins what the legacy rows' world does
// with a request a handler picks up after its deadline (docs/benchmark.md,
// legacy producers): franz-go's ProduceSync buffers the record whatever
// its context, then fails the partition's first batch before writing it
// when its first record's context is done (kgo sink.go, tryAddBatch), so
// the request fails at once and nothing reaches the broker; a request
// within its deadline is written. On real Kafka the same holds (and a
// record already in a request when Kafka throttles the client is written
// after the throttle, whatever its deadline: the wait comes after the
// request is built).
func TestLegacyExpiredRequestNotWritten(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "legacy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	rec := newRecorder(1, time.Minute, time.Second)
	rec.begin(time.Now())
	n, err := newNaiveKafka(&world{kafkaAddrs: c.ListenAddrs(), topic: "legacy"}, Scenario{Classes: []Class{{Producer: "legacy-test"}}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.close() })
	ctx := context.Background()

	created := time.Now().Add(-3 * time.Second)
	expired, cancel := context.WithDeadline(ctx, created.Add(2*time.Second))
	defer cancel()
	n.sync(expired, 0, created)
	if got := rec.failed.Load(); got != 1 {
		t.Fatalf("a request picked up after its deadline: %d failed, want 1", got)
	}
	fresh, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n.sync(fresh, 0, time.Now())

	adm := kadm.NewClient(n.clients[0])
	ends, err := adm.ListEndOffsets(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("legacy", 0)
	if end.Offset != 1 || rec.failed.Load() != 1 {
		t.Fatalf("end offset %d, failed %d: want only the request within its deadline written", end.Offset, rec.failed.Load())
	}
}

// TestLegacyClientIDsNameTheRun: Kafka meters a client quota per
// client.id over every connection using it, so two runs on one cluster
// (two loads, or two people's benches) must not share their plain
// producers' client.ids: each run's legacy client quotas are set for
// client.ids that name the run, and its policy lists those.
func TestLegacyClientIDsNameTheRun(t *testing.T) {
	scn := DefaultScenario()
	a := &world{broker: BrokerKafka, name: "kafka", topic: "lagbench-a", group: "lagbench-a", run: "a", kafkaAddrs: []string{"127.0.0.1:1"}}
	b := &world{broker: BrokerKafka, name: "kafka", topic: "lagbench-b", group: "lagbench-b", run: "b", kafkaAddrs: []string{"127.0.0.1:1"}}
	seen := map[string]string{}
	for _, w := range []*world{a, b} {
		cfg, err := daemonConfig(Options{}, scn, w, time.Second, true)
		if err != nil {
			t.Fatal(err)
		}
		for i, ps := range cfg.Quota.Policies[0].Producers {
			if want := w.clientID(scn.Classes[i].Producer); ps.ID != want {
				t.Errorf("run %s: the policy lists %q, the producer's client.id is %q", w.run, ps.ID, want)
			}
			if other, ok := seen[ps.ID]; ok {
				t.Errorf("runs %s and %s share the client.id %q", other, w.run, ps.ID)
			}
			seen[ps.ID] = w.run
		}
	}
}
