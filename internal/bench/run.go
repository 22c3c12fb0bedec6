package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/producerclient"
)

// Files Run writes into Options.OutDir.
const (
	TableFile = "bench.md"
	ChartFile = "bench.png"
)

// Run runs the scenario for every broker and load, naive then lagbridge,
// prints progress and the table to o.Out, and writes the table and the
// chart into o.OutDir. It returns the results of the runs that finished;
// the error is the first that stopped a run (ctx's when it ended), or an
// error writing the files. Every goroutine it starts has stopped when it
// returns.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	scn := o.Scenario.Scaled(o.Scale)
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	runs := len(o.Brokers) * len(o.Loads) * 2
	fmt.Fprintf(o.Out, "lagbridge bench: %d runs of %s (capacity %s msg/s, %s from %s to %s; deadline %s); observation interval %s\n",
		runs, dur(scn.Duration()), num(scn.Normal), num(scn.Slow), dur(scn.DropAt()), dur(scn.RecoverAt()), dur(scn.Deadline), o.Interval)
	var results []Result
	var runErr error
	id := strconv.FormatInt(time.Now().Unix()%1_000_000, 10)
	n := 0
loop:
	for _, broker := range o.Brokers {
		for _, load := range o.Loads {
			for _, mode := range []string{ModeNaive, ModeLagbridge} {
				n++
				fmt.Fprintf(o.Out, "\n[%d/%d] %s, offered %sx = %s msg/s, %s\n", n, runs, broker, num(load), num(load*scn.Slow), mode)
				r, err := runOne(ctx, o, scn, broker, load, mode, fmt.Sprintf("%s-%d", id, n))
				if err != nil {
					runErr = fmt.Errorf("%s %sx %s: %w", broker, num(load), mode, err)
					break loop
				}
				fmt.Fprintf(o.Out, "  done: goodput %s msg/s (%s of possible), dead work %s, head age p99 %s, reaction %s, recovery %s\n",
					num(r.Goodput), pct(r.GoodputShare), pct(r.DeadShare), dur(r.HeadAgeP99), dur(r.Reaction), dur(r.Recovery))
				results = append(results, r)
			}
		}
	}
	if len(results) == 0 {
		return nil, runErr
	}
	md := Markdown(scn, o.Interval, !o.NoGuard, results)
	fmt.Fprintf(o.Out, "\n%s", md)
	var errs []error
	errs = append(errs, runErr)
	if err := os.WriteFile(filepath.Join(o.OutDir, TableFile), []byte("# lagbridge bench\n\n"+md), 0o644); err != nil {
		errs = append(errs, err)
	}
	for _, r := range results {
		name := fmt.Sprintf("bench-%s-%sx-%s.csv", r.Broker, num(r.Load), r.Mode)
		if err := os.WriteFile(filepath.Join(o.OutDir, name), CSV(scn, r), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	png, err := Chart(scn, results)
	if err == nil {
		err = os.WriteFile(filepath.Join(o.OutDir, ChartFile), png, 0o644)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("chart: %w", err))
	}
	fmt.Fprintf(o.Out, "\nwrote %s and %s\n", filepath.Join(o.OutDir, TableFile), filepath.Join(o.OutDir, ChartFile))
	return results, errors.Join(errs...)
}

