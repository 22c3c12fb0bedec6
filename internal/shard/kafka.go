package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka assigns shards through Kafka's group protocol: every replica joins
// the consumer group "<Name>.shards.<Count>" on the topic of the same name,
// which has one partition per shard (created if missing); a replica
// observes the shards of the partitions it is assigned. The group's
// cooperative-sticky balancer moves only the shards of a replica that joins
// or leaves; a replica that stops heartbeating loses its shards after the
// session timeout. Every Config.Every the replica describes the group: it
// learns every shard's owner, and confirms its own shards for the session
// minus a fifth (a replica cut off from the broker stops observing them
// before another one can start).
type Kafka struct {
	opts  []kgo.Opt
	topic string
	log   *slog.Logger

	mu       sync.Mutex
	held     map[int32]bool // assigned by the group callbacks
	cl       *kgo.Client
	released bool
	owned
}

// KafkaTopic is the shard topic and group of an assignment.
func KafkaTopic(name string, count int) string { return name + ".shards." + strconv.Itoa(count) }

// NewKafka returns the assigner; opts connect to the cluster (seeds, TLS,
// SASL); log nil means slog.Default().
func NewKafka(opts []kgo.Opt, cfg Config, log *slog.Logger) *Kafka {
	if log == nil {
		log = slog.Default()
	}
	k := &Kafka{opts: opts, topic: KafkaTopic(cfg.Name, cfg.Count), log: log, held: map[int32]bool{}}
	k.cfg, k.notify = cfg, cfg.OnChange
	return k
}

// Run implements Assigner.
func (k *Kafka) Run(ctx context.Context) error {
	for {
		err := k.createTopic(ctx)
		if err == nil {
			break
		}
		k.log.Warn("shard assignment: creating the shard topic", "cluster", k.cfg.Cluster, "topic", k.topic, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(k.cfg.every()):
		}
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...),
		kgo.ConsumerGroup(k.topic), kgo.ConsumeTopics(k.topic), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(k.cfg.Session), kgo.HeartbeatInterval(k.cfg.every()),
		kgo.ClientID("lagbridge-"+k.cfg.ID), kgo.InstanceID(k.cfg.ID),
		kgo.OnPartitionsAssigned(k.assigned), kgo.OnPartitionsRevoked(k.revoked), kgo.OnPartitionsLost(k.revoked))...)
	if err != nil {
		return fmt.Errorf("shard assignment on %s: %w", k.cfg.Cluster, err)
	}
	k.mu.Lock()
	if k.released {
		k.mu.Unlock()
		cl.Close()
		return nil
	}
	k.cl = cl
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		cl := k.cl
		k.cl = nil
		k.mu.Unlock()
		if cl != nil {
			cl.Close()
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { // drain the (empty) topic so the group stays served
		for pctx.Err() == nil {
			cl.PollFetches(pctx)
		}
	})
	adm := kadm.NewClient(cl)
	t := time.NewTicker(k.cfg.every())
	defer t.Stop()
	for {
		if err := k.round(ctx, adm); err != nil && ctx.Err() == nil && !k.isReleased() {
			k.log.Warn("shard assignment", "cluster", k.cfg.Cluster, "err", err)
		}
		k.changed(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (k *Kafka) createTopic(ctx context.Context) error {
	cl, err := kgo.NewClient(k.opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := kadm.NewClient(cl).CreateTopic(ctx, int32(k.cfg.Count), -1, nil, k.topic)
	if err == nil {
		err = r.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return err
}

// round describes the group: every shard's owner, and this replica's own
// shards confirmed until sent plus the session minus a fifth.
func (k *Kafka) round(ctx context.Context, adm *kadm.Client) error {
	rctx, cancel := context.WithTimeout(ctx, k.cfg.every())
	defer cancel()
	sent := time.Now()
	gs, err := adm.DescribeGroups(rctx, k.topic)
	if err != nil {
		return err
	}
	g, ok := gs[k.topic]
	if !ok {
		return fmt.Errorf("group %s not described", k.topic)
	}
	if g.Err != nil {
		return g.Err
	}
	owners := make([]string, k.cfg.Count)
	for _, m := range g.Members {
		a, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		id := m.ClientID
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		for _, t := range a.Topics {
			if t.Topic != k.topic {
				continue
			}
			for _, p := range t.Partitions {
				if p >= 0 && int(p) < len(owners) {
					owners[p] = id
				}
			}
		}
	}
	// Under k.mu, so that a revocation comes before or after, never in
	// between.
	k.mu.Lock()
	if k.released {
		k.mu.Unlock()
		return nil
	}
	var mine []int
	for p, id := range owners {
		if id == k.cfg.ID && k.held[int32(p)] {
			mine = append(mine, p)
		}
	}
	joining := g.State != "Stable" && len(mine) == 0 && len(k.held) == 0
	if !joining {
		k.store(mine, owners, sent.Add(k.cfg.Session-k.cfg.Session/5))
	}
	k.mu.Unlock()
	return nil
}

func (k *Kafka) isReleased() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.released
}

func (k *Kafka) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range m[k.topic] {
		k.held[p] = true
	}
}

// revoked drops the shards at once: they stop being observed before the
// next round.
func (k *Kafka) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	k.mu.Lock()
	for _, p := range m[k.topic] {
		delete(k.held, p)
	}
	k.owned.mu.Lock()
	k.shards = slices.DeleteFunc(slices.Clone(k.shards), func(s int) bool { return slices.Contains(m[k.topic], int32(s)) })
	k.owned.mu.Unlock()
	k.mu.Unlock()
	k.changed(time.Now())
}

// Release implements Assigner: it closes the group client and has the
// broker remove this static member, so the others are assigned its shards
// at once.
func (k *Kafka) Release(ctx context.Context) {
	k.mu.Lock()
	cl := k.cl
	k.cl, k.released = nil, true
	clear(k.held)
	k.owned.mu.Lock()
	k.shards = nil
	k.owned.mu.Unlock()
	k.mu.Unlock()
	k.changed(time.Now())
	if cl == nil {
		return
	}
	cl.Close()
	admin, err := kgo.NewClient(k.opts...)
	if err != nil {
		return
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).LeaveGroup(ctx, kadm.LeaveGroup(k.topic).InstanceIDs(k.cfg.ID).Reason("lagbridge stops")); err != nil {
		k.log.Warn("leaving the shard group; the others take its shards after the session timeout", "cluster", k.cfg.Cluster, "err", err)
	}
}
