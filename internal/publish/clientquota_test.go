package publish

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// legacyPolicy is one policy opted into client quotas, listing "legacy",
// and the topic c1/orders.
func legacyPolicy(tb testing.TB) (*quota.Policies, quota.Topic) {
	tb.Helper()
	pols, err := quota.NewPolicies([]quota.Policy{
		{Name: "in", MaxAge: time.Second, KafkaClientQuota: true, Producers: []quota.ProducerSpec{{ID: "legacy"}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return pols, quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "orders"}
}

// TestClientQuotaUnheeded: a topic that keeps receiving more than twice its
// allowed rate while its listed producers hold client quotas raises one
// warning and the gauge after UnheededCycles publishes; heeding again
// lowers the gauge; a topic within twice its rate never warns.
func TestClientQuotaUnheeded(t *testing.T) {
	pols, topic := legacyPolicy(t)
	snap := func(produce float64) Snapshot {
		return Snapshot{Policies: pols,
			Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: 100, ProduceRate: produce}},
			Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 100}}}
	}
	steps := []struct {
		name     string
		produce  float64
		cycles   int
		gauge    float64
		warnings int
	}{
		{"within twice the allowed rate", 190, 2 * UnheededCycles, 0, 0},
		{"over, not yet for long", 500, UnheededCycles - 1, 0, 0},
		{"over for long: one warning", 500, 5, 1, 1},
		{"heeded again", 100, 1, 0, 1},
		{"over again for long: a new episode", 500, UnheededCycles, 1, 2},
	}
	var logs bytes.Buffer
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"cluster", "topic"})
	p := &ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 100, Log: slog.New(slog.NewTextHandler(&logs, nil)), Unheeded: gauge}
	for _, s := range steps {
		for range s.cycles {
			p.checkHeeded(snap(s.produce))
		}
		if got := testutil.ToFloat64(gauge.WithLabelValues("c1", "orders")); got != s.gauge {
			t.Errorf("%s: gauge %v, want %v", s.name, got, s.gauge)
		}
		if got := strings.Count(logs.String(), "do not heed"); got != s.warnings {
			t.Errorf("%s: %d warnings, want %d:\n%s", s.name, got, s.warnings, logs.String())
		}
	}
}

// TestClientQuotaUnheededSteered: the values stored are steered down from
// what the topic receives, so a producer that heeds them slows down a few
// percent a second while the topic stays over twice the decision (a drain
// of 0/s): no warning (newuser3 on Kafka 4.3.1: it fired at 56 msg/s while
// the one plain producer was held up to 6.9 s at a response). One that
// does not heed them keeps its rate, and the values follow it, never
// under twice it: warned within the window (the review of comparing with
// the values stored: never warned in 120 publishes).
func TestClientQuotaUnheededSteered(t *testing.T) {
	pols, topic := legacyPolicy(t)
	for _, c := range []struct {
		name     string
		decision float64
		heeds    bool
		warned   bool
	}{
		{"heeds, drain", 0, true, false},
		{"heeds, cut to 10/s", 10, true, false},
		{"does not heed, drain", 0, false, true},
		{"does not heed, cut to 10/s", 10, false, true},
	} {
		gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"cluster", "topic"})
		t0 := time.Unix(1e6, 0)
		now := t0
		p := &ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 100, Interval: time.Second, Unheeded: gauge,
			Now: func() time.Time { return now }}
		rate, first := 500.0, -1
		for i := range 60 {
			now = t0.Add(time.Duration(i) * time.Second)
			s := Snapshot{Policies: pols,
				Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: c.decision, ProduceRate: rate}},
				Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: c.decision}}}
			p.checkHeeded(s)
			if first < 0 && testutil.ToFloat64(gauge.WithLabelValues("c1", "orders")) == 1 {
				first = i
			}
			want, sent := p.rates(s)
			stored := p.steer.NextBounded(t0.Add(time.Duration(i)*time.Second), want, sent, p.holds(s), nil)["legacy"]
			if c.heeds { // the broker lets through what is stored
				rate = min(rate, stored/100)
			}
		}
		if got := first >= 0; got != c.warned {
			t.Errorf("%s: warned %v (first at publish %d, rate at the end %.1f/s), want %v", c.name, got, first, rate, c.warned)
		}
	}
}

