package producerclient

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// hostileDaemon serves the quota protocol honestly (the current set, to
// reports, long-polls and streams) until a hostile handler is set: then
// every request goes to it. It is a fake of our own because it plays
// faults no real daemon makes on purpose.
type hostileDaemon struct {
	srv *httptest.Server

	mu      sync.Mutex
	set     []byte        // the honest set's JSON
	version uint64        // its version
	changed chan struct{} // closed when the honest set changes
	hostile http.HandlerFunc
	base    uint64 // versions start here: the wall clock in µs, as the daemon's do
}

func newHostileDaemon(tb testing.TB) *hostileDaemon {
	tb.Helper()
	d := &hostileDaemon{changed: make(chan struct{}), base: uint64(time.Now().UnixMicro())}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	tb.Cleanup(func() {
		d.srv.CloseClientConnections()
		d.srv.Close()
	})
	return d
}

// honest publishes an honest set: version base+n, one lease for orders.
func (d *hostileDaemon) honest(n uint64, rate float64) {
	b, _ := json.Marshal(quotaproto.LeaseSet{Producer: "svc-a", Version: d.base + n, RefreshAfterMs: 3_600_000,
		Leases: []quotaproto.Lease{{Topic: "orders", Rate: &rate, Burst: 10, Signal: quotaproto.SignalOK, Version: d.base + n, ExpiresAt: time.Now().Add(time.Hour)}}})
	d.mu.Lock()
	defer d.mu.Unlock()
	d.set, d.version, d.hostile = b, d.base+n, nil
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *hostileDaemon) turn(h http.HandlerFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hostile = h
	close(d.changed) // wake the waiting long-polls and streams into it
	d.changed = make(chan struct{})
}

func (d *hostileDaemon) state() ([]byte, uint64, <-chan struct{}, http.HandlerFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set, d.version, d.changed, d.hostile
}

func (d *hostileDaemon) serve(w http.ResponseWriter, r *http.Request) {
	set, version, changed, hostile := d.state()
	if hostile != nil {
		hostile(w, r)
		return
	}
	switch r.URL.Path {
	case quotaproto.PathStream:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: leases\ndata: %s\n\n", set)
		w.(http.Flusher).Flush()
		select {
		case <-changed: // end the stream: the client reconnects to what is new
		case <-r.Context().Done():
		}
	case quotaproto.PathWatch:
		if r.URL.Query().Get("version") == fmt.Sprint(version) {
			select {
			case <-changed:
				set, _, _, _ = d.state()
			case <-r.Context().Done():
				return
			}
		}
		_, _ = w.Write(set)
	default:
		_, _ = w.Write(set)
	}
}

// flood writes chunk until the client goes away or limit bytes are out.
func flood(w http.ResponseWriter, r *http.Request, prefix, chunk string, limit int) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, prefix)
	for n := 0; n < limit && r.Context().Err() == nil; n += len(chunk) {
		if _, err := fmt.Fprint(w, chunk); err != nil {
			return
		}
	}
}

// hostileSet answers every request with set (an event on the stream,
// which it then holds open).
func hostileSet(set string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == quotaproto.PathStream {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: leases\ndata: %s\n\n", set)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte(set))
	}
}

