package consumerclient

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestKafkaReporterKeepAgainstDaemon12: a keep-mode hook (held, skipped and ownPace
// all unknown to it) against a 1.2 daemon: each field refused once and
// stripped in the same round, the reports then land at the finished
// position, and no refusal is counted.
func TestKafkaReporterKeepAgainstDaemon12(t *testing.T) {
	const topic = "old12keep"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 5, time.Now())
	old := &olderDaemon[report12]{}
	ts := httptest.NewServer(old)
	defer ts.Close()
	rep, recs := hookedPollWith(t, c, topic, Config{URL: ts.URL, KeepUntilFinished: true}, 5)
	rep.Done(recs[0])
	waitFor(t, "three reports at the finished position", func() bool {
		return old.count(func(p quotaproto.ConsumerPartition) bool { return p.Position == recs[1].Offset && p.HeadTimeMs > 0 }) >= 3
	})
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.refused) != 3 {
		t.Errorf("the 1.2 daemon refused %q, want 3 (held, skipped, ownPace, once each)", old.refused)
	}
	if n := rep.s.count(outcomeRefused); n != 0 {
		t.Errorf("the hook counts %d refused reports, want 0", n)
	}
}
