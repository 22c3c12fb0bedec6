package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLagShards: with shards, /v1/lag lists every shard's owner beside this
// replica's targets, filtered by the cluster query like the targets;
// without, it has no shards field at all.
func TestLagShards(t *testing.T) {
	views := []ShardView{
		{Cluster: "c1", Shard: 0, Owner: "r0", Self: true},
		{Cluster: "c1", Shard: 1, Owner: "r1", Decisions: 3, DecisionsAt: t0},
		{Cluster: "c2", Shard: 0, Owner: "r1"},
	}
	cases := []struct {
		name   string
		shards func() []ShardView
		query  string
		want   int  // shards listed
		field  bool // "shards" present in the JSON
	}{
		{"no sharding: no field", nil, "", 0, false},
		{"every shard of every cluster", func() []ShardView { return views }, "", 3, true},
		{"one cluster's", func() []ShardView { return views }, "?cluster=c1", 2, true},
		{"a cluster without shards", func() []ShardView { return views }, "?cluster=c3", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewHandler(testStore(), prometheus.NewRegistry())
			h.Shards = c.shards
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/lag"+c.query, nil))
			if rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["shards"]; ok != c.field {
				t.Errorf("shards field present %v, want %v: %s", ok, c.field, rec.Body)
			}
			var resp LagResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			if len(resp.Shards) != c.want {
				t.Errorf("%d shards listed, want %d: %+v", len(resp.Shards), c.want, resp.Shards)
			}
			for _, s := range resp.Shards {
				if s.Cluster == "c1" && s.Shard == 1 && (s.Decisions != 3 || !s.DecisionsAt.Equal(t0)) {
					t.Errorf("shard c1/1 as served: %+v", s)
				}
			}
		})
	}
}
