package consumerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// Outcomes of a report request, the values of the outcome label.
const (
	outcomeSent    = "sent"    // the daemon stored it (204)
	outcomeRefused = "refused" // the daemon answered 4xx: token, group or report
	outcomeFailed  = "failed"  // unreachable, timed out, or 5xx
)

// snapshotFunc returns the group and what to report now; an empty group or
// no topics sends nothing.
type snapshotFunc func(now time.Time) (group string, topics []quotaproto.ConsumerTopic)

// sender is the goroutine every reporter owns: every interval it takes a
// snapshot and posts it, in as many requests as the protocol's limits need.
type sender struct {
	cfg       Config
	kind      string
	endpoints []*endpoint // one per replica URL
	hc        *http.Client
	snapshot  snapshotFunc

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	desc *prometheus.Desc
	// posters: one goroutine per endpoint (serve), stopped by close.
	posters sync.WaitGroup
}

// endpoint is one daemon replica's report URL, the newest round of
// reports for it, and what was sent and logged; owned by its serve
// goroutine (the counters are read by Collect).
type endpoint struct {
	url string
	// shown is url without its user information, for the logs and the
	// metric's url label (http://user:password@host is a valid URL).
	shown string
	// box holds the newest round of reports (capacity 1): the ticker
	// replaces a round the replica has not taken yet, so a replica that
	// does not answer holds one round, delays no other, and gets the
	// newest when it answers again.
	box                   chan []quotaproto.ConsumerReport
	sent, refused, failed atomic.Uint64
	failing               bool
	lastRefusal           string
	// off holds, per field of newer, when this replica refused a report
	// for it (a daemon older than the field's protocol; zero: never): its
	// reports go without it until heldRetry later (it may be upgraded
	// meanwhile). Per replica: in a rolling upgrade an older replica does
	// not strip the field from the reports to the upgraded ones.
	off [len(newer)]time.Time
}

// newerField is a report field some daemons do not know: their strict
// decoder refuses a report that carries it ("malformed body:
// topics[].partitions[].held: unknown field"), and the sender then sends
// the same report without it.
type newerField struct {
	protocol, what string
	names          []string // the JSON names the refusal may name
	has            func(quotaproto.ConsumerPartition) bool
	strip          func(*quotaproto.ConsumerPartition)
}

// newer are the optional partition fields, oldest protocol first.
var newer = [...]newerField{
	{protocol: "1.3", what: "held counts", names: []string{"held", "heldMs"},
		has:   func(p quotaproto.ConsumerPartition) bool { return p.Held != 0 || p.HeldMs != 0 },
		strip: func(p *quotaproto.ConsumerPartition) { p.Held, p.HeldMs = 0, 0 }},
	{protocol: "1.5", what: "skip counts", names: []string{"skipped"},
		has:   func(p quotaproto.ConsumerPartition) bool { return p.Skipped != nil },
		strip: func(p *quotaproto.ConsumerPartition) { p.Skipped = nil }},
	{protocol: "1.6", what: "own-pace flags", names: []string{"ownPace"},
		has:   func(p quotaproto.ConsumerPartition) bool { return p.OwnPace },
		strip: func(p *quotaproto.ConsumerPartition) { p.OwnPace = false }},
}

// in says whether a partition of topics carries the field.
func (f *newerField) in(topics []quotaproto.ConsumerTopic) bool {
	for _, t := range topics {
		if slices.ContainsFunc(t.Partitions, f.has) {
			return true
		}
	}
	return false
}

// without returns topics without the field, leaving topics as they are.
func (f *newerField) without(topics []quotaproto.ConsumerTopic) []quotaproto.ConsumerTopic {
	out := make([]quotaproto.ConsumerTopic, len(topics))
	for i, t := range topics {
		ps := slices.Clone(t.Partitions)
		for j := range ps {
			f.strip(&ps[j])
		}
		out[i] = quotaproto.ConsumerTopic{Topic: t.Topic, Partitions: ps}
	}
	return out
}

// heldRetry is how long the reports go without a newer field (their held
// or skip counts) after a daemon refused it, before they carry it again.
// A variable for the tests, which shorten it before a sender starts.
var heldRetry = 10 * time.Minute

// newSender validates cfg, registers the metrics and starts the goroutine.
func newSender(cfg Config, kind string, snapshot snapshotFunc) (*sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &sender{cfg: cfg, kind: kind, snapshot: snapshot, done: make(chan struct{}), hc: cfg.HTTPClient}
	for _, u := range cfg.urls() {
		s.endpoints = append(s.endpoints, &endpoint{url: u + quotaproto.PathConsumerReport, shown: withoutUser(u),
			box: make(chan []quotaproto.ConsumerReport, 1)})
	}
	if s.hc == nil {
		s.hc = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     cfg.TLS,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if cfg.Registerer != nil {
		s.desc = prometheus.NewDesc("lagbridge_client_consumer_reports_total",
			"Consumer reports sent to each daemon replica (url) by outcome: sent, refused (4xx: token, group or report), failed (unreachable, timeout, 5xx; dropped).",
			[]string{"url", "outcome"}, prometheus.Labels{"kind": kind})
		if err := cfg.Registerer.Register(s); err != nil {
			return nil, fmt.Errorf("consumerclient: register metrics: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, ep := range s.endpoints {
		s.posters.Go(func() { s.serve(ctx, ep) })
	}
	go s.run(ctx)
	return s, nil
}

// close stops the goroutines and waits for them; in-flight requests are
// cancelled. Idempotent.
func (s *sender) close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.posters.Wait()
		if s.cfg.Registerer != nil {
			s.cfg.Registerer.Unregister(s)
		}
	})
}

