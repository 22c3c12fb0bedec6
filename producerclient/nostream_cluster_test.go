package producerclient

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNATSLeaderlessStreamIsNotStop: a 3-server cluster, stream BAR (R1)
// on "bar.>", its server shut down while the meta leader stays: a publish
// to bar.x is "no responders" and the stream list still names BAR, so it
// stays a retried slow-down, not ErrStop (red against the mutant that
// reads a found verdict as no stream). foo.x, mapped onto bar.> by the
// account's mappings, is logged: the stream list cannot see a mapping (or
// an import, or another domain), and main reads it as ErrStop.
func TestNATSLeaderlessStreamIsNotStop(t *testing.T) {
	dir := t.TempDir()
	var cports [3]int
	for i := range cports {
		cports[i] = freePort(t)
	}
	routes := fmt.Sprintf("nats-route://127.0.0.1:%d, nats-route://127.0.0.1:%d, nats-route://127.0.0.1:%d", cports[0], cports[1], cports[2])
	var srv [3]*server.Server
	for i := range srv {
		cf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:-1
jetstream { store_dir: %q }
cluster { name: C, listen: 127.0.0.1:%d, routes: [%s] }
mappings { "foo.>": "bar.>" }
`, i, filepath.Join(dir, fmt.Sprint(i)), cports[i], routes)
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(cf)
		if err != nil {
			t.Fatal(err)
		}
		o.NoLog, o.NoSigs = true, true
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		srv[i] = s
		t.Cleanup(s.Shutdown)
	}
	for _, s := range srv {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("not ready")
		}
	}
	nc, err := nats.Connect(srv[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var st jetstream.Stream
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err = js.CreateStream(ctxFor(t, 5*time.Second), jetstream.StreamConfig{Name: "BAR", Subjects: []string{"bar.>"}, Replicas: 1,
			Placement: &jetstream.Placement{Cluster: "C"}})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	leader := st.CachedInfo().Cluster.Leader
	var other *server.Server
	for _, s := range srv {
		if s.Name() != leader {
			other = s
		}
	}
	nc2, err := nats.Connect(other.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js, _ = jetstream.New(nc2)
	p := newNATSProducer(t, js, Config{Retry: RetryConfig{Backoff: 5 * time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	for _, subj := range []string{"bar.x", "foo.x"} {
		if _, err := p.Publish(ctxFor(t, 5*time.Second), &nats.Msg{Subject: subj, Data: []byte("x")}); err != nil {
			t.Fatalf("%s while up: %v", subj, err)
		}
	}
	for _, s := range srv {
		if s.Name() == leader {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	// wait for a meta leader
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := js.AccountInfo(ctxFor(t, time.Second)); err == nil {
			break
		}
	}
	time.Sleep(1100 * time.Millisecond)
	for _, subj := range []string{"bar.x", "foo.x"} {
		_, err := p.Publish(ctxFor(t, 5*time.Second), &nats.Msg{Subject: subj, Data: []byte("x")})
		t.Logf("%s, stream BAR without a leader: stop=%v streamNotFound=%v: %v", subj, errors.Is(err, ErrStop), errors.Is(err, jetstream.ErrStreamNotFound), err)
		if errors.Is(err, ErrStop) || !errors.Is(err, ErrSlowDown) {
			t.Fatalf("%s: %v; want the slow-down of a stream without a leader", subj, err)
		}
	}
}
