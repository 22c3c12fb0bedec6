package quotaserver

import (
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// Defaults of [ConsumersConfig].
const (
	DefaultReportFresh = 3 * time.Second
	DefaultReportKeep  = 5 * time.Minute
	DefaultMaxReports  = 100_000
	// maxMembers bounds the members remembered per partition, so that a
	// report costs at most that many comparisons per partition.
	maxMembers = 64
)

// ConsumersConfig configures [Consumers]. The zero value is usable.
type ConsumersConfig struct {
	// Fresh is how long after the daemon received it a report still
	// speaks for its partition (see [Consumers.Overlay]); zero means
	// DefaultReportFresh (3s: a dozen missed reports at the reporters'
	// default 250ms period). After that the daemon falls back to what the
	// broker shows.
	Fresh time.Duration
	// Keep is how long a report is remembered at all, for the
	// lagbridge_consumer_report_age_seconds metric; zero means
	// DefaultReportKeep (5m). At least Fresh.
	Keep time.Duration
	// MaxReports caps the reports remembered (one per partition and
	// reporting member); zero means DefaultMaxReports. When full, reports
	// older than Fresh are dropped, and if that frees nothing new
	// partitions are refused (503) while the ones already known keep
	// being updated.
	MaxReports int
	// Now is the receive clock; nil means time.Now.
	Now func() time.Time
	// Clusters are the names of the clusters the daemon watches, per
	// kind. A report naming another cluster is accepted (204) but applies
	// to no target. nil: not checked.
	Clusters map[lag.Kind][]string
	// Log receives a warning, once per cluster name, about reports
	// naming a cluster not in Clusters; nil means none.
	Log *slog.Logger
}

// Consumers serves POST /v1/consumers/report and keeps, per target,
// partition and reporting member, the newest report received: the
// consumers' own account of where they are, which the observation loops
// fold into their samples ([Consumers.Overlay]). Safe for concurrent use.
type Consumers struct {
	srv   *Server
	fresh time.Duration
	keep  time.Duration
	max   int
	now   func() time.Time

	mu sync.Mutex
	// reports: per target (Cluster "" for reports that named no
	// cluster: they apply to every cluster of their kind), per partition,
	// the newest report of each member.
	reports map[lag.Target]map[int32][]memberReport
	n       int       // reports held: the sum of the slices' lengths
	swept   time.Time // last sweep of reports older than keep

	total   *prometheus.CounterVec
	ageDesc *prometheus.Desc

	// clusters are ConsumersConfig.Clusters as sets (nil: not checked),
	// unknown the cluster names warned about (under mu, at most
	// maxUnknownClusters), log ConsumersConfig.Log.
	clusters map[lag.Kind]map[string]bool
	unknown  map[clusterName]bool
	log      *slog.Logger

	// watchers are told of every target a stored report had work in
	// hand on (see Watch); set before serving, read-only after.
	watchers []func(lag.Target)
}

// memberReport is the newest report of one member (ConsumerReport.Member;
// "" for every anonymous one) about a partition.
type memberReport struct {
	member string
	report lag.Report
}

// NewConsumers returns an empty report store; [Consumers.Register] serves
// its endpoint. reg receives lagbridge_consumer_reports_total{code} and
// lagbridge_consumer_report_age_seconds{cluster,topic,group}.
func NewConsumers(cfg ConsumersConfig, reg prometheus.Registerer) *Consumers {
	c := &Consumers{fresh: cfg.Fresh, keep: cfg.Keep, max: cfg.MaxReports, now: cfg.Now,
		reports: make(map[lag.Target]map[int32][]memberReport), log: cfg.Log, unknown: map[clusterName]bool{}}
	if cfg.Clusters != nil {
		c.clusters = map[lag.Kind]map[string]bool{}
		for k, names := range cfg.Clusters {
			c.clusters[k] = map[string]bool{}
			for _, n := range names {
				c.clusters[k][n] = true
			}
		}
	}
	if c.fresh <= 0 {
		c.fresh = DefaultReportFresh
	}
	if c.keep <= 0 {
		c.keep = DefaultReportKeep
	}
	c.keep = max(c.keep, c.fresh)
	if c.max <= 0 {
		c.max = DefaultMaxReports
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lagbridge_consumer_reports_total",
		Help: "Consumer reports (POST " + quotaproto.PathConsumerReport + ") by HTTP status code; 204 is accepted.",
	}, []string{"code"})
	c.ageDesc = prometheus.NewDesc("lagbridge_consumer_report_age_seconds",
		"Seconds since the daemon received the newest consumer report about a target (any partition); absent when none in the last 5 minutes.",
		[]string{"cluster", "topic", "group"}, nil)
	reg.MustRegister(c.total, c)
	return c
}

// Register adds POST /v1/consumers/report to mux, authenticated by s: with
// tokens configured, a request needs a known bearer token that lists the
// report's group (or "*"). Call it once, before serving.
func (c *Consumers) Register(mux *http.ServeMux, s *Server) {
	c.srv = s
	mux.HandleFunc("POST "+quotaproto.PathConsumerReport, c.report)
}

