package ttlmetrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/ttl"
)

func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/prometheus/client_golang/prometheus", "github.com/lagbridge/lagbridge/ttl")
}

func TestExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	tp := m.Topic("orders")
	if m.Topic("orders") != tp {
		t.Fatal("Topic is not cached")
	}
	tp.Consumed()
	tp.Consumed()
	tp.Consumed()
	tp.Expired(ttl.ReasonDeadline)
	tp.Expired(ttl.Live)       // ignored
	tp.Expired(ttl.Reason(42)) // ignored
	tp.Late()
	tp.HandlerError()
	tp.Malformed()
	tp.DeadLettered(ttl.ReasonDeadline)
	tp.DeadLetterFailed()
	tp.SettleFailed()

	want := `
# HELP lagbridge_ttl_consumed_total Messages received by a consumer-side TTL guard.
# TYPE lagbridge_ttl_consumed_total counter
lagbridge_ttl_consumed_total{topic="orders"} 3
# HELP lagbridge_ttl_deadletter_errors_total Dead-letter forwards that failed; the message is delivered again.
# TYPE lagbridge_ttl_deadletter_errors_total counter
lagbridge_ttl_deadletter_errors_total{topic="orders"} 1
# HELP lagbridge_ttl_deadletter_total Expired messages forwarded to the dead-letter destination, by reason.
# TYPE lagbridge_ttl_deadletter_total counter
lagbridge_ttl_deadletter_total{reason="deadline",topic="orders"} 1
lagbridge_ttl_deadletter_total{reason="max-age",topic="orders"} 0
# HELP lagbridge_ttl_expired_total Messages skipped as dead work (acknowledged or committed past without handling), by reason.
# TYPE lagbridge_ttl_expired_total counter
lagbridge_ttl_expired_total{reason="deadline",topic="orders"} 1
lagbridge_ttl_expired_total{reason="max-age",topic="orders"} 0
# HELP lagbridge_ttl_handler_errors_total Live messages whose handler returned an error.
# TYPE lagbridge_ttl_handler_errors_total counter
lagbridge_ttl_handler_errors_total{topic="orders"} 1
# HELP lagbridge_ttl_late_total Messages handled whose handler returned at or after their deadline (dead work done).
# TYPE lagbridge_ttl_late_total counter
lagbridge_ttl_late_total{topic="orders"} 1
# HELP lagbridge_ttl_malformed_headers_total Messages with a malformed lagbridge header, judged as if it were absent.
# TYPE lagbridge_ttl_malformed_headers_total counter
lagbridge_ttl_malformed_headers_total{topic="orders"} 1
# HELP lagbridge_ttl_settle_errors_total Acknowledgements of expired messages that failed.
# TYPE lagbridge_ttl_settle_errors_total counter
lagbridge_ttl_settle_errors_total{topic="orders"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func TestNilSafe(t *testing.T) {
	var m *Metrics
	tp := m.Topic("x")
	if tp != nil {
		t.Fatal("nil Metrics gave a non-nil Topic")
	}
	tp.Consumed()
	tp.Expired(ttl.ReasonMaxAge)
	tp.Late()
	tp.HandlerError()
	tp.Malformed()
	tp.DeadLettered(ttl.ReasonMaxAge)
	tp.DeadLetterFailed()
	tp.SettleFailed()
}

func TestRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := New(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second New: %v, want AlreadyRegisteredError", err)
	}
}

func BenchmarkTopicHot(b *testing.B) {
	m, _ := New(prometheus.NewRegistry())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Topic("orders").Consumed()
		}
	})
}
