package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/app"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/quota"
)

// Options configure a demo run. The zero value of each field means its
// default.
type Options struct {
	// Duration ends the demo by itself, counted from when its workload
	// starts (the brokers and the daemon are up); 0 runs until ctx is
	// done. The consumer's slow phase is scaled to it (default 60s when
	// 0).
	Duration time.Duration
	// Listen is the daemon's HTTP address. Default 127.0.0.1:9464. An
	// address beyond loopback needs NoAuth.
	Listen string
	// NoAuth serves the quota protocol without authentication
	// (quota.auth.mode: none), which the daemon requires before it
	// listens beyond loopback: the demo's producers have no tokens.
	NoAuth bool
	// ProduceRate is what the services offer together, in messages per
	// second per broker, split as StoryProducers (see Cast). Default
	// StoryRate (1,800).
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
		o.ProduceRate = StoryRate
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
		Kafka: []kafka.Config{{Cluster: KafkaCluster, Brokers: b.KafkaAddrs()}},
		NATS:  []nats.Config{{Cluster: NATSCluster, URLs: []string{b.NATSURL()}}},
	}
}

// validate refuses, after defaults, options the demo cannot run with, in
// the words of the flags that set them: a negative duration (it ran until
// interrupted, as 0 does) and a rate that is no rate.
func (o Options) validate() error {
	if o.Duration < 0 {
		return fmt.Errorf("--duration %v: must not be negative (0: run until interrupted)", o.Duration)
	}
	if !(o.ProduceRate > 0) || math.IsInf(o.ProduceRate, 1) {
		return fmt.Errorf("--rate %v: the services' offered rate must be a positive number of messages per second", o.ProduceRate)
	}
	return nil
}

// Run starts the embedded brokers, the daemon with the demo's quota policy,
// and the story (SDK producers of three criticalities, consumers that slow
// from Normal to Slow and recover); it prints a live summary every interval
// and a report at the end, and stops everything when ctx is done or the
// duration has passed.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	if err := o.validate(); err != nil {
		return err
	}
	if !o.NoAuth && !quotaserver.Loopback(o.Listen) {
		return fmt.Errorf("--listen %s is beyond loopback, where the quota protocol needs tokens the demo's producers do not have; pass --no-auth to serve it without authentication to anyone who can reach it", o.Listen)
	}
	// The duration counts from when the story starts, not from when the
	// brokers did: on a loaded machine their start took most of a short
	// run, and the demo then ended before it printed anything.
	runCtx, end := context.WithCancel(ctx)
	defer end()
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
	cfg.Quota.Policies = []quota.Policy{StoryPolicy()}
	if o.NoAuth {
		cfg.Quota.Auth.Mode = quotaserver.AuthNone
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := app.New(runCtx, cfg, o.Log)
	if err != nil {
		return err
	}
	story := o.Duration
	if story == 0 {
		story = time.Minute
	}
	base := "http://" + a.Addr()
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	st, err := StartStory(b, base, StepProfile(story, o.Normal, o.Slow), o.ProduceRate)
	if err != nil {
		end()
		<-done
		return err
	}
	if o.Duration > 0 {
		timer := time.AfterFunc(o.Duration, end)
		defer timer.Stop()
	}

	fmt.Fprintf(o.Out, "lagbridge demo: embedded Kafka %s, NATS %s\n", strings.Join(b.KafkaAddrs(), ","), b.NATSURL())
	fmt.Fprintf(o.Out, "dashboard: %s/   API: %s/v1/lag  %s/v1/quotas  %s/metrics\n", base, base, base, base)
	printCast(o.Out, o, story)

	start := time.Now()
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	prev := snapshotTallies(st)
	var maxHead = map[string]time.Duration{}
	for {
		select {
		case err := <-done:
			st.Close()
			Report(o.Out, time.Since(start), st, maxHead, o)
			if runCtx.Err() != nil {
				return nil // the duration passed, or ctx ended
			}
			return err
		case <-t.C:
			states := a.Store.States()
			for _, s := range states {
				maxHead[s.Target.Cluster] = max(maxHead[s.Target.Cluster], s.HeadAge)
			}
			cur := snapshotTallies(st)
			PrintLive(o.Out, time.Since(start), st.Speed(), states, a.Engine.Decisions(), cur, prev, o.Interval, st.KafkaQuotas())
			prev = cur
		}
	}
}

