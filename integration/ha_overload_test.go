package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
	"github.com/lagbridge/lagbridge/ttl"
)

// The closed-loop overload every run of TestHAFailoverUnderOverload
// plays, on the clock of the run's start (the bench's scenario, smaller):
// producers offer overloadOffer msg/s through the SDK; the consumer
// serves overloadNormal msg/s, then overloadSlow from overloadDrop on.
// Goodput and dead work are measured over [overloadKill, overloadStop):
// the SIGKILL and the failover that follows.
const (
	overloadOffer    = 300.0
	overloadNormal   = 400.0
	overloadSlow     = 100.0
	overloadDeadline = 2 * time.Second
	overloadDrop     = 6 * time.Second
	overloadKill     = 16 * time.Second // SIGKILL of the leader
	overloadStop     = 36 * time.Second // SIGSTOP of the leader that took over
	overloadCont     = 46 * time.Second // SIGCONT
	overloadEnd      = 50 * time.Second
	haSession        = 6 * time.Second
	haInterval       = 250 * time.Millisecond
)

// overloadClass is one producer of the overload.
type overloadClass struct {
	id    string
	crit  ttl.Criticality
	share float64
}

// overloadClasses are the producers of one run: a critical one and a
// sheddable one, named uniquely (their ids are Kafka client-ids with
// client quotas).
func overloadClasses() []overloadClass {
	return []overloadClass{{unique("orders"), ttl.Critical, 0.4}, {unique("analytics"), ttl.Sheddable, 0.6}}
}

// TestHAFailoverUnderOverload runs, at the same time on one broker (real
// Kafka, the embedded nats-server), two deployments of three lagbridge
// processes under the same closed-loop overload: one undisturbed, one
// whose leader is SIGKILLed, then (20 s later) whose new leader is
// SIGSTOPped past its session and SIGCONTed. Asserted: a new leader
// leads within the session timeout plus one interval, and the producers
// get sets newer than the lost leader's within a sixth of the session (a
// follower standing in, internal/replica); on Kafka one follower standing
// in writes the client quotas (the broker shows them) before the new
// leader leads, within the silence (a third of the session) plus 2 s of
// the kill; after the
// SIGCONT the resumed replica writes nothing (its log, and on Kafka the
// broker's client quotas, polled), the one that took over keeps leading,
// and over the whole run no two replicas write client quotas within one
// interval (their logs); a follower serves the
// leader's sets within one interval plus the replication delay; on NATS
// and on the row "commit-per-poll" (a changed setting: the consumer
// commits after each poll), goodput and dead work from the kill to the
// stop within 5 points of the undisturbed run's. That row kills the leader
// on a step down that says what follows it (its producers hold 0 for the
// interval: the kill that cost most, 1.0-1.2 s of 0 and up to 4.4 points
// of goodput before the lease plan), and asserts the producers leave 0
// within 3 intervals (the plan says two). Observed in session 13 (load
// 4.9-11): 11 failover runs within 2.7 points (held 0 for 393-561 ms after
// the kill; 3 with -race), 5 A/A runs within 0.8. On Kafka's default row ("kafka": franz-go's 5 s
// auto-commit) the comparison is logged, not asserted: two deployments
// without failover differ there by 6.9-35 points, the controller blind
// between commits (README, Replicas and failover). On every row, no
// producer's quota sample from the kill to the stop on the safe quota (its
// lease expired); where the 5 points are asserted, unlimited or stop in no
// more of the failover run's samples than the undisturbed run's, within 5
// points. Logged: those samples, and with a version below one they held.
func TestHAFailoverUnderOverload(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("signals")
	}
	bin := buildLagbridge(t)
	cases := map[string]func(tb testing.TB) *overloadBroker{
		"kafka": func(tb testing.TB) *overloadBroker {
			return &overloadBroker{kafka: kafkatest.Bootstrap(tb)}
		},
		// A row about a setting: the consumer commits after each poll
		// (commitPerPoll), where two deployments without failover agree
		// within 2.5 points, so the 5-point check is asserted; its
		// leader is killed on a step down.
		"commit-per-poll": func(tb testing.TB) *overloadBroker {
			return &overloadBroker{kafka: kafkatest.Bootstrap(tb), perPoll: true}
		},
		"nats": func(tb testing.TB) *overloadBroker {
			s := embedded.NATSTest(tb)
			return &overloadBroker{natsURL: s.ClientURL(), js: embedded.Connect(tb, s)}
		},
	}
	// LAGBRIDGE_HA_AA=1 leaves the kill and the pause out of the second
	// deployment too (an A/A run): what two identical deployments differ
	// by, the noise any failover's cost is measured against.
	aa := os.Getenv("LAGBRIDGE_HA_AA") != ""
	second := "failover"
	if aa {
		second = "undisturbed-b"
	}
	for _, name := range []string{"kafka", "commit-per-poll", "nats"} {
		t.Run(name, func(t *testing.T) {
			b := cases[name](t)
			pair := newOverloadPair(2)
			var calm, disturbed *overloadRun
			t.Run("runs", func(t *testing.T) {
				t.Run("undisturbed", func(t *testing.T) {
					t.Parallel()
					calm = runOverload(t, bin, b, pair, false)
				})
				t.Run(second, func(t *testing.T) {
					t.Parallel()
					disturbed = runOverload(t, bin, b, pair, !aa)
				})
			})
			if calm == nil || disturbed == nil {
				t.FailNow()
			}
			gc, dc := calm.goodput(), calm.dead()
			gf, df := disturbed.goodput(), disturbed.dead()
			t.Logf("%s, side by side over [%v, %v): goodput %.1f%% of capacity undisturbed vs %.1f%% %s; dead work %.1f%% vs %.1f%% of consumed; refused %d vs %d",
				name, overloadKill, overloadStop, 100*gc, 100*gf, second, 100*dc, 100*df, calm.refused.Load(), disturbed.refused.Load())
			uc, uf := calm.unlimitedOrStop(), disturbed.unlimitedOrStop()
			t.Logf("%s: unlimited or stop in %.1f%% of the producers' quota samples over [%v, %v) undisturbed, %.1f%% %s", name, 100*uc, overloadKill, overloadStop, 100*uf, second)
			// The 5 points, asserted on NATS (acknowledged message by
			// message: two deployments without failover agree within a
			// few points and failover runs held it) and with a commit
			// after each poll: within 2.5 in 26 of 27 A/A and failover
			// runs at load 4-14 in session 12, then a fresh-clone CI run
			// failed it at 100.0 vs 95.0% goodput (dead work 0 vs 0): a
			// kill on a step down held the producers at 0 until a
			// follower served (1.0-1.2 s, up to 4.4 points in session
			// 13's runs killed there on purpose). With the lease plan
			// (protocol 1.2) they leave 0 after two intervals: 11 runs
			// killed on a step down within 2.7 points, 5 A/A within 0.8
			// (session 13, load 4.9-11). Kafka's default row, logged:
			// behind franz-go's 5 s auto-commit two deployments differ by
			// up to 35 points with no failover at all (the controller
			// between commits; README, Replicas and failover). Where the
			// 5 points are asserted, the producers' allowed rate is not
			// sent to unlimited or stop by the failover: no more often
			// than in the undisturbed run, within 5 points of the samples
			// (0.0% on both sides in every run of these rows in sessions
			// 11-13 but one NATS run before the follower's hold of unused
			// rates, 6.7%, which failed the 5 points too; on the default
			// row a run without failover read 4.7%).
			if (b.kafka == "" || b.perPoll) && uf > uc+0.05 {
				t.Errorf("unlimited or stop in %.1f%% of the samples %s vs %.1f%% undisturbed: the failover sent the producers there", 100*uf, second, 100*uc)
			}
			if math.Abs(gc-gf) > 0.05 || math.Abs(dc-df) > 0.05 {
				if b.kafka == "" || b.perPoll {
					t.Errorf("goodput %.1f%% vs %.1f%%, dead work %.1f%% vs %.1f%%: %s more than 5 points from the run without failover", 100*gc, 100*gf, 100*dc, 100*df, second)
				} else {
					t.Logf("NOT YET: goodput or dead work with failover more than 5 points from the run without (Kafka: not asserted)")
				}
			}
		})
	}
}

