package enforce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/ttl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// --- Kafka (kfake) ----------------------------------------------------------

func newCluster(tb testing.TB) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"),
		kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func newClient(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// seed writes, relative to now: partition 0 gets 10 records two hours old
// then 5 ten seconds old; partition 1 gets 5 ten seconds old.
func seed(tb testing.TB, cl *kgo.Client, now time.Time) {
	tb.Helper()
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint("old", i)), Timestamp: now.Add(-2 * time.Hour)})
	}
	for i := range 5 {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint("new", i)), Timestamp: now.Add(-10 * time.Second)},
			&kgo.Record{Topic: "t", Partition: 1, Value: []byte(fmt.Sprint("new", i)), Timestamp: now.Add(-10 * time.Second)})
	}
	if err := cl.ProduceSync(ctxT(tb), recs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
}

func commit(tb testing.TB, adm *kadm.Client, group string, at map[int32]int64) {
	tb.Helper()
	os := make(kadm.Offsets)
	for p, o := range at {
		os.Add(kadm.Offset{Topic: "t", Partition: p, At: o, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(ctxT(tb), group, os); err != nil {
		tb.Fatal(err)
	}
}

func committed(tb testing.TB, adm *kadm.Client, group string) map[int32]int64 {
	tb.Helper()
	resp, err := adm.FetchOffsets(ctxT(tb), group)
	out := map[int32]int64{}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out
	}
	if err != nil {
		tb.Fatal(err)
	}
	for p, r := range resp["t"] {
		out[p] = r.At
	}
	return out
}

func TestKafkaMoverEmptyGroup(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	now := time.Now()
	seed(t, cl, now)
	commit(t, adm, "g", map[int32]int64{0: 2, 1: 0})

	reg := prometheus.NewPedanticRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m := NewKafkaMover(cl, KafkaMoverConfig{Cluster: "k", Metrics: metrics})

	// Dry run: reports the move, changes nothing.
	mv, err := m.Enforce(ctxT(t), "g", "t", time.Minute, 30*time.Minute, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if mv.Applied || !mv.DryRun || mv.Skipped != 8 || len(mv.Partitions) != 2 {
		t.Fatalf("dry run: %+v", mv)
	}
	p0, p1 := mv.Partitions[0], mv.Partitions[1]
	if !p0.Move || p0.Committed != 2 || p0.Target != 10 || p0.Skipped != 8 || p0.HardOffset != 10 || p0.End != 15 {
		t.Fatalf("partition 0: %+v", p0)
	}
	if p1.Move || p1.Committed != 0 || p1.Skipped != 0 {
		t.Fatalf("partition 1 (head 10s old, within the hard age) must not move: %+v", p1)
	}
	if got := committed(t, adm, "g"); got[0] != 2 || got[1] != 0 {
		t.Fatalf("dry run changed offsets: %v", got)
	}

	// Apply.
	mv, err = m.Enforce(ctxT(t), "g", "t", time.Minute, 30*time.Minute, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if !mv.Applied || mv.Skipped != 8 || mv.Members != 0 {
		t.Fatalf("apply: %+v", mv)
	}
	if got := committed(t, adm, "g"); got[0] != 10 || got[1] != 0 {
		t.Fatalf("after the move: %v, want p0=10 p1=0", got)
	}

	// Again: nothing left to do.
	mv, err = m.Enforce(ctxT(t), "g", "t", time.Minute, 30*time.Minute, false, now)
	if err != nil || mv.Applied || mv.Skipped != 0 {
		t.Fatalf("second run: %+v %v", mv, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP lagbridge_ttl_skipped_records_total Records (offsets) an empty consumer group's committed offsets were moved past because they were older than the hard age.
# TYPE lagbridge_ttl_skipped_records_total counter
lagbridge_ttl_skipped_records_total{cluster="k",group="g",topic="t"} 8
# HELP lagbridge_ttl_offset_moves_total Offset moves past dead records, by outcome (applied, dry-run, refused because the group has members).
# TYPE lagbridge_ttl_offset_moves_total counter
lagbridge_ttl_offset_moves_total{cluster="k",group="g",outcome="applied",topic="t"} 1
lagbridge_ttl_offset_moves_total{cluster="k",group="g",outcome="dry-run",topic="t"} 1
`), "lagbridge_ttl_skipped_records_total", "lagbridge_ttl_offset_moves_total"); err != nil {
		t.Fatal(err)
	}
}

func TestKafkaMoverEdges(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	now := time.Now()
	seed(t, cl, now)
	m := NewKafkaMover(cl, KafkaMoverConfig{})
	for _, tc := range []struct {
		name    string
		commits map[int32]int64
		maxAge  time.Duration
		hardAge time.Duration
		want    map[int32]int64 // committed after a real run
		skipped int64
		wantErr error
	}{
		// hardAge 0 means maxAge: the 2h-old head is past it, move to the
		// first record younger than 1m.
		{"hard defaults to max", map[int32]int64{0: 0}, time.Minute, 0, map[int32]int64{0: 10}, 10, nil},
		// Everything is older than maxAge (1s): move to the end.
		{"all dead", map[int32]int64{0: 0, 1: 0}, time.Second, time.Second, map[int32]int64{0: 15, 1: 5}, 20, nil},
		// Head within the hard age (3h): no move.
		{"within hard age", map[int32]int64{0: 0}, time.Minute, 3 * time.Hour, map[int32]int64{0: 0}, 0, nil},
		// Caught up: nothing unconsumed.
		{"caught up", map[int32]int64{0: 15}, time.Second, time.Second, map[int32]int64{0: 15}, 0, nil},
		// Offsets only move forward: already past the target.
		{"past target", map[int32]int64{0: 12}, time.Minute, time.Minute, map[int32]int64{0: 12}, 0, nil},
		// No committed offset: nothing to move, no error.
		{"no commits", nil, time.Minute, time.Minute, map[int32]int64{}, 0, nil},
		// Invalid arguments are refused before any request.
		{"hard below max", nil, time.Minute, time.Second, nil, 0, ErrInvalidArgument},
		{"zero maxAge", nil, 0, 0, nil, 0, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := "g-" + strings.ReplaceAll(tc.name, " ", "-")
			if tc.commits != nil {
				commit(t, adm, group, tc.commits)
			}
			mv, err := m.Enforce(ctxT(t), group, "t", tc.maxAge, tc.hardAge, false, now)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if mv.Skipped != tc.skipped || mv.Applied != (tc.skipped > 0) {
				t.Fatalf("move %+v, want skipped %d", mv, tc.skipped)
			}
			if got := committed(t, adm, group); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("committed %v, want %v", got, tc.want)
			}
		})
	}
	// Empty names are invalid too.
	if _, err := m.Enforce(ctxT(t), "", "", time.Minute, 0, true, now); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty names: %v", err)
	}
}

// TestKafkaMoverActiveGroup: a group with a live member (classic and
// KIP-848) is refused in dry run and for real, nothing changes, and the
// broker itself rejects an outside commit with an error that maps to
// ErrGroupActive.
func TestKafkaMoverActiveGroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		// Classic protocol (client-side assignment).
		{"classic", nil},
		// KIP-848 consumer protocol (server-side assignment).
		{"kip848", []kgo.Opt{kgo.ServerSideBalancer()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			cl := newClient(t, c)
			adm := kadm.NewClient(cl)
			now := time.Now()
			seed(t, cl, now)
			group := "active-" + tc.name
			commit(t, adm, group, map[int32]int64{0: 0, 1: 0})

			// A member that joins and then sits idle (it never polls, so
			// it does not consume or commit).
			member := newClient(t, c, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics("t"),
				kgo.DisableAutoCommit(), kgo.SessionTimeout(6 * time.Second)}, tc.opts...)...)
			waitMembers(t, cl, group, func(n int) bool { return n > 0 })

			reg := prometheus.NewPedanticRegistry()
			metrics, _ := NewMetrics(reg)
			m := NewKafkaMover(cl, KafkaMoverConfig{Cluster: "k", Metrics: metrics})
			for _, dry := range []bool{true, false} {
				mv, err := m.Enforce(ctxT(t), group, "t", time.Minute, time.Minute, dry, now)
				if !errors.Is(err, ErrGroupActive) || mv.Members == 0 || mv.Applied {
					t.Fatalf("dry=%v: %+v %v, want ErrGroupActive", dry, mv, err)
				}
			}
			if got := committed(t, adm, group); got[0] != 0 || got[1] != 0 {
				t.Fatalf("offsets of an active group changed: %v", got)
			}
			if v := testutil.ToFloat64(metrics.moves.WithLabelValues("k", "t", group, OutcomeRefused)); v != 2 {
				t.Fatalf("refused count %v, want 2", v)
			}

			// The broker's own check, which covers a member joining between
			// our check and the commit.
			resp, err := adm.CommitOffsets(ctxT(t), group, kadm.OffsetsFromRecords(kgo.Record{Topic: "t", Partition: 0, Offset: 9}))
			if err == nil {
				err = resp.Error()
			}
			if !isMemberErr(err) {
				t.Fatalf("outside commit to an active group: %v, want a member error", err)
			}
			_ = member
		})
	}
}

func waitMembers(tb testing.TB, cl *kgo.Client, group string, ok func(int) bool) {
	tb.Helper()
	m := NewKafkaMover(cl, KafkaMoverConfig{})
	deadline := time.Now().Add(20 * time.Second)
	for {
		mv := Move{Group: group}
		err := m.checkEmpty(ctxT(tb), &mv)
		if ok(mv.Members) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("group %s: members %d state %s err %v", group, mv.Members, mv.State, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the broker, not waiting for a result
	}
}

// --- NATS (embedded nats-server) -------------------------------------------

func TestStreamEnforcer(t *testing.T) {
	js := embedded.JetStreamTest(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Description: "keep me"}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	metrics, _ := NewMetrics(reg)
	e := NewStreamEnforcer(js, StreamEnforcerConfig{Cluster: "n", Metrics: metrics})
	spec := StreamSpec{Stream: "S", MaxAge: DesiredMaxAge(time.Minute, time.Hour), AllowMsgTTL: true}

	// Dry run: both differences reported, nothing changed.
	d, err := e.Enforce(ctx, spec, true)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Drifted() || d.Applied || len(d.Changes) != 2 || d.HaveMaxAge != 0 || d.WantMaxAge != time.Hour {
		t.Fatalf("dry run: %+v", d)
	}
	if v := testutil.ToFloat64(metrics.drift.WithLabelValues("n", "S")); v != 1 {
		t.Fatalf("drift gauge %v after a dry run", v)
	}
	info := streamInfo(t, js, "S")
	if info.Config.MaxAge != 0 || info.Config.AllowMsgTTL {
		t.Fatalf("dry run changed the stream: %+v", info.Config)
	}

	// Apply: updated, the rest of the config kept.
	d, err = e.Enforce(ctx, spec, false)
	if err != nil || !d.Applied {
		t.Fatalf("apply: %+v %v", d, err)
	}
	info = streamInfo(t, js, "S")
	if info.Config.MaxAge != time.Hour || !info.Config.AllowMsgTTL || info.Config.Description != "keep me" {
		t.Fatalf("after apply: %+v", info.Config)
	}

	// In line now.
	d, err = e.Enforce(ctx, spec, false)
	if err != nil || d.Drifted() || d.Applied {
		t.Fatalf("third check: %+v %v", d, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP lagbridge_ttl_stream_drift 1 when the last check found the stream's MaxAge or AllowMsgTTL out of line with its policy, else 0.
# TYPE lagbridge_ttl_stream_drift gauge
lagbridge_ttl_stream_drift{cluster="n",stream="S"} 0
# HELP lagbridge_ttl_stream_updates_total Stream configurations updated to match their policy.
# TYPE lagbridge_ttl_stream_updates_total counter
lagbridge_ttl_stream_updates_total{cluster="n",stream="S"} 1
`), "lagbridge_ttl_stream_drift", "lagbridge_ttl_stream_updates_total"); err != nil {
		t.Fatal(err)
	}

	// A wanted AllowMsgTTL of false is "don't care"; MaxAge 0 likewise.
	d, err = e.Enforce(ctx, StreamSpec{Stream: "S"}, false)
	if err != nil || d.Drifted() {
		t.Fatalf("empty spec: %+v %v", d, err)
	}
	// Errors.
	if _, err := e.Enforce(ctx, StreamSpec{Stream: "NOPE", MaxAge: time.Minute}, true); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("missing stream: %v", err)
	}
	if _, err := e.Enforce(ctx, StreamSpec{}, true); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty spec name: %v", err)
	}
}

func streamInfo(tb testing.TB, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	tb.Helper()
	s, err := js.Stream(ctxT(tb), name)
	if err != nil {
		tb.Fatal(err)
	}
	return s.CachedInfo()
}

// TestPerMessageTTL: once the enforcer allowed per-message TTL on a
// stream, a message published with the Nats-TTL header the producer SDK
// writes (ttl.NATSTTL) is removed by the server itself when it expires,
// while a message without one stays. Before, the server refuses Nats-TTL.
func TestPerMessageTTL(t *testing.T) {
	js := embedded.JetStreamTest(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	withTTL := func(data string) *nats.Msg {
		m := nats.NewMsg("t")
		m.Data = []byte(data)
		deadline := time.Now().Add(500 * time.Millisecond)
		m.Header.Set(ttl.HeaderDeadline, ttl.FormatDeadline(deadline))
		m.Header.Set(jetstream.MsgTTLHeader, ttl.NATSTTL(time.Until(deadline))) // "1": the shortest the server takes
		return m
	}
	if _, err := js.PublishMsg(ctx, withTTL("refused")); err == nil {
		t.Fatal("the server accepted Nats-TTL on a stream that does not allow it")
	}

	if _, err := NewStreamEnforcer(js, StreamEnforcerConfig{}).Enforce(ctx, StreamSpec{Stream: "T", AllowMsgTTL: true}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t", []byte("keep")); err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, withTTL("expire"))
	if err != nil {
		t.Fatal(err)
	}
	if n := streamInfo(t, js, "T").State.Msgs; n != 2 {
		t.Fatalf("stream holds %d messages right after publishing, want 2", n)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := streamInfo(t, js, "T").State
		if st.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the TTL'd message was never removed: %+v", st)
		}
		time.Sleep(50 * time.Millisecond) // polling the server, not waiting for a result
	}
	s, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMsg(ctx, ack.Sequence); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("expired message still readable: %v", err)
	}
	if m, err := s.GetMsg(ctx, 1); err != nil || string(m.Data) != "keep" {
		t.Fatalf("message without TTL: %v %v", m, err)
	}
}

func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/twmb/franz-go/pkg/kgo", "github.com/twmb/franz-go/pkg/kadm",
		"github.com/twmb/franz-go/pkg/kerr", "github.com/nats-io/nats.go/jetstream",
		"github.com/prometheus/client_golang/prometheus",
		"github.com/lagbridge/lagbridge/lag", "github.com/lagbridge/lagbridge/quota")
}

func TestDesiredMaxAge(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxAge, hardAge time.Duration
		want            time.Duration
	}{
		// The hard age, when set, is what the stream may keep.
		{"hard", time.Minute, time.Hour, time.Hour},
		// Without a hard age, maxAge.
		{"no hard", time.Minute, 0, time.Minute},
	} {
		if got := DesiredMaxAge(tc.maxAge, tc.hardAge); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
