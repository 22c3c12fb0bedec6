// Package app wires the daemon together from a validated config: one
// broker adapter and one observation loop per cluster, the store, the
// metrics and the HTTP server. It runs them under one context and stops them
// in order. cmd/lagbridge (run, demo) and the integration tests use it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/dashboard"
	"github.com/lagbridge/lagbridge/internal/enforce"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/internal/replica"
	"github.com/lagbridge/lagbridge/internal/servertls"
	"github.com/lagbridge/lagbridge/internal/shard"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// App is a configured daemon, connected but not yet running.
type App struct {
	cfg      config.Config
	log      *slog.Logger
	Registry *prometheus.Registry
	Store    *daemon.Store
	Metrics  *daemon.Metrics
	Handler  *daemon.Handler
	Engine   *engine.Engine
	Hub      *quotaserver.Hub
	// History holds every target's recent past and Decisions the
	// decision log (/v1/history, /v1/events).
	History   *history.Store
	Decisions *history.Log
	ttl       *enforce.Runner
	loops     []*daemon.Loop
	closers   []func()
	// clientQuotas clear, on a graceful stop, the Kafka client quotas
	// the daemon set.
	clientQuotas []*publish.ClientQuotaPublisher
	ln           net.Listener
	tls          *servertls.Reloader // nil: plain HTTP
	qs           *quotaserver.Server
	// el elects, per cluster, the replica that publishes (ha:); empty
	// without replicas: this one always publishes.
	el elections
	// rep replicates the lease state between replicas; nil without.
	rep *replica.Replicator
	// leaseCluster is the cluster rep's lease state travels through.
	leaseCluster string
	// wasReady: /readyz answered ready once (ha:, App.ready).
	wasReady atomic.Bool
	// sh splits the observation across replicas (ha.shards); empty
	// without: this replica observes everything.
	sh sharding
}

