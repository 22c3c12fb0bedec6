package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Command is `lagbridge bench [flags]`: it parses args, runs [Run] and
// returns the process exit code: 0 after a complete run, 1 when a run
// failed or the files could not be written, 2 for bad flags, 3 with
// --strict when a lagbridge run missed one of issue 12's targets.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "results", "folder for bench.md, bench.png and the CSVs (created when missing)")
	loadList := fs.String("loads", "2,5,10", "offered loads, as multiples of the reduced capacity, comma-separated (--short: 2,10)")
	scale := fs.Float64("scale", 1, "multiply the phases (10s at full capacity, 20s reduced, 15s recovered) by this (--short: 0.4)")
	short := fs.Bool("short", false, "the short matrix: 6 rows, loads 2 and 10, phases x0.4 (a few minutes)")
	rows := fs.StringSlice("rows", nil, "run only the rows whose name matches one of these globs or substrings, e.g. 'kafka/guard/*' or '1s+abandoned' (see --list)")
	add := fs.StringSlice("row", nil, "run this row, given by name (BROKER/CONSUMER/PRODUCER/INTERVAL[+EXTRA]), even if it is in no matrix")
	list := fs.Bool("list", false, "print the rows of the matrix (with --short, the short one) and exit")
	brokers := fs.StringSlice("brokers", nil, "run only the rows on these brokers: kafka, nats, or both (default both)")
	kafkaAddr := fs.StringSlice("kafka", nil, "run the Kafka rows on this real cluster (seed broker addresses) instead of embedded kfake")
	natsURL := fs.String("nats", "", "run the NATS rows on this real server (JetStream enabled) instead of an embedded one")
	strict := fs.Bool("strict", false, "exit 3 when a lagbridge run misses a target of issue 12")
	phase := fs.String("phase", "", "start each run's consumer (and its commit timer) this long after one of the daemon's observation cycles (e.g. 450ms, modulo the row's interval), or at a phase drawn at random once for each cell, the same for its naive and lagbridge runs (random); default: at once once the daemon is ready")
	verbose := fs.Bool("verbose", false, "print the daemon's and the SDK's logs")
	hot := fs.Bool("hot-partition", false, "run the hot-partition scenario instead of the matrix: 6 partitions, partition 0's consumer 100x slower, keyless and keyed producers, naive and lagbridge (on kfake, or on --kafka); --scale multiplies its 60s runs")
	hotInterval := fs.Duration("hot-interval", time.Second, "the daemon's observation interval in the hot-partition scenario")
	hotCommit := fs.Duration("hot-commit", 250*time.Millisecond, "in the hot-partition scenario, how often the consumer commits what it processed (5s: franz-go's and Java's default autocommit interval)")
	hotKeys := fs.String("hot-keys", HotBoth, "in the hot-partition scenario, which runs: keyless (franz-go's sticky partitioner), keyed (keys spread over all partitions) or both")
	hotConsumer := fs.String("hot-consumer", HotPlain, "in the hot-partition scenario, the consumer: plain (its commits alone tell the daemon where it is) or hook (the same, with consumerclient's hook reporting what it finished every 250ms)")
	hotSlowAfter := fs.Duration("hot-slow-after", 0, "in the hot-partition scenario, partition 0's consumer slows down this long after the start (0: slow from the start); the figures count from then on")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lagbridge bench [flags]\n\nThe overload benchmark matrix: naive producers vs lagbridge, side by side, per consumer, producer and observation interval.\n\n")
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
	ph, err := ParseStartPhase(*phase)
	if err != nil {
		fmt.Fprintf(stderr, "lagbridge bench: %v\n", err)
		return 2
	}
	if *hot {
		return hotCommand(ctx, HotOptions{Phase: ph, Duration: time.Duration(*scale * float64(time.Minute)), Interval: *hotInterval, SlowAfter: *hotSlowAfter, Keys: *hotKeys, Consumer: *hotConsumer, CommitEvery: *hotCommit, KafkaBrokers: *kafkaAddr, Out: stdout}, *out, *verbose, stderr)
	}
	if *short && !fs.Changed("loads") {
		*loadList = "2,10"
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
	matrix := FullMatrix()
	if *short {
		matrix = ShortMatrix()
	}
	selected, err := SelectRows(matrix, *rows)
	if err != nil {
		fmt.Fprintf(stderr, "lagbridge bench: %v\n", err)
		return 2
	}
	if len(*rows) > 0 && *short {
		// A pattern picks from the full matrix too: --short then only
		// shortens the phases and the loads.
		selected, _ = SelectRows(FullMatrix(), *rows)
	}
	selected = append(selected, namedRows(LegacyRows(), string(Legacy), *rows)...)
	selected = append(selected, namedRows(WorkerRows(), string(Workers), *rows)...)
	if len(*add) > 0 && len(*rows) == 0 {
		selected = nil
	}
	for _, name := range *add {
		r, err := ParseRow(name)
		if err != nil {
			fmt.Fprintf(stderr, "lagbridge bench: --row: %v\n", err)
			return 2
		}
		selected = append(selected, r)
	}
	o := Options{Phase: ph, Scale: *scale, Loads: loads, Rows: selected, Brokers: *brokers, KafkaBrokers: *kafkaAddr, NATSURL: *natsURL,
		OutDir: *out, Out: stdout}
	if o.Rows == nil {
		o.Rows = []Row{}
	}
	if *short && !fs.Changed("scale") {
		o.Scale = 0.4
	}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if *list {
		return listRows(o.withDefaults().Rows, *rows, stdout, stderr)
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
	if *strict && len(Misses(o.withDefaults().Scenario, results)) > 0 {
		fmt.Fprintln(stderr, "lagbridge bench: a lagbridge run missed a target (see the table)")
		return 3
	}
	return 0
}

// listRows prints rows for --list, one name a line (a star for the rows
// issue 12 asks for on real brokers), and on stderr what runs only by
// name: the legacy rows, the workers rows and the hot-partition scenario
// (those of them it did not list). No row (a
// --rows pattern that matches nothing) is exit 2, as a run of it is.
func listRows(rows []Row, patterns []string, stdout, stderr io.Writer) int {
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "lagbridge bench: no row matches --rows %s (see --list without --rows)\n", strings.Join(patterns, ","))
		return 2
	}
	legacy, workers := false, false
	for _, r := range rows {
		star := ""
		if r.Star {
			star = " *"
		}
		fmt.Fprintf(stdout, "%s%s\n", r.Name(), star)
		legacy = legacy || r.Producer == Legacy
		workers = workers || r.Consumer == Workers
	}
	names := func(rs []Row) string {
		var ns []string
		for _, r := range rs {
			ns = append(ns, r.Name())
		}
		return strings.Join(ns, ", ")
	}
	if !legacy {
		fmt.Fprintf(stderr, "not in the matrix: %s (--rows legacy: Kafka client quotas, real Kafka only); --hot-partition: the hot-partition scenario\n", names(LegacyRows()))
	}
	if !workers {
		fmt.Fprintf(stderr, "not in the matrix: %s (--rows workers: records handed to a worker per partition)\n", names(WorkerRows()))
	}
	return 0
}

// HotFile is the table hotCommand writes into the output folder.
const HotFile = "hot-partition.md"

// hotCommand runs [RunHot] for Command and writes its table to dir.
func hotCommand(ctx context.Context, o HotOptions, dir string, verbose bool, stderr io.Writer) int {
	if verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "lagbridge bench: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return 2
	}
	res, err := RunHot(ctx, o)
	if len(res) > 0 {
		if werr := writeFile(dir, HotFile, "# lagbridge bench, hot partition\n\n"+HotMarkdown(o, res)); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "lagbridge bench: %v\n", err)
		return 1
	}
	return 0
}

// writeFile writes text to dir/name, creating dir when missing.
func writeFile(dir, name, text string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
}
