package quotaserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// Engine is what the server needs from the quota engine.
type Engine interface {
	// Report records a producer's topics and demand and returns its lease
	// set as of now (it also publishes the set to the hub).
	Report(r quotaproto.Report) (quotaproto.LeaseSet, error)
	// Quotas is the operators' view served at /v1/quotas: every
	// target's decision and the policies behind them (quotasBody).
	Quotas() (targets []quota.Decision, policies []quota.Policy)
}

// Holder is implemented by an Engine that acts on the version of the set a
// producer says it holds (a watch's ?version=, a stream's Last-Event-ID),
// before the hub answers it: a replica that serves an older set than the
// one the producer holds (internal/replica: a follower that has not read
// the set a lost leader served) serves one numbered above it instead.
type Holder interface {
	Held(producer string, version uint64)
}

// quotasBody is the body of /v1/quotas: the engine's view and every
// producer's lease set, sorted by producer. The fields are in the order
// of their names, as the body has always listed them.
type quotasBody struct {
	Policies  []quota.Policy        `json:"policies"`
	Producers []quotaproto.LeaseSet `json:"producers"`
	Targets   []quota.Decision      `json:"targets"`
}

// Server serves the protocol. Create it with New; mount Handler.
type Server struct {
	// Now is the clock of the tokens' id slots (PatternIdle): time.Now
	// from New; replace it before serving. Body deadlines are real time.
	Now func() time.Time

	hub    *Hub
	engine Engine
	// The tokens in force (SetAuth replaces them).
	auth    atomic.Pointer[authState]
	limits  Limits
	streams atomic.Int64 // open streams
	polls   atomic.Int64 // waiting long-polls

	requests    *prometheus.CounterVec
	pushes      prometheus.Counter
	watchers    prometheus.Gauge
	refused     *prometheus.CounterVec
	heartbeat   time.Duration
	bodyTimeout time.Duration // to read a report's body once its headers are in
}

// Limits bound what watching producers may hold. The zero value of each
// field means its default.
type Limits struct {
	// MaxStreams is how many lease streams (GET /v1/leases/stream) may be
	// open at once; one more is answered 503 with Retry-After. Default
	// DefaultMaxStreams. Each costs a connection and about 23 KB.
	MaxStreams int
	// MaxLongPolls is how many long-polls (GET /v1/leases/watch) may wait
	// at once; one more that would wait is answered 503 with Retry-After
	// (a poll whose answer is ready is always answered). Default
	// DefaultMaxLongPolls.
	MaxLongPolls int
}

// Defaults of Limits, and the Retry-After of a refused watcher.
const (
	DefaultMaxStreams   = 1024
	DefaultMaxLongPolls = 1024
	// WatcherRetryAfter is the Retry-After of a stream or long-poll
	// refused at its cap: 5 s.
	WatcherRetryAfter = 5 * time.Second
)

// Option configures a Server.
type Option func(*Server)

// WithLimits sets the watcher caps (zero fields: defaults).
func WithLimits(l Limits) Option {
	return func(s *Server) {
		if l.MaxStreams > 0 {
			s.limits.MaxStreams = l.MaxStreams
		}
		if l.MaxLongPolls > 0 {
			s.limits.MaxLongPolls = l.MaxLongPolls
		}
	}
}

