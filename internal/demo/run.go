package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/lag"
)

// Options configure a demo run. The zero value of each field means its
// default.
type Options struct {
	// Duration ends the demo by itself; 0 runs until ctx is done. The
	// consumer's slow phase is scaled to it (default 60s when 0).
	Duration time.Duration
	// Listen is the daemon's HTTP address. Default 127.0.0.1:9464.
	Listen string
	// ProduceRate in messages per second per broker. Default 1000.
	ProduceRate float64
	// Normal and Slow are the consumers' speeds. Defaults 2000 and 400.
	Normal, Slow float64
	// Interval is the observation interval. Default 1s.
	Interval time.Duration
	// Out receives the live table; Log the daemon's logs.
	Out io.Writer
	Log *slog.Logger
}

func (o *Options) defaults() {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:9464"
	}
	if o.ProduceRate == 0 {
		o.ProduceRate = 1000
	}
	if o.Normal == 0 {
		o.Normal = 2000
	}
	if o.Slow == 0 {
		o.Slow = 400
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Config returns the daemon config that watches the embedded brokers.
func Config(b *Brokers, listen string, interval time.Duration) config.Config {
	return config.Config{
		Listen: listen, Interval: interval, ShutdownTimeout: 5 * time.Second,
		Log:   config.Log{Level: "info", Format: "text"},
		Rules: config.Rules{LagAge: 2 * time.Second},
		Kafka: []kafka.Config{{Cluster: "demo-kafka", Brokers: b.KafkaAddrs()}},
		NATS:  []nats.Config{{Cluster: "demo-nats", URLs: []string{b.NATSURL()}}},
	}
}

// Run starts the embedded brokers, the workload and the daemon, prints a
// live table every interval, and stops everything when ctx is done or the
// duration has passed.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	dir, err := os.MkdirTemp("", "lagbridge-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := StartBrokers(dir)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg := Config(b, o.Listen, o.Interval)
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, o.Log)
	if err != nil {
		return err
	}
	story := o.Duration
	if story == 0 {
		story = time.Minute
	}
	w, err := StartWorkload(b, o.ProduceRate, StepProfile(story, o.Normal, o.Slow))
	if err != nil {
		a.Close()
		return err
	}
	defer w.Close()

	fmt.Fprintf(o.Out, "lagbridge demo: embedded Kafka %s, NATS %s\n", strings.Join(b.KafkaAddrs(), ","), b.NATSURL())
	fmt.Fprintf(o.Out, "daemon on http://%s  (/v1/lag, /metrics)\n", a.Addr())
	fmt.Fprintf(o.Out, "producers %.0f msg/s; consumers %.0f msg/s, slowed to %.0f msg/s from %s to %s, then recovered\n\n",
		o.ProduceRate, o.Normal, o.Slow, (story / 4).Round(time.Second), (story * 3 / 5).Round(time.Second))

	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	start := time.Now()
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			s, werr := w.Stats()
			fmt.Fprintf(o.Out, "\nproduced kafka %d, nats %d; consumed kafka %d, nats %d\n", s.KafkaProduced, s.NATSProduced, s.KafkaConsumed, s.NATSConsumed)
			if werr != nil {
				fmt.Fprintf(o.Out, "workload error: %v\n", werr)
			}
			return err
		case <-t.C:
			PrintTable(o.Out, time.Since(start), a.Store.States())
		}
	}
}

// PrintTable writes one block of the live table.
func PrintTable(out io.Writer, elapsed time.Duration, states []lag.State) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "t=%s\ttarget\tstatus\tlag\thead age\tproduce/s\tconsume/s\tdrain\t\n", elapsed.Round(time.Second))
	for _, s := range states {
		drain := "never"
		if s.TimeToDrain != lag.Never {
			drain = s.TimeToDrain.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "\t%s/%s/%s\t%s\t%d\t%s\t%.0f\t%.0f\t%s\t\n", s.Target.Cluster, s.Target.Topic, s.Target.Group,
			s.Status, s.Lag, s.HeadAge.Round(10*time.Millisecond), s.ProduceRate, s.ConsumeRate, drain)
	}
	tw.Flush()
}
