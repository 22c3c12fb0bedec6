package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	opts  []kgo.Opt
	topic string

	mu   sync.Mutex
	owns bool // assigned partition 0 in the current generation
	// revokes counts the revocations of partition 0 and Releases: a
	// confirmation whose commit was in flight across one does not count.
	revokes uint64
	// released: Release was called; the replica no longer runs for leader.
	released bool
	gen      int32
	cl       *kgo.Client
	// stopped is closed by Release: Run returns.
	stopped chan struct{}
	lease   // confirmed by commits
}

// NewKafka returns the elector; opts connect to the cluster (seeds, TLS,
// SASL), the group options are added by Run.
func NewKafka(opts []kgo.Opt, cfg Config) *Kafka {
	k := &Kafka{cfg: cfg, opts: opts, topic: cfg.Name + ".leader", stopped: make(chan struct{})}
	k.onRole = logRole(cfg)
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
	opts := append(append([]kgo.Opt{}, k.opts...),
		kgo.ConsumerGroup(k.cfg.Name), kgo.ConsumeTopics(k.topic), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(k.cfg.Session), kgo.HeartbeatInterval(k.cfg.every()),
		kgo.ClientID("lagbridge-"+k.cfg.ID), kgo.InstanceID(k.cfg.ID),
		kgo.OnPartitionsAssigned(k.assigned), kgo.OnPartitionsRevoked(k.revoked), kgo.OnPartitionsLost(k.revoked))
	// Create the topic first, with a plain client: the group joins
	// only topics that exist.
	for {
		err := k.createTopic(ctx)
		if err == nil {
			break
		}
		k.cfg.log().Warn("leader election: creating the election topic", "cluster", k.cfg.Cluster, "topic", k.topic, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-k.stopped:
			return nil
		case <-time.After(k.cfg.every()):
		}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("leader election on %s: %w", k.cfg.Cluster, err)
	}
	k.mu.Lock()
	if k.released { // released while the topic was created
		k.mu.Unlock()
		cl.Close()
		return nil
	}
	k.cl = cl
	k.mu.Unlock()
	// A static member (InstanceID) does not leave the group when closed:
	// without a graceful Release the others take over after the session
	// timeout, and a replica restarting within it gets its place back
	// without a rebalance.
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
		// Until Run returns or Release closes the client: a closed
		// client's poll returns at once, and looping on it would spin.
		for !cl.PollFetches(pctx).IsClientClosed() && pctx.Err() == nil {
		}
	})
	t := time.NewTicker(k.cfg.every())
	defer t.Stop()
	for {
		if err := k.round(ctx, cl); err != nil && ctx.Err() == nil {
			k.cfg.log().Warn("leader election", "cluster", k.cfg.Cluster, "err", err)
		}
		k.notify(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-k.stopped:
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
	r, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, k.topic)
	if err == nil {
		err = r.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return err
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
	cl := k.cl
	if !k.released {
		close(k.stopped)
	}
	k.cl, k.released = nil, true
	k.revokes++
	k.lease.mu.Lock()
	k.held = false
	k.lease.mu.Unlock()
	k.mu.Unlock()
	k.notify(time.Now())
	if cl == nil {
		return
	}
	cl.Close()
	admin, err := kgo.NewClient(k.opts...)
	if err != nil {
		return
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).LeaveGroup(ctx, kadm.LeaveGroup(k.cfg.Name).InstanceIDs(k.cfg.ID).Reason("lagbridge stops")); err != nil {
		k.cfg.log().Warn("leaving the election group; another replica takes over after the session timeout", "cluster", k.cfg.Cluster, "err", err)
	}
}
