package nats

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// TestNotConnectedSaysWhy: a daemon pointed at a wrong NATS URL (the
// daemon connects with RetryOnFailedConnect) or whose server went away
// says why it is not connected, the dial error naming the address, not
// only "not connected (RECONNECTING)".
func TestNotConnectedSaysWhy(t *testing.T) {
	addr := deadAddr(t)
	o := retrying(t, "nats://"+addr)
	eventually(t, 10*time.Second, func() error {
		_, err := o.Observe(ctxT(t))
		if !errors.Is(err, ErrNotConnected) {
			t.Fatalf("err %v, want ErrNotConnected", err)
		}
		if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "refused") {
			return errors.New(err.Error() + ": does not name the address and the dial error")
		}
		return nil
	})

	// A server that goes away: the same.
	s := startServer(t, nil)
	o2 := newObserver(t, s, nil, natsgo.ReconnectWait(20*time.Millisecond))
	observe(t, o2)
	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, 10*time.Second, func() error {
		_, err := o2.Observe(ctxT(t))
		if err == nil || !strings.Contains(err.Error(), "refused") {
			return errors.New("err " + errString(err) + ": no dial error")
		}
		return nil
	})
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close() // nothing listens there once the test uses it
	return ln.Addr().String()
}

// retrying is an observer of urls that keeps retrying its connection
// (the daemon's RetryOnFailedConnect), closed with the test.
func retrying(tb testing.TB, urls ...string) *Observer {
	tb.Helper()
	o, err := New(Config{Cluster: "test", URLs: urls, RequestTimeout: time.Second},
		natsgo.RetryOnFailedConnect(true), natsgo.ReconnectWait(20*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(o.Close)
	return o
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestNotConnectedHidesCredentials: the URLs in a connect error or a "not
// connected" cause (served on /v1/lag, `status`, the dashboard, the log)
// name the servers without their user, password or token. Before, both
// printed the URLs as written: nats://user:s3cret@host.
func TestNotConnectedHidesCredentials(t *testing.T) {
	addr := deadAddr(t)
	urls := []string{"nats://user:s3cret@" + addr, "nats://tok3n@" + addr, "user:pa55@" + addr}
	leaks := func(msg string) error {
		for _, secret := range []string{"s3cret", "tok3n", "pa55", "user"} {
			if strings.Contains(msg, secret) {
				return errors.New(msg + ": names " + secret)
			}
		}
		if !strings.Contains(msg, addr) {
			return errors.New(msg + ": does not name the server")
		}
		return nil
	}
	// Without RetryOnFailedConnect the connect fails at once.
	if _, err := New(Config{Cluster: "test", URLs: urls, RequestTimeout: time.Second}); err == nil {
		t.Fatal("connected to nothing")
	} else if e := leaks(err.Error()); e != nil {
		t.Error("connect error:", e)
	}
	o := retrying(t, urls...)
	eventually(t, 10*time.Second, func() error {
		_, err := o.Observe(ctxT(t))
		if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "refused") {
			return errors.New("err " + errString(err) + ": not yet the dial error")
		}
		if e := leaks(err.Error()); e != nil {
			t.Fatal("not connected:", e)
		}
		return nil
	})
}

// TestRedactURL: the user information goes whatever the URL's form: a
// password with an unescaped '/', an entry holding two URLs, no scheme.
// Config problems quote URLs the same way (url.Parse's own error text,
// which quotes the URL, is left out).
func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"nats://u:pw@h:4222":              "nats://redacted@h:4222",
		"nats://tok3n@h":                  "nats://redacted@h",
		"nats://u:12/34@h:4222":           "nats://redacted@h:4222",
		"nats://u:a@h1,nats://u:b@h2":     "nats://redacted@h2",
		"u:pw@h:4222":                     "redacted@h:4222",
		"nats://h:4222":                   "nats://h:4222",
		"tls://[::1]:4222":                "tls://[::1]:4222",
		"wss://user:p%40ss@example:443/x": "wss://redacted@example:443/x",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	for _, raw := range []string{"nats://u:s3cret@h1,nats://u:s3cret@h2", "http://u:s3cret@h:4222", "nats://u:s3cret@h:port",
		"nats://u:s3cret@:4222", "nats://u:s3cret%zz@h"} {
		p := checkURL(raw)
		if p == "" {
			t.Errorf("%q accepted", raw)
		}
		if strings.Contains(p, "s3cret") {
			t.Errorf("the problem with %q quotes its password: %s", raw, p)
		}
	}
}
