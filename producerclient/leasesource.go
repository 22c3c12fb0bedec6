package producerclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// start launches the owner and the configured sources. js is the
// producer's own JetStream context (nil for Kafka), used for KVBucket
// when LeaseConfig.KV is nil.
func (o *leaseOwner) start(js jetstream.JetStream) error {
	l := o.c.cfg.Leases
	kvJS := l.KV
	if kvJS == nil {
		kvJS = js
	}
	if l.KVBucket != "" && kvJS == nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, errNoLeaseSource)
	}
	if len(o.endpoints) == 0 && l.KVBucket == "" {
		return nil // no source: the safe quota only
	}
	o.c.goroutine(o.run)
	if len(o.endpoints) > 0 {
		o.c.goroutine(o.reporter)
		if l.KVBucket == "" {
			if l.Transport == SSE {
				o.c.goroutine(o.streamer)
			} else {
				o.c.goroutine(o.watcher)
			}
		}
	}
	if l.KVBucket != "" {
		o.c.goroutine(func() { o.kvWatcher(kvJS) })
	}
	return nil
}

// httpClientFor returns the client of a lease configuration: the
// caller's, one of the producer's own with l.TLS, or the shared default.
func httpClientFor(l LeaseConfig) *http.Client {
	switch {
	case l.HTTPClient != nil:
		return l.HTTPClient
	case l.TLS != nil:
		t := newTransport()
		t.TLSClientConfig = l.TLS.Clone()
		return &http.Client{Transport: t}
	}
	return defaultHTTPClient
}

func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: quotaproto.MaxWatchWait + 15*time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
}

var defaultHTTPClient = &http.Client{Transport: newTransport()}

// backoffState is an exponential backoff with jitter between the lease
// config's MinBackoff and MaxBackoff; round counts the daemons that failed
// in turn since the last backoff (see retryWait).
type backoffState struct {
	min, max, cur time.Duration
	round         int
}

func (b *backoffState) next() time.Duration {
	if b.cur < b.min {
		b.cur = b.min
	}
	d := jitter(b.cur)
	b.cur *= 2
	if b.cur > b.max {
		b.cur = b.max
	}
	return d
}

func (b *backoffState) reset() { b.cur, b.round = b.min, 0 }

func (o *leaseOwner) newBackoff() backoffState {
	l := o.c.cfg.Leases
	return backoffState{min: l.MinBackoff, max: l.MaxBackoff, cur: l.MinBackoff}
}

// pause sleeps d on the clock; false when the producer closed.
func (o *leaseOwner) pause(d time.Duration, wake ...<-chan struct{}) bool {
	var w1, w2 <-chan struct{}
	if len(wake) > 0 {
		w1 = wake[0]
	}
	if len(wake) > 1 {
		w2 = wake[1]
	}
	tm := o.c.clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
	case <-w1:
	case <-w2:
	case <-o.c.ctx.Done():
		return false
	}
	return true
}

// httpStatusError is a non-200 answer of the daemon.
type httpStatusError struct {
	code       int
	msg        string
	retryAfter time.Duration // 0: no (or a garbled) hint
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("lagbridge daemon answered %d: %s", e.code, e.msg)
}

// ParseRetryAfter parses an HTTP Retry-After value (delay-seconds or an
// HTTP date, RFC 9110) relative to now. It returns false for a garbled,
// negative or absurd (over an hour) value: no hint, which is not the same
// as "retry at once".
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(maxRetryAfter/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		if d > maxRetryAfter {
			return 0, false
		}
		return d, true
	}
	return 0, false
}

// do performs one request to the current daemon and returns the 200
// answer, and which daemon it asked (an index of endpoints, for
// retryWait).
func (o *leaseOwner) do(ctx context.Context, method, path string, q url.Values, body []byte) (_ *http.Response, idx int, _ error) {
	return o.doHeld(ctx, method, path, q, body, 0)
}

