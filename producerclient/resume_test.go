package producerclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestResumeAnswerRaisesRateAdmitsBlock (review-leftovers33): the resume
// report's answer raises the lease from 0 to 1000/s: the Block message
// waiting for it is admitted. Red (sometimes) when the lease goroutine
// ends the resume before it applies the answer.
func TestResumeAnswerRaisesRateAdmitsBlock(t *testing.T) {
	var mu sync.Mutex
	var reports []quotaproto.Report
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != quotaproto.PathLeases {
			<-r.Context().Done()
			return
		}
		var rep quotaproto.Report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		mu.Lock()
		reports = append(reports, rep)
		resumed := len(reports) > 1 && len(rep.Topics) == 1 && !rep.Topics[0].Measured
		mu.Unlock()
		v, rate := uint64(5), 0.0
		if resumed {
			v, rate = 6, 1000
		}
		_ = json.NewEncoder(w).Encode(quotaproto.LeaseSet{Producer: rep.Producer, Version: v, RefreshAfterMs: 60_000,
			Leases: []quotaproto.Lease{{Topic: "orders", Rate: &rate, Signal: "ok", Version: v, ExpiresAt: time.Now().Add(time.Hour)}}})
	}))
	t.Cleanup(srv.Close)
	idle := func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := len(reports)
		return n > 0 && len(reports[n-1].Topics) == 1 && reports[n-1].Topics[0].Measured
	}
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Mode: Block,
		MaxBlock: time.Minute, Leases: LeaseConfig{URL: srv.URL}})
	eventually(t, 10*time.Second, "the idle report", func() bool { return idle() && p.c.topic("orders").idle.Load() })
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatalf("%v, want admitted by the resume's answer", err)
	}
}

// TestResumeUnknownAfterFailedReport (review-leftovers33): the report a
// resume asked for fails (500); the report after it, answered, still says
// the topic's demand is unknown (0, not measured), not the one refused
// message measured over the window. Red without o.carried's check in
// report.
func TestResumeUnknownAfterFailedReport(t *testing.T) {
	var mu sync.Mutex
	var reports []quotaproto.Report
	failed := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != quotaproto.PathLeases {
			<-r.Context().Done()
			return
		}
		var rep quotaproto.Report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		mu.Lock()
		resumed := len(reports) > 1 && len(rep.Topics) == 1 && !rep.Topics[0].Measured
		if resumed && !failed {
			failed = true
			mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		reports = append(reports, rep)
		mu.Unlock()
		rate := 0.0
		_ = json.NewEncoder(w).Encode(quotaproto.LeaseSet{Producer: rep.Producer, Version: 5, RefreshAfterMs: 60_000,
			Leases: []quotaproto.Lease{{Topic: "orders", Rate: &rate, Signal: "slow-down", Version: 5, ExpiresAt: time.Now().Add(time.Hour)}}})
	}))
	t.Cleanup(srv.Close)
	idle := func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := len(reports)
		return n > 0 && len(reports[n-1].Topics) == 1 && reports[n-1].Topics[0].Measured
	}
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Mode: Drop,
		Leases: LeaseConfig{URL: srv.URL}})
	eventually(t, 10*time.Second, "the idle report", func() bool { return idle() && p.c.topic("orders").idle.Load() })
	mu.Lock()
	n := len(reports)
	mu.Unlock()
	_ = p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	eventually(t, 10*time.Second, "the report after the failed one", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > n })
	mu.Lock()
	defer mu.Unlock()
	if !failed {
		t.Fatal("the resume's report did not fail")
	}
	if d := reports[n].Topics[0]; d.Demand != 0 || d.Measured {
		t.Fatalf("the report after the failed resume report: %+v, want unknown (0, not measured)", d)
	}
}

// TestResumeDuringBackoffReleasesBlock (review-leftovers33): the daemon
// fails every report with 503 Retry-After: 30 (a failed report is behind
// the reporter, its pause under way); a topic idle at the last answered
// report gets a Block message: no report is on the way for 30 s, and the
// lease in place is 0: refused at once, not after the pause.
func TestResumeDuringBackoffReleasesBlock(t *testing.T) {
	var mu sync.Mutex
	var reports []quotaproto.Report
	var failing bool
	fails := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != quotaproto.PathLeases {
			<-r.Context().Done()
			return
		}
		var rep quotaproto.Report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		mu.Lock()
		if failing {
			fails++
			mu.Unlock()
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		reports = append(reports, rep)
		mu.Unlock()
		rate := 0.0
		_ = json.NewEncoder(w).Encode(quotaproto.LeaseSet{Producer: rep.Producer, Version: 5, RefreshAfterMs: 60_000,
			Leases: []quotaproto.Lease{{Topic: "orders", Rate: &rate, Signal: "slow-down", Version: 5, ExpiresAt: time.Now().Add(time.Hour)},
				{Topic: "audit", Rate: &rate, Signal: "slow-down", Version: 5, ExpiresAt: time.Now().Add(time.Hour)}}})
	}))
	t.Cleanup(srv.Close)
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders", "audit")), Config{Producer: "svc-a", Topics: []string{"orders", "audit"}, Mode: Block,
		MaxBlock: time.Minute, Leases: LeaseConfig{URL: srv.URL}})
	eventually(t, 10*time.Second, "the idle report", func() bool { return p.c.topic("orders").idle.Load() && p.c.topic("audit").idle.Load() })
	time.Sleep(time.Second)
	mu.Lock()
	failing = true
	mu.Unlock()
	// audit resumes: its report fails, the reporter pauses 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.Produce(ctx, &kgo.Record{Topic: "audit"})
	eventually(t, 10*time.Second, "the failed report", func() bool { mu.Lock(); defer mu.Unlock(); return fails > 0 })
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.Produce(context.Background(), &kgo.Record{Topic: "orders"}) }()
	select {
	case err := <-done:
		t.Logf("orders after %v: %v", time.Since(began), err)
	case <-time.After(10 * time.Second):
		t.Fatal("a Block message resumed during the failure pause still waits at 10 s")
	}
}
