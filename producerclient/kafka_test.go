package producerclient

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/ttl"
)

func newKfake(tb testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func newKgo(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(append(base, opts...), KafkaClientOpts(nil)...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

func newKafkaProducer(tb testing.TB, cl *kgo.Client, cfg Config) *KafkaProducer {
	tb.Helper()
	if cfg.Producer == "" {
		cfg.Producer = "test-producer"
	}
	p, err := NewKafka(cl, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// setLease applies a lease as if the daemon had sent it (JSON and all).
func setLease(tb testing.TB, c *core, l quotaproto.Lease) {
	tb.Helper()
	if l.ExpiresAt.IsZero() {
		l.ExpiresAt = c.clock.Now().Add(time.Hour)
	}
	b, err := json.Marshal(l)
	if err != nil {
		tb.Fatal(err)
	}
	setLeaseJSON(tb, c, b)
}

func setLeaseJSON(tb testing.TB, c *core, raw []byte) {
	tb.Helper()
	d, err := decodeLease(raw)
	if err != nil {
		tb.Fatal(err)
	}
	c.leases.apply(leaseUpdate{leases: []decodedLease{d}})
}

func ptr[T any](v T) *T { return &v }

// consumeAll reads n records of topic from the start.
func consumeAll(tb testing.TB, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxFor(tb, 10*time.Second)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("consumed %d of %d", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestKafkaProduceCarriesDeadlineAndCriticality(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Criticality: SheddablePlus})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dl, _ := ctx.Deadline()
	// Default criticality, deadline from the context.
	if err := p.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	// Per call criticality; an upstream deadline header earlier than the
	// context's is kept (one deadline across hops).
	up := time.Now().Add(2 * time.Second)
	r := &kgo.Record{Topic: "orders", Value: []byte("b"), Headers: []kgo.RecordHeader{
		{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(up))}}}
	if err := p.Produce(ctx, r, WithCriticality(CriticalPlus)); err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, c, "orders", 2)
	for i, want := range []struct {
		deadline time.Time
		crit     string
	}{{dl, "SHEDDABLE_PLUS"}, {up, "CRITICAL_PLUS"}} {
		d, ok := header(got[i], ttl.HeaderDeadline)
		if !ok {
			t.Fatalf("record %d has no deadline header", i)
		}
		pd, err := ttl.ParseDeadline(d)
		if err != nil || pd.UnixMilli() != want.deadline.UnixMilli() {
			t.Fatalf("record %d deadline %q (%v), want %v", i, d, err, want.deadline)
		}
		if cv, _ := header(got[i], ttl.HeaderCriticality); cv != want.crit {
			t.Fatalf("record %d criticality %q, want %q", i, cv, want.crit)
		}
		if n := len(got[i].Headers); n != 2 {
			t.Fatalf("record %d has %d headers, want exactly 2 (no duplicates)", i, n)
		}
	}
}

// TestKafkaSharedHeadersNotWritten: records without headers share one
// read-only header slice; producing such a record again (here with another
// criticality) replaces its slice and leaves the others alone.
func TestKafkaSharedHeadersNotWritten(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Criticality: SheddablePlus})
	ctx := context.Background()
	a, b, d := &kgo.Record{Topic: "orders"}, &kgo.Record{Topic: "orders"}, &kgo.Record{Topic: "orders"}
	for _, r := range []*kgo.Record{a, b, d} {
		if err := p.Produce(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Produce(ctx, a, WithCriticality(Sheddable)); err != nil {
		t.Fatal(err)
	}
	if v, _ := header(a, ttl.HeaderCriticality); v != "SHEDDABLE" {
		t.Fatalf("re-produced record: %q", v)
	}
	// Back to the default: the shared slice goes, no header is written.
	if err := p.Produce(ctx, d, WithCriticality(Critical)); err != nil {
		t.Fatal(err)
	}
	if len(d.Headers) != 0 {
		t.Fatalf("record re-produced as CRITICAL has headers %v", d.Headers)
	}
	if v, _ := header(b, ttl.HeaderCriticality); v != "SHEDDABLE_PLUS" {
		t.Fatalf("another record's shared header changed to %q", v)
	}
	for c, want := range []string{"CRITICAL", "CRITICAL_PLUS", "SHEDDABLE_PLUS", "SHEDDABLE"} {
		if string(critOnly[c][0].Value) != want {
			t.Fatalf("the shared header slice of %s was written", want)
		}
	}
}

// TestKafkaDefaultCriticalityHasNoHeader: CRITICAL, the default, is
// written by leaving lagbridge-criticality out (the ttl format reads a
// missing header as CRITICAL), on the single and the batch call; a
// criticality header the record already has is overwritten instead, so a
// relayed record never keeps a stale one. What the consumer reads back is
// CRITICAL in every case.
func TestKafkaDefaultCriticalityHasNoHeader(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stale := []kgo.RecordHeader{{Key: "trace", Value: []byte("x")}, {Key: ttl.HeaderCriticality, Value: []byte("SHEDDABLE")}}
	cases := []struct {
		name string
		ctx  context.Context
		r    *kgo.Record
		opts []CallOption
		// want is the lagbridge headers the record ends with.
		want []string
	}{
		{"no deadline", context.Background(), &kgo.Record{Topic: "orders"}, nil, nil},
		{"deadline", ctx, &kgo.Record{Topic: "orders"}, nil, []string{ttl.HeaderDeadline}},
		{"own headers", context.Background(), &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("x")}}}, nil, nil},
		{"stale criticality overwritten", context.Background(), &kgo.Record{Topic: "orders", Headers: slices.Clone(stale)},
			[]CallOption{WithCriticality(Critical)}, []string{ttl.HeaderCriticality}},
	}
	lagbridgeKeys := func(r *kgo.Record) []string {
		var ks []string
		for _, h := range r.Headers {
			if strings.HasPrefix(h.Key, "lagbridge-") {
				ks = append(ks, h.Key)
			}
		}
		return ks
	}
	produced := 0
	for _, batch := range []bool{false, true} {
		for _, tc := range cases {
			r := &kgo.Record{Topic: tc.r.Topic, Headers: slices.Clone(tc.r.Headers)}
			var err error
			if batch {
				res := make(chan error, 1)
				p.ProduceBatchAsync(tc.ctx, []*kgo.Record{r}, func(_ *kgo.Record, err error) { res <- err }, tc.opts...)
				err = <-res
			} else {
				err = p.Produce(tc.ctx, r, tc.opts...)
			}
			produced++
			if err != nil {
				t.Fatalf("%s (batch %v): %v", tc.name, batch, err)
			}
			if got := lagbridgeKeys(r); !slices.Equal(got, tc.want) {
				t.Fatalf("%s (batch %v): lagbridge headers %v, want %v", tc.name, batch, got, tc.want)
			}
			if v, ok := header(r, ttl.HeaderCriticality); ok && v != "CRITICAL" {
				t.Fatalf("%s (batch %v): criticality %q", tc.name, batch, v)
			}
		}
	}
	// Read back as the ttl format reads it: every record is CRITICAL.
	for i, r := range consumeAll(t, c, "orders", produced) {
		m, _, _ := readKafkaMeta(r.Headers)
		if m.Criticality != ttl.Critical {
			t.Fatalf("consumed record %d reads as %v", i, m.Criticality)
		}
	}
}

