package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// TestNATSTestNoStreamLeftRunning: a test that ends with KV bucket
// creations on their way (a replica's first write, cancelled by its stop)
// leaves no goroutine of nats-server's behind once NATSTest's cleanup
// ran. Red before NATSTest waited for the server to be quiet (quiesce):
// the stream a create in flight made during the shutdown kept its file
// store's goroutines for good (a standalone probe leaked in round 2-3 of
// 60 in each of 6 runs at load 18, with the wait in none of 360 rounds).
func TestNATSTestNoStreamLeftRunning(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for i := range 40 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			js := JetStreamTest(t)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel) // before the connection's close: the creates are abandoned
			for j := range 3 {
				go func() {
					_, _ = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprint("b", j), History: 1})
				}()
			}
			time.Sleep(time.Duration(i%8) * time.Millisecond)
		})
		if err := goleak.Find(before); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}
