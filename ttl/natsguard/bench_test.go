package natsguard

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

var sink int

func handler(_ context.Context, m jetstream.Msg) error {
	sink += len(m.Data())
	return nil
}

// realMsg returns a real JetStream message (fetched, never acknowledged)
// from an embedded server, so that Metadata parses a real reply subject.
func realMsg(b *testing.B, withDeadline bool) jetstream.Msg {
	b.Helper()
	_, js := startNATS(b)
	ctx := ctxT(b)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b"}}); err != nil {
		b.Fatal(err)
	}
	m := nats.NewMsg("b")
	m.Data = []byte("payload")
	m.Header.Set("trace-id", "abc")
	if withDeadline {
		m.Header.Set(ttl.HeaderDeadline, ttl.FormatDeadline(time.Now().Add(time.Hour)))
		m.Header.Set(ttl.HeaderCriticality, "CRITICAL")
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		b.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "B", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}
	got, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return got
}

// BenchmarkPerMessage: the handler called directly vs through the guard,
// on a real fetched message (ns/op and allocs/op are per message).
func BenchmarkPerMessage(b *testing.B) {
	m, err := ttlmetrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name         string
		cfg          Config
		withDeadline bool
	}{
		// No lagbridge headers and no age bound.
		{"no-deadline", Config{}, false},
		// A deadline header: the handler runs under context.WithDeadline.
		{"header-deadline", Config{}, true},
		// Headers, age bound and metrics.
		{"full+metrics", Config{MaxAge: time.Hour, Metrics: m}, true},
	} {
		msg := realMsg(b, bc.withDeadline)
		b.Run("direct/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := handler(ctx, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("guard/"+bc.name, func(b *testing.B) {
			g, err := New(bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := g.Handle(ctx, msg, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheck is the judging alone, including Metadata's reply-subject
// parse.
func BenchmarkCheck(b *testing.B) {
	msg := realMsg(b, true)
	g, _ := New(Config{MaxAge: time.Hour})
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = g.Check(msg, now)
	}
}