// TestKafkaBlockWaitsForInFlightSlot: in Block mode a full in-flight cap
// makes the call wait until a message completes.
func TestKafkaBlockWaitsForInFlightSlot(t *testing.T) {
	c := newKfake(t, 1, "orders")
	hold := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			<-hold
		}
		return nil, nil, false
	})
	p := newKafkaProducer(t, newKgo(t, c), Config{MaxInFlight: 1})
	first := make(chan error, 1)
	p.ProduceAsync(context.Background(), &kgo.Record{Topic: "orders"}, func(_ *kgo.Record, err error) { first <- err })
	eventually(t, 5*time.Second, "the broker to hold the first request", held.Load)
	second := make(chan error, 1)
	go func() { second <- p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: "orders"}) }()
	eventually(t, 5*time.Second, "the second call to wait for a slot", func() bool { return p.c.topic("orders").inflight.waiters.Load() > 0 })
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("blocked call after a slot freed: %v", err)
	}
}

func TestNewKafkaRefusesStackedRetries(t *testing.T) {
	c := newKfake(t, 1, "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...)) // franz-go's default: retry forever
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = NewKafka(cl, Config{Producer: "p"})
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("NewKafka on a retrying client = %v, want ErrInvalidOption", err)
	}
}

func TestKafkaDropRateLimitedHandsBackRecord(t *testing.T) {
	c := newKfake(t, 1, "orders")
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, c), Config{Clock: clk, Mode: Drop,
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 10, Burst: 2}}})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := p.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte("ok")}); err != nil {
			t.Fatalf("burst record %d: %v", i, err)
		}
	}
	rec := &kgo.Record{Topic: "orders", Value: []byte("over")}
	err := p.Produce(ctx, rec)
	var re *RejectError
	if !errors.Is(err, ErrSlowDown) || !errors.Is(err, ErrRateLimited) || !errors.As(err, &re) {
		t.Fatalf("third record: %v, want ErrSlowDown/ErrRateLimited", err)
	}
	if re.Record != rec || re.RetryAfter != 100*time.Millisecond || re.Attempts != 0 {
		t.Fatalf("reject: record %v retryAfter %v attempts %d", re.Record == rec, re.RetryAfter, re.Attempts)
	}
	// After the hint, a token is there again.
	clk.Advance(re.RetryAfter)
	if err := p.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte("later")}); err != nil {
		t.Fatal(err)
	}
	s := p.Stats().Topics["orders"]
	if s.Admitted != 3 || s.Rejected["rate"] != 1 || s.Acked != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestKafkaBlockWaitsForToken(t *testing.T) {
	c := newKfake(t, 1, "orders")
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, c), Config{Clock: clk,
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 2, Burst: 1}}})
	ctx := context.Background() // no deadline: Block waits up to MaxBlock (1s)
	if err := p.Produce(ctx, &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Produce(ctx, &kgo.Record{Topic: "orders"}) }()
	eventually(t, 5*time.Second, "the producer to wait on the clock", func() bool { return clk.Waiters() > 0 })
	select {
	case err := <-done:
		t.Fatalf("Block returned before a token was due: %v", err)
	default:
	}
	clk.Advance(500 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Block after the token came due: %v", err)
	}
	// A third record would need a token 500ms out; with Drop it fails.
	if err := p.Produce(ctx, &kgo.Record{Topic: "orders"}, WithMode(Drop)); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("Drop override: %v", err)
	}
}

