package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// partitions of every Kafka topic the bench creates.
const partitions = 6

// world is one run's broker, names and connections. Close undoes what
// start did, in reverse order.
type world struct {
	broker     string // BrokerKafka or BrokerNATS
	name       string // cluster name in the daemon's config and the report
	kafkaAddrs []string
	natsURL    string
	topic      string // Kafka topic or NATS stream
	subject    string // NATS subject of the stream
	group      string // Kafka consumer group or NATS durable consumer
	// abandoned is the second consumer of an Abandoned row (a group
	// with offsets and no member, a durable that never fetches); empty
	// otherwise.
	abandoned string
	// run names the run in the client.ids of its plain Kafka producers
	// (see clientID).
	run     string
	nc      *natsgo.Conn
	js      jetstream.JetStream
	closers []func()
}

// startWorld starts (or connects to) the broker of one run and creates its
// topic or stream.
func startWorld(ctx context.Context, o Options, row Row, id string) (w *world, err error) {
	broker := row.Broker
	w = &world{broker: broker}
	started := w // a failing return sets w to nil
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	switch broker {
	case BrokerKafka:
		w.name = "kfake"
		w.kafkaAddrs = o.KafkaBrokers
		if len(w.kafkaAddrs) == 0 {
			kc, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				return nil, fmt.Errorf("start kfake: %w", err)
			}
			w.closers = append(w.closers, kc.Close)
			w.kafkaAddrs = kc.ListenAddrs()
		} else {
			w.name = "kafka"
		}
		w.topic, w.group, w.run = "lagbench-"+id, "lagbench-"+id, id
		if err := createTopic(ctx, w.kafkaAddrs, w.topic); err != nil {
			return nil, err
		}
		if row.Extra == Abandoned {
			w.abandoned = w.group + "-abandoned"
		}
		if len(o.KafkaBrokers) > 0 {
			addrs, topic, groups := w.kafkaAddrs, w.topic, []string{w.group}
			if w.abandoned != "" {
				groups = append(groups, w.abandoned)
			}
			w.closers = append(w.closers, func() { deleteTopic(addrs, topic, groups) })
		}
		if w.abandoned != "" {
			if err := commitAbandoned(ctx, w.kafkaAddrs, w.topic, w.abandoned); err != nil {
				return nil, err
			}
		}
	case BrokerNATS:
		w.name = "embedded-nats"
		w.natsURL = o.NATSURL
		if w.natsURL == "" {
			dir, err := os.MkdirTemp("", "lagbridge-bench-")
			if err != nil {
				return nil, err
			}
			w.closers = append(w.closers, func() { _ = os.RemoveAll(dir) })
			ns, err := embedded.NATS(dir)
			if err != nil {
				return nil, err
			}
			w.closers = append(w.closers, func() { shutdownNATS(ns) })
			w.natsURL = ns.ClientURL()
		} else {
			w.name = "nats"
		}
		w.topic, w.subject, w.group = "LAGBENCH_"+id, "lagbench."+id, "lagbench-"+id
		nc, err := natsgo.Connect(w.natsURL, natsgo.Name("lagbridge-bench"))
		if err != nil {
			return nil, fmt.Errorf("connect to nats %s: %w", w.natsURL, err)
		}
		w.nc = nc
		w.closers = append(w.closers, nc.Close)
		if w.js, err = jetstream.New(nc); err != nil {
			return nil, err
		}
		if _, err := w.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: w.topic, Subjects: []string{w.subject}, AllowDirect: true}); err != nil {
			return nil, fmt.Errorf("create stream %s: %w", w.topic, err)
		}
		js, stream := w.js, w.topic
		w.closers = append(w.closers, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(dctx, stream)
		})
		if row.Extra == Abandoned {
			w.abandoned = w.group + "-abandoned"
			if _, err := w.js.CreateOrUpdateConsumer(ctx, w.topic, jetstream.ConsumerConfig{Durable: w.abandoned, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
				return nil, fmt.Errorf("create consumer %s: %w", w.abandoned, err)
			}
		}
	default:
		return nil, fmt.Errorf("%w: unknown broker %q", ErrInvalidOptions, broker)
	}
	return w, nil
}

func shutdownNATS(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}

