package producerclient

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/ttl"
)

// TestBucketRecoversFromZeroRate: a lease at rate 0 admits nothing, and the
// lease after it, at a real rate, admits at that rate at once. (A zero-rate
// lease used to admit one message and push the bucket's clock so far ahead
// that no later rate could admit anything until the lease turned
// unlimited.)
func TestBucketRecoversFromZeroRate(t *testing.T) {
	var b bucket
	now := time.Now().UnixNano()
	b.set(newBucketParams(1000, 10), now)
	for range 10 {
		if ok, _ := b.admit(now, ttl.Critical); !ok {
			t.Fatal("burst not admitted")
		}
	}
	b.set(newBucketParams(0, 0), now)
	for i := range 100 {
		if ok, _ := b.admit(now+int64(i)*int64(time.Millisecond), ttl.CriticalPlus); ok {
			t.Fatalf("rate 0 admitted a message at step %d", i)
		}
	}
	now += int64(time.Second)
	b.set(newBucketParams(300, 30), now)
	got := 0
	for i := range 1000 { // one second in 1 ms steps
		if ok, _ := b.admit(now+int64(i)*int64(time.Millisecond), ttl.Critical); ok {
			got++
		}
	}
	// rate x 1 s + burst at most; and far from locked out.
	if got < 290 || got > 330 {
		t.Fatalf("admitted %d in the second after rate 0 -> 300 (burst 30), want about 300-330", got)
	}
	// Going from a slow rate to a fast one does not carry more debt than the
	// fast bucket can hold either.
	var c bucket
	c.set(newBucketParams(1, 1), now)
	c.admit(now, ttl.Critical)
	c.set(newBucketParams(1000, 10), now)
	if ok, _ := c.admit(now+int64(20*time.Millisecond), ttl.Critical); !ok {
		t.Fatal("locked out after a rate increase")
	}
}
