package daemon

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lagbridge/lagbridge/lag"
)

// Handler serves the daemon's HTTP API on a mux that callers may extend:
// /metrics, /healthz, /readyz and /v1/lag.
//
// A request for a path that some pattern serves with other methods only
// is answered 405 with Allow listing them, even when a catch-all "/"
// (the dashboard) is mounted, which would otherwise answer 404.
type Handler struct {
	Mux *http.ServeMux
	// ReadAccess, when set, guards the read endpoints (/v1/lag): it
	// returns true when the request may read, and otherwise writes the
	// answer (401, 403) itself. Set it before serving; nil: open.
	ReadAccess func(http.ResponseWriter, *http.Request) bool
	// Election, when set (replicas, ha:), says this replica's role per
	// cluster ("leader of a; follower of b") and whether every election
	// it waits for has answered: until then /readyz answers 503 (not yet
	// synced). unreached are the clusters no cycle observed yet although
	// one ended (Store.Readiness): their elections are not waited for.
	// Set it before serving; nil: one replica, /readyz says "ready".
	Election func(unreached []string) (roles string, ok bool)
	// Shards, when set (ha.shards), says which replica observes which
	// shard of each cluster; /v1/lag lists it beside this replica's own
	// targets. Set it before serving; nil: no sharding.
	Shards func() []ShardView
	// Now is the clock of /v1/lag's ages: time.Now from NewHandler;
	// replace it before serving.
	Now   func() time.Time
	store *Store
}

// NewHandler builds the mux. gather is the registry /metrics exposes.
func NewHandler(store *Store, gather prometheus.Gatherer) *Handler {
	h := &Handler{Mux: http.NewServeMux(), store: store, Now: time.Now}
	h.Mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	h.Mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	h.Mux.HandleFunc("GET /readyz", h.readyz)
	h.Mux.HandleFunc("GET /v1/lag", h.lag)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.Mux.Handler(r); pattern == "" || pattern == "/" {
		if allow := h.allowed(r); allow != "" {
			w.Header().Set("Allow", allow)
			httpError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow))
			return
		}
		// The API answers its errors in JSON (docs/quota-protocol.yaml),
		// a path it does not serve too; the page's catch-all has none there.
		// (pattern "" is the mux's redirect of an unclean path: left to it.)
		if pattern == "/" && strings.HasPrefix(r.URL.Path, "/v1/") {
			httpError(w, http.StatusNotFound, fmt.Sprintf("no API endpoint %s (see docs/quota-protocol.yaml and the README's HTTP and metrics)", r.URL.Path))
			return
		}
	}
	h.Mux.ServeHTTP(w, r)
}

