package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/brokers"
	"github.com/lagbridge/lagbridge/lag"
)

// Errors returned by [Observer.Observe].
var (
	// ErrUnavailable wraps the cause when a cycle observed nothing at all:
	// no broker answered Metadata, or no broker answered ListGroups.
	ErrUnavailable = errors.New("kafka: cluster unavailable")
	// ErrClosed is returned by Observe after Close.
	ErrClosed = errors.New("kafka: observer closed")
)

// Observer reads consumer lag and head ages from one Kafka cluster.
//
// Observe serializes itself: concurrent calls run one after the other.
// Client and Close are safe for concurrent use. New starts no goroutine of
// its own (the kgo client it builds starts its own, stopped by Close);
// Observe starts goroutines for its parallel requests and waits for all of
// them before returning.
type Observer struct {
	cfg    Config
	cl     *kgo.Client
	adm    *kadm.Client
	groups brokers.Matcher
	topics brokers.Matcher

	decompressor kgo.Decompressor

	closeOnce sync.Once
	closed    atomic.Bool
	// owns, when set (SetOwns), selects the topics of this replica's
	// shards; nil: every topic the filter selects.
	owns atomic.Pointer[func(topic string) bool]
	// elsewhere holds, under a shard filter, the groups whose topics
	// were all outside the watched ones when last read: a cycle leaves
	// them out unless it is a full one (see shardRecheck). watchedSum
	// sums the hashes of the last cycle's watched topics; sinceFull
	// counts the cycles since the last full one. Guarded by mu.
	elsewhere  map[string]bool
	watchedSum uint64
	sinceFull  int

	mu    sync.Mutex // serializes Observe; guards everything below
	cycle uint64
	at    time.Time // this cycle's time, taken after the offsets are read
	heads map[string]*topicHeads
	known map[string]knownGroup
	// starve counts, per partition, the cycles in a row whose head fetch
	// left some wanted offset unread.
	starve map[tpKey]uint32
	// pending is the head-need buffer, reused from cycle to cycle.
	pending []pendingHead
	// offsets holds the committed offsets of the last cycle's groups,
	// refilled in place by fetchOffsets; offsetReqs the OffsetFetch
	// requests of each coordinator, rebuilt in place.
	offsets    map[string]*groupOffsets
	offsetReqs map[int32]*coordFetches
	// answerBudget is the most bytes one OffsetFetch answer is planned
	// to carry: a quarter of what the client reads from a broker at once
	// (kgo.BrokerMaxReadBytes, 100 MiB by default), leaving room for
	// groups that commit on more partitions than last cycle.
	answerBudget int
	// listReqs holds the two ListOffsets requests of each partition
	// leader, rebuilt in place.
	listReqs map[int32]*leaderLists
	// lastMeta is the broker that last answered Metadata, brokerIDs the
	// brokers it listed.
	lastMeta  int32
	brokerIDs []int32
	// keeps holds, per broker, whether it shows a classic member's last
	// assignment in PreparingRebalance (see keepsAssignments), and when
	// it was asked.
	keeps map[int32]keepsAnswer
	conns *brokerConns
}

type keepsAnswer struct {
	keeps bool
	at    time.Time
	conns uint64 // o.conns.get(id) when it was asked
}

// brokerConns counts the connections the client opened to each broker:
// a broker restarted (an upgrade, a rollback to 3.x) is reached on a new
// one, and its keepsAssignments answer is asked again. A kgo hook: safe
// for concurrent use.
type brokerConns struct {
	mu sync.Mutex
	n  map[int32]uint64
}

func (b *brokerConns) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		b.mu.Lock()
		b.n[meta.NodeID]++
		b.mu.Unlock()
	}
}

func (b *brokerConns) get(id int32) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[id]
}

// keepsRecheck is how long a broker's keepsAssignments answer is kept
// (an upgrade restarts a broker under the same node ID).
const keepsRecheck = 10 * time.Minute

// keepsAssignments says, from a broker's ApiVersions answer, whether it
// runs the group coordinator of Kafka 4.0 on (KIP-848's, the only one
// from 4.0 on), which describes a classic group's members with their last
// assignment in PreparingRebalance. Kafka 3.x's classic coordinator
// (GroupMetadata.summaryNoMetadata) describes them with none outside
// Stable: on Kafka 3.9.1 every member of a group in PreparingRebalance
// showed 0 bytes, on 4.3.1 its last assignment (docs/results.md, session
// 33). DescribeGroups v6 (KIP-1043) came with 4.0; ConsumerGroupHeartbeat
// does not tell them apart: 3.7-3.9 list it (v0) even with the classic
// coordinator only. A 3.x broker running the early new coordinator reads
// as 3.x: liveness unknown in the rebalance, the safe side.
func keepsAssignments(resp *kmsg.ApiVersionsResponse) bool {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == int16(kmsg.DescribeGroups) {
			return k.MaxVersion >= 6
		}
	}
	return false
}