// TestKafkaBlockFailsFastPastDeadline: when the next token comes after the
// context's deadline, Block fails at once instead of waiting in vain.
func TestKafkaBlockFailsFastPastDeadline(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 0.1, Burst: 1}}})
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := p.Produce(short, &kgo.Record{Topic: "orders"})
	var re *RejectError
	if !errors.Is(err, ErrRateLimited) || !errors.As(err, &re) || re.RetryAfter < 9*time.Second {
		t.Fatalf("Block past the deadline: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waited %v in vain", d)
	}
}

func TestKafkaInFlightCap(t *testing.T) {
	c := newKfake(t, 1, "orders")
	hold := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			<-hold // the broker sits on the first produce request
		}
		return nil, nil, false
	})
	p := newKafkaProducer(t, newKgo(t, c), Config{MaxInFlight: 1, Mode: Drop})
	first := make(chan error, 1)
	p.ProduceAsync(context.Background(), &kgo.Record{Topic: "orders"}, func(_ *kgo.Record, err error) { first <- err })
	eventually(t, 5*time.Second, "the broker to hold the first request", held.Load)
	rec := &kgo.Record{Topic: "orders"}
	err := p.Produce(context.Background(), rec)
	var re *RejectError
	if !errors.Is(err, ErrInFlightLimit) || !errors.As(err, &re) || re.Record != rec {
		t.Fatalf("second record with one in flight: %v", err)
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The slot goes back just after the callback ran (so that Flush
	// returns after the callbacks).
	eventually(t, 5*time.Second, "the first record's slot back", func() bool { return p.Stats().Topics["orders"].InFlight == 0 })
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatalf("after the first completed: %v", err)
	}
}

// TestKafkaLeaseRule: the lease's rule name (protocol 1.4) reaches the
// rejections the lease decides and the Quota, for programs to match on; a
// garbled name reaches neither, and a refusal no lease decided has none.
func TestKafkaLeaseRule(t *testing.T) {
	c := newKfake(t, 3, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Mode: Drop})
	// The client loads the topic's metadata with its first record (keys
	// are placed, and refused for their partition, only after that).
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	rejectRule := func(want error) string {
		t.Helper()
		err := p.Produce(context.Background(), &kgo.Record{Topic: "orders", Key: []byte("k")})
		var re *RejectError
		if !errors.Is(err, want) || !errors.As(err, &re) {
			t.Fatalf("produce: %v, want %v", err, want)
		}
		return re.Rule
	}
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: quotaproto.SignalSlowDown, Reason: "drain", Rule: "drain", Version: 1})
	if got := rejectRule(ErrRateLimited); got != "drain" {
		t.Fatalf("rate-limited rejection's rule %q, want drain", got)
	}
	if q, _ := p.Quota("orders"); q.Rule != "drain" {
		t.Fatalf("quota's rule %q, want drain", q.Rule)
	}
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: quotaproto.SignalStop, Rule: "consumer-stopped", Version: 2})
	if got := rejectRule(ErrStop); got != "consumer-stopped" {
		t.Fatalf("stop's rule %q, want consumer-stopped", got)
	}
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{0, 1, 2},
		Rule: "avoid-partitions", Version: 3})
	if got := rejectRule(ErrAvoidPartitions); got != "avoid-partitions" {
		t.Fatalf("a keyed record's refusal for its partition: rule %q, want avoid-partitions", got)
	}
	// The rate's rule from one group, the partitions from another: the
	// rate's rule does not explain the partition's refusal.
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalSlowDown, AvoidPartitions: []int32{0, 1, 2},
		Rule: "saturated", Version: 4})
	if got := rejectRule(ErrAvoidPartitions); got != "" {
		t.Fatalf("a keyed record refused for its partition under a saturated lease: rule %q, want none", got)
	}
	for i, garbled := range []string{"Drain", "drain rule", strings.Repeat("a", 41), "dr\u00e4in"} {
		setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: quotaproto.SignalSlowDown, Rule: garbled, Version: uint64(5 + i)})
		if got := rejectRule(ErrRateLimited); got != "" {
			t.Fatalf("garbled rule %q reached the rejection as %q", garbled, got)
		}
	}
}

