package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// Engine is what a Replicator needs from the quota engine
// (*engine.Engine).
type Engine interface {
	quotaserver.Engine
	// Renumber republishes every set above floor.
	Renumber(floor uint64)
	// RenumberAbove republishes producer's set above held when its
	// version is below; it reports whether it did.
	RenumberAbove(producer string, held uint64) bool
	// Follow adopts the leader's decisions while following.
	Follow(ds []quota.Decision)
	// StandIn says whether the engine's sets are served while the
	// leader is silent (see Config.Silence).
	StandIn(on bool)
}

// Config builds a Replicator.
type Config struct {
	// Channel carries the lease state; required.
	Channel Channel
	// Elector is the election of the cluster whose leader's sets every
	// replica serves; required.
	Elector leader.Elector
	// Hub is the hub the quota protocol serves from; required.
	Hub *quotaserver.Hub
	// Lifetime is the lease lifetime: a replicated report older than it
	// is not replayed into the engine (its producer is gone).
	Lifetime time.Duration
	// Interval is how often the role is checked and a failed watch is
	// retried; the observation interval.
	Interval time.Duration
	// Silence is how long the leader's decisions (written every
	// interval while it leads) may go unrenewed before a follower serves
	// its own sets instead of the leader's last ones, until a leader
	// writes again: a leader that died leaves its producers on its last
	// sets until another takes over (the session timeout), and a set
	// made for the moment (a pause while a backlog drains) is not one to
	// keep that long. The follower's controller adopted the leader's
	// decisions and observes the same broker, so its sets continue the
	// leader's regime; it still writes nothing to the brokers. Zero
	// never serves the follower's own sets. Set it above the replication
	// delay of the lease state (internal/app: a third of the session
	// timeout, at least four intervals). The Kafka client quotas' stand-in
	// (ClientQuotaStandIn) and the presence records go by Silence.
	Silence time.Duration
	// Serve, when shorter than Silence, is how long the leader's
	// decisions may go unrenewed before a follower serves its own sets:
	// a set the lost leader made for one interval (a step down to 0, a
	// rate kept while a commit was awaited) holds its producers until
	// then. A stand-in against a live leader whose record is late serves
	// its own sets to the producers it serves only until the record
	// arrives, and writes nothing; the client quotas wait for Silence.
	// Zero or above Silence: Silence (internal/app: a sixth of the
	// session timeout, at least four intervals).
	Serve time.Duration
	// ID names this replica to the others (ha.id) and Session is the
	// election's session timeout: with both set (and Silence), the one
	// live follower that ranks first by its ID writes the Kafka client
	// quotas while the followers stand in for a silent leader, until the
	// lost leader's session could end (ClientQuotaStandIn). Empty or
	// zero: no follower writes them.
	ID      string
	Session time.Duration
	// Log receives channel failures; nil means slog.Default().
	Log *slog.Logger
}

