package publish

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// Publisher receives every producer's lease sets after each change. It runs
// on a publishing goroutine of its own (internal/engine: one per publisher,
// so a slow one holds no other), never on an observation loop.
type Publisher interface {
	Publish(ctx context.Context, s Snapshot) error
	Name() string
}

// Snapshot is what publishers see: every producer's lease set, every lease,
// and the combined decision and policy of every topic.
type Snapshot struct {
	Sets     []quotaproto.LeaseSet
	Leases   []quota.Lease
	Topics   map[quota.Topic]quota.TopicDecision
	Policies *quota.Policies
}

// KVPublisher publishes every lease set to a NATS KV bucket. The bucket is
// created (or adopted) at the first publish, so the daemon can start while
// NATS is still unreachable.
type KVPublisher struct {
	JS     jetstream.JetStream
	Bucket string
	// Deployment names this deployment (ha.name): it owns the bucket's
	// keys that name it (see KV). Default DefaultDeployment.
	Deployment string
	// Log receives the keys left to other deployments; nil: discarded.
	Log *slog.Logger
	kv  *KV
}

// Name implements Publisher.
func (p *KVPublisher) Name() string { return "nats-kv" }

// Reset forgets what was written: the next Publish adopts the bucket's
// keys again and rewrites every lease (another replica wrote meanwhile).
// Called on the publishing goroutine only.
func (p *KVPublisher) Reset() { p.kv = nil }

// Publish implements Publisher.
func (p *KVPublisher) Publish(ctx context.Context, s Snapshot) error {
	if p.kv == nil {
		kv, err := NewKV(ctx, p.JS, KVConfig{Bucket: p.Bucket, Deployment: p.Deployment, Log: p.Log})
		if err != nil {
			return err
		}
		p.kv = kv
	}
	_, _, err := p.kv.Publish(ctx, s.Sets)
	return err
}

// ClientQuotaPublisher keeps one Kafka cluster's producer_byte_rate client
// quotas in line with the leases of policies that opted in
// (kafkaClientQuota: true): for each producer the policy lists, the sum of
// its finite, enforced grants on the cluster's topics, each times the bytes
// the broker charges per record on that topic, on the broker that leads
// the most of it (Kafka applies the value on each broker). A producer
// whose grants are all unlimited gets Ceiling, which throttles no one but
// makes the broker measure its rate before a cut; one with unlimited
// grants too is held as rates says. A producer no longer listed, or whose
// topics are gone, loses its quota.
//
// The value stored is steered (see [Steering]): it falls by at
// most what keeps Kafka's throttle of the producer within Interval, so a
// producer is slowed, never held for minutes, and a 0 msg/s grant lowers
// the quota step by step. Publish is called by the engine's publishing
// goroutine only; Clear after it stopped.
type ClientQuotaPublisher struct {
	Cluster string
	Quotas  *ClientQuotas
	// BytesPerMessage, when positive, is the bytes per record for every
	// topic (quota.kafkaClientQuotas.bytesPerMessage, an override). Zero:
	// measured per topic by Sizes (from the first publish on, see
	// RecordSizes), and DefaultBytesPerMessage until measured.
	BytesPerMessage float64
	// Sizes measures the bytes per record per topic; nil: not measured.
	Sizes *RecordSizes
	// Interval is the observation interval: the longest throttle a
	// stored quota may cause. Zero: no steering.
	Interval time.Duration
	// Now is the steering's clock; nil: time.Now.
	Now func() time.Time
	// Log receives the warning about quotas producers do not heed; nil:
	// none.
	Log *slog.Logger
	// Unheeded, when set, is the gauge
	// lagbridge_kafka_client_quota_unheeded{cluster,topic}.
	Unheeded *prometheus.GaugeVec

	steer   Steering
	leaders Leaders                   // the last partition leaders read; nil: none yet
	window  bool                      // the broker's quota window was read
	over    map[quota.Topic]int       // publishes in a row over twice the allowed rate
	overAt  map[quota.Topic][]rateAt  // the topic's rate at them, within the window
	since   map[quota.Topic]time.Time // the first of them
	warned  map[quota.Topic]bool      // warned in this episode
}

// DefaultBytesPerMessage is the bytes per record assumed for a topic whose
// size is neither configured nor measured yet: measurement starts with
// the log's tail at the topic's first reading ([RecordSizes]), so only a
// topic whose tail could not be read, or that holds fewer than
// MinRecords records there, gets it.
const DefaultBytesPerMessage = 1024

