package kafka

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/lag"
)

// TestHeadAndLag pins lag and head time against records with known
// timestamps and commits placed by hand.
func TestHeadAndLag(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "orders", 2, nil)
	produceN(t, cl, "orders", 0, 10, 0)  // offsets 0..9 at +0s..+9s
	produceN(t, cl, "orders", 1, 5, 100) // offsets 0..4 at +100s..+104s

	commit(t, adm, "mid", "orders", map[int32]int64{0: 3, 1: 5})     // p0 lags 7 from +3s; p1 caught up
	commit(t, adm, "ahead", "orders", map[int32]int64{0: 10})        // p1 never committed
	commit(t, adm, "beyond", "orders", map[int32]int64{0: 12, 1: 0}) // a commit past the end clamps to 0

	o := newObserver(t, c, nil)
	got := observe(t, o)

	s := mustFind(t, got, "mid", "orders")
	if s.Target != (lag.Target{Kind: lag.KindKafka, Cluster: "test", Topic: "orders", Group: "mid"}) {
		t.Fatalf("target %+v", s.Target)
	}
	if s.At.IsZero() || s.Err != "" {
		t.Fatalf("sample At=%v Err=%q", s.At, s.Err)
	}
	wantPart(t, s, 0, 0, 10, 3, 7, 3) // head is the record at the commit
	wantPart(t, s, 1, 0, 5, 5, 0, -1) // caught up: no head
	s = mustFind(t, got, "ahead", "orders")
	wantPart(t, s, 0, 0, 10, 10, 0, -1)
	wantUncommitted(t, s, 1, 0, 5) // no commit: lag and head unknown
	s = mustFind(t, got, "beyond", "orders")
	wantPart(t, s, 0, 0, 10, 12, 0, -1)
	wantPart(t, s, 1, 0, 5, 0, 5, 100)
	if len(got) != 3 {
		t.Fatalf("want 3 samples, got %s", dump(got))
	}
}

// TestEmptyGroupKeepsGrowing: after its only consumer leaves, a group is
// Empty but still has commits; its lag must follow the end offset.
func TestEmptyGroupKeepsGrowing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	prod := newClient(t, c)
	adm := kadm.NewClient(prod)
	createTopic(t, adm, "events", 1, nil)
	produceN(t, prod, "events", 0, 4, 0)

	cons := newClient(t, c,
		kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	pollAndCommit(t, cons, 4)
	o := newObserver(t, c, nil)
	got := observe(t, o)
	s := mustFind(t, got, "billing", "events")
	if s.GroupState != "Stable" || s.Members != 1 {
		t.Fatalf("live group: state %q members %d", s.GroupState, s.Members)
	}
	wantPart(t, s, 0, 0, 4, 4, 0, -1)

	cons.Close() // leaves the group
	produceN(t, prod, "events", 0, 3, 10)
	got = eventually(t, o, "group empty", func(got []lag.Sample) bool {
		s := find(got, "billing", "events")
		return s != nil && s.GroupState == "Empty"
	})
	s = mustFind(t, got, "billing", "events")
	if s.Members != 0 {
		t.Fatalf("members %d", s.Members)
	}
	wantPart(t, s, 0, 0, 7, 4, 3, 10)

	produceN(t, prod, "events", 0, 5, 20)
	s = mustFind(t, observe(t, o), "billing", "events")
	wantPart(t, s, 0, 0, 12, 4, 8, 10) // grew by 5, head unchanged
}

