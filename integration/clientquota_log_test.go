package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/publish"
)

// TestRealKafkaClientQuotaLogLevels: a client-id's stored quota is logged
// at INFO when an operator needs the line (the first quota this process
// sets, a limit from unlimited, unlimited again, a clear, a move of more
// than a factor of 2 from the value last logged at INFO) and at DEBUG
// otherwise, every line with the value the broker then holds. Session 30
// read 57 INFO lines in 85 s for one client-id whose grant moved; before
// session 31 every step here was at INFO (red at steps 2, 3 and 5).
func TestRealKafkaClientQuotaLogLevels(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	id := unique("loglevel")
	var logs bytes.Buffer
	q := publish.NewClientQuotas(client(t, addr), slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	// Owns only its own client-id: the marked quotas other tests (or
	// runs) left on a shared broker are neither cleared nor written.
	q.Owns = func(c string) bool { return c == id }
	t.Cleanup(func() { _, _ = q.Apply(ctxT(t, 10*time.Second), nil) })
	steps := []struct {
		name  string
		want  float64 // bytes/s; 0: the quota cleared
		level string
	}{
		{"first quota", 100_000, "INFO"},
		{"down 10%", 90_000, "DEBUG"},
		{"down 40% from the last INFO", 60_000, "DEBUG"},
		{"down 55% from the last INFO", 45_000, "INFO"},
		{"up 90% from the last INFO", 85_000, "DEBUG"},
		{"lifted", publish.Ceiling, "INFO"},
		{"limited again", 200_000, "INFO"},
		{"cleared", 0, "INFO"},
		{"set again after the clear", 180_000, "INFO"},
		// An operator deleted the quota (kafka-configs --delete): the
		// broker held none, lagbridge sets it again.
		{"set again after someone else's clear", 170_000, "INFO"},
	}
	other := publish.NewClientQuotas(client(t, addr), slog.New(slog.DiscardHandler))
	other.Owns = q.Owns
	for _, s := range steps {
		if s.name == "set again after someone else's clear" {
			if _, err := other.Apply(ctxT(t, 10*time.Second), nil); err != nil {
				t.Fatal(err)
			}
			poll(t, 10*time.Second, func() (bool, string) {
				cur, err := q.Current(ctxT(t, 10*time.Second))
				_, has := cur[id]
				return err == nil && !has, fmt.Sprintf("%s: still on the broker (%v)", s.name, err)
			})
		}
		logs.Reset()
		want := map[string]float64{id: s.want}
		if s.want == 0 {
			want = nil
		}
		res, err := q.Apply(ctxT(t, 10*time.Second), want)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if len(res.Set)+len(res.Removed) != 1 {
			t.Fatalf("%s: %+v, want one write", s.name, res)
		}
		var line struct {
			Level, Msg string
			ClientID   string  `json:"client_id"`
			Stored     float64 `json:"producer_byte_rate"`
		}
		// The line of this client-id's write (a shared broker's other
		// marked quotas are named as left alone first).
		for l := range bytes.Lines(logs.Bytes()) {
			if json.Unmarshal(l, &line) == nil && line.ClientID == id {
				break
			}
		}
		if line.ClientID != id {
			t.Fatalf("%s: no line of %s in %q", s.name, id, logs.String())
		}
		if line.Level != s.level {
			t.Errorf("%s: %s %q at %s, want %s", s.name, line.Msg, logs.String(), line.Level, s.level)
		}
		// The line says what the broker holds.
		poll(t, 10*time.Second, func() (bool, string) {
			cur, err := q.Current(ctxT(t, 10*time.Second))
			v, has := cur[id]
			return err == nil && (s.want == 0 && !has || has && v == line.Stored),
				fmt.Sprintf("%s: logged %v, the broker holds %v (%v)", s.name, line.Stored, cur[id], err)
		})
	}
}