// heapPeak samples the live heap (what the last GC marked, the runtime's
// /gc/heap/live:bytes) every millisecond until stop is called, which
// returns the peak growth over the live heap at the start in bytes. What
// the client keeps shows; garbage not yet collected does not: that grows
// with the GC's pace on a loaded machine (-race, two cores), not with the
// client.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := live()
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			if l := live(); l > base && l-base > peak.Load() {
				peak.Store(l - base)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// dribble writes chunk every period, flushed, until the request ends or
// a write fails.
func dribble(w http.ResponseWriter, r *http.Request, every time.Duration, chunk string) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tk.C:
			if _, err := w.Write([]byte(chunk)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

// TestHostileLeaseServer: each hostile answer leaves the producer on its
// documented safe behaviour, grows its heap by less than 16 MiB, and the
// next honest lease applies.
func TestHostileLeaseServer(t *testing.T) {
	// The clamp of the far-expiry case; the others never reach it.
	const maxTTL = 2 * time.Second
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	// stillHonest: the lease from before the hostile phase still applies.
	stillHonest := func(q Quota) bool { return q.FromLease && q.Rate == 100 }
	for _, tc := range []struct {
		name       string
		transports []LeaseTransport
		// hostile is the server's behaviour; base is the honest versions'
		// origin.
		hostile func(base uint64) http.HandlerFunc
		// safe reports whether the producer shows its safe behaviour.
		safe func(q Quota, s Stats) bool
	}{
		// A stream event whose data lines never end in a blank line: the
		// event is dropped at 1 MiB in all and the connection with it.
		{"unbounded SSE event", []LeaseTransport{SSE}, func(uint64) http.HandlerFunc {
			line := "data: " + strings.Repeat("x", 64<<10) + "\n"
			return func(w http.ResponseWriter, r *http.Request) {
				flood(w, r, "event: leases\n", line, 256<<20)
			}
		}, func(q Quota, s Stats) bool { return stillHonest(q) && s.LeaseMalformed >= 2 }},
		// One line that never ends: dropped at 1 MiB.
		{"unbounded SSE line", []LeaseTransport{SSE}, func(uint64) http.HandlerFunc {
			chunk := strings.Repeat("x", 64<<10)
			return func(w http.ResponseWriter, r *http.Request) {
				flood(w, r, "event: leases\ndata: ", chunk, 256<<20)
			}
		}, func(q Quota, s Stats) bool { return stillHonest(q) && s.LeaseErrors >= 2 }},
		// Stop for ever: version 2^64-1, expiry in the year 9999. The
		// version is garbled (ranks as the oldest), so the set does not
		// replace the held one, and it is counted.
		{"huge version, far expiry, stop", []LeaseTransport{LongPoll, SSE}, func(uint64) http.HandlerFunc {
			return hostileSet(fmt.Sprintf(`{"producer":"svc-a","version":%d,"refreshAfterMs":3600000,"leases":[{"topic":"orders","rate":0,"signal":"stop","version":%d,"expiresAt":%q}]}`,
				uint64(math.MaxUint64), uint64(math.MaxUint64), far))
		}, func(q Quota, s Stats) bool { return stillHonest(q) && s.LeaseMalformed >= 1 }},
		// Stop with a believable version and an expiry in the year 9999:
		// it applies, but only until arrival + MaxLeaseTTL.
		{"far expiry, stop", []LeaseTransport{LongPoll, SSE}, func(base uint64) http.HandlerFunc {
			v := base + 1_000_000
			return hostileSet(fmt.Sprintf(`{"producer":"svc-a","version":%d,"refreshAfterMs":3600000,"leases":[{"topic":"orders","rate":0,"signal":"stop","version":%d,"expiresAt":%q}]}`, v, v, far))
		}, func(q Quota, _ Stats) bool {
			return q.FromLease && q.Signal == SignalStop && !q.ExpiresAt.After(q.Received.Add(maxTTL))
		}},
		// Negative and not-a-number rates: those leases are skipped
		// (counted); the held lease stays.
		{"negative and NaN rates", []LeaseTransport{LongPoll, SSE}, func(base uint64) http.HandlerFunc {
			v := base + 1_000
			return hostileSet(fmt.Sprintf(`{"producer":"svc-a","version":%d,"refreshAfterMs":3600000,"leases":[{"topic":"orders","rate":-5,"signal":"ok","version":%d},{"topic":"orders","rate":"NaN","signal":"ok","version":%d}]}`, v, v, v))
		}, func(q Quota, s Stats) bool { return stillHonest(q) && s.LeaseMalformed >= 2 }},
		// A trickle: headers, then a byte every 20ms, never a whole
		// answer. Requests end at RequestTimeout (a long-poll at
		// WatchWait + RequestTimeout), streams at StreamIdle.
		{"trickle", []LeaseTransport{LongPoll, SSE}, func(uint64) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				dribble(w, r, 20*time.Millisecond, "d")
			}
		}, func(q Quota, s Stats) bool { return stillHonest(q) && s.LeaseErrors >= 2 }},
		// Garbage instead of JSON.
		{"garbage JSON", []LeaseTransport{LongPoll, SSE}, func(uint64) http.HandlerFunc {
			return hostileSet(`{"producer": <<<garbage`)
		}, func(q Quota, s Stats) bool { return stillHonest(q) && s.LeaseMalformed >= 1 }},
	} {
		for _, tr := range tc.transports {
			t.Run(fmt.Sprintf("%s/%v", tc.name, map[LeaseTransport]string{LongPoll: "long-poll", SSE: "sse"}[tr]), func(t *testing.T) {
				d := newHostileDaemon(t)
				d.honest(1, 100)
				ttl := time.Minute
				if strings.HasPrefix(tc.name, "far expiry") {
					ttl = maxTTL
				}
				p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
					Leases: LeaseConfig{URL: d.srv.URL, Transport: tr, MaxLeaseTTL: ttl, DefaultLeaseTTL: time.Second, WatchWait: time.Second,
						RequestTimeout: 300 * time.Millisecond, StreamIdle: 300 * time.Millisecond,
						MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
				eventually(t, 10*time.Second, "the honest lease", func() bool { q, _ := p.Quota("orders"); return stillHonest(q) })

				stop := heapPeak()
				d.turn(tc.hostile(d.base))
				eventually(t, 20*time.Second, "the safe behaviour", func() bool {
					q, _ := p.Quota("orders")
					return tc.safe(q, p.Stats())
				})
				grew := stop()
				if grew >= 16<<20 {
					t.Fatalf("heap grew by %d MiB under the hostile server", grew>>20)
				}
				t.Logf("peak heap growth %.1f MiB", float64(grew)/(1<<20))

				d.honest(2, 200)
				eventually(t, 20*time.Second, "the next honest lease", func() bool {
					q, _ := p.Quota("orders")
					return q.FromLease && q.Rate == 200 && q.Signal == SignalOK
				})
			})
		}
	}
}

// TestGarbledVersion pins which set versions are beyond the wall-clock
// range: more than a week ahead of now in Unix microseconds.
func TestGarbledVersion(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	us := uint64(now.UnixMicro())
	week := uint64(maxVersionLead / time.Microsecond)
	for _, tc := range []struct {
		name    string
		v       uint64
		garbled bool
	}{
		{"zero", 0, false},
		{"a small counter (a daemon not started from the clock)", 42, false},
		{"the wall clock", us, false},
		{"a week ahead", us + week, false},
		{"just over a week ahead", us + week + 1, true},
		{"2^64-1", math.MaxUint64, true},
		{"wrapped to near the top", math.MaxUint64 - 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := garbledVersion(tc.v, now); got != tc.garbled {
				t.Fatalf("garbledVersion(%d) = %v, want %v", tc.v, got, tc.garbled)
			}
		})
	}
}