func TestKafkaStopSignal(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(100.0), Signal: quotaproto.SignalStop, Reason: "consumer stopped", Version: 3})
	err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	if !errors.Is(err, ErrStop) {
		t.Fatalf("produce under stop: %v", err)
	}
	var re *RejectError
	if !errors.As(err, &re) || re.Reason != "consumer stopped" || re.Attempts != 0 {
		t.Fatalf("reject %+v", re)
	}
	if re.Rule != "" {
		t.Fatalf("a lease without a rule gave the rejection rule %q", re.Rule)
	}
	// An advisory stop is reported, not enforced: every record is a
	// violation, the ones under the lease's rate too (enforced, a stop
	// refuses them whatever the rate; they counted 0 before).
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(100.0), Signal: quotaproto.SignalStop, Advisory: true, Version: 4})
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatalf("advisory stop enforced: %v", err)
	}
	batch := []*kgo.Record{{Topic: "orders"}, {Topic: "orders"}, {Topic: "orders"}}
	if err := p.ProduceBatch(context.Background(), batch).FirstErr(); err != nil {
		t.Fatalf("advisory stop enforced on a batch: %v", err)
	}
	if got := p.Stats().Topics["orders"].AdvisoryViolations; got != 4 {
		t.Fatalf("advisory violations under an advisory stop: %d, want 4 (every record)", got)
	}
}

func TestKafkaExpiredDeadlineHeader(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	r := &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{
		{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(time.Now().Add(-time.Second)))}}}
	if err := p.Produce(context.Background(), r); !errors.Is(err, ErrExpired) || !errors.Is(err, ErrStop) {
		t.Fatalf("dead on arrival: %v", err)
	}
	// A garbled deadline header is no deadline: the record goes, and the
	// garbage is not passed on.
	r = &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{{Key: ttl.HeaderDeadline, Value: []byte("soon")}}}
	if err := p.Produce(context.Background(), r); err != nil {
		t.Fatalf("garbled deadline header: %v", err)
	}
	if _, ok := header(r, ttl.HeaderDeadline); ok {
		t.Fatal("a garbled deadline header was passed on")
	}
}

func TestKafkaAvoidPartitions(t *testing.T) {
	c := newKfake(t, 4, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{0, 2}, Version: 1})
	ctx := ctxFor(t, 10*time.Second)
	counts := map[int32]int{}
	for i := 0; i < 200; i++ {
		r := &kgo.Record{Topic: "orders", Value: []byte("x")}
		if err := p.Produce(ctx, r); err != nil {
			t.Fatal(err)
		}
		counts[r.Partition]++
	}
	if counts[0] != 0 || counts[2] != 0 || counts[1]+counts[3] != 200 {
		t.Fatalf("keyless records by partition: %v, want none on 0 and 2", counts)
	}
	// Keyed records keep their partition: the same key lands where a
	// plain client puts it, or, bound for an avoided partition, is
	// refused for that partition (TestKafkaKeyedAvoidedPartition).
	plain := newKgo(t, c)
	for i := 0; i < 20; i++ {
		key := []byte(fmt.Sprintf("key-%d", i))
		a := &kgo.Record{Topic: "orders", Key: key}
		b := &kgo.Record{Topic: "orders", Key: key}
		if err := plain.ProduceSync(ctx, b).FirstErr(); err != nil {
			t.Fatal(err)
		}
		err := p.Produce(ctx, a)
		var busy *PartitionBusyError
		switch {
		case b.Partition == 0 || b.Partition == 2:
			if !errors.As(err, &busy) || busy.Partition != b.Partition {
				t.Fatalf("key %s bound for avoided partition %d: %v", key, b.Partition, err)
			}
		case err != nil:
			t.Fatal(err)
		case a.Partition != b.Partition:
			t.Fatalf("key %s: partition %d through the SDK, %d without", key, a.Partition, b.Partition)
		}
	}
}

// leaderless makes every Metadata answer of c report the partitions in
// lost of topic as leaderless (LEADER_NOT_AVAILABLE, leader -1); the rest
// is what the cluster really answers.
func leaderless(tb testing.TB, c *kfake.Cluster, topic string, lost ...int32) {
	tb.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	raw, err := req.RequestWith(ctxFor(tb, 10*time.Second), cl)
	if err != nil {
		tb.Fatal(err)
	}
	c.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := *raw
		resp.Version = r.GetVersion()
		resp.Topics = nil
		for _, tp := range raw.Topics {
			tp.Partitions = slices.Clone(tp.Partitions)
			for i := range tp.Partitions {
				if slices.Contains(lost, tp.Partitions[i].Partition) {
					tp.Partitions[i].ErrorCode = kerr.LeaderNotAvailable.Code
					tp.Partitions[i].Leader = -1
				}
			}
			resp.Topics = append(resp.Topics, tp)
		}
		return &resp, nil, true
	})
}

