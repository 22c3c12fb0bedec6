package bench

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestPhaseMembersTogether: with --phase a +members3 group's members start
// together, so that each one's commit timer starts at the phase, not the
// first's alone. Started one after the other, each once the one before
// was assigned (a rebalance, about 0.5 s on kfake), the third's timer ran
// about 0.5 s behind the first's (its commits 0.9 s after a reading at
// --phase 450ms, review-phase 2026-12-05). Three Java-loop members on
// kfake (each commits, an empty commit included, at the first poll after
// its 5 s timer): their first commits come within 100 ms of one another
// and about 5 s after the start.
func TestPhaseMembersTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three consumers on kfake for about 6 s")
	}
	start := time.Now()
	w, rec := headsWorld(t, BrokerKafka, start)
	c, err := startConsumer(context.Background(), w, testScenario(), rec, JavaAutoCommit5s, 3, "", slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := func() (at []time.Duration) {
		for _, cs := range rec.series().Commits {
			if len(cs) > 0 {
				at = append(at, cs[0])
			}
		}
		return at
	}
	for deadline := time.Now().Add(10 * time.Second); len(first()) < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	at := first()
	if len(at) < 3 {
		t.Fatalf("first commits %v in 10 s, want one from each of 3 members", at)
	}
	lo, hi := min(at[0], at[1], at[2]), max(at[0], at[1], at[2])
	if hi-lo > 100*time.Millisecond || lo < 5*time.Second || hi > 5500*time.Millisecond {
		t.Errorf("the members' first commits at %v after the start, want within 100 ms of one another, 5-5.5 s after it", at)
	}
}
