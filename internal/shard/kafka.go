package shard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/internal/groupmember"
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
	topic string
	log   *slog.Logger
	m     *groupmember.Member

	mu       sync.Mutex
	held     map[int32]bool // assigned by the group callbacks
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
	k := &Kafka{topic: KafkaTopic(cfg.Name, cfg.Count), log: log, held: map[int32]bool{}}
	k.cfg, k.notify = cfg, cfg.OnChange
	k.m = groupmember.New(groupmember.Config{Opts: opts, What: "shard assignment", Cluster: cfg.Cluster, Log: log,
		Group: k.topic, Topic: k.topic, Partitions: int32(cfg.Count),
		ID: cfg.ID, Session: cfg.Session, Every: cfg.every(), Assigned: k.assigned, Revoked: k.revoked})
	return k
}

// Run implements Assigner. It returns when ctx is done or Release was
// called; it starts one goroutine (the group's poll loop), which ends
// before it returns.
func (k *Kafka) Run(ctx context.Context) error {
	return k.m.Run(ctx, func(ctx context.Context, cl *kgo.Client) {
		if err := k.round(ctx, kadm.NewClient(cl)); err != nil && ctx.Err() == nil && !k.isReleased() {
			k.log.Warn("shard assignment", "cluster", k.cfg.Cluster, "err", err)
		}
		k.changed(time.Now())
	})
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
	k.released = true
	clear(k.held)
	k.owned.mu.Lock()
	k.shards = nil
	k.owned.mu.Unlock()
	k.mu.Unlock()
	k.changed(time.Now())
	if err := k.m.Release(ctx); err != nil {
		k.log.Warn("leaving the shard group; the others take its shards after the session timeout", "cluster", k.cfg.Cluster, "err", err)
	}
}
