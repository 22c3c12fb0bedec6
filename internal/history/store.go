// Package history keeps what the daemon saw and decided, so that the
// question after an incident ("why was my producer throttled at 03:12?")
// has an answer: a bounded, in-memory history of every target's lag, head
// age, rates, allowed rate, signal and status ([Store], served at
// /v1/history), and a bounded log of the quota decisions that changed a
// topic's signal or cut or released a producer's grant ([Log], served at
// /v1/events, written as one log line each and counted in a metric).
//
// Nothing is written to disk: a restarted daemon starts with an empty
// history, and the API says from when it has data.
//
// The package starts no goroutine; every type is safe for concurrent use.
package history

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// Config sizes the history and the decision log. The zero value of each
// field means its default; it is the `history:` section of the daemon's
// configuration.
type Config struct {
	// Recent is how far back every target's points are kept at the
	// observation interval's resolution. Default 15m; 1m to 24h.
	Recent time.Duration `mapstructure:"recent"`
	// Retention is how far back points are kept in all: points older than
	// Recent are merged into one point per Resolution (the largest lag and
	// head age, the mean rates, the smallest allowed rate, the worst status
	// and signal of the points merged). Default 2h; at least Recent, at
	// most 7 days.
	Retention time.Duration `mapstructure:"retention"`
	// Resolution is the time one downsampled point covers. Default 1m;
	// 1s to 1h.
	Resolution time.Duration `mapstructure:"resolution"`
	// Events is how many decision events the log keeps; the oldest go
	// first. Default 10000; 100 to 1,000,000.
	Events int `mapstructure:"events"`
	// GrantChange is the relative change of a producer's grant, from the
	// last one logged, that makes a cut or a release event (0.2: 20%).
	// Going to or from zero or unlimited always counts. Default 0.2;
	// 0.01 to 10.
	GrantChange float64 `mapstructure:"grantChange"`
}

// The defaults of [Config].
const (
	DefaultRecent      = 15 * time.Minute
	DefaultRetention   = 2 * time.Hour
	DefaultResolution  = time.Minute
	DefaultEvents      = 10000
	DefaultGrantChange = 0.2
)

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Recent == 0 {
		c.Recent = DefaultRecent
	}
	if c.Retention == 0 {
		c.Retention = max(DefaultRetention, c.Recent)
	}
	if c.Resolution == 0 {
		c.Resolution = DefaultResolution
	}
	if c.Events == 0 {
		c.Events = DefaultEvents
	}
	if c.GrantChange == 0 {
		c.GrantChange = DefaultGrantChange
	}
	return c
}

// Validate reports every problem of c at once (errors.Join), each naming
// its field as in the configuration file (history.recent, ...). Zero
// fields are valid (defaults).
func (c Config) Validate() error {
	var errs []error
	d := c.WithDefaults()
	limit := func(field string, v, lo, hi time.Duration) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("history.%s: must be from %v to %v, got %v", field, lo, hi, v))
		}
	}
	limit("recent", d.Recent, time.Minute, 24*time.Hour)
	limit("retention", d.Retention, time.Minute, 7*24*time.Hour)
	limit("resolution", d.Resolution, time.Second, time.Hour)
	if d.Retention < d.Recent {
		errs = append(errs, fmt.Errorf("history.retention: must be at least history.recent (%v), got %v", d.Recent, d.Retention))
	}
	if d.Events < 100 || d.Events > 1_000_000 {
		errs = append(errs, fmt.Errorf("history.events: must be from 100 to 1000000, got %d", d.Events))
	}
	if !(d.GrantChange >= 0.01 && d.GrantChange <= 10) { // NaN fails too
		errs = append(errs, fmt.Errorf("history.grantChange: must be from 0.01 to 10, got %v", d.GrantChange))
	}
	return errors.Join(errs...)
}

