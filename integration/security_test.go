package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/dashboard/chromium"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
)

// TestDashboardReadToken: with a read token configured, the daemon's read
// endpoints refuse a client without it, and the dashboard, opened with the
// token in its address (#token=...), still draws every target from them,
// keeps the token out of the address bar and reports no page problem.
func TestDashboardReadToken(t *testing.T) {
	br := chromium.Start(t, 1200, 900) // skips (fails in CI) without Chromium
	const read = "read-token-for-the-dashboard-0123"
	b, err := demo.StartBrokers(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	w, err := demo.StartWorkload(b, 200, func(time.Duration) float64 { return 200 })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	cfg := demo.Config(b, "", 250*time.Millisecond)
	cfg.Quota.Auth = quotaserver.Auth{ReadTokens: []string{read}}
	base := startApp(t, cfg)

	status := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/v1/lag", "/v1/quotas", "/v1/history", "/v1/events"} {
		if got := status(path, ""); got != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", path, got)
		}
		if got := status(path, read); got != http.StatusOK {
			t.Errorf("%s with the read token: %d, want 200", path, got)
		}
	}
	// The page and the probes stay open.
	for _, path := range []string{"/", "/healthz", "/metrics"} {
		if got := status(path, ""); got != http.StatusOK {
			t.Errorf("%s: %d, want 200", path, got)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := br.Navigate(ctx, base+"/?refresh=250ms#token="+read); err != nil {
		t.Fatal(err)
	}
	st := waitDash(t, br, 30*time.Second, func(s dashState) bool { return s.Ready == "true" && s.Cards == 2 })
	if strings.Contains(st.Text, "needs a read or admin token") {
		t.Errorf("the page asks for a token it was given:\n%s", st.Text)
	}
	var href string
	if err := br.Eval(ctx, "location.href", &href); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(href, read) {
		t.Errorf("the token stayed in the address bar: %s", href)
	}
	for _, p := range br.Problems() {
		t.Errorf("page problem: %s", p)
	}
}
