package leader

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/internal/groupmember"
)

// Kafka elects a leader through Kafka's group protocol: every replica
// joins the consumer group Config.Name on the one-partition topic
// "<Name>.leader" (created if missing); the member assigned partition 0
// leads, in the epoch of the group generation. The leader confirms every
// Config.Every by committing an offset, which the broker accepts only from
// a member of the current generation: a paused or partitioned leader is
// fenced by the broker and, before it hears so, by its local lease.
type Kafka struct {
	cfg   Config
	topic string

	mu   sync.Mutex
	owns bool // assigned partition 0 in the current generation
	// revokes counts the revocations of partition 0 and Releases: a
	// confirmation whose commit was in flight across one does not count.
	revokes uint64
	// released: Release was called; the replica no longer runs for leader.
	released bool
	gen      int32
	m        *groupmember.Member
	lease    // confirmed by commits
}

// NewKafka returns the elector; opts connect to the cluster (seeds, TLS,
// SASL), the group options are added by Run.
func NewKafka(opts []kgo.Opt, cfg Config) *Kafka {
	k := &Kafka{cfg: cfg, topic: cfg.Name + ".leader"}
	k.onRole = logRole(cfg)
	k.m = groupmember.New(groupmember.Config{Opts: opts, What: "leader election", Cluster: cfg.Cluster, Log: cfg.log(),
		Group: cfg.Name, Topic: k.topic, Partitions: 1, TopicConfigs: map[string]*string{"cleanup.policy": kadm.StringPtr("compact")},
		ID: cfg.ID, Session: cfg.Session, Every: cfg.every(), Assigned: k.assigned, Revoked: k.revoked})
	return k
}

// Cluster implements Elector.
func (k *Kafka) Cluster() string { return k.cfg.Cluster }

// Leading implements Elector.
func (k *Kafka) Leading(now time.Time) (int64, bool) { return k.leading(now) }

// Role implements Elector.
func (k *Kafka) Role(now time.Time) Role { return k.role(now) }

// Run implements Elector. It returns when ctx is done or Release was
// called; it starts one goroutine (the group's poll loop), which ends
// before it returns.
func (k *Kafka) Run(ctx context.Context) error {
	var fails groupmember.Failures // rounds run on the group's one poll loop
	return k.m.Run(ctx, func(ctx context.Context, cl *kgo.Client) {
		if err := k.round(ctx, cl); err != nil && ctx.Err() == nil {
			fails.Fail(k.cfg.log(), "leader election", err, "cluster", k.cfg.Cluster)
		} else if err == nil {
			fails.OK(k.cfg.log(), "leader election", "cluster", k.cfg.Cluster)
		}
		k.notify(time.Now())
	})
}

// round confirms leadership by committing offset 0 of partition 0 in the
// current generation.
func (k *Kafka) round(ctx context.Context, cl *kgo.Client) error {
	k.mu.Lock()
	owns, gen, revokes := k.owns && !k.released, k.gen, k.revokes
	k.mu.Unlock()
	if !owns {
		_, g := cl.GroupMetadata()
		if g >= 0 {
			k.follow(time.Now())
		}
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, k.cfg.every())
	defer cancel()
	sent := time.Now()
	var cerr error
	// The cooperative balancer keeps partition 0 with its owner across
	// rebalances without a new assignment callback: the epoch is the
	// generation the broker accepted the commit in.
	cl.CommitOffsetsSync(rctx, map[string]map[int32]kgo.EpochOffset{k.topic: {0: {Epoch: -1, Offset: 0}}},
		func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			gen = req.Generation
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						cerr = err
					}
				}
			}
		})
	if cerr != nil {
		return fmt.Errorf("confirming leadership (generation %d): %w", gen, cerr)
	}
	// Partition 0 revoked (or Release called) while the commit was in
	// flight: the broker may have accepted it, in a generation where
	// another member owns partition 0, but this replica no longer leads.
	// Checked and confirmed under k.mu, as revoked and Release clear the
	// lease, so that none of them comes in between.
	k.mu.Lock()
	still := k.owns && !k.released && k.revokes == revokes
	if still {
		k.gen = gen
		k.hold(sent, int64(gen), k.cfg.ttl())
	}
	k.mu.Unlock()
	if still {
		k.notify(sent)
	}
	return nil
}

func (k *Kafka) assigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	for _, p := range m[k.topic] {
		if p == 0 {
			_, gen := cl.GroupMetadata()
			k.mu.Lock()
			k.owns, k.gen = true, gen
			k.mu.Unlock()
		}
	}
}

func (k *Kafka) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for _, p := range m[k.topic] {
		if p == 0 {
			k.mu.Lock()
			k.owns = false
			k.revokes++
			k.lease.mu.Lock()
			k.held = false // stop publishing at once
			k.lease.mu.Unlock()
			k.mu.Unlock()
		}
	}
}

// Release implements Elector: it closes the group client and has the
// broker remove this static member from the group, so another replica is
// assigned partition 0 at once; this replica no longer runs for leader,
// and Run returns.
func (k *Kafka) Release(ctx context.Context) {
	k.mu.Lock()
	k.released = true
	k.revokes++
	k.lease.mu.Lock()
	k.held, k.lease.released = false, true
	k.lease.mu.Unlock()
	k.mu.Unlock()
	k.notify(time.Now())
	if err := k.m.Release(ctx); err != nil {
		k.cfg.log().Warn("leaving the election group; another replica takes over after the session timeout", "cluster", k.cfg.Cluster, "err", err)
	}
}