func (s *sender) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		group, topics := s.snapshot(now)
		if group == "" || len(topics) == 0 {
			continue
		}
		var reps []quotaproto.ConsumerReport
		for _, chunk := range split(topics) {
			reps = append(reps, quotaproto.ConsumerReport{Kind: s.kind, Cluster: s.cfg.Cluster, Group: group, Member: s.cfg.Member,
				SentAtMs: time.Now().UnixMilli(), Topics: chunk})
		}
		for _, ep := range s.endpoints {
			select { // replace an older round the replica has not taken
			case <-ep.box:
			default:
			}
			ep.box <- reps
		}
	}
}

// serve posts the newest round of reports to one replica until ctx ends.
func (s *sender) serve(ctx context.Context, ep *endpoint) {
	for {
		select {
		case <-ctx.Done():
			return
		case reps := <-ep.box:
			for _, rep := range reps {
				for i := range newer {
					if !ep.off[i].IsZero() && time.Since(ep.off[i]) < heldRetry {
						rep.Topics = newer[i].without(rep.Topics)
					}
				}
				s.post(ctx, ep, rep)
			}
		}
	}
}

// split cuts topics into reports within the protocol's limits
// (MaxReportTopics topics and MaxReportPartitions partitions each).
func split(topics []quotaproto.ConsumerTopic) [][]quotaproto.ConsumerTopic {
	var (
		out   [][]quotaproto.ConsumerTopic
		cur   []quotaproto.ConsumerTopic
		parts int
	)
	for _, t := range topics {
		for len(t.Partitions) > 0 {
			room := quotaproto.MaxReportPartitions - parts
			if room == 0 || len(cur) == quotaproto.MaxReportTopics {
				out, cur, parts = append(out, cur), nil, 0
				continue
			}
			n := min(room, len(t.Partitions))
			cur = append(cur, quotaproto.ConsumerTopic{Topic: t.Topic, Partitions: t.Partitions[:n]})
			t.Partitions = t.Partitions[n:]
			parts += n
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// post sends one report and counts its outcome.
func (s *sender) post(ctx context.Context, ep *endpoint, rep quotaproto.ConsumerReport) {
	body, err := json.Marshal(rep)
	if err != nil { // plain values: cannot happen
		s.failure(ep, err)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		s.failure(ep, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if s.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return // closing
		}
		s.failure(ep, err)
		return
	}
	// Read a little of the answer (the error text) and no more: a
	// hostile or broken server cannot make the consumer read forever.
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK:
		ep.sent.Add(1)
		if ep.failing {
			ep.failing = false
			s.cfg.Logger.Info("consumerclient: reports reach the daemon again", "url", ep.shown)
		}
		ep.lastRefusal = ""
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		var eb quotaproto.ErrorBody
		_ = json.Unmarshal(msg, &eb)
		for i := range newer {
			f := &newer[i]
			if resp.StatusCode != http.StatusBadRequest || !quotaproto.RefusesField(eb.Error, f.names...) || !f.in(rep.Topics) {
				continue
			}
			// A daemon older than the field's protocol: the same report
			// without it (the daemon then reads the report as before).
			if ep.off[i].IsZero() {
				s.cfg.Logger.Info("consumerclient: the daemon does not know the "+f.what+" of protocol "+f.protocol+"; "+
					"reporting without them (upgrade the daemon, every replica, before its consumers' hooks)",
					"url", ep.shown, "error", eb.Error)
			}
			ep.off[i] = time.Now()
			rep.Topics = f.without(rep.Topics)
			s.post(ctx, ep, rep)
			return
		}
		ep.refused.Add(1)
		if why := fmt.Sprintf("%d %s", resp.StatusCode, eb.Error); why != ep.lastRefusal {
			ep.lastRefusal = why
			s.cfg.Logger.Warn("consumerclient: the daemon refuses the consumer's reports", "url", ep.shown,
				"group", rep.Group, "status", resp.StatusCode, "error", eb.Error)
		}
	default:
		s.failure(ep, fmt.Errorf("status %d", resp.StatusCode))
	}
}

func (s *sender) failure(ep *endpoint, err error) {
	ep.failed.Add(1)
	if !ep.failing {
		ep.failing = true
		s.cfg.Logger.Warn("consumerclient: cannot send reports to the daemon; dropping them until it answers",
			"url", ep.shown, "err", err)
	}
}

// Describe implements prometheus.Collector.
func (s *sender) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *sender) Collect(ch chan<- prometheus.Metric) {
	for _, ep := range s.endpoints {
		for _, o := range []struct {
			name string
			v    *atomic.Uint64
		}{{outcomeSent, &ep.sent}, {outcomeRefused, &ep.refused}, {outcomeFailed, &ep.failed}} {
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(o.v.Load()), ep.shown, o.name)
		}
	}
}

// count is the number of reports of outcome o over every replica.
func (s *sender) count(o string) uint64 {
	var n uint64
	for _, ep := range s.endpoints {
		switch o {
		case outcomeSent:
			n += ep.sent.Load()
		case outcomeRefused:
			n += ep.refused.Load()
		case outcomeFailed:
			n += ep.failed.Load()
		}
	}
	return n
}

// withoutUser is raw with its user information replaced by "redacted"
// (raw as it is when it does not parse: Validate refused it already).
func withoutUser(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = url.User("redacted")
	return u.String()
}
