package leader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrFenced is returned for a write refused because another replica took
// leadership over (a higher epoch holds the fence) or this replica's lease
// ran out before the write could start.
var ErrFenced = errors.New("fenced: another replica leads")

// epochKey carries the epoch of the lease a write is made under, leaseKey
// its end.
type (
	epochKey struct{}
	leaseKey struct{}
)

// leaseHolder is an elector with a local lease (Kafka, NATS).
type leaseHolder interface {
	leaseEnd(now time.Time) (epoch int64, until time.Time, ok bool)
}

// Fence bounds a leader's writes by its lease: the returned context ends
// when the local lease does (it ends a fifth of the session timeout
// before another replica may lead, see Config.Session), and carries the
// epoch (EpochOf) for writers that the broker can fence (KVFence). Every
// broker client checks its context right before it sends a request, so a
// write that would start after the lease ran out (the replica was paused,
// or the publish ran long) is not sent; one sent just before lands within
// the margin. ok is false, and ctx returned as is, when e does not lead at
// now. An elector without a lease (Single) always leads, unbounded and
// without an epoch. Call the CancelFunc when done.
func Fence(ctx context.Context, e Elector, now time.Time) (context.Context, context.CancelFunc, bool) {
	h, ok := e.(leaseHolder)
	if !ok {
		_, lead := e.Leading(now)
		return ctx, func() {}, lead
	}
	epoch, until, lead := h.leaseEnd(now)
	if !lead {
		return ctx, func() {}, false
	}
	ctx, cancel := context.WithDeadlineCause(WithLease(ctx, epoch, until), until,
		fmt.Errorf("%w: the lease of epoch %d ran out at %s", ErrFenced, epoch, until.Format(time.RFC3339Nano)))
	return ctx, cancel, true
}

// WithEpoch returns ctx carrying epoch, as Fence does, without a
// deadline: for a writer whose leadership is checked elsewhere.
func WithEpoch(ctx context.Context, epoch int64) context.Context {
	return context.WithValue(ctx, epochKey{}, epoch)
}

// EpochOf returns the epoch Fence put in ctx; false for a context that
// did not come from Fence (a follower's writes, a daemon without
// replicas).
func EpochOf(ctx context.Context) (int64, bool) {
	e, ok := ctx.Value(epochKey{}).(int64)
	return e, ok
}

// WithLease returns ctx carrying epoch and the end of its lease, as Fence
// does, without a deadline.
func WithLease(ctx context.Context, epoch int64, until time.Time) context.Context {
	return context.WithValue(WithEpoch(ctx, epoch), leaseKey{}, until)
}

// LeaseOf returns the end of the lease Fence put in ctx (the context's
// deadline may come sooner); false for a context that did not come from
// Fence (WithEpoch's included).
func LeaseOf(ctx context.Context) (time.Time, bool) {
	until, ok := ctx.Value(leaseKey{}).(time.Time)
	return until, ok
}

// leaseEnd implements leaseHolder.
func (l *lease) leaseEnd(now time.Time) (int64, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.until, l.held && now.Before(l.until)
}

// FenceKey is the key of a KV bucket that names the epoch whose leader
// may write the bucket. It has no dot, so no lease key (always
// <producer>.<topic> or <kind>.<producer>) can be it. A bucket of one
// deployment (lagbridge_leases_<name>) is fenced on it; the quota KV,
// which deployments may share, on DeploymentFenceKey, and earlier
// versions fenced it on FenceKey too.
const FenceKey = "lagbridge-fence"

// DeploymentFenceKey is the fence key of the deployment (ha.name) name in
// a bucket that several deployments may share: "lagbridge-fence/<name>".
// No lease key has a slash (quotaproto.KVKey escapes it), nor FenceKey.
func DeploymentFenceKey(name string) string { return FenceKey + "/" + name }

// KVFence makes the broker refuse a deposed leader's writes to a NATS KV
// bucket. A leader first takes the bucket: it writes its epoch under its
// fence key (FenceKey, or DeploymentFenceKey), by compare-and-set, unless a
// higher epoch holds it. Each of its writes then expects the fence key's
// last revision to still be the one it wrote (the
// Nats-Expected-Last-Subject-Sequence header, checked by the server
// against the fence key's subject); the next leader's take changes that
// revision, so the server refuses every later write of the old one, even
// one sent after a pause long past its lease. Not safe for concurrent
// use: one publisher owns it.
type KVFence struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // the subject prefix of the bucket's keys
	key    string // the fence key
	// legacy, when set, is the fence key earlier versions took
	// (FenceKey): each take also supersedes it, while it exists.
	legacy string
	epoch  int64  // the epoch that took the fence; 0: not taken
	rev    uint64 // the revision of the fence key written by the take
}

// NewKVFence returns the fence of the bucket kv (created by the caller, in
// the account's default JetStream domain) on FenceKey: for a bucket only
// one deployment writes.
func NewKVFence(js jetstream.JetStream, kv jetstream.KeyValue) *KVFence {
	return &KVFence{js: js, kv: kv, prefix: "$KV." + kv.Bucket() + ".", key: FenceKey}
}

