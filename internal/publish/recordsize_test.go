package publish

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSampleCountsBatches: a partition tail sample counts the records per
// batch producers wrote, also on a topic written in transactions, whose
// last offset is a commit marker no record is returned for (and which is
// no batch a producer is charged for).
func TestSampleCountsBatches(t *testing.T) {
	cases := []struct {
		name string
		txn  bool
	}{
		{"plain batches", false},
		{"transactional batches", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			seeds := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
			opts := append(seeds, kgo.DefaultProduceTopic("t"))
			if tc.txn {
				opts = append(opts, kgo.TransactionalID("txn"))
			}
			prod, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(prod.Close)
			const batches, perBatch = 4, 5
			for b := range batches {
				if tc.txn {
					if err := prod.BeginTransaction(); err != nil {
						t.Fatal(err)
					}
				}
				recs := make([]*kgo.Record, perBatch)
				for i := range recs {
					recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", b, i)}
				}
				if err := prod.ProduceSync(ctx(t), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if tc.txn {
					if err := prod.EndTransaction(ctx(t), kgo.TryCommit); err != nil {
						t.Fatal(err)
					}
				}
			}
			end, err := endOffset(t, seeds)
			if err != nil {
				t.Fatal(err)
			}
			r := &RecordSizes{opts: seeds}
			recs, got := r.sample(ctx(t), "t", 0, 0, end)
			if recs != batches*perBatch || got != batches {
				t.Errorf("sampled %v records in %v batches (end offset %d), want %d in %d", recs, got, end, batches*perBatch, batches)
			}
		})
	}
}

func endOffset(tb testing.TB, seeds []kgo.Opt) (int64, error) {
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx(tb), "t")
	if err != nil {
		return 0, err
	}
	o, _ := ends.Lookup("t", 0)
	return o.Offset, o.Err
}
