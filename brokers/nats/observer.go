package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/brokers"
	"github.com/lagbridge/lagbridge/lag"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrNotConnected: the connection is down (reconnecting) or was lost
	// during the cycle. Observe fails fast with it instead of waiting for
	// request timeouts; nats.go keeps reconnecting in the background.
	ErrNotConnected = errors.New("nats: not connected")
	// ErrClosed: Observe was called after Close.
	ErrClosed = errors.New("nats: observer closed")
	// ErrNoJetStream: nobody answers on the JetStream API (JetStream not
	// enabled for the account, or wrong domain).
	ErrNoJetStream = errors.New("nats: no JetStream API responders")
	// ErrTooManyPages: a listing needed more than Config.MaxListPages
	// pages.
	ErrTooManyPages = errors.New("nats: listing exceeds maxListPages")
	// ErrPartial: some streams could not be refreshed this cycle. Observe
	// still returns the samples it has; the error joins one *StreamError
	// per failed stream.
	ErrPartial = errors.New("nats: some streams could not be observed")
)

// StreamError says why one stream could not be refreshed.
type StreamError struct {
	Stream string
	Err    error
}

func (e *StreamError) Error() string { return "stream " + e.Stream + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *StreamError) Unwrap() error { return e.Err }

// CycleStats counts the work of Observe calls: one cycle (Stats.Last) or
// all cycles since New (Stats.Total).
type CycleStats struct {
	// ListCalls is the number of list pages requested: STREAM.LIST pages
	// plus CONSUMER.LIST pages. Per cycle it is at most
	// ceil(streams/256) + sum over refreshed streams of
	// ceil(consumers/256), and never more than MaxListPages per listing.
	ListCalls int64
	// StreamInfoCalls is the number of STREAM.INFO requests (one per
	// refreshed stream).
	StreamInfoCalls int64
	// GetCalls is the number of head message gets (direct get or MSG.GET),
	// one per filter subject of a lagging consumer whose ack floor moved.
	GetCalls int64
	// GetCacheHits counts head times reused because the ack floor did not
	// move.
	GetCacheHits int64
	// StreamsRefreshed and StreamsReused count watched streams whose infos
	// were fetched, respectively repeated from an earlier cycle.
	StreamsRefreshed int64
	StreamsReused    int64
	// StreamErrors counts streams whose refresh failed.
	StreamErrors int64
	// Samples is the number of samples returned.
	Samples int64
	// Duration is the time Observe took, by the observer's clock.
	Duration time.Duration
}

func (c *CycleStats) add(d CycleStats) {
	c.ListCalls += d.ListCalls
	c.StreamInfoCalls += d.StreamInfoCalls
	c.GetCalls += d.GetCalls
	c.GetCacheHits += d.GetCacheHits
	c.StreamsRefreshed += d.StreamsRefreshed
	c.StreamsReused += d.StreamsReused
	c.StreamErrors += d.StreamErrors
	c.Samples += d.Samples
	c.Duration += d.Duration
}

// Stats is a snapshot of the observer's counters.
type Stats struct {
	// Cycles is the number of Observe calls that got past the
	// connection check.
	Cycles int64
	Last   CycleStats
	Total  CycleStats
}

type cycleCounters struct {
	listCalls, streamInfoCalls, getCalls, getCacheHits atomic.Int64
}