// askKeeps asks each broker of ids for its ApiVersions, in parallel, and
// returns keepsAssignments of those that answered.
func (o *Observer) askKeeps(ctx context.Context, ids []int32) map[int32]bool {
	if len(ids) == 0 {
		return nil
	}
	answers := make([]*kmsg.ApiVersionsResponse, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			req := kmsg.NewPtrApiVersionsRequest()
			// v3 on: a broker refuses an empty software name
			// (INVALID_REQUEST); kgo's own handshake sends these.
			if nv := o.cl.OptValues(kgo.SoftwareNameAndVersion); len(nv) == 2 {
				req.ClientSoftwareName, _ = nv[0].(string)
				req.ClientSoftwareVersion, _ = nv[1].(string)
			}
			kresp, err := o.cl.Broker(int(id)).Request(ctx, req)
			if resp, ok := kresp.(*kmsg.ApiVersionsResponse); err == nil && ok && resp.ErrorCode == 0 {
				answers[i] = resp
			}
		})
	}
	wg.Wait()
	out := make(map[int32]bool, len(ids))
	for i, resp := range answers {
		if resp != nil {
			out[ids[i]] = keepsAssignments(resp)
		}
	}
	return out
}

// knownGroup is what the last good cycle saw of a group, used to report its
// pairs as stale when its coordinator does not answer.
type knownGroup struct {
	coordinator int32
	topics      []knownTopic
}

// watched returns kg without the topics this cycle's metadata lists as not
// watched (a topic of a shard this replica no longer observes); a topic
// the metadata no longer lists stays.
func (kg knownGroup) watched(topics map[string]*topicInfo) knownGroup {
	out := knownGroup{coordinator: kg.coordinator}
	for _, t := range kg.topics {
		if ti := topics[t.name]; ti == nil || ti.watched {
			out.topics = append(out.topics, t)
		}
	}
	return out
}

type knownTopic struct {
	name       string
	partitions int32
}

// New validates cfg, applies its defaults and builds the observer's client.
// It does not contact the cluster. opts are appended to the options built
// from cfg (so they win), for example kgo.WithLogger in tests and the demo.
//
// The error wraps [ErrInvalidConfig] when cfg is invalid.
func New(cfg Config, opts ...kgo.Opt) (*Observer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	groups, err := cfg.Groups.Compile()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	topics, err := cfg.Topics.Compile()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	kopts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	conns := &brokerConns{n: make(map[int32]uint64)}
	cl, err := kgo.NewClient(append(append(kopts, opts...), kgo.WithHooks(conns))...)
	if err != nil {
		return nil, fmt.Errorf("kafka: building client: %w", err)
	}
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(cfg.RequestTimeout.Milliseconds()))
	maxRead, _ := cl.OptValue(kgo.BrokerMaxReadBytes).(int32)
	return &Observer{
		cfg:    cfg,
		cl:     cl,
		adm:    adm,
		groups: groups,
		topics: topics,

		decompressor: kgo.DefaultDecompressor(),
		heads:        make(map[string]*topicHeads),
		known:        make(map[string]knownGroup),
		offsets:      make(map[string]*groupOffsets),
		offsetReqs:   make(map[int32]*coordFetches),
		listReqs:     make(map[int32]*leaderLists),
		keeps:        make(map[int32]keepsAnswer),
		conns:        conns,
		answerBudget: max(int(maxRead)/4, 1<<16),
	}, nil
}

// SetOwns narrows the observation to the topics for which owns returns
// true (this replica's shards, see internal/shard), from the next cycle
// on: every consumer group of such a topic is observed on it, no group on
// another topic, and a topic it leaves out leaves the samples as a deleted
// one does. nil restores every topic Config.Topics selects. owns is called
// from Observe and must be safe for concurrent use. Safe to call at any
// time.
//
// Under a filter a cycle describes and fetches the committed offsets of
// only the groups it has not seen yet or last saw on a watched topic; the
// others (all their topics elsewhere) are read again every 10 cycles, and
// every group whenever the watched topics change: a group that starts
// committing on a watched topic, having committed only elsewhere, is
// observed within 10 cycles.
func (o *Observer) SetOwns(owns func(topic string) bool) {
	if owns == nil {
		o.owns.Store(nil)
		return
	}
	o.owns.Store(&owns)
}

