package history

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// HistoryResponse is the body of GET /v1/history.
type HistoryResponse struct {
	GeneratedAt time.Time `json:"generatedAt"`
	// StartedAt is when this daemon started: it holds nothing older (a
	// restart loses the history).
	StartedAt time.Time `json:"startedAt"`
	// DataSince is the time of the oldest point held; null when there is
	// none yet.
	DataSince *time.Time `json:"dataSince"`
	// IntervalSeconds is the resolution of recent points, the last
	// RecentSeconds; older ones, up to RetentionSeconds, are merged into
	// one per ResolutionSeconds.
	IntervalSeconds   float64  `json:"intervalSeconds"`
	RecentSeconds     float64  `json:"recentSeconds"`
	ResolutionSeconds float64  `json:"resolutionSeconds"`
	RetentionSeconds  float64  `json:"retentionSeconds"`
	Targets           []Series `json:"targets"`
}

// EventsResponse is the body of GET /v1/events.
type EventsResponse struct {
	GeneratedAt time.Time `json:"generatedAt"`
	// StartedAt is when this daemon started: no event is older.
	StartedAt time.Time `json:"startedAt"`
	// Dropped counts the events the ring dropped (the oldest, beyond
	// history.events) since the start.
	Dropped uint64  `json:"dropped"`
	Events  []Event `json:"events"`
}

// API serves /v1/history and /v1/events. Create it with its fields set;
// Now nil means time.Now. Safe for concurrent use.
type API struct {
	Store *Store
	Log   *Log
	Now   func() time.Time
}

// Register mounts GET /v1/history on mux behind guard (the check that
// guards /v1/lag) and GET /v1/events behind eventsGuard (the stricter
// check of /v1/quotas: events name producers and their grants); nil: none.
func (a *API) Register(mux *http.ServeMux, guard, eventsGuard func(http.Handler) http.Handler) {
	open := func(h http.Handler) http.Handler { return h }
	if guard == nil {
		guard = open
	}
	if eventsGuard == nil {
		eventsGuard = open
	}
	mux.Handle("GET /v1/history", guard(http.HandlerFunc(a.history)))
	mux.Handle("GET /v1/events", eventsGuard(http.HandlerFunc(a.events)))
}

func (a *API) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// params checks the query's keys against known and parses since and until:
// an RFC 3339 time, or a duration before now ("10m").
func params(r *http.Request, now time.Time, known ...string) (since, until time.Time, err error) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains(known, k) {
			return since, until, fmt.Errorf("unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	parse := func(key string) (time.Time, error) {
		v := q.Get(key)
		if v == "" {
			return time.Time{}, nil
		}
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t, nil
		}
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return now.Add(-d), nil
		}
		return time.Time{}, fmt.Errorf("%s: %q is neither an RFC 3339 time nor a duration before now such as 10m", key, v)
	}
	if since, err = parse("since"); err != nil {
		return
	}
	if until, err = parse("until"); err != nil {
		return
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		err = fmt.Errorf("until (%s) is before since (%s)", until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	return
}

// history serves GET /v1/history. Query: kind, cluster, topic, group (exact
// match), since and until (RFC 3339 or a duration before now), points (at
// most that many per target, 10 to 100000: adjacent points merged).
func (a *API) history(w http.ResponseWriter, r *http.Request) {
	now := a.now()
	since, until, err := params(r, now, "kind", "cluster", "topic", "group", "since", "until", "points")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	q := r.URL.Query()
	maxPoints := 0
	if v := q.Get("points"); v != "" {
		if maxPoints, err = strconv.Atoi(v); err != nil || maxPoints < 10 || maxPoints > 100000 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("points: %q is not a whole number from 10 to 100000", v)})
			return
		}
	}
	kind := lag.Kind(q.Get("kind"))
	switch kind {
	case "", lag.KindKafka, lag.KindNATS:
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("kind: %q is not one of kafka, nats", kind)})
		return
	}
	cfg, interval := a.Store.Config()
	resp := HistoryResponse{GeneratedAt: now, IntervalSeconds: interval.Seconds(), RecentSeconds: cfg.Recent.Seconds(),
		ResolutionSeconds: cfg.Resolution.Seconds(), RetentionSeconds: cfg.Retention.Seconds()}
	oldest, started := a.Store.Since()
	resp.StartedAt = started
	if !oldest.IsZero() {
		resp.DataSince = &oldest
	}
	resp.Targets = a.Store.Query(Query{Kind: kind, Cluster: q.Get("cluster"), Topic: q.Get("topic"),
		Group: q.Get("group"), Since: since, Until: until, MaxPoints: maxPoints})
	// Compact: a long history of many targets is large enough as it is.
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// events serves GET /v1/events. Query: producer, topic, cluster, kind,
// since, until, limit (the newest n).
func (a *API) events(w http.ResponseWriter, r *http.Request) {
	now := a.now()
	since, until, err := params(r, now, "producer", "topic", "cluster", "kind", "since", "until", "limit")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("limit: %q is not a positive whole number", v)})
			return
		}
	}
	kind := EventKind(q.Get("kind"))
	switch kind {
	case "", KindSignal, KindCut, KindRelease:
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("kind: %q is not one of signal, cut, release", kind)})
		return
	}
	eq := EventQuery{Producer: q.Get("producer"), Topic: q.Get("topic"), Cluster: q.Get("cluster"), Kind: kind, Since: since, Until: until, Limit: limit}
	if err := fullTopic(&eq); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	evs, dropped := a.Log.Events(eq)
	_, started := a.Store.Since()
	writeJSON(w, http.StatusOK, EventsResponse{GeneratedAt: now, StartedAt: started, Dropped: dropped, Events: evs})
}

// fullTopic reads q.Topic given as kind/cluster/name, as `lagbridge why`,
// the log and /v1/quotas write a topic (kafka/main/orders), into its
// parts. Kafka topic and NATS stream names have no "/", so a name with
// one is that or a mistake.
func fullTopic(q *EventQuery) error {
	kind, rest, ok := strings.Cut(q.Topic, "/")
	if !ok {
		return nil
	}
	cluster, name, ok := strings.Cut(rest, "/")
	if !ok || (lag.Kind(kind) != lag.KindKafka && lag.Kind(kind) != lag.KindNATS) || cluster == "" || name == "" {
		return fmt.Errorf("topic: %q is neither a topic's name nor kind/cluster/name (such as kafka/main/orders)", q.Topic)
	}
	if q.Cluster != "" && q.Cluster != cluster {
		return fmt.Errorf("topic: %q names cluster %q, but cluster is %q", q.Topic, cluster, q.Cluster)
	}
	q.TopicKind, q.Cluster, q.Topic = lag.Kind(kind), cluster, name
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