// Observer watches JetStream consumers on one NATS deployment. Create it
// with New; Observe, Stats, Conn and Close are safe for concurrent use
// (Observe calls are serialized).
//
// Goroutines: New starts none of its own; the nats.go connection runs its
// reader, flusher and callback goroutines until Close. Observe runs up to
// Config.Concurrency workers and waits for them before it returns.
type Observer struct {
	cfg       Config
	streams   brokers.Matcher
	consumers brokers.Matcher
	sched     schedule
	nc        *natsgo.Conn
	js        jetstream.JetStream
	prefix    string
	closedCh  chan struct{} // closed by the connection's ClosedHandler
	// dialErr is the last failed connect attempt's error, said while the
	// connection is down (nats.go keeps no error of its own for it).
	dialErr atomic.Pointer[error]

	closeCtx    context.Context
	closeCancel context.CancelFunc
	closeOnce   sync.Once

	// owns, when set (SetOwns), selects the streams of this replica's
	// shards; nil: every stream the filter selects.
	owns atomic.Pointer[func(stream string) bool]

	mu    sync.Mutex // serializes Observe; guards state
	state map[string]*streamState

	statsMu sync.Mutex
	stats   Stats

	// skips counts the ttl guard's terms from the MSG_TERMINATED
	// advisories (see skips.go); skipSub is its subscription, ended
	// with the connection.
	skips   *skips
	skipSub *natsgo.Subscription

	// testHookRefresh, when set (tests only), runs at the start of every
	// stream refresh; an error fails that refresh.
	testHookRefresh func(stream string) error
}

// streamState is what the observer remembers about one watched stream.
// During a cycle only the worker refreshing the stream touches it.
type streamState struct {
	created   time.Time
	ok        bool // fetched successfully at least once
	gone      bool // deleted since the listing
	fetchedAt time.Time
	nextDue   time.Time
	samples   []lag.Sample // last good readings, sorted by consumer
	err       error        // last refresh error, nil after a success
	ends      map[string]*endTracker
	heads     map[string]headEntry
}

// headEntry caches a consumer's head: while its ack floor (and identity)
// is unchanged and the message is still stored, the head is the same
// message.
type headEntry struct {
	identity string
	floor    uint64
	seq      uint64
	time     time.Time
}

// SetOwns narrows the observation to the streams for which owns returns
// true (this replica's shards, see internal/shard), from the next cycle
// on; a stream it leaves out leaves the samples as a deleted one does.
// nil restores every stream Config.Streams selects. owns is called from
// Observe and must be safe for concurrent use. Safe to call at any time.
func (o *Observer) SetOwns(owns func(stream string) bool) {
	if owns == nil {
		o.owns.Store(nil)
		return
	}
	o.owns.Store(&owns)
}