// Replicator replicates the lease state of one replica set. It is the
// engine's hub (Sink), one of its publishers (the leader writes its sets)
// and the quota server's engine (reports are forwarded). Create it with
// New, give it the engine with SetEngine, then Start; Close stops it. Safe
// for concurrent use.
type Replicator struct {
	cfg  Config
	sink sink
	eng  Engine
	// self tells this replica's decisions records from other leaders'
	// (random, per process).
	self string

	mu         sync.Mutex
	synced     bool      // the channel was read once
	newest     time.Time // when the newest replicated set was written
	maxVersion uint64    // the highest set version read
	setKeys    map[string]bool
	// pending holds the reports not yet written, the newest per producer:
	// a report is answered without waiting for the broker.
	pending map[string]reportRecord
	kick    chan struct{}

	// The publishing goroutine's own state.
	led     bool
	written map[string]writtenSet
	// rewriting: this replica took over and has not yet written every
	// set since (Publish); its decisions records say so
	// (decisionsRecord.Rewriting). decide wakes the decisions goroutine.
	rewriting atomic.Bool
	decide    chan struct{}
	// leaderDs are the last leader decisions read (followDecisions),
	// written at leaderAt, until a takeover used them (followLast);
	// under mu.
	leaderDs []quota.Decision
	leaderAt time.Time
	// The decisions goroutine's own state (beat): the last decisions
	// written (their rates, JSON), whether as rewriting, and whether the
	// last write failed.
	decided   []byte
	decidedRw bool
	failing   bool
	// lastLeader is when the newest leader's decisions record read was
	// written, lastSets the newest not written while rewriting; acted:
	// this replica served its own sets since (see Config.Silence); under
	// mu. tick and quiet belong to checkRole: the
	// time of its last run, and until when a replica that was not
	// running (paused) waits before it takes the leader for silent.
	lastLeader time.Time
	lastSets   time.Time
	acted      bool
	// standFrom is lastLeader when this follower last started standing
	// in, present the newest presence record's time of each replica
	// (standinquota.go); under mu.
	standFrom time.Time
	present   map[string]time.Time
	leaderID  string // the Config.ID of the newest leader record's writer
	tick      time.Time
	quiet     time.Time
	// holding: the engine keeps unused rates (holdUnused); written by
	// checkRole only.
	holding atomic.Bool
	// standMu makes a follower's decision to stand in (checkSilence, the
	// role goroutine) and its start one step against a leader's record
	// (followDecisions, the channel's): a fresh record read meanwhile
	// would otherwise be overrun by a stand-in decided before it. Taken
	// before mu.
	standMu sync.Mutex

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// writtenSet is what the leader last wrote under a set key; the zero value
// is a key another leader wrote (rewritten at once).
type writtenSet struct {
	version uint64
	at      time.Time
}

// New returns a Replicator; it starts nothing.
func New(cfg Config) *Replicator {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	var self [8]byte
	_, _ = rand.Read(self[:]) // never fails (crypto/rand)
	return &Replicator{cfg: cfg, self: hex.EncodeToString(self[:]), sink: sink{hub: cfg.Hub, own: map[string]quotaproto.LeaseSet{}, acts: map[string]acted{}},
		setKeys: map[string]bool{}, present: map[string]time.Time{}, pending: map[string]reportRecord{}, kick: make(chan struct{}, 1), decide: make(chan struct{}, 1), stop: func() {}}
}

// Sink is the hub to give the engine (engine.Config.Hub): the engine's sets
// reach the served hub only while this replica leads.
func (r *Replicator) Sink() engine.Hub { return &r.sink }

// Serving reports whether the hub serves this replica's own lease sets
// now: it leads, or stands in for a silent leader (Config.Silence). Else
// its producers are served the leader's, and its engine's decisions are
// not in force (the decision log marks them: history.Log.Served). Safe
// for concurrent use; it may be called with the engine's lock held.
func (r *Replicator) Serving() bool { return r.sink.isLeading() || r.sink.isActing() }

// SetEngine sets the engine; call it once, before Start.
func (r *Replicator) SetEngine(e Engine) { r.eng = e }

// Register adds lagbridge_ha_lease_state_age_seconds to reg.
func (r *Replicator) Register(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lagbridge_ha_lease_state_age_seconds",
		Help: "Age of the newest lease set read from the replicated lease state (since the leader wrote it); -1 before the first. The leader rewrites a steady set once per refresh interval."},
		func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.newest.IsZero() {
				return -1
			}
			return math.Max(time.Since(r.newest).Seconds(), 0)
		}))
}

