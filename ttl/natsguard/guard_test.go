package natsguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/nats-io/nats.go", "github.com/nats-io/nats.go/jetstream",
		"github.com/lagbridge/lagbridge/ttl", "github.com/lagbridge/lagbridge/ttl/internal/guardcore",
		"github.com/lagbridge/lagbridge/ttl/ttlmetrics")
}

var t0 = time.UnixMilli(1_767_225_600_000)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

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

// fakeMsg is a jetstream.Msg that records how it was acknowledged.
type fakeMsg struct {
	subject string
	data    []byte
	hdr     nats.Header
	meta    *jetstream.MsgMetadata // nil: not a JetStream message
	ackErr  error

	mu   sync.Mutex
	acks []string
}

func msg(seq uint64, deadline, ts time.Time, kv ...string) *fakeMsg {
	m := &fakeMsg{subject: "orders.new", data: []byte(fmt.Sprint(seq)), hdr: nats.Header{},
		meta: &jetstream.MsgMetadata{Stream: "ORDERS", Timestamp: ts, Sequence: jetstream.SequencePair{Stream: seq}}}
	if !deadline.IsZero() {
		m.hdr.Set(ttl.HeaderDeadline, ttl.FormatDeadline(deadline))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m.hdr.Set(kv[i], kv[i+1])
	}
	return m
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.meta == nil {
		return nil, jetstream.ErrNotJSMessage
	}
	return m.meta, nil
}
func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Headers() nats.Header { return m.hdr }
func (m *fakeMsg) Subject() string      { return m.subject }
func (m *fakeMsg) Reply() string        { return "" }
func (m *fakeMsg) record(s string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acks = append(m.acks, s)
	return m.ackErr
}
func (m *fakeMsg) Ack() error                         { return m.record("ack") }
func (m *fakeMsg) DoubleAck(context.Context) error    { return m.record("ack") }
func (m *fakeMsg) Nak() error                         { return m.record("nak") }
func (m *fakeMsg) NakWithDelay(d time.Duration) error { return m.record("nak " + d.String()) }
func (m *fakeMsg) InProgress() error                  { return m.record("wip") }
func (m *fakeMsg) Term() error                        { return m.record("term") }
func (m *fakeMsg) TermWithReason(reason string) error { return m.record("term " + reason) }
func (m *fakeMsg) acked() string                      { m.mu.Lock(); defer m.mu.Unlock(); return strings.Join(m.acks, ",") }

// publisher is a fake Publisher.
type publisher struct {
	mu   sync.Mutex
	msgs []*nats.Msg
	err  error
}

func (p *publisher) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	p.msgs = append(p.msgs, m)
	return &jetstream.PubAck{}, nil
}