// New validates cfg, connects to NATS and returns an Observer. opts are
// nats.go connection options applied after the ones built from cfg (so
// they win; a ClosedHandler set here is still called), as kafka.New takes
// kgo options. The connection reconnects forever (Config.ReconnectWait
// apart); New itself fails when the first connect fails (within
// Config.RequestTimeout; with nats.RetryOnFailedConnect it does not wait),
// when a TLS or nkey file cannot be read, or with the joined Validate
// errors. It does not check that JetStream is enabled: Observe reports
// ErrNoJetStream.
func New(cfg Config, opts ...natsgo.Option) (*Observer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	o := &Observer{
		cfg:      cfg,
		sched:    newSchedule(cfg),
		prefix:   jetstream.DefaultAPIPrefix,
		closedCh: make(chan struct{}),
		state:    make(map[string]*streamState),
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Domain != "" {
		o.prefix = "$JS." + cfg.Domain + ".API."
	}
	var err error
	if o.streams, err = cfg.Streams.Compile(); err != nil {
		return nil, err
	}
	if o.consumers, err = cfg.Consumers.Compile(); err != nil {
		return nil, err
	}
	nopts := natsgo.GetDefaultOptions()
	nopts.Servers = cfg.URLs
	base := []natsgo.Option{
		natsgo.Name("lagbridge-observer/" + cfg.Cluster),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(cfg.ReconnectWait),
		natsgo.Timeout(cfg.RequestTimeout),
	}
	authTLS, err := authTLSOptions(cfg)
	if err != nil {
		return nil, err
	}
	for _, f := range slices.Concat(base, authTLS, opts) {
		if err := f(&nopts); err != nil {
			return nil, fmt.Errorf("nats: option: %w", err)
		}
	}
	userReconnectErr := nopts.ReconnectErrCB
	nopts.ReconnectErrCB = func(nc *natsgo.Conn, err error) {
		if userReconnectErr != nil {
			userReconnectErr(nc, err)
		}
		o.dialErr.Store(&err)
	}
	userClosed := nopts.ClosedCB
	nopts.ClosedCB = func(nc *natsgo.Conn) {
		if userClosed != nil {
			userClosed(nc)
		}
		close(o.closedCh)
	}
	userAsync := nopts.AsyncErrorCB
	nopts.AsyncErrorCB = func(nc *natsgo.Conn, sub *natsgo.Subscription, err error) {
		if userAsync != nil {
			userAsync(nc, sub, err)
		}
		o.skips.asyncError(sub, err)
	}
	o.skips = &skips{watched: o.watchesSkips, log: log, runs: make(map[skipKey][]skipRun), domain: cfg.Domain}
	nc, err := nopts.Connect()
	if err != nil {
		return nil, fmt.Errorf("nats: connect %s: %w", redactURLs(cfg.URLs), err)
	}
	o.nc = nc
	o.skips.version = nc.ConnectedServerVersion
	if cfg.Domain != "" {
		o.js, err = jetstream.NewWithDomain(nc, cfg.Domain)
	} else {
		o.js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	if o.skipSub, err = nc.Subscribe(terminatedSubject, o.skips.handle); err != nil {
		// Behaviour as before: nothing counted.
		log.Warn("nats: cannot subscribe to "+terminatedSubject+": the ttl guard's skips are not counted; expired messages the guard skips read as consumption", "err", err)
	}
	o.closeCtx, o.closeCancel = context.WithCancel(context.Background())
	return o, nil
}

// skipsCounted reports whether the observer counts the ttl guard's
// skips: subscribed to the advisories, not refused, on a server that
// names a term's reason (see skips.go).
func (o *Observer) skipsCounted() bool {
	return o.skipSub != nil && o.skipSub.IsValid() && !o.skips.warnedPerm.Load() && atLeast(o.skips.version(), minReasonServer)
}

// watchesSkips reports whether the observer counts the skips of a
// consumer: one it watches, on a stream this replica owns.
func (o *Observer) watchesSkips(stream, consumer string) bool {
	if !o.streams.Match(stream) || !o.consumers.Match(consumer) {
		return false
	}
	owns := o.owns.Load()
	return owns == nil || (*owns)(stream)
}

// notConnected is ErrNotConnected with the connection's status and, while
// it reconnects, the last connect attempt's error (a dial error names the
// address), so that a wrong URL or a server gone away says so.
func (o *Observer) notConnected(st natsgo.Status) error {
	if e := o.dialErr.Load(); e != nil && *e != nil && st != natsgo.CLOSED {
		return fmt.Errorf("%w (%s, servers %s): last attempt: %w", ErrNotConnected, st, redactURLs(o.cfg.URLs), *e)
	}
	return fmt.Errorf("%w (%s)", ErrNotConnected, st)
}

// authTLSOptions turns the auth and TLS settings into nats.go options,
// reading the files they name.
func authTLSOptions(cfg Config) ([]natsgo.Option, error) {
	var opts []natsgo.Option
	switch {
	case cfg.CredsFile != "":
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return nil, fmt.Errorf("nats: credsFile: %w", err)
		}
		opts = append(opts, natsgo.UserCredentials(cfg.CredsFile))
	case cfg.NKeyFile != "":
		opt, err := natsgo.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats: nkeyFile: %w", err)
		}
		opts = append(opts, opt)
	case cfg.User != "":
		opts = append(opts, natsgo.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, natsgo.Token(cfg.Token))
	}
	if cfg.TLS.Set() {
		tc, errs := cfg.TLS.Load("nats")
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		opts = append(opts, natsgo.Secure(tc))
	}
	return opts, nil
}