// overloadBroker is the broker both runs share.
type overloadBroker struct {
	kafka   string // bootstrap address, or ""
	perPoll bool   // the Kafka consumer commits after each poll (commitPerPoll)
	natsURL string
	js      jetstream.JetStream
}

// overloadRun is what one run measured.
type overloadRun struct {
	start time.Time
	// ok and late count the messages consumed within the deadline and
	// past it, in the measured window.
	ok, late, refused atomic.Int64
	// samples are the producers' quotas, read every 50 ms.
	samples []quotaSample
	// perSecond counts, by second of the run, the messages consumed
	// within the deadline and past it (the trace, LAGBRIDGE_HA_TRACE).
	perSecond [int(overloadEnd/time.Second) + 1][2]atomic.Int64
	// throttled sums, by second of the run, the throttle times (ms) the
	// brokers asked of the Kafka producers' clients (client quotas).
	throttled [int(overloadEnd/time.Second) + 1]atomic.Int64
	startNano atomic.Int64 // start, for the hook
}

// OnBrokerThrottle implements kgo.HookBrokerThrottle: the trace's
// throttle times.
func (r *overloadRun) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	start := r.startNano.Load()
	if start == 0 {
		return
	}
	if sec := int(time.Since(time.Unix(0, start)) / time.Second); sec >= 0 && sec < len(r.throttled) {
		r.throttled[sec].Add(d.Milliseconds())
	}
}