// point is one stored observation of a target: 40 bytes. Times are Unix
// milliseconds; figures are float32 (7 significant digits are plenty for a
// chart); NaN marks an unknown figure.
type point struct {
	at      int64 // Unix ms
	lag     int64
	head    float32 // seconds; NaN: unknown
	produce float32 // msg/s; NaN: unknown
	consume float32 // msg/s; NaN: unknown
	allowed float32 // msg/s; +Inf: unlimited; NaN: no quota
	span    uint16  // seconds a downsampled point covers past at; 0: one observation
	status  uint8   // index in statuses
	signal  uint8   // quota.Signal + 1; 0: no quota
}

// PointBytes is the memory one stored point takes.
const PointBytes = int(unsafe.Sizeof(point{}))

var statuses = []lag.Status{lag.StatusOK, lag.StatusLagging, lag.StatusStalled, lag.StatusStopped, lag.StatusStale, lag.StatusAbandoned}

// severity orders statuses from the worst (0) for downsampling.
var severity = map[lag.Status]int{lag.StatusStopped: 0, lag.StatusStalled: 1, lag.StatusLagging: 2, lag.StatusStale: 3, lag.StatusAbandoned: 4, lag.StatusOK: 5}

func statusIndex(s lag.Status) uint8 {
	for i, v := range statuses {
		if v == s {
			return uint8(i)
		}
	}
	return uint8(len(statuses)) // unknown: shown as ""
}

func statusOf(i uint8) lag.Status {
	if int(i) < len(statuses) {
		return statuses[i]
	}
	return ""
}

// signalSeverity orders signals from the mildest: ok < avoid < slow-down < stop.
func signalSeverity(s uint8) int {
	switch s {
	case 0:
		return 0
	case uint8(quota.SignalOK) + 1:
		return 1
	case uint8(quota.SignalAvoidPartitions) + 1:
		return 2
	case uint8(quota.SignalSlowDown) + 1:
		return 3
	default:
		return 4
	}
}

// ring is a bounded FIFO of points; it grows to its capacity on demand.
type ring struct {
	buf   []point
	start int
	n     int
}

func (r *ring) push(p point, capacity int) {
	switch {
	case r.n < len(r.buf): // room: after the newest
		r.buf[(r.start+r.n)%len(r.buf)] = p
		r.n++
	case len(r.buf) >= capacity: // full: overwrite the oldest
		r.buf[r.start] = p
		r.start = (r.start + 1) % len(r.buf)
	default: // full below capacity: grow, oldest first at index 0
		if r.start != 0 || len(r.buf) == cap(r.buf) {
			nb := make([]point, r.n, min(capacity, max(16, 2*r.n)))
			for i := range r.n {
				nb[i] = r.buf[(r.start+i)%len(r.buf)]
			}
			r.buf, r.start = nb, 0
		}
		r.buf = append(r.buf, p)
		r.n++
	}
}

func (r *ring) at(i int) point { return r.buf[(r.start+i)%len(r.buf)] }

func (r *ring) front() (point, bool) {
	if r.n == 0 {
		return point{}, false
	}
	return r.buf[r.start], true
}