// New returns a server publishing from hub. auth must be valid (Validate).
// reg receives lagbridge_quota_requests_total{endpoint,code},
// lagbridge_quota_pushes_total, lagbridge_quota_watchers and
// lagbridge_quota_watchers_refused_total{kind}.
func New(hub *Hub, engine Engine, auth Auth, reg prometheus.Registerer, opts ...Option) *Server {
	s := &Server{Now: time.Now, hub: hub, engine: engine, heartbeat: 15 * time.Second, bodyTimeout: 10 * time.Second,
		limits: Limits{MaxStreams: DefaultMaxStreams, MaxLongPolls: DefaultMaxLongPolls}}
	for _, o := range opts {
		o(s)
	}
	s.auth.Store(newAuthState(auth, nil))
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lagbridge_quota_requests_total", Help: "Quota protocol requests by endpoint and status code (4xx are protocol errors).",
	}, []string{"endpoint", "code"})
	s.pushes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lagbridge_quota_pushes_total", Help: "Lease sets pushed to watching producers (long-poll answers and stream events).",
	})
	s.watchers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lagbridge_quota_watchers", Help: "Producers currently waiting on a long-poll or stream.",
	})
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lagbridge_quota_watchers_refused_total", Help: "Streams and long-polls answered 503 because their cap (quota.maxStreams, quota.maxLongPolls) was reached.",
	}, []string{"kind"})
	for _, k := range []string{"long-poll", "stream"} { // from 0: rate() sees the first refusal
		s.refused.WithLabelValues(k)
	}
	reg.MustRegister(s.requests, s.pushes, s.watchers, s.refused)
	return s
}

// Register adds the protocol's routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST "+quotaproto.PathLeases, s.report)
	mux.HandleFunc("GET "+quotaproto.PathWatch, s.watch)
	mux.HandleFunc("GET "+quotaproto.PathStream, s.stream)
	mux.HandleFunc("GET "+quotaproto.PathQuotas, s.quotas)
}

// acquire takes one of max slots of n for a watcher of kind (stream,
// long-poll), or answers 503 with Retry-After and counts the refusal.
func (s *Server) acquire(w http.ResponseWriter, endpoint, kind string, n *atomic.Int64, max int) bool {
	if n.Add(1) <= int64(max) {
		return true
	}
	n.Add(-1)
	s.refused.WithLabelValues(kind).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(int(WatcherRetryAfter/time.Second)))
	s.fail(w, endpoint, http.StatusServiceUnavailable, "too many open %ss (at most %d); retry later", kind, max)
	return false
}

func (s *Server) fail(w http.ResponseWriter, endpoint string, code int, format string, args ...any) {
	s.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(quotaproto.ErrorBody{Error: fmt.Sprintf(format, args...)})
}

func (s *Server) ok(w http.ResponseWriter, endpoint string, v any) {
	s.requests.WithLabelValues(endpoint, "200").Inc()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	const ep = "report"
	var rep quotaproto.Report
	perms, ok := s.readJSON(w, r, ep, &rep, "producer", "topics", "topics[].topic")
	if !ok {
		return
	}
	if err := rep.Validate(); err != nil {
		s.fail(w, ep, http.StatusBadRequest, "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	if !s.permits(w, ep, perms, "producer", rep.Producer) {
		return
	}
	// ?version= is the version of the set the producer holds, as for a
	// watch (daemons before it ignore the query of a report).
	held, ok := s.version(w, ep, r.URL.Query())
	if !ok {
		return
	}
	s.held(rep.Producer, held)
	set, err := s.engine.Report(rep)
	if err != nil {
		// An engine with no room for a new producer says when to retry.
		var busy interface{ RetryAfter() time.Duration }
		if errors.As(err, &busy) {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(busy.RetryAfter().Seconds()))))
		}
		s.fail(w, ep, http.StatusServiceUnavailable, "%v", err)
		return
	}
	s.ok(w, ep, set)
}