// doHeld is do with the Last-Event-ID of a stream request: held, the
// version of the set applied (0: none sent).
func (o *leaseOwner) doHeld(ctx context.Context, method, path string, q url.Values, body []byte, held uint64) (_ *http.Response, idx int, _ error) {
	idx = int(o.current.Load())
	u := strings.TrimRight(o.endpoints[idx], "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, idx, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := o.c.cfg.Leases.Token; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if held > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(held, 10))
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, idx, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		e := &httpStatusError{code: resp.StatusCode}
		var eb quotaproto.ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
			e.msg = eb.Error
		} else {
			e.msg = strings.TrimSpace(string(b))
		}
		if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), o.c.clock.Now()); ok {
			e.retryAfter = d
		}
		return nil, idx, e
	}
	return resp, idx, nil
}

// maxSetBytes bounds a lease set as read: an HTTP answer's body, and an
// SSE event's data in all (not only each line). A set holds at most
// quotaproto.MaxTopics (256) leases of a few hundred bytes each.
const maxSetBytes = 1 << 20

// fetchSet makes one request to the daemon and decodes the lease set it
// answers with.
func (o *leaseOwner) fetchSet(ctx context.Context, method, path string, q url.Values, body []byte) (decodedSet, int, error) {
	resp, idx, err := o.do(ctx, method, path, q, body)
	if err != nil {
		return decodedSet{}, idx, err
	}
	defer resp.Body.Close()
	ds, err := o.readSet(resp.Body)
	return ds, idx, err
}

// readSet reads and decodes a LeaseSet body (at most maxSetBytes).
func (o *leaseOwner) readSet(r io.Reader) (decodedSet, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSetBytes))
	if err != nil {
		return decodedSet{}, err
	}
	return o.decode(b)
}

func (o *leaseOwner) decode(b []byte) (decodedSet, error) {
	ds, problems, err := decodeSet(b, o.c.cfg.Producer)
	if err != nil {
		o.malformed.Add(1)
		return decodedSet{}, err
	}
	for _, p := range problems {
		o.malformed.Add(1)
		o.c.cfg.Logger.Warn("lagbridge lease skipped", "error", p)
	}
	return ds, nil
}

func (o *leaseOwner) deliverSet(ds decodedSet, resumed []*topic) bool {
	return o.deliver(leaseUpdate{leases: ds.leases, version: ds.version, isSet: true, resumed: resumed})
}

// release ends the resume (core.resume) of ts: a Block wait that a 0
// rate would fail at once no longer waits for a report's answer, and the
// waits under way look at the lease in place again. The lease goroutine
// calls it once it has applied the answer (or dropped it as older than
// the set held), not the reporter after handing it over: a wait woken in
// between by the new lease, still 0, would find the resume and wait until
// its limit. The reporter calls it when the report failed: no answer is
// coming soon.
func release(ts []*topic) {
	for _, t := range ts {
		if t.resumed.CompareAndSwap(true, false) {
			t.wake()
		}
	}
}

// retryWait is the wait after a request to daemon idx failed with err.
// With more daemons than one, a failure that says the daemon is not
// working (anything but a 4xx answer or the end of the registration)
// moves every lease goroutine to the next daemon, unless another one has
// moved already; the wait is then a short jittered pause, until the
// goroutine has seen every daemon fail in turn: then, as with a single
// daemon, the daemon's Retry-After or the next backoff.
func (o *leaseOwner) retryWait(idx int, err error, b *backoffState) time.Duration {
	if n := len(o.endpoints); n > 1 && failsOver(err) {
		if o.current.CompareAndSwap(int32(idx), int32((idx+1)%n)) {
			o.failovers.Add(1)
			o.c.cfg.Logger.Warn("lagbridge daemon not working; trying the next", "from", o.endpoints[idx], "to", o.endpoints[(idx+1)%n], "error", err)
		}
		if b.round++; b.round < n {
			return jitter(b.min)
		}
		b.round = 0
	}
	return hintOr(err, b)
}

