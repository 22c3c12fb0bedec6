// Command lagbridge is the backpressure bridge daemon: it watches consumer
// lag and message age on Kafka and NATS JetStream and serves them (and, as
// it grows, the quotas made from them) over HTTP and Prometheus.
//
//	lagbridge run --config FILE     run the daemon
//	lagbridge check --config FILE   validate a config, report every problem, exit 1 if any
//	lagbridge demo [--duration 20s] embedded brokers, a synthetic workload, the daemon
//	lagbridge bench [--short]       overload benchmark matrix, naive vs lagbridge (internal/bench)
//	lagbridge status                a running daemon's targets, signals and grants
//	lagbridge why --producer ID     the decisions that cut or released a producer
//	lagbridge version               print the version
//
// Every flag is also settable in the file and as LAGBRIDGE_<FLAG>.
// This package is wiring only.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/bench"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/console"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
)

const usage = `lagbridge restores backpressure across message brokers.

Usage:
  lagbridge run --config FILE     run the daemon
  lagbridge check --config FILE   validate a config and report every problem
  lagbridge demo [flags]          embedded Kafka and NATS, a synthetic workload, the daemon
  lagbridge bench [flags]         overload benchmark matrix: naive producers vs lagbridge, side by side
  lagbridge status [flags]        a running daemon's targets, signals and grants
  lagbridge why --producer ID     the decisions that cut or released a producer, in words
  lagbridge version               print the version

Run 'lagbridge COMMAND --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "run":
		return cmdRun(ctx, args[1:], stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(ctx, args[1:], stdout, stderr)
	case "bench":
		return bench.Command(ctx, args[1:], stdout, stderr)
	case "status", "why":
		return cmdConsole(ctx, args[0], args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "lagbridge", app.VersionString())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "lagbridge: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// parse parses flags; it returns false with the exit code when done. A
// flag that does not parse is named on stderr (pflag prints nothing of
// its own with ContinueOnError).
func parse(fs *pflag.FlagSet, args []string, stderr io.Writer) (int, bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0, false
		}
		fmt.Fprintf(stderr, "lagbridge %s: %v (see 'lagbridge %s --help')\n", fs.Name(), err, fs.Name())
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lagbridge %s: unexpected arguments %v\n", fs.Name(), fs.Args())
		return 2, false
	}
	return 0, true
}

// report prints every problem of a config error, one per line.
func report(stderr io.Writer, err error) {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = flatten(j.Unwrap())
	} else {
		list = []error{err}
	}
	fmt.Fprintf(stderr, "lagbridge: config has %d problem(s):\n", len(list))
	for _, e := range list {
		fmt.Fprintf(stderr, "  - %v\n", e)
	}
}

func flatten(errs []error) []error {
	var out []error
	for _, e := range errs {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			out = append(out, flatten(j.Unwrap())...)
		} else {
			out = append(out, e)
		}
	}
	return out
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := config.Flags("check")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	cfg, err := config.Load(fs)
	if err != nil {
		report(stderr, err)
		// What could be read gets its warnings now too (a policy
		// matching no cluster, ...), not only once the problems are
		// fixed; read from a config with problems, some may go with them.
		if ws := cfg.Warnings(); len(ws) > 0 {
			fmt.Fprintf(stderr, "and %d warning(s) on what could be read (a problem above may be their cause):\n", len(ws))
			for _, w := range ws {
				fmt.Fprintf(stderr, "  - warning: %s\n", w)
			}
		}
		return 1
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	fmt.Fprintf(stdout, "config ok: %d kafka and %d nats cluster(s), interval %s (%s), listen %s (%s)\n", len(cfg.Kafka), len(cfg.NATS), cfg.Interval, cadence(cfg), cfg.Listen, exposure(cfg))
	return 0
}

// cadence says when the clusters are read faster than the interval (the
// engaged cadence, and whether nearCapacity uses it): what sets the
// daemon's read load on the brokers.
func cadence(cfg config.Config) string {
	e := cfg.EngagedCadence()
	switch {
	case e >= cfg.Interval:
		return "engaged cadence off"
	case cfg.NearCapacityOn():
		return fmt.Sprintf("engaged %s, also near capacity", e)
	}
	return fmt.Sprintf("engaged %s, not near capacity", e)
}

// exposure says in a few words how the daemon is reached and what the
// quota protocol asks of a caller.
func exposure(cfg config.Config) string {
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
		if cfg.TLS.ClientCAFile != "" {
			scheme += " with client certificates"
		}
	}
	switch a := cfg.Quota.Auth; {
	case !a.Open():
		return scheme + ", quota protocol with tokens"
	case a.Mode == quotaserver.AuthNone:
		return scheme + ", quota protocol open (quota.auth.mode: none)"
	default:
		return scheme + ", quota protocol open on loopback only"
	}
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) int {
	fs := config.Flags("run")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	cfg, err := config.Load(fs)
	if err != nil {
		report(stderr, err)
		// A misspelt LAGBRIDGE_CONFIG is often why Load failed: say so.
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(stderr, "  - warning: %s\n", w)
		}
		return 1
	}
	log := cfg.Logger(stderr)
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	defer ignoreHangup(log)()
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

// ignoreHangup logs and ignores SIGHUP until the returned stop is called
// (it waits for the goroutine it starts). Operators send SIGHUP to make a
// daemon reload; lagbridge reloads nothing on a signal, and Go's default
// (death at once, exit 129, no graceful stop, which systemd counts as a
// clean exit and so Restart=on-failure does not restart) is the worst
// answer to it.
func ignoreHangup(log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-hup:
				log.Warn("SIGHUP ignored: lagbridge reloads nothing on a signal. Read again when they change: the daemon's own TLS files (tls.certFile, keyFile, clientCAFile) and the quota protocol's token files (quota.auth's tokens[].tokenFile, adminTokensFile, readTokensFile). Read at each NATS connect: nats[].credsFile, and nats[].nkeyFile's seed (its public key at start). Read at start only, restart to apply a change: the config file and the LAGBRIDGE_* variables, the broker passwords and tokens (kafka[].sasl.passwordFile, nats[].passwordFile, nats[].tokenFile) and the brokers' TLS files (kafka[].tls, nats[].tls)")
			case <-done:
				return
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	duration := fs.Duration("duration", 0, "end the demo after this long (0: run until interrupted; the story then spans 60s)")
	listen := fs.String("listen", "127.0.0.1:9464", "the daemon's HTTP address (beyond loopback only with --no-auth)")
	noAuth := fs.Bool("no-auth", false, "serve the quota protocol without authentication (quota.auth.mode: none), to listen beyond loopback")
	rate := fs.Float64("rate", demo.StoryRate, "what the services offer together, messages per second per broker (checkout 1/6, orders-api 5/18, batch-export 5/9)")
	interval := fs.Duration("interval", time.Second, "observation interval")
	verbose := fs.Bool("verbose", false, "print the daemon's logs")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	o := demo.Options{Duration: *duration, Listen: *listen, NoAuth: *noAuth, ProduceRate: *rate, Interval: *interval, Out: stdout}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	// An error is reported unless the demo was interrupted (ctx): one
	// that wraps a deadline came from a step that timed out.
	if err := demo.Run(ctx, o); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "lagbridge demo: %v\n", err)
		return 1
	}
	return 0
}

// cmdConsole runs status or why against a running daemon's API. The
// address and token also come from LAGBRIDGE_URL and LAGBRIDGE_TOKEN.
func cmdConsole(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	addr := fs.String("url", envOr("LAGBRIDGE_URL", "http://127.0.0.1:9464"), "the daemon's HTTP address (env LAGBRIDGE_URL)")
	token := fs.String("token", os.Getenv("LAGBRIDGE_TOKEN"), "bearer token for the daemon's API (env LAGBRIDGE_TOKEN)")
	caFile := fs.String("cacert", "", "PEM file of the CA that signed the daemon's HTTPS certificate (default: the system's, or SSL_CERT_FILE)")
	certFile := fs.String("cert", "", "PEM client certificate, for a daemon with tls.clientCAFile (with --key)")
	keyFile := fs.String("key", "", "PEM key of --cert")
	var producer *string
	var since *time.Duration
	if name == "why" {
		producer = fs.String("producer", "", "the producer id (required)")
		since = fs.Duration("since", 10*time.Minute, "how far back; 0: everything the daemon holds")
	}
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	c := &console.Client{BaseURL: *addr, Token: *token}
	if *caFile != "" || *certFile != "" || *keyFile != "" {
		tc, err := clientTLS(*caFile, *certFile, *keyFile)
		if err != nil {
			fmt.Fprintf(stderr, "lagbridge %s: %v\n", name, err)
			return 2
		}
		// The default transport's proxy (HTTPS_PROXY), dial and handshake
		// timeouts stay; only the TLS changes, and HTTP/1.1 as the default
		// client speaks with a TLS config of its own: HTTP/2's "client conn
		// could not be established" hides why the handshake failed.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		tr.ForceAttemptHTTP2 = false
		c.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: tr}
	}
	if !strings.Contains(c.BaseURL, "://") {
		c.BaseURL = "http://" + c.BaseURL
	}
	var err error
	if name == "status" {
		err = console.Status(ctx, c, stdout)
	} else {
		err = console.Why(ctx, c, stdout, *producer, *since)
	}
	if err != nil {
		fmt.Fprintf(stderr, "lagbridge %s: %v\n", name, err)
		return 1
	}
	return 0
}

// clientTLS is the TLS of status and why: the CA in caFile (else the
// system's) and the client certificate in certFile and keyFile (both or
// neither).
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert: no PEM certificate in %s", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert, --key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