// readJSON does what every JSON body of the protocol needs, in this
// order: it checks the bearer token before anything else (401), refuses an
// oversized (413) or non-JSON (415) request, reads at most
// quotaproto.MaxBodyBytes within bodyTimeout, and decodes the body into v
// with DecodeStrict (required: its required paths), 400 on any problem.
// It returns the producers (or groups) the token may act for, and false
// after writing the error. Which of them the request speaks for is the
// caller's check (permits), once the body says.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, ep string, v any, required ...string) (*scope, bool) {
	perms, ok := s.authenticate(w, r, ep)
	if !ok {
		return nil, false
	}
	if r.ContentLength > quotaproto.MaxBodyBytes {
		s.fail(w, ep, http.StatusRequestEntityTooLarge, "body of %d bytes exceeds %d", r.ContentLength, quotaproto.MaxBodyBytes)
		return nil, false
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		s.fail(w, ep, http.StatusUnsupportedMediaType, "content type %q: send application/json", ct)
		return nil, false
	}
	body, ok := s.readBody(w, r, ep)
	if !ok {
		return nil, false
	}
	if err := DecodeStrict(body, v, required...); err != nil {
		s.fail(w, ep, http.StatusBadRequest, "malformed body: %v", err)
		return nil, false
	}
	return perms, true
}

// readBody reads a request body of at most MaxBodyBytes within
// bodyTimeout; it writes the error itself (413, or 400 without the
// connection's addresses).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, ep string) ([]byte, bool) {
	// A client that trickles its body gets bodyTimeout, not a connection
	// and a goroutine for as long as it likes (the server's
	// ReadHeaderTimeout ends once the headers are in).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, quotaproto.MaxBodyBytes)); err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			s.fail(w, ep, http.StatusRequestEntityTooLarge, "body exceeds %d bytes", quotaproto.MaxBodyBytes)
		case errors.As(err, &ne) && ne.Timeout():
			s.fail(w, ep, http.StatusBadRequest, "the body did not arrive within %v", s.bodyTimeout)
		default:
			// Not err itself: it names the connection's addresses.
			s.fail(w, ep, http.StatusBadRequest, "the body could not be read (connection closed or truncated)")
		}
		return nil, false
	}
	return buf.Bytes(), true
}

// query returns the request's query after authentication, refusing
// parameters outside known and repeated ones; it writes the error itself.
func (s *Server) query(w http.ResponseWriter, r *http.Request, ep string, known ...string) (url.Values, *scope, bool) {
	perms, ok := s.authenticate(w, r, ep)
	if !ok {
		return nil, nil, false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.fail(w, ep, http.StatusBadRequest, "malformed query: %v", err)
		return nil, nil, false
	}
	for k, v := range q {
		if !slices.Contains(known, k) {
			s.fail(w, ep, http.StatusBadRequest, "unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
			return nil, nil, false
		}
		if len(v) > 1 {
			s.fail(w, ep, http.StatusBadRequest, "query parameter %q given %d times", k, len(v))
			return nil, nil, false
		}
	}
	return q, perms, true
}

// producerParam reads and checks ?producer= and that the token may act
// for it.
func (s *Server) producerParam(w http.ResponseWriter, ep string, q url.Values, perms *scope) (string, bool) {
	p := q.Get("producer")
	if !quotaproto.ValidProducer(p) {
		s.fail(w, ep, http.StatusBadRequest, "producer %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", p)
		return "", false
	}
	return p, s.permits(w, ep, perms, "producer", p)
}

// goDuration is the form of ?timeout= in the spec: what Go's
// time.Duration.String writes for 0s to 60s (30s, 1m0s, 1.5s, 500ms) and a
// bare 0; no sign, no blanks, at most two parts of at most six digits
// (no overflow).
var goDuration = regexp.MustCompile(`^(0|([0-9]{1,6}(\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,2})$`)

func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	const ep = "watch"
	q, perms, ok := s.query(w, r, ep, "producer", "version", "timeout")
	if !ok {
		return
	}
	since, ok := s.version(w, ep, q)
	if !ok {
		return
	}
	wait := quotaproto.DefaultWatchWait
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || !goDuration.MatchString(v) || d > quotaproto.MaxWatchWait {
			s.fail(w, ep, http.StatusBadRequest, "timeout %q must be a duration from 0s to %s", v, quotaproto.MaxWatchWait)
			return
		}
		wait = d
	}
	producer, ok := s.producerParam(w, ep, q, perms)
	if !ok {
		return
	}
	s.held(producer, since)
	set, changed, known := s.hub.Current(producer)
	if !known {
		s.fail(w, ep, http.StatusNotFound, "unknown producer %q: POST %s first", producer, quotaproto.PathLeases)
		return
	}
	if set.Version == since && wait > 0 {
		if !s.acquire(w, ep, "long-poll", &s.polls, s.limits.MaxLongPolls) {
			return
		}
		s.watchers.Inc()
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		case <-s.hub.Done():
		}
		t.Stop()
		s.watchers.Dec()
		s.polls.Add(-1)
		if set, _, known = s.hub.Current(producer); !known {
			s.fail(w, ep, http.StatusNotFound, "producer %q expired", producer)
			return
		}
		if set.Version != since {
			s.pushes.Inc()
		}
	}
	s.ok(w, ep, set)
}

