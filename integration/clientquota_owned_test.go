package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ownClientQuotas makes the test that calls it leave the broker at addr as
// it found it: when the test ends, after the cleanups registered later (the
// lagbridge processes it starts afterwards, killed then), it removes every
// client quota of the client-ids ids (its own, unique names) and fails if
// any is still listed (clientQuotasLeft). A replica that was SIGKILLed, or
// that stopped with ha (it leaves them for the next leader), leaves the
// quotas it wrote on the broker; other tests and runs on a shared broker
// then meet them (a daemon's sweep at its start clears another run's
// lagbridge-marked ones, a real-Kafka test counting them finds them).
func ownClientQuotas(tb testing.TB, addr string, ids ...string) {
	tb.Helper()
	tb.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			tb.Errorf("clearing the client quotas of %v: %v", ids, err)
			return
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		// A request a killed process had sent may land after its death:
		// remove until none is listed, a few times at most.
		var left map[string][]string
		for range 5 {
			if left, err = clientQuotasLeft(adm, ids); err != nil || len(left) == 0 {
				break
			}
			var entries []kadm.AlterClientQuotaEntry
			for id, keys := range left {
				e := kadm.AlterClientQuotaEntry{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &id}}}
				for _, k := range keys {
					e.Ops = append(e.Ops, kadm.AlterClientQuotaOp{Key: k, Remove: true})
				}
				entries = append(entries, e)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = adm.AlterClientQuotas(ctx, entries)
			cancel()
			if err != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case err != nil:
			tb.Errorf("clearing the client quotas of %v: %v", ids, err)
		case len(left) > 0:
			tb.Errorf("client quotas of this test left on the broker after its cleanup: %s", quotaEntities(left))
		}
	})
}

// clientQuotasLeft lists the client quotas the broker holds for the
// client-ids ids: by client-id, the quota keys set (producer_byte_rate,
// and any other).
func clientQuotasLeft(adm *kadm.Client, ids []string) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	described, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 2}})
	if err != nil {
		return nil, fmt.Errorf("describe client quotas: %w", err)
	}
	left := map[string][]string{}
	for _, d := range described {
		for _, c := range d.Entity {
			if c.Type != "client-id" || c.Name == nil || !slices.Contains(ids, *c.Name) {
				continue
			}
			for _, v := range d.Values {
				left[*c.Name] = append(left[*c.Name], v.Key)
			}
		}
	}
	return left, nil
}

// quotaEntities is left in words, sorted: "orders-1 [producer_byte_rate]".
func quotaEntities(left map[string][]string) string {
	var out []string
	for id, keys := range left {
		sort.Strings(keys)
		out = append(out, fmt.Sprintf("%s %v", id, keys))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
