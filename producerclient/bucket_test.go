package producerclient

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/lagbridge/lagbridge/ttl"
)

func TestBucketParams(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     float64
		burst    int
		interval int64
		tolCrit  int64
		tolShed  int64
	}{
		// 100/s: 10ms per token; burst 10 is 100ms of tolerance; sheddable
		// must leave half the burst.
		{"100/s burst 10", 100, 10, 10e6, 100e6, 50e6},
		// A rate that does not divide a second rounds the interval up:
		// never faster than the rate.
		{"3/s", 3, 1, 333_333_334, 333_333_334, 333_333_334},
		// Burst 1 leaves nothing to reserve: every criticality gets its token.
		{"burst 1", 10, 1, 1e8, 1e8, 1e8},
		// Zero burst is treated as 1.
		{"burst 0", 10, 0, 1e8, 1e8, 1e8},
		// Rate 0: nothing at all (see TestBucketRecoversFromZeroRate).
		{"rate 0", 0, 1, maxInterval, 0, 0},
		// Above 1e9/s the interval is 1ns.
		{"huge", 1e12, 1, 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newBucketParams(tc.rate, tc.burst)
			if p.unlimited || p.interval != tc.interval || p.tol[ttl.Critical] != tc.tolCrit || p.tol[ttl.Sheddable] != tc.tolShed {
				t.Fatalf("got interval %d tol %v", p.interval, p.tol)
			}
		})
	}
	if !newBucketParams(math.Inf(1), 5).unlimited {
		t.Fatal("+Inf must be unlimited")
	}
}

func TestBucketBurstThenRate(t *testing.T) {
	var b bucket
	b.set(newBucketParams(10, 5), 0)
	now := int64(time.Second)
	for i := 0; i < 5; i++ {
		if ok, _ := b.admit(now, ttl.Critical); !ok {
			t.Fatalf("burst token %d refused", i)
		}
	}
	ok, wait := b.admit(now, ttl.Critical)
	if ok || wait != int64(100*time.Millisecond) {
		t.Fatalf("6th at once: ok %v wait %v, want refused, 100ms", ok, time.Duration(wait))
	}
	if ok, _ := b.admit(now+int64(100*time.Millisecond), ttl.Critical); !ok {
		t.Fatal("token after 100ms refused")
	}
}

func TestBucketCriticalityReserve(t *testing.T) {
	var b bucket
	b.set(newBucketParams(10, 10), 0)
	now := int64(time.Second)
	// Critical traffic takes 5 of 10 tokens; sheddable traffic must leave
	// 5, so it is refused now while critical traffic still fits.
	for i := 0; i < 5; i++ {
		if ok, _ := b.admit(now, ttl.Critical); !ok {
			t.Fatal("critical refused")
		}
	}
	if ok, _ := b.admit(now, ttl.Sheddable); ok {
		t.Fatal("sheddable admitted into the reserve")
	}
	if ok, _ := b.admit(now, ttl.SheddablePlus); !ok {
		t.Fatal("sheddable-plus (reserve 2 of 10) refused with 5 left")
	}
	if ok, _ := b.admit(now, ttl.CriticalPlus); !ok {
		t.Fatal("critical-plus refused with tokens left")
	}
}

// TestBucketExactUnderContention: many goroutines hammer one bucket while
// a fake time source moves on; the admissions never exceed
// rate*elapsed + burst.
func TestBucketExactUnderContention(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		// batch > 0: half the goroutines take up to batch tokens per
		// call (admitN, sizes 1..batch), the others one (admit).
		batch int
	}{
		// A low rate: almost everything is refused.
		{"low rate", 1000, 10, 0},
		// A high rate: the CAS loop is contended by admissions.
		{"high rate", 5e6, 100, 0},
		// A rate that does not divide a second.
		{"odd rate", 333.3, 7, 0},
		// Batches against single admissions, at a low rate (batches
		// mostly get a prefix) and a high one.
		{"batches, low rate", 1000, 10, 64},
		{"batches, high rate", 5e6, 100, 64},
		// Batches larger than the burst.
		{"batches over the burst", 333.3, 7, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bucket
			b.set(newBucketParams(tc.rate, tc.burst), 0)
			var now atomic.Int64
			start := int64(10 * time.Second)
			now.Store(start)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			workers := 4 * runtime.GOMAXPROCS(0)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if tc.batch > 0 && w%2 == 0 {
							n := 1 + (i+w)%tc.batch
							k, _ := b.admitN(now.Load(), ttl.Critical, n)
							if k < 0 || k > n {
								t.Errorf("admitN(%d) = %d", n, k)
								return
							}
							admitted.Add(int64(k))
						} else if ok, _ := b.admit(now.Load(), ttl.Critical); ok {
							admitted.Add(1)
						}
					}
				}(w)
			}
			// Advance 2 simulated seconds in 1µs steps of real progress.
			for i := 0; i < 20000; i++ {
				now.Add(int64(100 * time.Microsecond))
				if i%100 == 0 {
					runtime.Gosched()
				}
			}
			close(stop)
			wg.Wait()
			elapsed := time.Duration(now.Load() - start).Seconds()
			limit := tc.rate*elapsed + float64(tc.burst)
			got := float64(admitted.Load())
			if got > limit {
				t.Fatalf("admitted %v > rate*t+burst = %v", got, limit)
			}
			t.Logf("admitted %v of at most %.1f (%d goroutines)", got, limit, workers)
		})
	}
}