// Client returns the observer's admin client, shared with publishers that
// need one (client quotas, offset moves). It is closed by Close; callers
// must not close it.
func (o *Observer) Client() *kgo.Client { return o.cl }

// Close closes the client. It is idempotent and safe to call concurrently
// with Observe, which then fails with [ErrClosed] or a closed-client error.
func (o *Observer) Close() {
	o.closeOnce.Do(func() {
		o.closed.Store(true)
		o.cl.Close()
	})
}

// phase runs fns concurrently under one RequestTimeout and waits for all.
func (o *Observer) phase(ctx context.Context, fns ...func(context.Context)) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.RequestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, fn := range fns[1:] {
		wg.Go(func() { fn(ctx) })
	}
	fns[0](ctx)
	wg.Wait()
}

// topicInfo is one topic of this cycle's metadata with its offsets.
type topicInfo struct {
	name    string
	id      [16]byte
	err     string // topic-level metadata error
	watched bool
	needed  bool // some watched pair reads it this cycle
	parts   []partInfo
}

type partInfo struct {
	leader   int32
	err      string // metadata or ListOffsets error: offsets unknown
	logStart int64
	end      int64
	startOK  bool
	endOK    bool
}

// groupInfo is the describe result of one group.
type groupInfo struct {
	state   string
	members int
	topics  []string // subscribed or assigned, may repeat
	// assigned holds the topics some member is assigned a partition of
	// (KIP-848: now or as its target), may repeat. opaque is set when a
	// member's assignment could not be read (a classic group of another
	// protocol type than "consumer", a malformed assignment).
	assigned  []string
	opaque    bool
	described bool
	// coordinator is the broker that described a classic group (kgo's
	// cached coordinator, not necessarily the one that listed it).
	coordinator int32
}

// live says whether a member of the group is assigned a partition of
// topic: LiveUnknown when the group could not be described or an
// assignment could not be read, LiveNo when no member holds the topic.
func (gi *groupInfo) live(topic string) lag.Liveness {
	switch {
	case slices.Contains(gi.assigned, topic):
		return lag.LiveYes
	case !gi.described || gi.opaque:
		return lag.LiveUnknown
	}
	return lag.LiveNo
}

