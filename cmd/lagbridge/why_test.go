package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/console"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/internal/testutil"
)

// TestWhyDuringDemo is the acceptance test of the decision log: during
// `lagbridge demo`, once the consumers slowed and recovered,
// `lagbridge why --producer batch-export --since 2m` prints each cut and
// release of batch-export's grant with its time, rule and inputs, the same
// entries /v1/events gives for the producer.
func TestWhyDuringDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for 30s")
	}
	const story = 30 * time.Second // slowed from 7.5s to 18s
	var demoOut, demoErr testutil.Buffer
	done := make(chan int, 1)
	start := time.Now()
	go func() {
		done <- run([]string{"demo", "--duration", story.String(), "--listen", "127.0.0.1:0"}, &demoOut, &demoErr)
	}()
	t.Cleanup(func() {
		if code := <-done; code != 0 {
			t.Errorf("demo exit %d: %s", code, demoErr.String())
		}
	})
	var base string
	for base == "" && time.Since(start) < 20*time.Second {
		if m := regexp.MustCompile(`dashboard: (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(demoOut.String()); m != nil {
			base = m[1]
		}
		time.Sleep(50 * time.Millisecond) // polling the demo's output for its address
	}
	if base == "" {
		t.Fatalf("the demo printed no address:\n%s\n%s", demoOut.String(), demoErr.String())
	}
	events := func() []history.Event {
		resp, err := http.Get(base + "/v1/events?producer=batch-export&since=2m")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r history.EventsResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r.Events
	}
	// Wait for a cut once the consumers slowed and a release after it.
	var evs []history.Event
	for {
		evs = events()
		var cut, release bool
		for _, e := range evs {
			cut = cut || (e.Kind == history.KindCut && e.At.After(start.Add(story/4)))
			release = release || (cut && e.Kind == history.KindRelease)
		}
		if release {
			break
		}
		if time.Since(start) > story-3*time.Second {
			t.Fatalf("no cut and release of batch-export during the demo: %+v", evs)
		}
		time.Sleep(250 * time.Millisecond) // polling the daemon's log
	}
	// The demo's Kafka consumer commits on franz-go's 5 s default: the
	// daemon knows where it is from the consumer hook's reports.
	resp, err := http.Get(base + "/v1/lag?partitions=false")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Targets []struct {
			Cluster, Topic, Group string
			Source                string
			CommitIntervalSeconds float64
		} `json:"targets"`
	}
	err = json.NewDecoder(resp.Body).Decode(&l)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var kafkaSeen bool
	for _, tg := range l.Targets {
		if tg.Cluster != "demo-kafka" {
			continue
		}
		kafkaSeen = true
		t.Logf("%s/%s/%s: source %q, commit interval %.1fs", tg.Cluster, tg.Topic, tg.Group, tg.Source, tg.CommitIntervalSeconds)
		if tg.Source != "consumer" {
			t.Errorf("%s/%s/%s: source %q, want \"consumer\": the demo's Kafka consumer reports through the consumer hook", tg.Cluster, tg.Topic, tg.Group, tg.Source)
		}
	}
	if !kafkaSeen {
		t.Errorf("/v1/lag has no demo-kafka target: %+v", l.Targets)
	}
	code, out, stderr := runCLI("why", "--producer", "batch-export", "--since", "2m", "--url", base)
	if code != 0 {
		t.Fatalf("why: exit %d: %s", code, stderr)
	}
	t.Logf("lagbridge why --producer batch-export --since 2m:\n%s", out)
	after := events()
	lines := map[uint64]bool{}
	for _, e := range after {
		line := console.Line(e)
		if strings.Contains(out, line) {
			lines[e.Seq] = true
			for _, want := range []string{e.At.Local().Format("15:04:05.000"), "rule " + e.Rule.String(), "lag ", "head age", "capacity", "predicted wait", "budget 2.00s"} {
				if !strings.Contains(line, want) {
					t.Errorf("event %d: line lacks %q: %s", e.Seq, want, line)
				}
			}
		} else if e.Seq <= evs[len(evs)-1].Seq {
			t.Errorf("why lacks event %d of /v1/events: %s", e.Seq, line)
		}
	}
	kinds := map[history.EventKind]int{}
	for _, e := range after {
		if lines[e.Seq] {
			kinds[e.Kind]++
		}
	}
	if kinds[history.KindCut] == 0 || kinds[history.KindRelease] == 0 {
		t.Errorf("why printed %v; want cuts and releases", kinds)
	}
}
