package engine

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// benchEngine is an engine with one limited topic ("orders", its consumer
// at half the produce rate) under policy p, and n producers that reported
// demand to it.
func benchEngine(b *testing.B, n int, p quota.Policy) (*Engine, []string) {
	b.Helper()
	c := &clock{now: t0}
	e, _ := newEngine(b, c, p)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 4000, consume: 2000}
	w.cycles(5)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("producer-%05d", i)
		if _, err := e.Report(quotaproto.Report{Producer: ids[i], Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 10}}}); err != nil {
			b.Fatal(err)
		}
	}
	w.cycles(1)
	return e, ids
}

// reportLoop runs b's loop of reports, each from the next of ids, and
// reports the median latency of one report (median-ns) next to ns/op.
func reportLoop(b *testing.B, e *Engine, ids []string) {
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := quotaproto.Report{Producer: ids[i%len(ids)], Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: float64(10 + i%7)}}}
		i++
		start := time.Now()
		if _, err := e.Report(r); err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "median-ns")
}

// BenchmarkReport10000: reports from 10,000 producers on one limited
// topic, each from another id than the last (the producers' refreshes).
// The policy admits them all (unlisted.max 10000): the topic is too large
// to re-allocate per report, so a report refreshes its own lease.
func BenchmarkReport10000(b *testing.B) {
	e, ids := benchEngine(b, 10000, quota.Policy{Name: "p", MaxAge: 2 * time.Second, Unlisted: quota.Unlisted{Max: 10000}})
	reportLoop(b, e, ids)
}

// BenchmarkReport10000Default: the same 10,000 ids under the default
// policy: 32 of them share the topic (re-allocated at each of their
// reports), the others are refused.
func BenchmarkReport10000Default(b *testing.B) {
	e, ids := benchEngine(b, 10000, quota.Policy{Name: "p", MaxAge: 2 * time.Second})
	reportLoop(b, e, ids)
}

// BenchmarkCycle10000: one observation cycle with 10,000 producers on the
// topic: every allocation, expiry and set rebuilt (the engine's lock is
// held for that long once per interval).
func BenchmarkCycle10000(b *testing.B) {
	e, _ := benchEngine(b, 10000, quota.Policy{Name: "p", MaxAge: 2 * time.Second, Unlisted: quota.Unlisted{Max: 10000}})
	st := lag.State{Target: target}
	b.ReportAllocs()
	for b.Loop() {
		e.OnCycle("c1", t0.Add(6*time.Second), []lag.State{st})
	}
}

// BenchmarkNewIDFlood: reports from ids never seen before, as an attacker
// without a token sends them, until the engine is full (MaxProducers at its
// default) and refuses the rest. It reports the heap held per producer
// kept (B/producer) and that the heap stops growing once full
// (full-growth-B: heap growth over the second half of the flood).
func BenchmarkNewIDFlood(b *testing.B) {
	c := &clock{now: t0}
	e, _ := newEngine(b, c, quota.Policy{Name: "p", MaxAge: 2 * time.Second})
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 4000, consume: 2000}
	w.cycles(5)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	var full uint64
	i := 0
	for b.Loop() {
		if i == 2*DefaultMaxProducers {
			b.StopTimer()
			full = heap()
			b.StartTimer()
		}
		_, _ = e.Report(quotaproto.Report{Producer: fmt.Sprintf("anon-%d", i), Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1e6}}})
		i++
	}
	b.StopTimer()
	after := heap()
	kept := len(e.producers)
	b.ReportMetric(float64(after-before)/float64(max(kept, 1)), "B/producer")
	if full > 0 {
		b.ReportMetric(float64(int64(after)-int64(full)), "full-growth-B")
	}
}

// BenchmarkReportHTTP10000: the same reports through the quota protocol's
// HTTP server on loopback (no tokens), from parallel clients, with 10,000
// producers known: what a daemon answers end to end. It reports reports/s.
func BenchmarkReportHTTP10000(b *testing.B) {
	e, ids := benchEngine(b, 10000, quota.Policy{Name: "p", MaxAge: 2 * time.Second, Unlisted: quota.Unlisted{Max: 10000}})
	hub := quotaserver.NewHub()
	e.hub = hub
	mux := http.NewServeMux()
	quotaserver.New(hub, e, quotaserver.Auth{}, prometheus.NewRegistry()).Register(mux)
	ts := httptest.NewServer(mux)
	b.Cleanup(func() { hub.Close(); ts.Close() })
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			body := fmt.Sprintf(`{"producer":%q,"topics":[{"topic":"orders","demand":%d}]}`, ids[int(i)%len(ids)], 10+i%7)
			resp, err := client.Post(ts.URL+quotaproto.PathLeases, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %s", resp.Status)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reports/s")
}
