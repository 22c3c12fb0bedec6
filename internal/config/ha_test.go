package config

import (
	"strings"
	"testing"
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
