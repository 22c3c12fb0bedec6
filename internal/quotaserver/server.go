package quotaserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// Engine is what the server needs from the quota engine.
type Engine interface {
	// Report records a producer's topics and demand and returns its lease
	// set as of now (it also publishes the set to the hub).
	Report(r quotaproto.Report) (quotaproto.LeaseSet, error)
	// Quotas is the operators' view served at /v1/quotas, merged with
	// the producers' lease sets ("producers").
	Quotas() map[string]any
}

// Auth maps bearer tokens to the producers they may act for. The zero value
// (no tokens) disables authentication.
type Auth struct {
	// Tokens: each entry lets one token act for the listed producer ids;
	// "*" means any producer.
	Tokens []Token `mapstructure:"tokens"`
	// AdminTokens may read /v1/quotas; with auth on and no admin token,
	// /v1/quotas is refused.
	AdminTokens []string `mapstructure:"adminTokens"`
}

// Token is one bearer token and the producers it may act for.
type Token struct {
	Token     string   `mapstructure:"token"`
	Producers []string `mapstructure:"producers"`
}

// Validate reports every problem at once.
func (a Auth) Validate() error {
	var errs []error
	for i, t := range a.Tokens {
		if len(t.Token) < 16 {
			errs = append(errs, fmt.Errorf("auth.tokens[%d].token: must be at least 16 characters", i))
		}
		if len(t.Producers) == 0 {
			errs = append(errs, fmt.Errorf("auth.tokens[%d].producers: list the producer ids this token may act for, or \"*\"", i))
		}
		for j, p := range t.Producers {
			if p != "*" && !quotaproto.ValidProducer(p) {
				errs = append(errs, fmt.Errorf("auth.tokens[%d].producers[%d]: %q is not a valid producer id", i, j, p))
			}
		}
	}
	for i, t := range a.AdminTokens {
		if len(t) < 16 {
			errs = append(errs, fmt.Errorf("auth.adminTokens[%d]: must be at least 16 characters", i))
		}
	}
	return errors.Join(errs...)
}

// Server serves the protocol. Create it with New; mount Handler.
type Server struct {
	hub    *Hub
	engine Engine
	// token hash -> allowed producers ("*" for all); nil map: auth off.
	tokens map[[32]byte]map[string]bool
	admins map[[32]byte]bool

	requests    *prometheus.CounterVec
	pushes      prometheus.Counter
	watchers    prometheus.Gauge
	heartbeat   time.Duration
	bodyTimeout time.Duration // to read a report's body once its headers are in
}

// New returns a server publishing from hub. reg receives
// lagbridge_quota_requests_total{endpoint,code}, lagbridge_quota_pushes_total
// and lagbridge_quota_watchers.
func New(hub *Hub, engine Engine, auth Auth, reg prometheus.Registerer) *Server {
	s := &Server{hub: hub, engine: engine, heartbeat: 15 * time.Second, bodyTimeout: 10 * time.Second}
	if len(auth.Tokens) > 0 || len(auth.AdminTokens) > 0 {
		s.tokens = map[[32]byte]map[string]bool{}
		s.admins = map[[32]byte]bool{}
		for _, t := range auth.Tokens {
			m := map[string]bool{}
			for _, p := range t.Producers {
				m[p] = true
			}
			s.tokens[sha256.Sum256([]byte(t.Token))] = m
		}
		for _, t := range auth.AdminTokens {
			s.admins[sha256.Sum256([]byte(t))] = true
		}
	}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lagbridge_quota_requests_total", Help: "Quota protocol requests by endpoint and status code (4xx are protocol errors).",
	}, []string{"endpoint", "code"})
	s.pushes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lagbridge_quota_pushes_total", Help: "Lease sets pushed to watching producers (long-poll answers and stream events).",
	})
	s.watchers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lagbridge_quota_watchers", Help: "Producers currently waiting on a long-poll or stream.",
	})
	reg.MustRegister(s.requests, s.pushes, s.watchers)
	return s
}

// Register adds the protocol's routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST "+quotaproto.PathLeases, s.report)
	mux.HandleFunc("GET "+quotaproto.PathWatch, s.watch)
	mux.HandleFunc("GET "+quotaproto.PathStream, s.stream)
	mux.HandleFunc("GET "+quotaproto.PathQuotas, s.quotas)
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

// allowed checks the bearer token for producer; it writes the error itself.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, endpoint, producer string) bool {
	perms, ok := s.authenticate(w, r, endpoint)
	return ok && s.permits(w, endpoint, perms, producer)
}