// TestClientQuotaUnheededPublishesPerSecond: the engine kicks the
// publishers after each cluster's cycle (and on reports), so a daemon
// watching a Kafka and a NATS cluster publishes twice a second at a 1 s
// interval. The window counted publishes, so it shrank to 10 s, whose
// quarters 2.5 s apart see a producer that heeds the steering (1.6-3% a
// second) fall by less than UnheededFall: a new user's plain producer with
// the right client.id on Kafka 4.3.1 was named as not heeding after 14 s.
// The window is now time: UnheededSpan whatever the publishes per
// second; one that does not heed is still warned.
func TestClientQuotaUnheededPublishesPerSecond(t *testing.T) {
	pols, topic := legacyPolicy(t)
	for _, perSecond := range []int{1, 2, 4} {
		for _, heeds := range []bool{true, false} {
			gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"cluster", "topic"})
			now := time.Unix(1e6, 0)
			p := &ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 100, Interval: time.Second, Unheeded: gauge,
				Now: func() time.Time { return now }}
			rate, first := 500.0, time.Duration(-1)
			step := time.Second / time.Duration(perSecond)
			for i := range 60 * perSecond {
				now = time.Unix(1e6, 0).Add(time.Duration(i) * step)
				s := Snapshot{Policies: pols,
					Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: 0, ProduceRate: rate}},
					Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 0}}}
				p.checkHeeded(s)
				if first < 0 && testutil.ToFloat64(gauge.WithLabelValues("c1", "orders")) == 1 {
					first = time.Duration(i) * step
				}
				want, sent := p.rates(s)
				stored := p.steer.NextBounded(now, want, sent, p.holds(s), nil)["legacy"]
				if heeds {
					rate = min(rate, stored/100)
				}
			}
			if warned := first >= 0; warned == heeds || (warned && first < UnheededSpan-time.Second) {
				t.Errorf("%d publishes a second, heeds %v: warned %v (first after %v, rate at the end %.1f/s)", perSecond, heeds, warned, first, rate)
			}
		}
	}
}

// TestClientQuotaRates: what a client-id is allowed and an upper bound of
// what it sends, in bytes, from the override or the default size.
func TestClientQuotaRates(t *testing.T) {
	pols, topic := legacyPolicy(t)
	s := Snapshot{Policies: pols,
		Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: 0, ProduceRate: 40}},
		Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 0}}}
	cases := []struct {
		name       string
		bpm        float64
		want, sent float64
	}{
		{"override", 200, 0, 40 * 200},
		{"neither configured nor measured: the default", 0, 0, 40 * DefaultBytesPerMessage},
	}
	for _, c := range cases {
		want, sent := (&ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: c.bpm}).rates(s)
		if w, ok := want["legacy"]; !ok || w != c.want || sent["legacy"] != c.sent {
			t.Errorf("%s: want %v sent %v, want %v and %v", c.name, want, sent, c.want, c.sent)
		}
	}
}

// TestClientQuotaResetOnLeadingAgain: a replica that leads again (the
// publishing gate calls Reset) steers from what the producer sends now,
// not from the quota it stored before another replica led: a producer the
// other leader let send 100 times more is not held for minutes by a cut
// computed from the old value.
func TestClientQuotaResetOnLeadingAgain(t *testing.T) {
	_, cl := kfakeClient(t, kfake.NumBrokers(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pols, topic := legacyPolicy(t)
	snap := func(rate, produce float64) Snapshot {
		return Snapshot{Policies: pols,
			Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: rate, ProduceRate: produce}},
			Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: rate}}}
	}
	q := NewClientQuotas(cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p := &ClientQuotaPublisher{Cluster: "c1", Quotas: q, BytesPerMessage: 1, Interval: time.Second}
	// This replica leads: 1000 B/s wanted and sent.
	if err := p.Publish(ctx, snap(1000, 1000)); err != nil {
		t.Fatal(err)
	}
	// Another replica leads meanwhile and lets the producer send 100 kB/s.
	if _, err := q.Apply(ctx, map[string]float64{"legacy": 100_000}); err != nil {
		t.Fatal(err)
	}
	// This one leads again and cuts to 10 kB/s.
	if r, ok := any(p).(interface{ Reset() }); ok {
		r.Reset()
	}
	if err := p.Publish(ctx, snap(10_000, 100_000)); err != nil {
		t.Fatal(err)
	}
	cur, err := q.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	floor := Floor(100_000, DefaultWindow, time.Second)
	if got := cur["legacy"]; got < floor-MarkerModulus {
		t.Errorf("stored %v B/s for a producer sending 100000 B/s: Kafka holds it %.0fs; want at least %.0f (a throttle within 1s)",
			got, (100_000-got)/got*DefaultWindow.Span().Seconds(), floor)
	}
}