// TestNoCommits pins partitions without a committed offset: their lag and
// head are unknown, as kafka-consumer-groups shows them ("-"), not the
// whole retained log. A group started at the end on an idle topic commits
// nothing; counting the retained records as its lag and the oldest of them
// (here from 2023) as its head age would stop every producer of the topic
// although the group is caught up. The partitions stay visible (Committed
// -1, State.Uncommitted and the reason) and cost no head fetch.
func TestNoCommits(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	prod := newClient(t, c)
	adm := kadm.NewClient(prod)
	createTopic(t, adm, "fresh", 2, nil)
	produceN(t, prod, "fresh", 0, 6, 50)
	produceN(t, prod, "fresh", 1, 2, 60)
	// Start from the end: the member polls nothing and commits nothing.
	cons := newClient(t, c,
		kgo.ConsumerGroup("lazy"), kgo.ConsumeTopics("fresh"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.DisableAutoCommit())
	_ = cons // joins in the background
	// Another group committed on partition 1 only.
	commit(t, adm, "half", "fresh", map[int32]int64{1: 1})

	o := newObserver(t, c, nil)
	got := eventually(t, o, "member assigned", func(got []lag.Sample) bool {
		s := find(got, "lazy", "fresh")
		return s != nil && s.Members == 1
	})
	lazy := mustFind(t, got, "lazy", "fresh")
	wantUncommitted(t, lazy, 0, 0, 6)
	wantUncommitted(t, lazy, 1, 0, 2)
	half := mustFind(t, got, "half", "fresh")
	wantUncommitted(t, half, 0, 0, 6)
	wantPart(t, half, 1, 0, 2, 1, 1, 61)

	// Folded over minutes: no commit anywhere is caught up (never stopped
	// or stalled), and no commit next to a commit counts only the latter.
	// lazy has a member assigned the topic: its partitions are measured
	// from first sight (nothing written since: lag 0), not unknown. half
	// has no member: its partition 0 stays unknown. (half, never seen live,
	// is abandoned from its first reading: not what this test is about.)
	tr := lag.NewTracker(nil)
	var stLazy, stHalf lag.State
	for i := range 3 {
		now := time.Now().Add(time.Duration(i) * time.Minute)
		for _, s := range observe(t, o) {
			s.At = now
			switch s.Target.Group {
			case "lazy":
				stLazy = tr.Observe(s, now)
			case "half":
				stHalf = tr.Observe(s, now)
			}
		}
	}
	t.Logf("lazy: %s (%s), lag %d, head age %v, uncommitted %d", stLazy.Status, stLazy.Reason, stLazy.Lag, stLazy.HeadAge, stLazy.Uncommitted)
	t.Logf("half: %s (%s), lag %d, head age %v, uncommitted %d", stHalf.Status, stHalf.Reason, stHalf.Lag, stHalf.HeadAge, stHalf.Uncommitted)
	if stLazy.Status != lag.StatusOK || stLazy.Lag != 0 || stLazy.HeadAge != 0 || stLazy.Uncommitted != 0 || stLazy.Source != lag.SourceFirstSight || stLazy.Live != lag.LiveYes {
		t.Fatalf("lazy: status %s lag %d head age %v uncommitted %d source %q live %s; want ok, 0, 0, 0, first-seen, live",
			stLazy.Status, stLazy.Lag, stLazy.HeadAge, stLazy.Uncommitted, stLazy.Source, stLazy.Live)
	}
	if want := time.Since(base.Add(61 * time.Second)); stHalf.Lag != 1 || stHalf.Uncommitted != 1 || stHalf.HeadAge < want-time.Hour || stHalf.HeadAge > want+time.Hour {
		t.Fatalf("half: lag %d head age %v uncommitted %d; want 1, about %v (partition 1's head), 1", stHalf.Lag, stHalf.HeadAge, stHalf.Uncommitted, want)
	}
	// The member's own fetches would blur a count of Fetch requests; the
	// head cache shows what was looked up: half's partition 1 only.
	if n := o.cachedHeads(); n != 1 {
		t.Fatalf("head cache holds %d entries, want 1: no head is read for a partition without a commit", n)
	}
}

// TestStoppedConsumer: a member that stays in the group but stopped
// polling: the group is Stable, and lag and head age grow.
func TestStoppedConsumer(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	prod := newClient(t, c)
	adm := kadm.NewClient(prod)
	createTopic(t, adm, "jobs", 1, nil)
	produceN(t, prod, "jobs", 0, 3, 0)
	cons := newClient(t, c,
		kgo.ConsumerGroup("workers"), kgo.ConsumeTopics("jobs"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	pollAndCommit(t, cons, 3)
	// The consumer now stops polling but stays a member.
	produceN(t, prod, "jobs", 0, 4, 30)
	o := newObserver(t, c, nil)
	s := mustFind(t, observe(t, o), "workers", "jobs")
	if s.GroupState != "Stable" || s.Members != 1 {
		t.Fatalf("state %q members %d", s.GroupState, s.Members)
	}
	wantPart(t, s, 0, 0, 7, 3, 4, 30)
	produceN(t, prod, "jobs", 0, 2, 60)
	s = mustFind(t, observe(t, o), "workers", "jobs")
	wantPart(t, s, 0, 0, 9, 3, 6, 30)
}

// TestKIP848Group: a group on the new consumer protocol is listed with
// type "consumer", described with ConsumerGroupDescribe, and measured.
func TestKIP848Group(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	prod := newClient(t, c)
	adm := kadm.NewClient(prod)
	createTopic(t, adm, "kip848", 2, nil)
	produceN(t, prod, "kip848", 0, 5, 0)
	produceN(t, prod, "kip848", 1, 5, 10)
	cons := newClient(t, c,
		kgo.ConsumerGroup("nextgen"), kgo.ConsumeTopics("kip848"), kgo.ServerSideBalancer(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	pollAndCommit(t, cons, 10)
	listed, err := adm.ListGroups(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if typ := listed["nextgen"].GroupType; typ != "consumer" {
		t.Fatalf("group type %q, want consumer (KIP-848)", typ)
	}
	produceN(t, prod, "kip848", 1, 2, 40)

	o := newObserver(t, c, nil)
	// Live: its member is assigned the topic's partitions (by topic ID).
	got := eventually(t, o, "stable KIP-848 group", func(got []lag.Sample) bool {
		s := find(got, "nextgen", "kip848")
		return s != nil && s.Members == 1 && s.GroupState == "Stable" && s.Live == lag.LiveYes
	})
	s := mustFind(t, got, "nextgen", "kip848")
	wantPart(t, s, 0, 0, 5, 5, 0, -1)
	wantPart(t, s, 1, 0, 7, 5, 2, 40)

	cons.Close()
	got = eventually(t, o, "empty KIP-848 group", func(got []lag.Sample) bool {
		s := find(got, "nextgen", "kip848")
		return s != nil && s.Members == 0 && s.Live == lag.LiveNo
	})
	s = mustFind(t, got, "nextgen", "kip848")
	wantPart(t, s, 1, 0, 7, 5, 2, 40)
}

// TestKIP848SubscribedNoCommit: a KIP-848 member assigned a topic with no
// commits yet makes the pair appear (assignments carry topic IDs only).
func TestKIP848SubscribedNoCommit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	prod := newClient(t, c)
	adm := kadm.NewClient(prod)
	createTopic(t, adm, "quiet", 1, nil)
	produceN(t, prod, "quiet", 0, 2, 5)
	_ = newClient(t, c,
		kgo.ConsumerGroup("idle848"), kgo.ConsumeTopics("quiet"), kgo.ServerSideBalancer(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.DisableAutoCommit())
	o := newObserver(t, c, nil)
	got := eventually(t, o, "assigned KIP-848 member", func(got []lag.Sample) bool {
		s := find(got, "idle848", "quiet")
		return s != nil && s.Members == 1 && s.Live == lag.LiveYes
	})
	wantUncommitted(t, mustFind(t, got, "idle848", "quiet"), 0, 0, 2)

	// A cycle whose describe fails still lists the pair (it has no
	// commit, only the last description named it), live unknown: it does
	// not leave and come back, losing its first-sight position.
	var refuse atomic.Bool
	refuse.Store(true)
	c.ControlKey(int16(kmsg.ConsumerGroupDescribe), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refuse.Load() {
			return nil, errors.New("describe refused"), true
		}
		return nil, nil, false
	})
	s := find(observe(t, o), "idle848", "quiet")
	refuse.Store(false)
	if s == nil || s.Live != lag.LiveUnknown || s.Members != -1 {
		t.Fatalf("after a failed describe: %v, want listed, members -1, live unknown", s)
	}
}

// TestTransactions: commit markers and aborted records are not lag; open
// transactions are not lag yet (end is the LSO).
func TestTransactions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	adm := kadm.NewClient(newClient(t, c))
	createTopic(t, adm, "txn", 1, nil)
	tx := newClient(t, c, kgo.TransactionalID("tx-1"))
	run := func(commit bool, recs ...*kgo.Record) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(t, tx, recs...)
		if err := tx.EndTransaction(ctxT(t), kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	// Layout: 0..4 committed data, 5 marker; 6..8 aborted, 9 marker;
	// 10..11 committed data, 12 marker. End (LSO) 13.
	run(true, rec("txn", 0, 0, "a"), rec("txn", 0, 1, "b"), rec("txn", 0, 2, "c"), rec("txn", 0, 3, "d"), rec("txn", 0, 4, "e"))
	run(false, rec("txn", 0, 10, "x"), rec("txn", 0, 11, "y"), rec("txn", 0, 12, "z"))
	run(true, rec("txn", 0, 20, "f"), rec("txn", 0, 21, "g"))

	cases := []struct {
		name      string
		committed int64
		lag       int64
		head      int
	}{
		// Committed on the marker after the last data: nothing to read.
		{"on last marker", 12, 0, -1},
		// Past everything.
		{"at end", 13, 0, -1},
		// On the first marker: the aborted records and their marker
		// are skipped; the head is the first record of txn 3 (offset 10).
		{"on first marker", 5, 3, 20},
		// Inside the aborted range.
		{"inside aborted", 7, 3, 20},
		// On committed data.
		{"on data", 2, 11, 2},
	}
	for _, tc := range cases {
		commit(t, adm, "g-"+tc.name, "txn", map[int32]int64{0: tc.committed})
	}

	// A real read_committed consumer that read everything.
	cons := newClient(t, c, kgo.ConsumerGroup("reader"), kgo.ConsumeTopics("txn"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	pollAndCommit(t, cons, 7)
	cons.Close()

	o := newObserver(t, c, nil)
	got := observe(t, o)
	for _, tc := range cases {
		wantPart(t, mustFind(t, got, "g-"+tc.name, "txn"), 0, 0, 13, tc.committed, tc.lag, tc.head)
	}
	s := mustFind(t, got, "reader", "txn")
	if p := s.Partitions[0]; p.Lag != 0 || !p.HeadKnown || p.Stale {
		t.Fatalf("caught-up transactional consumer: %s", dump(got))
	}

	// An open transaction: its records are not lag until it commits.
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(t, tx, rec("txn", 0, 30, "open"))
	s = mustFind(t, observe(t, o), "g-on last marker", "txn")
	wantPart(t, s, 0, 0, 13, 12, 0, -1)
	if err := tx.EndTransaction(ctxT(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	s = mustFind(t, observe(t, o), "g-on last marker", "txn")
	// Offset 13 data, 14 its marker: lag counts offsets from the head,
	// so the trailing marker counts (as in Kafka's own tools).
	wantPart(t, s, 0, 0, 15, 12, 2, 30)
}

// compactedTopic creates topic "compacted" (one partition, cleanup.policy
// compact) holding keys k0 k1 k2 k1 k2 k3 at offsets 0-5, one batch each
// (compaction keeps the last batch), so that compacting drops offsets 1
// and 2.
func compactedTopic(t *testing.T) (*kfake.Cluster, *kadm.Client) {
	t.Helper()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "compacted", 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"),
		"retention.ms":   kadm.StringPtr("-1"), // the records are from 2023
	})
	for i, k := range []string{"k0", "k1", "k2", "k1", "k2", "k3"} {
		r := rec("compacted", 0, i, k)
		r.Key = []byte(k)
		produce(t, cl, r)
	}
	return c, adm
}

// TestCompacted: the record at the committed offset was compacted away;
// the head is the first record after it.
func TestCompacted(t *testing.T) {
	t.Parallel()
	c, adm := compactedTopic(t)
	c.Compact() // drops offsets 1 and 2 (k1, k2 rewritten at 3, 4)
	commit(t, adm, "compactor", "compacted", map[int32]int64{0: 1})
	o := newObserver(t, c, nil)
	s := mustFind(t, observe(t, o), "compactor", "compacted")
	// Offsets 1 and 2 hold nothing any more: the head is offset 3.
	wantPart(t, s, 0, 0, 6, 1, 3, 3)
}

// TestCompactionAfterCachedHead pins the refresh of cached heads: the same
// layout as TestCompacted, but the observer read the head (offset 1) before
// compaction removed it. A cached head is used for headRefresh, so the
// cycles before that cost no fetch and report the old head; the first cycle
// after it reads the head again and reports what a fresh observer does
// (head offset 3, lag 3), and then the new head is cached in turn. A failed
// refresh keeps the cached head.
func TestCompactionAfterCachedHead(t *testing.T) {
	t.Parallel()
	c, adm := compactedTopic(t)
	commit(t, adm, "compactor", "compacted", map[int32]int64{0: 1})
	clock := time.Now()
	o := newObserver(t, c, func(cfg *Config) { cfg.Now = func() time.Time { return clock } })
	wantPart(t, mustFind(t, observe(t, o), "compactor", "compacted"), 0, 0, 6, 1, 5, 1) // head offset 1

	c.Compact() // drops offsets 1 and 2
	// A fresh observer sees the head at offset 3.
	wantPart(t, mustFind(t, observe(t, newObserver(t, c, nil)), "compactor", "compacted"), 0, 0, 6, 1, 3, 3)

	fetches := countRequests(c, kmsg.Fetch)
	clock = clock.Add(headRefresh - time.Second)
	wantPart(t, mustFind(t, observe(t, o), "compactor", "compacted"), 0, 0, 6, 1, 5, 1) // cached, not yet refreshed
	if n := fetches.Load(); n != 0 {
		t.Fatalf("%d fetches before the cached head is %v old, want 0", n, headRefresh)
	}
	clock = clock.Add(time.Second)
	// A refresh that fails leaves the cached head, with no error: it is
	// no worse than before the refresh was due.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		return nil, errors.New("fetch refused"), true
	})
	wantPart(t, mustFind(t, observe(t, o), "compactor", "compacted"), 0, 0, 6, 1, 5, 1)
	// kfake closes the connection of a request it fails, so the next
	// cycle's fetch may be lost on the way too (and the cached head kept
	// again); within a few cycles the refresh gets through.
	refreshed := false
	for i := 0; i < 10 && !refreshed; i++ {
		s := mustFind(t, observe(t, o), "compactor", "compacted")
		p := s.Partitions[0]
		t.Logf("cycle %d after %v: lag %d, head +%v, fetches %d", i, headRefresh, p.Lag, p.HeadTime.Sub(base), fetches.Load())
		if refreshed = p.Lag == 3; !refreshed {
			wantPart(t, s, 0, 0, 6, 1, 5, 1) // the cached head, nothing else
		}
	}
	if !refreshed {
		t.Fatal("the cached head was not refreshed within 10 cycles")
	}
	// The new head is cached in turn: no more fetches.
	n := fetches.Load()
	for range 2 {
		wantPart(t, mustFind(t, observe(t, o), "compactor", "compacted"), 0, 0, 6, 1, 3, 3)
	}
	if m := fetches.Load(); m != n {
		t.Fatalf("%d fetches after the refresh, want none: the new head is cached", m-n)
	}
}

// TestRetentionRemovedHead: retention deleted records the group had not
// read: lag counts from the log start and the head is the log start.
func TestRetentionRemovedHead(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "short", 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")})
	old := time.Now().Add(-2 * time.Hour)
	var olds []*kgo.Record
	for i := range 5 {
		olds = append(olds, &kgo.Record{Topic: "short", Value: []byte("old"), Timestamp: old.Add(time.Duration(i) * time.Second)})
	}
	produce(t, cl, olds...) // offsets 0..4, expired
	now := time.Now().Truncate(time.Millisecond)
	produce(t, cl, &kgo.Record{Topic: "short", Value: []byte("new"), Timestamp: now},
		&kgo.Record{Topic: "short", Value: []byte("new"), Timestamp: now.Add(time.Second)}) // offsets 5, 6
	commit(t, adm, "slow", "short", map[int32]int64{0: 2})
	c.ApplyRetention()

	o := newObserver(t, c, nil)
	s := mustFind(t, observe(t, o), "slow", "short")
	p := s.Partitions[0]
	if p.LogStart != 5 || p.End != 7 || p.Committed != 2 || p.Lag != 2 || !p.HeadKnown || !p.HeadTime.Equal(now) {
		t.Fatalf("after retention: %s", dump([]lag.Sample{*s}))
	}
}

// TestRecreatedTopicFewerPartitions pins, end to end through lag.Tracker,
// that a topic deleted and recreated with fewer partitions (same name, same
// group, within the tracker's forget window) leaves no ghost partitions:
// the old partition 3, with 5 unconsumed records, must not keep its lag and
// an ever older head (which made the target stopped), since the observer no
// longer reports it.
func TestRecreatedTopicFewerPartitions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "re", 4, nil)
	produceN(t, cl, "re", 3, 5, 0) // 5 unconsumed records on partition 3
	commit(t, adm, "g", "re", map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0})
	o := newObserver(t, c, nil)
	// g has no member: abandoned at the first reading (never seen live);
	// its commit moving after the recreate shows a consumer, and the long
	// grace keeps it binding over the minutes this test folds, which are
	// about partitions.
	tr := lag.NewTracker(func(lag.Target) lag.Rules { return lag.Rules{AbandonAfter: time.Hour} })
	now := time.Now()
	if st := tr.Observe(*mustFind(t, observe(t, o), "g", "re"), now); st.Lag != 5 || len(st.Partitions) != 4 {
		t.Fatalf("before: lag %d over %d partitions, want 5 over 4", st.Lag, len(st.Partitions))
	}

	if _, err := adm.DeleteTopics(ctxT(t), "re"); err != nil {
		t.Fatal(err)
	}
	createTopic(t, adm, "re", 2, nil)
	cl2 := newClient(t, c)
	produceN(t, cl2, "re", 0, 1, 0)
	commit(t, kadm.NewClient(cl2), "g", "re", map[int32]int64{0: 1, 1: 0}) // caught up on the new topic
	var s *lag.Sample
	eventually(t, o, "recreated topic with 2 partitions", func(ss []lag.Sample) bool {
		s = find(ss, "g", "re")
		return s != nil && len(s.Partitions) == 2 && !s.Partitions[0].Stale && s.Partitions[0].Committed == 1
	})
	for range 3 {
		now = now.Add(time.Minute)
		s.At = now
		st := tr.Observe(*s, now)
		t.Logf("tracker: %d partitions, lag %d, head age %v, status %s", len(st.Partitions), st.Lag, st.HeadAge, st.Status)
		if st.Lag != 0 || len(st.Partitions) != 2 || st.HeadAge != 0 || st.Status != lag.StatusOK {
			t.Fatalf("after the recreate: lag %d over %d partitions, head age %v, status %s (%s); want 0 over 2, 0, ok",
				st.Lag, len(st.Partitions), st.HeadAge, st.Status, st.Reason)
		}
	}
}

// TestFilters: include and exclude patterns, anchored, for groups and
// topics.
func TestFilters(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"orders", "orders-dlq", "payments", "audit"} {
		createTopic(t, adm, topic, 1, nil)
		produceN(t, cl, topic, 0, 1, 0)
		for _, g := range []string{"svc-a", "svc-b", "svc-a-test", "other"} {
			commit(t, adm, g, topic, map[int32]int64{0: 0})
		}
	}
	cases := []struct {
		name   string
		groups Filter
		topics Filter
		want   []string // group/topic
	}{
		// Anchored: "svc-a" does not match "svc-a-test".
		{"anchored include", Filter{Include: []string{"svc-a"}}, Filter{Include: []string{"orders"}}, []string{"svc-a/orders"}},
		// Include and exclude together.
		{"include minus exclude", Filter{Include: []string{"svc-.*"}, Exclude: []string{".*-test"}}, Filter{Exclude: []string{".*-dlq", "audit"}},
			[]string{"svc-a/orders", "svc-a/payments", "svc-b/orders", "svc-b/payments"}},
		// Alternation stays anchored as a whole.
		{"alternation", Filter{Include: []string{"other|svc-b"}}, Filter{Include: []string{"pay.*|audit"}},
			[]string{"other/audit", "other/payments", "svc-b/audit", "svc-b/payments"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newObserver(t, c, func(cfg *Config) { cfg.Groups, cfg.Topics = tc.groups, tc.topics })
			var have []string
			for _, s := range observe(t, o) {
				have = append(have, s.Target.Group+"/"+s.Target.Topic)
			}
			if len(have) != len(tc.want) {
				t.Fatalf("got %v, want %v", have, tc.want)
			}
			for i := range have {
				if have[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", have, tc.want)
				}
			}
		})
	}
}

// TestInternalTopicsNeverWatched: offsets committed on __consumer_offsets
// (as a buggy tool might) are ignored even with an include-all filter.
func TestInternalTopicsNeverWatched(t *testing.T) {
	t.Parallel()
	for name := range internalTopics {
		o := &Observer{}
		ti, _ := o.topicTable(&kmsg.MetadataResponse{Topics: []kmsg.MetadataResponseTopic{{Topic: kmsg.StringPtr(name), Partitions: []kmsg.MetadataResponseTopicPartition{{}}}}})
		if ti[name].watched {
			t.Fatalf("%s watched", name)
		}
	}
	// And anything the broker flags internal.
	o := &Observer{}
	ti, _ := o.topicTable(&kmsg.MetadataResponse{Topics: []kmsg.MetadataResponseTopic{{Topic: kmsg.StringPtr("__other"), IsInternal: true}}})
	if ti["__other"].watched {
		t.Fatal("internal topic watched")
	}
}

// TestHeadCache: an unmoved committed offset costs no fetch; a moved one
// costs one fetch for the cycle.
func TestHeadCache(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "cached", 3, nil)
	for p := range int32(3) {
		produceN(t, cl, "cached", p, 5, int(p)*10)
	}
	commit(t, adm, "g1", "cached", map[int32]int64{0: 1, 1: 1, 2: 1})
	commit(t, adm, "g2", "cached", map[int32]int64{0: 2, 1: 2})
	fetches := countRequests(c, kmsg.Fetch)
	o := newObserver(t, c, nil)

	observe(t, o)
	first := fetches.Load()
	if first < 1 {
		t.Fatalf("first cycle made %d fetches", first)
	}
	// Unmoved offsets: no fetch, whatever the number of cycles; lag
	// grows with production and the head stays.
	for range 3 {
		produceN(t, cl, "cached", 0, 1, 99)
		s := mustFind(t, observe(t, o), "g1", "cached")
		if !s.Partitions[0].HeadKnown || !s.Partitions[0].HeadTime.Equal(base.Add(time.Second)) {
			t.Fatalf("head lost: %s", dump([]lag.Sample{*s}))
		}
	}
	if n := fetches.Load(); n != first {
		t.Fatalf("fetches grew from %d to %d without offset moves", first, n)
	}
	// A moved commit: exactly one more Fetch (one broker).
	commit(t, adm, "g1", "cached", map[int32]int64{0: 3})
	s := mustFind(t, observe(t, o), "g1", "cached")
	wantPart(t, s, 0, 0, 8, 3, 5, 3)
	if n := fetches.Load(); n != first+1 {
		t.Fatalf("fetches %d, want %d", n, first+1)
	}
	if n := o.cachedHeads(); n != 5 { // g1: p0@3 p1@1 p2@1; g2: p0@2 p1@2 (p2 no commit: no head); g1 p0@1 swept
		t.Fatalf("cache holds %d entries, want the 5 live heads", n)
	}
}

