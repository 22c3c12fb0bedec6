package quota

import (
	"cmp"
	"math"
	"slices"
)

// UnknownDemand is the demand of a producer that did not say what it wants
// (+Inf msg/s): it is treated as wanting everything, so it receives its
// weighted share of whatever is left.
var UnknownDemand = math.Inf(1)

// Demand is one producer's claim on a topic's rate.
type Demand struct {
	// Producer is the producer id (echoed in the Grant).
	Producer string
	// Criticality is the class the producer is served in.
	Criticality Criticality
	// Weight is the producer's share within its class relative to the
	// others. Zero or negative means 1.
	Weight float64
	// Rate is what the producer would send if unthrottled, msg/s;
	// [UnknownDemand] (+Inf) when it did not say. Negative or NaN counts
	// as 0.
	Rate float64
	// Floor is the rate guaranteed to the producer whatever its class,
	// msg/s (see [SplitFloor]); it is granted up to Rate only. Zero: none.
	Floor float64
	// Unlisted marks a producer its policy does not list: it is served
	// after every listed producer, whatever their classes, and receives
	// headroom only when no listed producer takes part (see
	// [PriorityFair]). SplitFloor gives it no floor while a listed
	// producer takes part.
	Unlisted bool
}

// Grant is one producer's share.
type Grant struct {
	Producer string
	// Rate is the granted rate, msg/s; +Inf when the total is unlimited.
	Rate float64
	// Headroom is the part of Rate above the producer's demand, msg/s:
	// capacity nobody asked for, handed out so that a producer whose
	// demand rises can grow before its next report.
	Headroom float64
}

// Allocator splits total (msg/s, +Inf for unlimited) across demands and
// returns one grant per demand, in the same order. It must be a pure
// function: same input, same output, no retained references.
//
// Every allocator must keep the invariant its tests check after every step:
// the sum of the grants does not exceed total plus the sum of the floors.
type Allocator func(total float64, demands []Demand) []Grant

// SplitFloor sets the Floor of each demand to its weight's share of minRate
// (msg/s), the way a policy's MinRate is split across its producers. While
// any demand is listed (Unlisted false), the floor is split across the
// listed ones only and unlisted ones get none, so that no number of
// unlisted producers dilutes a listed producer's floor.
func SplitFloor(minRate float64, demands []Demand) {
	listed := anyListed(demands)
	var sum float64
	for _, d := range demands {
		if !listed || !d.Unlisted {
			sum += weightOf(d)
		}
	}
	for i, d := range demands {
		demands[i].Floor = 0
		if minRate > 0 && !math.IsInf(minRate, 0) && (!listed || !d.Unlisted) {
			demands[i].Floor = minRate * weightOf(d) / sum
		}
	}
}

// anyListed reports whether a demand of a listed producer is among ds.
func anyListed(ds []Demand) bool {
	for _, d := range ds {
		if !d.Unlisted {
			return true
		}
	}
	return false
}

// rankOf is the tier a demand is served in: its class's rank (0-3), or 4,
// after every class, for an unlisted producer.
func rankOf(d Demand) int8 {
	if d.Unlisted {
		return int8(len(Criticalities))
	}
	return int8(d.Criticality.Rank())
}

func weightOf(d Demand) float64 {
	if !(d.Weight > 0) || math.IsInf(d.Weight, 0) {
		return 1
	}
	return d.Weight
}

func wantOf(d Demand) float64 {
	if !(d.Rate > 0) {
		return 0 // negative, zero, NaN
	}
	return d.Rate
}

// PriorityFair is the default [Allocator]: demand-aware, strict priority
// across criticalities, weighted max-min fair within one, floors first.
//
//  1. An unlimited total grants every producer an unlimited rate.
//  2. Floors: each producer receives min(Floor, Rate) first, whatever its
//     class. If the floors exceed the total, the grants are the floors.
//  3. What is left goes to the classes in priority order (CRITICAL_PLUS,
//     CRITICAL, SHEDDABLE_PLUS, SHEDDABLE, then unlisted producers,
//     whatever class they have): a class is served up to its whole demand
//     before the next receives anything, so sheddable traffic is cut
//     first, and no demand of an unlisted producer lowers the grant of a
//     listed one below its demand (or below what it would get without
//     them when the listed demand alone exceeds the total).
//  4. Within a class, water-filling: every producer receives weight x L,
//     capped by its remaining demand, with the level L chosen so that the
//     class takes exactly what is left (or all it wants). A producer that
//     wants less than its share leaves the rest to the others; an unknown
//     demand takes its full share.
//  5. When every demand is met and capacity remains, it is handed out to
//     the producers in proportion to weight, as Headroom: to the listed
//     ones only when any takes part, else to all. Grants above demand
//     happen only here, and only from capacity nobody asked for.
//
// The sum of the grants is at most max(total, sum of the floors granted).
// It allocates the result slice and three scratch slices; O(n log n).
func PriorityFair(total float64, demands []Demand) []Grant {
	n := len(demands)
	grants := make([]Grant, n)
	for i, d := range demands {
		grants[i].Producer = d.Producer
	}
	if n == 0 {
		return grants
	}
	if math.IsInf(total, 1) {
		for i := range grants {
			grants[i].Rate = Unlimited
		}
		return grants
	}
	if !(total > 0) {
		total = 0
	}
	left := total
	for i, d := range demands {
		if d.Floor > 0 {
			f := min(d.Floor, wantOf(d))
			grants[i].Rate = f
			left -= f
		}
	}
	left = max(left, 0)

	// Order by class, then by how soon each producer's demand is met in
	// the water-filling (remaining demand / weight).
	idx := make([]int32, n)
	key := make([]float64, n)
	rank := make([]int8, n)
	for i, d := range demands {
		idx[i] = int32(i)
		key[i] = (wantOf(d) - grants[i].Rate) / weightOf(d)
		rank[i] = rankOf(d)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := cmp.Compare(rank[a], rank[b]); c != 0 {
			return c
		}
		return cmp.Compare(key[a], key[b])
	})
	for start := 0; start < n && left > 0; {
		r := rank[idx[start]]
		end := start
		for end < n && rank[idx[end]] == r {
			end++
		}
		left = waterFill(idx[start:end], demands, grants, key, left)
		start = end
	}

	if left > 0 {
		listed := anyListed(demands)
		var wsum float64
		for _, d := range demands {
			if !listed || !d.Unlisted {
				wsum += weightOf(d)
			}
		}
		for i, d := range demands {
			if listed && d.Unlisted {
				continue
			}
			h := left * weightOf(d) / wsum
			grants[i].Rate += h
			grants[i].Headroom = h
		}
	}
	return grants
}

// waterFill shares avail across the producers of one class, given in order
// of key (remaining demand per unit of weight), and returns what is left.
func waterFill(class []int32, demands []Demand, grants []Grant, key []float64, avail float64) float64 {
	var wsum float64
	for _, i := range class {
		wsum += weightOf(demands[i])
	}
	for k, i := range class {
		w := weightOf(demands[i])
		level := avail / wsum
		if key[i] <= level {
			// Fully served; its unused share stays for the rest.
			need := key[i] * w
			grants[i].Rate += need
			avail -= need
			wsum -= w
			continue
		}
		// Everyone from here on is capped by the level.
		for _, j := range class[k:] {
			grants[j].Rate += weightOf(demands[j]) * level
		}
		return 0
	}
	return max(avail, 0)
}
