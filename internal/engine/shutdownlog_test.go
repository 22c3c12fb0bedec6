package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
)

// downUntilStop is a Publisher whose broker never answers: the first call
// fails at once, the later ones wait until the daemon stops (a NATS KV
// bucket on a URL nothing listens on), a fault at an exact moment.
type downUntilStop struct {
	calls   atomic.Int32
	blocked chan struct{} // closed when the second call waits
}

func (d *downUntilStop) Name() string { return "down" }

func (d *downUntilStop) Publish(ctx context.Context, _ publish.Snapshot) error {
	if d.calls.Add(1) == 2 {
		close(d.blocked)
	}
	if d.calls.Load() == 1 {
		return errors.New("unreachable")
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestNoRecoveryAtShutdown: a publisher failing when the daemon stops is
// not logged as recovered. Before, the call the shutdown cancelled fell
// into the recovery branch: a daemon whose KV bucket was never reachable
// logged "publishing quotas recovered" as it stopped.
func TestNoRecoveryAtShutdown(t *testing.T) {
	var logs testutil.Buffer
	down := &downUntilStop{blocked: make(chan struct{})}
	c := &clock{now: t0}
	e, _ := startPublishing(t, c, slog.New(slog.NewTextHandler(&logs, nil)), down)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 100, consume: 200}
	eventually(t, 10*time.Second, "the failure warned", func() bool {
		w.cycles(1)
		return strings.Contains(logs.String(), "publishing quotas failed")
	})
	eventually(t, 10*time.Second, "a second call waiting", func() bool {
		w.cycles(1)
		select {
		case <-down.blocked:
			return true
		default:
			return false
		}
	})
	e.Close()
	if strings.Contains(logs.String(), "publishing quotas recovered") {
		t.Fatalf("a publisher that never worked logged as recovered at shutdown:\n%s", &logs)
	}
}
