package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/producerclient"
)

// Files Run writes into Options.OutDir.
const (
	TableFile = "bench.md"
	ChartFile = "bench.png"
)

// Run runs every row of o.Rows at every load, naive then lagbridge, prints
// progress and the tables to o.Out, and writes the tables, the chart and
// one CSV per run into o.OutDir. Rows whose naive side is the same (see
// Row.naiveKey) share one naive run per load. It returns the
// results of the runs that finished; the error is the first that stopped
// a run (ctx's when it ended), or an error writing the files. Every
// goroutine it starts has stopped when it returns.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	base := o.Scenario.Scaled(o.Scale)
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "lagbridge bench: %d rows x %d loads, runs of %s (capacity %s msg/s, %s from %s to %s; deadline %s)%s\n",
		len(o.Rows), len(o.Loads), dur(base.Duration()), num(base.Normal), num(base.Slow), dur(base.DropAt()), dur(base.RecoverAt()), dur(base.Deadline),
		phaseNote(base, o.Rows))
	var results []Result
	var runErr error
	id := runID(time.Now())
	naive := map[string]Result{}
	// One phase a naive run and its lagbridge runs: --phase random
	// draws once for both sides of a cell (and for a row sharing
	// another's naive run), so the pair differs in lagbridge alone.
	phases := map[string]time.Duration{}
	n := 0
loop:
	for ri, row := range o.Rows {
		scn := row.scenario(base)
		for _, load := range o.Loads {
			for _, mode := range []string{ModeNaive, ModeLagbridge} {
				key := fmt.Sprintf("%s@%v", row.naiveKey(), load)
				if r, ok := naive[key]; ok && mode == ModeNaive {
					r.Row = row
					results = append(results, r)
					continue
				}
				phase := cellPhase(phases, key, o.Phase, row.Interval)
				n++
				fmt.Fprintf(o.Out, "\n[row %d/%d] %s, offered %sx = %s msg/s, %s\n", ri+1, len(o.Rows), row.Name(), num(load), num(load*scn.Slow), mode)
				r, err := runOne(ctx, o, scn, row, load, mode, phase, fmt.Sprintf("%s-%d", id, n))
				if err != nil {
					runErr = fmt.Errorf("%s %sx %s: %w", row.Name(), num(load), mode, err)
					break loop
				}
				fmt.Fprintf(o.Out, "  done: goodput %s msg/s (%s of possible), dead work %s, true head age p99 %s (daemon's %s), refused %d, false-throttle seconds before / slow / blind / after %s\n",
					num(r.Goodput), pct(r.GoodputShare), pct(r.DeadShare), dur(r.TrueHeadAgeP99), dur(r.HeadAgeP99), r.Refused, falseSeconds(r))
				if mode == ModeLagbridge {
					fmt.Fprintf(o.Out, "  refused with the rate in force above the offer (the bucket's burst), before / slow / blind / after (whole run): %s; false-throttle seconds with only those: %s\n",
						aboveRefused(r), aboveSeconds(r))
					fmt.Fprintf(o.Out, "  refused by the SDK before sending, by reason (whole run): %s\n", shedReasons(r.Totals.Shed))
				}
				if mode == ModeNaive {
					naive[key] = r
				}
				results = append(results, r)
			}
		}
	}
	if len(results) == 0 {
		return nil, runErr
	}
	md := Markdown(base, results)
	fmt.Fprintf(o.Out, "\n%s", md)
	var errs []error
	errs = append(errs, runErr)
	if err := os.WriteFile(filepath.Join(o.OutDir, TableFile), []byte("# lagbridge bench\n\n"+md), 0o644); err != nil {
		errs = append(errs, err)
	}
	for _, r := range results {
		name := fmt.Sprintf("bench-%s-%sx-%s.csv", strings.ReplaceAll(strings.ReplaceAll(r.Row.Name(), "/", "_"), "+", "_"), num(r.Load), r.Mode)
		if err := os.WriteFile(filepath.Join(o.OutDir, name), CSV(r), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	png, err := Chart(base, results)
	if err == nil {
		err = os.WriteFile(filepath.Join(o.OutDir, ChartFile), png, 0o644)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("chart: %w", err))
	}
	fmt.Fprintf(o.Out, "\nwrote %s and %s\n", filepath.Join(o.OutDir, TableFile), filepath.Join(o.OutDir, ChartFile))
	return results, errors.Join(errs...)
}

// cellPhase is the phase of a cell's runs (negative: none), drawn once
// per key (a naive run's) and kept in phases, taken modulo iv for a row
// of another interval sharing that naive run.
func cellPhase(phases map[string]time.Duration, key string, p StartPhase, iv time.Duration) time.Duration {
	phase, ok := phases[key]
	if !ok {
		phase = p.pick(iv)
		phases[key] = phase
	}
	if phase > 0 && iv > 0 {
		phase %= iv
	}
	return phase
}