// TestOneFetchPerBroker: the heads of many partitions cost one Fetch per
// leader.
func TestOneFetchPerBroker(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.NumBrokers(3))
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "wide", 12, nil)
	offs := map[int32]int64{}
	for p := range int32(12) {
		produceN(t, cl, "wide", p, 3, int(p))
		offs[p] = 1
	}
	commit(t, adm, "g", "wide", offs)
	fetches := countRequests(c, kmsg.Fetch)
	o := newObserver(t, c, nil)
	s := mustFind(t, observe(t, o), "g", "wide")
	for p := range int32(12) {
		wantPart(t, s, p, 0, 3, 1, 2, int(p)+1)
	}
	if n := fetches.Load(); n > 3 {
		t.Fatalf("%d fetches for 12 partitions on 3 brokers", n)
	}
}

// TestManyGroupsOnePartition: groups waiting on different offsets of one
// partition all get their heads within a few cycles (one offset per
// partition per fetch, rotating).
func TestManyGroupsOnePartition(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "shared", 1, nil)
	produceN(t, cl, "shared", 0, 2000, 0)
	for i, at := range []int64{0, 700, 1400} {
		commit(t, adm, string(rune('a'+i)), "shared", map[int32]int64{0: at})
	}
	o := newObserver(t, c, func(cfg *Config) { cfg.HeadFetchPartitionBytes = 1024 })
	got := eventually(t, o, "all heads known", func(got []lag.Sample) bool {
		for _, s := range got {
			if !s.Partitions[0].HeadKnown {
				return false
			}
		}
		return len(got) == 3
	})
	for i, at := range []int64{0, 700, 1400} {
		wantPart(t, mustFind(t, got, string(rune('a'+i)), "shared"), 0, 0, 2000, at, 2000-at, int(at))
	}
}

