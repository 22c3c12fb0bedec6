package consumerclient

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// report12 is a consumer report as a daemon of protocol 1.2 reads it: no
// held, no heldMs.
type report12 struct {
	Kind     string `json:"kind"`
	Cluster  string `json:"cluster,omitempty"`
	Group    string `json:"group"`
	Member   string `json:"member,omitempty"`
	SentAtMs int64  `json:"sentAtMs,omitempty"`
	Topics   []struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition  int32 `json:"partition"`
			Position   int64 `json:"position"`
			HeadTimeMs int64 `json:"headTimeMs,omitempty"`
			Idle       bool  `json:"idle,omitempty"`
		} `json:"partitions"`
	} `json:"topics"`
}

// olderDaemon is the consumer-report endpoint of an older daemon that
// reads reports as T (report12: protocol 1.2): the daemon's strict decoder
// over T, its 400 text ("malformed body: ..."). It keeps the reports it
// took as the current protocol reads them (the same fields: it took
// nothing it does not know).
type olderDaemon[T any] struct {
	mu      sync.Mutex
	refused []string
	stored  []quotaproto.ConsumerReport
}

func (o *olderDaemon[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var rep T
	err := quotaserver.DecodeStrict(body, &rep, "kind", "group", "topics", "topics[].topic", "topics[].partitions",
		"topics[].partitions[].partition", "topics[].partitions[].position")
	var taken quotaproto.ConsumerReport
	if err == nil {
		err = json.Unmarshal(body, &taken)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.refused = append(o.refused, err.Error())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(quotaproto.ErrorBody{Error: "malformed body: " + err.Error()})
		return
	}
	o.stored = append(o.stored, taken)
	w.WriteHeader(http.StatusNoContent)
}

// count counts the reports stored whose first partition is as ok says.
func (o *olderDaemon[T]) count(ok func(quotaproto.ConsumerPartition) bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.stored {
		if ok(r.Topics[0].Partitions[0]) {
			n++
		}
	}
	return n
}

// inHand counts the reports stored whose first partition is in hand at
// position.
func (o *olderDaemon[T]) inHand(position int64) int {
	return o.count(func(p quotaproto.ConsumerPartition) bool { return p.Position == position && p.HeadTimeMs > 0 })
}

// TestKafkaReporterOlderDaemon: a hook of protocol 1.3 against a daemon of
// 1.2, which refuses every report that counts the records held (an
// unknown field to its strict decoder), idle partitions included. The
// hook sends the same report without the counts and keeps doing so: the
// daemon keeps getting the positions, and the hook counts no refusal.
// Before, every report with a partition in hand was refused and the
// daemon fell back to commits.
func TestKafkaReporterOlderDaemon(t *testing.T) {
	const topic = "older"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 5, time.Now())
	old := &olderDaemon[report12]{}
	ts := httptest.NewServer(old)
	defer ts.Close()
	rep, inHand := hookedPoll(t, c, topic, ts.URL, 5)
	waitFor(t, "three reports of the records in hand stored", func() bool { return old.inHand(inHand[0].Offset) >= 3 })
	old.mu.Lock()
	defer old.mu.Unlock()
	// One refusal per newer field the report carries: held (1.3), then
	// skipped (1.5: a Kafka hook always gives its count, 0 too).
	if len(old.refused) != 2 || !quotaproto.RefusesHeld("malformed body: "+old.refused[0]) ||
		!quotaproto.RefusesField("malformed body: "+old.refused[1], "skipped") {
		t.Errorf("the older daemon refused %q, want the first report for held, then its resend for skipped", old.refused)
	}
	if n := rep.s.count(outcomeRefused); n != 0 {
		t.Errorf("the hook counts %d refused reports, want 0 (the report went without the counts)", n)
	}
}