// TestKafkaAvoidPartitionsWithLeaderlessPartition pins that avoided
// partitions get no keyless records while another partition has no
// leader. franz-go then offers the partitioner an index into the
// partitions with a leader ([0 2 3] here), not a partition number; the
// partitioner used to read the index as the number, so avoided partition
// 2 (index 1) kept getting records.
func TestKafkaAvoidPartitionsWithLeaderlessPartition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		avoid []int32
		want  []int32 // the partitions that may get records
	}{
		{"avoid the partition after the leaderless one", []int32{2}, []int32{0, 3}},
		{"avoid the last partition", []int32{3}, []int32{0, 2}},
		{"avoid the leaderless one and another", []int32{1, 0}, []int32{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKfake(t, 4, "orders")
			leaderless(t, c, "orders", 1)
			p := newKafkaProducer(t, newKgo(t, c), Config{})
			ctx := ctxFor(t, 20*time.Second)
			// The client loads the topic's metadata first: the records
			// produced before it are placed before the client stores it,
			// when nothing tells that partition 1 is leaderless (see
			// AvoidPartitioner).
			if err := p.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			setLease(t, p.c, quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: tc.avoid, Version: 1})
			counts := map[int32]int{}
			for i := 0; i < 300; i++ {
				r := &kgo.Record{Topic: "orders", Value: []byte("x")}
				if err := p.Produce(ctx, r); err != nil {
					t.Fatal(err)
				}
				counts[r.Partition]++
			}
			t.Logf("keyless records by partition: %v", counts)
			for part, n := range counts {
				if n > 0 && !slices.Contains(tc.want, part) {
					t.Fatalf("keyless records by partition: %v; partition %d (avoided %v, 1 leaderless) got %d", counts, part, tc.avoid, n)
				}
			}
		})
	}
}

// TestAvoidPartitionerMapping pins how the partitioner reads franz-go's
// index from the client's cached metadata with partition 1 of 4
// leaderless: offered 4 (every partition), the index is the partition;
// offered 3, they are the writable [0 2 3]; offered any other number (a
// rack-aware subset, or a metadata update in between), the list is unknown
// and records keep the base partitioner's choice. Before the client has
// any metadata of the topic, the index is taken as the partition.
func TestAvoidPartitionerMapping(t *testing.T) {
	c := newKfake(t, 4, "orders")
	leaderless(t, c, "orders", 1)
	cl := newKgo(t, c)
	p := newKafkaProducer(t, cl, Config{})
	if err := p.Produce(ctxFor(t, 10*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")}); err != nil {
		t.Fatal(err) // loads the topic's metadata into the client
	}
	at := &avoidTopic{a: p.part, topic: "orders", base: p.part.base.ForTopic("orders")}
	at.avoided() // binds at to the producer
	if parts, ok := at.mapping(4); !ok || parts != nil {
		t.Errorf("offered 4: %v %v, want the identity", parts, ok)
	}
	if parts, ok := at.mapping(3); !ok || !slices.Equal(parts, []int32{0, 2, 3}) {
		t.Errorf("offered 3: %v %v, want [0 2 3]", parts, ok)
	}
	if parts, ok := at.mapping(2); ok {
		t.Errorf("offered 2: %v, want unknown", parts)
	}
	if parts, ok := at.mapping(5); ok {
		t.Errorf("offered 5 (more than the cache knows): %v, want unknown", parts)
	}
	unknown := &avoidTopic{a: p.part, topic: "unloaded", base: p.part.base.ForTopic("unloaded")}
	unknown.b = p.part.b.Load()
	if parts, ok := unknown.mapping(3); !ok || parts != nil {
		t.Errorf("no metadata yet: %v %v, want the identity", parts, ok)
	}
	// A record offered an unknown list keeps the base partitioner's choice
	// even when that index reads as an avoided partition number.
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{1}, Version: 1})
	if got := at.redirect(&kgo.Record{Topic: "orders"}, 1, 2); got != 1 {
		t.Errorf("offered 2, base chose 1: redirected to %d", got)
	}
	// Offered the writable 3, index 1 is partition 2 (not avoided) and
	// stays; index 0 is partition 0 and stays.
	for _, i := range []int{0, 1, 2} {
		if got := at.redirect(&kgo.Record{Topic: "orders"}, i, 3); got != i {
			t.Errorf("offered 3, base chose %d: redirected to %d", i, got)
		}
	}
}

