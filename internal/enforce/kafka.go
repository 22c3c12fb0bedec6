package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaMoverConfig configures a [KafkaMover]. The zero value is valid.
type KafkaMoverConfig struct {
	// Cluster names the cluster in logs and metric labels. Default "".
	Cluster string
	// Logger receives one line per partition moved (or that would be, in
	// dry run). Nil: discard.
	Logger *slog.Logger
	// Metrics counts moves and skipped records. Nil: none.
	Metrics *Metrics
}

// KafkaMover advances the committed offsets of empty consumer groups past
// dead records. It is safe for concurrent use (calls for the same group
// should not overlap: the daemon's cycle runs them one at a time).
type KafkaMover struct {
	adm *kadm.Client
	cfg KafkaMoverConfig
	log *slog.Logger
}

// NewKafkaMover returns a mover that talks to the cluster through cl. The
// caller owns cl (and closes it after the mover's last call).
func NewKafkaMover(cl *kgo.Client, cfg KafkaMoverConfig) *KafkaMover {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KafkaMover{adm: kadm.NewClient(cl), cfg: cfg, log: log}
}

// Move is what one [KafkaMover.Enforce] call found and did.
type Move struct {
	Cluster, Group, Topic string
	// At is the now the call judged ages at.
	At time.Time
	// MaxAge and HardAge as used (HardAge defaults to MaxAge).
	MaxAge, HardAge time.Duration
	// DryRun: nothing was committed, Partitions say what would be.
	DryRun bool
	// Applied: the new offsets were committed (for every partition whose
	// Err is nil).
	Applied bool
	// Members is the group's member count at the last check; State the
	// broker's group state then ("Empty", "Stable", "Dead" for a group the
	// broker does not know, ...).
	Members int
	State   string
	// Partitions lists every partition of the topic for which the group
	// has a committed offset, by partition number.
	Partitions []PartitionMove
	// Skipped is the sum of Partitions[].Skipped: offsets committed past
	// (or that would be, in dry run).
	Skipped int64
}

// PartitionMove is one partition's reading and decision. Offsets are
// Kafka offsets; -1 means unknown.
type PartitionMove struct {
	Partition int32
	// Committed is the group's committed offset before the call.
	Committed int64
	// LogStart and End are the partition's first and next offsets (End is
	// the high watermark).
	LogStart, End int64
	// HardOffset is the first offset whose timestamp is at or after
	// At - HardAge (End when there is none): the head is older than the
	// hard limit when max(Committed, LogStart) < HardOffset.
	HardOffset int64
	// Target is the first offset whose timestamp is at or after
	// At - MaxAge (End when there is none): the first record younger than
	// maxAge.
	Target int64
	// Move: the committed offset is (or would be) set to Target.
	Move bool
	// Skipped is Target - max(Committed, LogStart) when Move: the offsets
	// that will never be consumed.
	Skipped int64
	// Why explains the decision in words, for logs and dry-run reports.
	Why string
	// Err is the broker's error for this partition (listing or commit).
	Err error
}