// TestKafkaReporterMixedReplicas: in a rolling upgrade one replica is of
// protocol 1.2 and one of 1.3. The older one's refusal strips the held
// counts from its own reports only: the upgraded replica (which may lead)
// keeps getting them. Before, one refusal stripped them from the reports
// to every replica for ten minutes.
func TestKafkaReporterMixedReplicas(t *testing.T) {
	const topic = "mixed"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 5, time.Now())
	old := &olderDaemon[report12]{}
	oldSrv := httptest.NewServer(old)
	defer oldSrv.Close()
	var mu sync.Mutex
	var withHeld, withoutHeld int
	upgraded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep quotaproto.ConsumerReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		if newer[0].in(rep.Topics) {
			withHeld++
		} else {
			withoutHeld++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upgraded.Close()
	rep, err := NewKafkaReporter(Config{URLs: []string{oldSrv.URL, upgraded.URL}, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	cl := newKafkaClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	pollN(t, cl, 5) // five records in hand: every report counts them
	waitFor(t, "the older replica refused the counts once (held, then skipped)", func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return len(old.refused) == 2 && len(old.stored) >= 3
	})
	mu.Lock()
	before := withHeld
	mu.Unlock()
	waitFor(t, "more reports with the counts at the upgraded replica after the refusal", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return withHeld >= before+5
	})
}

// report14 is a consumer report as a daemon of protocol 1.4 reads it:
// held and heldMs, no skipped.
type report14 struct {
	Kind     string `json:"kind"`
	Cluster  string `json:"cluster,omitempty"`
	Group    string `json:"group"`
	Member   string `json:"member,omitempty"`
	SentAtMs int64  `json:"sentAtMs,omitempty"`
	Topics   []struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition  int32 `json:"partition"`
			Position   int64 `json:"position"`
			HeadTimeMs int64 `json:"headTimeMs,omitempty"`
			Idle       bool  `json:"idle,omitempty"`
			Held       int64 `json:"held,omitempty"`
			HeldMs     int64 `json:"heldMs,omitempty"`
		} `json:"partitions"`
	} `json:"topics"`
}

// TestKafkaReporterDaemonWithoutSkips: a hook of protocol 1.5 whose guard
// skipped records, against a daemon of 1.4, which refuses the skip count
// as an unknown field. The hook sends the same report without it, and
// keeps the held counts the daemon knows.
func TestKafkaReporterDaemonWithoutSkips(t *testing.T) {
	const topic = "noskips"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 5, time.Now())
	old := &olderDaemon[report14]{}
	ts := httptest.NewServer(old)
	defer ts.Close()
	rep, recs := hookedPoll(t, c, topic, ts.URL, 5)
	rep.Skipped(recs[0]) // as the guard does for an expired record, before Finished
	rep.Finished(recs[0])
	waitFor(t, "three reports with the held count stored", func() bool {
		return old.count(func(p quotaproto.ConsumerPartition) bool { return p.Position == recs[1].Offset && p.Held == 4 }) >= 3
	})
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.refused) != 1 || !quotaproto.RefusesField("malformed body: "+old.refused[0], "skipped") {
		t.Errorf("the 1.4 daemon refused %q, want the first report only, for skipped", old.refused)
	}
	if n := rep.s.count(outcomeRefused); n != 0 {
		t.Errorf("the hook counts %d refused reports, want 0", n)
	}
}

// TestKafkaReporterOlderDaemonUpgraded: after a daemon refused the held
// counts, the reports go without them for heldRetry, then carry them
// again, so a daemon upgraded meanwhile gets them back.
func TestKafkaReporterOlderDaemonUpgraded(t *testing.T) {
	defer func(d time.Duration) { heldRetry = d }(heldRetry)
	heldRetry = 500 * time.Millisecond
	const topic = "upgraded"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 5, time.Now())
	old := &olderDaemon[report12]{}
	var upgraded atomic.Bool
	var mu sync.Mutex
	var after []bool // per report the upgraded daemon stored: it carried held
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !upgraded.Load() {
			old.ServeHTTP(w, r)
			return
		}
		var rep quotaproto.ConsumerReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		after = append(after, rep.Topics[0].Partitions[0].Held > 0)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ts.Close()
	_, inHand := hookedPoll(t, c, topic, ts.URL, 5)
	waitFor(t, "a report of the records in hand stored without held", func() bool { return old.inHand(inHand[0].Offset) >= 1 })
	upgraded.Store(true)
	waitFor(t, "a report with held stored by the upgraded daemon", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(after, true)
	})
	mu.Lock()
	defer mu.Unlock()
	// The reports right after the upgrade still went without held (the
	// refusal is less than heldRetry old), then carried it.
	if after[0] {
		t.Errorf("the first report after the refusal carried held at once (%v), want it stripped for heldRetry", after)
	}
}

