package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// received is one lease set as a watching client got it.
type received struct {
	set quotaproto.LeaseSet
	at  time.Time
}

// watchStream reports for producer, follows its SSE stream and reports
// again at each set's RefreshAfterMs, as a producer does, until the test
// ends: the lease never expires however long the machine takes to cut it.
// The channel is closed when the stream ends.
func watchStream(tb testing.TB, base, producer string, topics ...string) <-chan received {
	tb.Helper()
	rep := quotaproto.Report{Producer: producer}
	for _, t := range topics {
		rep.Topics = append(rep.Topics, quotaproto.TopicDemand{Topic: t, Demand: 1000})
	}
	body, _ := json.Marshal(rep)
	report := func() (quotaproto.LeaseSet, error) {
		var set quotaproto.LeaseSet
		resp, err := http.Post(base+quotaproto.PathLeases, "application/json", bytes.NewReader(body))
		if err != nil {
			return set, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return set, fmt.Errorf("report: %s", resp.Status)
		}
		return set, json.NewDecoder(resp.Body).Decode(&set)
	}
	set, err := report()
	if err != nil {
		tb.Fatalf("report: %v", err)
	}
	resp, err := http.Get(base + quotaproto.PathStream + "?producer=" + producer)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("stream: %v %v", err, resp)
	}
	ch := make(chan received, 256)
	done, stop, reported := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var s quotaproto.LeaseSet
				if json.Unmarshal([]byte(d), &s) == nil && s.Producer != "" {
					select {
					case ch <- received{s, time.Now()}:
					default:
					}
				}
			}
		}
	}()
	go func() {
		defer close(reported)
		for {
			select {
			case <-stop:
				return
			case <-time.After(max(time.Duration(set.RefreshAfterMs)*time.Millisecond, 100*time.Millisecond)):
			}
			next, err := report()
			select {
			case <-stop:
				return
			default:
			}
			if err != nil {
				tb.Errorf("report again: %v", err)
				return
			}
			set = next
		}
	}()
	tb.Cleanup(func() { close(stop); <-reported; resp.Body.Close(); <-done })
	return ch
}

// startSlowingDemo starts the demo's brokers (kfake, the embedded
// nats-server) and its workload, whose consumers process 2,000 msg/s for
// 2 s and 150 msg/s after, for the life of t.
func startSlowingDemo(t *testing.T) *demo.Brokers {
	t.Helper()
	b, err := demo.StartBrokers(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	slowAt := time.Now().Add(2 * time.Second)
	w, err := demo.StartWorkload(b, 1000, func(time.Duration) float64 {
		if time.Now().After(slowAt) {
			return 150
		}
		return 2000
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return b
}

// TestQuotaPushedOnBothBrokers: on kfake and the embedded nats-server, the
// consumer slows; the quota engine cuts the producer's lease on both topics;
// a client watching the protocol's event stream gets each cut within one
// observation interval plus 100 ms of the cycle that made it.
func TestQuotaPushedOnBothBrokers(t *testing.T) {
	b := startSlowingDemo(t)

	const interval, lifetime = 250 * time.Millisecond, 5 * time.Second
	cfg := demo.Config(b, "", interval)
	cfg.Quota = config.Quota{LeaseLifetime: lifetime, Policies: []quota.Policy{{
		Name: "demo", MaxAge: time.Second, Producers: []quota.ProducerSpec{{ID: "svc-a"}},
	}}}
	base := startApp(t, cfg)
	events := watchStream(t, base, "svc-a", demo.KafkaTopic, demo.NATSStream)

	cut := map[string]time.Duration{} // topic -> push latency of its first limited lease
	deadline := time.After(40 * time.Second)
	for len(cut) < 2 {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before the quota cut both topics: %v", cut)
			}
			for _, l := range ev.set.Leases {
				if _, seen := cut[l.Topic]; seen || l.Rate == nil || *l.Rate >= 1000 {
					continue
				}
				// The engine stamps a lease's expiry at the cycle that
				// issued it: issue time = expiresAt - lifetime.
				issued := l.ExpiresAt.Add(-lifetime)
				cut[l.Topic] = ev.at.Sub(issued)
				t.Logf("%s: rate %.0f msg/s, signal %s (%s), pushed %v after the cycle that made it", l.Topic, *l.Rate, l.Signal, l.Reason, cut[l.Topic])
			}
		case <-deadline:
			t.Fatalf("quota never cut on both topics: %v", cut)
		}
	}
	for topic, d := range cut {
		if d > interval+100*time.Millisecond {
			t.Errorf("%s: pushed %v after the cycle, more than one interval plus 100 ms", topic, d)
		}
	}
	// /v1/quotas shows the grants and the decisions behind them.
	code, body := get(t, base+quotaproto.PathQuotas)
	if code != 200 || !strings.Contains(body, `"svc-a"`) || !strings.Contains(body, `"slow-down"`) && !strings.Contains(body, `"stop"`) {
		t.Fatalf("/v1/quotas: %d %s", code, body)
	}
}
