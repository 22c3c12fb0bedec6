package bench

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Legacy is a producer that never imported the SDK: Sync's request
// handlers calling franz-go's ProduceSync with the request's context (the
// deadline, 2 s), one client per producer class with the producer id as
// its client.id, on both sides of a row. On the lagbridge side the policy
// sets kafkaClientQuota: true, so the brokers throttle these clients to
// their grants (producer_byte_rate, with the bytes per record the daemon
// measures). Kafka only.
const Legacy ProducerKind = "legacy"

// LegacyRows are the rows of the legacy-producer scenario: a consumer that
// commits after every poll, and franz-go's default 5 s autocommit, at a
// 1 s observation interval. `lagbridge bench --row NAME` runs one.
func LegacyRows() []Row {
	return []Row{
		{Broker: BrokerKafka, Consumer: CommitPerPoll, Producer: Legacy, Interval: time.Second},
		{Broker: BrokerKafka, Consumer: AutoCommit5s, Producer: Legacy, Interval: time.Second},
	}
}

// namedRows returns the rows of extra (rows in no matrix) that a --rows
// pattern saying word (the kind that sets them apart) selects: `--rows
// legacy` runs the legacy rows, and a pattern that does not say "legacy"
// (say 'kafka/commit-per-poll/*') leaves them out as before.
func namedRows(extra []Row, word string, patterns []string) []Row {
	var out []Row
	for _, r := range extra {
		for _, p := range patterns {
			if !strings.Contains(p, word) {
				continue
			}
			if sel, _ := SelectRows([]Row{r}, []string{p}); len(sel) > 0 {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// throttles is a franz-go hook that keeps the longest throttle a broker
// asked of a client (a response's throttle_time_ms). Safe for concurrent
// use.
type throttles struct{ longest atomic.Int64 }

// OnBrokerThrottle implements kgo.HookBrokerThrottle.
func (t *throttles) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	for {
		cur := t.longest.Load()
		if int64(d) <= cur || t.longest.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// Longest returns the longest throttle seen, 0 for none.
func (t *throttles) Longest() time.Duration { return time.Duration(t.longest.Load()) }

// longestIdle is the longest run of bins, as a duration, in which the
// consumer processed nothing while the producers were offered messages
// and some of what was offered was not acknowledged yet (they had demand
// the broker held back): a consumer starved by throttled producers.
func longestIdle(s *Series) time.Duration {
	if s == nil {
		return 0
	}
	sum := func(xs [][]int64, i int) int64 {
		var n int64
		for _, c := range xs {
			if i < len(c) {
				n += c[i]
			}
		}
		return n
	}
	var run, longest, backlog int64
	bins := 0
	if len(s.Offered) > 0 {
		bins = len(s.Offered[0])
	}
	for i := range bins {
		backlog += sum(s.Offered, i) - sum(s.Acked, i)
		processed := sum(s.Good, i) + sum(s.Dead, i) + sum(s.Skipped, i)
		if processed == 0 && sum(s.Offered, i) > 0 && backlog > 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return time.Duration(longest) * s.Bin
}
