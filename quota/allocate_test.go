package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var inf = math.Inf(1)

// TestPriorityFair walks each case through a few steps (the same producers,
// changing totals or demands, the way a topic's allocation evolves) and
// checks the invariant (checkGrants) after every step, then the grants.
func TestPriorityFair(t *testing.T) {
	type step struct {
		total   float64
		demands []Demand
		want    []float64 // grant rates, in demand order
	}
	d := func(id string, c Criticality, w, rate float64) Demand {
		return Demand{Producer: id, Criticality: c, Weight: w, Rate: rate}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{
			// No producers: nothing to grant, at any total.
			name:  "empty",
			steps: []step{{total: 100}, {total: inf}, {total: 0}},
		},
		{
			// An unlimited total grants everyone an unlimited rate.
			name: "unlimited total",
			steps: []step{{total: inf, demands: []Demand{d("a", Critical, 1, 10), d("b", Sheddable, 1, inf)},
				want: []float64{inf, inf}}},
		},
		{
			// Enough for everyone: demands met, the rest handed out as
			// headroom by weight (a:1, b:3), so a producer can grow.
			name: "spare capacity becomes headroom",
			steps: []step{
				{total: 1000, demands: []Demand{d("a", Critical, 1, 100), d("b", Sheddable, 3, 100)}, want: []float64{100 + 200, 100 + 600}},
				{total: 200, demands: []Demand{d("a", Critical, 1, 100), d("b", Sheddable, 3, 100)}, want: []float64{100, 100}},
			},
		},
		{
			// Strict priority: the critical class is served in full
			// before the sheddable one gets anything; as the total
			// shrinks, sheddable is cut first, then critical shares.
			name: "strict priority",
			steps: []step{
				{total: 500, demands: []Demand{d("c", Critical, 1, 300), d("s", Sheddable, 1, 300)}, want: []float64{300, 200}},
				{total: 300, demands: []Demand{d("c", Critical, 1, 300), d("s", Sheddable, 1, 300)}, want: []float64{300, 0}},
				{total: 100, demands: []Demand{d("c", Critical, 1, 300), d("s", Sheddable, 1, 300)}, want: []float64{100, 0}},
			},
		},
		{
			// The four classes in priority order, whatever the input
			// order.
			name: "four classes",
			steps: []step{{total: 350, demands: []Demand{
				d("s", Sheddable, 1, 100), d("sp", SheddablePlus, 1, 100), d("c", Critical, 1, 100), d("cp", CriticalPlus, 1, 100),
			}, want: []float64{50, 100, 100, 100}}},
		},
		{
			// Water-filling within a class: a small demand is met, its
			// unused share goes to the others, split by weight (1:2).
			name: "weighted max-min fair",
			steps: []step{
				{total: 700, demands: []Demand{d("small", Critical, 1, 100), d("w1", Critical, 1, 1000), d("w2", Critical, 2, 1000)}, want: []float64{100, 200, 400}},
				{total: 300, demands: []Demand{d("small", Critical, 1, 100), d("w1", Critical, 1, 1000), d("w2", Critical, 2, 1000)}, want: []float64{75, 75, 150}},
			},
		},
		{
			// Unknown demand wants everything: it takes its weighted
			// share and everything the others leave.
			name: "unknown demand",
			steps: []step{
				{total: 600, demands: []Demand{d("known", Critical, 1, 100), d("unknown", Critical, 1, inf)}, want: []float64{100, 500}},
				{total: 100, demands: []Demand{d("known", Critical, 1, 100), d("unknown", Critical, 1, inf)}, want: []float64{50, 50}},
			},
		},
		{
			// Floors are granted first whatever the class (up to the
			// demand); the rest by priority.
			name: "floors first",
			steps: []step{
				{total: 100, demands: []Demand{{Producer: "c", Rate: 200, Floor: 10}, {Producer: "s", Criticality: Sheddable, Rate: 200, Floor: 10}}, want: []float64{90, 10}},
				// A floor above the demand grants the demand only.
				{total: 100, demands: []Demand{{Producer: "c", Rate: 200, Floor: 10}, {Producer: "s", Criticality: Sheddable, Rate: 4, Floor: 10}}, want: []float64{96, 4}},
			},
		},
		{
			// Floors above the total: the grants are the floors (the
			// invariant allows total + floors).
			name:  "floors over total",
			steps: []step{{total: 5, demands: []Demand{{Producer: "a", Rate: 50, Floor: 10}, {Producer: "b", Rate: 50, Floor: 10}}, want: []float64{10, 10}}},
		},
		{
			// Zero and negative weights count as 1; negative and NaN
			// demands as 0; a zero or NaN total grants nothing.
			name: "degenerate input",
			steps: []step{
				{total: 100, demands: []Demand{d("a", Critical, 0, 1000), d("b", Critical, -3, 1000)}, want: []float64{50, 50}},
				{total: 100, demands: []Demand{d("neg", Critical, 1, -5), d("nan", Critical, 1, math.NaN()), d("x", Critical, 1, 10)}, want: []float64{30, 30, 40}},
				{total: math.NaN(), demands: []Demand{d("a", Critical, 1, 10)}, want: []float64{0}},
				{total: -1, demands: []Demand{d("a", Critical, 1, 10)}, want: []float64{0}},
			},
		},
		{
			// An unlisted producer is served after every listed one,
			// SHEDDABLE included, whatever its demand; it takes what
			// they leave and no headroom while a listed one takes
			// part, all of it when none does.
			name: "unlisted last",
			steps: []step{
				{total: 100, demands: []Demand{{Producer: "u", Criticality: CriticalPlus, Rate: 1e6, Unlisted: true}, d("s", Sheddable, 1, 60)}, want: []float64{40, 60}},
				{total: 100, demands: []Demand{{Producer: "u", Rate: 10, Unlisted: true}, d("s", Sheddable, 1, 60)}, want: []float64{10, 90}},
				{total: 100, demands: []Demand{{Producer: "u1", Rate: 10, Unlisted: true}, {Producer: "u2", Rate: 30, Unlisted: true}}, want: []float64{40, 60}},
			},
		},
		{
			// An invalid criticality is served after all valid ones.
			name:  "invalid criticality last",
			steps: []step{{total: 100, demands: []Demand{d("bad", Criticality(9), 1, 100), d("s", Sheddable, 1, 100)}, want: []float64{0, 100}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, s := range c.steps {
				gs := PriorityFair(s.total, s.demands)
				checkGrants(t, s.total, s.demands, gs)
				if s.want == nil {
					continue
				}
				for j, g := range gs {
					if !close(g.Rate, s.want[j]) {
						t.Errorf("step %d: %s granted %v, want %v (all %+v)", i, g.Producer, g.Rate, s.want[j], gs)
					}
				}
			}
		})
	}
}

func close(a, b float64) bool {
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b))
}

