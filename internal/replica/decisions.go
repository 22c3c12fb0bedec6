package replica

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// The leader's decisions travel under the key "c.leader": every follower's
// controller adopts them (engine.Engine.Follow), so that one taking over
// continues the leader's regime rather than its own, diverged one.
const kindDecisions = "c"

var decisionsKey = key(kindDecisions, "leader")

// decisionsRecord is the rate in force of each target the leader decides,
// and when it wrote them.
type decisionsRecord struct {
	At    time.Time    `json:"at"`
	Rates []targetRate `json:"rates"`
	// By identifies the writing replica (Replicator.self): a replica
	// reads its own records back, late, after its lease lapsed too.
	By string `json:"by,omitempty"`
	// ID is the writing replica's Config.ID: a lost leader is no
	// candidate to write client quotas in its stead (ClientQuotaStandIn).
	ID string `json:"id,omitempty"`
	// Rewriting: the leader took over and has not yet written all its
	// sets. The record is a sign of its life, but does not end a
	// follower's standing in: the sets it would serve instead may still
	// be the lost leader's.
	Rewriting bool `json:"rw,omitempty"`
}

// targetRate is a target's allowed rate, msg/s (nil: unlimited), and
// the capacity the decision worked with, msg/s.
type targetRate struct {
	Target   lag.Target `json:"t"`
	Rate     *float64   `json:"r,omitempty"`
	Capacity float64    `json:"c,omitempty"`
}

// kickDecisions wakes the decisions goroutine (beat).
func (r *Replicator) kickDecisions() {
	select {
	case r.decide <- struct{}{}:
	default:
	}
}

// beat, on the decisions goroutine, writes the leader's decisions while
// this replica leads: every interval (tick), so that a steady leader's
// record stays fresh whatever else it writes, and when they changed.
func (r *Replicator) beat(ctx context.Context, tick bool) {
	fctx, cancel, lead := leader.Fence(ctx, r.cfg.Elector, time.Now())
	defer cancel()
	if !lead || !r.sink.isLeading() {
		r.decided = nil
		return
	}
	wctx, wcancel := context.WithTimeout(fctx, 10*time.Second)
	defer wcancel()
	err := r.writeDecisions(wctx, time.Now(), tick)
	switch {
	case err != nil && ctx.Err() == nil && !r.failing:
		r.cfg.Log.Warn("writing the leader's decisions to the lease state", "err", err)
		r.failing = true
	case err == nil && r.failing:
		r.cfg.Log.Info("writing the leader's decisions to the lease state recovered")
		r.failing = false
	}
}

// writeDecisions writes the leader's decisions when they changed, or
// always (force).
func (r *Replicator) writeDecisions(ctx context.Context, now time.Time, force bool) error {
	ds, _ := r.eng.Quotas()
	rates := make([]targetRate, len(ds))
	for i, d := range ds {
		rates[i].Target, rates[i].Capacity = d.Target, d.Capacity
		if !d.IsUnlimited() {
			rates[i].Rate = &d.Rate
		}
	}
	sum, err := json.Marshal(rates)
	if err != nil {
		return err
	}
	rw := r.rewriting.Load()
	if !force && bytes.Equal(sum, r.decided) && rw == r.decidedRw {
		return nil
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(decisionsRecord{At: now, Rates: rates, By: r.self, ID: r.cfg.ID, Rewriting: rw}); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := r.cfg.Channel.Put(ctx, decisionsKey, buf.Bytes()); err != nil {
		return err
	}
	r.decided, r.decidedRw = sum, rw
	return nil
}

// followDecisions gives a leader's decisions record to the engine while
// following; one older than the lease lifetime is ignored (its leader is
// gone: its figures are too old to continue from).
//
// Every record read, also while leading, dates the leader's last sign of
// life (see Config.Silence); a fresh one ends a follower's serving its own
// sets. A replica's own records, read back, are ignored: one read after its
// lease lapsed would have it adopt its own past decisions as a leader's.
func (r *Replicator) followDecisions(v []byte) {
	if v == nil {
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(v))
	var rec decisionsRecord
	if err == nil {
		err = json.NewDecoder(io.LimitReader(zr, 64<<20)).Decode(&rec)
	}
	if err != nil {
		r.cfg.Log.Warn("replicated lease state: the leader's decisions ignored", "err", err)
		return
	}
	if rec.By == r.self {
		// Its own, read back: neither another leader's decisions to
		// adopt nor a sign of another leader's life.
		return
	}
	r.mu.Lock()
	if rec.At.After(r.lastLeader) {
		r.leaderID = rec.ID
	}
	r.mu.Unlock()
	if !r.heard(rec.At, rec.Rewriting) || time.Since(rec.At) > r.cfg.Lifetime {
		return
	}
	ds := make([]quota.Decision, len(rec.Rates))
	for i, tr := range rec.Rates {
		ds[i] = quota.Decision{Target: tr.Target, Rate: quota.Unlimited, Capacity: tr.Capacity}
		if tr.Rate != nil {
			ds[i].Rate = *tr.Rate
		}
	}
	r.mu.Lock()
	r.leaderDs, r.leaderAt = ds, rec.At
	r.mu.Unlock()
	r.eng.Follow(ds)
}

// heard dates the leader's last sign of life at at and, when that is
// fresh and the leader's sets are written (not rewriting), ends this
// follower's standing in, in one step against checkSilence
// (Replicator.standMu). It reports whether this replica follows.
func (r *Replicator) heard(at time.Time, rewriting bool) bool {
	r.standMu.Lock()
	defer r.standMu.Unlock()
	r.mu.Lock()
	if at.After(r.lastLeader) {
		r.lastLeader = at
	}
	if !rewriting && at.After(r.lastSets) {
		r.lastSets = at
	}
	fresh := r.cfg.Silence > 0 && time.Since(at) <= r.serve() && !rewriting
	if fresh {
		r.acted = false
	}
	r.mu.Unlock()
	if r.sink.isLeading() {
		return false
	}
	if fresh && r.sink.act(false, 0) {
		r.cfg.Log.Info("a leader writes the lease state again: serving its lease sets")
	}
	return true
}

// followLast gives the engine the last leader's decisions read once more,
// when this replica starts leading: since the leader was lost (a session
// timeout ago, if it died) its controller stepped on its own, probing
// rates no producer was given, and may have released them; it continues
// from the last leader's decisions instead. Not when they are older than
// the lease lifetime, and once only: a replica leading again after a
// lapse of its own lease, no other leader having written meanwhile, goes
// on from its own regime, not back to the leader's before it.
//
// A replica that served its own sets since the last record (the leader
// fell silent, Config.Silence) goes on with its own regime, which its
// producers obeyed: it adopts its own decisions, which only delays their
// release as an adoption does (quota.Controller.Adopt: the producers held
// the lost leader's leases, and its broker-side quotas, until now).
func (r *Replicator) followLast() {
	r.mu.Lock()
	ds, at, acted := r.leaderDs, r.leaderAt, r.acted
	r.leaderDs = nil
	r.mu.Unlock()
	switch {
	case acted:
		own, _ := r.eng.Quotas()
		r.eng.Follow(own)
	case len(ds) > 0 && time.Since(at) <= r.cfg.Lifetime:
		r.eng.Follow(ds)
	}
}