// Conn returns the underlying connection, for publishers that share it
// (the quota KV bucket). It stays owned by the Observer: do not Close or
// Drain it.
func (o *Observer) Conn() *natsgo.Conn { return o.nc }

// Stats returns a snapshot of the API call counters.
func (o *Observer) Stats() Stats {
	o.statsMu.Lock()
	defer o.statsMu.Unlock()
	return o.stats
}

// Close stops a running Observe, drains the connection and waits (up to
// RequestTimeout) for it to close. It is idempotent and safe to call
// concurrently; Observe afterwards returns ErrClosed.
func (o *Observer) Close() {
	o.closeOnce.Do(func() {
		o.closeCancel()
		o.mu.Lock()
		defer o.mu.Unlock()
		if err := o.nc.Drain(); err != nil {
			// Closed already, or reconnecting (Drain then closes).
			o.nc.Close()
		}
		select {
		case <-o.closedCh:
		case <-time.After(o.cfg.RequestTimeout):
			o.nc.Close()
			<-o.closedCh
		}
	})
}

// Observe runs one observation cycle and returns one lag.Sample per
// watched consumer, sorted by stream then consumer. A stream is refreshed
// (its consumer list, its stream info and, for lagging consumers whose ack
// floor moved, one message get per filter subject) when its InfoInterval
// is due; otherwise its last readings are returned again, with their
// original At, and marked Stale once older than 3*InfoInterval.
//
// Errors: ErrClosed after Close; ErrNotConnected while the connection is
// down or when it drops during the cycle (no samples then); a listing error
// (ErrNoJetStream, ErrTooManyPages, a timeout) when the stream list cannot
// be read (no samples). When only some streams fail, Observe returns the
// samples together with an error wrapping ErrPartial; the failed streams'
// previous readings are included with Stale set and Err saying why.
func (o *Observer) Observe(ctx context.Context) ([]lag.Sample, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closeCtx.Err() != nil {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(o.closeCtx, cancel)
	defer stop()

	// Requests in flight when the connection drops would otherwise wait
	// for their timeout: nats.go does not fail them. Cancel the cycle as
	// soon as the connection is lost.
	lost := o.nc.StatusChanged(natsgo.RECONNECTING, natsgo.DISCONNECTED, natsgo.CLOSED)
	var dropped atomic.Bool
	var watch sync.WaitGroup
	watch.Go(func() {
		select {
		case _, ok := <-lost:
			if ok {
				dropped.Store(true)
				cancel()
			}
		case <-ctx.Done():
		}
	})
	defer func() {
		o.nc.RemoveStatusListener(lost)
		cancel()
		watch.Wait()
	}()

	start := o.cfg.Now()
	if st := o.nc.Status(); st != natsgo.CONNECTED {
		return nil, o.notConnected(st)
	}
	o.dialErr.Store(nil)
	var cs cycleCounters
	var cycle CycleStats
	defer func() {
		cycle.ListCalls = cs.listCalls.Load()
		cycle.StreamInfoCalls = cs.streamInfoCalls.Load()
		cycle.GetCalls = cs.getCalls.Load()
		cycle.GetCacheHits = cs.getCacheHits.Load()
		cycle.Duration = o.cfg.Now().Sub(start)
		o.statsMu.Lock()
		o.stats.Cycles++
		o.stats.Last = cycle
		o.stats.Total.add(cycle)
		o.statsMu.Unlock()
	}()

	infos, missing, err := o.listStreams(ctx, &cs)
	if err != nil {
		return nil, o.cycleError(ctx, &dropped, fmt.Errorf("nats: list streams: %w", err))
	}

	watched := o.streams.Match
	if owns := o.owns.Load(); owns != nil {
		watched = func(name string) bool { return o.streams.Match(name) && (*owns)(name) }
	}
	seen := make(map[string]bool, len(infos))
	var due []refreshJob
	for _, si := range infos {
		name := si.Config.Name
		if !watched(name) {
			continue
		}
		seen[name] = true
		st := o.state[name]
		if st != nil && st.ok && !st.created.Equal(si.Created) {
			st = nil // recreated under the same name: start over
		}
		if st == nil {
			st = &streamState{
				created: si.Created,
				ends:    make(map[string]*endTracker),
				heads:   make(map[string]headEntry),
			}
			o.state[name] = st
		}
		if !st.ok || st.err != nil || !start.Before(st.nextDue) {
			due = append(due, refreshJob{name: name, before: si, st: st})
		}
	}
	for _, name := range missing {
		// Listed but not reported (clustered leader did not answer):
		// keep the last readings; they turn stale with age.
		if watched(name) {
			seen[name] = true
		}
	}
	for name := range o.state {
		if !seen[name] {
			delete(o.state, name)
		}
	}
	o.skips.keepStreams(seen)

	o.runRefreshes(ctx, due, &cs)

	var failed []error
	gone := 0
	for _, j := range due {
		switch {
		case j.st.gone:
			gone++
			delete(o.state, j.name)
			o.skips.keep(j.name, nil)
		case j.st.err != nil:
			failed = append(failed, &StreamError{Stream: j.name, Err: j.st.err})
		}
	}
	if len(failed) > 0 {
		if err := o.cycleError(ctx, &dropped, nil); err != nil {
			return nil, fmt.Errorf("%w: %w", err, failed[0])
		}
	}

	samples := o.assemble(start)
	cycle.StreamsRefreshed = int64(len(due) - len(failed) - gone)
	cycle.StreamsReused = int64(len(o.state)) - cycle.StreamsRefreshed - int64(len(failed))
	cycle.StreamErrors = int64(len(failed))
	cycle.Samples = int64(len(samples))
	if len(failed) > 0 {
		return samples, fmt.Errorf("%w: %w", ErrPartial, errors.Join(failed...))
	}
	return samples, nil
}

// cycleError returns the error that ends the whole cycle, if any: the
// observer closing, the caller's context, or a lost connection. Otherwise
// it returns err (nil when err is nil).
// dropped says whether the connection was lost during the cycle (it may
// be back already).
func (o *Observer) cycleError(ctx context.Context, dropped *atomic.Bool, err error) error {
	switch {
	case o.closeCtx.Err() != nil:
		return ErrClosed
	case dropped.Load() || o.nc.Status() != natsgo.CONNECTED:
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNotConnected, err)
		}
		return fmt.Errorf("%w (%s)", ErrNotConnected, o.nc.Status())
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

type refreshJob struct {
	name   string
	before *jetstream.StreamInfo
	st     *streamState
}

// runRefreshes refreshes the due streams on up to Concurrency workers and
// waits for them.
func (o *Observer) runRefreshes(ctx context.Context, due []refreshJob, cs *cycleCounters) {
	jobs := make(chan refreshJob)
	var wg sync.WaitGroup
	for range min(o.cfg.Concurrency, len(due)) {
		wg.Go(func() {
			for j := range jobs {
				o.refresh(ctx, j, cs)
			}
		})
	}
	for _, j := range due {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
}

// refresh reads one stream: its consumer list, then its info (so that the
// stream state is newer than every consumer info), then the heads.
func (o *Observer) refresh(ctx context.Context, j refreshJob, cs *cycleCounters) {
	st := j.st
	fail := func(err error) {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			st.gone = true // deleted since the listing: not an error
			return
		}
		st.err = err
	}
	if o.testHookRefresh != nil {
		if err := o.testHookRefresh(j.name); err != nil {
			fail(err)
			return
		}
	}
	cis, missing, err := o.listConsumers(ctx, j.name, cs)
	if err != nil {
		fail(fmt.Errorf("list consumers: %w", err))
		return
	}
	at := o.cfg.Now()
	cs.streamInfoCalls.Add(1)
	sctx, cancel := context.WithTimeout(ctx, o.cfg.RequestTimeout)
	stream, err := o.js.Stream(sctx, j.name)
	cancel()
	if err != nil {
		fail(fmt.Errorf("stream info: %w", requestError(err)))
		return
	}
	info := stream.CachedInfo()
	sv := streamView{
		created:  info.Created,
		subjects: info.Config.Subjects,
		before:   j.before.State,
		after:    info.State,
	}
	if !j.before.Created.Equal(info.Created) {
		sv.before = info.State
	}

	prev := make(map[string]lag.Sample, len(st.samples))
	for _, s := range st.samples {
		prev[s.Target.Group] = s
	}
	live := make(map[string]bool, len(cis))
	samples := make([]lag.Sample, 0, len(cis))
	for _, ci := range cis {
		if !o.consumers.Match(ci.Name) {
			continue
		}
		live[ci.Name] = true
		r := read(ci, sv)
		r.part.Skipped = o.skips.take(j.name, ci.Name, ci.TimeStamp)
		et := st.ends[ci.Name]
		if et == nil {
			et = &endTracker{}
			st.ends[ci.Name] = et
		}
		r.part.End = et.apply(&r)
		live := et.live(&r)
		if r.part.Lag > 0 {
			o.head(ctx, stream, st, ci.Name, ci.AckFloor.Stream, info.State.FirstSeq, &r, cs)
		} else {
			delete(st.heads, ci.Name)
		}
		samples = append(samples, lag.Sample{
			Target:       o.target(j.name, ci.Name),
			At:           at,
			GroupState:   r.state,
			Members:      r.members,
			Live:         live,
			LastActive:   r.active,
			LastAck:      ackOnOurClock(r.acked, ci.TimeStamp, at),
			Partitions:   []lag.PartitionSample{r.part},
			SkipsCounted: o.skipsCounted(),
		})
	}
	for _, name := range missing {
		if live[name] || !o.consumers.Match(name) {
			continue
		}
		if s, ok := prev[name]; ok {
			// The server listed the consumer without its info (its
			// clustered leader did not answer in time): repeat the last
			// reading, marked stale.
			live[name] = true
			s.Partitions = slices.Clone(s.Partitions)
			for i := range s.Partitions {
				s.Partitions[i].Stale = true
				s.Partitions[i].Err = "consumer info missing from the consumer list"
			}
			samples = append(samples, s)
		}
	}
	o.skips.keep(j.name, live)
	for name := range st.ends {
		if !live[name] {
			delete(st.ends, name)
		}
	}
	for name := range st.heads {
		if !live[name] {
			delete(st.heads, name)
		}
	}
	slices.SortFunc(samples, func(a, b lag.Sample) int { return cmp.Compare(a.Target.Group, b.Target.Group) })

	st.nextDue = o.sched.next(j.name, at, !st.ok)
	st.samples = samples
	st.fetchedAt = at
	st.created = info.Created
	st.ok = true
	st.err = nil
}

// head sets the head time of a lagging consumer: the timestamp of the
// first stored message after its ack floor that matches one of its
// filters (the earliest over the filters). It costs one get per filter
// unless the ack floor did not move since the last get.
func (o *Observer) head(ctx context.Context, stream jetstream.Stream, st *streamState, name string, floor, firstSeq uint64, r *reading, cs *cycleCounters) {
	p := &r.part
	if h, ok := st.heads[name]; ok && h.identity == r.identity && h.floor == floor && h.seq >= firstSeq {
		cs.getCacheHits.Add(1)
		p.HeadTime, p.HeadKnown = h.time, true
		return
	}
	delete(st.heads, name)
	var best *jetstream.RawStreamMsg
	var errs []string
	for _, f := range r.filters {
		cs.getCalls.Add(1)
		gctx, cancel := context.WithTimeout(ctx, o.cfg.RequestTimeout)
		m, err := stream.GetMsg(gctx, floor+1, jetstream.WithGetMsgSubject(f))
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue
		case err != nil:
			errs = append(errs, fmt.Sprintf("get next %q after %d: %v", f, floor, err))
			continue
		}
		if best == nil || m.Sequence < best.Sequence {
			best = m
		}
	}
	switch {
	case len(errs) > 0:
		// A failed filter may hold an earlier message: the head is not
		// known. The core keeps the previous head while the ack floor
		// stays put.
		appendErr(p, "head: "+strings.Join(errs, "; "))
	case best == nil:
		// Messages past the ack floor were removed (or the counters ran
		// ahead of the store): nothing to date.
		appendErr(p, fmt.Sprintf("head: no stored message after ack floor %d matches the filter", floor))
	default:
		p.HeadTime, p.HeadKnown = best.Time, true
		st.heads[name] = headEntry{identity: r.identity, floor: floor, seq: best.Sequence, time: best.Time}
	}
}