// probeMethods are the methods tried to find what a path allows.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed returns the methods (comma-separated) that a pattern other than
// the catch-all serves r's path with, or "" when none does.
func (h *Handler) allowed(r *http.Request) string {
	var allow []string
	probe := new(http.Request)
	for _, m := range probeMethods {
		*probe = *r
		probe.Method = m
		if _, p := h.Mux.Handler(probe); p != "" && p != "/" {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

// readyz answers 200 once the daemon can serve leases for what it
// observes: every cluster's first cycle has ended, at least one cluster
// was observed, and (ha:) the elections and lease state it waits for
// answered. A cluster whose every cycle failed for unreachedGrace and
// unreachedCycles (wrong address, credentials, TLS, an outage at start)
// does not keep the replica out of service: the body names it, not its
// error, since /readyz is open in every auth mode and a broker's error
// names hosts and resolvers (the error is in /v1/lag and the log),
// lagbridge_observe_errors_total counts its cycles and the alert
// LagbridgeClusterNeverObserved fires after 5 minutes; quotas on its
// targets are open (no target, no decision) until it answers. With every
// cluster unreached the replica serves nothing it observes: 503.
func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	observed, starting, unreached := h.store.Readiness()
	var notes, names []string
	for _, st := range unreached {
		names = append(names, st.Name)
		notes = append(notes, fmt.Sprintf("never observed %s since start (its error: /v1/lag, the log)", st.Name))
	}
	note := ""
	if len(notes) > 0 {
		note = "; " + strings.Join(notes, "; ")
	}
	switch {
	case len(starting) > 0:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: no successful observation yet of %s (first cycles running or failing for under %v)%s\n", strings.Join(starting, ", "), unreachedGrace, note)
		return
	case len(observed) == 0:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: no cluster observed yet%s\n", note)
		return
	}
	if h.Election != nil {
		roles, ok := h.Election(names)
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s%s\n", roles, note)
			return
		}
		fmt.Fprintf(w, "ready: %s%s\n", roles, note)
		return
	}
	fmt.Fprintf(w, "ready%s\n", note)
}

// LagResponse is the body of GET /v1/lag. Durations are in seconds.
type LagResponse struct {
	GeneratedAt time.Time     `json:"generatedAt"`
	Clusters    []ClusterView `json:"clusters"`
	// Targets are the targets this replica observes: with shards, those
	// of its own shards only (see Shards for the others' owners).
	Targets []TargetView `json:"targets"`
	// Shards, with ha.shards, lists every shard of every cluster and the
	// replica that observes it: ask that replica's /v1/lag for its
	// targets.
	Shards []ShardView `json:"shards,omitempty"`
}

// ShardView is one shard of a cluster as this replica knows it.
type ShardView struct {
	Cluster string `json:"cluster"`
	Shard   int    `json:"shard"`
	// Owner is the id of the replica that observes it ("" unknown);
	// Self is true when that is this replica.
	Owner string `json:"owner"`
	Self  bool   `json:"self"`
	// StandIn is true when Owner observes the shard in place of the
	// assigned owner, Assigned, whose records of it went silent (it
	// was killed, or is paused): until that one writes again or the
	// assignment moves the shard.
	StandIn  bool   `json:"standIn,omitempty"`
	Assigned string `json:"assigned,omitempty"`
	// DecisionsAt is the cycle of the newest decisions written for the
	// shard and read back from the brokers (zero: none yet), Decisions
	// their number.
	DecisionsAt time.Time `json:"decisionsAt,omitzero"`
	Decisions   int       `json:"decisions"`
}

// ClusterView is one cluster's observation health.
type ClusterView struct {
	ClusterStatus
	DurationSeconds float64 `json:"lastCycleSeconds"`
}

// TargetView is a lag.State as served over HTTP.
type TargetView struct {
	lag.Target
	Status             lag.Status `json:"status"`
	Rule               string     `json:"rule"`
	Reason             string     `json:"reason"`
	GroupState         string     `json:"groupState,omitempty"`
	Members            int        `json:"members"`
	Lag                int64      `json:"lag"`
	HeadAgeSeconds     float64    `json:"headAgeSeconds"`
	HeadAgeKnown       bool       `json:"headAgeKnown"`
	ProduceRate        float64    `json:"produceRate"`
	ConsumeRate        float64    `json:"consumeRate"`
	TimeToDrainSeconds *float64   `json:"timeToDrainSeconds"` // null: never at current rates
	ObservedAt         time.Time  `json:"observedAt"`
	Stale              bool       `json:"stale"`
	Partial            bool       `json:"partial,omitempty"`
	// UncommittedPartitions counts partitions without a committed offset:
	// their lag is unknown and in no other figure.
	UncommittedPartitions int     `json:"uncommittedPartitions,omitempty"`
	StalenessSeconds      float64 `json:"stalenessSeconds"`
	Err                   string  `json:"error,omitempty"`
	// Lag and HeadAgeSeconds are at the best known position, from
	// Source: "commits", "estimate" (commits advanced by the rate measured
	// between them), "consumer" (its own fresh report) or "first-seen" (a
	// live group without a commit, from when it was first seen).
	// CommittedLag and CommittedHeadAgeSeconds are the broker's figures.
	Source                  lag.Source `json:"source,omitempty"`
	CommittedLag            int64      `json:"committedLag"`
	CommittedHeadAgeSeconds float64    `json:"committedHeadAgeSeconds"`
	// CommitIntervalSeconds is the learned commit cadence (0: unknown);
	// UncertaintySeconds how old the knowledge behind an estimate is.
	CommitIntervalSeconds float64 `json:"commitIntervalSeconds"`
	UncertaintySeconds    float64 `json:"uncertaintySeconds"`
	// Live is "live", "idle" or "unknown"; LastLive when a consumer was
	// last seen attached (or first sight).
	Live                 lag.Liveness    `json:"live"`
	LastLive             time.Time       `json:"lastLive,omitzero"`
	Partitions           []PartitionView `json:"partitions,omitempty"`
	LastProgress         time.Time       `json:"lastProgress"`
	SecondsSinceProgress float64         `json:"secondsSinceProgress"`
	InstantProduceRate   float64         `json:"instantProduceRate"`
	InstantConsumeRate   float64         `json:"instantConsumeRate"`
	RatesKnown           bool            `json:"ratesKnown"`
	// Skipped counts the messages the consumer terminated as expired
	// (the ttl guard's skips, NATS) since the daemon first saw the
	// target; InstantSkipRate is their rate over the last interval, part
	// of InstantConsumeRate.
	Skipped         int64   `json:"skipped,omitempty"`
	InstantSkipRate float64 `json:"instantSkipRate,omitempty"`
	// SkipsCounted says the skips are counted (NATS, the advisories
	// subscribed to, a server that names the term's reason): without
	// it, no skipped says nothing.
	SkipsCounted bool `json:"skipsCounted,omitempty"`
}

// PartitionView is one partition as served over HTTP.
type PartitionView struct {
	lag.PartitionSample
	HeadAgeSeconds   float64   `json:"headAgeSeconds"`
	ObservedAt       time.Time `json:"observedAt"`
	StalenessSeconds float64   `json:"stalenessSeconds"`
	// Source, Position and the committed figures as for the target;
	// LastCommit is the estimated time of the newest move of the
	// committed offset, CommitRate the consume rate measured from commit
	// to commit (messages per second).
	Source                  lag.Source `json:"source,omitempty"`
	Position                int64      `json:"position"`
	CommittedLag            int64      `json:"committedLag"`
	CommittedHeadAgeSeconds float64    `json:"committedHeadAgeSeconds"`
	CommitIntervalSeconds   float64    `json:"commitIntervalSeconds"`
	LastCommit              time.Time  `json:"lastCommit,omitzero"`
	CommitRate              float64    `json:"commitRate"`
	UncertaintySeconds      float64    `json:"uncertaintySeconds"`
}

// ViewOf converts a state for the API as of now.
func ViewOf(s lag.State, now time.Time, withPartitions bool) TargetView {
	v := TargetView{
		Target: s.Target, Status: s.Status, Rule: s.Rule, Reason: s.Reason, GroupState: s.GroupState,
		Members: s.Members, Lag: s.Lag, HeadAgeSeconds: s.HeadAge.Seconds(), HeadAgeKnown: s.HeadAgeKnown,
		ProduceRate: round3(s.ProduceRate), ConsumeRate: round3(s.ConsumeRate), ObservedAt: s.At,
		Stale: s.Stale, Partial: s.Partial, UncommittedPartitions: s.Uncommitted, StalenessSeconds: now.Sub(s.At).Seconds(), Err: s.Err,
		LastProgress: s.LastProgress, SecondsSinceProgress: now.Sub(s.LastProgress).Seconds(),
		InstantProduceRate: round3(s.ProduceRateInstant), InstantConsumeRate: round3(s.ConsumeRateInstant),
		RatesKnown: s.RatesKnown, Skipped: s.Skipped, InstantSkipRate: round3(s.SkipRateInstant), SkipsCounted: s.SkipsCounted,
		Source: s.Source, CommittedLag: s.CommittedLag, CommittedHeadAgeSeconds: s.CommittedHeadAge.Seconds(),
		CommitIntervalSeconds: s.CommitInterval.Seconds(), UncertaintySeconds: s.Uncertainty.Seconds(),
		Live: s.Live, LastLive: s.LastLive,
	}
	if s.TimeToDrain != lag.Never {
		d := s.TimeToDrain.Seconds()
		v.TimeToDrainSeconds = &d
	}
	if withPartitions {
		v.Partitions = make([]PartitionView, len(s.Partitions))
		for i, p := range s.Partitions {
			v.Partitions[i] = PartitionView{PartitionSample: p.PartitionSample, HeadAgeSeconds: p.HeadAge.Seconds(),
				ObservedAt: p.ObservedAt, StalenessSeconds: now.Sub(p.ObservedAt).Seconds(),
				Source: p.Source, Position: p.Position, CommittedLag: p.CommittedLag, CommittedHeadAgeSeconds: p.CommittedHeadAge.Seconds(),
				CommitIntervalSeconds: p.CommitInterval.Seconds(), LastCommit: p.LastCommit, CommitRate: round3(p.CommitRate),
				UncertaintySeconds: p.Uncertainty.Seconds()}
		}
	}
	return v
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// lag serves GET /v1/lag. Query: cluster, topic, group (exact match),
// status, partitions=false to leave per-partition detail out.
func (h *Handler) lag(w http.ResponseWriter, r *http.Request) {
	if h.ReadAccess != nil && !h.ReadAccess(w, r) {
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "cluster", "topic", "group", "status", "partitions":
		default:
			httpError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q (known: cluster, topic, group, status, partitions)", k))
			return
		}
	}
	if st := q.Get("status"); st != "" && !slices.Contains(allStatuses, lag.Status(st)) {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("status: %q is not one of ok, lagging, stalled, stopped, stale, abandoned", st))
		return
	}
	withParts := true
	switch q.Get("partitions") {
	case "", "true", "1":
	case "false", "0":
		withParts = false
	default:
		httpError(w, http.StatusBadRequest, "partitions must be true or false")
		return
	}
	now := h.Now()
	resp := LagResponse{GeneratedAt: now, Clusters: []ClusterView{}, Targets: []TargetView{}}
	for _, c := range h.store.Clusters() {
		resp.Clusters = append(resp.Clusters, ClusterView{ClusterStatus: c, DurationSeconds: c.Duration.Seconds()})
	}
	if h.Shards != nil {
		for _, v := range h.Shards() {
			if q.Get("cluster") == "" || q.Get("cluster") == v.Cluster {
				resp.Shards = append(resp.Shards, v)
			}
		}
	}
	match := func(key, val string) bool { f := q.Get(key); return f == "" || f == val }
	for _, s := range h.store.States() {
		if match("cluster", s.Target.Cluster) && match("topic", s.Target.Topic) && match("group", s.Target.Group) && match("status", string(s.Status)) {
			resp.Targets = append(resp.Targets, ViewOf(s, now, withParts))
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// httpError writes {"error": msg} with code.
func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
