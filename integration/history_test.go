package integration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/console"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
)

// TestReadTokenGuardsHistory: with read tokens configured, /v1/history and
// /v1/events answer exactly as /v1/lag does (401 without a token, 200 with
// the read token), and `lagbridge status` and `why` pass the token.
func TestReadTokenGuardsHistory(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const read = "a-read-token-for-the-dashboard"
	cfg := config.Config{Kafka: []kafka.Config{{Cluster: "guarded", Brokers: c.ListenAddrs()}}}
	cfg.Quota.Auth = quotaserver.Auth{Mode: quotaserver.AuthNone, ReadTokens: []string{read}}
	base := startApp(t, cfg)
	status := func(path, token string) int {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/v1/lag", "/v1/history", "/v1/events"} {
		cases := []struct {
			name, token string
			want        int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"unknown token", "not-a-token-of-this-daemon", http.StatusUnauthorized},
			{"read token", read, http.StatusOK},
		}
		for _, c := range cases {
			if got := status(path, c.token); got != c.want {
				t.Errorf("%s with %s: HTTP %d, want %d", path, c.name, got, c.want)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := console.Why(ctx, &console.Client{BaseURL: base}, &out, "p", time.Minute); !errors.Is(err, console.ErrUnauthorized) {
		t.Errorf("why without a token: %v, want ErrUnauthorized", err)
	}
	if err := console.Why(ctx, &console.Client{BaseURL: base, Token: read}, &out, "p", time.Minute); err != nil {
		t.Errorf("why with the read token: %v", err)
	}
	out.Reset()
	if err := console.Status(ctx, &console.Client{BaseURL: base, Token: read}, &out); err != nil || !strings.Contains(out.String(), "guarded") {
		t.Errorf("status with the read token: %v\n%s", err, out.String())
	}
}

// TestEventsClosedWithProducerAuth: with producer tokens and no read
// tokens, /v1/history stays open as /v1/lag does, but /v1/events, which
// names producers and their grants, is closed as /v1/quotas is: 401
// anonymous, 403 with a producer token, 200 with an admin token.
func TestEventsClosedWithProducerAuth(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const producer, admin = "a-producer-token-for-p", "an-admin-token-for-operators"
	cfg := config.Config{Kafka: []kafka.Config{{Cluster: "guarded", Brokers: c.ListenAddrs()}}}
	cfg.Quota.Auth = quotaserver.Auth{
		Tokens:      []quotaserver.Token{{Token: producer, Producers: []string{"p"}}},
		AdminTokens: []string{admin},
	}
	base := startApp(t, cfg)
	cases := []struct {
		name, path, token string
		want              int
	}{
		{"history, anonymous", "/v1/history", "", http.StatusOK},
		{"lag, anonymous", "/v1/lag", "", http.StatusOK},
		{"events, anonymous", "/v1/events", "", http.StatusUnauthorized},
		{"events, producer token", "/v1/events", producer, http.StatusForbidden},
		{"events, admin token", "/v1/events", admin, http.StatusOK},
		{"quotas, anonymous", "/v1/quotas", "", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(http.MethodGet, base+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}
