package consumerclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testDaemon is the daemon's side of consumer reports, from its real
// pieces: the quota protocol's HTTP server with the report endpoint and
// store, and (with a source) an observation loop folding the reports into
// the store of states that /v1/lag serves.
type testDaemon struct {
	URL       string
	Consumers *quotaserver.Consumers
	Store     *daemon.Store
}

// newTestDaemon serves the report endpoint with auth and reports fresh for
// fresh. With src it runs an observation loop of cluster "main" every
// 100ms until the test ends.
func newTestDaemon(tb testing.TB, auth quotaserver.Auth, fresh time.Duration, kind lag.Kind, src daemon.Source) *testDaemon {
	tb.Helper()
	reg := prometheus.NewRegistry()
	hub := quotaserver.NewHub()
	qs := quotaserver.New(hub, nil, auth, reg)
	d := &testDaemon{Consumers: quotaserver.NewConsumers(quotaserver.ConsumersConfig{Fresh: fresh}, reg)}
	mux := http.NewServeMux()
	d.Consumers.Register(mux, qs)
	ts := httptest.NewServer(mux)
	d.URL = ts.URL
	tb.Cleanup(func() { hub.Close(); ts.Close() })
	if src == nil {
		return d
	}
	d.Store = daemon.NewStore(map[string]lag.Kind{"main": kind})
	l := &daemon.Loop{Name: "main", Kind: kind, Source: src, Interval: 100 * time.Millisecond, Store: d.Store, Reports: d.Consumers}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	return d
}

// waitState polls the daemon's store, one cycle at a time, until ok holds
// for the state of target, and returns that state.
func (d *testDaemon) waitState(tb testing.TB, target lag.Target, what string, ok func(lag.State) bool) lag.State {
	tb.Helper()
	updates, unsub := d.Store.Subscribe()
	defer unsub()
	deadline := time.After(15 * time.Second)
	var last lag.State
	for {
		for _, st := range d.Store.States() {
			if st.Target == target {
				if last = st; ok(st) {
					return st
				}
			}
		}
		select {
		case <-updates:
		case <-deadline:
			tb.Fatalf("%s: never happened; last state %+v", what, last)
		}
	}
}

// waitFor polls cond every 10ms until it holds, for at most 15s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: never happened", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