// TestClientQuotaWant: only listed producers of opted-in policies, on that
// cluster, with finite enforced grants, become client quotas; an unlimited
// grant becomes the ceiling.
func TestClientQuotaWant(t *testing.T) {
	pols, err := quota.NewPolicies([]quota.Policy{
		{Name: "in", MaxAge: time.Second, KafkaClientQuota: true, Producers: []quota.ProducerSpec{{ID: "legacy"}}},
		{Name: "out", MaxAge: time.Second, Producers: []quota.ProducerSpec{{ID: "other"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	topic := quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "orders"}
	other := quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "events"}
	s := Snapshot{Policies: pols,
		Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in"}, other: {Policy: "out"}},
		Leases: []quota.Lease{
			{Producer: "legacy", Topic: topic, Rate: 100},
			{Producer: "sdk-user", Topic: topic, Rate: 50},                                                        // not listed
			{Producer: "legacy", Topic: other, Rate: 70},                                                          // policy not opted in
			{Producer: "legacy", Topic: quota.Topic{Kind: lag.KindKafka, Cluster: "c2", Name: "orders"}, Rate: 5}, // other cluster
		}}
	want := (&ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 1000}).Want(s)
	if len(want) != 1 || want["legacy"] != 100*1000 {
		t.Fatalf("want %v", want)
	}
	s.Leases[0].Rate = quota.Unlimited
	if want := (&ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 1000}).Want(s); len(want) != 1 || want["legacy"] != Ceiling {
		t.Fatalf("an unlimited grant wants %v, want only the ceiling for legacy (the broker measures its rate)", want)
	}
}

// twoClientIDs is a policy listing client-ids a and b, with client
// quotas, and its topic orders on cluster c1.
func twoClientIDs(tb testing.TB) (*quota.Policies, quota.Topic) {
	tb.Helper()
	pols, err := quota.NewPolicies([]quota.Policy{
		{Name: "in", MaxAge: time.Second, KafkaClientQuota: true, Producers: []quota.ProducerSpec{{ID: "a"}, {ID: "b"}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return pols, quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "orders"}
}

// TestClientQuotaShares: what each client-id is allowed and what it is
// taken to send when several share a topic, and when one is granted a
// finite rate on one topic and an unlimited one on another.
func TestClientQuotaShares(t *testing.T) {
	pols, orders := twoClientIDs(t)
	events := quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "events"}
	topics := map[quota.Topic]quota.TopicDecision{orders: {Policy: "in", ProduceRate: 100}, events: {Policy: "in", ProduceRate: 30}}
	cases := []struct {
		name       string
		leases     []quota.Lease
		want, sent map[string]float64
	}{
		// The broker does not say who sent what: each of the two is taken
		// to send half of the topic's 100 msg/s.
		{"two client-ids share a topic", []quota.Lease{{Producer: "a", Topic: orders, Rate: 20}, {Producer: "b", Topic: orders, Rate: 0}},
			map[string]float64{"a": 20 * 10, "b": 0}, map[string]float64{"a": 50 * 10, "b": 50 * 10}},
		// Finite on orders, unlimited on events: its grant plus twice all
		// that events receives, so events' traffic is never throttled.
		{"finite and unlimited", []quota.Lease{{Producer: "a", Topic: orders, Rate: 20}, {Producer: "a", Topic: events, Rate: quota.Unlimited}},
			map[string]float64{"a": 20*10 + UnlimitedHeadroom*30*10}, map[string]float64{"a": (100 + 30) * 10}},
		// Unlimited everywhere: the ceiling, throttling no one.
		{"all unlimited", []quota.Lease{{Producer: "a", Topic: orders, Rate: quota.Unlimited}},
			map[string]float64{"a": Ceiling}, map[string]float64{"a": 100 * 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Snapshot{Policies: pols, Topics: topics, Leases: c.leases}
			want, sent := (&ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 10}).rates(s)
			if !maps.Equal(want, c.want) || !maps.Equal(sent, c.sent) {
				t.Errorf("want %v sent %v; want %v and %v", want, sent, c.want, c.sent)
			}
		})
	}
}

// TestClientQuotaPerBroker: Kafka applies a client-id quota on every
// broker, so a producer whose topic is led half by one broker and a
// quarter by each of two others is stored half its grant: what the
// busiest broker must let through. On kfake with three brokers.
func TestClientQuotaPerBroker(t *testing.T) {
	cl := ledUnevenly(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pols, topic := legacyPolicy(t)
	q := NewClientQuotas(cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p := &ClientQuotaPublisher{Cluster: "c1", Quotas: q, BytesPerMessage: 1000}
	s := Snapshot{Policies: pols,
		Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: 100, ProduceRate: 100}},
		Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 100}}}
	if err := p.Publish(ctx, s); err != nil {
		t.Fatal(err)
	}
	cur, err := q.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := Marked(100 * 1000 / 2); cur["legacy"] != want {
		t.Errorf("stored %v B/s for a grant of 100000 B/s led half by one broker, want %v", cur["legacy"], want)
	}
}

