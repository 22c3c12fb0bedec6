package leader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/embedded"
)

// TestCheckServer: ha on NATS refuses a server older than 2.11 (or one
// whose version it cannot read), naming the version needed and found.
func TestCheckServer(t *testing.T) {
	s := embedded.NATSTest(t)
	cases := []struct {
		name string
		url  func(tb testing.TB) string
		want string // "" no error; else in the message
	}{
		{"the embedded server (2.15)", func(testing.TB) string { return s.ClientURL() }, ""},
		{"2.11.0 exactly", func(tb testing.TB) string { return embedded.NATSAnnouncing(tb, "2.11.0") }, ""},
		{"3.0.0", func(tb testing.TB) string { return embedded.NATSAnnouncing(tb, "3.0.0") }, ""},
		{"2.10.29: no per-key TTL, no fencing header", func(tb testing.TB) string { return embedded.NATSAnnouncing(tb, "2.10.29") }, "is nats-server 2.10.29; ha on NATS needs 2.11.0 or later"},
		{"2.9.25", func(tb testing.TB) string { return embedded.NATSAnnouncing(tb, "2.9.25") }, "is nats-server 2.9.25"},
		{"1.4.1", func(tb testing.TB) string { return embedded.NATSAnnouncing(tb, "1.4.1") }, "is nats-server 1.4.1"},
		{"unreadable", func(tb testing.TB) string { return embedded.NATSAnnouncing(tb, "dev") }, `reports version "dev", not major.minor.patch`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := natsgo.Connect(c.url(t))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			err = CheckServer(nc)
			if c.want == "" {
				if err != nil {
					t.Fatalf("CheckServer: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrServerTooOld) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckServer: %v, want ErrServerTooOld saying %q", err, c.want)
			}
			t.Log(err)
		})
	}
	t.Run("not connected yet: nothing to check", func(t *testing.T) {
		nc, err := natsgo.Connect("nats://127.0.0.1:1", natsgo.RetryOnFailedConnect(true), natsgo.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := CheckServer(nc); err != nil {
			t.Fatalf("CheckServer: %v", err)
		}
	})
}

// TestNATSRefusesOldServer: an election round on a server older than 2.11
// (reached after the start, a reconnect to another server) fails with
// ErrServerTooOld before it writes anything, and the replica follows.
func TestNATSRefusesOldServer(t *testing.T) {
	nc, err := natsgo.Connect(embedded.NATSAnnouncing(t, "2.10.29"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := NewNATS(js, "", Config{Cluster: "n", ID: "r0", Name: "old", Session: 6 * time.Second})
	if err := n.round(context.Background()); !errors.Is(err, ErrServerTooOld) {
		t.Fatalf("round: %v, want ErrServerTooOld", err)
	}
	if r := n.Role(time.Now()); r != RoleFollower {
		t.Errorf("role %v, want follower", r)
	}
}
