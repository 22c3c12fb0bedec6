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
	// ".leader", its one-partition topic; on NATS the KV buckets
	// lagbridge_leader_<Name> and lagbridge_shards_<Name>. Replicas
	// sharing a Name elect one leader per cluster; deployments with
	// different Names on one broker are independent, and may use
	// different sessions. It also names the deployment in the quota KV
	// bucket (quota.natsKV), with or without ha: a daemon deletes and
	// overwrites only the leases that name it, and with ha fences on the
	// key lagbridge-fence/<Name>. Default "lagbridge".
	Name string `mapstructure:"name"`
	// SessionTimeout is how long a silent leader keeps its place before
	// another replica takes over: a new leader publishes within it plus
	// one interval. Default 10s; from 6s (Kafka brokers refuse shorter
	// sessions by default) to 5m, and at least three intervals. On NATS
	// each replica's keys expire after its own session, rounded up to
	// whole seconds.
	SessionTimeout time.Duration `mapstructure:"sessionTimeout"`
	// Shards splits the observation of every watched cluster across the
	// replicas: its topics (Kafka) or streams (NATS) fall into Shards
	// shards by a stable hash of their name, all consumer groups of a
	// topic in its topic's shard; each replica observes and decides for
	// the shards the cluster assigns it (a consumer group on Kafka, a KV
	// bucket on NATS), and the decisions travel to every replica, so the
	// leader still publishes for every topic. A replica that joins or
	// leaves moves shards within the session timeout. 0 or 1 (default 0):
	// every replica observes everything. At most MaxHAShards; needs
	// Enabled. Use more shards than replicas (twice as many, say) so
	// that they spread evenly. Env LAGBRIDGE_HA_SHARDS.
	Shards int `mapstructure:"shards"`
	// IgnoreLegacyBuckets, on NATS, skips the buckets that earlier
	// versions shared per account (lagbridge_leader, lagbridge_shards):
	// by default, while they exist, a leader also holds its key in
	// lagbridge_leader and shard members register in lagbridge_shards too,
	// so that a rolling upgrade from such a version never has two leaders
	// (README, "Upgrading"). Set it where no earlier version runs on the
	// account and NATS permissions do not reach those buckets (every
	// election round looks them up, and a refused lookup keeps the replica
	// from leading). Default false. Env LAGBRIDGE_HA_IGNORELEGACYBUCKETS.
	IgnoreLegacyBuckets bool `mapstructure:"ignoreLegacyBuckets"`
}

// MaxHAShards bounds HA.Shards.
const MaxHAShards = 1024

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
		if h.Shards > 1 {
			return []error{fmt.Errorf("ha.shards: %d shards need ha.enabled: true (replicas share the shards through their elections' brokers)", h.Shards)}
		}
		return nil
	}
	var errs []error
	if h.Shards < 0 || h.Shards > MaxHAShards {
		errs = append(errs, fmt.Errorf("ha.shards: must be from 0 to %d, got %d", MaxHAShards, h.Shards))
	}
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
	if l := c.Quota.LeaseLifetime; l > 0 && l < d.SessionTimeout+2*c.Interval {
		errs = append(errs, fmt.Errorf("quota.leaseLifetime: %v is shorter than ha.sessionTimeout plus two intervals (%v): producers would lose their leases (and fall back to the safe quota) during every failover", l, d.SessionTimeout+2*c.Interval))
	}
	return errs
}

// LeaseLifetime is the lease lifetime the daemon runs with:
// quota.leaseLifetime when set; else, with ha, twice the session timeout
// plus four intervals (a producer keeps its leases, fail-static, until
// the next leader's arrive: the session and an interval for the election,
// up to a third of the lifetime for the replicated copy's age and a third
// for a producer to give up on a paused replica); else zero
// (quota.LeaseConfig's default, ten intervals).
func (c Config) LeaseLifetime() time.Duration {
	if c.Quota.LeaseLifetime > 0 || !c.HA.Enabled {
		return c.Quota.LeaseLifetime
	}
	return 2*c.HA.WithDefaults().SessionTimeout + 4*c.Interval
}