// Synced reports whether the replicated state was read once; a leader is
// always synced.
func (r *Replicator) Synced() bool {
	if r.cfg.Elector.Role(time.Now()) == leader.RoleLeader {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}

// Start reads the channel, writes the reports, writes the leader's
// decisions and follows the role until Close: four goroutines, and a
// fifth that writes this replica's presence (ClientQuotaStandIn) when
// Config.ID, Session and Silence are set.
func (r *Replicator) Start(ctx context.Context) {
	ctx, r.stop = context.WithCancel(ctx)
	r.wg.Go(func() {
		for {
			err := r.cfg.Channel.Watch(ctx, r.apply, func() {
				r.mu.Lock()
				r.synced = true
				r.mu.Unlock()
			})
			if ctx.Err() != nil {
				return
			}
			r.cfg.Log.Warn("reading the replicated lease state", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.cfg.Interval):
			}
		}
	})
	r.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.kick:
			}
			r.mu.Lock()
			batch := r.pending
			r.pending = map[string]reportRecord{}
			r.mu.Unlock()
			for p, rec := range batch {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := r.cfg.Channel.Put(pctx, key(kindReport, p), encode(rec))
				cancel()
				if err != nil && ctx.Err() == nil {
					r.cfg.Log.Warn("forwarding a report to the other replicas", "producer", p, "err", err)
				}
			}
		}
	})
	r.wg.Go(func() {
		// The decisions record is the leader's sign of life: on its own
		// timer, never behind the sets (or other publishers) however
		// long they take to write.
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			tick := false
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				tick = true
			case <-r.decide:
			}
			r.beat(ctx, tick)
		}
	})
	if r.writesPresence() {
		r.wg.Go(func() { r.presence(ctx) })
	}
	r.wg.Go(func() {
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			r.checkRole()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Close stops the goroutines and waits for them. Idempotent.
func (r *Replicator) Close() {
	r.stop()
	r.wg.Wait()
}

// checkRole moves the served hub between the leader's replicated sets and
// this replica's own. A replica that starts leading serves its sets and
// renumbers them above every version it read. The hub leads first: the
// publishing goroutine that Renumber wakes writes only while it does
// (Publish), so the renumbered sets reach the channel at once, not at the
// engine's next change.
func (r *Replicator) checkRole() {
	now := time.Now()
	_, lead := r.cfg.Elector.Leading(now)
	if lead == r.sink.isLeading() {
		if !lead {
			r.checkSilence(now)
			r.holdUnused(now)
		}
		return
	}
	if lead {
		r.followLast()
		r.eng.StandIn(false)
		r.holding.Store(false)
		// Until Publish wrote every set, the records say so.
		r.rewriting.Store(true)
	}
	r.sink.lead(lead)
	if lead {
		r.mu.Lock()
		floor := max(r.maxVersion, r.sink.highest())
		r.mu.Unlock()
		r.eng.Renumber(floor)
	}
}

// checkSilence, on a follower, serves its own sets while the leader's
// decisions have not been renewed for Config.Serve, and the leader's
// again once they are (see Config.Silence). A replica that was not
// running for half of Silence (paused) cannot tell the leader's silence
// from its own absence: it waits Silence more, reading the channel,
// before it may serve its own sets.
func (r *Replicator) checkSilence(now time.Time) {
	if r.cfg.Silence <= 0 {
		return
	}
	if !r.tick.IsZero() && now.Sub(r.tick) > r.cfg.Silence/2 {
		r.quiet = now.Add(r.cfg.Silence)
	}
	r.tick = now
	r.standMu.Lock()
	defer r.standMu.Unlock()
	r.mu.Lock()
	last, sets, synced, base := r.lastLeader, r.lastSets, r.synced, r.maxVersion
	// Above the wall clock too (set versions are at least the clock in
	// microseconds): the lost leader may have served sets no replica
	// read (killed before its write landed, or before it committed).
	base = max(base, uint64(max(now.UnixMicro(), 0)))
	serve := r.serve()
	silent := synced && !last.IsZero() && now.Sub(last) > serve && now.After(r.quiet)
	// A leader that took over writes while it rewrites its sets: a
	// stand-in holds until they are written rather than serve the lost
	// leader's meanwhile.
	hold := !silent && r.acted && !last.IsZero() && now.Sub(last) <= serve && now.Sub(sets) > serve
	if silent {
		r.acted = true
	}
	r.mu.Unlock()
	if hold {
		return
	}
	if r.sink.act(silent, base) {
		if silent {
			r.mu.Lock()
			r.standFrom = last
			r.mu.Unlock()
			r.cfg.Log.Warn("the leader's lease state is silent: serving this replica's own lease sets until a leader writes (it writes nothing to the brokers)",
				"silent_for", now.Sub(last).Round(time.Millisecond))
		} else {
			r.cfg.Log.Info("a leader writes the lease state again: serving its lease sets")
		}
	}
}

// serve is how long the leader may be silent before this follower serves
// its own sets (Config.Serve).
func (r *Replicator) serve() time.Duration {
	if r.cfg.Serve <= 0 || r.cfg.Serve > r.cfg.Silence {
		return r.cfg.Silence
	}
	return r.cfg.Serve
}

// holdUnused, on a follower, has the engine's controller keep a rate its
// producers leave unused (engine.Engine.StandIn) while it serves its own
// sets, and from when the leader's decisions are two intervals overdue:
// from then on no adoption resets the controller's rates, and the
// producers still obey the silent leader's last sets, so a rate they
// leave unused says nothing of the consumer. Without it a follower's
// controller probed up and released, unused, in the second before it
// stood in (a sixth of the session), and then served its producers
// unlimited (the HA overload test on NATS, session 11). Off again once a
// fresh record ended the standing in, at the next check. Role goroutine.
func (r *Replicator) holdUnused(now time.Time) {
	r.mu.Lock()
	last, synced := r.lastLeader, r.synced
	r.mu.Unlock()
	on := r.sink.isActing() || synced && !last.IsZero() && now.Sub(last) > 2*r.cfg.Interval
	if on != r.holding.Load() {
		r.eng.StandIn(on)
		r.holding.Store(on)
	}
}

// apply is one entry of the channel.
func (r *Replicator) apply(k string, v []byte) {
	if k == leader.FenceKey {
		return
	}
	kind, producer, err := quotaproto.ParseKVKey(k)
	if err != nil {
		r.cfg.Log.Debug("replicated lease state: key ignored", "key", k, "err", err)
		return
	}
	switch kind {
	case kindSet:
		if v == nil {
			r.mu.Lock()
			delete(r.setKeys, producer)
			r.mu.Unlock()
			r.sink.unfollow(producer)
			return
		}
		var rec setRecord
		if err := json.Unmarshal(v, &rec); err != nil || rec.Set.Producer != producer {
			r.cfg.Log.Warn("replicated lease state: set ignored", "key", k, "err", err)
			return
		}
		r.mu.Lock()
		r.setKeys[producer] = true
		r.maxVersion = max(r.maxVersion, rec.Set.Version)
		if rec.At.After(r.newest) {
			r.newest = rec.At
		}
		r.mu.Unlock()
		r.sink.follow(rec.Set)
	case kindDecisions:
		r.followDecisions(v)
	case kindPresence:
		r.hearPresence(producer, v)
	case kindReport:
		if v == nil {
			return
		}
		var rec reportRecord
		if err := json.Unmarshal(v, &rec); err != nil || rec.Report.Producer != producer {
			r.cfg.Log.Warn("replicated lease state: report ignored", "key", k, "err", err)
			return
		}
		if time.Since(rec.At) > r.cfg.Lifetime {
			return
		}
		if _, err := r.eng.Report(rec.Report); err != nil {
			r.cfg.Log.Debug("replicated report refused", "producer", producer, "err", err)
		}
	}
}

// Report implements quotaserver.Engine: the engine records the report,
// the channel carries it to the other replicas (written in the background:
// the answer never waits for the broker; a producer's newer report
// replaces one not yet written). A follower answers with
// the leader's set; for a producer the leader has not answered yet, with
// its own set numbered 1, which any set of the leader's supersedes.
func (r *Replicator) Report(rep quotaproto.Report) (quotaproto.LeaseSet, error) {
	set, err := r.eng.Report(rep)
	if err != nil {
		return set, err
	}
	r.mu.Lock()
	r.pending[rep.Producer] = reportRecord{Report: rep, At: time.Now()}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	if cur, _, ok := r.cfg.Hub.Current(rep.Producer); ok {
		// A leader answers with the set its hub serves (the engine's
		// may not have landed yet; sink.Publish), a follower with the
		// leader's.
		return cur, nil
	}
	if r.sink.isLeading() {
		return set, nil
	}
	set.Version = 1
	r.sink.follow(set)
	return set, nil
}

// Held implements quotaserver.Holder: a producer holding a set newer than
// the one this follower serves it (a watch's ?version=, a stream's
// Last-Event-ID) got it from a leader whose write this replica has not
// read, maybe never will (the leader was killed before it landed). The
// follower serves it its engine's set, numbered above the held one, until
// it reads a set of the leader's at least as new (sink.hold), rather than
// the older one: the versions a producer is served never go back across a
// failover, whatever moment the leader died at. A version beyond
// heldLead of the wall clock in microseconds (no daemon made it) is
// ignored.
//
// On the leader, a held version above its set's is one a follower served:
// a follower that stood in after this leader renumbered its sets, before
// it read them, serves versions above the leader's, and the leader's after
// its own numbered above them, until the set changes. The leader gives the
// producer's set a version above the held one (written, then served), so
// the producer is not served a set its version guard ignores until its
// leases expire, and the follower serves the leader's numbers again.
func (r *Replicator) Held(producer string, version uint64) {
	if version > uint64(max(time.Now().Add(heldLead).UnixMicro(), 0)) {
		return
	}
	if r.sink.isLeading() {
		if r.eng.RenumberAbove(producer, version) {
			r.cfg.Log.Debug("a producer holds a set a follower numbered above this leader's: renumbering it above", "producer", producer, "version", version)
		}
		return
	}
	if r.sink.hold(producer, version) {
		r.cfg.Log.Debug("a producer holds a set newer than the replicated one: serving this replica's own above it", "producer", producer, "version", version)
	}
}

// heldLead is how far a held version Held acts on may be ahead of the
// wall clock in microseconds: set versions are at least the clock in
// microseconds when made, and more by one per set made within a
// microsecond (and replicas' clocks agree).
const heldLead = time.Minute

// Quotas implements quotaserver.Engine.
func (r *Replicator) Quotas() ([]quota.Decision, []quota.Policy) { return r.eng.Quotas() }

// Name implements publish.Publisher.
func (r *Replicator) Name() string { return "lease-replication" }

// Publish implements publish.Publisher: while leading, it writes the sets
// that changed or whose last write is a refresh interval old, and deletes
// the set and report of producers that are gone. Called by the engine's publishing
// goroutine only.
func (r *Replicator) Publish(ctx context.Context, s publish.Snapshot) error {
	// Only once the hub serves the engine's renumbered sets (checkRole),
	// and under the lease: no write starts after it ran out, and the
	// broker refuses them once another replica took over (leader.Fence).
	ctx, cancel, lead := leader.Fence(ctx, r.cfg.Elector, time.Now())
	defer cancel()
	if !lead || !r.sink.isLeading() {
		r.led = false
		return nil
	}
	if !r.led {
		r.led, r.written = true, map[string]writtenSet{}
		r.rewriting.Store(true)
		r.mu.Lock()
		for p := range r.setKeys {
			r.written[p] = writtenSet{}
		}
		r.mu.Unlock()
	}
	r.kickDecisions() // changed decisions go out now, beside the sets
	now := time.Now()
	seen := make(map[string]bool, len(s.Sets))
	var due []quotaproto.LeaseSet
	for _, set := range s.Sets {
		seen[set.Producer] = true
		w, ok := r.written[set.Producer]
		refresh := time.Duration(set.RefreshAfterMs) * time.Millisecond
		if ok && w.version == set.Version && now.Sub(w.at) < refresh {
			continue
		}
		due = append(due, set)
	}
	errs, err := r.putSets(ctx, due, now)
	if errors.Is(err, leader.ErrFenced) {
		return err // deposed: no later write would land either
	}
	// Every set was tried once since the takeover: one that failed stays
	// the lost leader's whatever the followers serve, and a record that
	// said rewriting for good would hold their stand-ins for good.
	if r.rewriting.Load() {
		r.rewriting.Store(false)
		r.kickDecisions()
	}
	var gone []string
	for p := range r.written {
		if !seen[p] {
			gone = append(gone, p)
		}
	}
	return errors.Join(append(errs, r.deleteGone(ctx, gone)...)...)
}

// deleteGone deletes the set and the report of each producer in gone (the
// channel keeps nothing of a producer the leader let go), all in one write
// where the channel can: on Kafka every write of the leader is a
// transaction of ~10 ms, and a few hundred producers leaving at once,
// deleted one by one, held the publish (and, when the decisions record
// shared its lock, that record) past the followers' silence.
func (r *Replicator) deleteGone(ctx context.Context, gone []string) []error {
	if len(gone) == 0 {
		return nil
	}
	if b, ok := r.cfg.Channel.(batchPutter); ok {
		es := make([]entry, 0, 2*len(gone))
		for _, p := range gone {
			es = append(es, entry{key: key(kindSet, p)}, entry{key: key(kindReport, p)})
		}
		if err := b.PutAll(ctx, es); err != nil {
			return []error{err}
		}
		for _, p := range gone {
			delete(r.written, p)
		}
		return nil
	}
	var errs []error
	for _, p := range gone {
		if err := errors.Join(r.cfg.Channel.Delete(ctx, key(kindSet, p)), r.cfg.Channel.Delete(ctx, key(kindReport, p))); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(r.written, p)
	}
	return errs
}

// putSets writes the sets (all at once where the channel can) and notes
// those written; it returns their errors, and the first ErrFenced. The
// hub serves each set once its write landed (sink.landed), or failed but
// for a fence or the end of ctx (the lease, the daemon): the producers of a
// leader whose channel fails still get its sets (and a follower serves a
// producer that holds one of them above it: Held).
func (r *Replicator) putSets(ctx context.Context, sets []quotaproto.LeaseSet, now time.Time) ([]error, error) {
	es := make([]entry, len(sets))
	for i, set := range sets {
		es[i] = entry{key(kindSet, set.Producer), encode(setRecord{Set: set, At: now})}
	}
	if b, ok := r.cfg.Channel.(batchPutter); ok && len(es) > 0 {
		if err := b.PutAll(ctx, es); err != nil {
			if errors.Is(err, leader.ErrFenced) {
				return []error{err}, err
			}
			if ctx.Err() == nil {
				r.sink.landed(sets)
			}
			return []error{err}, nil
		}
		for _, set := range sets {
			r.written[set.Producer] = writtenSet{version: set.Version, at: now}
		}
		r.sink.landed(sets)
		return nil, nil
	}
	var errs []error
	for i, set := range sets {
		err := r.cfg.Channel.Put(ctx, es[i].key, es[i].value)
		if errors.Is(err, leader.ErrFenced) {
			return append(errs, err), err
		}
		if err == nil || ctx.Err() == nil {
			r.sink.landed(sets[i : i+1])
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.written[set.Producer] = writtenSet{version: set.Version, at: now}
	}
	return errs, nil
}

// sink stands between the engine and the served hub.
type sink struct {
	mu  sync.Mutex
	hub *quotaserver.Hub
	own map[string]quotaproto.LeaseSet // the engine's sets
	// rep holds the newest replicated set of each producer, kept while
	// leading too: a replica deposed after the new leader's sets arrived
	// serves them at once, not its own until the next rewrite.
	rep     map[string]quotaproto.LeaseSet
	leading bool
	// acting: following, with the leader silent, the engine's sets are
	// served (see Config.Silence), numbered from base, the highest
	// version read then or the wall clock in microseconds if higher, up:
	// above every set the lost leader wrote or served, below every set a
	// leader writes later (at least the wall clock in microseconds).
	acting bool
	base   uint64
	// acts holds, per producer, the version the hub serves when it is
	// not the leader's own: a set of this replica's served while acting,
	// or a replicated one served after those under a version above them,
	// so that a producer's served version never goes back.
	acts map[string]acted
	// standing holds, per producer, the version of the set it holds that
	// this follower had not read when the producer said so (Held): the
	// engine's set is served for it, numbered above that version, until
	// a replicated set at least as new is read (or the replica leads).
	standing map[string]uint64
	// beforeAct, when set (tests), runs as act is called, before it
	// takes mu: the moment a record read on the channel's goroutine may
	// slip between a follower's decision and its start.
	beforeAct func(on bool)
}

// acted is a version the follower's hub serves: version, standing for the
// engine's set (own) or a replicated one numbered src.
type acted struct {
	own          bool
	src, version uint64
}

// Publish implements engine.Hub.
func (s *sink) Publish(set quotaproto.LeaseSet) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.own[set.Producer] = set
	switch {
	case s.leading:
		// A new version for a producer the hub serves waits until its
		// write landed (landed): a leader killed before it did would
		// leave its producers on a set no replica read.
		if cur, _, ok := s.hub.Current(set.Producer); ok && cur.Version != set.Version {
			return false
		}
		return s.hub.Publish(set)
	case s.acting:
		return s.serve(set, true)
	case s.standing[set.Producer] > 0:
		return s.serve(set, true)
	}
	return false
}

// Remove implements engine.Hub.
func (s *sink) Remove(producer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.own, producer)
	_, standing := s.standing[producer]
	delete(s.standing, producer)
	if s.leading || s.acting || standing {
		s.hub.Remove(producer)
		delete(s.acts, producer)
	}
}

func (s *sink) isLeading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// isActing reports whether the follower serves its own sets (Config.Silence).
func (s *sink) isActing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acting
}