// TestHostileLeaseServerNewTopics: a server that answers every request
// with leases for topics the producer never wrote to cannot grow the
// producer's topics (each a view, a throttle window, a line in every
// report) without bound: beyond quotaproto.MaxTopics such leases are
// skipped and counted, and the leases of its own topics still apply.
func TestHostileLeaseServerNewTopics(t *testing.T) {
	for _, tr := range []LeaseTransport{LongPoll, SSE} {
		t.Run(map[LeaseTransport]string{LongPoll: "long-poll", SSE: "sse"}[tr], func(t *testing.T) {
			d := newHostileDaemon(t)
			d.honest(1, 100)
			p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
				Leases: LeaseConfig{URL: d.srv.URL, Transport: tr, WatchWait: time.Second,
					RequestTimeout: 300 * time.Millisecond, StreamIdle: 300 * time.Millisecond,
					MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
			eventually(t, 10*time.Second, "the honest lease", func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == 100 })

			// Every answer: 500 leases for topics never seen before, and
			// the producer's own topic at rate 7.
			var sets atomic.Int64
			d.turn(func(w http.ResponseWriter, r *http.Request) {
				n := sets.Add(1)
				v := d.base + 10 + uint64(n)
				var b strings.Builder
				fmt.Fprintf(&b, `{"producer":"svc-a","version":%d,"refreshAfterMs":3600000,"leases":[{"topic":"orders","rate":7,"signal":"ok","version":%d}`, v, v)
				for i := range 500 {
					fmt.Fprintf(&b, `,{"topic":"junk-%d-%d","rate":1,"signal":"ok","version":%d}`, n, i, v)
				}
				b.WriteString("]}")
				if r.URL.Path == quotaproto.PathStream {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "event: leases\ndata: %s\n\n", b.String())
					w.(http.Flusher).Flush()
					return // the client reconnects for the next
				}
				_, _ = w.Write([]byte(b.String()))
			})
			eventually(t, 20*time.Second, "ten hostile sets", func() bool { return sets.Load() >= 10 })
			eventually(t, 10*time.Second, "the own topic's lease", func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == 7 })
			if n := len(*p.c.topics.Load()); n > quotaproto.MaxTopics {
				t.Fatalf("the producer holds %d topics after %d hostile sets, want at most %d", n, sets.Load(), quotaproto.MaxTopics)
			}
			if s := p.Stats(); s.LeaseMalformed == 0 {
				t.Fatalf("skipped leases not counted: %+v", s)
			}
		})
	}
}

