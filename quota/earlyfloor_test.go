package quota

import (
	"testing"
	"time"
)

// TestControllerEarlyFloorForgotten replays a lagbridge bench run of
// kafka/autocommit-1s/sync/1s at 2x on kfake (60fdf04's code): franz-go
// auto-commits every second, read every second. In its first readings the
// commit timer fell in phase with the observations (head at the commit
// 1.0 s, then 0), and the standing wait was learned at 0.93-1.0 s; from
// reading 6 on, every commit came just before an observation (head
// 0.001-0.005 s). Capacity drops from 2,000 to 400 msg/s at the bench's
// 10 s. Reading 10 shows it: lag 416, head 0.52 s, 387 consumed of 799
// produced; with the startup's standing wait (0.82 s) held, that read as
// no queue, and reading 11 (head 1.07 s) as a queue of 0.25 s, both
// unlimited, and the excess admitted after the drop was 1.49x its bound.
// The readings after the startup forget it (see learnFloor): limited at
// reading 10.
func TestControllerEarlyFloorForgotten(t *testing.T) {
	ds := replayStates(t, "ac1s1s-stalefloor.jsonl", time.Second)
	wantUnlimitedBefore(t, ds, 10, "before the drop")
	wantLimitedAtDrop(t, ds, 10, 11)
}