// TestPriorityFairProperties checks, on 2,000 random inputs, the invariant
// and the two fairness properties that define the allocator:
//   - priority: a class receives beyond its floors only when every higher
//     class is fully served;
//   - max-min within a class: a producer held below its demand has at
//     least the per-weight grant of every other producer of its class.
func TestPriorityFairProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		n := 1 + r.IntN(20)
		ds := make([]Demand, n)
		for i := range ds {
			ds[i] = Demand{Producer: fmt.Sprint(i), Criticality: Criticality(r.IntN(4)), Weight: float64(1 + r.IntN(4)), Rate: float64(r.IntN(500))}
			if r.IntN(10) == 0 {
				ds[i].Rate = UnknownDemand
			}
		}
		if r.IntN(3) == 0 {
			SplitFloor(float64(r.IntN(100)), ds)
		}
		total := float64(r.IntN(5000))
		gs := PriorityFair(total, ds)
		checkGrants(t, total, ds, gs)
		above := func(i int) float64 { return gs[i].Rate - min(ds[i].Floor, wantOf(ds[i])) }
		for i := range ds {
			short := gs[i].Rate < wantOf(ds[i])*(1-1e-9)
			for j := range ds {
				if !short || i == j {
					continue
				}
				if ds[j].Criticality.Rank() > ds[i].Criticality.Rank() && above(j) > 1e-6 {
					t.Fatalf("iter %d: %s (rank %d) short at %v while lower %s got %v above its floor", iter, ds[i].Producer, ds[i].Criticality.Rank(), gs[i].Rate, ds[j].Producer, above(j))
				}
				if ds[j].Criticality == ds[i].Criticality && ds[i].Floor == 0 && ds[j].Floor == 0 &&
					gs[j].Rate/weightOf(ds[j]) > gs[i].Rate/weightOf(ds[i])*(1+1e-9)+1e-9 {
					t.Fatalf("iter %d: %s short at %v/w while %s has %v/w", iter, ds[i].Producer, gs[i].Rate/weightOf(ds[i]), ds[j].Producer, gs[j].Rate/weightOf(ds[j]))
				}
			}
		}
	}
}

// TestSplitFloor: by weight; nothing for a zero, negative or infinite floor.
func TestSplitFloor(t *testing.T) {
	ds := []Demand{{Weight: 1}, {Weight: 3}, {}}
	SplitFloor(100, ds)
	if !close(ds[0].Floor, 20) || !close(ds[1].Floor, 60) || !close(ds[2].Floor, 20) {
		t.Fatalf("floors %+v", ds)
	}
	// Unlisted producers share the floor only when nobody listed does.
	us := []Demand{{Weight: 1}, {Unlisted: true}, {Unlisted: true, Weight: 5}}
	SplitFloor(100, us)
	if !close(us[0].Floor, 100) || us[1].Floor != 0 || us[2].Floor != 0 {
		t.Fatalf("floors with unlisted %+v", us)
	}
	SplitFloor(60, us[1:])
	if !close(us[1].Floor, 10) || !close(us[2].Floor, 50) {
		t.Fatalf("floors of unlisted only %+v", us[1:])
	}
	for _, m := range []float64{0, -1, inf, math.NaN()} {
		SplitFloor(m, ds)
		for _, d := range ds {
			if d.Floor != 0 {
				t.Fatalf("SplitFloor(%v): %+v", m, ds)
			}
		}
	}
}
