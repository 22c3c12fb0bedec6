// Package chromium drives a real headless Chromium (Debian's chromium
// package, /usr/bin/chromium) from Go tests over the DevTools protocol on a
// pipe (--remote-debugging-pipe): no port, no WebSocket, no third-party
// client. It does the few things the dashboard tests need: open a page at
// a fixed window size, evaluate JavaScript, collect the page's errors
// (uncaught exceptions, console errors, CSP violations) and take a
// full-page PNG screenshot.
//
// It is test support: only tests import it. It imports only the standard
// library (and testing), never the daemon.
package chromium

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Paths where Chromium is looked for, in order, after $LAGBRIDGE_CHROMIUM.
var Paths = []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}

// Find returns the Chromium binary to use: $LAGBRIDGE_CHROMIUM when set
// (only that one is tried), else the first of Paths that exists; "" when
// there is none.
func Find() string {
	paths := Paths
	if p := os.Getenv("LAGBRIDGE_CHROMIUM"); p != "" {
		paths = []string{p}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Required reports whether a missing Chromium must fail the test rather
// than skip it: under CI=true or LAGBRIDGE_REQUIRE_CHROMIUM=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("LAGBRIDGE_REQUIRE_CHROMIUM") == "1"
}

// Problem is something the page reported that a test may want to fail on.
type Problem struct {
	// Kind is "exception", "console" (console.error), or "log/<source>"
	// for the browser's own log (log/security is a CSP violation,
	// log/network a failed request).
	Kind string
	Text string
	URL  string
}

func (p Problem) String() string { return p.Kind + ": " + p.Text + " " + p.URL }

// Browser is one headless Chromium process with one page. It is not safe
// for concurrent use; one test drives it.
type Browser struct {
	cmd     *exec.Cmd
	toChr   *os.File
	fromChr *os.File
	session string
	stderr  string // path of the file Chromium's standard error goes to

	mu       sync.Mutex
	nextID   int64
	pending  map[int64]chan reply
	problems []Problem
	readDone chan struct{}
	readErr  error
	closed   bool
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type message struct {
	ID        int64           `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
	reply
}

// Start launches Chromium with a fresh profile in a temporary folder and
// opens a blank page of width x height CSS pixels. Without a Chromium it
// skips tb, or fails it when Required. The browser is closed with
// tb.Cleanup (Close may also be called earlier).
func Start(tb testing.TB, width, height int) *Browser {
	tb.Helper()
	bin := Find()
	if bin == "" {
		msg := "no Chromium found (install Debian's chromium: scripts/deps.sh, or set LAGBRIDGE_CHROMIUM)"
		if Required() {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	toChrR, toChrW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	fromChrR, fromChrW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	errf, err := os.Create(filepath.Join(dir, "chromium.stderr"))
	if err != nil {
		tb.Fatal(err)
	}
	defer errf.Close()
	b := &Browser{toChr: toChrW, fromChr: fromChrR, stderr: errf.Name(), pending: map[int64]chan reply{}, readDone: make(chan struct{})}
	b.cmd = exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars",
		"--font-render-hinting=none", "--remote-debugging-pipe",
		"--user-data-dir="+filepath.Join(dir, "profile"),
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	// With --remote-debugging-pipe Chromium reads commands on fd 3 and
	// writes answers on fd 4.
	b.cmd.ExtraFiles = []*os.File{toChrR, fromChrW}
	b.cmd.Stdout = errf
	b.cmd.Stderr = errf
	b.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir)
	if err := b.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	toChrR.Close()
	fromChrW.Close()
	go b.read(fromChrR) // ends when Chromium exits (or Close closes the pipe)
	tb.Cleanup(b.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.call(ctx, "", "Target.getTargets", nil, nil); err != nil {
		tb.Fatalf("chromium did not answer: %v\nstderr:\n%s", err, b.Stderr())
	}
	// A page's session that does not answer is given up for a new page:
	// once in a CI run Runtime.enable on the page Chromium opened at start
	// went unanswered for 30 s.
	for try := 0; try < attachTries; try++ {
		if err = b.attachPage(ctx); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("%v\nstderr:\n%s", err, b.Stderr())
	}
	if err := b.resize(ctx, width, height); err != nil {
		tb.Fatal(err)
	}
	return b
}

// attachTries is how many pages Start tries to attach to, each within
// attachWait.
const (
	attachTries = 3
	attachWait  = 8 * time.Second
)

// attachPage opens a blank page, attaches to it and enables the domains the
// Browser reads (Runtime, Log, Page), within attachWait.
func (b *Browser) attachPage(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, attachWait)
	defer cancel()
	var created struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created); err != nil {
		return fmt.Errorf("Target.createTarget: %w", err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &att); err != nil {
		return fmt.Errorf("Target.attachToTarget: %w", err)
	}
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		if err := b.call(ctx, att.SessionID, m, nil, nil); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	b.session = att.SessionID
	return nil
}

// Stderr returns what Chromium wrote on standard error so far.
func (b *Browser) Stderr() string {
	out, _ := os.ReadFile(b.stderr)
	return string(out)
}

// read dispatches Chromium's messages (NUL-terminated JSON) until the pipe
// closes, that is until Chromium exits.
func (b *Browser) read(r io.Reader) {
	defer close(b.readDone)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m message
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.pending[m.ID]; ok {
				ch <- m.reply
				delete(b.pending, m.ID)
			}
		} else if p, ok := problemOf(m); ok {
			b.problems = append(b.problems, p)
		}
		b.mu.Unlock()
	}
}

func problemOf(m message) (Problem, bool) {
	switch m.Method {
	case "Runtime.exceptionThrown":
		var p struct {
			ExceptionDetails struct {
				Text      string `json:"text"`
				URL       string `json:"url"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(m.Params, &p)
		d := p.ExceptionDetails
		return Problem{Kind: "exception", Text: strings.TrimSpace(d.Text + " " + d.Exception.Description), URL: d.URL}, true
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.Type != "error" && p.Type != "assert" {
			return Problem{}, false
		}
		var parts []string
		for _, a := range p.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		return Problem{Kind: "console", Text: strings.Join(parts, " ")}, true
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Source string `json:"source"`
				Level  string `json:"level"`
				Text   string `json:"text"`
				URL    string `json:"url"`
			} `json:"entry"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.Entry.Level != "error" {
			return Problem{}, false
		}
		return Problem{Kind: "log/" + p.Entry.Source, Text: p.Entry.Text, URL: p.Entry.URL}, true
	}
	return Problem{}, false
}

// ErrClosed is returned by calls after Chromium exited or Close was called.
var ErrClosed = errors.New("chromium: browser closed")

// call sends one DevTools command and decodes its result into out (when
// not nil).
func (b *Browser) call(ctx context.Context, session, method string, params any, out any) error {
	b.mu.Lock()
	if b.closed || b.readErr != nil {
		b.mu.Unlock()
		return ErrClosed
	}
	b.nextID++
	id := b.nextID
	ch := make(chan reply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.toChr.Write(append(raw, 0)); err != nil {
		return fmt.Errorf("chromium: send %s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: %w", method, ErrClosed)
		}
		if r.Error != nil {
			return fmt.Errorf("chromium: %s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("chromium: %s: %w", method, ctx.Err())
	}
}

func (b *Browser) resize(ctx context.Context, width, height int) error {
	return b.call(ctx, b.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
}

// Navigate opens url in the page and waits for its load event's navigation
// to be committed (not for the page's scripts to have done anything: poll
// with Eval for that).
func (b *Browser) Navigate(ctx context.Context, url string) error {
	var r struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.call(ctx, b.session, "Page.navigate", map[string]any{"url": url}, &r); err != nil {
		return err
	}
	if r.ErrorText != "" {
		return fmt.Errorf("chromium: navigate to %s: %s", url, r.ErrorText)
	}
	return nil
}

// Eval evaluates a JavaScript expression in the page (awaiting it when it
// is a promise) and decodes its JSON-serialisable value into out.
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := b.call(ctx, b.session, "Runtime.evaluate",
		map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		return fmt.Errorf("chromium: eval %q: %s %s", expr, e.Text, e.Exception.Description)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// Wait evaluates expr in b's page every 100ms, decoding its value into a
// T, until cond holds for it, and returns that value; it fails tb when d
// passes first, with the last value, the last eval error and the end of
// Chromium's stderr. It polls a live page; it does not sleep for a result.
func Wait[T any](tb testing.TB, b *Browser, d time.Duration, expr string, cond func(T) bool) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		var v T
		err := b.Eval(ctx, expr, &v)
		if err == nil && cond(v) {
			return v
		}
		select {
		case <-ctx.Done():
			stderr := b.Stderr()
			stderr = stderr[max(0, len(stderr)-2000):]
			tb.Fatalf("the page never got there in %s (last eval error %v): %+v\nchromium stderr:\n%s", d, err, v, stderr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WriteArtifact saves a test artifact (a screenshot) in
// $LAGBRIDGE_ARTIFACTS, or else the test's temporary folder, logs where,
// and returns its path.
func WriteArtifact(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	dir := os.Getenv("LAGBRIDGE_ARTIFACTS")
	if dir == "" {
		dir = tb.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("artifact: %s (%d bytes)", p, len(data))
	return p
}

// Screenshot returns a PNG of the whole page (not only the window): the
// viewport is grown to the document's height for the capture, then
// restored to width x height.
func (b *Browser) Screenshot(ctx context.Context, width, height int) ([]byte, error) {
	var full int
	if err := b.Eval(ctx, "Math.ceil(document.documentElement.scrollHeight)", &full); err != nil {
		return nil, err
	}
	full = max(full, height)
	if err := b.resize(ctx, width, full); err != nil {
		return nil, err
	}
	defer func() { _ = b.resize(ctx, width, height) }()
	var r struct {
		Data string `json:"data"`
	}
	if err := b.call(ctx, b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

// Problems returns what the page reported so far (see Problem).
func (b *Browser) Problems() []Problem {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Problem(nil), b.problems...)
}

// Close asks Chromium to exit, kills it after 5s, and waits for the
// process and the reader. Idempotent.
func (b *Browser) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = b.call(ctx, "", "Browser.close", nil, nil)
	cancel()
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	exited := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-exited
	}
	b.toChr.Close()
	select {
	case <-b.readDone:
	case <-time.After(5 * time.Second):
		// A leftover child still holds the pipe: stop reading.
		b.fromChr.Close()
		<-b.readDone
	}
	b.fromChr.Close()
}