// New builds the daemon from cfg (which must be valid) and connects to every
// cluster. It listens on cfg.Listen right away, so Addr is known before Run.
// On error everything built so far is closed.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*App, error) {
	a := &App{cfg: cfg, log: log, Registry: prometheus.NewRegistry()}
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lagbridge_build_info", Help: "Build information; always 1.",
		ConstLabels: prometheus.Labels{"version": Version}})
	build.Set(1)
	a.Registry.MustRegister(build)

	kinds := map[string]lag.Kind{}
	for _, k := range cfg.Kafka {
		kinds[k.Cluster] = lag.KindKafka
	}
	for _, n := range cfg.NATS {
		kinds[n.Cluster] = lag.KindNATS
	}
	a.Store = daemon.NewStore(kinds)
	a.Metrics = daemon.NewMetrics(a.Registry, a.Store)
	// The loops are built once the quota engine exists; collect their
	// sources first.
	type source struct {
		name string
		kind lag.Kind
		src  daemon.Source
	}
	var sources []source
	addLoop := func(name string, kind lag.Kind, src daemon.Source) {
		sources = append(sources, source{name, kind, src})
	}
	var pubs []publish.Publisher
	movers, streams := map[string]*enforce.KafkaMover{}, map[string]*enforce.StreamEnforcer{}
	em, err := enforce.NewMetrics(a.Registry)
	if err != nil {
		return nil, err
	}
	clientQuotas := false
	for _, p := range cfg.Quota.Policies {
		clientQuotas = clientQuotas || p.KafkaClientQuota
	}
	var unheeded *prometheus.GaugeVec
	if clientQuotas {
		unheeded = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lagbridge_kafka_client_quota_unheeded",
			Help: "1 while a topic receives more than twice its allowed rate although lagbridge holds Kafka client quotas for its listed producers (they do not produce with those client.ids, or unlisted producers write to it)."},
			[]string{"cluster", "topic"})
		a.Registry.MustRegister(unheeded)
	}
	// The channel and election of the replicated lease state (ha:).
	var leaseCh replica.Channel
	var leaseEl leader.Elector
	var kafkaLease replica.Channel
	var kafkaLeaseEl leader.Elector
	var electionMetrics *leader.Metrics
	var quotaGates []publish.Publisher // the client quota publishers, gated
	ha := cfg.HA.WithDefaults()
	var shardMetrics *shard.Metrics
	shardOf := func(cluster string) shard.Config {
		if shardMetrics == nil {
			shardMetrics = shard.NewMetrics(a.Registry)
		}
		return shard.Config{Cluster: cluster, ID: ha.ID, Name: ha.Name, Count: ha.Shards, Session: ha.SessionTimeout, Every: cfg.Interval,
			OnChange: shardMetrics.Watch(cluster, ha.Shards)}
	}
	a.sh.id = ha.ID
	elect := func(cluster string) leader.Config {
		if electionMetrics == nil {
			electionMetrics = leader.NewMetrics(a.Registry)
		}
		return leader.Config{Cluster: cluster, ID: ha.ID, Name: ha.Name, Session: ha.SessionTimeout, Every: cfg.Interval,
			OnRole: electionMetrics.Watch(cluster), Log: log.With("component", "ha")}
	}
	listed := listedProducers(cfg.Quota.Policies)
	for _, kc := range cfg.Kafka {
		o, err := kafka.New(kc)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("kafka cluster %q: %w", kc.Cluster, err)
		}
		a.closers = append(a.closers, o.Close)
		addLoop(kc.Cluster, lag.KindKafka, o)
		if cfg.HA.Enabled {
			opts, err := kc.ClientOpts()
			if err != nil {
				a.Close()
				return nil, fmt.Errorf("kafka cluster %q: %w", kc.Cluster, err)
			}
			a.el.add(leader.NewKafka(opts, elect(kc.Cluster)))
			if ha.Shards > 1 {
				a.sh.add(shard.NewKafka(opts, shardOf(kc.Cluster), log.With("component", "ha")), o)
			}
			if kafkaLease == nil {
				// Without NATS, the lease state travels through a
				// compacted topic of the first Kafka cluster.
				ch := replica.NewKafka(opts, replica.KafkaTopic(ha.Name))
				a.closers = append(a.closers, ch.Close)
				kafkaLease, kafkaLeaseEl = ch, a.el.byCluster[kc.Cluster]
			}
		}
		movers[kc.Cluster] = enforce.NewKafkaMover(o.Client(), enforce.KafkaMoverConfig{Cluster: kc.Cluster, Logger: log.With("component", "ttl"), Metrics: em})
		cq := publish.NewClientQuotas(o.Client(), log.With("cluster", kc.Cluster))
		// Only the client-ids this daemon's policies list are its own:
		// another deployment's quotas on the cluster are left alone.
		cq.Owns = listed
		if clientQuotas {
			p := &publish.ClientQuotaPublisher{Cluster: kc.Cluster, BytesPerMessage: cfg.Quota.KafkaClientQuotas.BytesPerMessage, Quotas: cq,
				Sizes: publish.NewRecordSizes(o.Client()), Interval: cfg.Interval, Log: log, Unheeded: unheeded}
			g := a.el.gate(kc.Cluster, p)
			pubs = append(pubs, g)
			quotaGates = append(quotaGates, g)
			a.clientQuotas = append(a.clientQuotas, p)
		} else {
			// Quotas an earlier run set stay on the broker until cleared.
			pubs = append(pubs, a.el.gate(kc.Cluster, &publish.ClientQuotaSweeper{Cluster: kc.Cluster, Quotas: cq, Log: log}))
		}
	}
	for _, nc := range cfg.ObservedNATS() {
		nc.Log = log.With("cluster", nc.Cluster)
		// Start even while NATS is unreachable: not ready until it answers.
		o, err := nats.New(nc, natsgo.RetryOnFailedConnect(true))
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("nats cluster %q: %w", nc.Cluster, err)
		}
		a.closers = append(a.closers, o.Close)
		addLoop(nc.Cluster, lag.KindNATS, o)
		js, err := jetstream.New(o.Conn())
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("nats cluster %q: jetstream: %w", nc.Cluster, err)
		}
		if cfg.HA.Enabled {
			// Fencing and the per-key expiry of the elections need
			// nats-server 2.11: refuse an older one now (one reached
			// later is refused by every election round instead).
			if err := leader.CheckServer(o.Conn()); err != nil {
				a.Close()
				return nil, fmt.Errorf("nats cluster %q: %w", nc.Cluster, err)
			}
			ecfg, scfg := elect(nc.Cluster), shardOf(nc.Cluster)
			if !ha.IgnoreLegacyBuckets {
				ecfg.LegacyBucket, scfg.LegacyBucket = leader.LegacyBucket, shard.LegacyBucket
			}
			a.el.add(leader.NewNATS(js, "", ecfg))
			if ha.Shards > 1 {
				a.sh.add(shard.NewNATS(js, "", scfg, log.With("component", "ha")), o)
			}
			if leaseCh == nil || cfg.Quota.NATSKV.Cluster == nc.Cluster {
				// The lease state travels through the quota KV's
				// cluster, else the first NATS cluster.
				leaseCh, leaseEl = replica.NewNATS(js, replica.NATSBucket(ha.Name)), a.el.byCluster[nc.Cluster]
			}
		}
		streams[nc.Cluster] = enforce.NewStreamEnforcer(js, enforce.StreamEnforcerConfig{Cluster: nc.Cluster, Logger: log.With("component", "ttl"), Metrics: em})
		if cfg.Quota.NATSKV.Cluster == nc.Cluster {
			pubs = append(pubs, a.el.gate(nc.Cluster, &publish.KVPublisher{JS: js, Bucket: cfg.Quota.NATSKV.Bucket, Deployment: ha.Name, Log: log}))
		}
	}
	if leaseCh == nil {
		leaseCh, leaseEl = kafkaLease, kafkaLeaseEl
	}
	a.Hub = quotaserver.NewHub()
	var hub engine.Hub = a.Hub
	var served quotaserver.Engine
	lease := quota.LeaseConfig{Interval: cfg.Interval, Lifetime: cfg.LeaseLifetime()}
	if leaseCh != nil {
		// Presence records (replica.Config.ID) only where a follower may
		// write client quotas: the lease state's cluster has them.
		var presenceID string
		if gatedBy(quotaGates, leaseEl) {
			presenceID = ha.ID
		}
		a.leaseCluster = leaseEl.Cluster()
		a.rep = replica.New(replica.Config{Channel: leaseCh, Elector: leaseEl, Hub: a.Hub,
			Lifetime: lease.WithDefaults().Lifetime, Interval: cfg.Interval, Silence: max(ha.SessionTimeout/3, 4*cfg.Interval),
			Serve: max(ha.SessionTimeout/6, 4*cfg.Interval), ID: presenceID, Session: ha.SessionTimeout, Log: log.With("component", "ha")})
		// One follower writes the client quotas of the lease state's
		// cluster while the followers stand in for its silent leader.
		standIn(quotaGates, leaseEl, a.rep.ClientQuotaStandIn, log.With("component", "ha"))
		a.rep.Register(a.Registry)
		hub = a.rep.Sink()
		// First: the leader serves a new set once its write here
		// landed (replica.Replicator.Publish), not after the client
		// quotas' round trips too.
		pubs = append([]publish.Publisher{a.rep}, pubs...)
	}
	a.History = history.NewStore(cfg.History, cfg.Interval, time.Now())
	a.History.Register(a.Registry)
	a.Decisions = history.NewLog(cfg.History, log.With("component", "quota"), a.Registry)
	if rep := a.rep; rep != nil {
		// A decision is in force where this replica serves its own lease
		// sets (it leads the lease state's cluster, whose quota KV it
		// also writes, or stands in), or writes the Kafka client quotas
		// of the topic (its policy sets kafkaClientQuota and this
		// replica leads the topic's cluster). Leading any other cluster
		// publishes no decision. A follower's are marked not served.
		cq := map[string]bool{}
		for _, p := range cfg.Quota.Policies {
			cq[p.Name] = p.KafkaClientQuota
		}
		a.Decisions.Served = func(t quota.Topic, policy string) bool {
			return rep.Serving() || t.Kind == lag.KindKafka && cq[policy] && a.el.leading(t.Cluster)
		}
	}
	eng, err := engine.New(engine.Config{
		Policies: cfg.Quota.Policies, Hub: hub, Publishers: pubs, Logger: log.With("component", "quota"), Log: a.Decisions,
		Lease: lease, MaxProducers: cfg.Quota.MaxProducers,
	})
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("quota engine: %w", err)
	}
	a.Engine = eng
	served = eng
	if a.rep != nil {
		a.rep.SetEngine(eng)
		served = a.rep
	}
	if len(a.sh.order) > 0 {
		// A shard's decisions count until its owner's session ran out
		// and the next owner had a cycle to write its own.
		// A shard whose owner writes nothing (records, heartbeats every
		// interval) for as long as a follower waits before standing in
		// for a silent leader is observed by a stand-in until the
		// assignment moves it (after the session).
		a.sh.exchange(shard.NewExchange(shard.ExchangeConfig{Channel: leaseCh, Engine: eng, ID: ha.ID,
			Expire: 2*ha.SessionTimeout + 2*cfg.Interval, Interval: cfg.Interval, Silence: max(ha.SessionTimeout/3, 4*cfg.Interval),
			Beat: cfg.Interval, OnStandIn: shardMetrics.StandIn, Log: log.With("component", "ha")}))
	}
	engine.NewCollector(a.Registry, eng).ProducerGrants = cfg.Metrics.ProducerGrants
	pols, _ := quota.NewPolicies(cfg.Quota.Policies) // validated with the config
	a.ttl = enforce.NewRunner(pols, cfg.TTL.Enforce, movers, streams, log.With("component", "ttl"))
	if cfg.TTL.StreamCheckInterval > 0 {
		a.ttl.StreamEvery = cfg.TTL.StreamCheckInterval
	}
	um := newUnmatched(pols, cfg.Quota.Policies, a.Store, log.With("component", "quota"))
	um.done = um.done || cfg.HA.Shards > 1
	ug := newUngrouped(pols, cfg.Quota.Policies, a.Store, log.With("component", "quota"))
	rules := eng.Rules(cfg.Lag())
	watched := map[lag.Kind][]string{}
	for _, sc := range sources {
		watched[sc.kind] = append(watched[sc.kind], sc.name)
	}
	consumers := quotaserver.NewConsumers(quotaserver.ConsumersConfig{Fresh: cfg.Lag().ReportFresh, Clusters: watched,
		Log: log.With("component", "quota")}, a.Registry)
	for _, sc := range sources {
		var near func([]lag.Target) bool // nearCapacity: false: never asked
		if cfg.NearCapacityOn() {
			near = func(fine []lag.Target) bool { return eng.NearCapacity(sc.name, fine, cfg.EngagedCadence()) }
		}
		a.loops = append(a.loops, &daemon.Loop{Name: sc.name, Kind: sc.kind, Source: sc.src, Interval: cfg.Interval,
			Rules: rules, Store: a.Store, Metrics: a.Metrics, Logger: log.With("cluster", sc.name), Reports: consumers, Urgent: eng.Urgent,
			EngagedInterval: cfg.EngagedCadence(), Engaged: func(fine []lag.Target) bool { return eng.Engaged(sc.name, fine) },
			NearCapacity: near,
			OnCycle: func(now time.Time, states []lag.State) {
				eng.OnCycle(sc.name, now, states)
				a.sh.offer(sc.name, now)
				a.History.Record(now, states, eng.ClusterDecisions(sc.name))
				um.cycle(sc.name, len(sources))
				ug.cycle()
				// TTL enforcement writes to the brokers: the leader's, or
				// with shards each shard's owner's (states are its own).
				if a.el.leading(sc.name) || a.sh.sharded(sc.name) {
					a.ttl.OnCycle(sc.name, now, states)
				}
			}})
	}
	for _, l := range a.loops {
		consumers.Watch(l.Wake)
	}
	a.Handler = daemon.NewHandler(a.Store, a.Registry)
	if cfg.HA.Enabled {
		a.Handler.Election = a.ready
	}
	if len(a.sh.order) > 0 {
		a.Handler.Shards = a.sh.views
	}
	qs := quotaserver.New(a.Hub, served, cfg.Quota.Auth, a.Registry,
		quotaserver.WithLimits(quotaserver.Limits{MaxStreams: cfg.Quota.MaxStreams, MaxLongPolls: cfg.Quota.MaxLongPolls}))
	a.qs = qs
	qs.Register(a.Handler.Mux)
	consumers.Register(a.Handler.Mux, qs)
	a.Handler.ReadAccess = qs.ReadAccess
	(&history.API{Store: a.History, Log: a.Decisions}).Register(a.Handler.Mux, qs.ReadGuard, qs.ClosedReadGuard) // history as /v1/lag, events as /v1/quotas
	a.Handler.Mux.Handle("/", dashboard.Handler())                                                               // the built-in dashboard; /metrics, /v1/... are more specific
	if cfg.TLS.Enabled() {
		if a.tls, err = servertls.New(cfg.TLS, log.With("component", "tls")); err != nil {
			a.Close()
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		a.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen on %s: %s is in use (another lagbridge, or its demo?): give a free address with --listen (or listen in the file): %w", cfg.Listen, cfg.Listen, err)
		}
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	a.ln = ln
	// The refusal rule, on the address really bound (a host name may
	// resolve to anything): an open quota protocol only on loopback or
	// by explicit choice.
	if err := quotaserver.RefuseOpen(ln.Addr().String(), cfg.Quota.Auth); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// ready is /readyz with replicas: every election answered and, on a
// follower, the replicated lease state read once. The elections and shard
// assignments of the clusters in unreached (every cycle failed so far)
// are not waited for, nor, once this replica was ready, any election or
// assignment that has not answered (a cluster reached only later): the replica serves
// leases without them. The lease state is always waited for: without it a
// follower serves no decision of the leader's (its cluster unreached
// keeps the replica out of service).
func (a *App) ready(unreached []string) (string, bool) {
	skip := map[string]bool{}
	for _, c := range unreached {
		skip[c] = true
	}
	roles, ok := a.el.ready(skip, a.wasReady.Load())
	if shards, synced := a.sh.ready(skip, a.wasReady.Load()); shards != "" {
		roles, ok = roles+"; "+shards, ok && synced
	}
	if a.rep != nil && !a.rep.Synced() {
		why := "lease state not yet synced"
		if c := a.leaseCluster; skip[c] {
			why += fmt.Sprintf(" (it travels through %s, never observed)", c)
		}
		return roles + "; " + why, false
	}
	if ok {
		a.wasReady.Store(true)
	}
	return roles, ok
}

// httpErrorLog is the HTTP server's error log: its lines at WARN, but a
// TLS handshake that the client ended without a word (EOF, or a reset) at
// DEBUG. That is what a TCP check of the port does (a load balancer's, a
// Kubernetes tcpSocket probe, a port scan): session 30 saw one WARN line
// for each. A handshake that failed for a reason (a certificate, a TLS
// version, plain HTTP) stays at WARN.
type httpErrorLog struct{ log *slog.Logger }

func (w httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error from ") &&
		(strings.HasSuffix(msg, ": EOF") || strings.HasSuffix(msg, ": connection reset by peer")) {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// Addr is the address the HTTP server listens on.
func (a *App) Addr() string { return a.ln.Addr().String() }

// Run serves HTTP and runs every observation loop until ctx is done, then
// stops in order: the HTTP server (draining requests for up to
// ShutdownTimeout), the loops, the quota publishing, the Kafka client
// quotas it set (cleared, each cluster within ShutdownTimeout), the broker
// connections. It returns nil after
// a clean stop.
func (a *App) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// No global ReadTimeout or WriteTimeout: long-polls and lease streams
	// are long by design. Report bodies have their own read deadline
	// (quotaserver); idle keep-alive connections are closed after 2 min.
	srv := &http.Server{Handler: a.Handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: log.New(httpErrorLog{a.log}, "", 0)}
	var wg sync.WaitGroup
	srvErr := make(chan error, 1)
	serve := func() error { return srv.Serve(a.ln) }
	if a.tls != nil {
		srv.TLSConfig = a.tls.TLSConfig()
		serve = func() error { return srv.ServeTLS(a.ln, "", "") }
	}
	wg.Go(func() {
		if err := serve(); !errors.Is(err, http.ErrServerClosed) {
			srvErr <- err
			cancel()
		}
	})
	a.el.start(a.log)
	a.sh.start(ctx)
	if a.rep != nil {
		a.rep.Start(ctx)
	}
	a.Engine.Start(ctx)
	a.ttl.Start(ctx)
	for _, l := range a.loops {
		wg.Go(func() { _ = l.Run(ctx) })
	}
	wg.Go(func() { a.reloadTokens(ctx, tokenReloadEvery) })
	a.log.Info("lagbridge running", "version", Version, "listen", a.Addr(), "tls", a.tls != nil, "clusters", len(a.loops), "interval", a.cfg.Interval)
	<-ctx.Done()
	a.log.Info("shutting down")
	// End long-polls and streams first: the HTTP server waits for them.
	a.Hub.Close()
	sctx, scancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		a.log.Warn("http shutdown", "err", err)
	}
	wg.Wait()
	a.Engine.Close()
	if a.rep != nil {
		a.rep.Close()
	}
	a.ttl.Close()
	// No daemon, no throttle: a quota left on the broker would hold its
	// producers for good. With replicas, the one taking over steers them
	// from where they are: clearing would let producers run unthrottled
	// until it does.
	for _, p := range a.clientQuotas {
		if a.cfg.HA.Enabled {
			break
		}
		cctx, ccancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
		if err := p.Clear(cctx); err != nil {
			a.log.Warn("clearing kafka client quotas on shutdown", "err", err)
		}
		ccancel()
	}
	// Hand the shards and leadership over now rather than after the
	// session timeout.
	rctx, rcancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	a.sh.release(rctx)
	a.el.release(rctx)
	rcancel()
	a.Close()
	select {
	case err := <-srvErr:
		return fmt.Errorf("http server: %w", err)
	default:
		return nil
	}
}

// Close closes the broker connections and the listener. Idempotent; Run
// calls it.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
	if a.ln != nil {
		_ = a.ln.Close()
	}
}