// TestBucketAdmitN: taking n tokens at once is the same as n single
// admissions at the same instant: a prefix as long as the bucket holds,
// and the time until the next token.
func TestBucketAdmitN(t *testing.T) {
	const iv = int64(100 * time.Millisecond) // 10 per second
	type step struct {
		at   int64 // nanoseconds after the start
		crit ttl.Criticality
		n    int
		k    int   // tokens taken
		wait int64 // until the next one, when k < n
	}
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		// The burst goes in one call; the rest waits an interval.
		{"burst then refuse", 10, 10, []step{{0, ttl.Critical, 15, 10, iv}, {0, ttl.Critical, 1, 0, iv}}},
		// Tokens accrue at the rate: 250ms hold 2, the third is 50ms out.
		{"accrual", 10, 10, []step{{0, ttl.Critical, 10, 10, 0}, {250 * time.Millisecond.Nanoseconds(), ttl.Critical, 5, 2, iv / 2}}},
		// A batch that fits takes exactly n, and the next token is still
		// there.
		{"fits", 10, 10, []step{{0, ttl.Critical, 4, 4, 0}, {0, ttl.Critical, 6, 6, 0}, {0, ttl.Critical, 1, 0, iv}}},
		// Sheddable traffic leaves half the burst to critical traffic.
		{"criticality reserve", 10, 10, []step{{0, ttl.Sheddable, 10, 5, iv}, {0, ttl.Critical, 10, 5, iv}}},
		// Zero tokens asked: nothing taken, nothing refused.
		{"zero", 10, 1, []step{{0, ttl.Critical, 0, 0, 0}, {0, ttl.Critical, 1, 1, 0}}},
		// Unlimited: everything.
		{"unlimited", math.Inf(1), 0, []step{{0, ttl.Critical, 1000, 1000, 0}}},
		// A zero rate: nothing.
		{"zero rate", 0, 5, []step{{0, ttl.Critical, 3, 0, -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bucket
			start := int64(10 * time.Second)
			b.set(newBucketParams(tc.rate, tc.burst), start)
			for i, s := range tc.steps {
				k, wait := b.admitN(start+s.at, s.crit, s.n)
				if k != s.k || s.wait >= 0 && k < s.n && wait != s.wait || s.wait < 0 && wait <= 0 {
					t.Fatalf("step %d: admitN(%d) = %d, wait %v; want %d, wait %v", i, s.n, k, time.Duration(wait), s.k, time.Duration(s.wait))
				}
			}
		})
	}
}

func TestBucketNoAlloc(t *testing.T) {
	var b bucket
	b.set(newBucketParams(1e6, 100), 0)
	n := int64(time.Second)
	if a := testing.AllocsPerRun(1000, func() { n++; b.admit(n, ttl.Critical) }); a != 0 {
		t.Fatalf("admit allocates %v", a)
	}
}

// BenchmarkAdmit compares the SDK's admit check with x/time/rate's Allow
// in the same run, serial and parallel, in two regimes: "admit" (the rate
// is far above the offered load: every call takes a token) and "reject"
// (the bucket is empty: every call is refused, the overload case). Both
// read the real clock, as they would in production.
//
//	go test ./producerclient -run '^$' -bench BenchmarkAdmit -benchmem
func BenchmarkAdmit(b *testing.B) {
	for _, regime := range []struct {
		name  string
		rate  float64
		burst int
	}{
		{"admit", 1e9, 1 << 30},
		{"reject", 1e-3, 1},
	} {
		newSDK := func() (*bucket, *monotonic) {
			bk := &bucket{}
			mono := newMonotonic(systemClock{})
			bk.set(newBucketParams(regime.rate, regime.burst), mono.nanos())
			if regime.name == "reject" {
				bk.admit(mono.nanos(), ttl.Critical) // take the only token
			}
			return bk, &mono
		}
		newX := func() *rate.Limiter {
			l := rate.NewLimiter(rate.Limit(regime.rate), regime.burst)
			if regime.name == "reject" {
				l.Allow()
			}
			return l
		}
		b.Run(regime.name+"/serial/sdk", func(b *testing.B) {
			bk, mono := newSDK()
			b.ReportAllocs()
			for b.Loop() {
				bk.admit(mono.nanos(), ttl.Critical)
			}
		})
		b.Run(regime.name+"/serial/xrate", func(b *testing.B) {
			l := newX()
			b.ReportAllocs()
			for b.Loop() {
				l.Allow()
			}
		})
		// The algorithms alone, time given (no clock read in the loop).
		b.Run(regime.name+"/given-time/sdk", func(b *testing.B) {
			bk, mono := newSDK()
			n := mono.nanos()
			b.ReportAllocs()
			for b.Loop() {
				n++
				bk.admit(n, ttl.Critical)
			}
		})
		b.Run(regime.name+"/given-time/xrate", func(b *testing.B) {
			l := newX()
			t := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				t = t.Add(1)
				l.AllowN(t, 1)
			}
		})
		b.Run(regime.name+"/parallel/sdk", func(b *testing.B) {
			bk, mono := newSDK()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bk.admit(mono.nanos(), ttl.Critical)
				}
			})
		})
		b.Run(regime.name+"/parallel/xrate", func(b *testing.B) {
			l := newX()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow()
				}
			})
		})
	}
}