// Watch adds fn to the functions told, after each stored report, of each
// target on which it has a message in hand (a partition with a head
// time): the observation loops' Wake, which judges whether the report
// shows the target late. The target's Cluster is the report's, empty
// when it named none. fn runs on the request's goroutine and must not
// block. Call it before serving; not safe for concurrent use with
// reports.
func (c *Consumers) Watch(fn func(lag.Target)) { c.watchers = append(c.watchers, fn) }

// notify tells the watchers of the targets rep has work in hand on.
func (c *Consumers) notify(rep quotaproto.ConsumerReport) {
	if len(c.watchers) == 0 {
		return
	}
	for _, t := range rep.Topics {
		if !slices.ContainsFunc(t.Partitions, func(p quotaproto.ConsumerPartition) bool { return p.HeadTimeMs > 0 }) {
			continue
		}
		target := lag.Target{Kind: lag.Kind(rep.Kind), Cluster: rep.Cluster, Topic: t.Topic, Group: rep.Group}
		for _, fn := range c.watchers {
			fn(target)
		}
	}
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (c *Consumers) report(rw http.ResponseWriter, r *http.Request) {
	const ep = "consumer-report"
	w := &statusWriter{ResponseWriter: rw}
	defer func() {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		c.total.WithLabelValues(strconv.Itoa(w.code)).Inc()
	}()
	var rep quotaproto.ConsumerReport
	perms, ok := c.srv.readJSON(w, r, ep, &rep, "kind", "group", "topics", "topics[].topic", "topics[].partitions",
		"topics[].partitions[].partition", "topics[].partitions[].position")
	if !ok {
		return
	}
	if err := rep.Validate(); err != nil {
		c.srv.fail(w, ep, http.StatusBadRequest, "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	// A consumer report speaks for a group: the token must list it.
	if !c.srv.permits(w, ep, perms, "consumer group", rep.Group) {
		return
	}
	n := c.put(rep, c.now())
	c.checkCluster(rep)
	// What was stored may show a target late: the loops judge at once.
	c.notify(rep)
	if n > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(c.fresh.Seconds()+1)))
		c.srv.fail(w, ep, http.StatusServiceUnavailable, "the report store is full: %d new partitions refused", n)
		return
	}
	c.srv.requests.WithLabelValues(ep, "204").Inc()
	w.WriteHeader(http.StatusNoContent)
}

// maxUnknownClusters bounds the cluster names checkCluster remembers, so
// that reports naming ever new ones cannot grow the daemon's memory.
const maxUnknownClusters = 64

// clusterName is a cluster of one kind.
type clusterName struct {
	kind lag.Kind
	name string
}

// checkCluster warns, once per cluster name, about a report naming a
// cluster of its kind that the daemon does not watch: it is kept, as the
// protocol says, but applies to no target, so the consumer stays measured
// from its commits (a reporter's Config.Cluster that is not the daemon's
// name of the cluster).
func (c *Consumers) checkCluster(rep quotaproto.ConsumerReport) {
	kind := lag.Kind(rep.Kind)
	if c.clusters == nil || c.log == nil || rep.Cluster == "" || c.clusters[kind][rep.Cluster] {
		return
	}
	key := clusterName{kind, rep.Cluster}
	c.mu.Lock()
	warn := !c.unknown[key] && len(c.unknown) < maxUnknownClusters
	if warn {
		c.unknown[key] = true
	}
	c.mu.Unlock()
	if warn {
		c.log.Warn("consumer report names a cluster this daemon does not watch: it applies to no target, and the consumer is measured from its commits; set the reporter's Cluster to the daemon's name of the cluster (or leave it empty)",
			"kind", kind, "cluster", rep.Cluster, "group", rep.Group, "watched", slices.Sorted(maps.Keys(c.clusters[kind])))
	}
}

