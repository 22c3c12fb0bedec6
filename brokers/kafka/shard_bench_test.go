package kafka

import (
	"fmt"
	"hash/fnv"
	"testing"
)

// shardOf is internal/shard.Of (FNV-1a 32 of the name mod n), which this
// package may not import.
func shardOf(name string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// BenchmarkObserveShard measures one replica's cycle when four replicas
// split a cluster of 100,000 partitions (10,000 topics of 10) and 10,000
// groups (each committing on two topics, as in BenchmarkObserve) by topic:
// shard=i-of-4 observes the topics of shard i only, shard=all every topic
// (one replica alone). The cluster runs in a child process (broker=process
// of BenchmarkObserve), so B/op is the observer's own; each shard has an
// observer of its own, timed one after another, as one replica each. The
// setup takes about 15 s; skipped with -short.
func BenchmarkObserveShard(b *testing.B) {
	if testing.Short() {
		b.Skip("setup of the 100,000-partition cluster skipped with -short")
	}
	const topics, partitions, groups, shards = 10000, 10, 10000, 4
	cluster := benchProcess(b, topics, partitions, groups)
	for i := -1; i < shards; i++ {
		name := fmt.Sprintf("shard=%d-of-%d", i, shards)
		if i < 0 {
			name = "shard=all"
		}
		b.Run(fmt.Sprintf("partitions=%d/groups=%d/%s", topics*partitions, groups, name), func(b *testing.B) {
			o, err := New(cluster.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			if i >= 0 {
				o.SetOwns(func(topic string) bool { return shardOf(topic, shards) == i })
			}
			benchObserve(b, o, nil)
		})
	}
}