// serve publishes set to the hub while following: the engine's own (own,
// acting) numbered above base, or a replicated one, numbered above the
// version served before it when that was not the leader's. Called with
// s.mu held.
func (s *sink) serve(set quotaproto.LeaseSet, own bool) bool {
	a, had := s.acts[set.Producer]
	switch {
	case had && a.own == own && a.src == set.Version:
		set.Version = a.version
	case own:
		v := max(a.version, s.base) + 1
		s.acts[set.Producer] = acted{own: true, src: set.Version, version: v}
		set.Version = v
	case had && a.version >= set.Version:
		s.acts[set.Producer] = acted{src: set.Version, version: a.version + 1}
		set.Version = a.version + 1
	default:
		delete(s.acts, set.Producer)
	}
	return s.hub.Publish(set)
}

// act starts (on) or stops serving the engine's sets while following, and
// reports whether that changed; base is the highest version read, or the
// wall clock in microseconds if higher.
func (s *sink) act(on bool, base uint64) bool {
	if s.beforeAct != nil {
		s.beforeAct(on)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leading || on == s.acting {
		return false
	}
	s.acting = on
	if on {
		s.base = base
		for _, set := range s.own {
			s.serve(set, true)
		}
		return true
	}
	for _, set := range s.rep {
		s.serveRep(set)
	}
	return true
}

// highest is the highest version the hub served while following, but for
// the leader's own ones.
func (s *sink) highest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v uint64
	for _, a := range s.acts {
		v = max(v, a.version)
	}
	return v
}