// TestFailingBroker: one broker of three hangs, or closes every connection;
// the partitions it leads are stale, the rest are fresh, a group it
// coordinates is reported stale from the last good cycle, and nothing
// reports a lag spike.
func TestFailingBroker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		fail func() (kmsg.Response, error, bool)
	}{
		// Requests are read and never answered: clients time out.
		{"hang", func() (kmsg.Response, error, bool) { return nil, nil, true }},
		// Every request closes the connection.
		{"error", func() (kmsg.Response, error, bool) { return nil, errors.New("broker down"), true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testFailingBroker(t, tc.fail)
		})
	}
}

func testFailingBroker(t *testing.T, fail func() (kmsg.Response, error, bool)) {
	c := newCluster(t, kfake.NumBrokers(3))
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "spread", 6, nil)
	offs := map[int32]int64{}
	for p := range int32(6) {
		produceN(t, cl, "spread", p, 4, 0)
		offs[p] = 1
	}
	// A group whose coordinator is not the failing broker, and one whose
	// coordinator is.
	bad := c.LeaderFor("spread", 0)
	var okGroup, badGroup string
	for i := 0; okGroup == "" || badGroup == ""; i++ {
		g := fmt.Sprintf("group-%d", i)
		switch {
		case c.CoordinatorFor(g) == bad && badGroup == "":
			badGroup = g
		case c.CoordinatorFor(g) != bad && okGroup == "":
			okGroup = g
		}
	}
	commit(t, adm, okGroup, "spread", offs)
	commit(t, adm, badGroup, "spread", offs)

	o := newObserver(t, c, func(cfg *Config) { cfg.RequestTimeout = 1500 * time.Millisecond })
	before := observe(t, o) // a good cycle first: the observer learns the pairs
	if s := mustFind(t, before, badGroup, "spread"); s.Err != "" {
		t.Fatalf("healthy cycle: %s", dump(before))
	}

	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() != bad {
			return nil, nil, false
		}
		return fail()
	})
	for cycle := range 2 { // the second cycle starts with a broken connection pool
		start := time.Now()
		got := observe(t, o)
		if d := time.Since(start); d > 4*1500*time.Millisecond {
			t.Fatalf("cycle %d took %v", cycle, d)
		}
		s := mustFind(t, got, okGroup, "spread")
		if s.Err != "" {
			t.Fatalf("group on a healthy coordinator: %s", dump(got))
		}
		var stale int
		for p := range int32(6) {
			ps := s.Partitions[p]
			if c.LeaderFor("spread", p) == bad {
				stale++
				if !ps.Stale || ps.Err == "" || ps.Lag != 0 {
					t.Fatalf("p%d led by the failing broker: %s", p, dump(got))
				}
				continue
			}
			wantPart(t, s, p, 0, 4, 1, 3, 1)
		}
		if stale == 0 {
			t.Fatal("no partition on the failing broker")
		}
		// The group coordinated by the failing broker: the whole
		// target is stale, with no lag from a missing commit.
		s = mustFind(t, got, badGroup, "spread")
		if s.Err == "" || len(s.Partitions) != 6 {
			t.Fatalf("group on the failing coordinator: %s", dump(got))
		}
		for _, ps := range s.Partitions {
			if !ps.Stale || ps.Lag != 0 {
				t.Fatalf("group on the failing coordinator: %s", dump(got))
			}
		}
	}
}

