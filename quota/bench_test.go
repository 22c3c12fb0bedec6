package quota

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/lag"
)

// TestImports: quota imports only the standard library, lag and contract.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/lagbridge/lagbridge/lag", "github.com/lagbridge/lagbridge/contract")
}

// BenchmarkControllerStep: one decision for a saturated 12-partition target.
func BenchmarkControllerStep(b *testing.B) {
	ctl := newCtl(b, ControllerConfig{})
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	s := st(0, 4800, 400, 4000)
	for i := range 12 {
		s.Partitions = append(s.Partitions, lag.PartitionState{PartitionSample: lag.PartitionSample{Partition: int32(i), End: 1000, Lag: 400}, HeadAge: time.Second})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.At = leaseT0.Add(time.Duration(i+1) * time.Second)
		for j := range s.Partitions {
			s.Partitions[j].End += 400
		}
		ctl.Step(s, p, s.At)
	}
}

func benchDemands(n int) []Demand {
	r := rand.New(rand.NewPCG(3, 4))
	ds := make([]Demand, n)
	for i := range ds {
		ds[i] = Demand{Producer: fmt.Sprintf("p%04d", i), Criticality: Criticality(r.IntN(4)), Weight: float64(1 + r.IntN(3)), Rate: float64(r.IntN(100))}
		if i%10 == 0 {
			ds[i].Rate = UnknownDemand
		}
	}
	SplitFloor(100, ds)
	return ds
}

// BenchmarkAllocator1000: PriorityFair over 1,000 producers in four classes,
// total below the demand (the water-filling path).
func BenchmarkAllocator1000(b *testing.B) {
	ds := benchDemands(1000)
	b.ReportAllocs()
	for b.Loop() {
		PriorityFair(20000, ds)
	}
}

// BenchmarkAllocator1000Parallel: the allocator is a pure function; it
// scales with cores.
func BenchmarkAllocator1000Parallel(b *testing.B) {
	ds := benchDemands(1000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			PriorityFair(20000, ds)
		}
	})
}

// BenchmarkLeaseBookApply1000: a topic with 1,000 reporting producers: the
// allocation plus lease bookkeeping of one interval.
func BenchmarkLeaseBookApply1000(b *testing.B) {
	book := newBook(b, LeaseConfig{})
	for i, d := range benchDemands(1000) {
		report(b, book, d.Producer, d.Criticality, d.Rate, leaseT0)
		_ = i
	}
	d := decision(20000, SignalSlowDown)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		d.Rate = 20000 + float64(i%3)
		book.Apply(d, plainPolic, leaseT0)
	}
}