// NewDeploymentKVFence returns the fence of the deployment name in the
// bucket kv, which other deployments may share: its leaders take
// DeploymentFenceKey(name), so the leaders of two deployments never fence
// each other out. Each take also supersedes FenceKey when the bucket has
// it (an earlier version's replicas took it): it writes there the higher
// of the epoch held and its own, so that the server refuses the writes of
// a leader of an earlier version from then on, and such a leader cannot
// take that key back. FenceKey is never created.
func NewDeploymentKVFence(js jetstream.JetStream, kv jetstream.KeyValue, name string) *KVFence {
	f := NewKVFence(js, kv)
	f.key, f.legacy = DeploymentFenceKey(name), FenceKey
	return f
}

// Key returns the fence key.
func (f *KVFence) Key() string { return f.key }

// Put writes value under key for the leader of epoch, taking the fence
// first if that epoch has not. It returns the key's new revision;
// ErrFenced (wrapped) when a higher epoch took the bucket.
func (f *KVFence) Put(ctx context.Context, epoch int64, key string, value []byte) (uint64, error) {
	return f.write(ctx, epoch, key, value, false)
}

// Delete deletes key (a delete marker, as KeyValue.Delete writes) for the
// leader of epoch, as Put writes.
func (f *KVFence) Delete(ctx context.Context, epoch int64, key string) error {
	_, err := f.write(ctx, epoch, key, nil, true)
	return err
}

func (f *KVFence) write(ctx context.Context, epoch int64, key string, value []byte, del bool) (uint64, error) {
	if err := f.take(ctx, epoch); err != nil {
		return 0, err
	}
	m := natsgo.NewMsg(f.prefix + key)
	m.Data = value
	if del {
		m.Header.Set("KV-Operation", "DEL")
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(f.rev, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, f.prefix+f.key)
	ack, err := f.js.PublishMsg(ctx, m)
	if wrongRevision(err) {
		f.epoch, f.rev = 0, 0 // taken by someone else: look again next time
		return 0, fmt.Errorf("%w: %s in bucket %s: epoch %d no longer holds the fence %s", ErrFenced, key, f.kv.Bucket(), epoch, f.key)
	}
	if err != nil {
		return 0, fmt.Errorf("%s in bucket %s: %w", key, f.kv.Bucket(), err)
	}
	return ack.Sequence, nil
}

// take writes epoch under the fence key unless it holds it already; a
// higher epoch there refuses it. It then supersedes the legacy key.
func (f *KVFence) take(ctx context.Context, epoch int64) error {
	if f.epoch == epoch && f.rev != 0 {
		return nil
	}
	val := []byte(strconv.FormatInt(epoch, 10))
	e, err := f.kv.Get(ctx, f.key)
	var rev uint64
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = f.kv.Create(ctx, f.key, val)
	case err != nil:
		return fmt.Errorf("reading the fence %s of bucket %s: %w", f.key, f.kv.Bucket(), err)
	default:
		held, perr := strconv.ParseInt(string(e.Value()), 10, 64)
		if perr == nil && held > epoch {
			return fmt.Errorf("%w: bucket %s is held by epoch %d, above %d (fence %s)", ErrFenced, f.kv.Bucket(), held, epoch, f.key)
		}
		rev, err = f.kv.Update(ctx, f.key, val, e.Revision())
	}
	if errors.Is(err, jetstream.ErrKeyExists) || wrongRevision(err) {
		return fmt.Errorf("%w: bucket %s was taken while epoch %d took it (fence %s)", ErrFenced, f.kv.Bucket(), epoch, f.key)
	}
	if err != nil {
		return fmt.Errorf("taking the fence %s of bucket %s: %w", f.key, f.kv.Bucket(), err)
	}
	if f.legacy != "" {
		if err := f.supersede(ctx, epoch); err != nil {
			return err
		}
	}
	f.epoch, f.rev = epoch, rev
	return nil
}

// supersede rewrites the legacy fence key, when the bucket has it, with
// the higher of the epoch it holds and epoch: its revision changes, so the
// server refuses the later writes of the earlier version's leader that
// took it, and its epoch never falls, so no such leader takes it back.
// Until it succeeds the fence is not taken (the write is not sent).
func (f *KVFence) supersede(ctx context.Context, epoch int64) error {
	for range 3 {
		e, err := f.kv.Get(ctx, f.legacy)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the legacy fence %s of bucket %s: %w", f.legacy, f.kv.Bucket(), err)
		}
		val := epoch
		if held, perr := strconv.ParseInt(string(e.Value()), 10, 64); perr == nil && held > val {
			val = held
		}
		_, err = f.kv.Update(ctx, f.legacy, []byte(strconv.FormatInt(val, 10)), e.Revision())
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !wrongRevision(err) {
			return fmt.Errorf("superseding the legacy fence %s of bucket %s: %w", f.legacy, f.kv.Bucket(), err)
		}
	}
	return fmt.Errorf("superseding the legacy fence %s of bucket %s: it changed three times in a row", f.legacy, f.kv.Bucket())
}

// wrongRevision reports whether err is the server's refusal of an
// expected last revision (code 10071, or 10164 on replicated streams).
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