// failsOver reports whether err says the daemon asked is not working.
func failsOver(err error) bool {
	var se *httpStatusError
	if errors.As(err, &se) {
		return se.code >= 500
	}
	return err != nil && !errors.Is(err, errRegistrationExpired)
}

// errRegistrationExpired ends a stream whose daemon forgot the producer.
var errRegistrationExpired = errors.New("the daemon expired this producer's registration")

// hintOr is the wait after a failed request: the daemon's Retry-After
// when it sent a valid one, else the next backoff.
func hintOr(err error, b *backoffState) time.Duration {
	var se *httpStatusError
	if errors.As(err, &se) && se.retryAfter > 0 {
		return se.retryAfter
	}
	return b.next()
}

// report builds the demand report: every topic, the messages per second
// asked since the last report. unmeasured says a demand in it could not be
// measured (the first report, one within 100 ms of the last, or a topic
// that resumed since a report that found it idle): it says 0, which the
// daemon reads as unknown, and an unknown demand of a high criticality
// takes the whole rate of a limited topic from the classes below it
// (quota.PriorityFair), so the reporter measures again soon. A topic with
// no message asked over a measured window and none in flight is idle: its
// 0 says measured (protocol 1.7), which takes nothing from the others,
// and its next message asks for a report at once (core.resume).
func (o *leaseOwner) report(last time.Time, now time.Time) (_ quotaproto.Report, unmeasured bool) {
	c := o.c
	topics := *c.topics.Load()
	r := quotaproto.Report{Producer: c.cfg.Producer, Topics: make([]quotaproto.TopicDemand, 0, len(topics))}
	secs := now.Sub(last).Seconds()
	crit := c.cfg.Criticality.String()
	skipped := 0
	for name, t := range topics {
		if !quotaproto.ValidTopic(name) {
			// The daemon would refuse the whole report for it.
			skipped++
			continue
		}
		asked := t.admitted.Load() + t.refused.Load()
		n := asked - t.reportedDemand.Swap(asked)
		// A topic added since the last report (topicAdded, which
		// reports at once) was counted over part of the window only:
		// its demand is over the time since it was added (one message
		// over the 5 s since the last report read 0.2/s).
		secs, from := secs, last
		if !last.IsZero() && t.added.After(last) {
			secs, from = now.Sub(t.added).Seconds(), t.added
		}
		// A topic that resumed is not measured: its first messages
		// were asked over part of the window, perhaps while a Block
		// wait held them uncounted. Nor is one whose resume a failed
		// report carried (o.carried, kept until an answer).
		if t.resumed.Load() {
			o.carry(t)
		}
		resumed := slices.Contains(o.carried, t)
		d, measured := 0.0, secs >= 0.1 && !from.IsZero() && !resumed
		if measured {
			d = float64(n) / secs
		} else {
			unmeasured = true
		}
		if len(r.Topics) == quotaproto.MaxTopics {
			c.cfg.Logger.Warn("lagbridge: more topics than the protocol allows in one report; the rest run on the safe quota", "max", quotaproto.MaxTopics)
			break
		}
		idle := measured && n == 0 && t.inflight.count() == 0
		t.idle.Store(idle)
		r.Topics = append(r.Topics, quotaproto.TopicDemand{Topic: name, Criticality: crit, Demand: math.Min(d, 1e12), Measured: idle})
	}
	if skipped > 0 {
		c.cfg.Logger.Warn("lagbridge: topics with names the protocol refuses (empty, over 249 characters, control characters, invalid UTF-8) are not reported; they run on the safe quota", "topics", skipped)
	}
	return r, unmeasured
}

// demandWindow is how soon a report whose demand could not be measured
// (see report) is followed by one that measures it, when the daemon's
// refresh is longer: registration said "unknown" for every topic, and the
// refresh (a third of the lease lifetime, 10 s by default) would leave it
// so for that long.
const demandWindow = time.Second