// leasedProducer is a producer of "orders" with lease transport tr, a
// 10 ms MinBackoff and maxBackoff, holding an honest lease of 100/s from a
// hostile daemon (no reports for an hour).
func leasedProducer(t *testing.T, tr LeaseTransport, maxBackoff time.Duration) (*hostileDaemon, *KafkaProducer) {
	t.Helper()
	d := newHostileDaemon(t)
	d.honest(1, 100)
	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"},
		Leases: LeaseConfig{URL: d.srv.URL, Transport: tr, WatchWait: 10 * time.Second, ReportInterval: time.Hour,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: maxBackoff}})
	eventually(t, 10*time.Second, "the honest lease", func() bool { q, _ := p.Quota("orders"); return q.FromLease && q.Rate == 100 })
	return d, p
}

// instantAnswers answers every request at once with the set d holds now:
// a stream serves it as one event and ends. asked, when not nil, counts
// the streams and long-polls.
func instantAnswers(d *hostileDaemon, asked *atomic.Int64) http.HandlerFunc {
	set, _, _, _ := d.state()
	return func(w http.ResponseWriter, r *http.Request) {
		if asked != nil && (r.URL.Path == quotaproto.PathStream || r.URL.Path == quotaproto.PathWatch) {
			asked.Add(1)
		}
		if r.URL.Path == quotaproto.PathStream {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: leases\ndata: %s\n\n", set)
			return
		}
		_, _ = w.Write(set)
	}
}

// TestLeaseSourcesBackOffFromInstantAnswers: a server that answers every
// long-poll at once with the set the producer holds, or ends every stream
// as soon as it served a set (a proxy that cuts them), is asked again
// after a backoff that grows to MaxBackoff, not at MinBackoff for ever
// (newuser3: 49 long-polls and 40 reconnects, each with a warning, in 6 s).
func TestLeaseSourcesBackOffFromInstantAnswers(t *testing.T) {
	for _, tr := range []LeaseTransport{LongPoll, SSE} {
		t.Run(map[LeaseTransport]string{LongPoll: "long-poll", SSE: "sse"}[tr], func(t *testing.T) {
			d, p := leasedProducer(t, tr, 400*time.Millisecond)
			var asked atomic.Int64
			d.turn(instantAnswers(d, &asked))
			time.Sleep(3 * time.Second)
			// At MinBackoff (5-10 ms with jitter) 3 s is 300 requests or
			// more; doubling to 400 ms, about 15.
			n := asked.Load()
			t.Logf("%d requests in 3 s", n)
			if n > 40 {
				t.Fatalf("%d requests in 3 s to a server answering at once, want a growing backoff (at most 40)", n)
			}
			if q, _ := p.Quota("orders"); !q.FromLease || q.Rate != 100 {
				t.Fatalf("quota %+v, want the lease kept", q)
			}
		})
	}
}

