package producerclient

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestStreamSkipsWarnOnce: a stream of malformed events (a proxy or a
// server that garbles them) is one warning a minute per stream, each event
// still counted; before, every event was a warning, at the server's rate
// (61 in 6 s from one sending 10 a second). The held lease stays.
func TestStreamSkipsWarnOnce(t *testing.T) {
	const events = 50
	d := newHostileDaemon(t)
	d.honest(1, 100)
	var logs syncBuffer
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Leases: LeaseConfig{URL: d.srv.URL, Transport: SSE, DefaultLeaseTTL: time.Minute, RequestTimeout: time.Second,
			StreamIdle: 5 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
	eventually(t, 10*time.Second, "the honest lease", func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == 100 })
	set, _, _, _ := d.state()
	d.turn(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != quotaproto.PathStream {
			_, _ = w.Write(set) // reports are answered honestly
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "event: leases\ndata: {\"producer\": <<<garbage %d\n\n", i)
		}
		w.(http.Flusher).Flush()
		dribble(w, r, 50*time.Millisecond, ":\n\n") // keepalives: the stream stays up
	})
	eventually(t, 10*time.Second, "every event counted", func() bool { return p.Stats().LeaseMalformed >= events })
	if n := strings.Count(logs.String(), "lease stream event skipped"); n != 1 {
		t.Errorf("%d warnings for %d malformed events on one stream, want 1:\n%s", n, events, logs.String())
	}
	if q, _ := p.Quota("orders"); !q.FromLease || q.Rate != 100 {
		t.Errorf("the held lease went: %+v", q)
	}
	if s := p.Stats(); s.LeaseErrors < events {
		t.Errorf("lease errors %d, want at least %d", s.LeaseErrors, events)
	}
}

// TestStreamSkipsWarnEveryMinute: a minute after the first warning the
// next malformed event warns again, with how many were skipped since the
// first (the events counted silently in between, and itself).
func TestStreamSkipsWarnEveryMinute(t *testing.T) {
	const first, second = 20, 5
	clk := newFakeClock()
	d := newHostileDaemon(t)
	d.honest(1, 100)
	var logs syncBuffer
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Leases: LeaseConfig{URL: d.srv.URL, Transport: SSE, RequestTimeout: time.Second}})
	eventually(t, 10*time.Second, "the honest lease", func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == 100 })
	set, _, _, _ := d.state()
	more := make(chan struct{})
	d.turn(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != quotaproto.PathStream {
			_, _ = w.Write(set)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		garbage := func(n int) {
			for i := range n {
				fmt.Fprintf(w, "event: leases\ndata: {\"producer\": <<<garbage %d\n\n", i)
			}
			w.(http.Flusher).Flush()
		}
		garbage(first)
		select {
		case <-more:
			garbage(second)
		case <-r.Context().Done():
			return
		}
		<-r.Context().Done()
	})
	// The turn ended the honest stream: the reconnect waits on the clock.
	eventually(t, 10*time.Second, "the first events counted", func() bool {
		clk.Advance(10 * time.Millisecond)
		return p.Stats().LeaseMalformed >= first
	})
	clk.Advance(eventSkipWarnEvery + time.Second)
	close(more)
	eventually(t, 10*time.Second, "every event counted", func() bool { return p.Stats().LeaseMalformed >= first+second })
	out := logs.String()
	if n := strings.Count(out, "lease stream event skipped"); n != 2 {
		t.Fatalf("%d warnings, want 2 (the first event, then the first a minute later):\n%s", n, out)
	}
	// The second warning counts the first batch's 19 silent events and itself.
	if want := fmt.Sprintf("skipped_since_last_warning=%d", first); !strings.Contains(out, want) {
		t.Errorf("%q not in the warnings:\n%s", want, out)
	}
}