func appendErr(p *lag.PartitionSample, msg string) {
	if p.Err == "" {
		p.Err = msg
		return
	}
	p.Err += "; " + msg
}

func (o *Observer) target(stream, consumer string) lag.Target {
	return lag.Target{Kind: lag.KindNATS, Cluster: o.cfg.Cluster, Topic: stream, Group: consumer}
}

// ackOnOurClock is the last acknowledgement acked (the server's clock,
// AckFloor.Last) on the observer's clock, for a consumer info the server
// gathered at ts (its TimeStamp) and read at at: at less the ack's age
// at ts, so that a server clock ahead of or behind the daemon's does not
// shift lag.State.AckAge (ahead by 750 ms, a consumer acking once a second
// read every second or every 250 ms qualified for the engaged cadence at
// every reading). Without a TimeStamp (servers before 2.10), acked as it
// is.
func ackOnOurClock(acked, ts, at time.Time) time.Time {
	if acked.IsZero() || ts.IsZero() {
		return acked
	}
	return at.Add(-max(ts.Sub(acked), 0))
}

// assemble copies every stream's readings into the result, marking those
// of failed refreshes (Stale, Err) and those older than 3 x the longer of
// InfoInterval and Interval (Stale): the daemon's engaged cadence sets an
// unset infoInterval to 250 ms at a 1 s interval, and a stream the listing
// missed once (missing) must not turn stale at the next 1 s cycle.
func (o *Observer) assemble(now time.Time) []lag.Sample {
	names := make([]string, 0, len(o.state))
	n := 0
	for name, st := range o.state {
		names = append(names, name)
		n += len(st.samples)
	}
	slices.Sort(names)
	out := make([]lag.Sample, 0, n)
	staleAfter := 3 * max(o.cfg.InfoInterval, o.cfg.Interval)
	for _, name := range names {
		st := o.state[name]
		old := now.Sub(st.fetchedAt) > staleAfter
		for _, s := range st.samples {
			s.Partitions = slices.Clone(s.Partitions)
			if st.err != nil {
				s.Err = "refresh failed: " + st.err.Error()
			}
			for i := range s.Partitions {
				p := &s.Partitions[i]
				if st.err != nil {
					p.Stale = true
					p.Err = s.Err
				} else if old {
					p.Stale = true
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// redactURLs joins urls for an error or a log line without their user
// information: nats://user:password@host and nats://token@host carry
// secrets, and these errors reach /v1/lag, `lagbridge status`, the
// dashboard and the log.
func redactURLs(urls []string) string {
	out := make([]string, len(urls))
	for i, raw := range urls {
		out[i] = redactURL(raw)
	}
	return strings.Join(out, ",")
}

// redactURL is raw with everything between its scheme (if any) and its
// last '@' replaced by "redacted", read as text rather than parsed, so
// that a password with an unescaped '/' or ',' or an entry holding two
// URLs shows no secret either.
func redactURL(raw string) string {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return raw[:start] + "redacted" + raw[at:]
}
