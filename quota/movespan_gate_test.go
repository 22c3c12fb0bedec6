package quota

import (
	"testing"

	"github.com/lagbridge/lagbridge/lag"
)

// TestMoveSpanOnlyFaster: moveSpan widens the first span after the loop
// went from its interval to the engaged one (1 s, then 0.25 s), not at
// the jitter of readings at the interval (0.65 s, then 0.24 s at 250 ms:
// hot250-kafka-loaded.jsonl's spacings on a loaded machine).
func TestMoveSpanOnlyFaster(t *testing.T) {
	st := &lag.State{Source: lag.SourceCommits}
	for _, c := range []struct {
		base, gap, dt, want float64
	}{
		{1, 1, 0.25, 0.25 + 0.375},
		{1, 1.02, 0.2, 0.2 + 0.41},
		{0.25, 0.65, 0.24, 0.24},
		{0.25, 0.483, 0.171, 0.171},
		{1, 1.8, 0.9, 0.9},
	} {
		tc := &control{moveGap: c.gap}
		if got := moveSpan(tc, st, &reading{dt: c.dt}, c.dt, c.base); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("interval %vs, spacing %vs then %vs: span %.3fs, want %.3fs", c.base, c.gap, c.dt, got, c.want)
		}
	}
}
