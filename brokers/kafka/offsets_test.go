package kafka

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/internal/testutil"
)

// offsetFetchBody encodes resp as a broker would (kmsg's encoder), without
// the response header.
func offsetFetchBody(tb testing.TB, version int16) []byte {
	tb.Helper()
	meta := "m"
	resp := kmsg.NewOffsetFetchResponse()
	resp.Version = version
	resp.ThrottleMillis = 7
	for g, name := range []string{"g1", "g2"} {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group = name
		if g == 1 {
			rg.ErrorCode = 16 // NOT_COORDINATOR
		}
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = "orders"
		rt.TopicID = [16]byte{1, 2, 3}
		for p := range int32(3) {
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition = p
			rp.Offset = int64(100 + p)
			rp.LeaderEpoch = 4
			rp.Metadata = &meta
			if p == 2 {
				rp.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		rg.Topics = append(rg.Topics, rt)
		resp.Groups = append(resp.Groups, rg)
	}
	return resp.AppendTo(nil)
}

func TestOffsetFetchDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int16
	}{
		{"v8 topic names", 8},
		{"v9 topic names", 9},
		{"v10 topic ids", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := offsetFetchBody(t, tc.version)
			// Decode twice into the same answer: the second reuses it.
			into := new(offsetsAnswer)
			for range 2 {
				r := &offsetFetchResp{into: into}
				r.Version = tc.version
				if err := r.ReadFrom(body); err != nil {
					t.Fatal(err)
				}
				if r.ThrottleMillis != 7 {
					t.Errorf("throttle %d, want 7", r.ThrottleMillis)
				}
			}
			if len(into.groups) != 2 || into.groups[0].name != "g1" || into.groups[1].name != "g2" {
				t.Fatalf("groups %+v", into.groups)
			}
			if g := into.groups[1]; !moved(g.code) {
				t.Errorf("g2 code %d, want NOT_COORDINATOR", g.code)
			}
			tp := into.groups[0].topics
			if len(tp) != 1 {
				t.Fatalf("topics %+v", tp)
			}
			if tc.version >= 10 {
				if tp[0].id != ([16]byte{1, 2, 3}) || tp[0].name != "" {
					t.Errorf("v%d topic %q %v, want the id only", tc.version, tp[0].name, tp[0].id)
				}
			} else if tp[0].name != "orders" || tp[0].id != ([16]byte{}) {
				t.Errorf("v%d topic %q %v, want the name only", tc.version, tp[0].name, tp[0].id)
			}
			want := []answerPart{{0, 100, 0}, {1, 101, 0}, {2, 102, 3}}
			if len(tp[0].parts) != len(want) {
				t.Fatalf("parts %+v, want %+v", tp[0].parts, want)
			}
			for i := range want {
				if tp[0].parts[i] != want[i] {
					t.Errorf("part %d %+v, want %+v", i, tp[0].parts[i], want[i])
				}
			}
		})
	}
}

// A broker's answer cut short or lying about its lengths is an error, never
// a panic or a huge allocation.
func TestOffsetFetchDecodeMalformed(t *testing.T) {
	body := offsetFetchBody(t, 10)
	for n := range len(body) - 1 {
		r := &offsetFetchResp{into: new(offsetsAnswer)}
		r.Version = 10
		if err := r.ReadFrom(body[:n]); !errors.Is(err, errMalformedOffsetFetch) {
			t.Fatalf("truncated at %d of %d: err %v, want malformed", n, len(body), err)
		}
		if len(r.into.groups) != 0 {
			t.Fatalf("truncated at %d: kept %d groups", n, len(r.into.groups))
		}
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"group count past the body", []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}},
		{"string length past the body", []byte{0, 0, 0, 0, 2, 0xff, 0x7f, 'g'}},
		{"unterminated varint", []byte{0, 0, 0, 0, 0x80, 0x80}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &offsetFetchResp{into: new(offsetsAnswer)}
			r.Version = 8
			if err := r.ReadFrom(tc.body); !errors.Is(err, errMalformedOffsetFetch) {
				t.Fatalf("err %v, want malformed", err)
			}
		})
	}
}

func TestListOffsetsDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int16
	}{
		{"v5 through kmsg", 5},
		{"v6 flexible", 6},
		{"v9 flexible", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := kmsg.NewListOffsetsResponse()
			resp.Version = tc.version
			for _, name := range []string{"a", "b"} {
				rt := kmsg.NewListOffsetsResponseTopic()
				rt.Topic = name
				for p := range int32(2) {
					rp := kmsg.NewListOffsetsResponseTopicPartition()
					rp.Partition, rp.Offset, rp.Timestamp, rp.LeaderEpoch = p, 40+int64(p), 1234, 3
					if name == "b" && p == 1 {
						rp.ErrorCode = 6 // NOT_LEADER_OR_FOLLOWER
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			body := resp.AppendTo(nil)
			into := new(offsetsListed)
			for range 2 { // the second decode reuses the answer
				r := &listOffsetsResp{into: into}
				r.Version = tc.version
				if err := r.ReadFrom(body); err != nil {
					t.Fatal(err)
				}
			}
			if len(into.topics) != 2 || into.topics[0].name != "a" || into.topics[1].name != "b" {
				t.Fatalf("topics %+v", into.topics)
			}
			want := []listedPart{{0, 0, 40}, {1, 6, 41}}
			got := into.topics[1].parts
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("b's partitions %+v, want %+v", got, want)
			}
			if !leaderMoved(got[1].code) {
				t.Errorf("code %d is not a moved leader", got[1].code)
			}
			if tc.version < 6 {
				return
			}
			for n := range len(body) - 1 {
				r := &listOffsetsResp{into: new(offsetsListed)}
				r.Version = tc.version
				if err := r.ReadFrom(body[:n]); !errors.Is(err, errMalformedListOffsets) {
					t.Fatalf("truncated at %d of %d: err %v, want malformed", n, len(body), err)
				}
			}
		})
	}
}

