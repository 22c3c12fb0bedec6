package groupmember

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// holder records whether a member holds partition 0 of its topic.
type holder struct {
	mu   sync.Mutex
	owns bool
}

func (h *holder) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.owns = h.owns || len(m["gm"]) > 0
}

func (h *holder) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.owns = h.owns && len(m["gm"]) == 0
}

func (h *holder) holds() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owns
}

func newMember(seeds []string, id string, h *holder) *Member {
	return New(Config{Opts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, What: "test", Cluster: "k",
		Group: "gm", Topic: "gm", Partitions: 1, ID: id, Session: 6 * time.Second, Every: 100 * time.Millisecond,
		Assigned: h.assigned, Revoked: h.revoked})
}

// started runs m and returns a channel closed when Run returned, and the
// rounds Run made, counted.
func started(tb testing.TB, m *Member) (done chan struct{}, rounds func() int) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	var mu sync.Mutex
	n := 0
	go func() {
		defer close(done)
		if err := m.Run(ctx, func(context.Context, *kgo.Client) { mu.Lock(); n++; mu.Unlock() }); err != nil {
			tb.Errorf("Run: %v", err)
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return done, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func returns(tb testing.TB, done chan struct{}, within time.Duration, what string) {
	tb.Helper()
	select {
	case <-done:
	case <-time.After(within):
		tb.Fatalf("Run still runs %v after %s", within, what)
	}
}

// TestRelease: Run returns on Release whenever it comes (before Run, while
// the topic cannot be created, once joined), and a member that joined
// leaves the group at once: the other member takes its partition well
// within the session timeout.
func TestRelease(t *testing.T) {
	kafka := func(tb testing.TB) []string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(c.Close)
		return c.ListenAddrs()
	}
	t.Run("before Run", func(t *testing.T) {
		m := newMember(kafka(t), "r0", &holder{})
		if err := m.Release(context.Background()); err != nil {
			t.Errorf("Release before joining: %v, want nil", err)
		}
		done, rounds := started(t, m)
		returns(t, done, 5*time.Second, "Release")
		if n := rounds(); n != 0 {
			t.Errorf("a released member made %d rounds", n)
		}
	})
	t.Run("while the topic cannot be created", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close() // nothing listens there: every creation fails
		m := newMember([]string{addr}, "r0", &holder{})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := m.CreateTopic(ctx); err == nil {
			t.Fatal("CreateTopic succeeded without a broker")
		}
		done, _ := started(t, m)
		_ = m.Release(context.Background())
		returns(t, done, 5*time.Second, "Release")
	})
	t.Run("joined", func(t *testing.T) {
		seeds := kafka(t)
		hs := []*holder{{}, {}}
		ms := []*Member{newMember(seeds, "r0", hs[0]), newMember(seeds, "r1", hs[1])}
		var dones []chan struct{}
		for _, m := range ms {
			done, _ := started(t, m)
			dones = append(dones, done)
		}
		owner := -1
		for deadline := time.Now().Add(20 * time.Second); owner < 0; {
			for i, h := range hs {
				if h.holds() {
					owner = i
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("partition 0 not assigned within 20s")
			}
			time.Sleep(10 * time.Millisecond) // polling the group's assignment
		}
		left := time.Now()
		for range 2 { // idempotent
			if err := ms[owner].Release(context.Background()); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		returns(t, dones[owner], time.Second, "Release")
		other := hs[1-owner]
		for !other.holds() {
			if time.Since(left) > 3*time.Second {
				t.Fatal("the other member not assigned the partition within 3s of a Release (session 6s)")
			}
			time.Sleep(10 * time.Millisecond) // polling the group's assignment
		}
		t.Logf("the other member took over %v after the Release", time.Since(left).Round(time.Millisecond))
	})
}

// TestRounds: the loop ends when ctx is done or stopped is closed, not
// before, and no round starts after, even with a tick pending.
func TestRounds(t *testing.T) {
	cases := []struct {
		name string
		// end ends the loop from within its third round.
		end func(cancel context.CancelFunc, stopped chan struct{})
	}{
		{"context done", func(cancel context.CancelFunc, _ chan struct{}) { cancel() }},
		{"stopped", func(_ context.CancelFunc, stopped chan struct{}) { close(stopped) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopped := make(chan struct{})
			n := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				Rounds(ctx, stopped, time.Millisecond, func() {
					if n++; n == 3 {
						tc.end(cancel, stopped)
						// Outlast an interval: a tick is pending with the end.
						time.Sleep(5 * time.Millisecond)
					}
				})
			}()
			returns(t, done, 5*time.Second, "the end of the third round")
			if n != 3 {
				t.Errorf("%d rounds, want 3", n)
			}
		})
	}
}

// TestFailures: a run of failures logs its first at WARN and the rest at
// DEBUG, the recovery at INFO with their count, and a new run WARNs again.
func TestFailures(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var f Failures
	f.OK(log, "op") // no run to end: nothing
	boom := errors.New("boom")
	for range 3 {
		f.Fail(log, "op", boom, "cluster", "c")
	}
	f.OK(log, "op", "cluster", "c")
	f.Fail(log, "op", boom)
	var levels []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		for _, w := range strings.Fields(l) {
			if strings.HasPrefix(w, "level=") {
				levels = append(levels, strings.TrimPrefix(w, "level="))
			}
		}
	}
	if got, want := strings.Join(levels, " "), "WARN DEBUG DEBUG INFO WARN"; got != want {
		t.Errorf("levels %q, want %q\n%s", got, want, buf.String())
	}
	if !strings.Contains(buf.String(), `msg="op: recovered" cluster=c failures=3`) {
		t.Errorf("recovery line lacks its count:\n%s", buf.String())
	}
}