// UnheededCycles is how many publishes in a row a topic must receive more
// than twice its allowed rate, while lagbridge holds client quotas for its
// listed producers, before the publisher warns that producers do not
// heed them (they do not produce with the listed client.ids, or unlisted
// producers write to the topic).
const UnheededCycles = 20

// UnheededFall is how much a topic's rate must have fallen, from the first
// quarter of checkHeeded's window to its last, for its producers to be
// taken to heed their client quotas while it is still over twice its
// allowed rate: the steering cuts a producer that heeds them by 1.6-3% a
// second (TestSteeringBoundsThrottle), about 20-35% between the quarters
// of UnheededSpan; one that does not keeps its rate.
const UnheededFall = 0.1

// UnheededSpan is the least time checkHeeded watches a topic before it
// warns, whatever the interval and however many publishes a second come
// (the engine publishes after each cluster's cycle and on reports: twice
// a second with a Kafka and a NATS cluster at a 1 s interval).
const UnheededSpan = 20 * time.Second

// rateAt is a topic's produce rate as read at a publish.
type rateAt struct {
	at   time.Time
	rate float64
}

// Name implements Publisher.
func (p *ClientQuotaPublisher) Name() string { return "kafka-client-quotas/" + p.Cluster }

// Reset forgets the steering's memory of the quotas it stored and of
// what producers sent: another replica led meanwhile, so the quotas on the
// broker and the rates they let through are no longer the ones it
// remembers, and the next Publish steers from what producers send now
// (and logs each client-id's first write at INFO again).
// Called on the publishing goroutine only.
func (p *ClientQuotaPublisher) Reset() {
	p.steer = Steering{Window: p.steer.Window}
	if p.Quotas != nil {
		p.Quotas.forgetLogged()
	}
}

// Publish implements Publisher: it measures record sizes (a failed
// measurement keeps the last figures), then steers and applies the
// quotas.
func (p *ClientQuotaPublisher) Publish(ctx context.Context, s Snapshot) error {
	if !p.window {
		if w, err := p.Quotas.Window(ctx); err == nil {
			p.steer.Window, p.window = w, true
		}
	}
	p.steer.Hold = p.Interval
	if p.Sizes != nil && p.BytesPerMessage <= 0 {
		if err := p.Sizes.Measure(ctx, p.topics(s)); err != nil && p.Log != nil {
			p.Log.Debug("measuring record sizes", "cluster", p.Cluster, "err", err)
		}
	}
	if topics := p.topics(s); len(topics) > 0 {
		if ls, err := p.Quotas.Leaders(ctx, topics); err == nil {
			p.leaders = ls
		} else if p.Log != nil {
			p.Log.Debug("reading partition leaders", "cluster", p.Cluster, "err", err)
		}
	}
	want, sent := p.rates(s)
	p.checkHeeded(s)
	_, err := p.Quotas.Apply(ctx, p.steer.NextBounded(p.now(), want, sent, p.holds(s), p.busiest(s)))
	if err != nil {
		return fmt.Errorf("cluster %s: %w", p.Cluster, err)
	}
	return nil
}

