// Package dashboard is lagbridge's built-in web dashboard: one HTML page, a
// style sheet and a vanilla JavaScript file, embedded in the binary (the
// embed package). The page polls the daemon's own JSON API (GET v1/lag,
// v1/quotas and v1/events, relative to the page, so it also works behind a
// path prefix) and draws, per target, SVG charts of head age against the
// deadline, lag, and the produce, consume and allowed rates, with the quota
// decisions as markers; a timeline of the decisions; each target's
// partitions (sortable, the worst first); and the producers' grants and
// signals. On load and when its window changes (five minutes by default)
// it backfills the charts from GET v1/history, so a page opened after an
// incident shows the incident.
//
// There is no build step and nothing is fetched from elsewhere: no CDN, no
// web fonts, so the dashboard works on machines without internet access.
//
// This package imports only the standard library: it must not import the
// daemon, the brokers or the quota packages (the page speaks their JSON).
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is the path under which the page's assets are served.
const Prefix = "/ui/"

// csp allows the page only its own origin: no inline script, no inline
// style, no third-party anything. Charts are SVG built with DOM calls, so
// they need no 'unsafe-inline'.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body        []byte
	etag        string
	contentType string
}

// Handler returns the dashboard's handler, meant to be mounted on "/" of the
// daemon's mux (more specific patterns such as /metrics and /v1/ win):
//
//   - "/" and "/index.html" serve the page;
//   - "/ui/<file>" serves its assets;
//   - anything else answers 404, so a mistyped API path is not mistaken for
//     the page.
//
// Only GET and HEAD are allowed (405 otherwise). Every answer carries a
// strict Content-Security-Policy and an ETag (a hash of the embedded file),
// with Cache-Control: no-cache so a new binary's page is picked up at once.
// The handler is safe for concurrent use and holds no state beyond the
// embedded files.
func Handler() http.Handler {
	assets := map[string]asset{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // do not depend on the host's mime.types
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		assets[strings.TrimPrefix(p, "static/")] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		// The files are compiled in; failing to read them is a build bug.
		panic("dashboard: embedded files unreadable: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := ""
		switch p := r.URL.Path; {
		case p == "/" || p == "/index.html":
			name = "index.html"
		case strings.HasPrefix(p, Prefix):
			name = strings.TrimPrefix(p, Prefix)
		}
		a, ok := assets[name]
		if !ok || (name == "index.html" && strings.HasPrefix(r.URL.Path, Prefix)) {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}
