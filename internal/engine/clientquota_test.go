package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// legacyPolicy is one policy opted into client quotas, listing "legacy",
// and the topic c1/orders.
func legacyPolicy(tb testing.TB) (*quota.Policies, quota.Topic) {
	tb.Helper()
	pols, err := quota.NewPolicies([]quota.Policy{
		{Name: "in", MaxAge: time.Second, KafkaClientQuota: true, Producers: []quota.ProducerSpec{{ID: "legacy"}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return pols, quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "orders"}
}

// TestClientQuotaUnheeded: a topic that keeps receiving more than twice its
// allowed rate while its listed producers hold client quotas raises one
// warning and the gauge after UnheededCycles publishes; heeding again
// lowers the gauge; a topic within twice its rate never warns.
func TestClientQuotaUnheeded(t *testing.T) {
	pols, topic := legacyPolicy(t)
	snap := func(produce float64) Snapshot {
		return Snapshot{Policies: pols,
			Topics: map[quota.Topic]quota.Decision{topic: {Policy: "in", Rate: 100, ProduceRate: produce}},
			Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 100}}}
	}
	steps := []struct {
		name     string
		produce  float64
		cycles   int
		gauge    float64
		warnings int
	}{
		{"within twice the allowed rate", 190, 2 * UnheededCycles, 0, 0},
		{"over, not yet for long", 500, UnheededCycles - 1, 0, 0},
		{"over for long: one warning", 500, 5, 1, 1},
		{"heeded again", 100, 1, 0, 1},
		{"over again for long: a new episode", 500, UnheededCycles, 1, 2},
	}
	var logs bytes.Buffer
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"cluster", "topic"})
	p := &ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 100, Log: slog.New(slog.NewTextHandler(&logs, nil)), Unheeded: gauge}
	for _, s := range steps {
		for range s.cycles {
			p.checkHeeded(snap(s.produce))
		}
		if got := testutil.ToFloat64(gauge.WithLabelValues("c1", "orders")); got != s.gauge {
			t.Errorf("%s: gauge %v, want %v", s.name, got, s.gauge)
		}
		if got := strings.Count(logs.String(), "do not heed"); got != s.warnings {
			t.Errorf("%s: %d warnings, want %d:\n%s", s.name, got, s.warnings, logs.String())
		}
	}
}

// TestClientQuotaRates: what a client-id is allowed and an upper bound of
// what it sends, in bytes, from the override or the default size.
func TestClientQuotaRates(t *testing.T) {
	pols, topic := legacyPolicy(t)
	s := Snapshot{Policies: pols,
		Topics: map[quota.Topic]quota.Decision{topic: {Policy: "in", Rate: 0, ProduceRate: 40}},
		Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 0}}}
	cases := []struct {
		name       string
		bpm        float64
		want, sent float64
	}{
		{"override", 200, 0, 40 * 200},
		{"neither configured nor measured: the default", 0, 0, 40 * DefaultBytesPerMessage},
	}
	for _, c := range cases {
		want, sent := (&ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: c.bpm}).rates(s)
		if w, ok := want["legacy"]; !ok || w != c.want || sent["legacy"] != c.sent {
			t.Errorf("%s: want %v sent %v, want %v and %v", c.name, want, sent, c.want, c.sent)
		}
	}
}
