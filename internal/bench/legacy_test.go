package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLegacyRows(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"kafka/commit-per-poll/legacy/1s", true},
		{"kafka/autocommit-5s/legacy/250ms", true},
		{"nats/ack-each/legacy/1s", false}, // client quotas are Kafka's
	}
	for _, c := range cases {
		_, err := ParseRow(c.name)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, r := range LegacyRows() {
		if errs := r.validate(); len(errs) > 0 {
			t.Errorf("%s: %v", r.Name(), errs)
		}
	}
}

// TestLegacyRowsSelected: the legacy rows are in no matrix; a --rows
// pattern that names them picks them, and no other pattern does.
func TestLegacyRowsSelected(t *testing.T) {
	cases := []struct {
		patterns []string
		want     int
	}{
		{[]string{"legacy"}, 2},
		{[]string{"kafka/*/legacy/1s"}, 2},
		{[]string{"commit-per-poll/legacy"}, 1},
		{[]string{"kafka/commit-per-poll/*"}, 0},
		{[]string{"1s"}, 0},
		{nil, 0},
	}
	for _, c := range cases {
		if got := namedRows(LegacyRows(), c.patterns); len(got) != c.want {
			t.Errorf("%q: %d rows, want %d", c.patterns, len(got), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Command(context.Background(), []string{"--rows", "legacy", "--list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, r := range LegacyRows() {
		if !strings.Contains(stdout.String(), r.Name()) {
			t.Errorf("--rows legacy --list does not list %s:\n%s", r.Name(), stdout.String())
		}
	}
}

func TestThrottlesKeepsTheLongest(t *testing.T) {
	var th throttles
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { th.OnBrokerThrottle(kgo.BrokerMetadata{}, time.Duration(i)*time.Millisecond, false) })
	}
	wg.Wait()
	if got := th.Longest(); got != 49*time.Millisecond {
		t.Fatalf("longest %v, want 49ms", got)
	}
}

func TestLongestIdle(t *testing.T) {
	bins := func(xs ...int64) [][]int64 { return [][]int64{xs} }
	cases := []struct {
		name                 string
		offered, acked, good []int64
		want                 time.Duration
	}{
		{"always consuming", []int64{5, 5, 5, 5}, []int64{5, 5, 5, 5}, []int64{5, 5, 5, 5}, 0},
		{"idle, nothing offered", []int64{0, 0, 0, 0}, []int64{0, 0, 0, 0}, []int64{0, 0, 0, 0}, 0},
		{"idle while demand is held back", []int64{5, 5, 5, 5, 5}, []int64{5, 0, 0, 0, 5}, []int64{5, 0, 0, 0, 5}, 300 * time.Millisecond},
		{"idle, all offered acked (nothing held)", []int64{5, 5, 5}, []int64{5, 5, 5}, []int64{5, 0, 5}, 0},
	}
	for _, c := range cases {
		s := &Series{Bin: 100 * time.Millisecond, Offered: bins(c.offered...), Acked: bins(c.acked...), Good: bins(c.good...)}
		if got := longestIdle(s); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