// lead switches what the hub serves: the engine's own sets (all of them at
// once, and none else) or, from now on, the replicated ones.
func (s *sink) lead(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = on
	clear(s.standing)
	if !on {
		for _, set := range s.rep {
			s.serve(set, false)
		}
		return
	}
	s.acting = false
	clear(s.acts)
	for _, set := range s.hub.All() {
		if _, ok := s.own[set.Producer]; !ok {
			s.hub.Remove(set.Producer)
		}
	}
	for _, set := range s.own {
		// A producer the hub serves keeps that set until the
		// renumbered one that follows (Replicator.checkRole) landed.
		if _, _, ok := s.hub.Current(set.Producer); ok {
			continue
		}
		s.hub.Publish(set)
	}
}

// landed serves, while leading, the sets written to the channel (or whose
// write failed but for a fence or the end of its context: putSets): each
// producer's engine set if it is still at the version written, else the
// written one when above the version the hub serves (a newer one waits
// for its own write).
func (s *sink) landed(sets []quotaproto.LeaseSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return
	}
	for _, set := range sets {
		own, ok := s.own[set.Producer]
		if !ok {
			continue // gone meanwhile
		}
		cur, _, served := s.hub.Current(set.Producer)
		switch {
		case own.Version == set.Version:
			set = own // its newest expiries
		case served && cur.Version >= set.Version:
			continue
		}
		if served && cur.Version > set.Version {
			continue
		}
		s.hub.Publish(set)
	}
}