// Observe runs one observation cycle and returns one sample per watched
// (group, topic) pair, sorted by group then topic, each with its partitions
// in partition order. See the package doc for what is measured, the cost of
// a cycle and how failures are reported.
//
// It returns an error wrapping [ErrUnavailable] only when nothing could be
// observed, [ErrClosed] after Close, or ctx's error when ctx ends first.
func (o *Observer) Observe(ctx context.Context) ([]lag.Sample, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed.Load() {
		return nil, ErrClosed
	}
	o.cycle++

	// Phase 1: metadata.
	var (
		meta    *kmsg.MetadataResponse
		metaErr error
	)
	o.phase(ctx, func(ctx context.Context) { meta, metaErr = o.metadata(ctx) })
	if err := o.stopped(ctx); err != nil {
		return nil, err
	}
	if metaErr != nil {
		return nil, fmt.Errorf("%w: metadata: %w%s", ErrUnavailable, metaErr, notKafkaHint(metaErr))
	}
	// Phase 2: the group list, from every broker.
	var lg listing
	o.phase(ctx, func(ctx context.Context) { lg = o.listGroups(ctx, meta.Brokers) })
	if err := o.stopped(ctx); err != nil {
		return nil, err
	}
	if len(meta.Brokers) == 0 {
		return nil, fmt.Errorf("%w: metadata lists no broker", ErrUnavailable)
	}
	if len(lg.failed) == len(meta.Brokers) {
		return nil, fmt.Errorf("%w: list groups: %w", ErrUnavailable, lg.failed[meta.Brokers[0].NodeID])
	}
	listed, failedCoord := lg.groups, lg.failed
	topics, byID := o.topicTable(meta)
	// Partitions led by a broker that did not answer at all are stale
	// without asking it again: one hung broker costs one timeout a cycle.
	for _, ti := range topics {
		for i := range ti.parts {
			pi := &ti.parts[i]
			if why, ok := lg.suspect[pi.leader]; ok && pi.err == "" {
				pi.err = why
			}
		}
	}

	// Phase 3: describe and offsets of the watched groups.
	full := o.fullPass(topics)
	elsewhere := make(map[string]bool, len(o.elsewhere))
	var classic, consumer, all []string
	for name, g := range listed {
		if !o.groups.Match(name) {
			continue
		}
		if !full && o.elsewhere[name] {
			elsewhere[name] = true
			continue
		}
		switch g.typ {
		case "share":
			continue // no committed offsets; not observed
		case "consumer":
			consumer = append(consumer, name)
		case "", "classic":
			classic = append(classic, name)
		}
		all = append(all, name)
	}
	slices.Sort(all)
	// The coordinators of the classic groups listed in PreparingRebalance
	// not answered within keepsRecheck, or since the client reconnected
	// to them (brokerConns), whether they keep the assignments there: one
	// ApiVersions each, beside the describes. A failed ApiVersions keeps
	// nothing: asked again at the next cycle (one request to a broker
	// that fails the describes too).
	now := o.cfg.Now()
	var ask []int32
	for _, name := range classic {
		id := listed[name].coordinator
		if a, ok := o.keeps[id]; listed[name].state == "PreparingRebalance" && (!ok || now.Sub(a.at) >= keepsRecheck || a.conns != o.conns.get(id)) && !slices.Contains(ask, id) {
			ask = append(ask, id)
		}
	}
	var (
		described map[string]groupInfo
		fetched   map[string]*groupOffsets
	)
	if len(all) > 0 {
		var (
			classicInfo, consumerInfo map[string]groupInfo
			asked                     map[int32]bool
		)
		o.phase(ctx,
			func(ctx context.Context) { fetched = o.fetchOffsets(ctx, all, listed, topics, byID) },
			func(ctx context.Context) { classicInfo = o.describeClassic(ctx, classic) },
			func(ctx context.Context) { consumerInfo = o.describeConsumer(ctx, consumer, byID) },
			func(ctx context.Context) { asked = o.askKeeps(ctx, ask) },
		)
		if err := o.stopped(ctx); err != nil {
			return nil, err
		}
		for id, keeps := range asked {
			o.keeps[id] = keepsAnswer{keeps: keeps, at: now, conns: o.conns.get(id)}
		}
		described = classicInfo
		for k, v := range consumerInfo {
			described[k] = v
		}
	}

	// Build the pairs.
	var (
		pairs    []pair
		stale    []lag.Sample
		newKnown = make(map[string]knownGroup, len(all))
	)
	for _, name := range all {
		fr, ok := fetched[name]
		if !ok || fr.err != "" {
			why := "offset fetch: no response"
			if ok {
				why = "offset fetch: " + fr.err
			}
			if kg, ok := o.known[name]; ok {
				newKnown[name] = kg
				stale = appendStaleGroup(stale, o.cfg.Cluster, name, kg.watched(topics), why)
			}
			continue
		}
		gi, ok := described[name]
		var names []string
		if !ok {
			gi = groupInfo{state: listed[name].state, members: -1}
			// Without the description the topics its members are
			// assigned are unknown: keep those of the last cycle, so
			// that a topic without a commit does not leave for one.
			for _, kt := range o.known[name].topics {
				names = append(names, kt.name)
			}
		} else if gi.state == "PreparingRebalance" || gi.state == "CompletingRebalance" {
			// A classic group in a rebalance is described without its
			// members' subscriptions: keep the topics of the last
			// cycle until it is Stable again (a group without commits
			// left for every rebalance, and was measured from a new
			// first sight after it: TestRebalanceNoCommits). Kafka 4.x
			// keeps a member's last assignment through
			// PreparingRebalance, so liveness still reads from it there
			// (a group whose members hold nothing, a member joining
			// again and again and never syncing, is idle, and is
			// abandoned after Rules.AbandonAfter). Kafka 3.x shows
			// none outside Stable (keepsAssignments): there liveness
			// is unknown until Stable, as it is in
			// CompletingRebalance on both. The answer is the lister's:
			// a group described by another broker (its coordinator
			// moved between the two) is unknown for this cycle.
			id := listed[name].coordinator
			a := o.keeps[id]
			gi.described = gi.state == "PreparingRebalance" && gi.coordinator == id && a.keeps && a.conns == o.conns.get(id)
			for _, kt := range o.known[name].topics {
				names = append(names, kt.name)
			}
		}
		for t := range fr.topics {
			names = append(names, t)
		}
		names = append(names, gi.topics...)
		slices.Sort(names)
		names = slices.Compact(names)
		elsewhere[name] = !slices.ContainsFunc(names, func(t string) bool { ti := topics[t]; return ti != nil && ti.watched })
		kg := knownGroup{coordinator: listed[name].coordinator}
		for _, t := range names {
			ti := topics[t]
			if ti == nil || !ti.watched {
				continue
			}
			ti.needed = true
			pairs = append(pairs, pair{group: name, state: gi.state, members: gi.members, live: gi.live(t), topic: ti, offsets: fr.topics[t], heads: o.topicHeads(ti)})
			kg.topics = append(kg.topics, knownTopic{name: t, partitions: int32(len(ti.parts))})
		}
		newKnown[name] = kg
	}
	// Groups we knew whose coordinator could not list its groups.
	if len(failedCoord) > 0 {
		for name, kg := range o.known {
			if _, listedNow := listed[name]; listedNow {
				continue
			}
			why, ok := failedCoord[kg.coordinator]
			if !ok {
				continue
			}
			newKnown[name] = kg
			stale = appendStaleGroup(stale, o.cfg.Cluster, name, kg.watched(topics), "list groups: "+why.Error())
		}
	}
	o.known = newKnown
	if o.owns.Load() != nil {
		o.elsewhere = elsewhere
	} else {
		o.elsewhere = nil
	}

	// Phase 4: log start and end offsets of the partitions in use.
	o.listOffsets(ctx, topics)
	if err := o.stopped(ctx); err != nil {
		return nil, err
	}
	at := o.cfg.Now()
	o.at = at

	// Compute lag; collect the heads to fetch.
	total := 0
	for _, p := range pairs {
		total += len(p.topic.parts)
	}
	slab := make([]lag.PartitionSample, total)
	samples := make([]lag.Sample, 0, len(pairs)+len(stale))
	pending := o.pending[:0]
	off := 0
	for _, p := range pairs {
		ps := slab[off : off+len(p.topic.parts) : off+len(p.topic.parts)]
		off += len(p.topic.parts)
		for i := range ps {
			if need, ok := o.partition(&ps[i], p, int32(i)); ok {
				pending = append(pending, pendingHead{ps: &ps[i], need: need})
			}
		}
		samples = append(samples, lag.Sample{
			Target:     lag.Target{Kind: lag.KindKafka, Cluster: o.cfg.Cluster, Topic: p.topic.name, Group: p.group},
			At:         at,
			GroupState: p.state,
			Members:    p.members,
			Live:       p.live,
			Partitions: ps,
		})
	}

	// Phase 5: head records, one Fetch per leader, then resolve.
	if len(pending) > 0 {
		o.fetchHeads(ctx, byID, pending)
		if err := o.stopped(ctx); err != nil {
			return nil, err
		}
	}
	o.sweepHeads()
	clear(pending) // keep the buffer, not the samples it points into
	o.pending = pending[:0]

	for i := range stale {
		stale[i].At = at
	}
	samples = append(samples, stale...)
	slices.SortFunc(samples, func(a, b lag.Sample) int {
		return cmp.Or(strings.Compare(a.Target.Group, b.Target.Group), strings.Compare(a.Target.Topic, b.Target.Topic))
	})
	return samples, nil
}

