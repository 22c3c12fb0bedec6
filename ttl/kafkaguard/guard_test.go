package kafkaguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/twmb/franz-go/pkg/kgo", "github.com/lagbridge/lagbridge/ttl",
		"github.com/lagbridge/lagbridge/ttl/internal/guardcore", "github.com/lagbridge/lagbridge/ttl/ttlmetrics")
}

// t0 is the fake clock's start.
var t0 = time.UnixMilli(1_767_225_600_000)

// clock is a fake clock that handlers advance to model slow work.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// r builds a record of topic "t" at offset off with a deadline header at
// deadline (none when zero) and timestamp ts.
func r(off int64, deadline, ts time.Time, extra ...kgo.RecordHeader) *kgo.Record {
	rec := &kgo.Record{Topic: "t", Offset: off, Timestamp: ts, Value: []byte(fmt.Sprint(off))}
	if !deadline.IsZero() {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(deadline))})
	}
	rec.Headers = append(rec.Headers, extra...)
	return rec
}

func offsets(recs []*kgo.Record) []int64 {
	out := make([]int64, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

func TestProcess(t *testing.T) {
	ms := time.Millisecond
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		maxAge  time.Duration
		recs    []*kgo.Record
		work    time.Duration    // each handler call advances the clock by this
		failAt  int64            // handler fails on this offset; -1 never
		wantH   []int64          // offsets handled, in order
		wantEnd int              // len(done)
		want    ttl.Stats        // expected stats (ExpiredBy checked too)
		wantErr func(error) bool // nil: no error
		check   func(*testing.T, []*kgo.Record)
	}{
		{
			// Every record live: all handled, all done.
			name: "all live", recs: []*kgo.Record{r(0, t0.Add(time.Hour), t0), r(1, t0.Add(time.Hour), t0), r(2, time.Time{}, t0)},
			failAt: -1, wantH: []int64{0, 1, 2}, wantEnd: 3,
			want: ttl.Stats{Received: 3, Processed: 3},
		},
		{
			// Expired by deadline and by age are skipped but done (committed
			// past); the rest are handled.
			name: "mixed", maxAge: time.Minute,
			recs: []*kgo.Record{
				r(0, t0.Add(time.Hour), t0),
				r(1, t0.Add(-ms), t0),                           // deadline passed
				r(2, time.Time{}, t0.Add(-30*time.Second)),      // young
				r(3, time.Time{}, t0.Add(-time.Hour)),           // older than maxAge
				r(4, t0.Add(time.Hour), t0.Add(-2*time.Minute)), // header live, age not
			},
			failAt: -1, wantH: []int64{0, 2}, wantEnd: 5,
			want: ttl.Stats{Received: 5, Processed: 2, Expired: 3, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1, ttl.ReasonMaxAge: 2}},
		},
		{
			// A slow handler makes later records expire while they wait:
			// the clock is read per record, not per batch.
			name: "expire behind slow handler", work: 100 * ms,
			recs:   []*kgo.Record{r(0, t0.Add(time.Hour), t0), r(1, t0.Add(150*ms), t0), r(2, t0.Add(150*ms), t0), r(3, t0.Add(time.Hour), t0)},
			failAt: -1, wantH: []int64{0, 1, 3}, wantEnd: 4,
			// r1 is handled from 100ms to 200ms, past its 150ms deadline: late.
			want: ttl.Stats{Received: 4, Processed: 3, Expired: 1, Late: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// A handler error stops the batch: done ends before the failed
			// record, the rest is not even received.
			name: "handler error stops", recs: []*kgo.Record{r(0, time.Time{}, t0), r(1, t0.Add(-ms), t0), r(2, time.Time{}, t0), r(3, time.Time{}, t0)},
			failAt: 2, wantH: []int64{0, 2}, wantEnd: 2,
			want: ttl.Stats{Received: 3, Processed: 1, Failed: 1, Expired: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
			wantErr: func(err error) bool {
				var he *HandlerError
				return errors.As(err, &he) && he.Record.Offset == 2 && errors.Is(err, errBoom)
			},
		},
		{
			// A malformed header is counted and judged as absent: handled.
			name: "malformed header",
			recs: []*kgo.Record{
				r(0, time.Time{}, t0, kgo.RecordHeader{Key: ttl.HeaderDeadline, Value: []byte("tomorrow")}),
				r(1, time.Time{}, t0, kgo.RecordHeader{Key: ttl.HeaderCriticality, Value: []byte("\xff")}),
			},
			failAt: -1, wantH: []int64{0, 1}, wantEnd: 2,
			want: ttl.Stats{Received: 2, Processed: 2, Malformed: 2},
		},
		{
			// The first deadline header wins over a later duplicate.
			name:   "duplicate header first wins",
			recs:   []*kgo.Record{r(0, t0.Add(-ms), t0, kgo.RecordHeader{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(t0.Add(time.Hour)))})},
			failAt: -1, wantH: []int64{}, wantEnd: 1,
			want: ttl.Stats{Received: 1, Expired: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// No records: nothing happens.
			name: "empty", failAt: -1, wantH: []int64{}, wantEnd: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			g, err := New(Config{MaxAge: tc.maxAge, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			handled := []int64{}
			done, err := g.Process(context.Background(), tc.recs, func(ctx context.Context, rec *kgo.Record) error {
				handled = append(handled, rec.Offset)
				clk.Advance(tc.work)
				if rec.Offset == tc.failAt {
					return errBoom
				}
				return nil
			})
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("err = %v", err)
			}
			if fmt.Sprint(handled) != fmt.Sprint(tc.wantH) {
				t.Errorf("handled %v, want %v", handled, tc.wantH)
			}
			if len(done) != tc.wantEnd {
				t.Errorf("done = %v, want the first %d", offsets(done), tc.wantEnd)
			}
			if got := g.Stats(); got != tc.want {
				t.Errorf("stats = %+v\nwant    %+v", got, tc.want)
			}
			if !g.Stats().Balanced() {
				t.Errorf("unbalanced stats %+v", g.Stats())
			}
		})
	}
}

func TestHandlerContextDeadline(t *testing.T) {
	clk := newClock()
	g, err := New(Config{MaxAge: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
		want time.Time // zero: no deadline
	}{
		// The header deadline is tighter than the age bound.
		{"header", r(0, t0.Add(time.Second), t0), t0.Add(time.Second)},
		// The age bound is tighter than the header deadline.
		{"age", r(1, t0.Add(time.Hour), t0.Add(-50*time.Second)), t0.Add(10 * time.Second)},
		// No header and an unknown timestamp: no deadline at all.
		{"none", r(2, time.Time{}, time.Time{}), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := g.Process(context.Background(), []*kgo.Record{tc.rec}, func(ctx context.Context, _ *kgo.Record) error {
				d, ok := ctx.Deadline()
				if ok != !tc.want.IsZero() || ok && !d.Equal(tc.want) {
					t.Errorf("ctx deadline %v (%v), want %v", d, ok, tc.want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	// A caller deadline earlier than the record's is kept (a guard
	// without an age bound: contexts run on the real clock).
	g, err = New(Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	early := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), early)
	defer cancel()
	_, _ = g.Process(ctx, []*kgo.Record{r(3, t0.Add(time.Hour*24*365*100), t0)}, func(ctx context.Context, _ *kgo.Record) error {
		if d, _ := ctx.Deadline(); !d.Equal(early) {
			t.Errorf("caller deadline %v replaced by %v", early, d)
		}
		return nil
	})
}

func TestProcessCanceled(t *testing.T) {
	g, err := New(Config{Now: newClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	recs := []*kgo.Record{r(0, time.Time{}, t0), r(1, time.Time{}, t0), r(2, time.Time{}, t0)}
	done, err := g.Process(ctx, recs, func(context.Context, *kgo.Record) error {
		cancel() // the consumer is shutting down
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(done) != 1 {
		t.Fatalf("done %v err %v, want [0] and context.Canceled", offsets(done), err)
	}
	if s := g.Stats(); s.Received != 1 || !s.Balanced() {
		t.Fatalf("stats %+v: records not judged must not be counted", s)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		n    int // number of problems
	}{
		// The zero value is valid.
		{"zero", Config{}, 0},
		// Negative ages, twice.
		{"negative", Config{MaxAge: -1, TopicMaxAge: map[string]time.Duration{"a": -1}}, 2},
		// A dead letter needs a client and a destination: both reported.
		{"dead letter empty", Config{DeadLetter: &DeadLetter{}}, 2},
		// TopicFor alone is a destination.
		{"dead letter topicFor", Config{DeadLetter: &DeadLetter{Client: &kgo.Client{}, TopicFor: func(string) string { return "" }}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			n := 0
			if err != nil {
				n = strings.Count(err.Error(), "invalid config")
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("%v does not wrap ErrInvalidConfig", err)
				}
			}
			if n != tc.n {
				t.Fatalf("got %d problems (%v), want %d", n, err, tc.n)
			}
			if _, nerr := New(tc.cfg); (nerr != nil) != (tc.n > 0) {
				t.Fatalf("New err %v", nerr)
			}
		})
	}
}

// --- kfake: the whole loop against an in-process Kafka ---------------------

func newCluster(tb testing.TB) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders.dlq"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func newClient(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// TestKfakeSlowConsumer: records with short deadlines behind a slow
// consumer (the handler advances the fake clock by 100ms) are skipped,
// forwarded to the dead-letter topic with their reason and origin, and
// committed past; the live ones are handled; count in = processed +
// expired.
func TestKfakeSlowConsumer(t *testing.T) {
	c := newCluster(t)
	prod := newClient(t, c, kgo.DefaultProduceTopic("orders"))
	clk := newClock()
	var recs []*kgo.Record
	for i := range 20 {
		d := t0.Add(time.Hour)
		if i%2 == 1 {
			d = t0.Add(250 * time.Millisecond) // short: dies behind the slow consumer
		}
		recs = append(recs, r(int64(i), d, t0))
	}
	recs = append(recs, r(20, time.Time{}, t0.Add(-2*time.Hour)), r(21, time.Time{}, t0.Add(-2*time.Hour))) // too old
	for _, rec := range recs {
		rec.Topic = "orders"
	}
	if err := prod.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewPedanticRegistry()
	m, err := ttlmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	cons := newClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	g, err := New(Config{MaxAge: time.Hour, Now: clk.Now, Metrics: m, DeadLetter: &DeadLetter{Client: cons, Topic: "orders.dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	var handled []string
	ctx := ctxT(t)
	for seen := 0; seen < len(recs); {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("saw %d of %d records", seen, len(recs))
		}
		batch := fs.Records()
		seen += len(batch)
		done, err := g.Process(ctx, batch, func(ctx context.Context, rec *kgo.Record) error {
			handled = append(handled, string(rec.Value))
			clk.Advance(100 * time.Millisecond)
			return nil
		})
		if err != nil || len(done) != len(batch) {
			t.Fatalf("process: done %d of %d: %v", len(done), len(batch), err)
		}
		if err := cons.CommitRecords(ctx, done...); err != nil {
			t.Fatal(err)
		}
	}
	// Records 0, 1, 2 are handled (1 from 100ms to 200ms, before its 250ms
	// deadline); from record 3 on the short ones are dead.
	wantHandled := []string{"0", "1", "2", "4", "6", "8", "10", "12", "14", "16", "18"}
	if fmt.Sprint(handled) != fmt.Sprint(wantHandled) {
		t.Fatalf("handled %v, want %v", handled, wantHandled)
	}
	s := g.Stats()
	want := ttl.Stats{Received: 22, Processed: 11, Expired: 11, DeadLettered: 11,
		ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 9, ttl.ReasonMaxAge: 2}}
	if s != want || !s.Balanced() {
		t.Fatalf("stats %+v\nwant  %+v", s, want)
	}

	// Everything is committed past.
	adm := kadm.NewClient(newClient(t, c))
	committed, err := adm.FetchOffsets(ctxT(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := committed.Lookup("orders", 0); o.At != 22 {
		t.Fatalf("committed %d, want 22", o.At)
	}

	// The dead-letter topic holds exactly the expired records, with their
	// reason and origin.
	dlq := newClient(t, c, kgo.ConsumeTopics("orders.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]string{}
	for len(got) < 11 {
		fs := dlq.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("dead letters: got %d of 11: %v", len(got), got)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			h := map[string]string{}
			for _, kv := range rec.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h[ttl.HeaderOriginTopic] != "orders" || h[ttl.HeaderOriginPartition] != "0" || h[ttl.HeaderOriginOffset] != string(rec.Value) {
				t.Errorf("dead letter %s has origin %v", rec.Value, h)
			}
			if h[ttl.HeaderExpiredAt] == "" || h[ttl.HeaderOriginTimestamp] == "" {
				t.Errorf("dead letter %s lacks times: %v", rec.Value, h)
			}
			got[string(rec.Value)] = h[ttl.HeaderExpiredReason]
		})
	}
	wantDLQ := map[string]string{"3": "deadline", "5": "deadline", "7": "deadline", "9": "deadline", "11": "deadline",
		"13": "deadline", "15": "deadline", "17": "deadline", "19": "deadline", "20": "max-age", "21": "max-age"}
	if fmt.Sprint(got) != fmt.Sprint(wantDLQ) {
		t.Fatalf("dead letters %v, want %v", got, wantDLQ)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP lagbridge_ttl_expired_total Messages skipped as dead work (acknowledged or committed past without handling), by reason.
# TYPE lagbridge_ttl_expired_total counter
lagbridge_ttl_expired_total{reason="deadline",topic="orders"} 9
lagbridge_ttl_expired_total{reason="max-age",topic="orders"} 2
# HELP lagbridge_ttl_consumed_total Messages received by a consumer-side TTL guard.
# TYPE lagbridge_ttl_consumed_total counter
lagbridge_ttl_consumed_total{topic="orders"} 22
# HELP lagbridge_ttl_late_total Messages handled whose handler returned at or after their deadline (dead work done).
# TYPE lagbridge_ttl_late_total counter
lagbridge_ttl_late_total{topic="orders"} 0
`), "lagbridge_ttl_expired_total", "lagbridge_ttl_consumed_total", "lagbridge_ttl_late_total"); err != nil {
		t.Fatal(err)
	}
}

// TestDeadLetterFailure: when forwarding fails the expired record is not
// done (it will be consumed again) and the error wraps ErrDeadLetter;
// forwarding into the source topic is refused.
func TestDeadLetterFailure(t *testing.T) {
	c := newCluster(t)
	broken, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close() // every produce fails with kgo.ErrClientClosed
	for _, tc := range []struct {
		name string
		dl   *DeadLetter
		want error
	}{
		// The producing client is gone.
		{"client closed", &DeadLetter{Client: broken, Topic: "orders.dlq"}, kgo.ErrClientClosed},
		// A loop back into the source topic.
		{"own topic", &DeadLetter{Client: broken, TopicFor: func(s string) string { return s }}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(Config{Now: newClock().Now, DeadLetter: tc.dl})
			if err != nil {
				t.Fatal(err)
			}
			recs := []*kgo.Record{r(0, time.Time{}, t0), r(1, t0.Add(-time.Second), t0), r(2, time.Time{}, t0)}
			done, err := g.Process(ctxT(t), recs, func(context.Context, *kgo.Record) error { return nil })
			if !errors.Is(err, ErrDeadLetter) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want ErrDeadLetter and %v", err, tc.want)
			}
			if len(done) != 1 {
				t.Fatalf("done %v, want [0]: the unforwarded record must not be committed past", offsets(done))
			}
			if s := g.Stats(); s.DeadLetterFailed != 1 || s.DeadLettered != 0 || !s.Balanced() {
				t.Fatalf("stats %+v", s)
			}
		})
	}
	// A dead letter itself is never forwarded again (no loops): no
	// produce is even attempted on the broken client.
	g0, err := New(Config{Now: newClock().Now, DeadLetter: &DeadLetter{Client: broken, Topic: "orders.dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	dead := r(0, t0.Add(-time.Second), t0, kgo.RecordHeader{Key: ttl.HeaderExpiredReason, Value: []byte("deadline")})
	if done, err := g0.Process(ctxT(t), []*kgo.Record{dead}, nil); err != nil || len(done) != 1 {
		t.Fatalf("re-forward: done %d err %v", len(done), err)
	}
	if s := g0.Stats(); s.Expired != 1 || s.DeadLettered != 0 || s.DeadLetterFailed != 0 {
		t.Fatalf("re-forward stats %+v", s)
	}

	// TopicFor returning "" means: count and skip, no forward, no error.
	g, err := New(Config{Now: newClock().Now, DeadLetter: &DeadLetter{Client: broken, TopicFor: func(string) string { return "" }}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := g.Process(ctxT(t), []*kgo.Record{r(0, t0.Add(-time.Second), t0)}, nil)
	if err != nil || len(done) != 1 {
		t.Fatalf("done %d err %v", len(done), err)
	}
}

// FuzzCheck: any header bytes and timestamp are judged without panicking,
// the header value is never modified, and a malformed deadline is judged
// as absent.
func FuzzCheck(f *testing.F) {
	f.Add([]byte("1:1767225600123"), []byte("CRITICAL"), int64(1767225600000), "lagbridge-deadline")
	f.Add([]byte{0xff, 0}, []byte{}, int64(-1), "lagbridge-criticality")
	f.Add([]byte(""), []byte("x"), int64(0), "other")
	g, err := New(Config{MaxAge: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, d, c []byte, ts int64, extraKey string) {
		orig := string(d)
		rec := &kgo.Record{Topic: "t", Timestamp: time.UnixMilli(ts), Headers: []kgo.RecordHeader{
			{Key: extraKey, Value: c}, {Key: ttl.HeaderDeadline, Value: d}, {Key: ttl.HeaderCriticality, Value: c},
		}}
		v := g.Check(rec, t0)
		if string(d) != orig {
			t.Fatalf("header value modified")
		}
		if v.HeaderErr != nil && !errors.Is(v.HeaderErr, ttl.ErrMalformed) {
			t.Fatalf("HeaderErr %v", v.HeaderErr)
		}
		if live := v.Deadline.IsZero() || t0.Before(v.Deadline); live == v.Expired() {
			t.Fatalf("inconsistent verdict %+v", v)
		}
		if v.HeaderErr != nil && extraKey != ttl.HeaderDeadline && !v.Meta.Deadline.IsZero() {
			if _, err := ttl.ParseDeadline(orig); err != nil {
				t.Fatalf("malformed deadline %q judged as %v", orig, v.Meta.Deadline)
			}
		}
	})
}

// --- rewinding: unfinished records are consumed again ----------------------

// pollLoop is the loop of the package doc and docs/ttl.md: poll, Process,
// commit done, and after an error seek back with RewindOffsets. It polls
// for at most wait and returns the records polled and Process's error.
func pollLoop(t *testing.T, cl *kgo.Client, g *Guard, h Handler, wait time.Duration) ([]*kgo.Record, error) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctxT(t), wait)
	defer cancel()
	fs := cl.PollFetches(pctx)
	defer cl.AllowRebalance()
	recs := fs.Records()
	done, err := g.Process(ctxT(t), recs, h)
	if cerr := cl.CommitRecords(ctxT(t), done...); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		cl.SetOffsets(RewindOffsets(recs, done))
	}
	return recs, err
}

func values(recs []*kgo.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	return out
}

func committedAt(t *testing.T, c *kfake.Cluster, topic string, part int32) int64 {
	t.Helper()
	offs, err := kadm.NewClient(newClient(t, c)).FetchOffsets(ctxT(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := offs.Lookup(topic, part)
	return o.At
}

// TestKfakeRewindRetriesFailedForward pins that a record whose dead-letter
// forward failed is not lost: with the documented loop it is consumed
// again on the next poll, forwarded once the dead-letter topic works, and
// committed past only then; the live records around it, handled while the
// forward was failing, are not handled a second time when the rewind
// delivers them again. Without the rewind franz-go continues after the
// last polled record and the next commit passes the failed record.
func TestKfakeRewindRetriesFailedForward(t *testing.T) {
	// The dead-letter topic does not exist yet: forwards fail (the
	// outage) until it is created.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod := newClient(t, c, kgo.DefaultProduceTopic("orders"))
	dlc := newClient(t, c, kgo.UnknownTopicRetries(0)) // fail a forward at once
	cl := newClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	g, err := New(Config{DeadLetter: &DeadLetter{Client: dlc, Topic: "orders.dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	handled := map[string]int{}
	handle := func(_ context.Context, r *kgo.Record) error { handled[string(r.Value)]++; return nil }

	dead := &kgo.Record{Value: []byte("dead"), Headers: []kgo.RecordHeader{
		{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(time.Now().Add(-time.Minute)))}}}
	if err := prod.ProduceSync(ctxT(t), dead, &kgo.Record{Value: []byte("live-1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// 1: the forward of "dead" fails; "live-1" is handled but cannot be
	// committed before "dead".
	recs, err := pollLoop(t, cl, g, handle, 5*time.Second)
	t.Logf("poll 1: %v: %v", values(recs), err)
	if fmt.Sprint(values(recs)) != "[dead live-1]" || !errors.Is(err, ErrDeadLetter) {
		t.Fatalf("poll 1: %v, err %v; want [dead live-1] and ErrDeadLetter", values(recs), err)
	}
	if at := committedAt(t, c, "orders", 0); at > 0 {
		t.Fatalf("committed %d past the record whose forward failed", at)
	}

	// 2: still failing. "dead" comes back; "live-1" is not handled again,
	// the new "live-2" is.
	if err := prod.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("live-2")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	failedPolls := 1
	var seen []string
	for len(seen) < 3 { // the rewound fetch and live-2 can come in two polls
		failedPolls++
		recs, err = pollLoop(t, cl, g, handle, 5*time.Second)
		t.Logf("poll 2: %v: %v", values(recs), err)
		if len(recs) == 0 || recs[0].Offset != 0 || !errors.Is(err, ErrDeadLetter) {
			t.Fatalf("poll 2: %v, err %v; want the failed record again first and ErrDeadLetter", values(recs), err)
		}
		seen = values(recs)
	}

	// 3: the dead-letter topic exists: "dead" is forwarded, and all three
	// records are committed past.
	if err := c.CreateTopic("orders.dlq", 1, nil); err != nil {
		t.Fatal(err)
	}
	recs, err = pollLoop(t, cl, g, handle, 5*time.Second)
	t.Logf("poll 3: %v: %v", values(recs), err)
	if err != nil || fmt.Sprint(values(recs)) != "[dead live-1 live-2]" {
		t.Fatalf("poll 3: %v, err %v; want [dead live-1 live-2] and no error", values(recs), err)
	}
	if at := committedAt(t, c, "orders", 0); at != 3 {
		t.Fatalf("committed %d, want 3", at)
	}
	// 4: nothing is left to consume.
	if recs, err := pollLoop(t, cl, g, handle, 300*time.Millisecond); len(recs) != 0 || err != nil {
		t.Fatalf("poll 4: %v, err %v; want nothing", values(recs), err)
	}

	if fmt.Sprint(handled) != "map[live-1:1 live-2:1]" {
		t.Fatalf("handled %v: each live record exactly once", handled)
	}
	s := g.Stats()
	// Received counts deliveries: "dead" once per poll, each live record
	// once.
	nDead := uint64(failedPolls + 1)
	want := ttl.Stats{Received: nDead + 2, Processed: 2, Expired: nDead, DeadLettered: 1, DeadLetterFailed: nDead - 1,
		ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: nDead}}
	if s != want || !s.Balanced() {
		t.Fatalf("stats %+v\nwant  %+v", s, want)
	}
	if n := g.nAhead.Load(); n != 0 {
		t.Fatalf("the guard still remembers %d records", n)
	}
	dlq := newClient(t, c, kgo.ConsumeTopics("orders.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for {
		pctx, cancel := context.WithTimeout(ctxT(t), 500*time.Millisecond)
		fs := dlq.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			break
		}
		got = append(got, values(fs.Records())...)
	}
	t.Logf("handled %v; stats %+v; dead letters %v", handled, s, got)
	if fmt.Sprint(got) != "[dead]" {
		t.Fatalf("dead letters %v, want [dead]", got)
	}
}

// TestKfakeRewindRedeliversHandlerError pins that a record whose handler
// failed is consumed again with the documented loop and handled until it
// succeeds, and that the records of the other partition that Process did
// not reach because it stopped are consumed again too; every record
// handled successfully is handled once.
func TestKfakeRewindRedeliversHandlerError(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod := newClient(t, c, kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 3 {
			recs = append(recs, &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	if err := prod.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	calls, ok := map[string]int{}, map[string]int{}
	failOnce := map[string]bool{"p0-1": true, "p1-0": true}
	handle := func(_ context.Context, r *kgo.Record) error {
		v := string(r.Value)
		calls[v]++
		if failOnce[v] {
			failOnce[v] = false
			return errors.New("transient")
		}
		ok[v]++
		return nil
	}
	var handlerErrs int
	for len(ok) < len(recs) {
		polled, err := pollLoop(t, cl, g, handle, 5*time.Second)
		t.Logf("poll: %v: %v", values(polled), err)
		var he *HandlerError
		if errors.As(err, &he) {
			handlerErrs++
		} else if err != nil {
			t.Fatal(err)
		}
		if len(polled) == 0 {
			t.Fatalf("nothing polled; handled %v", ok)
		}
	}
	if polled, err := pollLoop(t, cl, g, handle, 300*time.Millisecond); len(polled) != 0 || err != nil {
		t.Fatalf("extra poll: %v, err %v; want nothing", values(polled), err)
	}
	t.Logf("handler calls %v; handler errors %d; stats %+v", calls, handlerErrs, g.Stats())
	for _, r := range recs {
		v, want := string(r.Value), 1
		if v == "p0-1" || v == "p1-0" {
			want = 2 // failed once, redelivered, succeeded
		}
		if calls[v] != want || ok[v] != 1 {
			t.Errorf("%s: %d handler calls (%d successful), want %d (1)", v, calls[v], ok[v], want)
		}
	}
	if handlerErrs != 2 {
		t.Errorf("%d handler errors, want 2", handlerErrs)
	}
	for p := range int32(2) {
		if at := committedAt(t, c, "orders", p); at != 3 {
			t.Errorf("partition %d committed %d, want 3", p, at)
		}
	}
	if s := g.Stats(); s.Received != 8 || s.Processed != 6 || s.Failed != 2 || !s.Balanced() {
		t.Errorf("stats %+v", s)
	}
}

// TestRewindOffsets pins the rewind point: per partition, the first record
// not in done, with its leader epoch; partitions entirely in done are left
// out, and nothing to rewind is nil.
func TestRewindOffsets(t *testing.T) {
	rec := func(topic string, part int32, off int64) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: part, Offset: off, LeaderEpoch: 7}
	}
	a0, a1, a2 := rec("a", 0, 10), rec("a", 0, 11), rec("a", 0, 12)
	b0, b1 := rec("a", 1, 4), rec("a", 1, 5)
	c0 := rec("c", 0, 0)
	recs := []*kgo.Record{a0, b0, a1, c0, b1, a2}
	for _, tc := range []struct {
		name string
		done []*kgo.Record
		want string
	}{
		{"all done", recs, "map[]"},
		{"a stops at 11, b and c not started", []*kgo.Record{a0}, "map[a:map[0:{7 11} 1:{7 4}] c:map[0:{7 0}]]"},
		{"only c unfinished", []*kgo.Record{a0, b0, a1, b1, a2}, "map[c:map[0:{7 0}]]"},
		{"nothing done", nil, "map[a:map[0:{7 10} 1:{7 4}] c:map[0:{7 0}]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RewindOffsets(recs, tc.done)
			if fmt.Sprint(got) != tc.want {
				t.Fatalf("got %v, want %s", got, tc.want)
			}
			if tc.want == "map[]" && got != nil {
				t.Fatalf("got %#v, want nil", got)
			}
		})
	}
}

// TestProcessRemembersFinishedAfterFailedForward pins done and the guard's
// memory without a broker: a live record handled after a failed forward is
// not in done, is returned in done without a second handler call when it
// is delivered again, and is forgotten when its partition moves past it
// without a rewind (so the memory stays bounded). Another partition is not
// held back by the failure.
func TestProcessRemembersFinishedAfterFailedForward(t *testing.T) {
	broken, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close() // every forward fails
	g, err := New(Config{Now: newClock().Now, DeadLetter: &DeadLetter{Client: broken, Topic: "dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	var handled []string
	handle := func(_ context.Context, rec *kgo.Record) error {
		handled = append(handled, fmt.Sprintf("%d@%d", rec.Partition, rec.Offset))
		return nil
	}
	other := r(0, time.Time{}, t0)
	other.Partition = 1
	recs := []*kgo.Record{r(0, time.Time{}, t0), r(1, t0.Add(-time.Second), t0), other, r(2, time.Time{}, t0)}
	done, err := g.Process(ctxT(t), recs, handle)
	if !errors.Is(err, ErrDeadLetter) || fmt.Sprint(done) != fmt.Sprint([]*kgo.Record{recs[0], other}) {
		t.Fatalf("done %v err %v, want t[0]@0 and t[1]@0", done, err)
	}
	if n := g.nAhead.Load(); n != 1 {
		t.Fatalf("remembers %d records, want 1 (offset 2)", n)
	}
	// Rewound: 1 fails again, 2 is finished already and not handled.
	done, err = g.Process(ctxT(t), recs[3:], handle)
	if err != nil || len(done) != 1 {
		t.Fatalf("redelivered 2 alone: done %v err %v", offsets(done), err)
	}
	if want := "[0@0 1@0 0@2]"; fmt.Sprint(handled) != want {
		t.Fatalf("handled %v, want %s", handled, want)
	}
	// Failing again, then the partition moves on without a rewind: the
	// remembered offset is forgotten.
	if _, err := g.Process(ctxT(t), []*kgo.Record{r(1, t0.Add(-time.Second), t0), r(2, time.Time{}, t0)}, handle); !errors.Is(err, ErrDeadLetter) {
		t.Fatalf("err %v", err)
	}
	if n := g.nAhead.Load(); n != 1 {
		t.Fatalf("remembers %d records, want 1", n)
	}
	if _, err := g.Process(ctxT(t), []*kgo.Record{r(9, time.Time{}, t0)}, handle); err != nil {
		t.Fatal(err)
	}
	if n := g.nAhead.Load(); n != 0 {
		t.Fatalf("remembers %d records after moving past them, want 0", n)
	}
	if s := g.Stats(); !s.Balanced() {
		t.Fatalf("stats %+v", s)
	}
}