// hookedPoll starts a Kafka reporter sending to url every 20 ms and a
// consumer of group "g" on topic with the reporter's hook, and polls n
// records, which stay in hand. Both are closed when the test ends.
func hookedPoll(t *testing.T, c *kfake.Cluster, topic, url string, n int) (*KafkaReporter, []*kgo.Record) {
	t.Helper()
	return hookedPollWith(t, c, topic, Config{URL: url}, n)
}

// hookedPollWith is hookedPoll with cfg (its Interval 20ms).
func hookedPollWith(t *testing.T, c *kfake.Cluster, topic string, cfg Config, n int) (*KafkaReporter, []*kgo.Record) {
	t.Helper()
	cfg.Interval = 20 * time.Millisecond
	rep, err := NewKafkaReporter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rep.Close)
	cl := newKafkaClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	return rep, pollN(t, cl, n)
}

// report15 is a consumer report as a daemon of protocol 1.5 reads it: no
// ownPace.
type report15 struct {
	Kind     string `json:"kind"`
	Cluster  string `json:"cluster,omitempty"`
	Group    string `json:"group"`
	Member   string `json:"member,omitempty"`
	SentAtMs int64  `json:"sentAtMs,omitempty"`
	Topics   []struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition  int32  `json:"partition"`
			Position   int64  `json:"position"`
			HeadTimeMs int64  `json:"headTimeMs,omitempty"`
			Idle       bool   `json:"idle,omitempty"`
			Held       int64  `json:"held,omitempty"`
			HeldMs     int64  `json:"heldMs,omitempty"`
			Skipped    *int64 `json:"skipped,omitempty"`
		} `json:"partitions"`
	} `json:"topics"`
}

// TestKafkaReporterOwnPace: a hook with KeepUntilFinished says of every
// partition that it finishes its records at the partition's own pace
// (ownPace, protocol 1.6); a poll loop's hook does not. A daemon of 1.5
// refuses the field as unknown: the hook sends the same report without
// it, keeping the held and skip counts, and counts no refusal.
func TestKafkaReporterOwnPace(t *testing.T) {
	const topic = "ownpace"
	for _, keep := range []bool{false, true} {
		var mu sync.Mutex
		var current []quotaproto.ConsumerReport
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var rep quotaproto.ConsumerReport
			if json.NewDecoder(r.Body).Decode(&rep) == nil {
				mu.Lock()
				current = append(current, rep)
				mu.Unlock()
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(ts.Close) // after the reporter's Close
		c := newKafkaCluster(t, topic, 1)
		produce(t, c, topic, 0, 5, time.Now())
		hookedPollWith(t, c, topic, Config{URL: ts.URL, KeepUntilFinished: keep}, 5)
		waitFor(t, "a report in hand", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(current, func(r quotaproto.ConsumerReport) bool { return r.Topics[0].Partitions[0].HeadTimeMs > 0 })
		})
		mu.Lock()
		for _, r := range current {
			if p := r.Topics[0].Partitions[0]; p.OwnPace != keep {
				t.Errorf("KeepUntilFinished %v: reported %+v, want ownPace %v", keep, p, keep)
			}
		}
		mu.Unlock()
	}
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 5, time.Now())
	old := &olderDaemon[report15]{}
	ts := httptest.NewServer(old)
	defer ts.Close()
	rep, recs := hookedPollWith(t, c, topic, Config{URL: ts.URL, KeepUntilFinished: true}, 5)
	rep.Done(recs[0])
	waitFor(t, "three reports with the held and skip counts stored", func() bool {
		return old.count(func(p quotaproto.ConsumerPartition) bool {
			return p.Position == recs[1].Offset && p.Held == 4 && p.Skipped != nil
		}) >= 3
	})
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.refused) != 1 || !quotaproto.RefusesField("malformed body: "+old.refused[0], "ownPace") {
		t.Errorf("the 1.5 daemon refused %q, want the first report only, for ownPace", old.refused)
	}
	if n := rep.s.count(outcomeRefused); n != 0 {
		t.Errorf("the hook counts %d refused reports, want 0", n)
	}
}
