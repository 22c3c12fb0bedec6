package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestLoopEarlyCycle: reports received over the quota protocol wake the
// loop. One whose message in hand is younger than the urgent age, or not
// by half of it older than the head age the last cycle saw, changes
// nothing; one past both brings the next cycle forward, to a quarter
// interval after the last readings, and counts it.
func TestLoopEarlyCycle(t *testing.T) {
	const interval = 2 * time.Second
	reg := prometheus.NewRegistry()
	consumers := quotaserver.NewConsumers(quotaserver.ConsumersConfig{}, reg)
	hub := quotaserver.NewHub()
	defer hub.Close()
	mux := http.NewServeMux()
	consumers.Register(mux, quotaserver.New(hub, nil, quotaserver.Auth{}, reg))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	report := func(cluster string, age time.Duration) {
		t.Helper()
		body := fmt.Sprintf(`{"kind":"kafka","cluster":%q,"group":"g","topics":[{"topic":"t","partitions":[{"partition":0,"position":5,"headTimeMs":%d}]}]}`,
			cluster, time.Now().Add(-age).UnixMilli())
		resp, err := http.Post(srv.URL+quotaproto.PathConsumerReport, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("report: %d", resp.StatusCode)
		}
	}

	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	src := &slowSource{}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: interval, Store: store, Metrics: NewMetrics(reg, store),
		Reports: consumers, Urgent: func(lag.Target) time.Duration { return 400 * time.Millisecond }}
	consumers.Watch(l.Wake)
	updates, unsub := store.Subscribe()
	defer unsub()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	cycle := func(within time.Duration) bool {
		select {
		case <-updates:
			return true
		case <-time.After(within):
			return false
		}
	}
	if !cycle(10 * time.Second) {
		t.Fatal("no first cycle")
	}
	report("c1", 300*time.Millisecond) // younger than the urgent age
	report("c2", 5*time.Second)        // another cluster's
	report("", 0)                      // every cluster's, not late
	if cycle(interval / 2) {
		t.Fatal("a cycle came early for reports that were not late")
	}
	report("", time.Second) // late, and the last cycle saw no head
	if !cycle(interval / 2) {
		t.Fatal("no early cycle for a late report")
	}
	src.mu.Lock()
	reads := append([]time.Time(nil), src.reads...)
	src.mu.Unlock()
	if n := len(reads); n != 2 || reads[1].Sub(reads[0]) < interval/4 || reads[1].Sub(reads[0]) < minEarlySpan {
		t.Fatalf("readings %v, want two, a quarter interval and minEarlySpan apart at least", reads)
	}
	if got := testutil.ToFloat64(l.Metrics.earlyCycles.WithLabelValues("c1")); got != 1 {
		t.Errorf("early cycles counted: %v, want 1", got)
	}
}

// TestWakesBounded: the targets a loop remembers between two looks are
// bounded; beyond the bound the next look covers every target.
func TestWakesBounded(t *testing.T) {
	var w wakes
	for i := range maxPending + 10 {
		w.add(lag.Target{Kind: lag.KindKafka, Topic: fmt.Sprint(i), Group: "g"})
	}
	pending, all := w.take()
	if len(pending) != maxPending || !all {
		t.Fatalf("%d pending, all %v; want %d and all", len(pending), all, maxPending)
	}
	if pending, all = w.take(); len(pending) != 0 || all {
		t.Fatalf("after a take: %d pending, all %v", len(pending), all)
	}
	select {
	case <-w.signal():
	default:
		t.Fatal("no signal")
	}
}

// TestEarliestEarly: an early cycle reads its rates over a quarter
// interval at least, and never over less than minEarlySpan: at a 250 ms
// interval it never comes before the regular one.
func TestEarliestEarly(t *testing.T) {
	cases := []struct {
		name     string
		interval time.Duration
		readAt   time.Duration // after the cycle's start; it ended at 50ms
		want     time.Duration // after the cycle's start
	}{
		{"1 s: a quarter interval after the readings", time.Second, 40 * time.Millisecond, 290 * time.Millisecond},
		{"4 s: a quarter interval", 4 * time.Second, 40 * time.Millisecond, 1040 * time.Millisecond},
		{"250 ms: minEarlySpan, the regular cycle's time or later", 250 * time.Millisecond, 40 * time.Millisecond, 290 * time.Millisecond},
		{"a reading off the loop's clock counts from the end", time.Second, time.Hour, 300 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := earliestEarly(t0, t0.Add(50*time.Millisecond), t0.Add(c.readAt), c.interval)
			if want := t0.Add(c.want); !got.Equal(want) {
				t.Fatalf("earliest early cycle at +%v, want +%v", got.Sub(t0), c.want)
			}
		})
	}
}