// now reads the publisher's clock: Now, or time.Now.
func (p *ClientQuotaPublisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Clear removes every client quota lagbridge set on the cluster: the
// daemon calls it on a graceful stop, after the last Publish, so that no
// producer stays throttled by a daemon that no longer runs.
func (p *ClientQuotaPublisher) Clear(ctx context.Context) error {
	res, err := p.Quotas.Apply(ctx, nil)
	if err != nil {
		return fmt.Errorf("cluster %s: clearing client quotas: %w", p.Cluster, err)
	}
	if p.Log != nil && len(res.Removed) > 0 {
		p.Log.Info("cleared client quotas on shutdown", "cluster", p.Cluster, "client_ids", res.Removed)
	}
	return nil
}

// ClientQuotaSweeper clears, once, the client quotas an earlier run of
// lagbridge left on a Kafka cluster where no policy opts in to
// kafkaClientQuota any more (the marker tells them apart from an
// operator's, which it never touches), for the client-ids the policies
// still list when its ClientQuotas has Owns set: the quota of a producer
// no policy lists any more is left on the broker and named in the log.
// Without it, turning the option off and restarting would leave those
// producers throttled by the broker for good. A failed attempt is retried with a doubling wait, from one
// publish to 64, until one succeeds: a cluster that refuses to describe
// client quotas costs one request a minute, not one a cycle.
type ClientQuotaSweeper struct {
	Cluster string
	Quotas  *ClientQuotas
	Log     *slog.Logger
	done    bool
	wait    int // publishes to skip before the next attempt
	backoff int
	err     error // the last attempt's, returned while waiting
}

// Name implements Publisher.
func (p *ClientQuotaSweeper) Name() string { return "kafka-client-quota-sweep/" + p.Cluster }

// Publish implements Publisher.
func (p *ClientQuotaSweeper) Publish(ctx context.Context, _ Snapshot) error {
	if p.done {
		return nil
	}
	if p.wait > 0 {
		// Still failing, not recovered: the engine logs a recovery when
		// a publish after a failure returns nil.
		p.wait--
		return p.err
	}
	res, err := p.Quotas.Apply(ctx, nil)
	if err != nil {
		p.backoff = min(max(2*p.backoff, 1), 64)
		p.wait = p.backoff
		p.err = fmt.Errorf("cluster %s: clearing client quotas an earlier run left: %w", p.Cluster, err)
		return p.err
	}
	p.err = nil
	p.done = true
	if len(res.Removed) > 0 && p.Log != nil {
		p.Log.Info("cleared client quotas an earlier run set (no policy has kafkaClientQuota)", "cluster", p.Cluster, "client_ids", res.Removed)
	}
	return nil
}

// bytesPer returns the bytes the broker charges clientID per record on
// topic.
func (p *ClientQuotaPublisher) bytesPer(topic, clientID string) float64 {
	if p.BytesPerMessage > 0 {
		return p.BytesPerMessage
	}
	if p.Sizes != nil {
		if b, ok := p.Sizes.Charged(topic, clientID); ok {
			return b
		}
	}
	return DefaultBytesPerMessage
}

// quoted reports whether the lease's producer gets a client quota from
// this publisher, and the topic's decision.
func (p *ClientQuotaPublisher) quoted(s Snapshot, l quota.Lease) (quota.TopicDecision, bool) {
	if l.Topic.Kind != lag.KindKafka || l.Topic.Cluster != p.Cluster || l.Advisory {
		return quota.TopicDecision{}, false
	}
	d, ok := s.Topics[l.Topic]
	if !ok {
		return d, false
	}
	pol, ok := s.Policies.ByName(d.Policy)
	return d, ok && pol.ClientQuotaFor(l.Producer)
}

// topics returns the names of the cluster's topics whose listed producers
// get client quotas, sorted.
func (p *ClientQuotaPublisher) topics(s Snapshot) []string {
	var out []string
	for _, l := range s.Leases {
		if _, ok := p.quoted(s, l); ok && !slices.Contains(out, l.Topic.Name) {
			out = append(out, l.Topic.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Want returns the byte rate per client-id the snapshot asks for.
func (p *ClientQuotaPublisher) Want(s Snapshot) map[string]float64 {
	want, _ := p.rates(s)
	return want
}

// rates returns the byte rate per client-id the snapshot asks for, and
// an estimate of what each listed client-id sends, both on the broker
// that leads the most of its traffic ([PerBroker]).
//
// The broker does not say what each client-id sends, only what a topic
// receives: the records its end offsets grew by since the last reading
// ([RecordSizes.Rate], unsmoothed, so that a rise shows at once), or its
// smoothed produce rate when sizes are not measured. [Share] splits that
// among the client-ids quoted on it, the ones Kafka is not holding first,
// each at most what its stored quota lets through since the last reading
// ([Steering.Room]: the window's room, not a quota's worth a second; the
// quota binds on each broker: that over its bytes per record and over
// the share of the topic the busiest broker leads). With the whole topic's rate
// as each one's, no quota could bind when several client-ids write a
// topic (a producer sending a third of it is never slowed by 11/12 of
// all of it);
// a client-id sending f times its share can be held up to
// f x (window + hold) - window on its first throttled response.
//
// A client-id granted a finite rate on one topic and an unlimited one on
// another is held to its finite grants plus UnlimitedHeadroom times the
// whole produce rate of its unlimited topics: lagbridge never throttles
// unlimited traffic on purpose, so such a producer is slowed on its
// limited topic only by what the broker can tell apart (give it a
// client.id per topic to slow it there fully).
func (p *ClientQuotaPublisher) rates(s Snapshot) (want, sent map[string]float64) {
	type writer struct {
		lease quota.Lease
		bytes float64 // per record
	}
	byTopic := map[quota.Topic][]writer{}
	var order []quota.Topic
	for _, l := range s.Leases {
		if _, ok := p.quoted(s, l); ok {
			if byTopic[l.Topic] == nil {
				order = append(order, l.Topic)
			}
			byTopic[l.Topic] = append(byTopic[l.Topic], writer{l, p.bytesPer(l.Topic.Name, l.Producer)})
		}
	}
	per, now := map[string][]TopicRate{}, p.now()
	for _, t := range order {
		d := s.Topics[t]
		rate := d.ProduceRate
		if p.Sizes != nil && p.BytesPerMessage <= 0 {
			if r, ok := p.Sizes.Rate(t.Name); ok {
				rate = r // unsmoothed: a rise shows at once
			}
		}
		// A stored quota binds on each broker: a client-id whose topic's
		// busiest broker leads a share f of it sends the topic up to 1/f
		// times its quota.
		busiest := 1.0
		if ls, ok := p.leaders[t.Name]; ok && len(ls) > 0 {
			busiest = slices.Max(slices.Collect(maps.Values(ls)))
		}
		ws := make([]Writer, len(byTopic[t]))
		for i, w := range byTopic[t] {
			ws[i].Cap = math.Inf(1)
			if _, held, ok := p.steer.Last(w.lease.Producer); ok {
				room, _ := p.steer.Room(w.lease.Producer, now)
				ws[i] = Writer{Held: held, Cap: room / (w.bytes * busiest)}
			}
		}
		shares := Share(rate, ws)
		for i, w := range byTopic[t] {
			allowed := math.Inf(1)
			if !w.lease.IsUnlimited() {
				allowed = w.lease.Rate * w.bytes
			}
			per[w.lease.Producer] = append(per[w.lease.Producer], TopicRate{Topic: t.Name, Allowed: allowed,
				Sent: shares[i] * w.bytes, Whole: rate * w.bytes})
		}
	}
	want, sent = map[string]float64{}, map[string]float64{}
	for id, rs := range per {
		a, snt, quoted := PerBroker(rs, p.leaders)
		sent[id] = snt
		want[id] = Ceiling
		if quoted {
			want[id] = a
		}
	}
	return want, sent
}

// busiest returns, per client-id with a finite grant, the byte rate the
// busiest producer of its topics sent over the broker's quota window, on
// the broker that leads the most of each topic, summed over its topics
// (the brokers' producer state, see [RecordSizes.Busiest]; a topic whose
// producers are not known counts nothing). No client-id with one
// producer can have filled Kafka's window with more, whatever [Share]
// credits it with: the split does not know which client-id sends what,
// and a producer sending more than an equal part, or one whose throttle
// ended and that sends its window's allowance at once, fills the window
// beyond the split's estimate. The steering keeps every value at or above
// what holds such a producer LongestHold (see [Steering.NextBounded]):
// quotas steered from the split alone held the bench's legacy producers
// 10 to 173 s at a response on Kafka 4.3.1.
func (p *ClientQuotaPublisher) busiest(s Snapshot) map[string]float64 {
	if p.Sizes == nil || p.BytesPerMessage > 0 || p.Interval <= 0 {
		return nil
	}
	span := p.steer.Window.Span()
	out := map[string]float64{}
	for _, l := range s.Leases {
		if _, ok := p.quoted(s, l); !ok || l.IsUnlimited() {
			continue
		}
		top, ok := p.Sizes.Busiest(l.Topic.Name, span)
		if !ok {
			continue
		}
		share := 1.0
		if ls, ok := p.leaders[l.Topic.Name]; ok && len(ls) > 0 {
			share = slices.Max(slices.Collect(maps.Values(ls)))
		}
		out[l.Producer] += top * p.bytesPer(l.Topic.Name, l.Producer) * share
	}
	return out
}

// MaxHold is the longest Kafka should hold a producer at one response
// under the quota lagbridge stores. A client-id that sends f times the
// share of its topic it is taken to send ([Share]) is held up to
// f x (window + hold) - window: with 3 s, under 10 s for f up to 1.5 on
// Kafka's default 11 s window.
const MaxHold = 3 * time.Second

// holds returns, per client-id with a finite grant, the longest Kafka may
// hold it at a response: the time its consumers need to work off what is
// queued for them (the decision's predicted wait; the shortest over the
// client-id's limited topics), at least Interval and at most MaxHold (or
// Interval when that is longer). A
// producer held while its consumer has queued work costs no goodput: the
// consumer stays busy, and a request handler's producer is stopped only
// by a throttle of a second or more (under shorter ones franz-go sends
// what it buffered meanwhile in one batch, compressed, at nearly its full
// rate, measured on Kafka 4.3.1). With nothing queued the hold is one
// interval: a producer comes back within it once its quota rises.
func (p *ClientQuotaPublisher) holds(s Snapshot) map[string]time.Duration {
	if p.Interval <= 0 {
		return nil // no steering
	}
	out := map[string]time.Duration{}
	for _, l := range s.Leases {
		d, ok := p.quoted(s, l)
		if !ok || l.IsUnlimited() {
			continue
		}
		h := min(max(d.Wait, p.Interval), max(MaxHold, p.Interval))
		if cur, seen := out[l.Producer]; !seen || h < cur {
			out[l.Producer] = h
		}
	}
	return out
}

// checkHeeded warns, once per episode, about a topic that receives more
// than twice its allowed rate for UnheededCycles publishes in a row and
// unheededWindow of time while its listed producers hold client quotas,
// and whose rate did not fall by UnheededFall over that window; and sets
// the Unheeded gauge. The
// values stored are steered down step by step from what the producers
// send (see [Steering]), so producers that heed them slow down a few
// percent a second, and a rate still over twice a decision (0/s in a
// drain) for a while is not by itself a sign: a rate that does not
// fall is (the values follow what is sent, so they cannot tell).
func (p *ClientQuotaPublisher) checkHeeded(s Snapshot) {
	if p.over == nil {
		p.over, p.overAt, p.since, p.warned = map[quota.Topic]int{}, map[quota.Topic][]rateAt{}, map[quota.Topic]time.Time{}, map[quota.Topic]bool{}
	}
	now, window := p.now(), p.unheededWindow()
	ids := map[quota.Topic][]string{}
	for _, l := range s.Leases {
		if _, ok := p.quoted(s, l); ok && !l.IsUnlimited() {
			ids[l.Topic] = append(ids[l.Topic], l.Producer)
		}
	}
	for t := range p.over {
		if _, ok := ids[t]; !ok {
			p.heeded(t)
		}
	}
	for t, producers := range ids {
		d := s.Topics[t]
		if d.IsUnlimited() || d.ProduceRate <= 2*d.Rate {
			p.heeded(t)
			continue
		}
		if p.over[t]++; p.over[t] == 1 {
			p.since[t] = now
		}
		rs := append(p.overAt[t], rateAt{now, d.ProduceRate})
		if window > 0 {
			// The rates of the last window of time, and at least one.
			i := 0
			for i < len(rs)-1 && now.Sub(rs[i].at) > window {
				i++
			}
			rs = rs[i:]
		} else {
			rs = rs[max(len(rs)-UnheededCycles, 0):]
		}
		p.overAt[t] = rs
		if p.over[t] < UnheededCycles || now.Sub(p.since[t]) < window || falling(rs) {
			continue // not for long yet, or falling: the quotas bind
		}
		if !p.warned[t] && p.Log != nil {
			slices.Sort(producers)
			p.Log.Warn("producers do not heed their Kafka client quotas: check that they produce with these client.ids and that no unlisted producer writes to the topic",
				"cluster", p.Cluster, "topic", t.Name, "client_ids", slices.Compact(producers), "produce_rate", d.ProduceRate, "allowed_rate", d.Rate, "cycles", p.over[t])
		}
		p.warned[t] = true
		if p.Unheeded != nil {
			p.Unheeded.WithLabelValues(p.Cluster, t.Name).Set(1)
		}
	}
}

// unheededWindow is how long checkHeeded watches a topic over twice its
// allowed rate before it warns, and the span of the rates it judges the
// fall on: UnheededCycles intervals, at least UnheededSpan (the steering's
// cut is per second, and publishes may come several times an interval).
// Zero without an interval: UnheededCycles publishes alone.
func (p *ClientQuotaPublisher) unheededWindow() time.Duration {
	if p.Interval <= 0 {
		return 0
	}
	return max(UnheededCycles*p.Interval, UnheededSpan)
}

// falling reports whether the mean of the last quarter of rates (oldest
// first) is UnheededFall or more below the mean of the first quarter:
// quarters, not single readings, as a throttled producer sends in bursts.
func falling(rates []rateAt) bool {
	q := max(len(rates)/4, 1)
	mean := func(xs []rateAt) float64 {
		var sum float64
		for _, x := range xs {
			sum += x.rate
		}
		return sum / float64(len(xs))
	}
	return mean(rates[len(rates)-q:]) < (1-UnheededFall)*mean(rates[:q])
}

// heeded ends topic t's episode of unheeded quotas, if any.
func (p *ClientQuotaPublisher) heeded(t quota.Topic) {
	if p.warned[t] && p.Unheeded != nil {
		p.Unheeded.WithLabelValues(p.Cluster, t.Name).Set(0)
	}
	delete(p.over, t)
	delete(p.overAt, t)
	delete(p.since, t)
	delete(p.warned, t)
}