// runOne runs the scenario once: fresh broker (or topic), daemon,
// consumer, producers; then tears everything down.
func runOne(ctx context.Context, o Options, scn Scenario, broker string, load float64, mode, id string) (Result, error) {
	w, err := startWorld(ctx, o, broker, id)
	if err != nil {
		return Result{}, err
	}
	defer w.Close()
	d, err := startDaemon(ctx, o, scn, w)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = d.stop() }()

	rec := newRecorder(len(scn.Classes), scn.Duration(), o.Bin)
	guard := mode == ModeLagbridge && !o.NoGuard
	var c *consumer
	if broker == BrokerKafka {
		c, err = startKafkaConsumer(ctx, w, scn, rec, guard)
	} else {
		c, err = startNATSConsumer(ctx, w, scn, rec, guard)
	}
	if err != nil {
		return Result{}, err
	}
	defer c.Close()

	var f fleet
	switch {
	case mode == ModeNaive && broker == BrokerKafka:
		f, err = newNaiveKafka(w, scn, rec)
	case mode == ModeNaive:
		f = newNaiveNATS(w, rec)
	case broker == BrokerKafka:
		f, err = newSDKKafka(o, scn, w, d.base, rec)
	default:
		f, err = newSDKNATS(o, scn, w, d.base, rec)
	}
	if err != nil {
		return Result{}, err
	}
	closed := false
	var tot Totals
	closeFleet := func() {
		if !closed {
			closed = true
			tot = f.close()
		}
	}
	defer closeFleet()
	if mode == ModeLagbridge {
		if err := waitLeases(ctx, f, 10*time.Second); err != nil {
			fmt.Fprintf(o.Out, "  warning: %v; starting anyway\n", err)
		}
	}

	// The run.
	start := time.Now()
	rec.begin(start)
	rctx, cancel := context.WithDeadline(ctx, start.Add(scn.Duration()))
	defer cancel()
	var wg sync.WaitGroup
	offered := load * scn.Slow
	for i, cl := range scn.Classes {
		wg.Go(func() {
			generate(rctx, start, offered*cl.Share, func(created time.Time) {
				rec.add(rec.offered, i, created)
				f.send(rctx, i, created)
			})
		})
	}
	wg.Go(func() { sample(rctx, rec, d, w, f) })
	wg.Go(func() { progress(rctx, o, rec, scn, start, fmt.Sprintf("%s %sx %s", broker, num(load), mode)) })
	<-rctx.Done()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	c.Close()
	closeFleet()
	if err := d.stop(); err != nil {
		fmt.Fprintf(o.Out, "  warning: the daemon stopped with %v\n", err)
	}
	name := w.name
	return Analyze(scn, name, mode, load, rec.series(), tot), nil
}

// waitLeases waits until every SDK producer holds a lease from the daemon
// (open while nothing lags).
func waitLeases(ctx context.Context, f fleet, d time.Duration) error {
	var ps []func() (producerclient.Quota, bool)
	switch s := f.(type) {
	case *sdkKafka:
		for _, p := range s.producers {
			ps = append(ps, func() (producerclient.Quota, bool) { return p.Quota(s.w.topic) })
		}
	case *sdkNATS:
		for _, p := range s.producers {
			ps = append(ps, func() (producerclient.Quota, bool) { return p.Quota(s.w.topic) })
		}
	}
	deadline := time.Now().Add(d)
	for {
		all := true
		for _, q := range ps {
			if v, ok := q(); !ok || !v.FromLease {
				all = false
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every producer had a lease after %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sample records the daemon's and the SDK's view once per bin, at the end
// of each bin.
func sample(ctx context.Context, rec *recorder, d *daemon, w *world, f fleet) {
	t := time.NewTicker(rec.bin)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			i := rec.index(now.Add(-rec.bin / 2))
			if i < 0 {
				continue
			}
			rec.setSample(i, d.look(w), f.allowed())
		}
	}
}

// progress prints one line a second.
func progress(ctx context.Context, o Options, rec *recorder, scn Scenario, start time.Time, name string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			i := rec.index(now)
			if i < 0 {
				continue
			}
			var off, ack, good, dead, skip int64
			for c := range scn.Classes {
				for b := last; b < i; b++ {
					off += rec.offered[c][b].Load()
					ack += rec.acked[c][b].Load()
					good += rec.good[c][b].Load()
					dead += rec.dead[c][b].Load()
					skip += rec.skipped[c][b].Load()
				}
			}
			secs := float64(i-last) * rec.bin.Seconds()
			last = i
			if secs <= 0 {
				continue
			}
			head, allowed := rec.lastSample(i)
			el := now.Sub(start)
			fmt.Fprintf(o.Out, "  [%s] t=%4.1fs capacity %5s | offered %5s stored %5s allowed %5s | processed good %5s dead %5s, skipped %5s | head age %s\n",
				name, el.Seconds(), num(scn.Capacity(el)), num(float64(off)/secs), num(float64(ack)/secs), rateStr(allowed),
				num(float64(good)/secs), num(float64(dead)/secs), num(float64(skip)/secs), secStr(head))
		}
	}
}

func rateStr(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	}
	return num(math.Round(v))
}

func secStr(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2fs", v)
}
