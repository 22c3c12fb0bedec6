package publish

import (
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPerBroker(t *testing.T) {
	inf := math.Inf(1)
	halves := Leaders{"a": {1: 0.5, 2: 0.5}, "b": {1: 1}}
	cases := []struct {
		name          string
		rates         []TopicRate
		leaders       Leaders
		allowed, sent float64
		quoted        bool
	}{
		// The doc's example: broker 1 carries half of a and all of b.
		{"busiest broker", []TopicRate{{Topic: "a", Allowed: 1000, Sent: 2000}, {Topic: "b", Allowed: 600, Sent: 600}}, halves, 1100, 1600, true},
		// Three brokers leading a topic equally: a third of the grant on each.
		{"spread over three", []TopicRate{{Topic: "a", Allowed: 900, Sent: 3000}}, Leaders{"a": {0: 1. / 3, 1: 1. / 3, 2: 1. / 3}}, 300, 1000, true},
		// No leaders known: the whole grant on any broker, never more throttling than asked.
		{"leaders unknown", []TopicRate{{Topic: "a", Allowed: 900, Sent: 3000}}, nil, 900, 3000, true},
		// A topic the leaders lack counts whole on every broker the others name.
		{"one topic's leaders unknown", []TopicRate{{Topic: "a", Allowed: 1000, Sent: 1000}, {Topic: "c", Allowed: 100, Sent: 100}}, halves, 600, 600, true},
		// Unlimited on b, finite on a: b counts at twice its whole rate.
		{"finite and unlimited", []TopicRate{{Topic: "a", Allowed: 1000, Sent: 1000}, {Topic: "b", Allowed: inf, Sent: 100, Whole: 300}}, halves, 500 + 2*300, 600, true},
		// Unlimited everywhere: no quota.
		{"all unlimited", []TopicRate{{Topic: "a", Allowed: inf, Sent: 100, Whole: 100}}, halves, 100, 50, false},
		{"nothing", nil, halves, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, s, q := PerBroker(c.rates, c.leaders)
			if math.Abs(a-c.allowed) > 1e-9 || math.Abs(s-c.sent) > 1e-9 || q != c.quoted {
				t.Errorf("PerBroker = %v, %v, %v; want %v, %v, %v", a, s, q, c.allowed, c.sent, c.quoted)
			}
		})
	}
}

// kfakeClient starts a kfake cluster with opts and returns it with a
// client of it; both close when the test ends.
func kfakeClient(tb testing.TB, opts ...kfake.Opt) (*kfake.Cluster, *kgo.Client) {
	tb.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return c, cl
}

// ledUnevenly is a kfake cluster of three brokers whose topic orders has
// four partitions, led by brokers 0, 0, 1 and 2; it returns a client.
func ledUnevenly(tb testing.TB) *kgo.Client {
	tb.Helper()
	c, cl := kfakeClient(tb, kfake.NumBrokers(3), kfake.SeedTopics(4, "orders"))
	for p, node := range []int32{0, 0, 1, 2} {
		if err := c.MoveTopicPartition("orders", int32(p), node); err != nil {
			tb.Fatal(err)
		}
	}
	return cl
}

// TestLeaders: on a kfake cluster of three brokers, the share of a topic's
// partitions each broker leads.
func TestLeaders(t *testing.T) {
	cl := ledUnevenly(t)
	q := NewClientQuotas(cl, discard)
	ls, err := q.Leaders(ctx(t), []string{"orders", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]float64{0: 0.5, 1: 0.25, 2: 0.25}
	if len(ls) != 1 || len(ls["orders"]) != len(want) {
		t.Fatalf("leaders %v, want orders: %v only", ls, want)
	}
	for b, share := range want {
		if ls["orders"][b] != share {
			t.Errorf("broker %d leads %v of orders, want %v", b, ls["orders"][b], share)
		}
	}
}

func TestShare(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name string
		rate float64
		ws   []Writer
		want []float64
	}{
		{"no one held: equal parts", 90, []Writer{{Cap: inf}, {Cap: inf}, {Cap: inf}}, []float64{30, 30, 30}},
		// A small cap takes its cap, the rest share what is left.
		{"caps", 90, []Writer{{Cap: 10}, {Cap: inf}, {Cap: inf}}, []float64{10, 40, 40}},
		// The free writer accounts for the rate first: a throttled
		// request handler sends next to nothing.
		{"held after free", 40, []Writer{{Held: true, Cap: 100}, {Cap: 50}, {Held: true, Cap: 100}}, []float64{0, 40, 0}},
		{"free full: the held share what is left", 90, []Writer{{Held: true, Cap: 100}, {Cap: 50}, {Held: true, Cap: 100}}, []float64{20, 50, 20}},
		// More than every cap: the rest is an unlisted producer's.
		{"beyond every cap", 500, []Writer{{Cap: 100}, {Held: true, Cap: 50}}, []float64{100, 50}},
		{"nothing sent", 0, []Writer{{Cap: inf}}, []float64{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Share(c.rate, c.ws)
			for i := range got {
				if math.Abs(got[i]-c.want[i]) > 1e-9 {
					t.Fatalf("Share(%v) = %v, want %v", c.rate, got, c.want)
				}
			}
		})
	}
}
