package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
)

// TestLoopFailureLog: a cluster whose cycles fail 30 times in a row (30 s
// down at a 1 s interval) and then answers logs, at INFO and above, one
// WARN line for the first failure and one INFO line for the recovery with
// the count; the 29 failures between are at DEBUG, with their count. The
// rule of groupmember.Failures (e737d3a). Red before: the failures after
// the first logged nothing, and the recovery no count; red against the
// mutant that warns every cycle (30 WARN lines).
func TestLoopFailureLog(t *testing.T) {
	const down = 30
	var logs testutil.Buffer
	store := NewStore(map[string]lag.Kind{"c1": lag.KindKafka})
	// A second outage of 5 cycles after 3 good ones: its first failure is
	// at WARN again (the count restarts at the recovery).
	src := &fakeSource{fail: func(n int) bool { return n <= down || n > down+3 && n <= down+8 }}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Source: src, Interval: 5 * time.Millisecond, Store: store,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(logs.String(), "observation recovered") < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	count := map[string]int{}
	var failures []float64
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		count[fmt.Sprintf("%s %s", m["level"], m["msg"])]++
		if n, ok := m["failures"].(float64); ok {
			failures = append(failures, n)
		}
		// The recovery says since when and for how long.
		if m["msg"] == "observation recovered" {
			since, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["since"]))
			if err != nil || since.IsZero() || m["for"] == nil {
				t.Errorf("recovery without since / for: %s", line)
			}
		}
	}
	want := map[string]int{"WARN observation failed": 2, "DEBUG observation failed": down - 1 + 4, "INFO observation recovered": 2}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("log lines by level %v, want %v:\n%s", count, want, logs.String())
	}
	// Counted 1 to 30, and the recovery says 30.
	if len(failures) != down+1+6 || failures[0] != 1 || failures[down-1] != down || failures[down] != down || failures[down+1] != 1 || failures[down+6] != 5 {
		t.Errorf("failures counted %v, want 1..%d then %d", failures, down, down)
	}
}