// shardRecheck is how often, in cycles, an observer under a shard filter
// reads again the groups whose topics were all elsewhere: a group that
// starts committing on a topic of this replica's shards, having committed
// only on others before, is seen within as many cycles. A group never seen
// is read at once, and every group when the watched topics change.
const shardRecheck = 10

// fullPass reports whether this cycle reads every group, and keeps the
// count: always without a shard filter; with one, every shardRecheck
// cycles and whenever the watched topics differ from the last cycle's (a
// shard gained or lost, a topic created or deleted). Called with o.mu held.
func (o *Observer) fullPass(topics map[string]*topicInfo) bool {
	var sum uint64
	for name, ti := range topics {
		if ti.watched {
			h := fnv.New64a()
			_, _ = h.Write([]byte(name))
			sum += h.Sum64()
		}
	}
	changed := sum != o.watchedSum
	o.watchedSum = sum
	if o.owns.Load() == nil || changed || o.sinceFull+1 >= shardRecheck {
		o.sinceFull = 0
		return true
	}
	o.sinceFull++
	return false
}

func (o *Observer) stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.closed.Load() {
		return ErrClosed
	}
	return nil
}

// listedGroup is one group of the ListGroups answers.
type listedGroup struct {
	coordinator int32
	typ         string // "classic", "consumer", "share", ...; "" before Kafka 3.8
	state       string
}