// measuredRetry is how long the reports go without the measured field
// after a daemon refused it (older than protocol 1.7), before they carry
// it again (the daemon may be upgraded meanwhile). A variable for the
// tests.
var measuredRetry = 10 * time.Minute

// reporter registers the producer and reports demand: at once, then every
// refreshAfterMs (jittered ±10%), at once for a new topic or a topic that
// resumed after an idle report (at most one such report a demandWindow),
// and with backoff after failures.
func (o *leaseOwner) reporter() {
	c := o.c
	b := o.newBackoff()
	var last, lastResume, noMeasured time.Time
	var refresh time.Duration // the daemon's refreshAfterMs, once answered
	byResume := false
	for {
		// This report includes every topic known now, and every resume.
		select {
		case <-c.topicAdded:
		default:
		}
		select {
		case <-c.topicResumed:
		default:
		}
		now := c.clock.Now()
		rep, unmeasured := o.report(last, now)
		if now.Before(noMeasured) {
			o.withoutMeasured(&rep)
		}
		if byResume {
			lastResume = now
		}
		last = now
		ds, idx, err := o.send(rep, refresh, &noMeasured)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			o.leaseError("lagbridge lease report failed", err)
			// No answer is coming soon: the Block waits of the topics
			// that resumed decide on the lease in place (a 0 fails them
			// at once, as before the resume); the next report still
			// says their demand is unknown (o.carried stays).
			release(o.carried)
			if !o.pauseFailed(o.retryWait(idx, err, &b)) {
				return
			}
			continue
		}
		b.reset()
		// The lease goroutine ends the resumes this answer carries
		// once it has applied it (release).
		if !o.deliverSet(ds, o.carried) {
			return
		}
		o.carried = nil
		if o.regOnce.CompareAndSwap(false, true) {
			close(o.registered)
		}
		refresh = ds.refresh
		every := ds.refresh
		if every <= 0 {
			every = c.cfg.Leases.ReportInterval
		}
		if unmeasured && every > demandWindow {
			// Spread over 0.5-1.5 windows: producers that start together
			// do not all measure (and move each other's sets) at once.
			every = time.Duration(float64(demandWindow) * (0.5 + rand.Float64()))
		} else {
			every = time.Duration(float64(every) * (0.9 + 0.2*rand.Float64()))
		}
		var ok bool
		if byResume, ok = o.waitReport(every, lastResume); !ok {
			return
		}
	}
}

// carry keeps a resumed topic for the next report that is answered: it
// says the topic's demand is unknown until then.
func (o *leaseOwner) carry(t *topic) {
	if !slices.Contains(o.carried, t) {
		o.carried = append(o.carried, t)
	}
}

// pauseFailed is the reporter's pause d after a failed report: no
// report is on the way until it ends, so a topic that resumes meanwhile
// (core.resume) is carried to the next report, which says its demand is
// unknown, and its Block waits decide on the lease in place at once
// (release) instead of waiting out the pause (a Retry-After, MaxBackoff).
// It sends nothing: resumes do not cut the backoff short. False when the
// producer closed.
func (o *leaseOwner) pauseFailed(d time.Duration) bool {
	c := o.c
	tm := c.clock.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case <-tm.C():
			return true
		case <-c.ctx.Done():
			return false
		case <-c.topicResumed:
			for _, t := range *c.topics.Load() {
				if t.resumed.Load() {
					o.carry(t)
				}
			}
			release(o.carried)
		}
	}
}

