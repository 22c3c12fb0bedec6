package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// PolicyRule opts one quota policy's targets into broker-side enforcement.
// Everything is off by default, and a dry run (logged and counted, nothing
// changed) unless Apply is set.
type PolicyRule struct {
	// Policy names a quota policy (quota.policies[].name). Required.
	Policy string `mapstructure:"policy"`
	// KafkaOffsetMove advances the committed offsets of an EMPTY group
	// whose oldest unconsumed record is older than the policy's hardAge
	// (required) to the first record younger than its maxAge.
	KafkaOffsetMove bool `mapstructure:"kafkaOffsetMove"`
	// NATSStream keeps each matched stream's MaxAge at the policy's
	// hardAge (or maxAge) and, with AllowMsgTTL, per-message TTL allowed.
	NATSStream  bool `mapstructure:"natsStream"`
	AllowMsgTTL bool `mapstructure:"allowMsgTTL"`
	// Apply makes the changes; false (the default) only reports them.
	Apply bool `mapstructure:"apply"`
}

// Validate checks the rules against the policies; every problem at once.
func ValidateRules(rules []PolicyRule, policies []quota.Policy) error {
	byName := map[string]quota.Policy{}
	for _, p := range policies {
		byName[p.Name] = p
	}
	var errs []error
	seen := map[string]bool{}
	for i, r := range rules {
		p, ok := byName[r.Policy]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("ttl.enforce[%d].policy: %q is not the name of a quota policy", i, r.Policy))
		case seen[r.Policy]:
			errs = append(errs, fmt.Errorf("ttl.enforce[%d].policy: %q is listed twice", i, r.Policy))
		case r.KafkaOffsetMove && p.HardAge <= 0:
			errs = append(errs, fmt.Errorf("ttl.enforce[%d].kafkaOffsetMove: policy %q needs a hardAge: only records older than it are skipped", i, r.Policy))
		}
		seen[r.Policy] = true
		if r.AllowMsgTTL && !r.NATSStream {
			errs = append(errs, fmt.Errorf("ttl.enforce[%d].allowMsgTTL: needs natsStream: true", i))
		}
	}
	return errors.Join(errs...)
}

// Runner applies the rules after observation cycles, on its own goroutine:
// admin requests never delay an observation. Safe for concurrent use.
type Runner struct {
	policies *quota.Policies
	rules    map[string]PolicyRule
	movers   map[string]*KafkaMover
	streams  map[string]*StreamEnforcer
	log      *slog.Logger
	// StreamEvery is how often a stream's configuration is checked;
	// MoveEvery how often one group's offsets may be moved.
	StreamEvery, MoveEvery time.Duration

	mu      sync.Mutex
	pending map[string]cycle
	kick    chan struct{}
	stop    context.CancelFunc
	wg      sync.WaitGroup

	lastStream map[string]time.Time
	lastMove   map[lag.Target]time.Time
}

type cycle struct {
	now    time.Time
	states []lag.State
}

// NewRunner returns a runner; movers and streams are keyed by cluster name.
func NewRunner(policies *quota.Policies, rules []PolicyRule, movers map[string]*KafkaMover, streams map[string]*StreamEnforcer, log *slog.Logger) *Runner {
	m := map[string]PolicyRule{}
	for _, r := range rules {
		m[r.Policy] = r
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{policies: policies, rules: m, movers: movers, streams: streams, log: log,
		StreamEvery: time.Minute, MoveEvery: 10 * time.Second,
		pending: map[string]cycle{}, kick: make(chan struct{}, 1), stop: func() {},
		lastStream: map[string]time.Time{}, lastMove: map[lag.Target]time.Time{}}
}

// Enabled reports whether any rule asks for anything.
func (r *Runner) Enabled() bool { return len(r.rules) > 0 }

// OnCycle hands the runner a cluster's newest states; it never blocks.
func (r *Runner) OnCycle(cluster string, now time.Time, states []lag.State) {
	if !r.Enabled() {
		return
	}
	r.mu.Lock()
	r.pending[cluster] = cycle{now, states}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Start runs the runner's goroutine until Close.
func (r *Runner) Start(ctx context.Context) {
	if !r.Enabled() {
		return
	}
	ctx, r.stop = context.WithCancel(ctx)
	r.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.kick:
				r.mu.Lock()
				work := r.pending
				r.pending = map[string]cycle{}
				r.mu.Unlock()
				for cluster, c := range work {
					r.enforce(ctx, cluster, c)
				}
			}
		}
	})
}

// Close stops the goroutine and waits for it. Idempotent.
func (r *Runner) Close() {
	r.stop()
	r.wg.Wait()
}

func (r *Runner) enforce(ctx context.Context, cluster string, c cycle) {
	for _, st := range c.states {
		p, ok := r.policies.Match(st.Target)
		if !ok {
			continue
		}
		rule, ok := r.rules[p.Name]
		if !ok {
			continue
		}
		switch st.Target.Kind {
		case lag.KindKafka:
			m := r.movers[cluster]
			// Only an empty group, only past the hard age, and not
			// again for the same group before MoveEvery.
			if !rule.KafkaOffsetMove || m == nil || st.Members != 0 || st.HeadAge <= p.HardAge || c.now.Sub(r.lastMove[st.Target]) < r.MoveEvery {
				continue
			}
			r.lastMove[st.Target] = c.now
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := m.Enforce(cctx, st.Target.Group, st.Target.Topic, p.MaxAge, p.HardAge, !rule.Apply, c.now)
			cancel()
			// The mover logs each partition it moves (or would move).
			if err != nil && ctx.Err() == nil {
				r.log.Warn("ttl: offset move not made", "target", st.Target.String(), "err", err)
			}
		case lag.KindNATS:
			se := r.streams[cluster]
			key := cluster + "/" + st.Target.Topic
			if !rule.NATSStream || se == nil || c.now.Sub(r.lastStream[key]) < r.StreamEvery {
				continue
			}
			r.lastStream[key] = c.now
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := se.Enforce(cctx, StreamSpec{Stream: st.Target.Topic, MaxAge: DesiredMaxAge(p.MaxAge, p.HardAge), AllowMsgTTL: rule.AllowMsgTTL}, !rule.Apply)
			cancel()
			// The enforcer logs each drift and update itself.
			if err != nil && ctx.Err() == nil {
				r.log.Warn("ttl: stream check failed", "cluster", cluster, "stream", st.Target.Topic, "err", err)
			}
		}
	}
}
