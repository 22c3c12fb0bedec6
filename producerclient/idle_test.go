package producerclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestReportIdle: a topic with no message asked over a measured window
// and none in flight is idle: its 0 says measured (protocol 1.7), which
// the daemon reads as taking nothing from the others. A message in flight
// is not idle (a Block wait holds its message uncounted until it ends);
// the first message after an idle report marks the topic resumed, and the
// next report says unknown (0, not measured) and measures again soon.
func TestReportIdle(t *testing.T) {
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk, Mode: Drop})
	o, tp := p.c.leases, p.c.topic("orders")
	start := clk.Now()
	clk.Advance(2 * time.Second)
	// A slot held: a message waits in Block mode, or is in flight.
	tp.inflight.tryAcquire()
	if rep, unmeasured := o.report(start, clk.Now()); rep.Topics[0].Measured || unmeasured || tp.idle.Load() {
		t.Fatalf("a message in flight: %+v (unmeasured %v, idle %v), want 0 measured but not idle", rep, unmeasured, tp.idle.Load())
	}
	tp.inflight.release()
	// Messages asked over the window, none in flight at the report: a
	// demand, not idle (its next message needs no report).
	tp.admitted.Add(3)
	last := clk.Now()
	clk.Advance(2 * time.Second)
	if rep, _ := o.report(last, clk.Now()); rep.Topics[0].Measured || rep.Topics[0].Demand != 1.5 || tp.idle.Load() {
		t.Fatalf("3 messages over 2 s: %+v (idle %v), want 1.5/s, not idle", rep, tp.idle.Load())
	}
	last = clk.Now()
	clk.Advance(2 * time.Second)
	if rep, unmeasured := o.report(last, clk.Now()); !rep.Topics[0].Measured || rep.Topics[0].Demand != 0 || unmeasured || !tp.idle.Load() {
		t.Fatalf("nothing asked for 2 s: %+v (unmeasured %v, idle %v), want 0 measured, idle", rep, unmeasured, tp.idle.Load())
	}
	if err := (quotaproto.Report{Producer: "svc-a", Topics: []quotaproto.TopicDemand{{Topic: "orders", Measured: true}}}).Validate(); err != nil {
		t.Fatal(err)
	}
	_ = p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	if tp.idle.Load() || !tp.resumed.Load() {
		t.Fatalf("after a message: idle %v, resumed %v; want resumed", tp.idle.Load(), tp.resumed.Load())
	}
	last = clk.Now()
	clk.Advance(2 * time.Second)
	rep, unmeasured := o.report(last, clk.Now())
	if rep.Topics[0].Measured || rep.Topics[0].Demand != 0 || !unmeasured || len(o.carried) != 1 {
		t.Fatalf("the report after a resume: %+v (unmeasured %v, carried %d), want 0 unmeasured (unknown)", rep, unmeasured, len(o.carried))
	}
}

// TestReportResumesIdleTopic: the second report (the demand window's)
// finds the topic idle and says so; the first message after it makes the
// reporter report at once, not at the refresh (10 s here, and the fake
// clock does not move): its demand unknown, so that the daemon gives the
// topic its class's share within a round trip. Red without core.resume's
// wake.
func TestReportResumesIdleTopic(t *testing.T) {
	d := newFakeDaemon(t)
	d.set(quotaproto.LeaseSet{Producer: "svc-a", Version: 1, RefreshAfterMs: 10_000,
		Leases: []quotaproto.Lease{{Topic: "orders", Signal: "ok", Version: 1, ExpiresAt: time.Now().Add(time.Hour)}}})
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk, Mode: Drop,
		Leases: LeaseConfig{URL: d.srv.URL}})
	// The fake clock moves 100 ms a poll until the demand window's
	// report (the reporter may not wait on it yet at registration).
	eventually(t, 10*time.Second, "the measuring report", func() bool { clk.Advance(100 * time.Millisecond); return d.posts.Load() >= 2 })
	if rep, _ := d.lastReport(); len(rep.Topics) != 1 || rep.Topics[0].Demand != 0 || !rep.Topics[0].Measured {
		t.Fatalf("second report %+v, want orders idle (0, measured)", rep)
	}
	eventually(t, 10*time.Second, "the refresh's wait", func() bool { return clk.Waiters() > 0 })
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the report at the first message", func() bool { return d.posts.Load() == 3 })
	if rep, _ := d.lastReport(); len(rep.Topics) != 1 || rep.Topics[0].Demand != 0 || rep.Topics[0].Measured {
		t.Fatalf("third report %+v, want orders unknown (0, not measured)", rep)
	}
	// Its answer is in: the demand window's report measures the topic
	// again (idle, or the message if the third report missed it), rather
	// than unknown (0, not measured) for good.
	eventually(t, 10*time.Second, "the report after the resume's", func() bool { clk.Advance(100 * time.Millisecond); return d.posts.Load() >= 4 })
	if rep, _ := d.lastReport(); len(rep.Topics) != 1 || (rep.Topics[0].Demand == 0 && !rep.Topics[0].Measured) {
		t.Fatalf("fourth report %+v, want orders measured again", rep)
	}
}