type listing struct {
	groups map[string]listedGroup
	// failed holds the brokers whose ListGroups failed, with why.
	failed map[int32]error
	// suspect holds the failed brokers whose failure was not a Kafka
	// error code (a timeout, a closed connection): the rest of the cycle
	// does not ask them again.
	suspect map[int32]string
}

// listGroups asks every broker for the groups it coordinates, in parallel,
// so that a failure is tied to the broker that failed.
func (o *Observer) listGroups(ctx context.Context, brokers []kmsg.MetadataResponseBroker) listing {
	type answer struct {
		node int32
		resp *kmsg.ListGroupsResponse
		err  error
	}
	answers := make([]answer, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		wg.Go(func() {
			req := kmsg.NewPtrListGroupsRequest()
			kresp, err := o.cl.Broker(int(b.NodeID)).RetriableRequest(ctx, req)
			answers[i] = answer{node: b.NodeID, err: err}
			if err == nil {
				answers[i].resp = kresp.(*kmsg.ListGroupsResponse)
			}
		})
	}
	wg.Wait()
	out := listing{groups: map[string]listedGroup{}, failed: map[int32]error{}, suspect: map[int32]string{}}
	for _, a := range answers {
		err := a.err
		if err == nil {
			err = kerr.ErrorForCode(a.resp.ErrorCode)
		}
		if err != nil {
			out.failed[a.node] = brokerErrE(a.node, err)
			if _, isKafka := errors.AsType[*kerr.Error](err); !isKafka {
				out.suspect[a.node] = brokerErr(a.node, err)
			}
			continue
		}
		for _, g := range a.resp.Groups {
			out.groups[g.Group] = listedGroup{coordinator: a.node, typ: g.GroupType, state: g.GroupState}
		}
	}
	return out
}

// pair is one watched (group, topic) of this cycle.
type pair struct {
	group   string
	state   string
	members int
	live    lag.Liveness
	topic   *topicInfo
	offsets *topicOffsets // nil: no commit on this topic
	heads   [][]headEntry // the head cache of the topic, by partition
}

func appendStaleGroup(out []lag.Sample, cluster, group string, kg knownGroup, why string) []lag.Sample {
	for _, t := range kg.topics {
		ps := make([]lag.PartitionSample, t.partitions)
		for i := range ps {
			ps[i] = lag.PartitionSample{Partition: int32(i), LogStart: -1, End: -1, Committed: -1, Stale: true, Err: why}
		}
		out = append(out, lag.Sample{
			Target:     lag.Target{Kind: lag.KindKafka, Cluster: cluster, Topic: t.name, Group: group},
			Members:    -1,
			Partitions: ps,
			Err:        why,
		})
	}
	return out
}

// metadata asks for every topic once; kgo also learns the brokers from it,
// which the per-broker requests need. It asks the broker that answered last
// time first, then each other known broker, one attempt timeout each, so a
// hung broker does not fail the cycle; the first cycle goes through kgo's
// seed brokers.
func (o *Observer) metadata(ctx context.Context) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = nil // all topics
	ids := slices.Clone(o.brokerIDs)
	slices.SortStableFunc(ids, func(a, b int32) int { return cmp.Compare(b2i(a != o.lastMeta), b2i(b != o.lastMeta)) })
	var firstErr error
	for _, id := range ids {
		actx, cancel := context.WithTimeout(ctx, o.cfg.attemptTimeout())
		kresp, err := o.cl.Broker(int(id)).Request(actx, req)
		cancel()
		if err == nil {
			o.lastMeta = id
			return o.remember(kresp.(*kmsg.MetadataResponse)), nil
		}
		if firstErr == nil {
			firstErr = brokerErrE(id, err)
		}
		if ctx.Err() != nil {
			return nil, firstErr
		}
	}
	resp, err := req.RequestWith(ctx, o.cl)
	if err != nil {
		return nil, cmp.Or(firstErr, err)
	}
	return o.remember(resp), nil
}

