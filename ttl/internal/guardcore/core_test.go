package guardcore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/ttl"
)

func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/lagbridge/lagbridge/ttl", "github.com/lagbridge/lagbridge/ttl/ttlmetrics")
}

func TestContext(t *testing.T) {
	d := time.Now().Add(time.Hour)
	early, cancelEarly := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer cancelEarly()
	for _, tc := range []struct {
		name   string
		parent context.Context
		v      ttl.Verdict
		want   time.Time // zero: no deadline
		same   bool      // the parent itself is returned
	}{
		// No deadline: the parent itself, no allocation.
		{"none", context.Background(), ttl.Verdict{}, time.Time{}, true},
		// A deadline: bounded by it.
		{"deadline", context.Background(), ttl.Verdict{Deadline: d}, d, false},
		// The parent's earlier deadline wins: the parent itself.
		{"parent earlier", early, ttl.Verdict{Deadline: d}, func() time.Time { x, _ := early.Deadline(); return x }(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := Context(tc.parent, tc.v)
			defer cancel()
			got, ok := ctx.Deadline()
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Fatalf("deadline %v %v, want %v", got, ok, tc.want)
			}
			if (ctx == tc.parent) != tc.same {
				t.Fatalf("same parent = %v, want %v", ctx == tc.parent, tc.same)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { _, c := Context(context.Background(), ttl.Verdict{}); c() }); n != 0 {
		t.Fatalf("no-deadline Context allocates %v", n)
	}
}

func TestCounting(t *testing.T) {
	var c Core
	c.Init(nil, nil, nil)
	now := time.Now()
	live := ttl.Verdict{Deadline: now.Add(time.Second)}
	dead := ttl.Verdict{Reason: ttl.ReasonMaxAge}
	bad := ttl.Verdict{HeaderErr: ttl.ErrMalformed}
	c.Receive(nil, "t", live)
	c.Handled(nil, live, nil, now) // in time
	c.Receive(nil, "t", live)
	c.Handled(nil, live, errors.New("x"), now.Add(time.Hour)) // failed, late
	c.Receive(nil, "t", dead)
	c.DeadLettered(nil, dead.Reason)
	c.Receive(nil, "t", bad)
	c.Handled(nil, bad, nil, now)
	c.DeadLetterFailed(nil)
	c.SettleFailed(nil)
	want := ttl.Stats{Received: 4, Processed: 2, Failed: 1, Expired: 1, Late: 1, Malformed: 1, DeadLettered: 1,
		DeadLetterFailed: 1, SettleFailed: 1, ExpiredBy: [ttl.NumReasons]uint64{ttl.ReasonMaxAge: 1}}
	if got := c.Stats(); got != want || !got.Balanced() {
		t.Fatalf("stats %+v\nwant  %+v", got, want)
	}
}