func (r *ring) pop() {
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

// series is one target's history: recent points at the interval's
// resolution, older ones downsampled, and the downsampled point being
// built from the points leaving recent.
type series struct {
	recent, coarse ring
	acc            accumulator
	last           int64 // Unix ms of the newest point
}

// accumulator merges points into one downsampled point.
type accumulator struct {
	n, nProduce, nConsume  int
	bucket                 int64
	p                      point
	sumProduce, sumConsume float64
	lastAt                 int64
}

func (a *accumulator) add(p point, bucket int64) {
	if a.n == 0 {
		a.bucket, a.p = bucket, p
		a.sumProduce, a.sumConsume, a.nProduce, a.nConsume = 0, 0, 0, 0
	} else {
		a.p.lag = max(a.p.lag, p.lag)
		a.p.head = maxKnown(a.p.head, p.head)
		a.p.allowed = minKnown(a.p.allowed, p.allowed)
		if severity[statusOf(p.status)] < severity[statusOf(a.p.status)] {
			a.p.status = p.status
		}
		if signalSeverity(p.signal) > signalSeverity(a.p.signal) {
			a.p.signal = p.signal
		}
	}
	if !isNaN32(p.produce) {
		a.sumProduce += float64(p.produce)
		a.nProduce++
	}
	if !isNaN32(p.consume) {
		a.sumConsume += float64(p.consume)
		a.nConsume++
	}
	a.lastAt = p.at
	a.n++
}

func (a *accumulator) flush() point {
	p := a.p
	p.produce, p.consume = float32(math.NaN()), float32(math.NaN())
	if a.nProduce > 0 {
		p.produce = float32(a.sumProduce / float64(a.nProduce))
	}
	if a.nConsume > 0 {
		p.consume = float32(a.sumConsume / float64(a.nConsume))
	}
	p.span = uint16(min((a.lastAt-p.at)/1000, math.MaxUint16))
	a.n = 0
	return p
}

func isNaN32(f float32) bool { return f != f }

func maxKnown(a, b float32) float32 {
	if isNaN32(a) || (!isNaN32(b) && b > a) {
		return b
	}
	return a
}

func minKnown(a, b float32) float32 {
	if isNaN32(a) || (!isNaN32(b) && b < a) {
		return b
	}
	return a
}

// Store is the history of every target. Create it with [NewStore]; the
// observation loops call [Store.Record] once per cycle and the API calls
// [Store.Query]. Safe for concurrent use.
//
// Memory is bounded per target: at most Recent/interval + 2 recent points
// and Retention/Resolution + 1 downsampled ones, [PointBytes] each (see
// [Store.Bound]). A target not seen for Retention is dropped.
type Store struct {
	cfg       Config
	interval  time.Duration
	recentCap int
	coarseCap int
	started   time.Time

	mu        sync.RWMutex
	series    map[lag.Target]*series
	lastPrune int64
}

// NewStore returns an empty history for targets observed every interval
// (> 0), as of started (the daemon's start: the API says history begins
// there at the earliest). cfg must be valid ([Config.Validate]).
func NewStore(cfg Config, interval time.Duration, started time.Time) *Store {
	cfg = cfg.WithDefaults()
	if interval <= 0 {
		interval = time.Second
	}
	return &Store{
		cfg: cfg, interval: interval, started: started,
		recentCap: int(cfg.Recent/interval) + 2,
		coarseCap: int(cfg.Retention/cfg.Resolution) + 1,
		series:    map[lag.Target]*series{},
	}
}

// Bound is the most memory, in bytes, the points of targets targets can
// take; maps, headers and ring growth add a few KiB a target
// (TestMemoryBound measures the whole).
func (s *Store) Bound(targets int) int {
	return targets * (s.recentCap + s.coarseCap) * PointBytes
}

// Record adds one cycle's states as of now, each with its target's quota
// decision when decisions has one (the allowed rate and signal; none
// means no policy applies). Points must come in time order per target;
// an older or equal time than the target's newest point is ignored.
func (s *Store) Record(now time.Time, states []lag.State, decisions map[lag.Target]quota.Decision) {
	ms := now.UnixMilli()
	recentFrom := ms - s.cfg.Recent.Milliseconds()
	res := s.cfg.Resolution.Milliseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range states {
		p := point{at: ms, lag: st.Lag, head: float32(math.NaN()), produce: float32(math.NaN()), consume: float32(math.NaN()),
			allowed: float32(math.NaN()), status: statusIndex(st.Status)}
		if st.HeadAgeKnown {
			p.head = float32(st.HeadAge.Seconds())
		}
		if st.RatesKnown {
			p.produce, p.consume = float32(st.ProduceRate), float32(st.ConsumeRate)
		}
		if d, ok := decisions[st.Target]; ok {
			p.allowed = float32(d.Rate) // +Inf stays +Inf
			p.signal = uint8(d.Signal) + 1
		}
		se := s.series[st.Target]
		if se == nil {
			se = &series{}
			s.series[st.Target] = se
		} else if ms <= se.last {
			continue
		}
		se.last = ms
		// Points leave recent when they are too old or the ring is full,
		// merged into the downsampled point of their Resolution bucket.
		for {
			f, ok := se.recent.front()
			if !ok || (f.at >= recentFrom && se.recent.n < s.recentCap) {
				break
			}
			se.recent.pop()
			b := f.at / res
			if se.acc.n > 0 && b != se.acc.bucket {
				se.coarse.push(se.acc.flush(), s.coarseCap)
			}
			se.acc.add(f, b)
		}
		se.recent.push(p, s.recentCap)
	}
	if ms-s.lastPrune >= res {
		s.lastPrune = ms
		s.prune(ms)
	}
}

// prune drops downsampled points older than Retention and the targets not
// seen for Retention. Called with s.mu held.
func (s *Store) prune(ms int64) {
	from := ms - s.cfg.Retention.Milliseconds()
	for t, se := range s.series {
		if se.last < from {
			delete(s.series, t)
			continue
		}
		for {
			f, ok := se.coarse.front()
			if !ok || f.at >= from {
				break
			}
			se.coarse.pop()
		}
	}
}

// Query selects targets and a time range. Empty strings and zero times
// match everything.
type Query struct {
	Kind                  lag.Kind
	Cluster, Topic, Group string
	// Since and Until bound the points' times (inclusive).
	Since, Until time.Time
	// MaxPoints, when > 0, caps the points per target: runs of adjacent
	// points are merged as downsampling merges them (SpanSeconds set).
	MaxPoints int
}

func (q Query) matches(t lag.Target) bool {
	return (q.Kind == "" || q.Kind == t.Kind) && (q.Cluster == "" || q.Cluster == t.Cluster) &&
		(q.Topic == "" || q.Topic == t.Topic) && (q.Group == "" || q.Group == t.Group)
}

// Point is one point of a target's history as served over HTTP. Figures
// that were unknown are null.
type Point struct {
	// T is the time of the observation, in Unix milliseconds; for a
	// downsampled point, the first observation merged.
	T int64 `json:"t"`
	// SpanSeconds is set on downsampled points: the seconds from T to the
	// last observation merged. Their Lag and HeadAgeSeconds are the
	// largest, their rates the mean, Allowed the smallest, Status and
	// Signal the worst of the observations merged.
	SpanSeconds int `json:"spanSeconds,omitempty"`
	// Lag in messages.
	Lag int64 `json:"lag"`
	// HeadAgeSeconds: the age of the oldest unconsumed message.
	HeadAgeSeconds *float64 `json:"headAgeSeconds"`
	// ProduceRate and ConsumeRate in messages per second (smoothed).
	ProduceRate *float64 `json:"produceRate"`
	ConsumeRate *float64 `json:"consumeRate"`
	// Allowed is the target's allowed produce rate in messages per
	// second; null with Unlimited false: no quota applies.
	Allowed   *float64 `json:"allowed"`
	Unlimited bool     `json:"unlimited,omitempty"`
	// Signal is the quota signal ("" without a quota).
	Signal string     `json:"signal,omitempty"`
	Status lag.Status `json:"status"`
}

// Series is one target's points, oldest first.
type Series struct {
	lag.Target
	Points []Point `json:"points"`
}

func known(f float32) *float64 {
	if isNaN32(f) {
		return nil
	}
	v := math.Round(float64(f)*1000) / 1000
	return &v
}

func (p point) public() Point {
	out := Point{T: p.at, SpanSeconds: int(p.span), Lag: p.lag, HeadAgeSeconds: known(p.head),
		ProduceRate: known(p.produce), ConsumeRate: known(p.consume), Status: statusOf(p.status)}
	switch {
	case math.IsInf(float64(p.allowed), 1):
		out.Unlimited = true
	default:
		out.Allowed = known(p.allowed)
	}
	if p.signal > 0 {
		out.Signal = quota.Signal(p.signal - 1).String()
	}
	return out
}

// Query returns the matching targets' points in [q.Since, q.Until], oldest
// first, targets sorted by name.
func (s *Store) Query(q Query) []Series {
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.Since.IsZero() {
		from = q.Since.UnixMilli()
	}
	if !q.Until.IsZero() {
		to = q.Until.UnixMilli()
	}
	in := func(p point) bool { return p.at+int64(p.span)*1000 >= from && p.at <= to }
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []Series{}
	for t, se := range s.series {
		if !q.matches(t) {
			continue
		}
		var pts []point
		for i := 0; i < se.coarse.n; i++ {
			if p := se.coarse.at(i); in(p) {
				pts = append(pts, p)
			}
		}
		if se.acc.n > 0 {
			if p := se.acc.p; in(p) {
				acc := se.acc // flush a copy: the original keeps merging
				pts = append(pts, acc.flush())
			}
		}
		for i := 0; i < se.recent.n; i++ {
			if p := se.recent.at(i); in(p) {
				pts = append(pts, p)
			}
		}
		if q.MaxPoints > 0 && len(pts) > q.MaxPoints {
			pts = thin(pts, q.MaxPoints)
		}
		sr := Series{Target: t, Points: make([]Point, len(pts))}
		for i, p := range pts {
			sr.Points[i] = p.public()
		}
		out = append(out, sr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target.String() < out[j].Target.String() })
	return out
}

// thin merges runs of adjacent points so that at most n remain (n > 0),
// each run as downsampling merges (largest lag and head age, mean rates,
// smallest allowed rate, worst status and signal). A merged point's span
// reaches to the last point merged.
func thin(pts []point, n int) []point {
	per := (len(pts) + n - 1) / n
	out := make([]point, 0, n)
	var acc accumulator
	for i, p := range pts {
		acc.add(p, int64(i/per))
		if (i+1)%per == 0 || i == len(pts)-1 {
			m := acc.flush()
			// A merged downsampled point keeps reaching to its own end.
			m.span = uint16(min((p.at+int64(p.span)*1000-m.at)/1000, math.MaxUint16))
			out = append(out, m)
		}
	}
	return out
}

// Since returns the time of the oldest point held (zero when there is
// none) and the time the history started (the daemon's start): there is
// no history before either.
func (s *Store) Since() (oldest, started time.Time) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	min := int64(math.MaxInt64)
	for _, se := range s.series {
		oldest, ok := int64(0), false
		if p, has := se.coarse.front(); has {
			oldest, ok = p.at, true
		} else if se.acc.n > 0 {
			oldest, ok = se.acc.p.at, true
		} else if p, has := se.recent.front(); has {
			oldest, ok = p.at, true
		}
		if ok && oldest < min {
			min = oldest
		}
	}
	if min == math.MaxInt64 {
		return time.Time{}, s.started
	}
	return time.UnixMilli(min), s.started
}

// Usage returns the targets held and the bytes their points take (the
// rings' capacity, as allocated).
func (s *Store) Usage() (targets, bytes int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, se := range s.series {
		bytes += (cap(se.recent.buf) + cap(se.coarse.buf)) * PointBytes
	}
	return len(s.series), bytes
}

// Register exports the store's size on reg: lagbridge_history_targets and
// lagbridge_history_bytes, computed at scrape time.
func (s *Store) Register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lagbridge_history_targets", Help: "Targets the history holds points of."},
			func() float64 { t, _ := s.Usage(); return float64(t) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lagbridge_history_bytes", Help: "Memory the history's points take, in bytes (bounded: history.recent, retention and resolution)."},
			func() float64 { _, b := s.Usage(); return float64(b) }))
}

// Config returns the configuration in use, defaults applied, and the
// observation interval.
func (s *Store) Config() (Config, time.Duration) { return s.cfg, s.interval }