// TestKafkaCanceledContextIsNotABrokerFailure pins that a record failed
// by franz-go because the caller's context ended while franz-go held it
// (the record's own Context, or the call's) is rejected at once as
// canceled, matching the context's error, and is not a broker failure: no
// retry, nothing in the broker error count, the adaptive throttle or the
// retry budget. It used to be classified as a retriable "produce failed",
// retried up to MaxAttempts and counted against the broker, so that a
// caller canceling its requests throttled everyone's healthy records.
func TestKafkaCanceledContextIsNotABrokerFailure(t *testing.T) {
	budgetTokens := Config{Retry: RetryConfig{Budget: RetryBudgetConfig{Kind: BudgetTokens}}}
	check := func(t *testing.T, p *KafkaProducer, err error) {
		t.Helper()
		var re *RejectError
		st := p.Stats().Topics["orders"]
		t.Logf("err=%v stats=%+v", err, st)
		if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Attempts != 1 {
			t.Fatalf("got %v, want a RejectError after 1 attempt matching context.Canceled", err)
		}
		if st.Attempts != 1 || st.Retries != 0 || st.BrokerErrors != 0 || st.Rejected["canceled"] != 1 {
			t.Fatalf("stats %+v: want 1 attempt, no retry, no broker error, 1 rejected as canceled", st)
		}
		// gRPC-style tokens: a failure would take one of the 10.
		if tokens := p.Stats().RetryBudgetTokens; tokens != 10 {
			t.Fatalf("retry budget tokens %v, want all 10", tokens)
		}
		if pr := p.c.topic("orders").throttle.probability(p.c.mono.nanos()); pr != 0 {
			t.Fatalf("throttle probability %v after a canceled record, want 0", pr)
		}
		if req, _ := p.c.topic("orders").throttle.w.sums(p.c.mono.nanos()); req != 0 {
			t.Fatalf("the adaptive throttle counted %d requests, want none", req)
		}
	}

	t.Run("record context", func(t *testing.T) {
		p := newKafkaProducer(t, newKgo(t, newKfake(t, 1, "orders")), budgetTokens)
		rctx, cancel := context.WithCancel(context.Background())
		cancel() // franz-go fails the record before sending it
		r := &kgo.Record{Topic: "orders", Value: []byte("x"), Context: rctx}
		err := p.Produce(ctxFor(t, 10*time.Second), r)
		check(t, p, err)
		if r.Context != rctx {
			t.Fatal("the record's own Context was not restored")
		}
	})

	t.Run("call context", func(t *testing.T) {
		c := newKfake(t, 1, "orders")
		// Hold the client's first metadata request, so that franz-go holds
		// the record (its topic not loaded yet) when the call's context
		// is canceled.
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			once.Do(func() {
				close(entered)
				c.SleepControl(func() { <-release })
			})
			return nil, nil, false
		})
		var releaseOnce sync.Once
		rel := func() { releaseOnce.Do(func() { close(release) }) }
		t.Cleanup(rel)
		p := newKafkaProducer(t, newKgo(t, c), budgetTokens)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		p.ProduceAsync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}, func(_ *kgo.Record, err error) { errc <- err })
		<-entered
		cancel()
		var err error
		select {
		case err = <-errc:
		case <-time.After(10 * time.Second):
			t.Fatal("no callback after the call's context was canceled")
		}
		rel()
		check(t, p, err)
		// Let the held metadata request finish before the cluster closes:
		// kfake's Close does not wait for a slept control to resume, and
		// its goroutine would outlive the test.
		if err := p.Produce(ctxFor(t, 10*time.Second), &kgo.Record{Topic: "orders", Value: []byte("y")}); err != nil {
			t.Fatalf("a record after the release: %v", err)
		}
	})
}

// failProduce makes every produce request fail with code on every
// partition and counts the records the broker was asked to write.
func failProduce(c *kfake.Cluster, code int16, records *atomic.Int64) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return produceFailure(req, code, records), nil, true
	})
}

// produceFailure answers a produce request with code on every partition;
// records, when not nil, counts the records the broker was asked to write.
func produceFailure(req kmsg.Request, code int16, records *atomic.Int64) kmsg.Response {
	pr := req.(*kmsg.ProduceRequest)
	resp := pr.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range pr.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			if records != nil {
				records.Add(int64(countRecords(rp.Records)))
			}
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// countRecords sums NumRecords over the record batches in b.
func countRecords(b []byte) int {
	n := 0
	for len(b) >= 61 {
		length := int(binary.BigEndian.Uint32(b[8:12]))
		n += int(binary.BigEndian.Uint32(b[57:61]))
		if 12+length > len(b) {
			break
		}
		b = b[12+length:]
	}
	return n
}

// TestKafkaRetryStorm: the broker rejects every produce at 1,000 requests
// per second for two seconds. Attempts (records the broker was asked to
// write, counted at the broker) stay within 1.1x the requests: franz-go
// adds no retries of its own, and the SDK's are budgeted.
func TestKafkaRetryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("2s storm")
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		// The retry budget alone (ratio 10%, floor 10/s), throttling off.
		{"ratio budget only", Config{Throttle: ThrottleConfig{Disabled: true}}},
		// gRPC-style tokens alone.
		{"token budget only", Config{Throttle: ThrottleConfig{Disabled: true}, Retry: RetryConfig{Budget: RetryBudgetConfig{Kind: BudgetTokens}}}},
		// The defaults: budget and adaptive throttling.
		{"defaults", Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKfake(t, 3, "orders")
			var atBroker atomic.Int64
			failProduce(c, kerr.NotEnoughReplicas.Code, &atBroker)
			tc.cfg.Retry.Backoff = 20 * time.Millisecond
			p := newKafkaProducer(t, newKgo(t, c), tc.cfg)
			amp := storm(t, func(ctx context.Context, done func(error)) {
				p.ProduceAsync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}, func(_ *kgo.Record, err error) { done(err) })
			})
			s := p.Stats().Topics["orders"]
			sent := float64(atBroker.Load())
			t.Logf("requests %d, attempts at the broker %.0f (SDK: %d attempts, %d retries), amplification %.3f, rejected %v",
				amp.requests, sent, s.Attempts, s.Retries, sent/float64(amp.requests), s.Rejected)
			if sent > 1.1*float64(amp.requests) {
				t.Fatalf("amplification %.3f > 1.1", sent/float64(amp.requests))
			}
			if float64(s.Attempts) > 1.1*float64(amp.requests) {
				t.Fatalf("the SDK made %d attempts for %d requests: over 1.1x", s.Attempts, amp.requests)
			}
			if sent > float64(s.Attempts) {
				t.Fatalf("the broker saw %.0f records, the SDK sent %d: the client retried on its own", sent, s.Attempts)
			}
		})
	}
}

