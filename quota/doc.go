// Package quota turns lag into producer quotas: a controller sizes each
// queue in time and turns what it sees into an allowed produce rate and a
// signal, an allocator splits that rate across the producers of a topic, and
// a lease book turns the split into versioned, expiring leases.
//
// The pieces, in the order data flows through them:
//
//   - [Policy] says what the consumers of a target can bear (MaxAge, the
//     deadline they really use; an optional HardAge; a floor; producers with
//     weights and [Criticality]; advise or enforce). [Policies] matches
//     targets to policies by anchored name patterns.
//   - [Controller] folds successive [lag.State] values of each target into a
//     [Decision]: the allowed total produce rate of the target (messages per
//     second, +Inf when unlimited) and a [Signal] with a retry-after hint.
//     The control law and why it is stable are in docs/quota-control.md.
//   - [CombineTopic] takes the minimum over the consumer groups that read one
//     topic into a [TopicDecision]: a producer's quota for a topic is the
//     tightest of its readers'.
//   - [Allocator] (default [PriorityFair]) splits a topic's rate across its
//     producers: strict priority across criticalities, weighted max-min fair
//     within one, floors honoured, unused share redistributed.
//   - [LeaseBook] keeps each producer's demand report and turns grants into
//     [Lease] values with a version that moves only on material change, an
//     expiry, and a jittered refresh hint.
//
// The package is pure: it imports only the standard library,
// github.com/lagbridge/lagbridge/lag and github.com/lagbridge/lagbridge/contract
// (the vocabulary: [Criticality] and [Signal] are contract's), starts no
// goroutines, does no I/O and never reads the clock; every function that
// needs the time takes now time.Time. The publishers (HTTP protocol, NATS KV, Kafka client
// quotas) are built on its types elsewhere and must not be imported from
// here. A test enforces the import rule.
package quota
