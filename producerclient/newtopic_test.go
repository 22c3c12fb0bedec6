package producerclient

import (
	"context"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReportMeasuresNewTopicSoon: a topic added after registration is
// reported at once (topicAdded), its demand counted from when it was added,
// not over the window since the last report (one message over 5 s read
// 0.2/s), and unmeasured there, so the next report follows within
// demandWindow, not the refresh (review-lead32: red on 8714603, the 0.2/s
// held for 10 s).
func TestReportMeasuresNewTopicSoon(t *testing.T) {
	d := newFakeDaemon(t)
	d.set(quotaproto.LeaseSet{Producer: "svc-a", Version: 1, RefreshAfterMs: 10_000,
		Leases: []quotaproto.Lease{{Topic: "orders", Signal: "ok", Version: 1, ExpiresAt: time.Now().Add(time.Hour)}}})
	clk := newFakeClock()
	c := newKfake(t, 1, "orders", "payments")
	p := newKafkaProducer(t, newKgo(t, c), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk, Mode: Drop,
		Leases: LeaseConfig{URL: d.srv.URL}})
	eventually(t, 10*time.Second, "registration", func() bool { return d.posts.Load() == 1 && clk.Waiters() > 0 })
	for range 30 {
		_ = p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	}
	clk.Advance(demandWindow * 3 / 2)
	eventually(t, 10*time.Second, "2nd", func() bool { return d.posts.Load() == 2 && clk.Waiters() > 0 })
	clk.Advance(5 * time.Second)
	time.Sleep(20 * time.Millisecond)
	for range 30 {
		_ = p.Produce(context.Background(), &kgo.Record{Topic: "payments"})
	}
	eventually(t, 10*time.Second, "3rd", func() bool { return d.posts.Load() == 3 && clk.Waiters() > 0 })
	rep, _ := d.lastReport()
	for _, td := range rep.Topics {
		if td.Topic == "payments" && td.Demand != 0 && td.Demand < 25 {
			t.Fatalf("the new topic's first report %+v: not its rate (30 since it was added)", rep.Topics)
		}
	}
	for range 30 {
		_ = p.Produce(context.Background(), &kgo.Record{Topic: "payments"})
	}
	clk.Advance(demandWindow * 3 / 2)
	eventually(t, 10*time.Second, "the measuring report", func() bool { return d.posts.Load() == 4 })
	rep, _ = d.lastReport()
	for _, td := range rep.Topics {
		if td.Topic == "payments" && td.Demand < 15 {
			t.Fatalf("the measuring report %+v, want payments at 30 over at most 1.5 s", rep.Topics)
		}
	}
}
