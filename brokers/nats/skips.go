package nats

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/lagbridge/lagbridge/brokers"
)

// The ttl guard's skips. A consumer behind ttl/natsguard terminates the
// messages it finds expired (TermWithReason, see natsguard.Config), and
// the server publishes an advisory for every term:
//
//	$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>
//	{"type": "io.nats.jetstream.advisory.v1.terminated", "timestamp": ...,
//	 "stream": ..., "consumer": ..., "consumer_seq": ..., "stream_seq": ...,
//	 "deliveries": ..., "reason": "lagbridge-ttl: expired (...)"}
//
// (the reason since nats-server 2.10.4). A skip costs the consumer
// nothing, yet it moves the ack floor as processed work does: a backlog
// the guard skips in one go reads as a burst of consumption, which the
// quota controller must not take for capacity. The observer subscribes to
// these advisories (one wildcard subscription on its connection, ended
// with it) and counts the guard's terms per consumer; each refresh hands
// the count since the previous one to lag/ (lag.PartitionSample.Skipped).
//
// Only the guard's reason counts: a term an application sends after it
// tried a message (a poison message it gave up on) cost it the attempt
// and is work like any other; taken out of the consumption, such terms
// would read a consumer that gives up on half its messages as half as
// fast as it is. A server older than 2.10.4 drops the reason: nothing is
// counted (behaviour as before), and the observer says so once. Without
// permission to subscribe to the advisories, likewise.
//
// The advisories are trusted as far as their subject: one whose subject
// names another consumer than its body is not counted, and with a
// JetStream domain configured, one of another domain is not. A client
// allowed to publish on $JS.EVENT.> can still make skips up; the
// controller takes out no more than the consumer consumed. Deny
// untrusted users publishing there.
//
// The server sends the advisory for every term, whether or not the
// message was still pending. A message termed twice (two expired copies,
// the first termed after AckWait redelivered it) counts once: terms are
// remembered by stream sequence, the last maxRecentTerms of them. A term
// of a copy whose earlier copy the handler acked still counts (the ack
// sends no advisory to tell it by): a consumer whose handler outlasts
// AckWait and whose guard then terms the copies redelivered reads as
// skipping work it did: its capacity reads low (never below 0: the
// controller takes out no more than was consumed).

// terminatedSubject is the wildcard of the MSG_TERMINATED advisories,
// terminatedPrefix the subject of one without its stream and consumer
// (names without dots).
const (
	terminatedSubject = terminatedPrefix + ">"
	terminatedPrefix  = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."
)

// expiredReason starts the reason of every term of ttl/natsguard
// ("lagbridge-ttl: expired (<reason>)"; this package may not import
// ttl, TestSkipsCountGuardTerms holds the two together).
const expiredReason = "lagbridge-ttl: expired"

// maxSkipRuns bounds the terms kept per consumer between two refreshes
// (runs of terms within one millisecond): a consumer whose stream is not
// refreshed for long drops its oldest.
const maxSkipRuns = 4096

// maxSkipKeys bounds the consumers counted at once, and maxSkipRunsAll
// the runs kept over all of them (32 bytes each: 2 MiB). Counts are
// forgotten when their consumer is read, deleted, or its stream is not
// listed (keep, keepStreams); what arrives between two listings for
// names nobody reads (a stream created and deleted in between, an
// advisory a client made up) is bounded by these. Past a bound, a new
// consumer's terms are not counted (said once), and a known one's join
// its newest run.
const (
	maxSkipKeys    = 4096
	maxSkipRunsAll = 1 << 16
)

type skipKey struct{ stream, consumer string }

// skipRun is n terms the server stamped within one millisecond, the last
// of them at at.
type skipRun struct {
	at time.Time
	n  int64
}

