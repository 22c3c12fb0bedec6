package producerclient

import (
	"context"
	"testing"

	"github.com/lagbridge/lagbridge/ttl"
)

// BenchmarkAdmitPath runs one message through the SDK's whole admission
// (prepare, the gate, an in-flight slot, a token; Drop mode, no send) on
// a topic whose quota lets it through (admit), is closed (reject-closed:
// the safe quota is closed), has no token left (reject-rate: the safe
// quota's rate is 0.001 msg/s) or no in-flight slot (reject-inflight:
// MaxInFlight 1, held). Rejection is what the SDK does most under
// overload, so its cost and allocations are the figures to watch:
//
//	go test ./producerclient -run '^$' -bench AdmitPath -benchmem
func BenchmarkAdmitPath(b *testing.B) {
	for _, tc := range []struct {
		name string
		safe SafeQuota
		full bool // the only in-flight slot is held
	}{
		{"admit", SafeQuota{}, false},
		{"reject-closed", SafeQuota{Mode: SafeClosed}, false},
		{"reject-rate", SafeQuota{Mode: SafeRate, Rate: 1e-3, Burst: 1}, false},
		{"reject-inflight", SafeQuota{}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := Config{Producer: "bench", Mode: Drop, Leases: LeaseConfig{Safe: tc.safe}}
			if tc.full {
				cfg.MaxInFlight = 1
			}
			p := newKafkaProducer(b, newKgo(b, newKfake(b, 1, "t")), cfg)
			c := p.c
			t := c.topic("t")
			if tc.full && !t.inflight.tryAcquire() {
				b.Fatal("no slot to hold")
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				var m msg
				c.prepare(ctx, &m, t, nil, ttl.Meta{}, false)
				if r := c.admit(&m, c.mono.nanos()); r == nil {
					c.releaseSlot(&m)
				}
			}
		})
	}
}
