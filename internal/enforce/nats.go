package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamManager is the part of jetstream.JetStream the [StreamEnforcer]
// uses.
type StreamManager interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
	UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
}

// StreamSpec is what a policy wants of one stream.
type StreamSpec struct {
	// Stream is the stream name. Required.
	Stream string
	// MaxAge is the stream MaxAge the policy wants (see [DesiredMaxAge]).
	// Zero: MaxAge is not checked.
	MaxAge time.Duration
	// AllowMsgTTL, when true, requires the stream to allow per-message TTL
	// (the Nats-TTL header, server 2.11+). False: not checked (the server
	// cannot turn it off once on).
	AllowMsgTTL bool
}

// DesiredMaxAge is the stream MaxAge for a policy: its hard age when set,
// else its maxAge. Stream MaxAge deletes messages for every consumer of the
// stream, so it takes the most permissive bound the policy states.
func DesiredMaxAge(maxAge, hardAge time.Duration) time.Duration {
	if hardAge > 0 {
		return hardAge
	}
	return maxAge
}

// StreamDrift is what one [StreamEnforcer.Enforce] call found and did.
type StreamDrift struct {
	Cluster, Stream string
	// Have* is the stream's configuration before the call, Want* the
	// policy's (WantMaxAge 0 and WantAllowMsgTTL false: not checked).
	HaveMaxAge, WantMaxAge           time.Duration
	HaveAllowMsgTTL, WantAllowMsgTTL bool
	// Changes describes each difference ("max_age 0s -> 1m0s"); empty when
	// the stream is in line.
	Changes []string
	// DryRun: nothing was changed. Applied: the stream was updated.
	DryRun, Applied bool
}

// Drifted reports whether the stream differed from the policy.
func (d StreamDrift) Drifted() bool { return len(d.Changes) > 0 }

// StreamEnforcerConfig configures a [StreamEnforcer]. The zero value is
// valid.
type StreamEnforcerConfig struct {
	// Cluster names the NATS cluster in logs and metric labels.
	Cluster string
	// Logger receives a warning per drift found and an info line per
	// update. Nil: discard.
	Logger *slog.Logger
	// Metrics: nil counts nothing.
	Metrics *Metrics
}

// StreamEnforcer keeps JetStream streams' time bounds in line with their
// policies. Safe for concurrent use.
type StreamEnforcer struct {
	js  StreamManager
	cfg StreamEnforcerConfig
	log *slog.Logger
}

// NewStreamEnforcer returns an enforcer using js (a jetstream.JetStream
// the caller owns).
func NewStreamEnforcer(js StreamManager, cfg StreamEnforcerConfig) *StreamEnforcer {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StreamEnforcer{js: js, cfg: cfg, log: log}
}

// Enforce compares the stream's MaxAge and AllowMsgTTL with spec and
// reports the drift. Unless dryRun, it then updates the stream
// (UpdateStream with the current config plus the wanted values; nothing
// else changes). Lowering MaxAge makes the server delete every message
// older than the new bound at once, for every consumer of the stream.
//
// Errors: ErrInvalidArgument for an empty stream name or negative MaxAge,
// else the wrapped JetStream error (jetstream.ErrStreamNotFound, ...).
func (e *StreamEnforcer) Enforce(ctx context.Context, spec StreamSpec, dryRun bool) (StreamDrift, error) {
	d := StreamDrift{Cluster: e.cfg.Cluster, Stream: spec.Stream, WantMaxAge: spec.MaxAge, WantAllowMsgTTL: spec.AllowMsgTTL, DryRun: dryRun}
	if spec.Stream == "" || spec.MaxAge < 0 {
		return d, fmt.Errorf("%w: stream %q maxAge %v (want a name and maxAge >= 0)", ErrInvalidArgument, spec.Stream, spec.MaxAge)
	}
	s, err := e.js.Stream(ctx, spec.Stream)
	if err != nil {
		return d, fmt.Errorf("enforce: stream %q: %w", spec.Stream, err)
	}
	info := s.CachedInfo()
	if info == nil {
		return d, fmt.Errorf("enforce: stream %q: %w", spec.Stream, errors.New("no stream info"))
	}
	cfg := info.Config
	d.HaveMaxAge, d.HaveAllowMsgTTL = cfg.MaxAge, cfg.AllowMsgTTL
	if spec.MaxAge > 0 && cfg.MaxAge != spec.MaxAge {
		d.Changes = append(d.Changes, fmt.Sprintf("max_age %v -> %v", cfg.MaxAge, spec.MaxAge))
		cfg.MaxAge = spec.MaxAge
		// The server refuses a duplicates window longer than MaxAge (its
		// default is 2m): shorten it with MaxAge, and say so.
		if cfg.Duplicates > cfg.MaxAge {
			d.Changes = append(d.Changes, fmt.Sprintf("duplicate_window %v -> %v", cfg.Duplicates, cfg.MaxAge))
			cfg.Duplicates = cfg.MaxAge
		}
	}
	if spec.AllowMsgTTL && !cfg.AllowMsgTTL {
		d.Changes = append(d.Changes, "allow_msg_ttl false -> true")
		cfg.AllowMsgTTL = true
	}
	if !d.Drifted() {
		e.cfg.Metrics.streamChecked(e.cfg.Cluster, spec.Stream, false, false)
		return d, nil
	}
	e.log.Warn("ttl: stream time bounds differ from policy", "cluster", e.cfg.Cluster, "stream", spec.Stream,
		"changes", d.Changes, "dryRun", dryRun)
	if dryRun {
		e.cfg.Metrics.streamChecked(e.cfg.Cluster, spec.Stream, true, false)
		return d, nil
	}
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		e.cfg.Metrics.streamChecked(e.cfg.Cluster, spec.Stream, true, false)
		return d, fmt.Errorf("enforce: update stream %q: %w", spec.Stream, err)
	}
	d.Applied = true
	e.cfg.Metrics.streamChecked(e.cfg.Cluster, spec.Stream, true, true)
	e.log.Info("ttl: stream time bounds updated to match policy", "cluster", e.cfg.Cluster, "stream", spec.Stream, "changes", d.Changes)
	return d, nil
}