func (o *Observer) remember(m *kmsg.MetadataResponse) *kmsg.MetadataResponse {
	o.brokerIDs = o.brokerIDs[:0]
	for _, b := range m.Brokers {
		o.brokerIDs = append(o.brokerIDs, b.NodeID)
	}
	return m
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func brokerErrE(node int32, err error) error { return fmt.Errorf("broker %d: %w", node, err) }

func (o *Observer) topicTable(meta *kmsg.MetadataResponse) (map[string]*topicInfo, map[[16]byte]*topicInfo) {
	owns := func(string) bool { return true }
	if f := o.owns.Load(); f != nil {
		owns = *f
	}
	topics := make(map[string]*topicInfo, len(meta.Topics))
	byID := make(map[[16]byte]*topicInfo, len(meta.Topics))
	for i := range meta.Topics {
		mt := &meta.Topics[i]
		if mt.Topic == nil {
			continue
		}
		name := *mt.Topic
		ti := &topicInfo{
			name:    name,
			id:      mt.TopicID,
			watched: !mt.IsInternal && !internalTopics[name] && o.topics.Match(name) && owns(name),
		}
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			ti.err = "metadata: " + err.Error()
		}
		n := 0
		for _, p := range mt.Partitions {
			n = max(n, int(p.Partition)+1)
		}
		ti.parts = make([]partInfo, n)
		for j := range ti.parts {
			ti.parts[j] = partInfo{leader: -1, err: "metadata: partition missing", logStart: -1, end: -1}
		}
		for _, p := range mt.Partitions {
			pi := &ti.parts[p.Partition]
			pi.leader = p.Leader
			pi.err = ti.err
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && pi.err == "" && !errors.Is(err, kerr.ReplicaNotAvailable) {
				pi.err = "metadata: " + err.Error()
			}
		}
		topics[name] = ti
		if mt.TopicID != ([16]byte{}) {
			byID[mt.TopicID] = ti
		}
	}
	return topics, byID
}

func (o *Observer) describeClassic(ctx context.Context, groups []string) map[string]groupInfo {
	out := make(map[string]groupInfo, len(groups))
	if len(groups) == 0 {
		return out
	}
	// Shard errors leave groups out; they are then reported with the
	// state from ListGroups and Members -1.
	described, _ := o.adm.DescribeGroups(ctx, groups...)
	for name, d := range described {
		if d.Err != nil {
			continue
		}
		gi := groupInfo{state: d.State, members: len(d.Members), described: true, coordinator: d.Coordinator.NodeID}
		for _, m := range d.Members {
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					gi.topics = append(gi.topics, t.Topic)
					if len(t.Partitions) > 0 {
						gi.assigned = append(gi.assigned, t.Topic)
					}
				}
			} else {
				gi.opaque = true
			}
			if j, ok := m.Join.AsConsumer(); ok {
				gi.topics = append(gi.topics, j.Topics...)
			}
		}
		out[name] = gi
	}
	return out
}

// describeConsumer describes KIP-848 groups. kadm's DescribeConsumerGroups
// keys assignments by topic name, which brokers leave empty (assignments
// carry topic IDs), so this issues the request itself and maps IDs through
// this cycle's metadata.
func (o *Observer) describeConsumer(ctx context.Context, groups []string, byID map[[16]byte]*topicInfo) map[string]groupInfo {
	out := make(map[string]groupInfo, len(groups))
	if len(groups) == 0 {
		return out
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = groups
	for _, shard := range o.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			continue
		}
		resp := shard.Resp.(*kmsg.ConsumerGroupDescribeResponse)
		for _, g := range resp.Groups {
			if g.ErrorCode != 0 {
				continue
			}
			gi := groupInfo{state: g.State, members: len(g.Members), described: true}
			for _, m := range g.Members {
				gi.topics = append(gi.topics, m.SubscribedTopics...)
				for _, a := range [...]kmsg.Assignment{m.Assignment, m.TargetAssignment} {
					for _, tp := range a.TopicPartitions {
						name := tp.Topic
						if ti := byID[tp.TopicID]; name == "" && ti != nil {
							name = ti.name
						}
						if name == "" {
							continue
						}
						gi.topics = append(gi.topics, name)
						if len(tp.Partitions) > 0 {
							gi.assigned = append(gi.assigned, name)
						}
					}
				}
			}
			out[g.Group] = gi
		}
	}
	return out
}

func (ti *topicInfo) part(p int32) *partInfo {
	if ti == nil || p < 0 || int(p) >= len(ti.parts) {
		return nil
	}
	return &ti.parts[p]
}

func brokerErr(node int32, err error) string {
	if node < 0 {
		return err.Error()
	}
	return fmt.Sprintf("broker %d: %v", node, err)
}

