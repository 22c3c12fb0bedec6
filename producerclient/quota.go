package producerclient

import (
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// Quota is a topic's current quota as the producer enforces it.
type Quota struct {
	Topic string
	// Rate in messages per second; +Inf when unlimited.
	Rate float64
	// Burst is the bucket size (0 when unlimited).
	Burst int
	// Signal of the lease.
	Signal Signal
	// RetryAfter is the slow-down hint; 0 for none (also when the lease's
	// hint was garbled).
	RetryAfter time.Duration
	// AvoidPartitions lists partitions keyless Kafka records avoid (and
	// keyed ones bound for them are refused), sorted; the caller's copy.
	AvoidPartitions []int32
	// PartitionShares: of the partitions in AvoidPartitions, those that
	// still get a share of keyless Kafka records, and that share (see
	// AvoidPartitioner); sorted by partition, the caller's copy.
	PartitionShares []quotaproto.PartitionShare
	// Advisory leases are reported, not enforced.
	Advisory bool
	// FromLease is false when the safe quota applies (no lease yet, or the
	// last one expired); Closed is true when that safe quota is closed.
	FromLease, Closed bool
	// Version and ExpiresAt of the lease (zero for the safe quota);
	// Received is when it arrived.
	Version   uint64
	ExpiresAt time.Time
	Received  time.Time
	// Reason is the lease's reason in words.
	Reason string
	// Rule names the daemon's rule behind the lease ("drain",
	// "saturated", ...; see RejectError.Rule); "" for the safe quota.
	Rule string
}

// quota returns topic's current quota; ok is false for a topic the
// producer has not seen.
func (c *core) quota(name string) (Quota, bool) {
	t := (*c.topics.Load())[name]
	if t == nil {
		return Quota{}, false
	}
	v := t.view.Load()
	q := Quota{Topic: name, Rate: v.rate, Burst: v.burst, Signal: v.signal, RetryAfter: v.retryAfter,
		AvoidPartitions: slices.Clone(v.avoid), PartitionShares: slices.Clone(v.shares), Advisory: v.advisory, FromLease: v.fromLease, Closed: v.closed,
		Version: v.version, ExpiresAt: v.expires, Received: v.received, Reason: v.reason, Rule: v.rule}
	if math.IsInf(q.Rate, 1) {
		q.Burst = 0
	}
	return q, true
}
