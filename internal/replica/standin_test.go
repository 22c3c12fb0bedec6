package replica

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/quota"
)

// encodeDecisions is a decisions record as a leader writes it.
func encodeDecisions(tb testing.TB, rec decisionsRecord) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(rec); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestStandInAgainstFreshRecord: a follower decides the leader is silent
// and, at that very moment, a fresh record of the leader arrives on the
// channel's goroutine. Whichever comes first, the follower ends serving
// the leader's sets: it never stands in against a leader it has just
// heard from.
func TestStandInAgainstFreshRecord(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := quotaserver.NewHub()
	t.Cleanup(hub.Close)
	const silence = time.Second
	r := New(Config{Elector: &role{}, Hub: hub, Lifetime: time.Minute, Silence: silence, Log: log})
	eng, err := engine.New(engine.Config{Hub: r.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetEngine(eng)
	r.synced, r.lastLeader = true, time.Now().Add(-2*silence)
	rate := 5.0
	fresh := encodeDecisions(t, decisionsRecord{At: time.Now(), By: "leader", Rates: []targetRate{{Target: ordersTarget, Rate: &rate}}})
	done := make(chan struct{})
	started := false
	r.sink.beforeAct = func(on bool) {
		if !on || started {
			return
		}
		started = true
		// The record arrives between the decision and the start: give
		// it all the time it needs unless it waits for the start.
		go func() { r.followDecisions(fresh); close(done) }()
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	r.checkSilence(time.Now())
	<-done
	if !started {
		t.Fatal("the follower did not take the leader for silent")
	}
	r.sink.mu.Lock()
	acting := r.sink.acting
	r.sink.mu.Unlock()
	if acting {
		t.Error("the follower stands in although the leader's fresh record was read")
	}
}
