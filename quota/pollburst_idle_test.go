package quota

import (
	"testing"
	"time"
)

// TestSimCommitCadenceNotHeldBeforeDrop: the 250 ms commit cadence row at
// 10x (TestSimCommitCadence's), before the drop: producers are not
// refused while the consumer idles. pollBurst's pause clause held the true
// 2,080 msg/s read after a false step down at 1,440 (the two moves with
// the low one) at 6.5 s, and the consumer idled 6.71-6.85 s.
func TestSimCommitCadenceNotHeldBeforeDrop(t *testing.T) {
	res, _ := runCadence(t, 250*time.Millisecond, 250*time.Millisecond, 10*lowCap)
	var idle float64
	for i, tt := range res.tickT {
		if tt <= dropAt && res.tickSpare[i] && res.tickAdmitd[i] < 0.99*res.tickOffered[i] {
			idle += res.cfg.tick.Seconds()
		}
	}
	if idle > 0 {
		t.Errorf("refused %.2f s before the drop while the consumer had capacity to spare, want 0", idle)
	}
}
