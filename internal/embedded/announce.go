package embedded

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// NATSAnnouncing serves only the start of the NATS client protocol (INFO,
// then PONG to every PING, nothing else) announcing version, until the
// test ends, and returns its URL: it plays a server of another version
// than the embedded one, for code that only reads the version a server
// reports (a connection's ConnectedServerVersion).
func NATSAnnouncing(tb testing.TB, version string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { _ = c.Close() }()
				fmt.Fprintf(c, "INFO {\"server_id\":\"old\",\"version\":%q,\"proto\":1,\"headers\":true,\"max_payload\":1048576}\r\n", version)
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						_, _ = c.Write([]byte("PONG\r\n"))
					}
				}
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}