// TestUnavailable: with no broker reachable Observe fails with
// ErrUnavailable within the request timeout.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := c.ListenAddrs()
	c.Close()
	o, err := New(Config{Cluster: "gone", Brokers: addrs, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	start := time.Now()
	_, err = o.Observe(ctxT(t))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestNotKafkaListener: a broker address where another protocol answers
// (a NATS server's port: its "INFO {...}" greeting read as a 1.2 GB size)
// fails with ErrUnavailable and a hint that says the address is not a
// Kafka listener; franz-go alone said "invalid large response size
// 1229866575 > limit 104857600: response exceeds BrokerMaxReadBytes" (a
// new user's swapped kafka and nats addresses, session 29).
func TestNotKafkaListener(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("INFO {\"server_id\":\"x\",\"version\":\"2.15.2\"}\r\n"))
			_ = conn.Close()
		}
	}()
	o, err := New(Config{Cluster: "nats-port", Brokers: []string{ln.Addr().String()}, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	_, err = o.Observe(ctxT(t))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not Kafka's: is each of kafka[].brokers a Kafka listener") {
		t.Fatalf("err %v, want ErrUnavailable saying the address is not a Kafka listener", err)
	}
}

// TestNotKafkaListenerKafkaOverLimit: a real Kafka answer over the
// caller's kgo.BrokerMaxReadBytes (here kfake's metadata for 8 topics of
// 50 partitions, about 10 kB, against a 1,500-byte limit) is Kafka's, and
// gets franz-go's error without the not-Kafka hint.
func TestNotKafkaListenerKafkaOverLimit(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(50, "a", "b", "c", "d", "e", "f", "g", "h"))
	o := newObserver(t, c, nil, kgo.FetchMaxBytes(1000), kgo.BrokerMaxReadBytes(1500))
	_, err := o.Observe(ctxT(t))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "response exceeds BrokerMaxReadBytes") || strings.Contains(err.Error(), "not Kafka's") {
		t.Fatalf("err %v, want ErrUnavailable with franz-go's size error and no not-Kafka hint", err)
	}
}

// TestClose: Close is idempotent and Observe after it fails with
// ErrClosed.
func TestClose(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newObserver(t, c, nil)
	o.Close()
	o.Close()
	if _, err := o.Observe(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v, want ErrClosed", err)
	}
}

// TestConcurrentObserveAndClose: Observe serializes itself and may race
// with Close; every goroutine ends and nothing panics.
func TestConcurrentObserveAndClose(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "busy", 2, nil)
	produceN(t, cl, "busy", 0, 3, 0)
	commit(t, adm, "g", "busy", map[int32]int64{0: 1})
	o := newObserver(t, c, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 5 {
				_, err := o.Observe(ctxT(t))
				if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnavailable) {
					t.Errorf("observe: %v", err)
				}
			}
		})
	}
	observe(t, o)
	o.Close()
	wg.Wait()
}