// listedProducers reports whether a producer id is listed by one of
// policies: the Kafka client-ids whose client quotas this daemon owns.
func listedProducers(policies []quota.Policy) func(string) bool {
	ids := map[string]bool{}
	for _, p := range policies {
		for _, s := range p.Producers {
			ids[s.ID] = true
		}
	}
	return func(id string) bool { return ids[id] }
}

// tokenReloadEvery is how often the quota protocol's token files are read
// again: a rotated token (a Kubernetes Secret's update, a rewritten file)
// is in force within about two seconds of the file's change (two reads
// that agree, tokenReload).
const tokenReloadEvery = time.Second

// reloadTokens reads the token files every period until ctx ends and puts
// changed tokens in force (tokenReload.step). Tokens are never logged.
func (a *App) reloadTokens(ctx context.Context, period time.Duration) {
	r := tokenReload{cur: a.cfg, qs: a.qs, log: a.log.With("component", "auth")}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.step()
	}
}

// tokenReload is reloadTokens' state; one goroutine owns it.
type tokenReload struct {
	cur config.Config // its Quota.Auth: the tokens in force
	qs  *quotaserver.Server
	log *slog.Logger
	// pending is a change read once and not yet applied: a file caught
	// mid-write (a token cut short but still 16 characters, a list cut
	// after a line) validates too, so a change is applied only when the
	// next read agrees with it.
	pending *quotaserver.Auth
	// failed is the last problem logged: each distinct one is logged once.
	failed string
}

// step reads the token files once (config.ReloadAuth) and puts a change in
// force (quotaserver.SetAuth) once two reads in a row agree on it. Files
// that do not read or validate (an empty one, a token also in another
// role) leave the tokens in force, logged once per distinct problem.
func (r *tokenReload) step() {
	auth, changed, err := r.cur.ReloadAuth()
	if err == nil && changed && (r.pending == nil || !reflect.DeepEqual(*r.pending, auth)) {
		r.pending = &auth
		return
	}
	r.pending = nil
	if err == nil && changed {
		err = r.qs.SetAuth(auth)
	}
	if err != nil {
		if msg := err.Error(); msg != r.failed {
			r.log.Warn("quota token files not reloaded; the tokens in force stay", "err", strings.ReplaceAll(msg, "\n", "; "))
			r.failed = msg
		}
		return
	}
	r.failed = ""
	if changed {
		r.cur.Quota.Auth = auth
		r.log.Info("quota token files reloaded", "producerTokens", len(auth.Tokens), "adminTokens", len(auth.AdminTokens), "readTokens", len(auth.ReadTokens))
	}
}