// runOne runs the scenario once: fresh broker (or topic), daemon,
// consumer, producers; then tears everything down.
func runOne(ctx context.Context, o Options, scn Scenario, row Row, load float64, mode string, phase time.Duration, id string) (Result, error) {
	kind := row.Consumer
	if mode == ModeNaive {
		kind = kind.naive()
	}
	w, err := startWorld(ctx, o, row, id)
	if err != nil {
		return Result{}, err
	}
	defer w.Close()
	d, err := startDaemon(ctx, o, scn, w, row.Interval, row.Producer == Legacy && mode == ModeLagbridge)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = d.stop() }()
	if w.abandoned != "" {
		if err := d.waitAbandoned(ctx, w, abandonWait); err != nil {
			fmt.Fprintf(o.Out, "  warning: %v; starting anyway\n", err)
		}
	}

	if phase >= 0 {
		if err := waitPhase(ctx, d, row.Interval, phase); err != nil {
			return Result{}, err
		}
		who := "consumer"
		if n := row.Extra.members(); n > 1 {
			who = fmt.Sprintf("consumer's %d members (together)", n)
		}
		fmt.Fprintf(o.Out, "  %s started %s after a daemon cycle (--phase %s)\n", who, dur(phase), o.Phase)
	}
	rec := newRecorder(len(scn.Classes), scn.Duration(), o.Bin)
	c, err := startConsumer(ctx, w, scn, rec, kind, row.Extra.members(), d.base, o.Log.With("side", "consumer"), phase >= 0)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()

	var s sender
	switch {
	case (mode == ModeNaive || row.Producer == Legacy) && row.Broker == BrokerKafka:
		s, err = newNaiveKafka(w, scn, rec)
	case mode == ModeNaive:
		s = newNaiveNATS(w, rec)
	case row.Broker == BrokerKafka:
		s, err = newSDKKafka(o, scn, w, d.base, rec)
	default:
		s, err = newSDKNATS(o, scn, w, d.base, rec)
	}
	if err != nil {
		return Result{}, err
	}
	offered := load * scn.Slow
	for _, cl := range scn.Classes {
		rec.offer = append(rec.offer, offered*cl.Share)
	}
	rec.rateOf = rateOf(s)
	f := newFleet(row.Producer, s, scn, rec)
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
		if err := waitLeases(ctx, s, 10*time.Second); err != nil {
			fmt.Fprintf(o.Out, "  warning: %v; starting anyway\n", err)
		}
	}

	// The run.
	start := time.Now()
	rec.begin(start)
	rctx, cancel := context.WithDeadline(ctx, start.Add(scn.Duration()))
	defer cancel()
	var wg sync.WaitGroup
	for i, cl := range scn.Classes {
		wg.Go(func() {
			generate(rctx, start, offered*cl.Share, func(created time.Time, late time.Duration) {
				rec.add(rec.offered, i, created)
				rec.late(created, late)
				f.send(rctx, i, created)
			})
		})
	}
	wg.Go(func() { sample(rctx, rec, d, w, f) })
	wg.Go(func() { progress(rctx, o, rec, scn, start, fmt.Sprintf("%s %sx %s", row.Name(), num(load), mode)) })
	<-rctx.Done()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	c.Close()
	closeFleet()
	rec.setCycles(d.cycles(w, start, start.Add(scn.Duration())))
	if err := d.stop(); err != nil {
		fmt.Fprintf(o.Out, "  warning: the daemon stopped with %v\n", err)
	}
	r := Analyze(scn, row, w.name, mode, load, rec.series(), tot)
	r.Phase.Start, r.Phase.StartSet = phase, phase >= 0
	return r, nil
}

// rateOf returns how to read a class's rate in force from s's SDK
// producers, nil for the naive ones.
func rateOf(s sender) func(int) float64 {
	q := func(p sdkProducer, topic string) float64 {
		v, _ := p.Quota(topic)
		if v.Closed {
			return 0
		}
		return v.Rate
	}
	switch s := s.(type) {
	case *sdkKafka:
		ps, topic := s.producers, s.w.topic // close sets s.producers to nil
		return func(c int) float64 { return q(ps[c], topic) }
	case *sdkNATS:
		ps, topic := s.producers, s.w.topic
		return func(c int) float64 { return q(ps[c], topic) }
	}
	return nil
}

// waitLeases waits until every SDK producer holds a lease from the daemon
// (open while nothing lags).
func waitLeases(ctx context.Context, s sender, d time.Duration) error {
	var ps []func() (producerclient.Quota, bool)
	switch s := s.(type) {
	case *sdkKafka:
		for _, p := range s.producers {
			ps = append(ps, func() (producerclient.Quota, bool) { return p.Quota(s.w.topic) })
		}
	case *sdkNATS:
		for _, p := range s.producers {
			ps = append(ps, func() (producerclient.Quota, bool) { return p.Quota(s.w.topic) })
		}
	}
	return waitQuotas(ctx, ps, d)
}

// waitQuotas waits until every quota of ps comes from a lease, at most d.
func waitQuotas(ctx context.Context, ps []func() (producerclient.Quota, bool), d time.Duration) error {
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
func sample(ctx context.Context, rec *recorder, d *daemon, w *world, f *fleet) {
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
			truth := rec.heads.age(time.Now()).Seconds()
			rec.setSample(i, d.look(w), f.allowed(), truth)
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
			head, allowed, truth := rec.lastSample(i)
			el := now.Sub(start)
			fmt.Fprintf(o.Out, "  [%s] t=%4.1fs capacity %5s | offered %5s stored %5s allowed %5s | processed good %5s dead %5s, skipped %5s | head age %s (daemon's %s)\n",
				name, el.Seconds(), num(scn.Capacity(el)), num(float64(off)/secs), num(float64(ack)/secs), rateStr(allowed),
				num(float64(good)/secs), num(float64(dead)/secs), num(float64(skip)/secs), secStr(truth), secStr(head))
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

// runID names one bench invocation's topics, groups and streams: the
// time, seconds, and a random suffix, so that two invocations started in
// the same second on one cluster (side by side, as comparisons are run)
// do not share a topic and a consumer group.
func runID(now time.Time) string {
	return fmt.Sprintf("%d%06d", now.Unix()%1_000_000, rand.IntN(1_000_000))
}