// Enforce moves group's committed offsets on topic past dead records:
// every partition whose oldest unconsumed record is older than hardAge at
// now (hardAge 0 means maxAge) gets its committed offset advanced to the
// first record younger than maxAge (ListOffsets by timestamp; the end of
// the partition when there is none). Partitions whose head is within the
// hard limit, or that the group never committed, are left alone. Offsets
// only move forward.
//
// It refuses, with an error wrapping [ErrGroupActive], a group that has
// members: it checks before reading offsets and again right before
// committing, and the broker itself rejects an offset commit from outside
// a non-empty group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
// REBALANCE_IN_PROGRESS, STALE_MEMBER_EPOCH), which also maps to
// ErrGroupActive. With dryRun it reads and decides but commits nothing.
// Every move, or would-be move, is logged, and counted in [Metrics].
//
// The returned Move is filled as far as the call got. Errors: ErrGroupActive,
// ErrInvalidArgument, or the wrapped broker/request error.
func (m *KafkaMover) Enforce(ctx context.Context, group, topic string, maxAge, hardAge time.Duration, dryRun bool, now time.Time) (Move, error) {
	if hardAge == 0 {
		hardAge = maxAge
	}
	mv := Move{Cluster: m.cfg.Cluster, Group: group, Topic: topic, At: now, MaxAge: maxAge, HardAge: hardAge, DryRun: dryRun}
	var bad []error
	if group == "" || topic == "" {
		bad = append(bad, fmt.Errorf("%w: group and topic are required", ErrInvalidArgument))
	}
	if maxAge <= 0 {
		bad = append(bad, fmt.Errorf("%w: maxAge must be > 0, got %v", ErrInvalidArgument, maxAge))
	}
	if hardAge < maxAge {
		bad = append(bad, fmt.Errorf("%w: hardAge must be 0 or >= maxAge (%v), got %v", ErrInvalidArgument, maxAge, hardAge))
	}
	if len(bad) > 0 {
		return mv, errors.Join(bad...)
	}

	if err := m.checkEmpty(ctx, &mv); err != nil {
		return mv, err
	}
	if err := m.plan(ctx, &mv); err != nil {
		return mv, err
	}
	if mv.Skipped == 0 {
		return mv, nil
	}
	if dryRun {
		for _, p := range mv.Partitions {
			if p.Move {
				m.log.Info("ttl: would move committed offset past dead records (dry run)", m.attrs(mv, p)...)
			}
		}
		m.cfg.Metrics.move(m.cfg.Cluster, topic, group, OutcomeDryRun, mv.Skipped)
		return mv, nil
	}
	// Check again right before committing: a consumer may have joined
	// since; the broker's own check below closes the remaining window.
	if err := m.checkEmpty(ctx, &mv); err != nil {
		return mv, err
	}
	offsets := make(kadm.Offsets)
	for _, p := range mv.Partitions {
		if p.Move {
			offsets.Add(kadm.Offset{Topic: topic, Partition: p.Partition, At: p.Target, LeaderEpoch: -1})
		}
	}
	resp, err := m.adm.CommitOffsets(ctx, group, offsets)
	if err != nil {
		if isMemberErr(err) {
			return mv, m.refused(mv, fmt.Errorf("%w: commit rejected: %w", ErrGroupActive, err))
		}
		return mv, fmt.Errorf("enforce: commit offsets of group %q: %w", group, err)
	}
	var errs []error
	var applied int64
	for i := range mv.Partitions {
		p := &mv.Partitions[i]
		if !p.Move {
			continue
		}
		r, ok := resp.Lookup(topic, p.Partition)
		switch {
		case !ok:
			p.Err = errors.New("no answer for this partition")
		case r.Err != nil:
			p.Err = r.Err
		}
		if p.Err != nil {
			if isMemberErr(p.Err) {
				p.Err = fmt.Errorf("%w: commit rejected: %w", ErrGroupActive, p.Err)
			}
			errs = append(errs, fmt.Errorf("enforce: commit %s[%d] for group %q: %w", topic, p.Partition, group, p.Err))
			continue
		}
		applied += p.Skipped
		m.log.Info("ttl: moved committed offset past dead records", m.attrs(mv, *p)...)
	}
	if applied > 0 {
		mv.Applied = true
		m.cfg.Metrics.move(m.cfg.Cluster, topic, group, OutcomeApplied, applied)
	} else if errors.Is(errors.Join(errs...), ErrGroupActive) {
		m.cfg.Metrics.move(m.cfg.Cluster, topic, group, OutcomeRefused, 0)
	}
	return mv, errors.Join(errs...)
}

func (m *KafkaMover) attrs(mv Move, p PartitionMove) []any {
	return []any{"cluster", mv.Cluster, "group", mv.Group, "topic", mv.Topic, "partition", p.Partition,
		"from", p.Committed, "to", p.Target, "skipped", p.Skipped, "maxAge", mv.MaxAge, "hardAge", mv.HardAge, "why", p.Why}
}

func (m *KafkaMover) refused(mv Move, err error) error {
	m.cfg.Metrics.move(m.cfg.Cluster, mv.Topic, mv.Group, OutcomeRefused, 0)
	m.log.Info("ttl: not moving offsets of a consumer group with members", "cluster", mv.Cluster,
		"group", mv.Group, "topic", mv.Topic, "members", mv.Members, "state", mv.State, "err", err)
	return err
}

// isMemberErr reports whether a commit error means the group has live
// members (the commit came from outside the group's generation).
func isMemberErr(err error) bool {
	return errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.StaleMemberEpoch) ||
		errors.Is(err, kerr.FencedMemberEpoch)
}

