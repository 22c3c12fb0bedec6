package producerclient

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// zeroLeases is a lease set of rate 0 (slow-down) on each topic.
func zeroLeases(producer string, topics ...string) quotaproto.LeaseSet {
	zero := 0.0
	s := quotaproto.LeaseSet{Producer: producer, Version: 1, RefreshAfterMs: 60_000}
	for _, t := range topics {
		s.Leases = append(s.Leases, quotaproto.Lease{Topic: t, Rate: &zero, Signal: "slow-down", Version: 1, ExpiresAt: time.Now().Add(time.Hour)})
	}
	return s
}

// TestResumeUnknownAfterFailedReport (review-leftovers33): the report a
// resume asked for fails (500); the report after it, answered, still says
// the topic's demand is unknown (0, not measured), not the one refused
// message measured over the window (which read the topic idle). Red
// without o.carried's check in report.
func TestResumeUnknownAfterFailedReport(t *testing.T) {
	d := newFakeDaemon(t)
	d.set(zeroLeases("svc-a", "orders"))
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Mode: Drop,
		Leases: LeaseConfig{URL: d.srv.URL}})
	eventually(t, 10*time.Second, "the idle report", func() bool {
		rep, _ := d.lastReport()
		return len(rep.Topics) == 1 && rep.Topics[0].Measured && p.c.topic("orders").idle.Load()
	})
	_, n := d.lastReport()
	posts := d.posts.Load()
	d.inject(1, http.StatusInternalServerError, "")
	_ = p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	eventually(t, 10*time.Second, "the report after the failed one", func() bool { _, m := d.lastReport(); return m > n })
	if got := d.posts.Load() - posts; got < 2 {
		t.Fatalf("%d reports posted since the idle one, want the failed one and the one after it", got)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.reports[n].Topics[0]; r.Demand != 0 || r.Measured {
		t.Fatalf("the report after the failed resume report: %+v, want unknown (0, not measured)", r)
	}
}

// TestResumeDuringBackoffReleasesBlock (review-leftovers33): the daemon
// fails every report with 503 Retry-After: 30 (a failed report is behind
// the reporter, its pause under way); a topic idle at the last answered
// report gets a Block message: no report is on the way for 30 s, and the
// lease in place is 0: refused at once, not after the pause. Red on
// 4317173 (still waiting at 10 s).
func TestResumeDuringBackoffReleasesBlock(t *testing.T) {
	d := newFakeDaemon(t)
	d.set(zeroLeases("svc-a", "orders", "audit"))
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders", "audit")), Config{Producer: "svc-a", Topics: []string{"orders", "audit"}, Mode: Block,
		MaxBlock: time.Minute, Leases: LeaseConfig{URL: d.srv.URL}})
	eventually(t, 10*time.Second, "the idle report", func() bool { return p.c.topic("orders").idle.Load() && p.c.topic("audit").idle.Load() })
	// Past the demand window, so audit's resume reports at once.
	time.Sleep(time.Second)
	posts := d.posts.Load()
	d.inject(1_000_000, http.StatusServiceUnavailable, "30")
	// audit resumes: its report fails, the reporter pauses 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.Produce(ctx, &kgo.Record{Topic: "audit"})
	eventually(t, 10*time.Second, "the failed report", func() bool { return d.posts.Load() > posts })
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- p.Produce(context.Background(), &kgo.Record{Topic: "orders"}) }()
	refusedBeforeLimit(t, done, "a resume during the pause after a failed report")
}

// TestResumeAnswerAppliedBeforeRelease: the lease goroutine applies the
// answer a resume's report brought before it ends the resume (run:
// apply, then release), so a Block message waiting on a 0 lease for that
// answer is admitted by the rate it raises, not refused on the 0 still in
// place. The owner is paused at the exact moments that tell the two
// orders apart, by the logger of the warnings apply writes for an expired
// lease on either side of the resumed topic's: before it, the pause holds
// (once the resume has ended) until the message is decided, so a release
// that came first is seen on the 0; after it, until the message is
// decided, so a release that comes after is not needed to admit it. No
// sleep decides anything: the message waits until its answer or its
// MaxBlock (a minute). Red with release before apply in run (refused:
// "rate 0"); replaces TestResumeAnswerRaisesRateAdmitsBlock, dropped in
// 3446b4f for staying green against that mutant.
func TestResumeAnswerAppliedBeforeRelease(t *testing.T) {
	decided := make(chan struct{})
	var orders atomic.Pointer[topic]
	pause := func(r slog.Record) {
		var tp string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "topic" {
				tp = a.Value.String()
			}
			return true
		})
		switch tp {
		case "before":
			if !orders.Load().resumed.Load() {
				<-decided // released first: the message decides on the 0
			}
		case "after":
			<-decided // applied first: the message decides on the new rate
		}
	}
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Mode: Block,
		MaxBlock: time.Minute, Logger: slog.New(pauseHandler(pause))})
	tp := p.c.topic("orders")
	orders.Store(tp)
	zero := 0.0
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: &zero, Signal: "slow-down", Version: 1})
	o := p.c.leases // no URL: no source; the owner alone, started here
	p.c.goroutine(o.run)
	tp.idle.Store(true) // the last report found it idle
	var err error
	go func() {
		err = p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
		close(decided)
	}()
	eventually(t, 10*time.Second, "the resume", tp.resumed.Load)
	lease := func(topic string, rate float64, expires time.Time) decodedLease {
		d, derr := decodeLease(fmt.Appendf(nil, `{"topic":%q,"rate":%v,"signal":"ok","version":2,"expiresAt":%q}`, topic, rate, expires.Format(time.RFC3339Nano)))
		if derr != nil {
			t.Fatal(derr)
		}
		return d
	}
	past, later := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	o.deliver(leaseUpdate{leases: []decodedLease{lease("before", 1, past), lease("orders", 1000, later), lease("after", 1, past)},
		resumed: []*topic{tp}})
	<-decided
	if err != nil {
		t.Fatalf("the Block message waiting for the resume's answer: %v, want admitted at the 1000/s it brought", err)
	}
}

// pauseHandler is a slog.Handler that calls f with each record, on the
// goroutine that logs it.
type pauseHandler func(slog.Record)

func (pauseHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h pauseHandler) Handle(_ context.Context, r slog.Record) error {
	h(r)
	return nil
}
func (h pauseHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h pauseHandler) WithGroup(string) slog.Handler      { return h }
