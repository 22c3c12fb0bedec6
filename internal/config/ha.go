package config

import (
	"fmt"
	"os"
	"time"
)

// HA runs several replicas of the daemon. Per watched cluster, one replica
// is elected leader through that cluster (a consumer group on Kafka, a KV
// key on NATS); only the leader writes Kafka client quotas, the NATS KV
// lease bucket and TTL enforcement. Every replica observes and serves the
// quota protocol. Zero value: one replica, which always leads (as without
// replicas).
type HA struct {
	// Enabled turns elections on. Default false. Env LAGBRIDGE_HA_ENABLED.
	Enabled bool `mapstructure:"enabled"`
	// ID names this replica; unique among the replicas (on Kubernetes the
	// pod name, which a StatefulSet keeps across restarts). Default: the
	// host name. Env LAGBRIDGE_HA_ID.
	ID string `mapstructure:"id"`
	// Name is the election's name: the Kafka consumer group and, with
	// ".leader", its one-partition topic; the key in the NATS KV bucket
	// lagbridge_leader. Replicas sharing a Name elect one leader per
	// cluster. Default "lagbridge".
	Name string `mapstructure:"name"`
	// SessionTimeout is how long a silent leader keeps its place before
	// another replica takes over: a new leader publishes within it plus
	// one interval. Default 10s; from 6s (Kafka brokers refuse shorter
	// sessions by default) to 5m, and at least three intervals.
	SessionTimeout time.Duration `mapstructure:"sessionTimeout"`
}

// DefaultHASessionTimeout is HA.SessionTimeout's default.
const DefaultHASessionTimeout = 10 * time.Second

// WithDefaults returns h with its defaults filled in.
func (h HA) WithDefaults() HA {
	if h.ID == "" {
		h.ID, _ = os.Hostname()
	}
	if h.Name == "" {
		h.Name = "lagbridge"
	}
	if h.SessionTimeout == 0 {
		h.SessionTimeout = DefaultHASessionTimeout
	}
	return h
}

func (h HA) validate(c Config) []error {
	if !h.Enabled {
		return nil
	}
	var errs []error
	d := h.WithDefaults()
	if d.SessionTimeout < 6*time.Second || d.SessionTimeout > 5*time.Minute || d.SessionTimeout < 3*c.Interval {
		errs = append(errs, fmt.Errorf("ha.sessionTimeout: must be from 6s to 5m and at least three intervals (%v), got %v", 3*c.Interval, h.SessionTimeout))
	}
	if d.ID == "" {
		errs = append(errs, fmt.Errorf("ha.id: empty and the host name is unknown; name this replica"))
	}
	if !kvBucket.MatchString(d.Name) {
		errs = append(errs, fmt.Errorf("ha.name: %q must be letters, digits, - and _ (a Kafka group and topic, a NATS KV key)", h.Name))
	}
	return errs
}