// version is the ?version= of q, the version of the set the producer
// holds (0 without one); false once it answered 400 for one that is not
// an unsigned integer.
func (s *Server) version(w http.ResponseWriter, ep string, q url.Values) (uint64, bool) {
	v := q.Get("version")
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		s.fail(w, ep, http.StatusBadRequest, "version %q is not an unsigned integer", v)
		return 0, false
	}
	return n, true
}

// held tells an engine that is a Holder the version producer holds (0:
// none).
func (s *Server) held(producer string, version uint64) {
	if h, ok := s.engine.(Holder); ok && version > 0 {
		h.Held(producer, version)
	}
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	const ep = "stream"
	q, perms, ok := s.query(w, r, ep, "producer")
	if !ok {
		return
	}
	producer, ok := s.producerParam(w, ep, q, perms)
	if !ok {
		return
	}
	// The SSE id of an event is its set's version: a reconnecting
	// client's Last-Event-ID is the version it holds (anything else is
	// no version).
	if held, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		s.held(producer, held)
	}
	set, changed, known := s.hub.Current(producer)
	if !known {
		s.fail(w, ep, http.StatusNotFound, "unknown producer %q: POST %s first", producer, quotaproto.PathLeases)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, ep, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	if !s.acquire(w, ep, "stream", &s.streams, s.limits.MaxStreams) {
		return
	}
	defer s.streams.Add(-1)
	s.requests.WithLabelValues(ep, "200").Inc()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s.watchers.Inc()
	defer s.watchers.Dec()
	send := func(set quotaproto.LeaseSet) bool {
		b, _ := json.Marshal(set)
		if _, err := fmt.Fprintf(w, "id: %d\nevent: leases\ndata: %s\n\n", set.Version, b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	if !send(set) {
		return
	}
	hb := time.NewTicker(s.heartbeat)
	defer hb.Stop()
	gone, st := s.revoked(r, perms)
	if gone { // rotated away since authenticate
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.hub.Done():
			return
		case <-st.replaced: // tokens rotated: this one may be gone
			if gone, st = s.revoked(r, perms); gone {
				return
			}
		case <-hb.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-changed:
			var known bool
			set, changed, known = s.hub.Current(producer)
			if !known {
				fmt.Fprint(w, "event: expired\ndata: {}\n\n")
				fl.Flush()
				return
			}
			s.pushes.Inc()
			if !send(set) {
				return
			}
		}
	}
}

func (s *Server) quotas(w http.ResponseWriter, r *http.Request) {
	const ep = "quotas"
	// With producer auth on, /v1/quotas shows every producer's grant:
	// only admin and read tokens see it.
	if !s.readable(w, r, ep, s.auth.Load().tokens != nil) {
		return
	}
	sets := s.hub.All()
	sort.Slice(sets, func(i, j int) bool { return sets[i].Producer < sets[j].Producer })
	out := quotasBody{Producers: sets}
	out.Targets, out.Policies = s.engine.Quotas()
	s.ok(w, ep, out)
}
