// Package groupmember runs one static member of a Kafka consumer group on
// a topic of its own, the way leader election (internal/leader) and shard
// assignment (internal/shard) take part in a group: it creates the topic,
// joins with a static instance id, keeps the group served by polling the
// (empty) topic, calls the caller's round every interval, and on Release
// closes the client and has the broker remove the member at once.
//
// [Rounds], its loop, serves the members that keep their place in a NATS
// KV bucket too. It imports the Kafka client only; the group's meaning
// (who leads, who owns which shard) stays with the caller, through the
// partition callbacks and the round.
package groupmember

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is one member of one group.
type Config struct {
	// Opts connect to the cluster (seeds, TLS, SASL); the group options
	// are added by Run.
	Opts []kgo.Opt
	// What names the member's job in errors and logs ("leader
	// election"); Cluster names the cluster.
	What, Cluster string
	// Log receives the retries of the topic creation; nil means
	// slog.Default().
	Log *slog.Logger
	// Group is the consumer group; Topic the topic it consumes, created
	// if missing with Partitions partitions (at least 1), the broker's
	// replication factor and TopicConfigs (nil: the broker's defaults).
	Group, Topic string
	Partitions   int32
	TopicConfigs map[string]*string
	// ID is the static member's instance id (unique among the members)
	// and, prefixed "lagbridge-", its client id.
	ID string
	// Session is the group's session timeout; Every the heartbeat
	// interval, how often the round runs and how often a failed topic
	// creation is retried. Both must be positive.
	Session, Every time.Duration
	// Assigned and Revoked are the group's partition callbacks (Revoked
	// also for lost partitions); called from the client's goroutines.
	Assigned, Revoked func(context.Context, *kgo.Client, map[string][]int32)
}

// Member is one static group member. Release and Run are safe to call
// from different goroutines; Run at most once.
type Member struct {
	cfg Config

	mu       sync.Mutex
	cl       *kgo.Client // while Run runs and Release was not called
	released bool
	stopped  chan struct{} // closed by Release: Run returns
}

// New returns the member; it joins when Run is called.
func New(cfg Config) *Member {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Member{cfg: cfg, stopped: make(chan struct{})}
}

// Run creates the topic (retrying every Config.Every), joins the group and
// calls round with the group client at once and then every Config.Every,
// until ctx is done or Release was called; then it closes the client and
// returns nil. It returns an error only if the client cannot be built (bad
// options). It runs one goroutine of its own, the poll loop that keeps the
// group served, which ends before it returns. A static member does not
// leave the group when its client closes: without Release the others take
// over after the session timeout, and a member restarting within it gets
// its place back without a rebalance.
func (m *Member) Run(ctx context.Context, round func(context.Context, *kgo.Client)) error {
	// Create the topic first, with a plain client: the group joins only
	// topics that exist.
	var fails Failures
	for {
		err := m.CreateTopic(ctx)
		if err == nil {
			fails.OK(m.cfg.Log, m.cfg.What+": creating the topic", "cluster", m.cfg.Cluster, "topic", m.cfg.Topic)
			break
		}
		fails.Fail(m.cfg.Log, m.cfg.What+": creating the topic", err, "cluster", m.cfg.Cluster, "topic", m.cfg.Topic)
		select {
		case <-ctx.Done():
			return nil
		case <-m.stopped:
			return nil
		case <-time.After(m.cfg.Every):
		}
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, m.cfg.Opts...),
		kgo.ConsumerGroup(m.cfg.Group), kgo.ConsumeTopics(m.cfg.Topic), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(m.cfg.Session), kgo.HeartbeatInterval(m.cfg.Every),
		kgo.ClientID("lagbridge-"+m.cfg.ID), kgo.InstanceID(m.cfg.ID),
		kgo.OnPartitionsAssigned(m.cfg.Assigned), kgo.OnPartitionsRevoked(m.cfg.Revoked), kgo.OnPartitionsLost(m.cfg.Revoked))...)
	if err != nil {
		return fmt.Errorf("%s on %s: %w", m.cfg.What, m.cfg.Cluster, err)
	}
	m.mu.Lock()
	if m.released { // released while the topic was created
		m.mu.Unlock()
		cl.Close()
		return nil
	}
	m.cl = cl
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		cl := m.cl
		m.cl = nil
		m.mu.Unlock()
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
	Rounds(ctx, m.stopped, m.cfg.Every, func() { round(ctx, cl) })
	return nil
}

// Rounds calls round at once and then every interval (which must be
// positive), on the calling goroutine, until ctx is done or stopped is
// closed; a round under way is not interrupted, and none starts after.
// It is the loop of every member: Run's, and that of the members who keep
// their place in a NATS KV bucket instead of a Kafka group.
func Rounds(ctx context.Context, stopped <-chan struct{}, every time.Duration, round func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		round()
		select {
		case <-ctx.Done():
			return
		case <-stopped:
			return
		case <-t.C:
			// Both ready: select picks at random; no round after the end.
			if ctx.Err() != nil || isClosed(stopped) {
				return
			}
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// CreateTopic creates the group's topic, once; a topic that exists
// already is no error. Run calls it until it succeeds.
func (m *Member) CreateTopic(ctx context.Context) error {
	cl, err := kgo.NewClient(m.cfg.Opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := kadm.NewClient(cl).CreateTopic(ctx, m.cfg.Partitions, -1, m.cfg.TopicConfigs, m.cfg.Topic)
	if err == nil {
		err = r.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return err
}

// Release closes the group client and has the broker remove this static
// member from the group (within ctx), so the others are assigned its
// partitions at once; Run returns. It returns the error of that removal
// (the others then take over after the session timeout), nil if the
// member never joined. Idempotent: later calls do nothing.
func (m *Member) Release(ctx context.Context) error {
	m.mu.Lock()
	cl := m.cl
	if !m.released {
		close(m.stopped)
	}
	m.cl, m.released = nil, true
	m.mu.Unlock()
	if cl == nil {
		return nil
	}
	cl.Close()
	admin, err := kgo.NewClient(m.cfg.Opts...)
	if err != nil {
		return err
	}
	defer admin.Close()
	_, err = kadm.NewClient(admin).LeaveGroup(ctx, kadm.LeaveGroup(m.cfg.Group).InstanceIDs(m.cfg.ID).Reason("lagbridge stops"))
	return err
}

// Failures logs a retried operation's failures without a line per retry:
// the first failure in a row at WARN, the others at DEBUG, and the
// recovery after them at INFO with how many there were (a cluster never
// reached logged one WARN a second for as long as it stayed away). The
// zero value is ready; not safe for concurrent use.
type Failures struct{ n int }

// Fail logs err for what at WARN if it is the first in a row, else at
// DEBUG.
func (f *Failures) Fail(log *slog.Logger, what string, err error, args ...any) {
	f.n++
	level := slog.LevelDebug
	if f.n == 1 {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, what, append(args, "err", err, "failures", f.n)...)
}

// OK ends a run of failures, logging the recovery at INFO if there was
// one.
func (f *Failures) OK(log *slog.Logger, what string, args ...any) {
	if f.n > 0 {
		log.Info(what+": recovered", append(args, "failures", f.n)...)
	}
	f.n = 0
}
