package producerclient

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/importcheck"
)

// TestImports holds the package boundary: the client libraries it wraps,
// client_golang, and lagbridge's contract, quotaproto and ttl; never viper or a
// daemon package.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".",
		"github.com/twmb/franz-go/pkg/kgo",
		"github.com/twmb/franz-go/pkg/kerr",
		"github.com/nats-io/nats.go",
		"github.com/nats-io/nats.go/jetstream",
		"github.com/prometheus/client_golang/prometheus",
		"github.com/lagbridge/lagbridge/contract",
		"github.com/lagbridge/lagbridge/producerclient/quotaproto",
		"github.com/lagbridge/lagbridge/ttl",
	)
}

// TestShortFuncs holds the package's functions to 80 lines (issue 15).
func TestShortFuncs(t *testing.T) { importcheck.ShortFuncs(t, ".", 80) }

func TestMetrics(t *testing.T) {
	c := newKfake(t, 1, "orders")
	reg := prometheus.NewPedanticRegistry()
	p := newKafkaProducer(t, newKgo(t, c), Config{Producer: "svc-a", Clock: newFakeClock(), Mode: Drop, Registerer: reg,
		Leases: LeaseConfig{Safe: SafeQuota{Mode: SafeRate, Rate: 10, Burst: 2}}})
	for i := 0; i < 3; i++ {
		_ = p.Produce(context.Background(), &kgo.Record{Topic: "orders"})
	}
	want := `
# HELP lagbridge_client_admitted_total Messages admitted by the local quota (before any broker attempt).
# TYPE lagbridge_client_admitted_total counter
lagbridge_client_admitted_total{producer="svc-a",topic="orders"} 2
# HELP lagbridge_client_acked_total Messages acknowledged by the broker.
# TYPE lagbridge_client_acked_total counter
lagbridge_client_acked_total{producer="svc-a",topic="orders"} 2
# HELP lagbridge_client_attempts_total Sends to the broker, first attempts and retries.
# TYPE lagbridge_client_attempts_total counter
lagbridge_client_attempts_total{producer="svc-a",topic="orders"} 2
# HELP lagbridge_client_quota_rate Enforced rate in messages per second (+Inf: unlimited).
# TYPE lagbridge_client_quota_rate gauge
lagbridge_client_quota_rate{producer="svc-a",topic="orders"} 10
# HELP lagbridge_client_lease_valid 1 while a lease from the daemon applies, 0 on the safe quota.
# TYPE lagbridge_client_lease_valid gauge
lagbridge_client_lease_valid{producer="svc-a",topic="orders"} 0
# HELP lagbridge_client_in_flight Messages admitted and not yet finally acknowledged or failed.
# TYPE lagbridge_client_in_flight gauge
lagbridge_client_in_flight{producer="svc-a",topic="orders"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"lagbridge_client_admitted_total", "lagbridge_client_acked_total", "lagbridge_client_attempts_total",
		"lagbridge_client_quota_rate", "lagbridge_client_lease_valid", "lagbridge_client_in_flight"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var rateRejects float64
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetName() != "lagbridge_client_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "rate" {
					rateRejects = m.GetCounter().GetValue()
				}
			}
		}
	}
	if rateRejects != 1 {
		t.Fatalf("rejected_total{reason=rate} = %v, want 1", rateRejects)
	}
	for _, n := range []string{"lagbridge_client_retries_total", "lagbridge_client_retry_budget_tokens", "lagbridge_client_lease_version",
		"lagbridge_client_throttle_probability", "lagbridge_client_lease_errors_total", "lagbridge_client_quota_signal"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	// A second producer with the same id on the same registry is refused.
	if _, err := NewKafka(p.Client(), Config{Producer: "svc-a", Registerer: reg}); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("duplicate registration: %v", err)
	}
	// Close unregisters.
	_ = p.Close()
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Fatalf("%d metrics left after Close", n)
	}
}