// partition fills ps for partition p of the pair. It returns the head to
// fetch when the head is not cached.
func (o *Observer) partition(ps *lag.PartitionSample, pr pair, p int32) (need headNeed, fetch bool) {
	*ps = lag.PartitionSample{Partition: p, LogStart: -1, End: -1, Committed: -1}
	if tofs := pr.offsets; tofs != nil {
		if why, ok := tofs.errs[p]; ok {
			ps.Stale, ps.Err = true, "offset fetch: "+why
			return need, false
		}
		ps.Committed = tofs.committed[p]
	}
	pi := &pr.topic.parts[p]
	switch {
	case pi.err != "":
		ps.Stale, ps.Err = true, pi.err
		return need, false
	case !pi.startOK || !pi.endOK:
		// Never report lag from half the offsets.
		ps.Stale, ps.Err = true, "list offsets: no answer"
		return need, false
	}
	ps.LogStart, ps.End = pi.logStart, pi.end
	if ps.Committed < 0 {
		// No commit: the position depends on the consumer's reset
		// policy (a group started at the end commits nothing on an idle
		// partition), so lag and head are unknown, as Kafka's
		// kafka-consumer-groups shows them ("-"): Lag 0, HeadKnown false.
		return need, false
	}

	// The position the group will read next: its commit, or the log start
	// when retention removed what it had not read.
	pos := max(ps.Committed, pi.logStart)
	key := headKey{topic: pr.topic.name, partition: p, offset: pos}
	if pos >= pi.end {
		// Nothing to read. A commit past the LSO (a read_uncommitted
		// consumer) would give negative lag: clamped to 0.
		ps.HeadKnown = true
		return need, false
	}
	slot := &pr.heads[p]
	if e := o.lookupHead(slot, pos); e != nil {
		if applyHead(ps, *e, pi.end) {
			if e.pos < 0 || o.at.Sub(e.read) < headRefresh {
				return need, false
			}
			// An old head record: compaction may have removed it.
			return headNeed{key: key, slot: slot, from: pos, leader: pi.leader, topic: pr.topic, refresh: true}, true
		}
		return headNeed{key: key, slot: slot, from: e.scanned, leader: pi.leader, topic: pr.topic}, true
	}
	ps.Lag = pi.end - pos
	return headNeed{key: key, slot: slot, from: pos, leader: pi.leader, topic: pr.topic}, true
}

// applyHead sets Lag and the head from a cache entry. It reports false when
// the entry leaves the head unknown (scanned up to below end).
func applyHead(ps *lag.PartitionSample, e headEntry, end int64) bool {
	// A refreshed entry replaces the cached one applied before.
	ps.HeadTime, ps.HeadKnown = time.Time{}, false
	switch {
	case e.pos >= 0:
		// Offsets between the commit and the head hold no consumable
		// record (markers, aborted or compacted): not lag.
		ps.Lag = max(0, end-e.pos)
		if ps.Lag > 0 {
			ps.HeadTime = time.UnixMilli(e.ts)
		}
		ps.HeadKnown = true
		return true
	case e.scanned >= end:
		// Only markers or aborted records up to the end: the classic
		// phantom lag of transactional topics is 0.
		ps.Lag = 0
		ps.HeadKnown = true
		return true
	default:
		ps.Lag = max(0, end-e.scanned)
		return false
	}
}

// notKafkaHint says what a metadata reply franz-go refused as larger than
// BrokerMaxReadBytes usually means when the size it read is at least 512
// MiB: the address is not a Kafka listener, and the first four bytes of
// another protocol's greeting were read as a size (a NATS server's "INFO"
// is 1,229,866,575; any reply starting with a printable ASCII byte is at
// least 0x20000000). A smaller size is a real Kafka answer over the limit
// (a caller's lower kgo.BrokerMaxReadBytes, or a cluster's metadata over
// 100 MiB), and gets no hint. franz-go names an HTTP reply and a TLS alert
// itself; every other protocol read "invalid large response size ... >
// limit ...: response exceeds BrokerMaxReadBytes" and nothing more. Its
// sentinel is unexported, so it is matched by its text; "" otherwise.
func notKafkaHint(err error) string {
	var size, limit int64
	msg := err.Error()
	i := strings.Index(msg, "invalid large response size ")
	if i < 0 || !strings.Contains(msg, "response exceeds BrokerMaxReadBytes") {
		return ""
	}
	if _, serr := fmt.Sscanf(msg[i:], "invalid large response size %d > limit %d", &size, &limit); serr != nil || size < 1<<29 {
		return ""
	}
	return " (the reply to the first request was not Kafka's: is each of kafka[].brokers a Kafka listener, host:port, and not another service's port?)"
}