// unlimitedOrStop is the share of quota samples in [overloadKill,
// overloadStop) that were unlimited or stop.
func (r *overloadRun) unlimitedOrStop() float64 {
	n, bad := 0, 0
	for _, s := range r.samples {
		if s.at >= overloadKill && s.at < overloadStop {
			n++
			if math.IsInf(s.q.Rate, 1) || s.q.Signal == producerclient.SignalStop {
				bad++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(bad) / float64(n)
}

// goodput is the share of the consumer's capacity spent on messages
// within their deadline, over the measured window.
func (r *overloadRun) goodput() float64 {
	return float64(r.ok.Load()) / (overloadSlow * (overloadStop - overloadKill).Seconds())
}

// dead is the share of consumed messages that were past their deadline.
func (r *overloadRun) dead() float64 {
	n := r.ok.Load() + r.late.Load()
	if n == 0 {
		return 0
	}
	return float64(r.late.Load()) / float64(n)
}

// consumed counts a message created at created, consumed now.
func (r *overloadRun) consumed(created, now time.Time) {
	if sec := int(now.Sub(r.start) / time.Second); sec >= 0 && sec < len(r.perSecond) {
		late := 0
		if now.Sub(created) > overloadDeadline {
			late = 1
		}
		r.perSecond[sec][late].Add(1)
	}
	if now.Sub(r.start) < overloadKill || now.Sub(r.start) >= overloadStop {
		return
	}
	if now.Sub(created) <= overloadDeadline {
		r.ok.Add(1)
	} else {
		r.late.Add(1)
	}
}

// quotaSample is one reading of a producer's quota, and of the version
// of the set the replica it talks to serves it (0: none answered). The
// quota's own Version numbers a lease's content, per replica; the set's
// version is what the SDK orders by.
type quotaSample struct {
	at       time.Duration // since the run's start
	producer string
	q        producerclient.Quota
	set      uint64
}

// runOverload runs one deployment through the scenario; with failover it
// kills, stops and resumes leaders and checks what the producers and the
// broker saw.
func runOverload(t *testing.T, bin string, b *overloadBroker, pair *overloadPair, failover bool) *overloadRun {
	t.Cleanup(pair.leave)
	topic := unique("hao")
	cluster := "c"
	var brokerYAML string
	if b.kafka != "" {
		createTopic(t, b.kafka, topic, 3, nil)
		brokerYAML = fmt.Sprintf("kafka:\n  - cluster: c\n    brokers: [%q]\n    groups: {include: [%q]}\n    topics: {include: [%q]}\n", b.kafka, topic, topic)
	} else {
		if _, err := b.js.CreateStream(ctxT(t, 10*time.Second), jetstream.StreamConfig{Name: topic, Subjects: []string{topic}}); err != nil {
			t.Fatal(err)
		}
		brokerYAML = fmt.Sprintf("nats:\n  - cluster: c\n    urls: [%q]\n    streams: {include: [%q]}\n    consumers: {include: [%q]}\nquota:\n  natsKV: {cluster: c, bucket: %s}\n", b.natsURL, topic, topic, topic)
	}
	// LAGBRIDGE_HA_NO_CLIENT_QUOTAS=1 leaves the Kafka client quotas
	// out of the policy (on demand, to tell what the lost leader's
	// quotas cost a failover from the rest: README, Replicas and
	// failover).
	noClientQuotas := os.Getenv("LAGBRIDGE_HA_NO_CLIENT_QUOTAS") != ""
	classes := overloadClasses()
	if b.kafka != "" {
		// The replicas killed (and at the end stopped with ha) leave
		// their client quotas on the shared broker: cleared after the
		// processes' cleanups, which run first.
		var ids []string
		for _, c := range classes {
			ids = append(ids, c.id)
		}
		ownClientQuotas(t, b.kafka, ids...)
	}
	var producers strings.Builder
	for _, c := range classes {
		fmt.Fprintf(&producers, "        - {id: %s, criticality: %s}\n", c.id, c.crit)
	}
	policy := fmt.Sprintf("    - name: p\n      match: {topic: %s}\n      maxAge: %s\n      kafkaClientQuota: %v\n      producers:\n%s", topic, overloadDeadline, b.kafka != "" && !noClientQuotas, producers.String())
	if strings.Contains(brokerYAML, "quota:\n") {
		brokerYAML += "  policies:\n" + policy
	} else {
		brokerYAML += "quota:\n  policies:\n" + policy
	}
	// At debug: quotaWrites reads every "kafka client quota set" line,
	// and most are at DEBUG (a move of less than a factor of 2).
	yaml := fmt.Sprintf("interval: %s\nlog: {level: debug, format: json}\nrules: {lagAge: %s}\n%sha:\n  enabled: true\n  name: %s\n  sessionTimeout: %s\n",
		haInterval, overloadDeadline, brokerYAML, unique("hao"), haSession)
	dir := t.TempDir()
	var ps []*haProcess
	var urls []string
	for i := range 3 {
		p := startProcess(t, bin, dir, fmt.Sprintf("p%d", i), yaml)
		ps = append(ps, p)
		urls = append(urls, p.base)
	}
	byID := map[string]*haProcess{}
	for _, p := range ps {
		byID[p.id] = p
	}
	first := byID[waitOneLeader(t, asReplicas(ps), cluster, 60*time.Second)]

	run := &overloadRun{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// The consumer: overloadNormal msg/s, overloadSlow from the drop. Both
	// deployments start theirs at once, so that their auto-commit timers
	// (franz-go's 5 s, started with the client) tick in the same phase of
	// the scenario: where a commit falls around the drop and the end of a
	// drain decides how long the controller is blind, which would
	// otherwise differ at random between the two runs compared.
	pair.meet("consumer")
	limit := rate.NewLimiter(overloadNormal, 1)
	consume := startOverloadConsumer(t, ctx, &wg, b, topic, limit, run)

	// The producers, each failing over across the three replicas' URLs.
	type producer struct {
		id    string
		share float64
		send  func(created time.Time)
		quota func() (producerclient.Quota, bool)
		stats func() producerclient.Stats
	}
	var prods []producer
	for _, c := range classes {
		cfg := producerclient.Config{Producer: c.id, Topics: []string{topic}, Mode: producerclient.Drop, Criticality: c.crit,
			MessageTTL: overloadDeadline, Leases: producerclient.LeaseConfig{URLs: urls, Transport: producerclient.SSE}}
		refused := func(err error) {
			if _, ok := errors.AsType[*producerclient.RejectError](err); ok {
				run.refused.Add(1)
			}
		}
		if b.kafka != "" {
			cl := client(t, b.kafka, append(producerclient.KafkaClientOpts(nil), kgo.WithHooks(run))...)
			p, err := producerclient.NewKafka(cl, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			prods = append(prods, producer{c.id, c.share, func(created time.Time) {
				refused(p.ProduceAsync(ctx, &kgo.Record{Topic: topic, Value: stamp(created), Timestamp: created}, func(_ *kgo.Record, err error) { refused(err) }))
			}, func() (producerclient.Quota, bool) { return p.Quota(topic) }, p.Stats})
			continue
		}
		cfg.NATS.Topic = func(string) string { return topic }
		p, err := producerclient.NewNATS(b.js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		prods = append(prods, producer{c.id, c.share, func(created time.Time) {
			refused(p.PublishAsync(ctx, &natsgo.Msg{Subject: topic, Data: stamp(created), Header: natsgo.Header{}},
				func(_ *natsgo.Msg, _ *jetstream.PubAck, err error) { refused(err) }))
		}, func() (producerclient.Quota, bool) { return p.Quota(topic) }, p.Stats})
	}
	poll(t, 30*time.Second, func() (bool, string) {
		for _, p := range prods {
			if q, ok := p.quota(); !ok || !q.FromLease {
				return false, fmt.Sprintf("%s has no lease yet", p.id)
			}
		}
		return true, ""
	})

	run.start = pair.meet("start") // one scenario clock for both deployments
	run.startNano.Store(run.start.UnixNano())
	since := func() time.Duration { return time.Since(run.start) }
	for _, p := range prods {
		wg.Go(func() { // offer this producer's share, open loop, refused messages dropped
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			sent := 0
			for ctx.Err() == nil && since() < overloadEnd {
				due := int(since().Seconds() * overloadOffer * p.share)
				for ; sent < due; sent++ {
					p.send(time.Now())
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
	}
	var mu sync.Mutex
	wg.Go(func() { // the producers' quotas, every 50 ms
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil && since() < overloadEnd {
			for _, p := range prods {
				at := since() // when q was read, not after the HTTP call below
				q, _ := p.quota()
				set, _ := servedVersion(p.stats().LeaseURL, p.id)
				mu.Lock()
				run.samples = append(run.samples, quotaSample{at, p.id, q, set})
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	if dir := os.Getenv("LAGBRIDGE_HA_TRACE"); dir != "" {
		label := topic
		if failover {
			label += "-failover"
		}
		traceOverload(t, ctx, &wg, cancel, filepath.Join(dir, label), ps, run)
	}
	var lags []time.Duration
	if !failover {
		wg.Go(func() { lags = followerLag(ctx, ps, first, classes[0].id, run.start.Add(overloadEnd)) })
	}
	var quotaLog []quotaChange
	if b.kafka != "" {
		wg.Go(func() { quotaLog = watchClientQuotas(ctx, b.kafka, classes, run.start.Add(overloadEnd)) })
	}
	at := func(d time.Duration) { // waits until d into the run
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(run.start.Add(d))):
		}
	}
	at(overloadDrop)
	limit.SetLimit(overloadSlow)

	var second, third *haProcess
	var killed, stopped, resumed time.Duration
	var tookOver time.Time
	if failover {
		at(overloadKill)
		if now := byID[waitOneLeader(t, asReplicas(ps), cluster, time.Second)]; now != first {
			t.Logf("leadership moved from %s to %s before the kill", first.id, now.id)
			first = now
		}
		var paused string
		if b.perPoll {
			// The kill that cost most lands on a step down (the
			// leader's producers hold a rate of 0 made for one
			// interval, with work queued for about that long): this
			// row kills there, to show what the lease plan does.
			var unplanned int
			paused, unplanned = awaitPause(ctx, t, first, cluster, topic, prods[0].quota, 8*time.Second)
			if paused != "" {
				t.Logf("the kill lands on a step down with a plan (%d seen without one before): %s", unplanned, paused)
			} else {
				t.Logf("no step down with a plan within 8s (%d without one): the kill lands where it falls", unplanned)
			}
			// A step down rightly has no plan when the backlog projected
			// one interval on keeps the law at 0 (awaitPause); one such
			// is the world (a7f2a12's CI run saw one in 8 s), three in a
			// row with none planned say plans are not being made.
			if paused == "" && unplanned >= 3 {
				t.Errorf("%d step downs within 8s, none with a plan (then): what follows a pause is not said", unplanned)
			}
		}
		killed = since()
		if err := first.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if paused != "" {
			defer func() { checkPauseHeld(t, run.samples, prods[0].id, killed) }()
		}
		second = byID[waitOneLeader(t, asReplicas(ps, first), cluster, overloadStop-overloadKill)]
		tookOver = time.Now()
		took := since() - killed
		t.Logf("SIGKILL of leader %s at %v: %s leads after %v (session %v, interval %v)", first.id, killed, second.id, took.Round(time.Millisecond), haSession, haInterval)
		if took > haSession+haInterval+time.Second {
			t.Errorf("new leader after %v, want within session %v + interval %v (+1s of polling and scheduling)", took, haSession, haInterval)
		}
		at(overloadStop)
		stopped = since()
		if err := second.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		third = byID[waitOneLeader(t, asReplicas(ps, first, second), cluster, overloadCont-overloadStop)]
		t.Logf("SIGSTOP of leader %s at %v: %s leads after %v", second.id, stopped, third.id, (since() - stopped).Round(time.Millisecond))
		at(overloadCont)
		resumed = since()
		if err := second.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		for since() < resumed+8*haInterval {
			ls, all, _ := roles(t, asReplicas(ps, first), cluster)
			if len(ls) != 1 || ls[0] != third.id {
				t.Fatalf("after SIGCONT of %s, leaders %v, want only %s:\n%s", second.id, ls, third.id, all)
			}
			time.Sleep(haInterval / 2) // sampling the replicas' roles over time
		}
	}
	at(overloadEnd)
	cancel()
	wg.Wait()
	consume()
	for _, p := range prods {
		s := p.stats()
		if s.LeaseExpired != 0 {
			t.Logf("NOT YET: %s: %d leases expired (the safe quota applied)", p.id, s.LeaseExpired)
		}
		// A plan takes effect only when no newer lease came by its time.
		t.Logf("%s: %d lease plans took effect", p.id, s.LeasePlans)
	}
	checkQuotaSamples(t, run.samples, killed, failover)
	if !failover {
		slices.Sort(lags)
		if len(lags) == 0 {
			t.Fatal("no set of the leader's was seen on the followers")
		}
		bound := haInterval + time.Second
		over := len(lags) - sort.Search(len(lags), func(i int) bool { return lags[i] > bound })
		p95 := lags[(len(lags)*95)/100]
		t.Logf("a set the leader serves is served by the followers after: median %v, p95 %v, max %v; %d of %d over %v (interval %v)",
			lags[len(lags)/2].Round(time.Millisecond), p95.Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond),
			over, len(lags), bound, haInterval)
		// The replication delay is what is measured (a produce and a fetch
		// of the lease topic, or a KV put and its watch), and the bound is
		// on the 95th percentile: the sampler polls six processes and a
		// broker on two cores beside the race detector, and single samples
		// there reached 2.7 s in a fresh-clone CI run (median 120 ms) and
		// up to 4.7 s on a shared machine: the tail follows the machine's
		// stalls, the bulk the replication.
		if p95 > bound {
			t.Errorf("a follower served the leader's sets %v after the leader at the 95th percentile, want within one interval (%v) plus a replication delay of at most 1s", p95, haInterval)
		}
		return run
	}
	checkResumedWroteNothing(t, second, third, run.start.Add(stopped), run.start.Add(resumed), quotaLog)
	if b.kafka != "" && !noClientQuotas {
		checkClientQuotaWriters(t, ps, first, run.start.Add(killed), tookOver, quotaLog)
	}
	return run
}

// awaitPause waits, for at most limit, until leader's decision on topic is
// a step down (rate 0) that says what follows it (its plan, Then) and the
// producer holds a rate of 0 (held), and returns what the leader decided,
// or "" at limit, with the number of step downs it saw without a plan
// before. (Not every step down has one: when the backlog projected one
// interval on still holds the budget's wait at the rate just seen, the law
// stays at 0 and nothing is planned; the producers then rightly wait.)
func awaitPause(ctx context.Context, t testing.TB, leader *haProcess, cluster, topic string, held func() (producerclient.Quota, bool), limit time.Duration) (string, int) {
	end := time.Now().Add(limit)
	seen := map[time.Time]bool{}
	for ctx.Err() == nil && time.Now().Before(end) {
		if q, ok := held(); ok && q.FromLease && q.Rate == 0 {
			d, ok := decisionOf(t, leader.base, cluster, topic, topic) // the group is named as its topic
			if ok && d.Rule == quota.RuleStepDown && d.Rate == 0 {
				if d.Then != nil {
					return fmt.Sprintf("%s: %s", d.Rule, d.Reason), len(seen)
				}
				seen[d.At] = true
			}
		}
		time.Sleep(10 * time.Millisecond) // polling the leader and the producer
	}
	return "", len(seen)
}

// checkPauseHeld: a leader killed on a step down (producer held a rate of
// 0) leaves the producer at 0 no longer than the pause's plan says (the
// lease's Then, two intervals after the step down was decided) plus a
// sample: without the plan it stayed there until a follower served its own
// sets, a sixth of the session (1 s) after the leader's last record.
// Bound: three intervals, on the last sample that still read 0: the
// producer left 0 between it and the first that did not, and a sampler
// the machine stalled (one read 779 ms against the 750 ms bound on a
// loaded machine) delays the latter, never the former.
func checkPauseHeld(t *testing.T, samples []quotaSample, producer string, killed time.Duration) {
	t.Helper()
	lastZero := killed
	for _, s := range samples {
		if s.producer != producer || s.at < killed {
			continue
		}
		if s.q.Rate == 0 {
			lastZero = s.at
			continue
		}
		held := lastZero - killed
		t.Logf("killed on a step down: %s read a rate of 0 until %v after the kill, not at %v (%s)",
			producer, held.Round(time.Millisecond), (s.at - killed).Round(time.Millisecond), s.q.Reason)
		if held > 3*haInterval {
			t.Errorf("killed on a step down: %s held the lost leader's rate of 0 for %v after the kill, want within 3 intervals (%v): the lease's plan", producer, held, 3*haInterval)
		}
		return
	}
	t.Errorf("killed on a step down: %s never left the rate of 0", producer)
}

// checkClientQuotaWriters: over the whole run no two replicas wrote
// client quotas within one interval of each other (their logs), and
// after the SIGKILL of first a follower standing in wrote them (the
// broker showed one of them) before the new leader took over at
// tookOver, within the silence after which followers stand in plus 2 s
// of publishing and scheduling.
func checkClientQuotaWriters(t *testing.T, ps []*haProcess, first *haProcess, killed, tookOver time.Time, seen []quotaChange) {
	t.Helper()
	type write struct {
		logLine
		by string
	}
	var all []write
	for _, p := range ps {
		for _, l := range quotaWrites(t, p) {
			all = append(all, write{l, p.id})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	for i := 1; i < len(all); i++ {
		if all[i].by != all[i-1].by && all[i].Time.Sub(all[i-1].Time) < haInterval {
			t.Errorf("%s at %s and %s at %s wrote client quotas within one interval", all[i-1].by, all[i-1].Time.Format(time.StampMilli),
				all[i].by, all[i].Time.Format(time.StampMilli))
		}
	}
	silence := max(haSession/3, 4*haInterval) // internal/app's replica.Config.Silence
	var stand *write
	for i := range all {
		if w := &all[i]; w.by != first.id && w.Time.After(killed) {
			stand = w
			break
		}
	}
	if stand == nil || !stand.Time.Before(tookOver) {
		t.Errorf("SIGKILL of %s at %s: no follower wrote client quotas before the new leader took over at %s", first.id, killed.Format(time.StampMilli), tookOver.Format(time.StampMilli))
		return
	}
	after := stand.Time.Sub(killed)
	var standWrites []logLine
	for _, w := range all {
		if w.by == stand.by && w.Time.After(killed) && w.Time.Before(tookOver) {
			standWrites = append(standWrites, w.logLine)
		}
	}
	shown := shownByBroker(standWrites, seen, tookOver)
	t.Logf("SIGKILL of %s: %s, standing in, wrote client quotas %v later (the new leader took over after %v); the broker showed them: %v",
		first.id, stand.by, after.Round(time.Millisecond), tookOver.Sub(killed).Round(time.Millisecond), shown)
	if after > silence+2*time.Second {
		t.Errorf("a stand-in wrote client quotas %v after the kill, want within the silence %v + 2s", after, silence)
	}
	if !shown {
		t.Errorf("the broker never showed %s = %v, which stand-in %s wrote at %s", stand.ClientID, stand.Rate, stand.by, stand.Time.Format(time.StampMilli))
	}
}

// shownByBroker reports whether the broker, sampled every 100 ms (seen:
// each change of a client-id's value), showed any of writes before until:
// a value that the writer's next write replaced within a sample is never
// seen, and one equal to the value already in force makes no change, so
// the value in force when a write was made counts too.
func shownByBroker(writes []logLine, seen []quotaChange, until time.Time) bool {
	for _, w := range writes {
		var inForce *quotaChange
		for i := range seen {
			c := &seen[i]
			if c.clientID != w.ClientID || !c.at.Before(until) {
				continue
			}
			if !c.at.After(w.Time) {
				inForce = c
				continue
			}
			if c.value == w.Rate {
				return true
			}
		}
		if inForce != nil && inForce.value == w.Rate {
			return true
		}
	}
	return false
}

// checkQuotaSamples checks that the set versions served to each producer
// never went back before the SIGSTOP, and logs, from the kill to the stop
// and from the stop on, the samples on the safe quota, unlimited, and
// served a set version below one served before; with a failover, when the
// first set newer than the lost leader's (a version above all before the
// kill: a follower standing in, or the new leader) was served to them.
func checkQuotaSamples(t *testing.T, samples []quotaSample, killed time.Duration, failover bool) {
	t.Helper()
	last := map[string]uint64{}
	var before uint64
	arrived := time.Duration(-1)
	type counts struct{ n, safe, rewound, unlimited int }
	var phase [2]counts // [kill, stop), [stop, end)
	for _, s := range samples {
		q := s.q
		back := s.set != 0 && s.set < last[s.producer]
		if back && s.at < overloadStop {
			t.Errorf("%s at %v: served set version %d after %d", s.producer, s.at, s.set, last[s.producer])
		}
		if s.at >= overloadKill {
			c := &phase[0]
			if s.at >= overloadStop {
				c = &phase[1]
			}
			c.n++
			switch {
			case !q.FromLease:
				c.safe++
			case back:
				c.rewound++
			case math.IsInf(q.Rate, 1):
				c.unlimited++
			}
		}
		last[s.producer] = max(last[s.producer], s.set)
		if failover && s.at < killed {
			before = max(before, s.set)
		}
		if failover && s.at >= killed && arrived < 0 && s.set > before {
			arrived = s.at - killed
		}
	}
	for i, name := range []string{"from the kill to the stop", "from the stop on"} {
		c := phase[i]
		t.Logf("quota samples %s: %d; on the safe quota %d, served a set version below one served before %d, unlimited %d", name, c.n, c.safe, c.rewound, c.unlimited)
	}
	// The safe quota is what a producer falls back to once its lease
	// expired: the overload in force, some replica always serves sets.
	if c := phase[0]; c.safe > 0 {
		t.Errorf("%d of %d quota samples from the kill to the stop on the safe quota: a producer's lease expired", c.safe, c.n)
	}
	if !failover {
		return
	}
	// A follower serves its own sets once the leader's decisions went
	// unrenewed for a sixth of the session (at least four intervals:
	// internal/app's replica.Config.Serve), seen at its next check (an
	// interval); the producers' watches get its sets at once.
	standIn := max(haSession/6, 4*haInterval)
	t.Logf("SIGKILL of the leader: the producers were served sets newer than the lost leader's %v later (a follower standing in after %v, then the new leader; session %v, interval %v)", arrived.Round(time.Millisecond), standIn, haSession, haInterval)
	if arrived < 0 || arrived > standIn+2*haInterval+time.Second {
		t.Errorf("sets newer than the lost leader's served after %v, want within %v (a follower standing in) + 2 intervals %v (+1s of replication, polling and scheduling)", arrived, standIn, haInterval)
	}
}

// followerLag polls the three replicas' sets of producer every 20 ms
// until the deadline and returns, for each new version the leader
// serves, how much later every follower served it.
func followerLag(ctx context.Context, ps []*haProcess, lead *haProcess, producer string, until time.Time) []time.Duration {
	type seen struct {
		at        time.Time
		followers map[string]bool
	}
	versions := map[uint64]*seen{}
	var out []time.Duration
	for ctx.Err() == nil && time.Now().Before(until) {
		for _, p := range ps {
			v, ok := servedVersion(p.base, producer)
			now := time.Now()
			if !ok {
				continue
			}
			if p == lead {
				if versions[v] == nil {
					versions[v] = &seen{at: now, followers: map[string]bool{}}
				}
				continue
			}
			if s := versions[v]; s != nil && !s.followers[p.id] {
				s.followers[p.id] = true
				out = append(out, now.Sub(s.at))
			}
		}
		time.Sleep(20 * time.Millisecond) // sampling the replicas
	}
	return out
}

// probe asks the replicas; a paused one is given up after a second.
var probe = &http.Client{Timeout: time.Second}

// servedVersion is the version of the set a replica serves producer now.
func servedVersion(base, producer string) (uint64, bool) {
	resp, err := probe.Get(base + quotaproto.PathWatch + "?producer=" + producer + "&timeout=0s")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var set quotaproto.LeaseSet
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&set) != nil {
		return 0, false
	}
	return set.Version, true
}

// quotaChange is a client quota value the broker showed, first seen at.
type quotaChange struct {
	at       time.Time
	clientID string
	value    float64
}

// watchClientQuotas polls the broker's producer_byte_rate client quotas
// of the overload's producers every 100 ms until the deadline and returns
// every value it saw change.
func watchClientQuotas(ctx context.Context, addr string, classes []overloadClass, until time.Time) []quotaChange {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil
	}
	defer cl.Close()
	cq := publish.NewClientQuotas(cl, nil)
	last := map[string]float64{}
	var out []quotaChange
	for ctx.Err() == nil && time.Now().Before(until) {
		cur, err := cq.Current(ctx)
		if err == nil {
			for _, c := range classes {
				if v, ok := cur[c.id]; ok && v != last[c.id] {
					last[c.id] = v
					out = append(out, quotaChange{time.Now(), c.id, v})
				}
			}
		}
		time.Sleep(100 * time.Millisecond) // sampling the broker
	}
	return out
}

// logLine is one JSON line of a daemon's log.
type logLine struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	ClientID string    `json:"client_id"`
	Rate     float64   `json:"producer_byte_rate"`
	Issued   time.Time `json:"issued"`
	// Logged is the line's own time (Time is set to Issued by quotaWrites).
	Logged time.Time `json:"-"`
}

// quotaWrites returns the client quotas p's log says it set, each at the
// time its write was issued (Time; the line is logged when the answer is
// read, Logged: a write issued just before a SIGSTOP is logged after the
// SIGCONT).
func quotaWrites(tb testing.TB, p *haProcess) []logLine {
	tb.Helper()
	f, err := os.Open(p.logs)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "kafka client quota set" {
			if l.Issued.IsZero() {
				tb.Fatalf("%s: a client quota write without the time it was issued: %s", p.id, sc.Text())
			}
			l.Logged, l.Time = l.Time, l.Issued
			out = append(out, l)
		}
	}
	return out
}

// checkResumedWroteNothing: the replica paused at paused and resumed at
// resumed issues no client quota write from then on; on Kafka, every
// client quota the broker showed after it resumed is one the replica
// leading then wrote (or a write in flight across the pause, which the
// leader's value follows), and no two replicas wrote client quotas within
// one interval of each other.
func checkResumedWroteNothing(t *testing.T, resumedP, leader *haProcess, paused, resumed time.Time, seen []quotaChange) {
	t.Helper()
	mine := quotaWrites(t, resumedP)
	for _, l := range mine {
		if !l.Time.Before(resumed) {
			t.Errorf("%s, resumed at %s, set client quota %s = %v at %s", resumedP.id, resumed.Format(time.StampMilli), l.ClientID, l.Rate, l.Time.Format(time.StampMilli))
		}
	}
	theirs := quotaWrites(t, leader)
	for i, c := range seen {
		if c.at.Before(resumed) {
			continue
		}
		same := func(l logLine) bool { return l.ClientID == c.clientID && l.Rate == c.value }
		if last := lastWrite(theirs, c.clientID, c.at); last != nil && same(*last) ||
			slices.ContainsFunc(theirs, func(l logLine) bool { return same(l) && l.Time.Before(c.at) && c.at.Sub(l.Time) < time.Second }) {
			// The leader's last write before the broker showed it, or
			// one within the second the sampler may lag behind (a
			// write of the leader's issued after it, not yet applied).
			continue
		}
		// Kafka does not fence AlterClientQuotas: a write the paused
		// replica issued under its lease just before SIGSTOP (franz-go
		// had it queued, not yet on the socket) can land after SIGCONT.
		// It is no write made after resuming as long as it was issued
		// before the pause and answered after it, and the leader's value
		// stands again within two intervals and a second (its next
		// cycle reads the broker and sets what it wants), or the leader's
		// own value is within the 2% a write leaves alone.
		inFlight := func(l logLine) bool { return same(l) && l.Time.Before(paused) && !l.Logged.Before(resumed) }
		if slices.ContainsFunc(mine, inFlight) && restored(c, seen[i+1:], theirs, paused, 2*haInterval+time.Second) {
			t.Logf("the broker showed %s = %v at %s, a write %s issued before its pause, and then the leader's value again", c.clientID, c.value, c.at.Format(time.StampMilli), resumedP.id)
			continue
		}
		t.Errorf("the broker showed %s = %v at %s, which leader %s never set", c.clientID, c.value, c.at.Format(time.StampMilli), leader.id)
	}
	type write struct {
		at time.Time
		by string
	}
	var all []write
	for _, l := range mine {
		all = append(all, write{l.Time, resumedP.id})
	}
	for _, l := range theirs {
		all = append(all, write{l.Time, leader.id})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	for i := 1; i < len(all); i++ {
		if all[i].by != all[i-1].by && all[i].at.Sub(all[i-1].at) < haInterval {
			t.Errorf("%s and %s wrote client quotas %v apart, within one interval", all[i-1].by, all[i].by, all[i].at.Sub(all[i-1].at))
		}
	}
	t.Logf("client quota writes: %s %d (none after resuming), %s %d; the broker showed %d changes", resumedP.id, len(mine), leader.id, len(theirs), len(seen))
}

// restored: after c (a value the leader did not write), the broker's next
// value for that client-id, within within, is one the leader issued after
// paused, or the leader's last write for it before c was within 2% of c's
// value (a write the leader then leaves alone).
func restored(c quotaChange, later []quotaChange, leaderWrites []logLine, paused time.Time, within time.Duration) bool {
	for _, n := range later {
		if n.clientID != c.clientID {
			continue
		}
		if n.at.Sub(c.at) <= within && slices.ContainsFunc(leaderWrites, func(l logLine) bool {
			return l.ClientID == n.clientID && l.Rate == n.value && l.Time.After(paused)
		}) {
			return true
		}
		break
	}
	last := lastWrite(leaderWrites, c.clientID, c.at)
	return last != nil && math.Abs(last.Rate-c.value) <= 0.02*last.Rate
}

// lastWrite is the last of writes for clientID issued before at, or nil.
// (Marked values recur, so a value the broker shows is the leader's only
// if it is the one the leader wrote last.)
func lastWrite(writes []logLine, clientID string, at time.Time) *logLine {
	var last *logLine
	for i := range writes {
		if l := &writes[i]; l.ClientID == clientID && l.Time.Before(at) {
			last = l
		}
	}
	return last
}

// stamp encodes a message's creation time.
func stamp(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())) }

// unstamp decodes stamp; false for a value that is not one.
func unstamp(b []byte) (time.Time, bool) {
	if len(b) != 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))), true
}

// commitPerPoll: LAGBRIDGE_HA_COMMIT=poll, the Kafka consumer of
// TestHAFailoverUnderOverload's default row ("kafka") commits after each
// poll (at most 10 records, asynchronously) instead of franz-go's default
// 5 s auto-commit, as it always does in the row "commit-per-poll": a row
// of its own (a changed setting), where the controller sees the
// consumer's position within a poll rather than up to 5 s late.
func commitPerPoll() bool { return os.Getenv("LAGBRIDGE_HA_COMMIT") == "poll" }

// startOverloadConsumer consumes topic (a Kafka group, with the library's
// default autocommit or, commitPerPoll, a commit after each poll, or a
// NATS durable, acking each message) at limit's pace, counting each
// message in run. The returned func waits for it.
func startOverloadConsumer(t *testing.T, ctx context.Context, wg *sync.WaitGroup, b *overloadBroker, topic string, limit *rate.Limiter, run *overloadRun) func() {
	t.Helper()
	handle := func(data []byte) bool {
		if limit.Wait(ctx) != nil {
			return false
		}
		if created, ok := unstamp(data); ok && !run.start.IsZero() {
			run.consumed(created, time.Now())
		}
		return true
	}
	done := make(chan struct{})
	if b.kafka != "" {
		opts := []kgo.Opt{kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic)}
		perPoll := b.perPoll || commitPerPoll()
		if perPoll {
			opts = append(opts, kgo.DisableAutoCommit())
		}
		cl := client(t, b.kafka, opts...)
		wg.Go(func() {
			defer close(done)
			for ctx.Err() == nil {
				for _, r := range cl.PollRecords(ctx, 10).Records() {
					if !handle(r.Value) {
						return
					}
				}
				if perPoll {
					// Asynchronous, as Java's commitAsync() after each
					// poll: the consumer's pace never waits for the broker;
					// a failed commit is carried by the next.
					cl.CommitOffsets(ctx, cl.UncommittedOffsets(), nil)
				}
			}
		})
		return func() { <-done }
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctxT(t, 10*time.Second), topic, jetstream.ConsumerConfig{Durable: topic, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		defer close(done)
		for ctx.Err() == nil {
			batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				continue
			}
			for m := range batch.Messages() {
				if !handle(m.Data()) {
					return
				}
				_ = m.Ack()
			}
		}
	})
	return func() { <-done }
}

// traceOverload writes, for LAGBRIDGE_HA_TRACE, what one run's deployment
// did under prefix: every decision each replica served on /v1/quotas
// (polled every 100 ms, each new one once: prefix-decisions.jsonl), and
// at the end the replicas' logs (prefix-pN.log), the producers' quota
// samples (prefix-samples.jsonl) and the messages consumed within the
// deadline and past it, and the Kafka producers' throttle times in ms,
// per second (prefix-consumed.txt).
func traceOverload(t *testing.T, ctx context.Context, wg *sync.WaitGroup, cancel func(), prefix string, ps []*haProcess, run *overloadRun) {
	if err := os.MkdirAll(filepath.Dir(prefix), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(prefix + "-decisions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(f)
	var polls sync.WaitGroup
	for _, p := range ps {
		polls.Go(func() {
			seen := map[string]bool{}
			for ctx.Err() == nil && time.Since(run.start) < overloadEnd {
				var body struct {
					Targets []json.RawMessage `json:"targets"`
				}
				if resp, err := probe.Get(p.base + "/v1/quotas"); err == nil {
					_ = json.NewDecoder(resp.Body).Decode(&body)
					resp.Body.Close()
				}
				for _, d := range body.Targets {
					var at struct {
						At string `json:"at"`
					}
					if json.Unmarshal(d, &at) != nil || seen[at.At] {
						continue
					}
					seen[at.At] = true
					mu.Lock()
					_ = enc.Encode(map[string]any{"p": p.id, "t": time.Since(run.start).Seconds(), "d": d})
					mu.Unlock()
				}
				time.Sleep(100 * time.Millisecond) // sampling the replicas
			}
		})
	}
	wg.Go(func() { polls.Wait(); f.Close() })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, p := range ps {
			if b, err := os.ReadFile(p.logs); err == nil {
				_ = os.WriteFile(fmt.Sprintf("%s-%s.log", prefix, p.id), b, 0o644)
			}
		}
		var sb strings.Builder
		for _, s := range run.samples {
			b, _ := json.Marshal(map[string]any{"t": s.at.Seconds(), "producer": s.producer, "rate": fmt.Sprint(s.q.Rate), "signal": s.q.Signal, "set": s.set, "lease": s.q.FromLease,
				"version": s.q.Version, "planned": strings.HasPrefix(s.q.Reason, "planned from")})
			sb.Write(append(b, '\n'))
		}
		_ = os.WriteFile(prefix+"-samples.jsonl", []byte(sb.String()), 0o644)
		sb.Reset()
		for sec := range run.perSecond {
			fmt.Fprintf(&sb, "%d %d %d %d\n", sec, run.perSecond[sec][0].Load(), run.perSecond[sec][1].Load(), run.throttled[sec].Load())
		}
		_ = os.WriteFile(prefix+"-consumed.txt", []byte(sb.String()), 0o644)
	})
}

// overloadPair lines up the deployments of one side-by-side run at named
// stages, so that both play the scenario on one clock against consumers
// started together: what differs between them is then lagbridge (and the
// failover), not the phase of the world.
type overloadPair struct {
	mu      sync.Mutex
	parties int
	stages  map[string]*pairStage
}

type pairStage struct {
	arrived int
	last    time.Time
	done    chan struct{}
}

func newOverloadPair(parties int) *overloadPair {
	return &overloadPair{parties: parties, stages: map[string]*pairStage{}}
}

// meet waits until every party still running reached stage and returns
// when the last one did.
func (p *overloadPair) meet(stage string) time.Time {
	p.mu.Lock()
	s := p.stages[stage]
	if s == nil {
		s = &pairStage{done: make(chan struct{})}
		p.stages[stage] = s
	}
	s.arrived++
	s.last = time.Now()
	p.release()
	p.mu.Unlock()
	<-s.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.last
}

// leave takes a party out (its run ended, passed or failed): the others
// no longer wait for it.
func (p *overloadPair) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parties--
	p.release()
}

// release opens every stage that all parties still running reached.
func (p *overloadPair) release() {
	for _, s := range p.stages {
		if s.arrived >= p.parties {
			select {
			case <-s.done:
			default:
				close(s.done)
			}
		}
	}
}