// Close closes everything start opened. Idempotent.
func (w *world) Close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

func createTopic(ctx context.Context, addrs []string, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 15_000
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := req.RequestWith(cctx, cl)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	// Wait until the metadata knows every partition's leader.
	for {
		m := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		m.Topics = append(m.Topics, mt)
		if mr, err := m.RequestWith(cctx, cl); err == nil && len(mr.Topics) == 1 && mr.Topics[0].ErrorCode == 0 && len(mr.Topics[0].Partitions) == partitions {
			return nil
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("topic %s not ready: %w", topic, cctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// commitAbandoned commits offset 0 on every partition of topic for group,
// a group without members (a "simple" commit, generation -1, as admin
// tools do): a group that once consumed the topic and is gone, its
// offsets kept.
func commitAbandoned(ctx context.Context, addrs []string, topic, group string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// OffsetCommit v10+ names the topic by its id.
	m := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	m.Topics = append(m.Topics, mt)
	mr, err := m.RequestWith(cctx, cl)
	if err != nil || len(mr.Topics) != 1 {
		return fmt.Errorf("metadata of %s: %v", topic, err)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic, t.TopicID = topic, mr.Topics[0].TopicID
	for p := range int32(partitions) {
		pp := kmsg.NewOffsetCommitRequestTopicPartition()
		pp.Partition, pp.Offset = p, 0
		t.Partitions = append(t.Partitions, pp)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(cctx, cl)
	if err != nil {
		return fmt.Errorf("commit for group %s: %w", group, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("commit for group %s, partition %d: %w", group, rp.Partition, err)
			}
		}
	}
	return nil
}

// deleteTopic deletes a run's topic and consumer groups from a real
// cluster, best effort.
func deleteTopic(addrs []string, topic string, groups []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	req.TopicNames = []string{topic}
	req.TimeoutMillis = 10_000
	_, _ = req.RequestWith(ctx, cl)
	greq := kmsg.NewPtrDeleteGroupsRequest()
	greq.Groups = groups
	_, _ = greq.RequestWith(ctx, cl)
}

// daemon is the real lagbridge daemon, in process.
type daemon struct {
	app    *app.App
	base   string
	cancel context.CancelFunc
	done   chan error
}

// clientID is the client.id of producer's plain franz-go client in this
// run (naive and legacy producers): the producer's name and the run's.
// Kafka meters a client quota per client.id across every connection that
// uses it, so with the bare names the legacy rows' client quotas held the
// naive producers of other runs on the same cluster (another load, or
// someone else's bench), and their bytes filled the legacy producers'
// quota windows.
func (w *world) clientID(producer string) string {
	if w.run == "" {
		return producer
	}
	return producer + "-" + w.run
}

// daemonConfig is the daemon's config for a run: the one cluster, a quota
// policy for the run's topic with maxAge = the deadline and the scenario's
// producers.
func daemonConfig(o Options, scn Scenario, w *world, interval time.Duration, clientQuota bool) (config.Config, error) {
	var producers []quota.ProducerSpec
	for _, c := range scn.Classes {
		id := c.Producer
		if clientQuota {
			id = w.clientID(id) // the legacy producers' client.ids
		}
		producers = append(producers, quota.ProducerSpec{ID: id, Criticality: c.Criticality})
	}
	cfg := config.Config{
		Listen: "127.0.0.1:0", Interval: interval, ShutdownTimeout: 5 * time.Second,
		Log:   config.Log{Level: "info", Format: "text"},
		Rules: config.Rules{LagAge: scn.Deadline},
		Quota: config.Quota{LeaseLifetime: max(5*time.Second, 4*interval), Policies: []quota.Policy{{
			Name: "bench", Match: quota.Match{Topic: regexp.QuoteMeta(w.topic)}, MaxAge: scn.Deadline, Producers: producers,
			KafkaClientQuota: clientQuota,
		}}},
	}
	consumers := []string{regexp.QuoteMeta(w.group)}
	if w.abandoned != "" {
		consumers = append(consumers, regexp.QuoteMeta(w.abandoned))
		// The daemon keeps its default grace (rules.abandonAfter): a
		// consumer never seen live is abandoned from its first reading.
	}
	switch w.broker {
	case BrokerKafka:
		cfg.Kafka = []kafka.Config{{Cluster: w.name, Brokers: w.kafkaAddrs,
			Groups: kafka.Filter{Include: consumers}, Topics: kafka.Filter{Include: []string{regexp.QuoteMeta(w.topic)}}}}
	case BrokerNATS:
		cfg.NATS = []nats.Config{{Cluster: w.name, URLs: []string{w.natsURL},
			Streams: nats.Filter{Include: []string{regexp.QuoteMeta(w.topic)}}, Consumers: nats.Filter{Include: consumers}}}
	}
	return cfg, cfg.Validate()
}

// abandonWait bounds how long an Abandoned row waits for the daemon to
// call its second consumer abandoned (its first readings).
const abandonWait = 10 * time.Second

// waitAbandoned waits until the daemon reports w's abandoned consumer as
// abandoned, at most d.
func (d *daemon) waitAbandoned(ctx context.Context, w *world, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range d.app.Store.States() {
			if s.Target.Group == w.abandoned && s.Status == lag.StatusAbandoned {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon did not report %s abandoned within %s", w.abandoned, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startDaemon runs the daemon for w and returns once /readyz answers 200.
// clientQuota turns kafkaClientQuota on for the policy (legacy producers).
func startDaemon(ctx context.Context, o Options, scn Scenario, w *world, interval time.Duration, clientQuota bool) (*daemon, error) {
	cfg, err := daemonConfig(o, scn, w, interval, clientQuota)
	if err != nil {
		return nil, fmt.Errorf("daemon config: %w", err)
	}
	dctx, cancel := context.WithCancel(ctx)
	a, err := app.New(dctx, cfg, o.Log.With("side", "daemon")) // the daemon adds its own component keys
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	d := &daemon{app: a, base: "http://" + a.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- a.Run(dctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ok := ready(dctx, d.base); ok {
			return d, nil
		}
		if time.Now().After(deadline) || dctx.Err() != nil {
			_ = d.stop()
			return nil, errors.New("the daemon did not become ready within 30s")
		}
		select {
		case <-dctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ready(ctx context.Context, base string) bool {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	// A client of its own, whose idle connection is closed at once: no
	// keep-alive goroutine outlives the check.
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop ends the daemon and waits for it. Idempotent.
func (d *daemon) stop() error {
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	d.cancel = nil
	return <-d.done
}

// cycles returns the times of the daemon's observation cycles of w's
// consumer group in [from, to] (its history keeps one point per cycle).
func (d *daemon) cycles(w *world, from, to time.Time) []time.Time {
	var at []time.Time
	for _, s := range d.app.History.Query(history.Query{Topic: w.topic, Group: w.group, Since: from, Until: to}) {
		for _, p := range s.Points {
			at = append(at, time.UnixMilli(p.T))
		}
	}
	slices.SortFunc(at, time.Time.Compare)
	return at
}

// view is what the daemon says about the run's consumer at one moment.
type view struct {
	headAge, lag float64 // seconds, messages; NaN unknown
	decided      float64 // msg/s, +Inf unlimited, NaN none
	// The decision's capacity estimate (msg/s), predicted wait (s) and
	// reason, for the trace.
	capacity, wait float64
	reason, rule   string
}

// look reads the daemon's store and quota engine for w's target.
func (d *daemon) look(w *world) view {
	v := view{headAge: math.NaN(), lag: math.NaN(), decided: math.NaN(), capacity: math.NaN(), wait: math.NaN()}
	for _, s := range d.app.Store.States() {
		if s.Target.Topic != w.topic || s.Target.Group != w.group || s.Stale {
			continue
		}
		v.lag = float64(s.Lag)
		switch {
		case s.HeadAgeKnown:
			v.headAge = s.HeadAge.Seconds()
		case s.Lag == 0:
			v.headAge = 0
		}
	}
	for _, dec := range d.app.Engine.Decisions() {
		if dec.Target.Topic == w.topic && (math.IsNaN(v.decided) || dec.Rate < v.decided) {
			v.decided, v.capacity, v.wait, v.reason, v.rule = dec.Rate, dec.Capacity, dec.Wait.Seconds(), dec.Reason, dec.Rule.String()
		}
	}
	return v
}