// skips counts the guard's terms per consumer until a refresh takes them.
// Its handler runs on the subscription's goroutine (nats.go's, owned by
// the connection), take on the refreshing workers.
type skips struct {
	watched func(stream, consumer string) bool
	log     *slog.Logger
	version func() string    // the connected server's version
	now     func() time.Time // the clock a stamp is bounded by; nil: time.Now

	mu    sync.Mutex
	runs  map[skipKey][]skipRun
	nRuns int // runs held over all keys

	// The terms counted lately, by stream sequence (recent: its
	// oldest-first ring, next where the next one goes): a message
	// termed twice counts once.
	recent map[termKey]struct{}
	ring   []termKey
	next   int

	// domain, when set (Config.Domain), is the JetStream domain whose
	// advisories count: another domain's consumer of the same name
	// (across a leafnode) is not this one.
	domain string

	warnedReason, warnedPerm, warnedBad, warnedFull, warnedSlow atomic.Bool
}

// terminated is the part of the advisory the count reads.
type terminated struct {
	Time     time.Time `json:"timestamp"`
	Stream   string    `json:"stream"`
	Consumer string    `json:"consumer"`
	Seq      uint64    `json:"stream_seq"`
	Reason   string    `json:"reason"`
	Domain   string    `json:"domain"`
}

// termKey names a term: the consumer and the message's stream sequence.
type termKey struct {
	skipKey
	seq uint64
}

// maxRecentTerms is how many terms are remembered to count a message
// termed twice once: at 1,000 skips a second, about half a minute (the
// default AckWait, after which an expired copy may come again). 40 bytes
// and a map entry each: about 3 MiB.
const maxRecentTerms = 1 << 15

// handle counts one advisory.
func (s *skips) handle(m *natsgo.Msg) {
	var ev terminated
	err := json.Unmarshal(m.Data, &ev)
	if err != nil || ev.Stream == "" || ev.Consumer == "" || m.Subject != terminatedPrefix+ev.Stream+"."+ev.Consumer {
		if s.warnedBad.CompareAndSwap(false, true) {
			s.log.Warn("nats: a MSG_TERMINATED advisory that does not parse, or names another consumer than its subject; not counted", "subject", m.Subject, "err", err)
		}
		return
	}
	if s.domain != "" && ev.Domain != s.domain {
		return
	}
	if ev.Reason == "" && !atLeast(s.version(), minReasonServer) && s.warnedReason.CompareAndSwap(false, true) {
		s.log.Warn("nats: the server ("+s.version()+") sends MSG_TERMINATED advisories without their reason (before 2.10.4): the ttl guard's skips cannot be told from other terms and are not counted; expired messages the guard skips read as consumption", "stream", ev.Stream, "consumer", ev.Consumer)
	}
	if !strings.HasPrefix(ev.Reason, expiredReason) || !s.watched(ev.Stream, ev.Consumer) {
		return
	}
	at := ev.Time
	if now := s.clock(); at.After(now.Add(stampSlack)) {
		at = now.Add(stampSlack)
	}
	s.count(termKey{skipKey{ev.Stream, ev.Consumer}, ev.Seq}, at)
}

// again reports whether t was counted lately, and remembers it. A
// sequence of 0 (an advisory that does not carry it) is never again.
// Called with s.mu held.
func (s *skips) again(t termKey) bool {
	if t.seq == 0 {
		return false
	}
	if _, ok := s.recent[t]; ok {
		return true
	}
	if s.recent == nil {
		s.recent, s.ring = make(map[termKey]struct{}), make([]termKey, 0, 1024)
	}
	if len(s.ring) < maxRecentTerms {
		s.ring = append(s.ring, t)
	} else {
		delete(s.recent, s.ring[s.next])
		s.ring[s.next] = t
		s.next = (s.next + 1) % maxRecentTerms
	}
	s.recent[t] = struct{}{}
	return false
}

// stampSlack is how far ahead of the time it arrives an advisory's stamp
// is believed. The stamp is the server's clock, and take compares it with
// the server's clock; one made up, or from a server whose clock runs
// ahead, would otherwise wait for a reading that far off. Taken earlier,
// a term is credited to a reading at most one before the one whose ack
// floor shows it.
const stampSlack = time.Second

