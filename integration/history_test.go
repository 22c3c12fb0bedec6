package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/console"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// eventsOf reads /v1/events with query.
func eventsOf(tb testing.TB, base, query string) history.EventsResponse {
	tb.Helper()
	code, body := get(tb, base+"/v1/events?"+query)
	if code != 200 {
		tb.Fatalf("/v1/events?%s: %d %s", query, code, body)
	}
	var r history.EventsResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		tb.Fatal(err)
	}
	return r
}

// TestWhyDuringTheDemo: in the demo's world, a sheddable batch-export
// producer is cut when the consumers slow down and released when they
// recover; `lagbridge why --producer batch-export --since 2m` prints each
// cut and release with its time, rule and inputs, and they are the
// entries of /v1/events for the producer.
func TestWhyDuringTheDemo(t *testing.T) {
	const story = 16 * time.Second
	base, start := storyWorld(t, story) // slowed from 4s to 9.6s
	reportLoop(t, base, []quotaproto.Report{{Producer: "batch-export",
		Topics: []quotaproto.TopicDemand{{Topic: demo.KafkaTopic, Criticality: quotaproto.Sheddable, Demand: 1000}}}})
	var evs history.EventsResponse
	poll(t, 60*time.Second, func() (bool, string) {
		// A cut once the consumers slowed, and a release after it.
		evs = eventsOf(t, base, "producer=batch-export&since=2m")
		var cut, release time.Time
		for _, e := range evs.Events {
			switch {
			case e.Kind == history.KindCut && cut.IsZero() && e.At.After(start.Add(story/4)):
				cut = e.At
			case e.Kind == history.KindRelease && !cut.IsZero() && release.IsZero():
				release = e.At
			}
		}
		return !release.IsZero(), fmt.Sprintf("%d events; slowdown cut at %v, release at %v", len(evs.Events), cut, release)
	})
	var out bytes.Buffer
	if err := console.Why(context.Background(), &console.Client{BaseURL: base}, &out, "batch-export", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	after := eventsOf(t, base, "producer=batch-export&since=2m")
	text := out.String()
	t.Logf("lagbridge why --producer batch-export --since 2m:\n%s", text)
	printed := 0
	for _, e := range after.Events {
		line := console.Line(e)
		if !strings.Contains(text, line) {
			if e.Seq > evs.Events[len(evs.Events)-1].Seq {
				continue // logged after why ran
			}
			t.Errorf("why lacks event %d: %s", e.Seq, line)
			continue
		}
		printed++
		if !slices.Contains(e.Producers, "batch-export") {
			t.Errorf("event %d does not affect batch-export: %v", e.Seq, e.Producers)
		}
		// The line has the time, the rule and the inputs.
		for _, want := range []string{e.At.Local().Format("15:04:05.000"), "rule " + e.Rule.String(), fmt.Sprintf("lag %d", e.Inputs.Lag),
			"head age", "capacity", "predicted wait", "budget"} {
			if !strings.Contains(line, want) {
				t.Errorf("line of event %d lacks %q: %s", e.Seq, want, line)
			}
		}
		if e.Kind != history.KindSignal && e.Inputs.BudgetSeconds <= 0 {
			t.Errorf("event %d has no budget: %+v", e.Seq, e.Inputs)
		}
	}
	if printed < 2 || strings.Count(text, " cut ") == 0 || strings.Count(text, " release ") == 0 {
		t.Errorf("why printed %d events; want the cut and the release:\n%s", printed, text)
	}
	// Another producer's filter does not show batch-export's grants.
	for _, e := range eventsOf(t, base, "producer=checkout").Events {
		if e.Kind != history.KindSignal && e.Producers[0] != "checkout" {
			t.Errorf("producer=checkout returned %v", e)
		}
	}
}
