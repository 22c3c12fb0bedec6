package producerclient

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRetryBudgetRatio(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(RetryBudgetConfig{Ratio: 0.1, MinPerSecond: 1, TTL: 10 * time.Second}, clk)
	if err != nil {
		t.Fatal(err)
	}
	// The floor: 1/s over 10s is 10 retries with no traffic at all.
	granted := 0
	for i := 0; i < 100; i++ {
		if b.tryRetry() {
			granted++
		}
	}
	if granted != 10 {
		t.Fatalf("floor granted %d retries, want 10", granted)
	}
	// 1000 requests in the window earn 100 retries in total (the floor is
	// a minimum, not an addition): 90 more.
	for i := 0; i < 1000; i++ {
		b.request(b.mono.nanos())
	}
	granted = 0
	for i := 0; i < 1000; i++ {
		if b.tryRetry() {
			granted++
		}
	}
	if granted != 90 {
		t.Fatalf("ratio granted %d more retries, want 90", granted)
	}
	// Deposits and withdrawals expire with the TTL: the floor is back.
	clk.Advance(11 * time.Second)
	if got := b.Tokens(); got != 10 {
		t.Fatalf("after the TTL the budget holds %v, want the floor 10", got)
	}
}

func TestRetryBudgetTokens(t *testing.T) {
	b, err := NewRetryBudget(RetryBudgetConfig{Kind: BudgetTokens}, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	// gRPC: 10 tokens, retries while more than 5 remain; each failure
	// costs one.
	retries := 0
	for i := 0; i < 100; i++ {
		b.outcome(false)
		if b.tryRetry() {
			retries++
		}
	}
	if retries != 4 {
		t.Fatalf("granted %d retries under total failure, want 4 (tokens 9,8,7,6 > 5)", retries)
	}
	// Each success returns 0.1 token: 11 successes lift 0 to 1.1.
	for i := 0; i < 11; i++ {
		b.outcome(true)
	}
	if got := b.Tokens(); math.Abs(got-1.1) > 1e-9 {
		t.Fatalf("tokens %v, want 1.1", got)
	}
}

func TestRetryBudgetConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  RetryBudgetConfig
		want string // substring of the error; "" for valid
	}{
		// The zero value is the default budget.
		{"zero", RetryBudgetConfig{}, ""},
		// A ratio above 1 would allow more retries than requests.
		{"ratio", RetryBudgetConfig{Ratio: 2}, "ratio"},
		// NaN is never valid.
		{"nan", RetryBudgetConfig{Ratio: math.NaN()}, "ratio"},
		// A sub-second TTL makes the window meaningless.
		{"ttl", RetryBudgetConfig{TTL: time.Millisecond}, "TTL"},
		// Unknown kind.
		{"kind", RetryBudgetConfig{Kind: 9}, "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidOption mentioning %q", err, tc.want)
			}
		})
	}
}

func TestThrottlerProbability(t *testing.T) {
	clk := newFakeClock()
	mono := newMonotonic(clk)
	th := &throttler{k: 2, w: newWindow(int64(2*time.Minute), 24)}
	now := func() int64 { return mono.nanos() }
	// 100 requests, all accepted: no throttling.
	for i := 0; i < 100; i++ {
		if ok, _ := th.allow(now()); !ok {
			t.Fatal("refused with no failures")
		}
		th.outcome(now(), true)
	}
	if p := th.probability(now()); p != 0 {
		t.Fatalf("healthy backend: p = %v", p)
	}
	// 300 more requests, none accepted: requests 400, accepts 100:
	// p = (400 - 2*100) / 401.
	for i := 0; i < 300; i++ {
		th.outcome(now(), false)
	}
	want := (400.0 - 200) / 401
	if p := th.probability(now()); math.Abs(p-want) > 1e-9 {
		t.Fatalf("p = %v, want %v", p, want)
	}
	// After the window everything is forgotten.
	clk.Advance(2*time.Minute + 10*time.Second)
	if p := th.probability(now()); p != 0 {
		t.Fatalf("after the window p = %v", p)
	}
	// A nil throttler (disabled) never refuses.
	var off *throttler
	if ok, _ := off.allow(0); !ok {
		t.Fatal("disabled throttler refused")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Producer: "svc-a"}
	if err := good.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	bad := Config{
		Producer:    "bad producer!",
		Mode:        7,
		MaxBlock:    -time.Second,
		Criticality: 9,
		Leases:      LeaseConfig{URL: "ftp://x", WatchWait: time.Hour, Safe: SafeQuota{Mode: SafeRate, Rate: -1}},
		Retry:       RetryConfig{MaxAttempts: 9, Budget: RetryBudgetConfig{Ratio: 5}},
		Throttle:    ThrottleConfig{K: 0.5, Window: time.Millisecond},
	}
	err := bad.Validate()
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Validate() = %v, want ErrInvalidOption", err)
	}
	// Every problem is reported at once.
	for _, want := range []string{"producer", "mode", "max block", "criticality", "leases URL", "watch wait",
		"safe quota rate", "max attempts", "ratio", "throttle K", "throttle window"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}