// clock is the time now (s.now, or the wall clock).
func (s *skips) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// count adds the term t the server made at at, unless it was counted
// lately.
func (s *skips) count(t termKey, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.again(t) {
		return
	}
	k := t.skipKey
	rs, known := s.runs[k]
	full := s.nRuns >= maxSkipRunsAll
	if !known && (full || len(s.runs) >= maxSkipKeys) {
		if s.warnedFull.CompareAndSwap(false, true) {
			s.log.Warn("nats: too many MSG_TERMINATED advisories kept between two refreshes: the ttl guard's skips of some consumers are not counted", "consumers", len(s.runs), "runs", s.nRuns, "stream", k.stream, "consumer", k.consumer)
		}
		return
	}
	if n := len(rs); n > 0 && (full || rs[n-1].at.Truncate(time.Millisecond).Equal(at.Truncate(time.Millisecond))) {
		rs[n-1].n++
		if at.After(rs[n-1].at) {
			rs[n-1].at = at
		}
		return
	}
	if len(rs) >= maxSkipRuns {
		rs = rs[1:]
		s.nRuns--
	}
	s.runs[k] = append(rs, skipRun{at: at, n: 1})
	s.nRuns++
}

// take returns how many of the consumer's terms the server made by upTo
// (its own clock: the consumer info's TimeStamp) and forgets them; every
// term counted so far when upTo is zero (a server that does not stamp
// its infos). Terms made after upTo are the next reading's: its ack
// floor shows them. Every run at or before upTo is taken, wherever it
// sits: advisories arrive about in the order of their stamps, not
// exactly (servers of a cluster, a stamp bounded by stampSlack).
func (s *skips) take(stream, consumer string, upTo time.Time) int64 {
	k := skipKey{stream, consumer}
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.runs[k]
	var n int64
	var later []skipRun
	for _, r := range rs {
		if upTo.IsZero() || !r.at.After(upTo) {
			n += r.n
		} else {
			later = append(later, r)
		}
	}
	s.nRuns -= len(rs) - len(later)
	if len(later) == 0 {
		delete(s.runs, k)
	} else {
		s.runs[k] = later
	}
	return n
}

// keep forgets the counts of stream's consumers that live does not list
// (deleted, or no longer watched), and of the whole stream when live is
// nil.
func (s *skips) keep(stream string, live map[string]bool) {
	s.forget(func(k skipKey) bool { return k.stream == stream && !live[k.consumer] })
}

// keepStreams forgets the counts of every stream that listed (the
// watched streams of the newest listing) does not hold: deleted, never
// listed (created and deleted between two listings, or named by an
// advisory nobody's stream sent), or no longer watched or owned.
func (s *skips) keepStreams(listed map[string]bool) {
	s.forget(func(k skipKey) bool { return !listed[k.stream] })
}

// forget drops the counts of the consumers drop names.
func (s *skips) forget(drop func(skipKey) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, rs := range s.runs {
		if drop(k) {
			s.nRuns -= len(rs)
			delete(s.runs, k)
		}
	}
}

// asyncError reports, once, that the subscription to the advisories was
// refused (nats.go passes no subscription with a permission violation;
// the server's text names the subject), and, once, that advisories were
// dropped because they came faster than the handler counted them (the
// subscription's pending limits: the skips are undercounted, read as
// consumption as before).
func (s *skips) asyncError(sub *natsgo.Subscription, err error) {
	if errors.Is(err, natsgo.ErrSlowConsumer) && sub != nil && sub.Subject == terminatedSubject {
		if s.warnedSlow.CompareAndSwap(false, true) {
			s.log.Warn("nats: MSG_TERMINATED advisories dropped (they came faster than they were counted): some of the ttl guard's skips are not counted and read as consumption", "err", err)
		}
		return
	}
	if !errors.Is(err, natsgo.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+terminatedSubject+`"`) {
		return
	}
	if s.warnedPerm.CompareAndSwap(false, true) {
		s.log.Warn("nats: no permission to subscribe to "+terminatedSubject+": the ttl guard's skips are not counted; expired messages the guard skips read as consumption", "err", err)
	}
}

// minReasonServer is the first nats-server whose MSG_TERMINATED advisories
// carry the term's reason.
var minReasonServer = brokers.Version{2, 10, 4}

// atLeast reports whether the server version v ("2.10.4", "2.11.0-beta")
// is at least want; an unknown version is not.
func atLeast(v string, want brokers.Version) bool {
	got, ok := brokers.ParseVersion(v)
	return ok && got.AtLeast(want)
}