// authenticate checks that the request carries a known bearer token (when
// auth is on) and returns the producers the token may act for (nil with
// auth off). It writes the error itself.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, endpoint string) (map[string]bool, bool) {
	if s.tokens == nil {
		return nil, true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lagbridge"`)
		s.fail(w, endpoint, http.StatusUnauthorized, "a bearer token is required")
		return nil, false
	}
	m := s.tokens[sha256.Sum256([]byte(tok))]
	if m == nil {
		s.fail(w, endpoint, http.StatusUnauthorized, "unknown token")
		return nil, false
	}
	return m, true
}

// permits checks that a token with perms (from authenticate) may act for
// producer; it writes the error itself.
func (s *Server) permits(w http.ResponseWriter, endpoint string, perms map[string]bool, producer string) bool {
	if s.tokens == nil || perms["*"] || perms[producer] {
		return true
	}
	s.fail(w, endpoint, http.StatusForbidden, "this token may not act for producer %q", producer)
	return false
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	const ep = "report"
	// Cheapest checks first: an oversized or mistyped request costs a
	// header read.
	if r.ContentLength > quotaproto.MaxBodyBytes {
		s.fail(w, ep, http.StatusRequestEntityTooLarge, "body of %d bytes exceeds %d", r.ContentLength, quotaproto.MaxBodyBytes)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		s.fail(w, ep, http.StatusUnsupportedMediaType, "content type %q: send application/json", ct)
		return
	}
	// A request without a known token is refused before its body is read;
	// which producer it may act for is checked once the body says.
	perms, ok := s.authenticate(w, r, ep)
	if !ok {
		return
	}
	// A report is at most MaxBodyBytes: a client that trickles it gets
	// bodyTimeout, not a connection and a goroutine for as long as it
	// likes (the server's ReadHeaderTimeout ends once the headers are in).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
	body := http.MaxBytesReader(w, r.Body, quotaproto.MaxBodyBytes)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, ep, http.StatusRequestEntityTooLarge, "body exceeds %d bytes", quotaproto.MaxBodyBytes)
			return
		}
		s.fail(w, ep, http.StatusBadRequest, "read body: %v", err)
		return
	}
	var rep quotaproto.Report
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		s.fail(w, ep, http.StatusBadRequest, "malformed report: %v", err)
		return
	}
	if dec.More() {
		s.fail(w, ep, http.StatusBadRequest, "malformed report: trailing data after the JSON object")
		return
	}
	if err := rep.Validate(); err != nil {
		s.fail(w, ep, http.StatusBadRequest, "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	if !s.permits(w, ep, perms, rep.Producer) {
		return
	}
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

// producerParam reads and checks ?producer=.
func (s *Server) producerParam(w http.ResponseWriter, r *http.Request, ep string) (string, bool) {
	p := r.URL.Query().Get("producer")
	if !quotaproto.ValidProducer(p) {
		s.fail(w, ep, http.StatusBadRequest, "producer %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", p)
		return "", false
	}
	return p, s.allowed(w, r, ep, p)
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	const ep = "watch"
	q := r.URL.Query()
	var since uint64
	if v := q.Get("version"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.fail(w, ep, http.StatusBadRequest, "version %q is not an unsigned integer", v)
			return
		}
		since = n
	}
	wait := quotaproto.DefaultWatchWait
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > quotaproto.MaxWatchWait {
			s.fail(w, ep, http.StatusBadRequest, "timeout %q must be a duration from 0s to %s", v, quotaproto.MaxWatchWait)
			return
		}
		wait = d
	}
	producer, ok := s.producerParam(w, r, ep)
	if !ok {
		return
	}
	set, changed, known := s.hub.Current(producer)
	if !known {
		s.fail(w, ep, http.StatusNotFound, "unknown producer %q: POST %s first", producer, quotaproto.PathLeases)
		return
	}
	if set.Version == since {
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

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	const ep = "stream"
	producer, ok := s.producerParam(w, r, ep)
	if !ok {
		return
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
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.hub.Done():
			return
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
	if s.tokens != nil {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !s.admins[sha256.Sum256([]byte(tok))] {
			s.fail(w, ep, http.StatusForbidden, "an admin token is required for %s", quotaproto.PathQuotas)
			return
		}
	}
	sets := s.hub.All()
	sort.Slice(sets, func(i, j int) bool { return sets[i].Producer < sets[j].Producer })
	out := s.engine.Quotas()
	out["producers"] = sets
	s.ok(w, ep, out)
}