// TestLeaseSourcesBackoffResetAfterGoodAnswer: the backoff that instant
// answers grew is forgotten once the daemon answers well again (a
// long-poll that brought a newer set, a stream that lasted), so a failure
// after that is retried at MinBackoff, not at the cap the instant answers
// reached.
func TestLeaseSourcesBackoffResetAfterGoodAnswer(t *testing.T) {
	for _, tr := range []LeaseTransport{LongPoll, SSE} {
		t.Run(map[LeaseTransport]string{LongPoll: "long-poll", SSE: "sse"}[tr], func(t *testing.T) {
			d, p := leasedProducer(t, tr, 2*time.Second)
			// Instant answers of the set held: the backoff climbs to its
			// 2 s cap (10 ms doubled eight times is 2.56 s).
			d.turn(instantAnswers(d, nil))
			time.Sleep(4 * time.Second)

			// A good answer: a newer set, then (for the stream) a stream
			// held open for more than a second.
			d.honest(2, 200)
			eventually(t, 10*time.Second, "the newer lease", func() bool { q, _ := p.Quota("orders"); return q.Rate == 200 })
			time.Sleep(1500 * time.Millisecond)

			// The daemon fails: retried from MinBackoff (10, 20, 40 ...
			// ms: six or more requests in 1.5 s), not from the cap (one).
			var asked atomic.Int64
			d.turn(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == quotaproto.PathStream || r.URL.Path == quotaproto.PathWatch {
					asked.Add(1)
				}
				http.Error(w, "down", http.StatusInternalServerError)
			})
			time.Sleep(1500 * time.Millisecond)
			n := asked.Load()
			t.Logf("%d requests in 1.5 s after the good answer", n)
			if n < 4 {
				t.Fatalf("%d requests in 1.5 s to a failing daemon after a good answer, want the backoff reset (4 or more)", n)
			}
		})
	}
}

// TestLeaseFirstAfterDaemonStarts: producers started before the daemon
// (a deployment rolled out in any order) get their first lease within the
// default MaxBackoff (5 s) of the daemon coming up, however long it was
// down. With 30 s, producers started 12 s before the daemon got their
// first lease 11 s after it came up, unlimited meanwhile while the
// consumer's head age went from 7 to 25 s.
func TestLeaseFirstAfterDaemonStarts(t *testing.T) {
	clk := newFakeClock()
	d := newHostileDaemon(t)
	d.honest(1, 100)
	var down atomic.Bool
	var asked atomic.Int64
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			asked.Add(1)
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		d.serve(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() }) // after the producer's Close: its long-poll would hold Close

	p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), Config{Producer: "svc-a", Topics: []string{"orders"}, Clock: clk,
		Leases: LeaseConfig{URL: srv.URL}})
	// A minute of the daemon down: the backoff reaches its cap.
	for range 60 {
		clk.Advance(time.Second)
		time.Sleep(5 * time.Millisecond)
	}
	// It comes up just after a producer's attempt failed: the next one
	// is a whole backoff away.
	for n := asked.Load(); asked.Load() == n; time.Sleep(2 * time.Millisecond) {
		clk.Advance(100 * time.Millisecond)
	}
	down.Store(false)
	up := clk.Now()
	for {
		if q, _ := p.Quota("orders"); q.FromLease && q.Rate == 100 {
			break
		}
		if waited := clk.Now().Sub(up); waited > time.Minute {
			t.Fatalf("no lease %v after the daemon came up, want within MaxBackoff (5 s)", waited)
		}
		clk.Advance(100 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	waited := clk.Now().Sub(up)
	t.Logf("first lease %v after the daemon came up", waited)
	if waited > 5500*time.Millisecond {
		t.Errorf("first lease %v after the daemon came up, want within MaxBackoff (5 s)", waited)
	}
}
