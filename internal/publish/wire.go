package publish

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// OpenReason is the reason of the open lease a producer gets for a topic
// name it reported that has no lease (no policy, nothing observed yet).
const OpenReason = "no policy or no observation for this topic: unlimited"

// Set converts producer's leases ls (sorted by topic) to the quota
// protocol's lease set at now, without a version (the engine numbers
// sets). A topic name on several clusters gets the strictest of its
// leases; every name of names that has no lease gets an open one
// (OpenReason) expiring after lifetime, so the SDK always has an answer.
// The set asks for a refresh after the shortest RefreshAfter of ls, or
// lifetime/3 when ls is empty. It does not modify ls.
func Set(producer string, ls []quota.Lease, names []string, now time.Time, lifetime time.Duration) quotaproto.LeaseSet {
	set := quotaproto.LeaseSet{Producer: producer, Leases: []quotaproto.Lease{}}
	// byName indexes set.Leases (indexes, not pointers: appends move it).
	byName := map[string]int{}
	refresh := time.Duration(0)
	for _, l := range ls {
		w := Wire(l)
		if i, ok := byName[w.Topic]; ok {
			// The same name on several clusters: the strictest wins.
			if stricter(w, set.Leases[i]) {
				set.Leases[i] = w
			}
			continue
		}
		byName[w.Topic] = len(set.Leases)
		set.Leases = append(set.Leases, w)
		if refresh == 0 || l.RefreshAfter < refresh {
			refresh = l.RefreshAfter
		}
	}
	for _, name := range names {
		if _, ok := byName[name]; !ok {
			byName[name] = len(set.Leases)
			set.Leases = append(set.Leases, quotaproto.Lease{Topic: name, Signal: quotaproto.SignalOK,
				ExpiresAt: now.Add(lifetime), Reason: OpenReason})
		}
	}
	sort.Slice(set.Leases, func(i, j int) bool { return set.Leases[i].Topic < set.Leases[j].Topic })
	if refresh == 0 {
		refresh = lifetime / 3
	}
	set.RefreshAfterMs = refresh.Milliseconds()
	return set
}

// stricter reports whether a allows less than b (a nil rate is unlimited).
func stricter(a, b quotaproto.Lease) bool {
	ra, rb := math.Inf(1), math.Inf(1)
	if a.Rate != nil {
		ra = *a.Rate
	}
	if b.Rate != nil {
		rb = *b.Rate
	}
	return ra < rb
}

// Wire converts a lease to the protocol's form: an unlimited rate is
// left out (nil), the retry-after hint is in whole milliseconds, RuleNone
// is no rule ("").
func Wire(l quota.Lease) quotaproto.Lease {
	w := quotaproto.Lease{
		Topic: l.Topic.Name, Burst: l.Burst, Signal: l.Signal.String(), RetryAfterMs: l.RetryAfter.Milliseconds(),
		AvoidPartitions: slices.Clone(l.AvoidPartitions), Advisory: l.Advisory, Version: l.Version, ExpiresAt: l.Expires, Reason: l.Reason,
	}
	if l.Rule != quota.RuleNone {
		w.Rule = l.Rule.String()
	}
	for _, ps := range l.PartitionShares {
		w.PartitionShares = append(w.PartitionShares, quotaproto.PartitionShare{Partition: ps.Partition, Share: ps.Share})
	}
	if !l.IsUnlimited() {
		r := l.Rate
		w.Rate = &r
	}
	if t := l.Then; t != nil {
		w.Then = &quotaproto.LeasePlan{At: t.At, Rate: t.Rate, Burst: t.Burst}
	}
	return w
}

// Fingerprint identifies a set's content (its leases' topics and
// versions), not its expiries: two sets with one fingerprint differ at
// most in when they expire, so the engine keeps the set's version.
func Fingerprint(s quotaproto.LeaseSet) string {
	b := make([]byte, 0, 32*len(s.Leases))
	for _, l := range s.Leases {
		b = fmt.Appendf(b, "%s@%d;", l.Topic, l.Version)
	}
	return string(b)
}

// Versions hashes (FNV-64a) the versions of ls, in order, and the topic
// names a producer reported: what a set is built from. When it did not
// change since the set was last built, the set needs no rebuild.
func Versions(ls []quota.Lease, names []string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, l := range ls {
		binary.LittleEndian.PutUint64(b[:], l.Version)
		h.Write(b[:])
	}
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
