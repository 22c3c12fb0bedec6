package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient"
)

// TestHotKeys: the keys cover every partition evenly, and each is where
// franz-go's default partitioner (the one NewAvoidPartitioner wraps by
// default) sends it.
func TestHotKeys(t *testing.T) {
	k := newHotKeys()
	tp := kgo.UniformBytesPartitioner(64<<10, true, true, nil).ForTopic("t").(kgo.TopicBackupPartitioner)
	var per [partitions]int
	for i, key := range k.keys {
		if got := tp.PartitionByBackup(&kgo.Record{Key: key}, partitions, nil); int32(got) != k.part[i] {
			t.Fatalf("key %q: default partitioner picks %d, table says %d", key, got, k.part[i])
		}
		per[k.part[i]]++
	}
	for p, n := range per {
		if n != hotKeysPer {
			t.Errorf("partition %d has %d keys, want %d", p, n, hotKeysPer)
		}
	}
}

// TestHotMisses pins issue 17's targets on hand-made results.
func TestHotMisses(t *testing.T) {
	o := HotOptions{}
	good := HotResult{Mode: ModeLagbridge, Offered: 1000, Refused: 40, Processed: [partitions]int64{100, 200, 200, 200, 200, 200},
		HeadP99: [partitions]float64{1.5, 0.1, 0.1, 0.1, 0.1, 0.1}}
	cases := []struct {
		name string
		r    func(r HotResult) HotResult
		want []string // substrings, one per miss
	}{
		{"keyless within every target", func(r HotResult) HotResult { return r }, nil},
		{"keyless refusing 6%", func(r HotResult) HotResult { r.Refused = 60; return r }, []string{"refused 6.0%"}},
		{"p0 too old and dead", func(r HotResult) HotResult {
			r.HeadP99[0], r.Dead[0] = 2.5, 2
			return r
		}, []string{"p0 head age p99", "p0 dead work 2.0%"}},
		{"dead work left at the end counts", func(r HotResult) HotResult { r.Left[0], r.LeftDead[0] = 10, 5; return r }, []string{"p0 dead work"}},
		{"another partition affected", func(r HotResult) HotResult { r.Dead[3] = 1; return r }, []string{"p3 affected"}},
		{"keyed refusing only p0", func(r HotResult) HotResult {
			r.Keyed, r.Refused, r.RefusedBy[0] = true, 150, 150
			return r
		}, nil},
		{"keyed refusing elsewhere", func(r HotResult) HotResult {
			r.Keyed, r.RefusedBy[0], r.RefusedBy[2] = true, 100, 3
			return r
		}, []string{"3 records bound for partitions other than p0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			miss := HotMisses(o, c.r(good))
			if len(miss) != len(c.want) {
				t.Fatalf("misses %q, want %d", miss, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(miss[i], w) {
					t.Errorf("miss %d = %q, want it to say %q", i, miss[i], w)
				}
			}
		})
	}
}

// TestRunHot runs the scenario briefly on kfake: four runs, naive and
// lagbridge, keyless and keyed.
func TestRunHot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake and the daemon for about 30s")
	}
	var out bytes.Buffer
	o := HotOptions{Duration: 6 * time.Second, Out: &out}
	res, err := RunHot(context.Background(), o)
	if err != nil || len(res) != 4 {
		t.Fatalf("%d results, %v\n%s", len(res), err, out.String())
	}
	if md := HotMarkdown(o, res); !strings.Contains(md, "| kfake | keyed | lagbridge |") || !strings.Contains(out.String(), md) {
		t.Errorf("the table is missing or not printed:\n%s", out.String())
	}
	for _, r := range res {
		t.Logf("%s %s: %s", keyName(r.Keyed), r.Mode, hotLine(r))
		if r.Offered == 0 || r.Stored == 0 {
			t.Errorf("%s %s: nothing offered or stored", keyName(r.Keyed), r.Mode)
		}
		if r.Mode == ModeNaive && r.Refused != 0 {
			t.Errorf("naive %s refused %d", keyName(r.Keyed), r.Refused)
		}
		if r.Keyed && r.Mode == ModeNaive {
			// Keys spread evenly: about a sixth lands on p0.
			if s := r.ShareTo(0); s < 0.10 || s > 0.25 {
				t.Errorf("keyed naive: share to p0 %.1f%%, want about 16.7%%", 100*s)
			}
		}
	}
}