// send posts rep to the current daemon and decodes the lease set it
// answers with. A daemon older than protocol 1.7 refuses the measured
// field: the same report goes again without it (that daemon reads its 0
// as unknown), and the reports until *noMeasured go without it too.
func (o *leaseOwner) send(rep quotaproto.Report, refresh time.Duration, noMeasured *time.Time) (decodedSet, int, error) {
	c := o.c
	// A daemon that cannot answer a report within its own refresh
	// interval (paused, overloaded) is failed over before the leases it
	// granted run out, not after RequestTimeout.
	timeout := c.cfg.Leases.RequestTimeout
	if refresh > 0 {
		timeout = min(timeout, max(refresh, time.Second))
	}
	// The version held goes along (?version=, as the watch's): a replica
	// that has not read that set answers with one above it.
	var q url.Values
	if held := o.version.Load(); held > 0 {
		q = url.Values{"version": {strconv.FormatUint(held, 10)}}
	}
	ds, idx, err := o.post(timeout, q, rep)
	if se := (*httpStatusError)(nil); errors.As(err, &se) && se.code == http.StatusBadRequest && quotaproto.RefusesMeasured(se.msg) && o.withoutMeasured(&rep) {
		*noMeasured = c.clock.Now().Add(measuredRetry)
		c.cfg.Logger.Warn("lagbridge daemon does not know a measured demand (protocol 1.7); idle topics are reported as unknown", "retry", measuredRetry)
		ds, idx, err = o.post(timeout, q, rep)
	}
	return ds, idx, err
}

// post sends rep to the current daemon within timeout and decodes the
// lease set it answers with.
func (o *leaseOwner) post(timeout time.Duration, q url.Values, rep quotaproto.Report) (decodedSet, int, error) {
	body, _ := json.Marshal(rep)
	ctx, cancel := context.WithTimeout(o.c.ctx, timeout)
	defer cancel()
	return o.fetchSet(ctx, http.MethodPost, quotaproto.PathLeases, q, body)
}

// withoutMeasured clears the measured field of rep's topics, and their
// idle marks (a daemon that reads their 0 as unknown needs no report at
// their next message); it reports whether any topic carried it.
func (o *leaseOwner) withoutMeasured(rep *quotaproto.Report) bool {
	topics := *o.c.topics.Load()
	had := false
	for i := range rep.Topics {
		if rep.Topics[i].Measured {
			rep.Topics[i].Measured, had = false, true
			if t := topics[rep.Topics[i].Topic]; t != nil {
				t.idle.Store(false)
			}
		}
	}
	return had
}

// waitReport waits d for the next report, or less: a new topic, the
// daemon forgetting the producer, or a message of a topic idle at the
// last report (core.resume) ends it. A resume within demandWindow of
// lastResume, the last report one woke, is held until then: a topic
// flapping between idle and busy adds at most one report a window. It
// reports whether a resume ended the wait, and false when the producer
// closed.
func (o *leaseOwner) waitReport(d time.Duration, lastResume time.Time) (resumed, ok bool) {
	c := o.c
	tm := c.clock.NewTimer(d)
	defer tm.Stop()
	wake := c.topicResumed
	var hold <-chan time.Time
	for {
		select {
		case <-tm.C():
			return false, true
		case <-c.topicAdded:
			return false, true
		case <-o.reRegister:
			return false, true
		case <-c.ctx.Done():
			return false, false
		case <-wake:
			wake = nil
			wait := lastResume.Add(demandWindow).Sub(c.clock.Now())
			if wait <= 0 {
				return true, true
			}
			h := c.clock.NewTimer(wait)
			defer h.Stop()
			hold = h.C()
		case <-hold:
			return true, true
		}
	}
}

// askReport makes the reporter report now (the daemon does not know us).
func (o *leaseOwner) askReport() {
	select {
	case o.reRegister <- struct{}{}:
	default:
	}
}

func (o *leaseOwner) waitRegistered() bool {
	select {
	case <-o.registered:
		return true
	case <-o.c.ctx.Done():
		return false
	}
}