// TestWaitReportHoldsResume: a resume within demandWindow of the last
// report a resume woke waits until the window has passed (a topic
// flapping between idle and busy adds at most one report a window); one
// after it ends the wait at once.
func TestWaitReportHoldsResume(t *testing.T) {
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Clock: clk})
	o := p.c.leases // no URL: no reporter reads the channels
	type result struct{ resumed, ok bool }
	wait := func(lastResume time.Time) <-chan result {
		ch := make(chan result, 1)
		go func() {
			r, ok := o.waitReport(time.Hour, lastResume)
			ch <- result{r, ok}
		}()
		return ch
	}
	// The last resume 200 ms ago: held 800 ms.
	done := wait(clk.Now().Add(-200 * time.Millisecond))
	eventually(t, 10*time.Second, "the report's wait", func() bool { return clk.Waiters() == 1 })
	p.c.topicResumed <- struct{}{}
	eventually(t, 10*time.Second, "the hold", func() bool { return clk.Waiters() == 2 })
	clk.Advance(799 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("a resume 200 ms after the last one ended the wait after 799 ms: %+v", r)
	case <-time.After(20 * time.Millisecond): // a wrong early end has the chance to show
	}
	clk.Advance(time.Millisecond)
	if r := <-done; !r.resumed || !r.ok {
		t.Fatalf("the held resume: %+v", r)
	}
	// The last resume a window ago: at once.
	done = wait(clk.Now().Add(-demandWindow))
	eventually(t, 10*time.Second, "the report's wait", func() bool { return clk.Waiters() == 1 })
	p.c.topicResumed <- struct{}{}
	if r := <-done; !r.resumed || !r.ok {
		t.Fatalf("a resume a window after the last: %+v", r)
	}
}

// report16 is a demand report as a daemon of protocol 1.6 reads it: no
// measured.
type report16 struct {
	Producer string `json:"producer"`
	Topics   []struct {
		Topic       string  `json:"topic"`
		Criticality string  `json:"criticality,omitempty"`
		Demand      float64 `json:"demand"`
	} `json:"topics"`
}

// TestReportOlderDaemonWithoutMeasured: a daemon older than protocol 1.7
// refuses a report with the measured field (its strict decoder's 400);
// the SDK sends the same report without it at once, and the next ones
// without it too, and marks no topic idle (that daemon reads the 0 as
// unknown already: no report is needed at the next message).
func TestReportOlderDaemonWithoutMeasured(t *testing.T) {
	var mu sync.Mutex
	var refused []string
	var taken []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != quotaproto.PathLeases {
			<-r.Context().Done() // a watch that sees no change
			return
		}
		body, _ := io.ReadAll(r.Body)
		var rep report16
		if err := quotaserver.DecodeStrict(body, &rep, "producer", "topics", "topics[].topic"); err != nil {
			mu.Lock()
			refused = append(refused, err.Error())
			mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(quotaproto.ErrorBody{Error: "malformed body: " + err.Error()})
			return
		}
		mu.Lock()
		taken = append(taken, string(body))
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(quotaproto.LeaseSet{Producer: rep.Producer, Version: 1, RefreshAfterMs: 10_000,
			Leases: []quotaproto.Lease{{Topic: "orders", Signal: "ok", Version: 1, ExpiresAt: time.Now().Add(time.Hour)}}})
	}))
	t.Cleanup(srv.Close)
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(refused), len(taken) }
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk, Mode: Drop,
		Leases: LeaseConfig{URL: srv.URL}})
	// The fake clock moves 100 ms a poll (the reporter may not wait on
	// it yet when a report is in).
	advanceUntil := func(what string, n int) {
		t.Helper()
		eventually(t, 10*time.Second, what, func() bool { clk.Advance(100 * time.Millisecond); _, got := counts(); return got >= n })
	}
	advanceUntil("the measuring report, again without measured", 2)
	mu.Lock()
	if len(refused) != 1 || !quotaproto.RefusesMeasured("malformed body: "+refused[0]) || strings.Contains(taken[1], "measured") {
		t.Fatalf("refused %q, taken %q", refused, taken)
	}
	mu.Unlock()
	if p.c.topic("orders").idle.Load() {
		t.Fatal("a topic marked idle for a daemon that reads its 0 as unknown")
	}
	// The refresh: without the field from the start.
	advanceUntil("the refresh", 3)
	if r, _ := counts(); r != 1 {
		t.Fatalf("%d refusals, want the first only", r)
	}
}