func TestHandle(t *testing.T) {
	errBoom := errors.New("boom")
	errDown := errors.New("dlq down")
	for _, tc := range []struct {
		name    string
		cfg     Config
		msg     *fakeMsg
		fail    bool    // handler fails
		pubErr  error   // dead-letter publisher error
		handled bool    // handler called
		acks    string  // how the message was acknowledged by the guard
		wantErr []error // errors.Is targets
		want    ttl.Stats
	}{
		{
			// Live: handled; the handler owns the ack by default.
			name: "live", msg: msg(1, t0.Add(time.Hour), t0), handled: true, acks: "",
			want: ttl.Stats{Received: 1, Processed: 1},
		},
		{
			// Live with AutoAck: acked after success.
			name: "live autoack", cfg: Config{AutoAck: true}, msg: msg(1, t0.Add(time.Hour), t0), handled: true, acks: "ack",
			want: ttl.Stats{Received: 1, Processed: 1},
		},
		{
			// Handler error with AutoAck: nak for redelivery, error returned.
			name: "handler error autoack", cfg: Config{AutoAck: true}, msg: msg(1, time.Time{}, t0), fail: true, handled: true,
			acks: "nak", wantErr: []error{errBoom}, want: ttl.Stats{Received: 1, Failed: 1},
		},
		{
			// Expired by deadline: terminated with the reason, not handled.
			name: "expired deadline", msg: msg(1, t0.Add(-time.Millisecond), t0), acks: "term lagbridge-ttl: expired (deadline)",
			want: ttl.Stats{Received: 1, Expired: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// Expired by age, acknowledged with Ack when asked to.
			name: "expired max-age ack", cfg: Config{MaxAge: time.Second, AckExpired: true}, msg: msg(1, time.Time{}, t0.Add(-time.Minute)), acks: "ack",
			want: ttl.Stats{Received: 1, Expired: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonMaxAge: 1}},
		},
		{
			// Forwarded to the dead letter, then terminated.
			name: "dead letter", cfg: Config{DeadLetter: &DeadLetter{Subject: "dlq.orders"}}, msg: msg(7, t0.Add(-time.Second), t0),
			acks: "term lagbridge-ttl: expired (deadline)",
			want: ttl.Stats{Received: 1, Expired: 1, DeadLettered: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// The forward fails: nak with the retry delay, not terminated.
			name: "dead letter fails", cfg: Config{DeadLetter: &DeadLetter{Subject: "dlq.orders", RetryDelay: 3 * time.Second}},
			msg: msg(7, t0.Add(-time.Second), t0), pubErr: errDown, acks: "nak 3s", wantErr: []error{ErrDeadLetter, errDown},
			want: ttl.Stats{Received: 1, Expired: 1, DeadLetterFailed: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// SubjectFor "" skips the forward.
			name: "dead letter skipped", cfg: Config{DeadLetter: &DeadLetter{SubjectFor: func(string, string) string { return "" }}},
			msg: msg(7, t0.Add(-time.Second), t0), acks: "term lagbridge-ttl: expired (deadline)",
			want: ttl.Stats{Received: 1, Expired: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// A dead letter itself is never forwarded again (no loops).
			name: "no re-forward", cfg: Config{DeadLetter: &DeadLetter{Subject: "dlq.orders"}},
			msg: msg(7, t0.Add(-time.Second), t0, ttl.HeaderExpiredReason, "deadline"), acks: "term lagbridge-ttl: expired (deadline)",
			want: ttl.Stats{Received: 1, Expired: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// The ack of an expired message fails: reported and counted.
			name: "settle fails", msg: func() *fakeMsg { m := msg(1, t0.Add(-time.Second), t0); m.ackErr = nats.ErrConnectionClosed; return m }(),
			acks: "term lagbridge-ttl: expired (deadline)", wantErr: []error{ErrSettle, nats.ErrConnectionClosed},
			want: ttl.Stats{Received: 1, Expired: 1, SettleFailed: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 1}},
		},
		{
			// A malformed header: counted, judged as absent, handled.
			name: "malformed", msg: msg(1, time.Time{}, t0, ttl.HeaderDeadline, "soon"), handled: true,
			want: ttl.Stats{Received: 1, Processed: 1, Malformed: 1},
		},
		{
			// Not a JetStream message (no metadata): no age bound applies.
			name: "no metadata", cfg: Config{MaxAge: time.Nanosecond}, msg: func() *fakeMsg { m := msg(1, time.Time{}, t0); m.meta = nil; return m }(),
			handled: true, want: ttl.Stats{Received: 1, Processed: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: t0}
			cfg := tc.cfg
			cfg.Now = clk.Now
			pub := &publisher{err: tc.pubErr}
			if cfg.DeadLetter != nil {
				dl := *cfg.DeadLetter
				dl.Publisher = pub
				cfg.DeadLetter = &dl
			}
			g, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			handled := false
			err = g.Handle(context.Background(), tc.msg, func(context.Context, jetstream.Msg) error {
				handled = true
				if tc.fail {
					return errBoom
				}
				return nil
			})
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want %v in it", err, want)
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("err = %v", err)
			}
			if handled != tc.handled {
				t.Errorf("handled = %v, want %v", handled, tc.handled)
			}
			if got := tc.msg.acked(); got != tc.acks {
				t.Errorf("acks %q, want %q", got, tc.acks)
			}
			if got := g.Stats(); got != tc.want || !got.Balanced() {
				t.Errorf("stats %+v\nwant  %+v", got, tc.want)
			}
		})
	}
}

func TestDeadLetterCopy(t *testing.T) {
	pub := &publisher{}
	g, err := New(Config{Now: (&clock{t: t0}).Now, DeadLetter: &DeadLetter{Publisher: pub,
		SubjectFor: func(stream, subject string) string { return "dlq." + stream + "." + subject }}})
	if err != nil {
		t.Fatal(err)
	}
	m := msg(42, t0.Add(-time.Second), t0.Add(-time.Minute), "trace", "abc", "Nats-TTL", "5", "Nats-Expected-Stream", "X", "Nats-Msg-Id", "orig")
	if err := g.Handle(context.Background(), m, nil); err != nil {
		t.Fatal(err)
	}
	if len(pub.msgs) != 1 {
		t.Fatalf("published %d", len(pub.msgs))
	}
	out := pub.msgs[0]
	want := map[string]string{
		"trace":                   "abc",
		ttl.HeaderDeadline:        ttl.FormatDeadline(t0.Add(-time.Second)),
		ttl.HeaderExpiredReason:   "deadline",
		ttl.HeaderExpiredAt:       ttl.FormatTime(t0),
		ttl.HeaderOriginStream:    "ORDERS",
		ttl.HeaderOriginSequence:  "42",
		ttl.HeaderOriginSubject:   "orders.new",
		ttl.HeaderOriginTimestamp: ttl.FormatTime(t0.Add(-time.Minute)),
		jetstream.MsgIDHeader:     "lagbridge-ttl.ORDERS.42",
	}
	if out.Subject != "dlq.ORDERS.orders.new" || string(out.Data) != "42" {
		t.Errorf("forward %s %q", out.Subject, out.Data)
	}
	for k, v := range want {
		if got := out.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if len(out.Header) != len(want) {
		t.Errorf("headers %v: server headers must be dropped", out.Header)
	}
}

func TestHandlerContext(t *testing.T) {
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	err = g.Handle(context.Background(), msg(1, d, time.Now()), func(ctx context.Context, _ jetstream.Msg) error {
		if got, ok := ctx.Deadline(); !ok || !got.Equal(d) {
			t.Errorf("ctx deadline %v %v, want %v", got, ok, d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		n    int
	}{
		// The zero value is valid.
		{"zero", Config{}, 0},
		// Everything wrong at once, every problem reported.
		{"all wrong", Config{MaxAge: -1, DeadLetter: &DeadLetter{Timeout: -1, RetryDelay: -1}}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			n := 0
			if err != nil {
				n = strings.Count(err.Error(), "invalid config")
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatal(err)
				}
			}
			if n != tc.n {
				t.Fatalf("%d problems (%v), want %d", n, err, tc.n)
			}
		})
	}
}

// --- embedded nats-server --------------------------------------------------

func startNATS(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	js := embedded.JetStreamTest(tb)
	return js.Conn(), js
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// waitFor polls cond against the real server until it holds or 15s pass.
func waitFor(tb testing.TB, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s never happened; last: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond) // polling the server, not waiting for a result
	}
}

// TestEmbeddedSlowConsumer: messages with short deadlines behind a slow
// consumer (each handled message advances the guard's clock by 100ms) are
// terminated and forwarded to the dead-letter stream with their reason and
// origin; the live ones are handled; count in = processed + expired, and
// the consumer ends with nothing pending.
func TestEmbeddedSlowConsumer(t *testing.T) {
	_, js := startNATS(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clk := &clock{t: start}
	for i := range 20 {
		d := start.Add(time.Hour)
		if i%2 == 1 {
			d = start.Add(250 * time.Millisecond)
		}
		m := nats.NewMsg("orders.new")
		m.Data = []byte(fmt.Sprint(i))
		m.Header.Set(ttl.HeaderDeadline, ttl.FormatDeadline(d))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	metrics, err := ttlmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Now: clk.Now, AutoAck: true, Metrics: metrics,
		DeadLetter: &DeadLetter{Publisher: js, Subject: "dlq.orders"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handled []string
	cc, err := cons.Consume(g.Wrap(ctx, func(ctx context.Context, m jetstream.Msg) error {
		mu.Lock()
		handled = append(handled, string(m.Data()))
		mu.Unlock()
		clk.Advance(100 * time.Millisecond) // the slow consumer
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	waitFor(t, "all 20 judged and the consumer drained", func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		s := g.Stats()
		return s.Received == 20 && info.NumAckPending == 0 && info.NumPending == 0,
			fmt.Sprintf("stats %+v; ack pending %d, pending %d", s, info.NumAckPending, info.NumPending)
	})
	cc.Stop()
	<-cc.Closed()

	mu.Lock()
	got := fmt.Sprint(handled)
	mu.Unlock()
	if want := "[0 1 2 4 6 8 10 12 14 16 18]"; got != want {
		t.Fatalf("handled %s, want %s", got, want)
	}
	s := g.Stats()
	want := ttl.Stats{Received: 20, Processed: 11, Expired: 9, DeadLettered: 9, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonDeadline: 9}}
	if s != want || !s.Balanced() {
		t.Fatalf("stats %+v\nwant  %+v", s, want)
	}

	// The dead-letter stream holds exactly the expired messages.
	dlq, err := js.Stream(ctx, "DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if n := dlq.CachedInfo().State.Msgs; n != 9 {
		t.Fatalf("dead-letter stream has %d messages, want 9", n)
	}
	var dead []string
	for seq := uint64(1); seq <= 9; seq++ {
		m, err := dlq.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(ttl.HeaderExpiredReason) != "deadline" || m.Header.Get(ttl.HeaderOriginStream) != "ORDERS" ||
			m.Header.Get(ttl.HeaderOriginSubject) != "orders.new" {
			t.Errorf("dead letter %d headers %v", seq, m.Header)
		}
		// Stream sequences start at 1, values at 0.
		if m.Header.Get(ttl.HeaderOriginSequence) != fmt.Sprint(mustAtoi(t, string(m.Data))+1) {
			t.Errorf("dead letter %s has origin sequence %s", m.Data, m.Header.Get(ttl.HeaderOriginSequence))
		}
		dead = append(dead, string(m.Data))
	}
	if got, want := fmt.Sprint(dead), "[3 5 7 9 11 13 15 17 19]"; got != want {
		t.Fatalf("dead letters %s, want %s", got, want)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP lagbridge_ttl_deadletter_total Expired messages forwarded to the dead-letter destination, by reason.
# TYPE lagbridge_ttl_deadletter_total counter
lagbridge_ttl_deadletter_total{reason="deadline",topic="ORDERS"} 9
lagbridge_ttl_deadletter_total{reason="max-age",topic="ORDERS"} 0
# HELP lagbridge_ttl_expired_total Messages skipped as dead work (acknowledged or committed past without handling), by reason.
# TYPE lagbridge_ttl_expired_total counter
lagbridge_ttl_expired_total{reason="deadline",topic="ORDERS"} 9
lagbridge_ttl_expired_total{reason="max-age",topic="ORDERS"} 0
`), "lagbridge_ttl_deadletter_total", "lagbridge_ttl_expired_total"); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedMaxAge: with the guard's clock an hour ahead every stored
// message is older than maxAge: all are terminated, none handled, and the
// consumer is left with nothing pending (Term counts as an ack).
func TestEmbeddedMaxAge(t *testing.T) {
	_, js := startNATS(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := js.Publish(ctx, "s", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{MaxAge: time.Minute, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(5, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := g.Handle(ctx, m, func(context.Context, jetstream.Msg) error {
			t.Error("an expired message reached the handler")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if s := g.Stats(); s.Expired != 5 || s.ExpiredBy[ttl.ReasonMaxAge] != 5 || !s.Balanced() {
		t.Fatalf("stats %+v", s)
	}
	waitFor(t, "the consumer's ack floor to reach 5", func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.AckFloor.Stream == 5 && info.NumAckPending == 0, fmt.Sprintf("%+v", info.AckFloor)
	})
}

func mustAtoi(tb testing.TB, s string) int {
	tb.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestEmbeddedDeadLetterOutage: a dead-letter subject no stream captures
// fails every forward; each expired message is nak'd and delivered again
// (nothing lost), and each destination's outage is warned of once, not
// once per message, with an info line when its forwards succeed again.
// A message not forwarded (SubjectFor says "") ends no outage. Before,
// every failed forward logged a warning.
func TestEmbeddedDeadLetterOutage(t *testing.T) {
	_, js := startNATS(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"s.a", "s.b", "s.none", "s.a", "s.b", "s.none"} {
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	subjectFor := func(_, subject string) string {
		if subject == "s.none" {
			return ""
		}
		return "dlq." + strings.TrimPrefix(subject, "s.")
	}
	g, err := New(Config{MaxAge: time.Minute, Now: func() time.Time { return time.Now().Add(time.Hour) }, Logger: log,
		DeadLetter: &DeadLetter{Publisher: js, SubjectFor: subjectFor, Timeout: time.Second, RetryDelay: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	handle := func(n int) {
		t.Helper()
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			_ = g.Handle(ctx, m, func(context.Context, jetstream.Msg) error { return nil })
		}
		if got != n {
			t.Fatalf("fetched %d of %d", got, n)
		}
	}
	count := func(what string) int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logged.String(), what)
	}
	handle(6) // dlq.a and dlq.b fail, s.none is termed without a forward
	handle(4) // a and b delivered again, failing again
	if w := count("level=WARN"); w != 2 {
		t.Errorf("%d warnings for two destinations' outages over 8 failed forwards, want 2:\n%s", w, logged.String())
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQA", Subjects: []string{"dlq.a"}}); err != nil {
		t.Fatal(err)
	}
	handle(4) // a succeeds, b fails again
	if c, w := count("succeed again"), count("level=WARN"); c != 1 || w != 2 || !strings.Contains(logged.String(), "subject=dlq.a") {
		t.Errorf("after dlq.a came back: %d recoveries (want 1, dlq.a), %d warnings (want 2):\n%s", c, w, logged.String())
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQB", Subjects: []string{"dlq.b"}}); err != nil {
		t.Fatal(err)
	}
	handle(2)
	if s := g.Stats(); s.DeadLettered != 4 || s.DeadLetterFailed != 10 {
		t.Fatalf("stats %+v: want 10 failed forwards, then all 4 forwarded", s)
	}
	if c, w := count("succeed again"), count("level=WARN"); c != 2 || w != 2 {
		t.Errorf("%d recoveries (want 2), %d warnings (want 2):\n%s", c, w, logged.String())
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