// checkEmpty fills mv.Members and mv.State and returns ErrGroupActive when
// the group has members, or an error when that cannot be known. It asks
// both protocols: DescribeGroups (classic groups) and ConsumerGroupDescribe
// (KIP-848 groups; Kafka 4 answers DescribeGroups for them with "Dead" or
// GROUP_ID_NOT_FOUND, other implementations with no members). A group
// neither knows is empty ("Dead"). When ConsumerGroupDescribe fails (a
// broker without KIP-848) a classic "Empty" answer is trusted; otherwise
// the failure is returned.
func (m *KafkaMover) checkEmpty(ctx context.Context, mv *Move) error {
	classic, err := m.adm.DescribeGroups(ctx, mv.Group)
	if err != nil {
		return fmt.Errorf("enforce: describe group %q: %w", mv.Group, err)
	}
	mv.Members, mv.State = 0, "Dead"
	classicEmpty := false
	if d, ok := classic[mv.Group]; ok {
		switch {
		case d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound):
			return fmt.Errorf("enforce: describe group %q: %w", mv.Group, d.Err)
		case d.Err == nil && d.State != "" && d.State != "Dead":
			mv.Members, mv.State = len(d.Members), d.State
			classicEmpty = d.State == "Empty" && len(d.Members) == 0
		}
	}
	if mv.Members > 0 {
		return m.refused(*mv, fmt.Errorf("%w: group %q is %s with %d member(s)", ErrGroupActive, mv.Group, mv.State, mv.Members))
	}
	cons, err := m.adm.DescribeConsumerGroups(ctx, mv.Group)
	if err != nil {
		if classicEmpty {
			return nil
		}
		return fmt.Errorf("enforce: describe consumer group %q: %w", mv.Group, err)
	}
	d, ok := cons[mv.Group]
	switch {
	case !ok || errors.Is(d.Err, kerr.GroupIDNotFound):
		return nil // not a KIP-848 group
	case d.Err != nil:
		return fmt.Errorf("enforce: describe consumer group %q: %w", mv.Group, d.Err)
	}
	mv.Members, mv.State = len(d.Members), d.State
	if mv.Members > 0 {
		return m.refused(*mv, fmt.Errorf("%w: group %q is %s with %d member(s)", ErrGroupActive, mv.Group, mv.State, mv.Members))
	}
	return nil
}

// plan reads the committed, start, end and by-time offsets and decides per
// partition.
func (m *KafkaMover) plan(ctx context.Context, mv *Move) error {
	committed, err := m.adm.FetchOffsets(ctx, mv.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // no group, no commits
	}
	if err != nil {
		return fmt.Errorf("enforce: fetch committed offsets of group %q: %w", mv.Group, err)
	}
	var commits []kadm.OffsetResponse
	for _, r := range committed[mv.Topic] {
		if r.Err == nil && r.At >= 0 {
			commits = append(commits, r)
		}
	}
	if len(commits) == 0 {
		return nil
	}
	sort.Slice(commits, func(i, j int) bool { return commits[i].Partition < commits[j].Partition })
	list := func(what string, f func() (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
		l, err := f()
		if err != nil {
			return nil, fmt.Errorf("enforce: list %s offsets of %q: %w", what, mv.Topic, err)
		}
		return l, nil
	}
	starts, err := list("start", func() (kadm.ListedOffsets, error) { return m.adm.ListStartOffsets(ctx, mv.Topic) })
	if err != nil {
		return err
	}
	ends, err := list("end", func() (kadm.ListedOffsets, error) { return m.adm.ListEndOffsets(ctx, mv.Topic) })
	if err != nil {
		return err
	}
	hards, err := list("by-time", func() (kadm.ListedOffsets, error) {
		return m.adm.ListOffsetsAfterMilli(ctx, mv.At.Add(-mv.HardAge).UnixMilli(), mv.Topic)
	})
	if err != nil {
		return err
	}
	targets, err := list("by-time", func() (kadm.ListedOffsets, error) {
		return m.adm.ListOffsetsAfterMilli(ctx, mv.At.Add(-mv.MaxAge).UnixMilli(), mv.Topic)
	})
	if err != nil {
		return err
	}
	for _, c := range commits {
		p := PartitionMove{Partition: c.Partition, Committed: c.At, LogStart: -1, End: -1, HardOffset: -1, Target: -1}
		get := func(l kadm.ListedOffsets, dst *int64) {
			o, ok := l.Lookup(mv.Topic, c.Partition)
			switch {
			case !ok:
				p.Err = errors.Join(p.Err, errors.New("partition not listed"))
			case o.Err != nil:
				p.Err = errors.Join(p.Err, o.Err)
			default:
				*dst = o.Offset
			}
		}
		get(starts, &p.LogStart)
		get(ends, &p.End)
		get(hards, &p.HardOffset)
		get(targets, &p.Target)
		from := max(p.Committed, p.LogStart)
		switch {
		case p.Err != nil:
			p.Why = "offsets unknown: " + p.Err.Error()
		case from >= p.End:
			p.Why = "caught up"
		case from >= p.HardOffset:
			p.Why = fmt.Sprintf("oldest unconsumed record (offset %d) is within the hard age %v", from, mv.HardAge)
		case p.Target <= from:
			p.Why = "no record younger than maxAge after the committed offset" // not reachable with monotonic by-time answers
		default:
			p.Move, p.Skipped = true, p.Target-from
			p.Why = fmt.Sprintf("oldest unconsumed record (offset %d) is older than the hard age %v; first record younger than maxAge %v is at offset %d",
				from, mv.HardAge, mv.MaxAge, p.Target)
			mv.Skipped += p.Skipped
		}
		mv.Partitions = append(mv.Partitions, p)
	}
	return nil
}
