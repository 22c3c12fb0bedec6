package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/servertls"
	"github.com/lagbridge/lagbridge/internal/testpki"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/quota"
)

// TestSDKLeaseTLSOption: the SDK's own TLS option (LeaseConfig.TLS from
// LoadTLS, no HTTP client of the caller's) reaches the daemon over TLS with
// a CA made in the test and a client certificate (the daemon requires
// one), and gets its lease; a producer without a client certificate, and
// one over plain HTTP, get none and count the failures.
func TestSDKLeaseTLSOption(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	dir := t.TempDir()
	ca := testpki.NewCA(t, "lagbridge-test-ca")
	cert, key := ca.Leaf(t, "lagbridge", true)
	ccert, ckey := ca.Leaf(t, "svc-a", false)
	caFile := testpki.Write(t, dir, "ca.crt", ca.PEM)
	cfg := config.Config{Listen: "127.0.0.1:0", Interval: 250 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Log:   config.Log{Level: "info", Format: "text"},
		Kafka: []kafka.Config{{Cluster: "k", Brokers: c.ListenAddrs()}},
		TLS: servertls.Config{CertFile: testpki.Write(t, dir, "tls.crt", cert), KeyFile: testpki.Write(t, dir, "tls.key", key),
			ClientCAFile: caFile},
		Quota: config.Quota{Policies: []quota.Policy{{Name: "orders", MaxAge: 2 * time.Second,
			Producers: []quota.ProducerSpec{{ID: "svc-a", Criticality: quota.Critical}}}}},
	}
	addr := runApp(t, cfg)

	withCert, err := producerclient.LoadTLS(caFile, testpki.Write(t, dir, "client.crt", ccert), testpki.Write(t, dir, "client.key", ckey))
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := producerclient.LoadTLS(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	producer := func(url string, tc *producerclient.LeaseConfig) *producerclient.KafkaProducer {
		tc.URL, tc.MinBackoff, tc.MaxBackoff = url, 20*time.Millisecond, 100*time.Millisecond
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, producerclient.KafkaClientOpts(nil)...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		p, err := producerclient.NewKafka(cl, producerclient.Config{Producer: "svc-a", Topics: []string{"orders"}, Leases: *tc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	good := producer("https://"+addr, &producerclient.LeaseConfig{TLS: withCert})
	refused := producer("https://"+addr, &producerclient.LeaseConfig{TLS: noCert})
	plain := producer("http://"+addr, &producerclient.LeaseConfig{})

	poll(t, 30*time.Second, func() (bool, string) {
		q, _ := good.Quota("orders")
		return q.FromLease, "no lease over TLS yet"
	})
	poll(t, 30*time.Second, func() (bool, string) {
		return refused.Stats().LeaseErrors >= 2 && plain.Stats().LeaseErrors >= 2, "the refused producers' errors"
	})
	for name, p := range map[string]*producerclient.KafkaProducer{"no client certificate": refused, "plain HTTP": plain} {
		if q, _ := p.Quota("orders"); q.FromLease {
			t.Errorf("%s: got a lease %+v", name, q)
		}
	}
	// The leased producer produces.
	if err := good.Produce(ctxT(t, 10*time.Second), &kgo.Record{Topic: "orders", Value: []byte("x")}); err != nil && !errors.Is(err, producerclient.ErrSlowDown) {
		t.Fatal(err)
	}
}
