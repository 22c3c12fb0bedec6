// Package publish puts the daemon's quotas where producers and brokers see
// them without the SDK's HTTP protocol: a NATS KV bucket of leases, and
// Kafka broker-native client quotas (producer_byte_rate per client-id) for
// producers that never imported the SDK. It holds every part of that:
// the [Publisher]s the engine's publishing goroutine calls with every
// change (the adapters and the byte-rate policy, publishers.go), the broker
// I/O they use (KV, ClientQuotas, RecordSizes, Steering), and the quota
// protocol's encoding of leases that the HTTP push shares with them ([Set],
// [Wire], [Fingerprint], [Versions]).
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// QuotaKey is the Kafka client quota lagbridge sets.
const QuotaKey = "producer_byte_rate"

// Every client quota lagbridge sets is a whole number of bytes per second
// congruent to MarkerResidue modulo MarkerModulus (41 mod 64). That is how
// lagbridge recognises its own quotas, across restarts and without a state
// store, so that it clears what it set and never touches a quota an
// operator set: the residue is odd, so no round-number quota (a multiple of
// 1000 or 1024, or any even number) can be taken for one of lagbridge's.
// (Kafka refuses fractional producer_byte_rate values, so the marker cannot
// hide in a fraction.) The cost is a 64 B/s granularity.
const (
	MarkerModulus = 64
	MarkerResidue = 41
)

// IsOurs reports whether a producer_byte_rate value was set by lagbridge.
func IsOurs(v float64) bool {
	return v == math.Trunc(v) && v >= 0 && math.Mod(v, MarkerModulus) == MarkerResidue
}

// Marked returns the value lagbridge stores for a rate: rounded down to a
// multiple of 64 bytes per second, plus 41 (so at least 41 B/s).
func Marked(bytesPerSecond float64) float64 {
	return math.Floor(max(bytesPerSecond, 0)/MarkerModulus)*MarkerModulus + MarkerResidue
}

// ClientQuotas keeps a Kafka cluster's producer_byte_rate client quotas in
// line with what the daemon wants. It is not safe for concurrent use: the
// quota cycle owns it.
type ClientQuotas struct {
	adm *kadm.Client
	log *slog.Logger
	// Tolerance is the relative change below which a set quota is left
	// as is (no churn on the broker for noise). Default 0.02.
	Tolerance float64
	// Owns, when set, names the client-ids this daemon governs (the
	// producers its policies list). A marked quota of any other client-id
	// belongs to another lagbridge deployment on the same cluster (or to
	// a producer no policy lists any more): Apply never clears it, and
	// names it once in the log. nil: every marked quota is this daemon's.
	Owns func(clientID string) bool

	foreign map[string]bool // marked quotas of others, already logged
	// logged is the value each client-id's quota was last set to in a
	// line at INFO (logQuotaSet); forgotten with a clear and a Reset.
	logged map[string]float64
}

// logFactor is how far a client-id's stored quota must move from the
// value last logged at INFO to be logged at INFO again (up or down, a
// factor of it): smaller moves are logged at DEBUG. A steered quota moves
// at most every interval while its grant moves (57 lines at INFO in 85 s
// for one client-id, session 30); the lines an operator reads are the
// first quota, a limit from unlimited, unlimited again, a clear, and a
// move of this factor.
const logFactor = 2

// logQuotaSet logs the write of value (stored, marked) for id, wanted
// bytes per second, previously stored as was (has: any), at INFO when it
// crosses a boundary an operator reads (logFactor), else at DEBUG.
func (c *ClientQuotas) logQuotaSet(id string, value, wanted, was float64, has bool, issued time.Time) {
	// Whole bytes (slog writes a float64 of 10^12 as 1.1e+12), and
	// the ceiling said for what it is.
	attrs := []any{"client_id", id, QuotaKey, int64(value), "wanted", int64(math.Floor(wanted))}
	if wanted >= Ceiling {
		attrs = append(attrs, "unlimited", true)
	}
	if has {
		attrs = append(attrs, "was", int64(was))
	}
	attrs = append(attrs, "issued", issued)
	last, logged := c.logged[id]
	level := slog.LevelDebug
	switch {
	case !logged, // the first this process sets
		!has,                                    // the broker held none (unlimited): someone else cleared it
		(last >= Ceiling) != (value >= Ceiling), // limited from unlimited, or lifted
		value > last*logFactor, value*logFactor < last:
		level = slog.LevelInfo
		if c.logged == nil {
			c.logged = map[string]float64{}
		}
		c.logged[id] = value
	}
	c.log.Log(context.Background(), level, "kafka client quota set", attrs...)
}

// forgetLogged has the next write of every client-id logged at INFO.
func (c *ClientQuotas) forgetLogged() { c.logged = nil }