type stormResult struct{ requests int }

// storm offers 1,000 requests per second for two seconds, each with a 2s
// deadline, and waits until every one is handed back: every request must
// end in an error (the broker rejects everything), none may be lost.
func storm(tb testing.TB, send func(ctx context.Context, done func(error))) stormResult {
	tb.Helper()
	const rate, dur = 1000, 2 * time.Second
	var wg sync.WaitGroup
	var okCount atomic.Int64
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	n := 0
	for time.Since(start) < dur {
		<-tick.C
		// Catch up on ticks a busy machine dropped, so that the offered
		// rate is the nominal one.
		due := int(time.Since(start) * rate / time.Second)
		for ; n < due; n++ {
			wg.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			send(ctx, func(err error) {
				cancel()
				if err == nil {
					okCount.Add(1)
				}
				wg.Done()
			})
		}
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		tb.Fatal("not every request was handed back within 30s")
	}
	if okCount.Load() != 0 {
		tb.Fatalf("%d requests succeeded against a broker that rejects everything", okCount.Load())
	}
	return stormResult{requests: n}
}

// TestKafkaStopEndsRetries: a message waits to be retried after a broker
// rejection; the lease turns to stop; the retry ends at once with ErrStop
// and the broker sees no further attempt.
func TestKafkaStopEndsRetries(t *testing.T) {
	c := newKfake(t, 1, "orders")
	var atBroker atomic.Int64
	failProduce(c, kerr.NotEnoughReplicas.Code, &atBroker)
	p := newKafkaProducer(t, newKgo(t, c), Config{Retry: RetryConfig{Backoff: time.Minute, MaxBackoff: time.Minute}})
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- p.Produce(ctxFor(t, 5*time.Minute), &kgo.Record{Topic: "orders"}) }()
	eventually(t, 10*time.Second, "the first attempt to fail", func() bool { return p.Stats().Topics["orders"].Retries == 1 })
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Rate: ptr(0.0), Signal: quotaproto.SignalStop, Reason: "dead on arrival", Version: 9})
	select {
	case err := <-done:
		if !errors.Is(err, ErrStop) || !errors.Is(err, kerr.NotEnoughReplicas) {
			t.Fatalf("retry ended with %v, want ErrStop carrying the broker error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stop signal did not end the retry")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v (the backoff was a minute)", d)
	}
	if n := atBroker.Load(); n != 1 {
		t.Fatalf("the broker saw %d attempts, want 1", n)
	}
}

// TestKafkaGarbledRetryAfterIsNoHint: a slow-down lease whose retryAfterMs
// is garbage applies without a hint, and the retry waits the SDK's own
// backoff: not zero (an immediate retry), not forever.
func TestKafkaGarbledRetryAfterIsNoHint(t *testing.T) {
	c := newKfake(t, 1, "orders")
	var atBroker atomic.Int64
	failProduce(c, kerr.NotEnoughReplicas.Code, &atBroker)
	clk := newFakeClock()
	p := newKafkaProducer(t, newKgo(t, c), Config{Clock: clk, Retry: RetryConfig{Backoff: 400 * time.Millisecond, MaxAttempts: 2},
		Throttle: ThrottleConfig{Disabled: true}})
	setLeaseJSON(t, p.c, []byte(`{"topic":"orders","rate":1000,"burst":100,"signal":"slow-down","retryAfterMs":"soon","version":2,"expiresAt":"2099-01-01T00:00:00Z"}`))
	q, _ := p.Quota("orders")
	if q.Signal != SignalSlowDown || q.RetryAfter != 0 || q.Rate != 1000 {
		t.Fatalf("quota %+v: want slow-down at 1000/s with no hint", q)
	}
	done := make(chan error, 1)
	go func() { done <- p.Produce(context.Background(), &kgo.Record{Topic: "orders"}) }()
	eventually(t, 10*time.Second, "the retry to wait on the clock", func() bool {
		return p.Stats().Topics["orders"].Retries == 1 && clk.Waiters() > 0
	})
	if n := atBroker.Load(); n != 1 {
		t.Fatalf("retried before the backoff: %d attempts", n)
	}
	clk.Advance(199 * time.Millisecond) // below the jittered minimum (half of 400ms)
	if n := atBroker.Load(); n != 1 {
		t.Fatalf("retried after 199ms: %d attempts", n)
	}
	clk.Advance(201 * time.Millisecond)
	if err := <-done; !errors.Is(err, ErrBrokerRejected) {
		t.Fatalf("after max attempts: %v", err)
	}
	if n := atBroker.Load(); n != 2 {
		t.Fatalf("the broker saw %d attempts, want 2", n)
	}
}