// follow serves a replicated set while following (and not acting).
func (s *sink) follow(set quotaproto.LeaseSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rep == nil {
		s.rep = make(map[string]quotaproto.LeaseSet)
	}
	s.rep[set.Producer] = set
	if !s.leading && !s.acting {
		s.serveRep(set)
	}
}

// serveRep serves a replicated set while following, unless the follower
// stands in for its producer (hold) and the set is older than the one the
// producer holds. Called with s.mu held.
func (s *sink) serveRep(set quotaproto.LeaseSet) {
	if held, ok := s.standing[set.Producer]; ok {
		if set.Version < held {
			return
		}
		delete(s.standing, set.Producer)
	}
	s.serve(set, false)
}

// hold, while following, serves producer the engine's set numbered above
// version, the version of a set the producer holds, when the hub serves it
// an older one (or none) and the engine has one: the producer got a set
// from a leader that this replica has not read (a leader killed after
// serving it and before its write landed, or one whose write is still on
// its way). Until a replicated set at least as new as version is read, the
// engine's sets are served for the producer, as a stand-in would (acting).
// It reports whether it started standing in.
func (s *sink) hold(producer string, version uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leading {
		return false
	}
	if cur, _, ok := s.hub.Current(producer); ok && cur.Version >= version {
		return false
	}
	own, ok := s.own[producer]
	if !ok {
		return false
	}
	if s.standing == nil {
		s.standing = map[string]uint64{}
	}
	s.standing[producer] = version
	a := s.acts[producer]
	a = acted{own: true, src: own.Version, version: max(a.version, version, s.base) + 1}
	s.acts[producer] = a
	own.Version = a.version
	s.hub.Publish(own)
	return true
}

func (s *sink) unfollow(producer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rep, producer)
	delete(s.standing, producer)
	if !s.leading && !s.acting {
		s.hub.Remove(producer)
		delete(s.acts, producer)
	}
}
