package quota

import (
	"math"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestWaitDurationUnbounded: a wait too long for a Duration (a backlog
// over a capacity estimate near 0), infinite or not a number is
// unbounded, in the decision and in its reason, never a negative
// duration.
func TestWaitDurationUnbounded(t *testing.T) {
	for _, tc := range []struct {
		s    float64
		want time.Duration
		text string
	}{
		{0.5, 500 * time.Millisecond, "500ms"},
		{0, 0, "0s"},
		{743 / 1e-9, lag.Never, "unbounded"},
		{math.Inf(1), lag.Never, "unbounded"},
		{math.NaN(), lag.Never, "unbounded"},
	} {
		if got := waitDuration(tc.s); got != tc.want {
			t.Errorf("waitDuration(%v) = %v, want %v", tc.s, got, tc.want)
		}
		if got := secs(tc.s); got != tc.text {
			t.Errorf("secs(%v) = %q, want %q", tc.s, got, tc.text)
		}
	}
}