// printCast says who produces and consumes what, and how: the settings
// the demo's clients run with.
func printCast(out io.Writer, o Options, story time.Duration) {
	var offered float64
	var requests, jobs []string
	for _, p := range Cast(o.ProduceRate) {
		offered += p.Rate
		who := fmt.Sprintf("%s (%s, %.0f/s)", p.ID, p.Criticality, p.Rate)
		if p.Requests {
			requests = append(requests, who)
		} else {
			jobs = append(jobs, who)
		}
	}
	fmt.Fprintf(out, "producers offer %.0f msg/s per broker through the SDK: %s answer requests, one synchronous produce each;\n", offered, strings.Join(requests, " and "))
	fmt.Fprintf(out, "  %s produces asynchronously; franz-go's and nats.go's defaults otherwise\n", strings.Join(jobs, " and "))
	fmt.Fprintf(out, "consumers serve %.0f msg/s, slowed to %.0f msg/s from %s to %s; messages are dead after %s\n",
		o.Normal, o.Slow, (story / 4).Round(time.Second), (story * 3 / 5).Round(time.Second), MessageDeadline)
	fmt.Fprintf(out, "  kafka: franz-go's default 5 s auto-commit with the consumer hook reporting to the daemon; nats: acks each message;\n")
	fmt.Fprintf(out, "  both behind the ttl guard, which skips expired messages\n\n")
}

type tallies map[string][4]int64 // offered, acked, shed, failed

func snapshotTallies(st *Story) tallies {
	out := tallies{}
	for id, t := range st.Producers {
		out[id] = [4]int64{t.Offered.Load(), t.Acked.Load(), t.Shed.Load(), t.Failed.Load()}
	}
	return out
}

// PrintLive writes one block of the live summary: each target's lag, head
// age against the deadline, allowed rate and signal; then each service's
// admitted rate on Kafka over the last interval.
func PrintLive(out io.Writer, elapsed time.Duration, speed int64, states []lag.State, ds []quota.Decision, cur, prev tallies, interval time.Duration, qs []producerclient.Quota) {
	allowed := map[lag.Target]quota.Decision{}
	for _, d := range ds {
		allowed[d.Target] = d
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "t=%s  consumers %d msg/s\ttarget\tstatus\tlag\thead age\tallowed\tsignal\n", elapsed.Round(time.Second), speed)
	for _, s := range states {
		d, ok := allowed[s.Target]
		rate, sig := "-", "-"
		if ok {
			rate, sig = "unlimited", d.Signal.String()
			if !d.IsUnlimited() {
				rate = fmt.Sprintf("%.0f/s", d.Rate)
			}
		}
		fmt.Fprintf(tw, "\t%s/%s\t%s\t%d\t%s / %s\t%s\t%s\n", s.Target.Cluster, s.Target.Topic, s.Status, s.Lag,
			s.HeadAge.Round(10*time.Millisecond), MessageDeadline, rate, sig)
	}
	var line strings.Builder
	for i, p := range StoryProducers {
		c, pr := cur[p.ID], prev[p.ID]
		grant := "open"
		if i < len(qs) && !math.IsInf(qs[i].Rate, 1) {
			grant = fmt.Sprintf("%.0f", qs[i].Rate)
		}
		fmt.Fprintf(&line, "  %s %.0f/%.0f (lease %s)", p.ID, float64(c[1]-pr[1])/interval.Seconds(), float64(c[0]-pr[0])/interval.Seconds(), grant)
	}
	fmt.Fprintf(tw, "\tdelivered/offered on kafka (msg/s):%s\n", line.String())

	tw.Flush()
}

// Report writes the end-of-run report: what each service got, goodput,
// dead work and head age against the deadline.
func Report(out io.Writer, elapsed time.Duration, st *Story, maxHead map[string]time.Duration, o Options) {
	fmt.Fprintf(out, "\n== lagbridge demo report (%s)\n", elapsed.Round(time.Second))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "service\tbroker\tcriticality\toffered\tdelivered\tshed by quota\tshed %\tfailed\t")
	for _, p := range StoryProducers {
		for _, b := range []struct{ name, key string }{{"kafka", p.ID}, {"nats", p.ID + natsSuffix}} {
			t := st.Producers[b.key]
			off := t.Offered.Load()
			pct := 0.0
			if off > 0 {
				pct = 100 * float64(t.Shed.Load()) / float64(off)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.1f%%\t%d\t\n", p.ID, b.name, p.Criticality, off, t.Acked.Load(), t.Shed.Load(), pct, t.Failed.Load())
		}
	}
	tw.Flush()
	for _, c := range []struct {
		name, cluster string
		t             *ConsumerTally
	}{{"kafka", KafkaCluster, &st.Kafka}, {"nats", NATSCluster, &st.NATS}} {
		good, dead, skipped := c.t.Good.Load(), c.t.Dead.Load(), c.t.Skipped.Load()
		consumed := good + dead
		deadPct := 0.0
		if consumed > 0 {
			deadPct = 100 * float64(dead) / float64(consumed)
		}
		fmt.Fprintf(out, "%s consumer: goodput %.0f msg/s (%d within the %s deadline), dead work %d (%.2f%%), expired and skipped %d; head age max %s, oldest processed %s\n",
			c.name, float64(good)/elapsed.Seconds(), good, MessageDeadline, dead, deadPct, skipped,
			maxHead[c.cluster].Round(10*time.Millisecond), time.Duration(c.t.MaxAge.Load()).Round(10*time.Millisecond))
	}
}
