package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/quota"
)

// TestDaemonClearsLeftoverClientQuotas: an earlier run with
// kafkaClientQuota: true left a marked producer_byte_rate on a client-id;
// the operator turns the option off and restarts. The daemon clears its
// own quota (or the producer would stay throttled by the broker for good)
// and leaves the operator's round-number quota alone.
func TestDaemonClearsLeftoverClientQuotas(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	set := func(id string, v float64) {
		t.Helper()
		if _, err := adm.AlterClientQuotas(ctxT(t, 10*time.Second), []kadm.AlterClientQuotaEntry{{
			Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &id}},
			Ops:    []kadm.AlterClientQuotaOp{{Key: publish.QuotaKey, Value: v}}}}); err != nil {
			t.Fatal(err)
		}
	}
	set("legacy", publish.Marked(4096))
	set("operator", 1<<20)

	startApp(t, config.Config{Kafka: []kafka.Config{{Cluster: "main", Brokers: c.ListenAddrs()}},
		Quota: config.Quota{Policies: []quota.Policy{{Name: "orders", MaxAge: 2 * time.Second,
			Producers: []quota.ProducerSpec{{ID: "legacy"}}}}}}) // kafkaClientQuota off
	cq := publish.NewClientQuotas(cl, testLogger(t))
	poll(t, 20*time.Second, func() (bool, string) {
		cur, err := cq.Current(context.Background())
		if err != nil {
			return false, err.Error()
		}
		_, legacy := cur["legacy"]
		return !legacy && cur["operator"] == 1<<20, fmt.Sprintf("client quotas %v", cur)
	})
}
