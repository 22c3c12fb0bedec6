package config

import (
	"strings"
	"testing"
	"time"
)

// TestHAShards: ha.shards is read from the file and the environment, and
// every problem with it is reported beside the others.
func TestHAShards(t *testing.T) {
	cases := []struct {
		name string
		ha   string
		env  string
		want int
		errs []string // substrings of the error; none: valid
	}{
		{"default: no sharding", "ha: {enabled: true, id: r0}", "", 0, nil},
		{"from the file", "ha: {enabled: true, id: r0, shards: 8}", "", 8, nil},
		{"from the environment", "ha: {enabled: true, id: r0}", "16", 16, nil},
		{"one shard is no sharding", "ha: {shards: 1}", "", 1, nil},
		{"shards without ha", "ha: {shards: 4}", "", 0, []string{"ha.shards: 4 shards need ha.enabled"}},
		{"negative", "ha: {enabled: true, id: r0, shards: -1}", "", 0, []string{"ha.shards: must be from 0 to 1024, got -1"}},
		{"too many, beside another problem", "ha: {enabled: true, id: r0, shards: 5000, sessionTimeout: 1s}", "", 0,
			[]string{"ha.shards: must be from 0 to 1024, got 5000", "ha.sessionTimeout"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("LAGBRIDGE_HA_SHARDS", c.env)
			}
			cfg, err := load(t, "--config", writeFile(t, good+c.ha+"\n"))
			if len(c.errs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.HA.Shards != c.want {
					t.Errorf("ha.shards = %d, want %d", cfg.HA.Shards, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", c.errs)
			}
			for _, e := range c.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q does not say %q", err, e)
				}
			}
		})
	}
}

// TestHALeaseLifetime: with replicas, a producer's lease outlives a
// failover (the session timeout plus an interval and the replication):
// the default grows with the session, and a lifetime set shorter than the
// session plus two intervals is refused.
func TestHALeaseLifetime(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want time.Duration // the lifetime the daemon runs with; 0: the engine's default
		err  string        // a substring of the error, or "" for none
	}{
		{"no ha: the engine's default (ten intervals)", "interval: 250ms\n", 0, ""},
		{"ha: twice the session plus four intervals", "interval: 250ms\nha: {enabled: true, id: a, sessionTimeout: 6s}\n", 13 * time.Second, ""},
		{"ha, default session", "interval: 1s\nha: {enabled: true, id: a}\n", 24 * time.Second, ""},
		{"ha, a lifetime set long enough is kept", "interval: 250ms\nha: {enabled: true, id: a, sessionTimeout: 6s}\nquota: {leaseLifetime: 7s}\n", 7 * time.Second, ""},
		{"ha, a lifetime shorter than a failover", "interval: 250ms\nha: {enabled: true, id: a, sessionTimeout: 6s}\nquota: {leaseLifetime: 5s}\n", 0,
			"quota.leaseLifetime: 5s is shorter than ha.sessionTimeout plus two intervals (6.5s)"},
		{"no ha: a short lifetime is fine", "interval: 250ms\nquota: {leaseLifetime: 1s}\n", time.Second, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := "listen: 127.0.0.1:9464\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\n"
			cfg, err := load(t, "--config", writeFile(t, base+c.yaml))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.LeaseLifetime(); got != c.want {
				t.Errorf("LeaseLifetime() = %v, want %v", got, c.want)
			}
		})
	}
}

// TestHAIgnoreLegacyBuckets: ha.ignoreLegacyBuckets is read from the file
// and the environment; off by default (a rolling upgrade is safe unless
// the operator says no earlier version runs).
func TestHAIgnoreLegacyBuckets(t *testing.T) {
	cases := []struct {
		name string
		ha   string
		env  string
		want bool
	}{
		{"default: held", "ha: {enabled: true, id: r0}", "", false},
		{"from the file", "ha: {enabled: true, id: r0, ignoreLegacyBuckets: true}", "", true},
		{"from the environment", "ha: {enabled: true, id: r0}", "true", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("LAGBRIDGE_HA_IGNORELEGACYBUCKETS", c.env)
			}
			cfg, err := load(t, "--config", writeFile(t, good+c.ha+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.HA.IgnoreLegacyBuckets != c.want {
				t.Errorf("ha.ignoreLegacyBuckets = %v, want %v", cfg.HA.IgnoreLegacyBuckets, c.want)
			}
		})
	}
}
