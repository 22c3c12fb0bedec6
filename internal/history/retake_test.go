package history

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/quota"
	"github.com/prometheus/client_golang/prometheus"
)

// TestLogRetakeOver: a replica serves 100/s, follows while the other
// replica leads (and cuts to 50/s), and takes over again with 100/s: the
// producers go from 50 to 100/s, and its first INFO lines say so
// (review-lead32: red on 4badc28, compared with the 100/s it served before
// it followed, it logged nothing).
func TestLogRetakeOver(t *testing.T) {
	var logs bytes.Buffer
	l := NewLog(Config{}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry())
	serving := true
	l.Served = func(quota.Topic, string) bool { return serving }
	budget := func(string) time.Duration { return 2 * time.Second }
	step := func(i int, rate float64) {
		l.Observe(t0.Add(time.Duration(i)*time.Second), map[quota.Topic]quota.TopicDecision{orders: decision(quota.SignalSlowDown, rate, quota.RuleDrain)},
			[]quota.Lease{lease("a", rate, quota.SignalSlowDown)}, budget)
	}
	step(0, 100)
	serving = false
	step(1, 50)
	serving = true
	step(2, 100)
	evs, _ := l.Events(EventQuery{})
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s->%s notServed=%v", e.Kind, RateText(e.PrevRate), RateText(e.Rate), e.NotServed))
	}
	want := []string{"signal unlimited->100/s notServed=false", "cut unlimited->100/s notServed=false",
		"cut 100/s->50/s notServed=true", "signal unlimited->100/s notServed=false", "cut unlimited->100/s notServed=false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