// put stores rep's partitions as received at now: per partition and
// member, the newest. It returns how many partitions it refused because the
// store is full.
func (c *Consumers) put(rep quotaproto.ConsumerReport, now time.Time) (refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.swept) >= c.fresh {
		c.sweep(now.Add(-c.keep))
		c.swept = now
	}
	full := false
	for _, t := range rep.Topics {
		target := lag.Target{Kind: lag.Kind(rep.Kind), Cluster: rep.Cluster, Topic: t.Topic, Group: rep.Group}
		parts := c.reports[target]
		for _, p := range t.Partitions {
			r := lag.Report{At: now, Position: p.Position, HeadTime: p.HeadTime(), Member: rep.Member, OwnPace: p.OwnPace}
			if p.Skipped != nil {
				r.Skipped, r.SkipsGiven = *p.Skipped, true
			}
			if p.Held > 0 {
				r.Held, r.HeldFor = p.Held, time.Duration(p.HeldMs)*time.Millisecond
			}
			ms := parts[p.Partition]
			if i := slices.IndexFunc(ms, func(m memberReport) bool { return m.member == rep.Member }); i >= 0 {
				ms[i].report = r
				continue
			}
			if len(ms) >= maxMembers {
				// Members come and go (a restart picks a new random
				// name): the one not heard from longest leaves.
				oldest := 0
				for i, m := range ms {
					if m.report.At.Before(ms[oldest].report.At) {
						oldest = i
					}
				}
				ms[oldest] = memberReport{rep.Member, r}
				continue
			}
			if c.n >= c.max {
				if !full {
					// Make room once: what is no longer fresh only feeds
					// the age metric.
					c.sweep(now.Add(-c.fresh))
					full = c.n >= c.max
					parts = c.reports[target]
					ms = parts[p.Partition]
				}
				if full {
					refused++
					continue
				}
			}
			if parts == nil {
				parts = make(map[int32][]memberReport)
				c.reports[target] = parts
			}
			parts[p.Partition] = append(ms, memberReport{rep.Member, r})
			c.n++
		}
	}
	return refused
}

// sweep drops the reports received before cutoff. c.mu is held.
func (c *Consumers) sweep(cutoff time.Time) {
	for t, parts := range c.reports {
		for p, ms := range parts {
			kept := slices.DeleteFunc(ms, func(m memberReport) bool { return m.report.At.Before(cutoff) })
			c.n -= len(ms) - len(kept)
			if len(kept) == 0 {
				delete(parts, p)
			} else {
				parts[p] = kept
			}
		}
		if len(parts) == 0 {
			delete(c.reports, t)
		}
	}
}

// Overlay sets Reported on the partitions of s from the reports received
// at most Fresh before now (the daemon's clock, as at receive time) that
// name s's cluster or no cluster; other partitions' Reported is cleared.
//
// On Kafka a partition has one owner at a time, and the newest report
// wins (an old owner's last report is superseded by the new owner's).
// NATS consumers share their stream, so the reports of its members
// combine: with messages in hand anywhere, the smallest position in hand
// and its head time, the consumer's oldest work; with none in hand, the
// largest idle position. At is the newest report's receive time either way.
// The messages held (lag.Report.Held, HeldFor) are kept only when one
// member reports alone: one member's count bounds only that member, and
// the position in hand of several moves by what the others finished
// before (a count from it would read their work as this interval's).
func (c *Consumers) Overlay(s *lag.Sample, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	anyCluster := s.Target
	anyCluster.Cluster = ""
	// One lookup per target, not per partition: hashing a target's four
	// names is most of the cost.
	sources := [...]map[int32][]memberReport{c.reports[s.Target], c.reports[anyCluster]}
	oldest := now.Add(-c.fresh)
	for i := range s.Partitions {
		p := &s.Partitions[i]
		var newest, inHand, idle lag.Report
		members := 0
		for _, parts := range sources {
			for _, m := range parts[p.Partition] {
				r := m.report
				if r.At.Before(oldest) {
					continue
				}
				if r.At.After(now) {
					r.At = now // received while the cycle was being read
				}
				members++
				if r.At.After(newest.At) {
					newest = r
				}
				switch {
				case !r.HeadTime.IsZero():
					if inHand.IsZero() || r.Position < inHand.Position {
						inHand = r
					}
				case idle.IsZero() || r.Position > idle.Position:
					idle = r
				}
			}
		}
		switch {
		case s.Target.Kind != lag.KindNATS || newest.IsZero():
			p.Reported = newest
		case !inHand.IsZero():
			p.Reported = lag.Report{At: newest.At, Position: inHand.Position, HeadTime: inHand.HeadTime}
			if members == 1 {
				p.Reported.Held, p.Reported.HeldFor = inHand.Held, inHand.HeldFor
			}
		default:
			p.Reported = lag.Report{At: newest.At, Position: idle.Position}
		}
	}
}

// Describe implements prometheus.Collector.
func (c *Consumers) Describe(ch chan<- *prometheus.Desc) { ch <- c.ageDesc }

// Collect implements prometheus.Collector: per target, the age of its
// newest report.
func (c *Consumers) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	c.mu.Lock()
	// Keyed by the labels: a Kafka and a NATS target of the same names
	// are one series.
	newest := make(map[[3]string]time.Time)
	cutoff := now.Add(-c.keep)
	for t, parts := range c.reports {
		lv := [3]string{t.Cluster, t.Topic, t.Group}
		for _, ms := range parts {
			for _, m := range ms {
				if m.report.At.After(newest[lv]) && !m.report.At.Before(cutoff) {
					newest[lv] = m.report.At
				}
			}
		}
	}
	c.mu.Unlock()
	for lv, at := range newest {
		ch <- prometheus.MustNewConstMetric(c.ageDesc, prometheus.GaugeValue, max(0, now.Sub(at).Seconds()), lv[0], lv[1], lv[2])
	}
}
