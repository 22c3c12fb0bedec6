package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Command is `lagbridge bench [flags]`: it parses args, runs [Run] and
// returns the process exit code: 0 after a complete run, 1 when a run
// failed or the files could not be written, 2 for bad flags, 3 with
// --strict when a lagbridge run missed one of issue 7's targets.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "results", "folder for bench.md and bench.png (created when missing)")
	loadList := fs.String("loads", "2,5,10", "offered loads, as multiples of the reduced capacity, comma-separated")
	scale := fs.Float64("scale", 1, "multiply the phases (10s at full capacity, 20s reduced, 15s recovered) by this")
	short := fs.Bool("short", false, "a CI-sized run: --scale 0.3")
	brokers := fs.StringSlice("brokers", []string{BrokerKafka}, "brokers to run on: kafka, nats, or both")
	kafkaAddr := fs.StringSlice("kafka", nil, "run the Kafka runs on this real cluster (seed broker addresses) instead of embedded kfake")
	natsURL := fs.String("nats", "", "run the NATS runs on this real server (JetStream enabled) instead of an embedded one")
	interval := fs.Duration("interval", 0, "the daemon's observation interval (default 250ms)")
	noGuard := fs.Bool("no-guard", false, "lagbridge side: consumers without the ttl guard (they process dead messages too)")
	strict := fs.Bool("strict", false, "exit 3 when a lagbridge run misses a target of issue 7")
	verbose := fs.Bool("verbose", false, "print the daemon's and the SDK's logs")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lagbridge bench [flags]\n\nThe closed-loop overload benchmark: naive producers vs lagbridge, side by side.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "lagbridge bench: %v (see --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lagbridge bench: unexpected arguments %v\n", fs.Args())
		return 2
	}
	var loads []float64
	for _, f := range strings.Split(*loadList, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			fmt.Fprintf(stderr, "lagbridge bench: --loads: %q is not a number\n", f)
			return 2
		}
		loads = append(loads, v)
	}
	o := Options{Scale: *scale, Loads: loads, Brokers: *brokers, KafkaBrokers: *kafkaAddr, NATSURL: *natsURL,
		Interval: *interval, NoGuard: *noGuard, OutDir: *out, Out: stdout}
	if *short && !fs.Changed("scale") {
		o.Scale = 0.3
	}
	if *natsURL != "" && !fs.Changed("brokers") {
		o.Brokers = []string{BrokerNATS}
		if len(*kafkaAddr) > 0 {
			o.Brokers = []string{BrokerKafka, BrokerNATS}
		}
	}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "lagbridge bench: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return 2
	}
	results, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "lagbridge bench: %v\n", err)
		return 1
	}
	if *strict {
		t := DefaultTargets(o.withDefaults().Scenario)
		missed := false
		for _, r := range results {
			if r.Mode == ModeLagbridge && len(t.Check(r)) > 0 {
				missed = true
			}
		}
		if missed {
			fmt.Fprintln(stderr, "lagbridge bench: a lagbridge run missed a target (see the table)")
			return 3
		}
	}
	return 0
}