// TestOffsetFetchBatches: a coordinator's groups are asked in as few
// OffsetFetch requests as keep each answer within the budget, planned from
// the cluster's size for groups not seen before and from each group's last
// answer after; every batch's groups are reported.
func TestOffsetFetchBatches(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	createTopic(t, adm, "batched", 4, nil)
	produceN(t, cl, "batched", 0, 3, 0)
	groups := []string{"b1", "b2", "b3", "b4", "b5", "b6"}
	for i, g := range groups {
		commit(t, adm, g, "batched", map[int32]int64{0: int64(i % 3), 1: 0})
	}
	fetches := countRequests(c, kmsg.OffsetFetch)
	for _, tc := range []struct {
		name     string
		budget   int // 0: the default
		requests int64
	}{
		{"default budget: one request", 0, 1},
		{"budget below one group: one request per group", 1, int64(len(groups))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newObserver(t, c, nil)
			if o.answerBudget < 1<<20 {
				t.Fatalf("default budget %d B, want at least 1 MiB", o.answerBudget)
			}
			if tc.budget > 0 {
				o.answerBudget = tc.budget
			}
			for cycle := range 2 { // planned from the cluster, then from the answers
				f0 := fetches.Load()
				got, err := o.Observe(ctxT(t))
				if err != nil {
					t.Fatal(err)
				}
				if n := fetches.Load() - f0; n != tc.requests {
					t.Errorf("cycle %d: %d OffsetFetch requests, want %d", cycle, n, tc.requests)
				}
				for i, g := range groups {
					s := mustFind(t, got, g, "batched")
					if s.Err != "" || s.Partitions[0].Committed != int64(i%3) || s.Partitions[1].Committed != 0 || s.Partitions[2].Committed != -1 {
						t.Errorf("cycle %d: %s: err %q, partitions %+v", cycle, g, s.Err, s.Partitions)
					}
					if o.offsets[g].size == 0 {
						t.Errorf("cycle %d: %s: answer size not recorded", cycle, g)
					}
				}
			}
		})
	}
}

// TestAskedAgainThroughKgo: a group whose coordinator answers
// NOT_COORDINATOR, and partitions whose leader answers
// NOT_LEADER_OR_FOLLOWER, are asked again through kgo's sharded path in the
// same cycle, which reports them fresh.
func TestAskedAgainThroughKgo(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		key    kmsg.Key
		answer func(kmsg.Request) kmsg.Response
	}{
		{"coordinator moved", kmsg.OffsetFetch, func(kreq kmsg.Request) kmsg.Response {
			req := kreq.(*kmsg.OffsetFetchRequest)
			resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
			for _, g := range req.Groups {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = g.Group, 16 // NOT_COORDINATOR
				resp.Groups = append(resp.Groups, rg)
			}
			return resp
		}},
		{"leader moved", kmsg.ListOffsets, func(kreq kmsg.Request) kmsg.Response {
			return testutil.ListOffsetsError(kreq.(*kmsg.ListOffsetsRequest), 6) // NOT_LEADER_OR_FOLLOWER
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			cl := newClient(t, c)
			adm := kadm.NewClient(cl)
			createTopic(t, adm, "again", 2, nil)
			produceN(t, cl, "again", 0, 3, 0)
			produceN(t, cl, "again", 1, 3, 0)
			commit(t, adm, "ga", "again", map[int32]int64{0: 1, 1: 2})
			o := newObserver(t, c, nil)
			var fired atomic.Bool
			c.ControlKey(int16(tc.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
				fired.Store(true)
				return tc.answer(req), nil, true // once
			})
			got, err := o.Observe(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if !fired.Load() {
				t.Fatal("the broker never answered with the error")
			}
			s := mustFind(t, got, "ga", "again")
			if s.Err != "" {
				t.Fatalf("sample error %q", s.Err)
			}
			for p, committed := range []int64{1, 2} {
				ps := s.Partitions[p]
				if ps.Stale || ps.Err != "" || ps.Committed != committed || ps.End != 3 || ps.Lag != 3-committed {
					t.Errorf("partition %d: %+v, want committed %d, end 3, fresh", p, ps, committed)
				}
			}
		})
	}
}