// NewClientQuotas uses cl (the observer's admin client).
func NewClientQuotas(cl *kgo.Client, log *slog.Logger) *ClientQuotas {
	return &ClientQuotas{adm: kadm.NewClient(cl), log: log, Tolerance: 0.02}
}

// Result says what Apply did.
type Result struct {
	// Set and Removed name the client-ids whose quota was set or cleared.
	Set, Removed []string
	// Conflicts names client-ids that have a producer_byte_rate lagbridge
	// did not set: they were left alone.
	Conflicts []string
	// Foreign names client-ids with a marked quota this daemon does not
	// own (ClientQuotas.Owns): left alone.
	Foreign []string
}

// Current returns every client-id's producer_byte_rate on the cluster.
func (c *ClientQuotas) Current(ctx context.Context) (map[string]float64, error) {
	described, err := c.adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 2}})
	if err != nil {
		return nil, fmt.Errorf("describe client quotas: %w", err)
	}
	cur := map[string]float64{}
	for _, d := range described {
		if len(d.Entity) != 1 || d.Entity[0].Type != "client-id" || d.Entity[0].Name == nil {
			continue // defaults and user/ip entities are never ours
		}
		for _, v := range d.Values {
			if v.Key == QuotaKey {
				cur[*d.Entity[0].Name] = v.Value
			}
		}
	}
	return cur, nil
}

// Apply makes the cluster's client quotas match want (client-id to bytes
// per second): it sets missing or changed ones, clears the ones lagbridge set
// that want no longer holds, and leaves every quota it did not set alone.
func (c *ClientQuotas) Apply(ctx context.Context, want map[string]float64) (Result, error) {
	var res Result
	cur, err := c.Current(ctx)
	if err != nil {
		return res, err
	}
	var entries []kadm.AlterClientQuotaEntry
	entity := func(id string) kadm.ClientQuotaEntity {
		return kadm.ClientQuotaEntity{{Type: "client-id", Name: &id}}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		target := Marked(want[id])
		v, has := cur[id]
		switch {
		case has && !IsOurs(v):
			res.Conflicts = append(res.Conflicts, id)
		case has && math.Abs(v-target) <= c.Tolerance*target:
			// close enough: no churn
		default:
			entries = append(entries, kadm.AlterClientQuotaEntry{Entity: entity(id), Ops: []kadm.AlterClientQuotaOp{{Key: QuotaKey, Value: target}}})
			res.Set = append(res.Set, id)
		}
	}
	for id, v := range cur {
		if _, wanted := want[id]; wanted || !IsOurs(v) {
			continue
		}
		if c.Owns != nil && !c.Owns(id) {
			res.Foreign = append(res.Foreign, id)
			continue
		}
		entries = append(entries, kadm.AlterClientQuotaEntry{Entity: entity(id), Ops: []kadm.AlterClientQuotaOp{{Key: QuotaKey, Remove: true}}})
		res.Removed = append(res.Removed, id)
	}
	sort.Strings(res.Removed)
	sort.Strings(res.Foreign)
	c.logForeign(res.Foreign)
	if len(entries) == 0 {
		return res, nil
	}
	// The log lines below are written when the answer is read; issued is
	// when the write was handed to the client (under the lease's fence,
	// see internal/app's gated), which is what orders it against a lease
	// lost or a process paused in between.
	issued := time.Now()
	altered, err := c.adm.AlterClientQuotas(ctx, entries)
	if err != nil {
		return Result{Conflicts: res.Conflicts}, fmt.Errorf("alter client quotas: %w", err)
	}
	var errs []error
	for _, a := range altered {
		if a.Err != nil {
			errs = append(errs, fmt.Errorf("client quota %s: %w (%s)", a.Entity, a.Err, a.ErrMessage))
		}
	}
	for _, id := range res.Set {
		was, has := cur[id]
		c.logQuotaSet(id, Marked(want[id]), want[id], was, has, issued)
	}
	for _, id := range res.Removed {
		delete(c.logged, id)
		c.log.Info("kafka client quota cleared", "client_id", id, "was", int64(cur[id]), "issued", issued)
	}
	return res, errors.Join(errs...)
}

// logForeign names, once each, the client-ids with a marked quota another
// deployment (or a removed policy) left.
func (c *ClientQuotas) logForeign(ids []string) {
	for _, id := range ids {
		if c.foreign[id] {
			continue
		}
		if c.foreign == nil {
			c.foreign = map[string]bool{}
		}
		c.foreign[id] = true
		c.log.Info("kafka client quota left alone: set by lagbridge for a client-id no policy of this daemon lists (another deployment's, or a removed producer's: clear it with kafka-configs.sh --alter --entity-type clients --entity-name ID --delete-config producer_byte_rate)", "client_id", id)
	}
}
