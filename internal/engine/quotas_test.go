package engine

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestQuotasJSON pins the body of /v1/quotas byte for byte, as the server
// renders the engine's view, against the encoding it had when the view was
// a map[string]any (keys sorted: policies, producers, targets): a consumer
// slowed under two producers, one of them also on a topic no policy
// matches. It compares with that encoding of the same state, not a golden
// file, so that the controller's figures may change and the shape may not.
func TestQuotasJSON(t *testing.T) {
	c := &clock{now: t0}
	e, hub := newEngine(t, c, twoProducers)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	for _, r := range []quotaproto.Report{
		{Producer: "checkout", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 400}, {Topic: "elsewhere"}}},
		{Producer: "batch", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 600, Criticality: "SHEDDABLE"}}},
	} {
		if _, err := e.Report(r); err != nil {
			t.Fatal(err)
		}
	}
	w.consume = 400
	w.cycles(4)

	mux := http.NewServeMux()
	quotaserver.New(hub, e, quotaserver.Auth{}, prometheus.NewRegistry()).Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/quotas", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/quotas: %d %s", rec.Code, rec.Body)
	}
	var want bytes.Buffer
	sets := hub.All()
	slices.SortFunc(sets, func(a, b quotaproto.LeaseSet) int { return strings.Compare(a.Producer, b.Producer) })
	old := map[string]any{"targets": e.Decisions(), "policies": e.policies.List(), "producers": sets}
	if err := json.NewEncoder(&want).Encode(old); err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 || len(e.Decisions()) != 1 {
		t.Fatalf("%d sets, %d decisions: want 2 and 1", len(sets), len(e.Decisions()))
	}
	if !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
		t.Fatalf("GET /v1/quotas:\n%s\nwant:\n%s", rec.Body, want.Bytes())
	}
}