// TestHotOptionsValidate: every problem at once, each an ErrInvalidOptions.
func TestHotOptionsValidate(t *testing.T) {
	if err := (HotOptions{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	err := HotOptions{Offered: -1, SlowAfter: 2 * time.Minute, Deadline: -time.Second, Keys: "Keyed", Consumer: "hooked"}.Validate()
	if !errors.Is(err, ErrInvalidOptions) || strings.Count(err.Error(), "\n") != 4 || !strings.Contains(err.Error(), `keys must be keyless, keyed or both, got "Keyed"`) ||
		!strings.Contains(err.Error(), `consumer must be plain or hook, got "hooked"`) {
		t.Fatalf("%v: want five problems, the keys' and the consumer's among them", err)
	}
}

// TestHotKeyings: --hot-keys picks the runs, keyless before keyed, and
// nothing else is a keying.
func TestHotKeyings(t *testing.T) {
	cases := []struct {
		keys string
		want []bool // nil: invalid
	}{
		{"", []bool{false, true}}, // the default: both
		{HotBoth, []bool{false, true}},
		{HotKeyless, []bool{false}},
		{HotKeyed, []bool{true}},
		{"none", nil},
		{"KEYED", nil}, // case matters, as for --brokers
	}
	for _, c := range cases {
		got := keyings(HotOptions{Keys: c.keys}.withDefaults().Keys)
		if !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("keys %q: runs %v, want %v", c.keys, got, c.want)
		}
		if err := (HotOptions{Keys: c.keys}).Validate(); (err == nil) != (c.want != nil) {
			t.Errorf("keys %q: Validate %v", c.keys, err)
		}
	}
}

// TestRunID: two bench invocations started in the same second (main and
// a change side by side) name different topics and groups; before, both
// read the time in seconds, and two hot-partition runs started together
// wrote to one topic through one consumer group.
func TestRunID(t *testing.T) {
	now := time.Unix(1_764_660_000, 0)
	a, b := runID(now), runID(now)
	if a == b {
		t.Fatalf("two ids in the same second: %q and %q", a, b)
	}
	if !strings.HasPrefix(a, "660000") || len(a) != 12 {
		t.Errorf("id %q: want the second (660000) and six random digits", a)
	}
}

// TestHotCountUnfinished: a record the SDK still held when the run ended
// (close cancels the handlers' contexts: "context done before sending")
// is counted as unfinished, not as refused; one whose own deadline ended
// it while the run went on stays refused.
func TestHotCountUnfinished(t *testing.T) {
	rec := &kgo.Record{Partition: -1}
	waiting := errors.Join(&producerclient.RejectError{Attempts: 0}, context.Canceled)
	stopped, stop := context.WithCancel(context.Background())
	stop()
	p := &hotProducer{ctx: stopped}
	p.count(rec, 1, waiting)
	if p.unfinished.Load() != 1 || p.refused.Load() != 0 || p.refusedBy[1].Load() != 0 {
		t.Errorf("after the run's end: unfinished %d, refused %d (p1 %d), want 1, 0, 0", p.unfinished.Load(), p.refused.Load(), p.refusedBy[1].Load())
	}
	p = &hotProducer{ctx: context.Background()}
	p.count(rec, 1, errors.Join(&producerclient.RejectError{Attempts: 0}, context.DeadlineExceeded))
	if p.unfinished.Load() != 0 || p.refused.Load() != 1 || p.refusedBy[1].Load() != 1 {
		t.Errorf("a deadline, the run going on: unfinished %d, refused %d (p1 %d), want 0, 1, 1", p.unfinished.Load(), p.refused.Load(), p.refusedBy[1].Load())
	}
}

// TestHotConsumerHook runs the hot-partition consumer on kfake over two
// partitions of 200 stored records each, partition 0's consumer at
// 10 msg/s, the others' at 1,000, reporting to a test endpoint. With the
// hook (HotHook) the report says where each partition's worker really is,
// though the consumer polled everything at once and commits every 5 s:
// partition 1 idle at its end, partition 0 at the first record its worker
// has not finished (neither 0 nor the end of what was polled), with that
// record's creation time as its head time. Without it (HotPlain) nothing
// is reported.
func TestHotConsumerHook(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kfake for a few seconds")
	}
	const n = 200
	for _, kind := range []string{HotPlain, HotHook} {
		t.Run(kind, func(t *testing.T) {
			w, _, created := storedTwo(t, n)
			url, reported, reports := reportSink(t)
			o := HotOptions{Capacity: 1000, Slower: 100, CommitEvery: 5 * time.Second, Consumer: kind}.withDefaults()
			c, err := startHotConsumer(context.Background(), w, o, url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.from.Store(created(0).UnixNano())
			state := func() string {
				return fmt.Sprintf("p0 processed %d, %d reports, reported %+v and %+v", c.doneOf(0), reports(), reported(0), reported(1))
			}
			if kind == HotPlain {
				waitUntil(t, "partition 0 processed 10 records", state, func() bool { return c.doneOf(0) >= 10 })
				if k := reports(); k != 0 {
					t.Errorf("the plain consumer sent %d reports", k)
				}
				return
			}
			waitUntil(t, "partition 0's worker reported where it is", state, func() bool {
				p0, p1 := reported(0), reported(1)
				return p1.Idle && p1.Position == n &&
					p0.Position >= 5 && p0.Position < n-10 && p0.HeadTimeMs == created(int(p0.Position)).UnixMilli()
			})
			if p0 := reported(0); int64(c.doneOf(0)) < p0.Position {
				t.Errorf("reported position %d with %d processed", p0.Position, c.doneOf(0))
			}
		})
	}
}