// TestClientQuotaHolds: the longest Kafka may hold a client-id is the
// predicted wait of its consumers, at least one interval and at most
// MaxHold, the shortest over its limited topics; none without steering.
func TestClientQuotaHolds(t *testing.T) {
	pols, orders := legacyPolicy(t)
	events := quota.Topic{Kind: lag.KindKafka, Cluster: "c1", Name: "events"}
	cases := []struct {
		name     string
		interval time.Duration
		waits    map[quota.Topic]time.Duration
		unlim    bool // the events lease is unlimited
		want     map[string]time.Duration
	}{
		{"short wait: one interval", time.Second, map[quota.Topic]time.Duration{orders: 200 * time.Millisecond}, false,
			map[string]time.Duration{"legacy": time.Second}},
		{"queued work: its wait", time.Second, map[quota.Topic]time.Duration{orders: 2500 * time.Millisecond}, false,
			map[string]time.Duration{"legacy": 2500 * time.Millisecond}},
		{"long wait: MaxHold", time.Second, map[quota.Topic]time.Duration{orders: time.Minute}, false,
			map[string]time.Duration{"legacy": MaxHold}},
		{"nothing consumed (wait never): one interval", time.Second, map[quota.Topic]time.Duration{orders: -1}, false,
			map[string]time.Duration{"legacy": time.Second}},
		{"two topics: the shortest", time.Second, map[quota.Topic]time.Duration{orders: time.Minute, events: 2 * time.Second}, false,
			map[string]time.Duration{"legacy": 2 * time.Second}},
		{"an unlimited topic does not count", time.Second, map[quota.Topic]time.Duration{orders: time.Minute, events: 0}, true,
			map[string]time.Duration{"legacy": MaxHold}},
		{"no steering", 0, map[quota.Topic]time.Duration{orders: time.Minute}, false, nil},
		{"an interval longer than MaxHold: the interval", 5 * time.Second, map[quota.Topic]time.Duration{orders: time.Minute}, false,
			map[string]time.Duration{"legacy": 5 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Snapshot{Policies: pols, Topics: map[quota.Topic]quota.TopicDecision{}}
			for topic, w := range c.waits {
				s.Topics[topic] = quota.TopicDecision{Policy: "in", Wait: w}
				rate := 10.0
				if topic == events && c.unlim {
					rate = quota.Unlimited
				}
				s.Leases = append(s.Leases, quota.Lease{Producer: "legacy", Topic: topic, Rate: rate})
			}
			got := (&ClientQuotaPublisher{Cluster: "c1", Interval: c.interval}).holds(s)
			if !maps.Equal(got, c.want) {
				t.Errorf("holds %v, want %v", got, c.want)
			}
		})
	}
}

