package leader

import (
	"log/slog"
	"time"
)

// Config is what both electors share.
type Config struct {
	// Cluster names the watched cluster (for logs and metrics).
	Cluster string
	// ID names this replica to the others (the Kafka client.id suffix, the
	// NATS key's value). Must be unique among the replicas.
	ID string
	// Name is the election's name: the Kafka group and topic
	// ("<Name>.leader"), the NATS bucket (Bucket(Name)) and its key.
	// Replicas with the same Name elect one leader per cluster.
	Name string
	// Session is how long a leader that stopped confirming keeps its
	// place before another replica may take over (Kafka's session
	// timeout, the NATS key's time to live). The local lease is Session
	// minus a fifth of it: a leader stops publishing before anyone else
	// can start.
	Session time.Duration
	// Every is how often the leader confirms and a follower tries to take
	// over; at most Session/3 (and that when zero).
	Every time.Duration
	// LegacyBucket, on NATS, is the bucket that earlier versions shared
	// (LegacyBucket): while it exists a leader also holds its key there.
	// "" skips it. Ignored on Kafka.
	LegacyBucket string
	// OnRole, when set, is called on every change of role, and of the
	// epoch while leading (from the elector's goroutine), with the epoch.
	OnRole func(Role, int64)
	// Log receives leadership changes; nil means slog.Default().
	Log *slog.Logger
}

// ttl is the local lease: a fifth shorter than the broker's session.
func (c Config) ttl() time.Duration { return c.Session - c.Session/5 }

func (c Config) every() time.Duration {
	if c.Every <= 0 || c.Every > c.Session/3 {
		return c.Session / 3
	}
	return c.Every
}

func (c Config) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}