// TestBlockResumeEndsAtLimit (review-idlezero): a Block message of a topic
// idle at the last report, on a lease of 0, waits for its resume report's
// answer, but no longer than its limit (MaxBlock here) when no answer
// comes (the daemon hangs): then it is refused as rate limited. Red
// without takeToken's now < m.limit: it spins past the limit.
func TestBlockResumeEndsAtLimit(t *testing.T) {
	d := newFakeDaemon(t)
	zero := 0.0
	d.set(quotaproto.LeaseSet{Producer: "svc-a", Version: 1, RefreshAfterMs: 60_000,
		Leases: []quotaproto.Lease{{Topic: "orders", Rate: &zero, Signal: "slow-down", Version: 1, ExpiresAt: time.Now().Add(time.Hour)}}})
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Mode: Block,
		MaxBlock: 200 * time.Millisecond, Leases: LeaseConfig{URL: d.srv.URL}})
	eventually(t, 10*time.Second, "the idle report", func() bool {
		rep, _ := d.lastReport()
		return len(rep.Topics) == 1 && rep.Topics[0].Measured
	})
	d.paused.Store(true)
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- p.Produce(context.Background(), &kgo.Record{Topic: "orders"}) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRateLimited) || time.Since(began) < 150*time.Millisecond {
			t.Fatalf("after %v: %v, want rate limited at MaxBlock", time.Since(began), err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Block message waiting for a resume report's answer did not end at its limit")
	}
}

// resumeWaiter is a Block producer on a lease of 0 for "orders" from srv,
// its topic reported idle, with a Block message of that topic sent after
// before() and waiting for its resume report's answer; it returns the
// message's result. Its limit (MaxBlock) is a minute: a message that
// waits for it fails the test's 10 s.
func resumeWaiter(t *testing.T, url string, idle func() bool, before func()) <-chan error {
	t.Helper()
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Mode: Block,
		MaxBlock: time.Minute, Leases: LeaseConfig{URL: url}})
	eventually(t, 10*time.Second, "the idle report", func() bool { return idle() && p.c.topic("orders").idle.Load() })
	before()
	done := make(chan error, 1)
	go func() { done <- p.Produce(context.Background(), &kgo.Record{Topic: "orders"}) }()
	return done
}

// refusedBeforeLimit: resumeWaiter's message is refused as rate limited
// within 10 s (not at its limit, a minute).
func refusedBeforeLimit(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRateLimited) {
			t.Fatalf("%v, want rate limited", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Block message still waits for " + what)
	}
}

// TestResumeReportFailedReleasesBlock (review-idlezero): when the report
// a resume asked for fails (the daemon answers 500 from then on), the
// Block message waiting for its answer decides on the lease in place, 0:
// refused as rate limited at once, as before the resume, not at its
// limit. Red on 1675f45 (the message waits its minute).
func TestResumeReportFailedReleasesBlock(t *testing.T) {
	d := newFakeDaemon(t)
	zero := 0.0
	d.set(quotaproto.LeaseSet{Producer: "svc-a", Version: 1, RefreshAfterMs: 60_000,
		Leases: []quotaproto.Lease{{Topic: "orders", Rate: &zero, Signal: "slow-down", Version: 1, ExpiresAt: time.Now().Add(time.Hour)}}})
	idle := func() bool { rep, _ := d.lastReport(); return len(rep.Topics) == 1 && rep.Topics[0].Measured }
	done := resumeWaiter(t, d.srv.URL, idle, func() { d.inject(1_000_000, http.StatusInternalServerError, "") })
	refusedBeforeLimit(t, done, "a resume report that failed")
}

// TestResumeAnswerDroppedReleasesBlock (review-idlezero): the resume
// report's answer is in but not applied (a set older than the one held,
// from a daemon behind: the lease in place, 0, stays); the Block message
// waiting for it decides on that lease: refused as rate limited at once,
// not at its limit. Red on 1675f45, where the reporter cleared the resume
// without waking the wait (the message waits its minute).
func TestResumeAnswerDroppedReleasesBlock(t *testing.T) {
	d := newFakeDaemon(t)
	held := zeroLeases("svc-a", "orders")
	held.Version, held.Leases[0].Version = 5, 5
	d.set(held)
	idle := func() bool { rep, _ := d.lastReport(); return len(rep.Topics) == 1 && rep.Topics[0].Measured }
	done := resumeWaiter(t, d.srv.URL, idle, func() {
		// The resume's report is answered with version 3; no watch
		// is woken by it.
		behind := zeroLeases("svc-a", "orders")
		behind.Version, behind.Leases[0].Version = 3, 3
		d.mu.Lock()
		d.sets["svc-a"] = behind
		d.mu.Unlock()
	})
	refusedBeforeLimit(t, done, "a resume report whose answer was dropped")
}