func TestKafkaCloseIsIdempotentAndEndsRetries(t *testing.T) {
	c := newKfake(t, 1, "orders")
	var atBroker atomic.Int64
	failProduce(c, kerr.NotEnoughReplicas.Code, &atBroker)
	cl := newKgo(t, c)
	p, err := NewKafka(cl, Config{Producer: "p", Retry: RetryConfig{Backoff: time.Minute, MaxBackoff: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	p.ProduceAsync(context.Background(), &kgo.Record{Topic: "orders"}, func(_ *kgo.Record, err error) { done <- err })
	eventually(t, 10*time.Second, "a retry to be pending", func() bool { return p.Stats().Topics["orders"].Retries == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) || !errors.Is(err, ErrStop) {
		t.Fatalf("pending retry at Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	rec := &kgo.Record{Topic: "orders"}
	var re *RejectError
	if err := p.Produce(context.Background(), rec); !errors.Is(err, ErrClosed) || !errors.As(err, &re) || re.Record != rec {
		t.Fatalf("produce after Close: %v", err)
	}
}

func TestKafkaInvalidCalls(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	if err := p.Produce(context.Background(), nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil record: %v", err)
	}
	if err := p.Produce(context.Background(), &kgo.Record{}); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("no topic: %v", err)
	}
}

func TestKafkaFlush(t *testing.T) {
	c := newKfake(t, 2, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	var acked atomic.Int64
	var firstErr atomic.Pointer[error]
	for i := 0; i < 500; i++ {
		p.ProduceAsync(context.Background(), &kgo.Record{Topic: "orders"}, func(_ *kgo.Record, err error) {
			if err == nil {
				acked.Add(1)
			} else {
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if acked.Load() != 500 {
		t.Fatalf("after Flush %d of 500 acked; first error %v", acked.Load(), *firstErr.Load())
	}
}

// TestKafkaZeroRateRetryAfterIsTheLeases: a slow-down lease at 0 msg/s
// (the daemon's step down: admit nothing until the next observation, hint
// 250 ms) refuses with the lease's hint. A rate of 0 has no next token:
// the time until one was due read 320,255 hours (lagbridge bench
// --hot-partition), a hint that a caller honouring it never retries after.
func TestKafkaZeroRateRetryAfterIsTheLeases(t *testing.T) {
	c := newKfake(t, 1, "orders")
	p := newKafkaProducer(t, newKgo(t, c), Config{Mode: Drop})
	for _, tc := range []struct {
		lease string
		want  time.Duration
	}{
		{`{"topic":"orders","rate":0,"burst":1,"signal":"slow-down","retryAfterMs":250,"version":2,"expiresAt":"2099-01-01T00:00:00Z"}`, 250 * time.Millisecond},
		{`{"topic":"orders","rate":0,"burst":1,"signal":"slow-down","version":3,"expiresAt":"2099-01-01T00:00:00Z"}`, 0},
	} {
		setLeaseJSON(t, p.c, []byte(tc.lease))
		err := p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
		var re *RejectError
		if !errors.Is(err, ErrRateLimited) || !errors.As(err, &re) {
			t.Fatalf("%s: %v, want ErrRateLimited", tc.lease, err)
		}
		if re.RetryAfter != tc.want {
			t.Errorf("%s: retry after %v, want %v", tc.lease, re.RetryAfter, tc.want)
		}
	}
}

// TestKafkaAttemptsExhaustedMessage pins the message of a record whose
// retries ran out: it says the count once. It read "...; gave up after 3
// attempts; after 3 attempt(s): ..." (a new user's pass on real Kafka,
// producing to a topic that did not exist, session 29).
func TestKafkaAttemptsExhaustedMessage(t *testing.T) {
	c := newKfake(t, 1, "orders")
	var atBroker atomic.Int64
	failProduce(c, kerr.NotEnoughReplicas.Code, &atBroker)
	p := newKafkaProducer(t, newKgo(t, c), Config{Throttle: ThrottleConfig{Disabled: true},
		Retry: RetryConfig{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	err := p.Produce(ctxFor(t, 30*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")})
	var re *RejectError
	if !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("got %v, want a RejectError after 3 attempts carrying the broker's error", err)
	}
	msg := err.Error()
	if n := strings.Count(msg, "attempt"); n != 1 || !strings.Contains(msg, "Retry.MaxAttempts reached; after 3 attempt(s)") {
		t.Fatalf("message %q: want the attempts counted once, after the reason that they ran out", msg)
	}
}