// watcher long-polls /v1/leases/watch and hands every answer to the owner.
func (o *leaseOwner) watcher() {
	c := o.c
	if !o.waitRegistered() {
		return
	}
	b := o.newBackoff()
	wait := c.cfg.Leases.WatchWait
	// since is the version of the last set this watcher handed over (the
	// owner may not have applied it yet), or the newest the owner applied
	// (a report's answer, a set applied after this watcher started) when
	// that is newer: the daemon asked next, perhaps another replica, is
	// told the newest set held.
	var since uint64
	for {
		since = max(since, o.version.Load())
		q := url.Values{
			"producer": {c.cfg.Producer},
			"version":  {strconv.FormatUint(since, 10)},
			"timeout":  {wait.String()},
		}
		asked := since
		start := time.Now()
		ctx, cancel := context.WithTimeout(c.ctx, wait+c.cfg.Leases.RequestTimeout)
		ds, idx, err := o.fetchSet(ctx, http.MethodGet, quotaproto.PathWatch, q, nil)
		cancel()
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			var se *httpStatusError
			if errors.As(err, &se) && se.code == http.StatusNotFound {
				o.askReport()
			}
			o.leaseError("lagbridge lease watch failed", err)
			if !o.pause(o.retryWait(idx, err, &b)) {
				return
			}
			continue
		}
		// A daemon that answers at once with an unchanged set, or an older
		// one than held (a replica behind), would make this loop spin:
		// pause as after an error, for longer each time in a row.
		spun := ds.version <= asked && time.Since(start) < wait/10
		if !spun {
			b.reset()
		}
		if !o.deliverSet(ds, nil) {
			return
		}
		since = ds.version
		if spun && !o.pause(b.next()) {
			return
		}
	}
}

// streamLasted is how long a stream that served lease sets must have
// lasted for its end to reset the reconnect backoff.
const streamLasted = time.Second

// streamer reads /v1/leases/stream (server-sent events) and reconnects
// with backoff.
func (o *leaseOwner) streamer() {
	c := o.c
	if !o.waitRegistered() {
		return
	}
	b := o.newBackoff()
	for {
		start := time.Now()
		got, idx, err := o.streamOnce()
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			var se *httpStatusError
			if errors.As(err, &se) && se.code == http.StatusNotFound {
				o.askReport()
			}
			o.leaseError("lagbridge lease stream failed", err)
		}
		var wait time.Duration
		if got {
			// The daemon worked: reconnect to it (a stream that served
			// lease sets and ended is no reason to move), at once after a
			// stream that lasted, later each time after streams that end
			// as soon as they served (a proxy that cuts them).
			if time.Since(start) >= streamLasted {
				b.reset()
			}
			wait = b.next()
		} else {
			wait = o.retryWait(idx, err, &b)
		}
		if !o.pause(wait) {
			return
		}
	}
}

// streamOnce reads one SSE connection until it ends; got reports whether
// any lease set arrived. The connection is dropped when the daemon stays
// StreamIdle without a complete event or keepalive (from the request on:
// the headers too), and when an event's data exceeds maxSetBytes.
func (o *leaseOwner) streamOnce() (got bool, idx int, err error) {
	c := o.c
	idle := c.cfg.Leases.StreamIdle
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	watchdog := time.AfterFunc(idle, cancel)
	defer watchdog.Stop()
	// The version held goes as the SSE Last-Event-ID (an event's id is
	// its set's version): a replica that has not read that set yet (its
	// leader was lost) serves one above it rather than an older one.
	resp, idx, err := o.doHeld(ctx, http.MethodGet, quotaproto.PathStream, url.Values{"producer": {c.cfg.Producer}}, nil, o.version.Load())
	if err != nil {
		return false, idx, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, idx, fmt.Errorf("stream answered with content type %q", ct)
	}
	var skips eventSkips
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxSetBytes)
	var event string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0: // dispatch
			watchdog.Reset(idle)
			switch event {
			case "leases", "":
				if data.Len() > 0 {
					ds, err := o.decode(data.Bytes())
					if err != nil {
						skips.skipped(o, err)
					} else {
						if !o.deliverSet(ds, nil) {
							return got, idx, nil
						}
						got = true
					}
				}
			case "expired":
				o.askReport()
				return got, idx, errRegistrationExpired
			}
			event = ""
			data.Reset()
		case line[0] == ':': // comment (keepalive)
			watchdog.Reset(idle)
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "event":
				event = string(value)
			case "data":
				if data.Len()+1+len(value) > maxSetBytes {
					o.malformed.Add(1)
					return got, idx, fmt.Errorf("lease stream event over %d bytes", maxSetBytes)
				}
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.Write(value)
			}
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return got, idx, err
	}
	if ctx.Err() != nil && c.ctx.Err() == nil {
		return got, idx, errors.New("lease stream silent for too long")
	}
	return got, idx, io.ErrUnexpectedEOF
}