// TestClientQuotaSentSpreadOverBrokers: a client-id whose topic is led by
// two brokers sends up to twice its stored (per-broker) quota to the
// topic, so its stored quota caps its share of the topic at twice the
// value over the bytes per record, not once: a sole writer sending all of
// its grant is taken to send all of it, half on each broker.
func TestClientQuotaSentSpreadOverBrokers(t *testing.T) {
	pols, topic := legacyPolicy(t)
	s := Snapshot{Policies: pols,
		Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: 100, ProduceRate: 100}},
		Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: 100}}}
	p := &ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 10}
	p.leaders = Leaders{topic.Name: {1: 0.5, 2: 0.5}}
	now := time.Unix(1000, 0)
	for i := range 3 {
		want, sent := p.rates(s)
		// 100 msg/s of 10 B, half on each broker.
		if want["legacy"] != 500 || sent["legacy"] != 500 {
			t.Fatalf("call %d: want %v sent %v, want 500 B/s each on the busiest broker", i, want, sent)
		}
		p.steer.Next(now.Add(time.Duration(i)*time.Second), want, sent)
	}
}

// TestClientQuotaLogUnlimited: the ceiling an unlimited grant becomes is
// logged as such, in whole bytes; before, a new user read
// "producer_byte_rate=1.099511627817e+12 wanted=1.099511627776e+12" on
// every release and had to know Ceiling to tell it meant no limit. A
// finite quota is logged as before, without the flag. On kfake.
func TestClientQuotaLogUnlimited(t *testing.T) {
	_, cl := kfakeClient(t, kfake.NumBrokers(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	var logs bytes.Buffer
	q := NewClientQuotas(cl, slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := q.Apply(ctx, map[string]float64{"free": Ceiling, "held": 5000}); err != nil {
		t.Fatal(err)
	}
	var free, held string
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, "client_id=free"):
			free = line
		case strings.Contains(line, "client_id=held"):
			held = line
		}
	}
	if !strings.Contains(free, "unlimited=true") || !strings.Contains(free, "producer_byte_rate=1099511627817 ") || strings.Contains(free, "e+") {
		t.Errorf("the ceiling's line: %s", free)
	}
	if strings.Contains(held, "unlimited") || !strings.Contains(held, "producer_byte_rate=5033 wanted=5000 ") {
		t.Errorf("a finite quota's line: %s", held)
	}
}

// TestClientQuotaSharesHeldLast: of two client-ids writing one topic, the
// one whose stored value is below what it was estimated to send (Kafka
// holds it) is taken to send only what the other cannot account for:
// here nothing, the free one sending all of the topic's 100 msg/s within
// its room. Split in equal parts instead, the held one would be credited
// with half of the other's traffic, and its value would keep it bursting.
func TestClientQuotaSharesHeldLast(t *testing.T) {
	pols, orders := twoClientIDs(t)
	t0 := time.Unix(1000, 0)
	now := t0
	p := &ClientQuotaPublisher{Cluster: "c1", BytesPerMessage: 10, Interval: time.Second, Now: func() time.Time { return now }}
	// a is stored 917 B/s against the 1,000 it was seen to send (held);
	// b is stored 5,000 B/s, above its 1,000 (not held).
	p.steer.Hold = time.Second
	p.steer.Next(t0, map[string]float64{"a": 100, "b": 5000}, map[string]float64{"a": 1000, "b": 1000})
	if _, held, _ := p.steer.Last("a"); !held {
		t.Fatal("a is not held: the test no longer sets up a held client-id")
	}
	if _, held, _ := p.steer.Last("b"); held {
		t.Fatal("b is held: the test no longer sets up a free client-id")
	}
	now = t0.Add(time.Second)
	s := Snapshot{Policies: pols, Topics: map[quota.Topic]quota.TopicDecision{orders: {Policy: "in", Rate: 510, ProduceRate: 100}},
		Leases: []quota.Lease{{Producer: "a", Topic: orders, Rate: 10}, {Producer: "b", Topic: orders, Rate: 500}}}
	_, sent := p.rates(s)
	if want := map[string]float64{"a": 0, "b": 1000}; !maps.Equal(sent, want) {
		t.Errorf("sent %v, want %v: the held client-id takes only what the free one cannot account for", sent, want)
	}
}
