package replica

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/engine"
	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// countingChannel counts the writes a Replicator makes through a real
// Kafka channel.
type countingChannel struct {
	*kafkaChannel
	putAll, deletes atomic.Int32
}

func (c *countingChannel) PutAll(ctx context.Context, es []entry) error {
	c.putAll.Add(1)
	return c.kafkaChannel.PutAll(ctx, es)
}

func (c *countingChannel) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.kafkaChannel.Delete(ctx, key)
}

// TestPublishDeletesGoneAtOnce: the leader deletes the sets and reports of
// the producers that left in one write (one transaction on Kafka), not two
// per producer: with a few hundred leaving at once, ~10 ms per fenced
// write kept the decisions record (which waits for the same lock)
// unwritten past the followers' silence. Readers see every key deleted.
func TestPublishDeletesGoneAtOnce(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
			topic := leaseTopic("test")
			ch := &countingChannel{kafkaChannel: NewKafka(opts, topic).(*kafkaChannel)}
			defer ch.Close()
			hub, el := quotaserver.NewHub(), &role{}
			defer hub.Close()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			rep := New(Config{Channel: ch, Elector: el, Hub: hub, Lifetime: time.Minute, Log: log})
			eng, err := engine.New(engine.Config{Hub: rep.Sink(), Logger: log, Lease: quota.LeaseConfig{Interval: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			rep.SetEngine(eng)
			el.lead.Store(true)
			rep.checkRole()

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const n = 40
			var snap publish.Snapshot
			for i := range n {
				snap.Sets = append(snap.Sets, quotaproto.LeaseSet{Producer: fmt.Sprintf("p%02d", i), Version: uint64(100 + i)})
			}
			if err := rep.Publish(ctx, snap); err != nil {
				t.Fatal(err)
			}
			puts := ch.putAll.Load()
			if err := rep.Publish(ctx, publish.Snapshot{}); err != nil {
				t.Fatal(err)
			}
			if d, p := ch.deletes.Load(), ch.putAll.Load()-puts; d != 0 || p != 1 {
				t.Errorf("%d producers gone: %d deletes and %d batch writes, want 0 and 1", n, d, p)
			}
			got := readAll(ctx, t, NewKafka(opts, topic))
			for i := range n {
				k := key(kindSet, fmt.Sprintf("p%02d", i))
				if v := got[k]; !strings.HasSuffix(v, ",") {
					t.Fatalf("%s read as %q, want its set then deleted", k, v)
				}
			}
		})
	}
}
