package producerclient

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// BudgetKind selects how a [RetryBudget] decides.
type BudgetKind uint8

const (
	// BudgetRatio (the zero value) allows retries up to a ratio of the
	// requests seen over a sliding TTL, with a floor per second for
	// clients that send little (after Finagle's RetryBudget).
	BudgetRatio BudgetKind = iota
	// BudgetTokens is gRPC's retry throttling: a bucket of MaxTokens;
	// each failed attempt costs one token, each success returns
	// TokenRatio, and retries are allowed only while more than half the
	// tokens remain.
	BudgetTokens
)

// RetryBudgetConfig configures a [RetryBudget]. The zero value is a ratio
// budget of 10% of requests with a floor of 10 retries per second over 10
// seconds: under total failure, attempts stay within 1.1x the requests
// once a client sends more than 100 requests per second, and a quiet client
// can still retry 10 times a second.
type RetryBudgetConfig struct {
	// Kind is BudgetRatio (zero) or BudgetTokens.
	Kind BudgetKind

	// Ratio is how many retries each request earns (BudgetRatio). Zero
	// means 0.1; at most 1.
	Ratio float64
	// MinPerSecond is the floor in retries per second (BudgetRatio): the
	// budget holds max(MinPerSecond*TTL, Ratio*requests in TTL) minus the
	// retries in TTL. Unlike Finagle, the floor is a minimum rather than
	// an addition, so that amplification is bounded by 1+Ratio at any
	// request rate above MinPerSecond/Ratio. Zero means 10; negative
	// means no floor.
	MinPerSecond float64
	// TTL is how long a request's deposit (and a retry's withdrawal)
	// counts (BudgetRatio). Zero means 10s; at least 1s.
	TTL time.Duration

	// MaxTokens is the bucket size (BudgetTokens). Zero means 10 (gRPC's
	// usual value); at most 1000.
	MaxTokens float64
	// TokenRatio is what each success returns (BudgetTokens). Zero means
	// 0.1; at most 1.
	TokenRatio float64
}

func (c RetryBudgetConfig) withDefaults() RetryBudgetConfig {
	if c.Ratio == 0 {
		c.Ratio = 0.1
	}
	if c.MinPerSecond == 0 {
		c.MinPerSecond = 10
	}
	if c.MinPerSecond < 0 {
		c.MinPerSecond = 0
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 10
	}
	if c.TokenRatio == 0 {
		c.TokenRatio = 0.1
	}
	return c
}

// Validate reports every problem of c, each wrapping ErrInvalidOption.
func (c RetryBudgetConfig) Validate() error {
	var p problems
	if c.Kind > BudgetTokens {
		p.add("retry budget kind %d is not BudgetRatio or BudgetTokens", c.Kind)
	}
	if bad(c.Ratio) || c.Ratio < 0 || c.Ratio > 1 {
		p.add("retry budget ratio %v must be in (0, 1] (0 for the default 0.1)", c.Ratio)
	}
	if bad(c.MinPerSecond) || c.MinPerSecond > 1e6 {
		p.add("retry budget floor %v retries/s must be at most 1e6", c.MinPerSecond)
	}
	if c.TTL != 0 && c.TTL < time.Second {
		p.add("retry budget TTL %v must be at least 1s (0 for the default 10s)", c.TTL)
	}
	if bad(c.MaxTokens) || c.MaxTokens < 0 || c.MaxTokens > 1000 {
		p.add("retry budget max tokens %v must be in (0, 1000] (0 for the default 10)", c.MaxTokens)
	}
	if bad(c.TokenRatio) || c.TokenRatio < 0 || c.TokenRatio > 1 {
		p.add("retry budget token ratio %v must be in (0, 1] (0 for the default 0.1)", c.TokenRatio)
	}
	return p.err()
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

// RetryBudget is one client's allowance of retries, shared by every topic
// of a producer, and by several producers when they are given the same one
// (Config.Retry.Budget). It is safe for concurrent use. Counting a request
// is one atomic add; deciding a retry takes a mutex (retries are rare by
// construction).
type RetryBudget struct {
	cfg  RetryBudgetConfig
	mono monotonic

	// BudgetRatio
	w       *window // deposits (requests; first count), withdrawals (retries; second)
	reserve float64
	mu      sync.Mutex

	// BudgetTokens, in thousandths of a token.
	milli atomic.Int64
}

// NewRetryBudget returns a budget, or the problems of cfg (wrapping
// ErrInvalidOption). A nil clock is the system clock.
func NewRetryBudget(cfg RetryBudgetConfig, clock Clock) (*RetryBudget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = systemClock{}
	}
	cfg = cfg.withDefaults()
	b := &RetryBudget{cfg: cfg, mono: newMonotonic(clock)}
	b.w = newWindow(int64(cfg.TTL), 10)
	b.reserve = cfg.MinPerSecond * cfg.TTL.Seconds()
	b.milli.Store(int64(cfg.MaxTokens * 1000))
	return b, nil
}

// request records a first attempt (a deposit, for BudgetRatio) at now, in
// the budget's own monotonic nanoseconds (see core.budgetNow).
func (b *RetryBudget) request(now int64) {
	if b.cfg.Kind == BudgetRatio {
		b.w.add(now, countA)
	}
}

// requestN records n first attempts at once.
func (b *RetryBudget) requestN(now int64, n int64) {
	if b.cfg.Kind == BudgetRatio && n > 0 {
		b.w.add(now, n*countA)
	}
}

// outcome records an attempt's result (for BudgetTokens).
func (b *RetryBudget) outcome(ok bool) { b.outcomeN(ok, 1) }

// outcomeN records n attempts with the same result at once (for
// BudgetTokens): the same as n calls of outcome, since the bucket is only
// clamped at its ends.
func (b *RetryBudget) outcomeN(ok bool, n int64) {
	if b.cfg.Kind != BudgetTokens || n <= 0 {
		return
	}
	max := int64(b.cfg.MaxTokens * 1000)
	d := -1000 * n
	if ok {
		d = int64(b.cfg.TokenRatio*1000) * n
	}
	for {
		old := b.milli.Load()
		v := old + d
		if v > max {
			v = max
		}
		if v < 0 {
			v = 0
		}
		if v == old || b.milli.CompareAndSwap(old, v) {
			return
		}
	}
}

// tryRetry reports whether one retry may happen now, and takes it.
func (b *RetryBudget) tryRetry() bool {
	if b.cfg.Kind == BudgetTokens {
		return float64(b.milli.Load()) > b.cfg.MaxTokens*1000/2
	}
	now := b.mono.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	dep, wd := b.w.sums(now)
	if math.Max(b.reserve, b.cfg.Ratio*float64(dep))-float64(wd) < 1 {
		return false
	}
	b.w.add(now, countB)
	return true
}

// Tokens returns the retries the budget would allow right now (for
// BudgetTokens: the tokens held). It is the value of the
// lagbridge_client_retry_budget_tokens metric.
func (b *RetryBudget) Tokens() float64 {
	if b.cfg.Kind == BudgetTokens {
		return float64(b.milli.Load()) / 1000
	}
	dep, wd := b.w.sums(b.mono.nanos())
	return math.Max(0, math.Max(b.reserve, b.cfg.Ratio*float64(dep))-float64(wd))
}

// problems collects configuration errors; err joins them.
type problems []error

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return joinErrs(p)
}