// eventSkips keeps the warnings about one stream's malformed events to
// one a minute: the first at once, later ones with how many were skipped
// since (each is still counted in the lease error and malformed
// counters). A stream of garbage logged one warning per event before, at
// whatever rate the server sent them.
type eventSkips struct {
	warned time.Time // the last warning; zero: none on this stream
	since  int       // events skipped since it
}

// eventSkipWarnEvery is the most often one stream warns about skipped
// events.
const eventSkipWarnEvery = time.Minute

func (e *eventSkips) skipped(o *leaseOwner, err error) {
	now := o.c.clock.Now()
	if !e.warned.IsZero() && now.Sub(e.warned) < eventSkipWarnEvery {
		e.since++
		o.errorsTotal.Add(1)
		o.lastErrorUnix.Store(now.Unix())
		return
	}
	if e.since > 0 {
		o.errorsTotal.Add(1)
		o.lastErrorUnix.Store(now.Unix())
		o.c.cfg.Logger.Warn("lagbridge lease stream event skipped", "error", err, "skipped_since_last_warning", e.since+1)
	} else {
		o.leaseError("lagbridge lease stream event skipped", err)
	}
	e.warned, e.since = now, 0
}

// kvWatcher reads this producer's leases from the KV bucket: every key
// quotaproto.KVKey(producer, topic) holds one JSON lease.
func (o *leaseOwner) kvWatcher(js jetstream.JetStream) {
	c := o.c
	b := o.newBackoff()
	bucket := c.cfg.Leases.KVBucket
	for {
		err := o.kvWatchOnce(js, bucket, &b)
		if c.ctx.Err() != nil {
			return
		}
		o.leaseError("lagbridge lease KV watch failed", err)
		if !o.pause(b.next()) {
			return
		}
	}
}

func (o *leaseOwner) kvWatchOnce(js jetstream.JetStream, bucket string, b *backoffState) error {
	c := o.c
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	kv, err := js.KeyValue(ctx, bucket)
	cancel()
	if err != nil {
		return fmt.Errorf("KV bucket %q: %w", bucket, err)
	}
	w, err := kv.Watch(c.ctx, quotaproto.KVProducerPrefix(c.cfg.Producer)+">")
	if err != nil {
		return fmt.Errorf("watch KV bucket %q: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-c.ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("KV watcher closed")
			}
			if e == nil {
				continue // end of the initial values
			}
			b.reset()
			_, topic, err := quotaproto.ParseKVKey(e.Key())
			if err != nil {
				o.malformed.Add(1)
				continue
			}
			var u leaseUpdate
			switch e.Operation() {
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				u.deleted = []string{topic}
			default:
				d, err := decodeLease(e.Value())
				if err != nil {
					o.malformed.Add(1)
					c.cfg.Logger.Warn("lagbridge KV lease skipped", "key", e.Key(), "error", err)
					continue
				}
				d.Topic = topic // the key names the topic
				u.leases = []decodedLease{d}
			}
			if !o.deliver(u) {
				return nil
			}
		}
	}
}
