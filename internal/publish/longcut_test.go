package publish

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/quota"
)

// longCut steers three request handlers' producers sharing client.id
// legacy (16 records of 300 B at a time, synchronously, muted while Kafka
// throttles them) on kfake's three brokers leading orders unevenly, 20 s
// unlimited, then cut s of a cut to 0, with other records/s written to
// the topic by producers no policy lists. Kafka 4.3.1's quota sensor
// and throttle rule (kafkaRate) are played per broker (kfake keeps the
// quota, it does not throttle). It returns the longest throttle and the listed records
// stored during the cut.
func longCut(t *testing.T, cut int, other float64) (longest time.Duration, admitted int) {
	cl := ledUnevenly(t)
	pols, topic := legacyPolicy(t)
	q := NewClientQuotas(cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var at time.Duration
	t0 := time.Unix(1000, 0)
	p := &ClientQuotaPublisher{Cluster: "c1", Quotas: q, BytesPerMessage: 300, Interval: time.Second,
		Now: func() time.Time { return t0.Add(at) }}
	brokers := []int32{0, 0, 1, 2} // the leader of each partition
	wins := map[int32]*kafkaRate{0: {w: DefaultWindow}, 1: {w: DefaultWindow}, 2: {w: DefaultWindow}}
	var muted [3]time.Duration
	stored := map[int32]float64{0: Ceiling, 1: Ceiling, 2: Ceiling}
	const tick = 10 * time.Millisecond
	var lastSec int
	for ; at < time.Duration(20+cut)*time.Second; at += tick {
		for i := range muted {
			if at < muted[i] {
				continue
			}
			var hold time.Duration
			for _, b := range brokers { // 4 records to each partition
				hold = max(hold, wins[b].record(at, 4*300, stored[b]))
			}
			muted[i] = at + hold
			longest = max(longest, hold)
			lastSec += 16
			if at >= 20*time.Second {
				admitted += 16
			}
		}
		if (at+tick)%time.Second != 0 {
			continue
		}
		rate := quota.Unlimited
		if at >= 20*time.Second {
			rate = 0
		}
		s := Snapshot{Policies: pols,
			Topics: map[quota.Topic]quota.TopicDecision{topic: {Policy: "in", Rate: rate, ProduceRate: float64(lastSec) + other}},
			Leases: []quota.Lease{{Producer: "legacy", Topic: topic, Rate: rate}}}
		lastSec = 0
		if err := p.Publish(ctx(t), s); err != nil {
			t.Fatal(err)
		}
		cur, err := q.Current(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for b := range stored {
			stored[b] = cur["legacy"]
		}
	}
	return longest, admitted
}

// TestClientQuotaLongCutShared: a client.id three request handlers share,
// cut to 0 for 60 s, is never held 10 s at a response (issue 17), alone
// on its topic or beside producers no policy lists, and alone the cut
// binds: it stores under a quarter of its demand (288,000 records in
// 60 s; 15,968 stored, held 5.4 s at most). With a quota's worth a
// second for the split's cap instead of the window's room
// ([Steering.Room]), the value taken after the burst a throttle's end
// lets through counts that burst short: held 12.8 s after 30 s of cut
// here, 30.5 s after 40 s and 1 min 21 s after 90 s (22 to 37 s on Kafka
// 4.3.1 after 30 s, before the room). Beside 1,000 unlisted records/s the
// cut hardly binds, as before (192,640 stored): the split credits the
// listed client-id with the topic's rate up to what its quota lets
// through.
func TestClientQuotaLongCutShared(t *testing.T) {
	for _, other := range []float64{0, 1000} {
		longest, admitted := longCut(t, 60, other)
		t.Logf("beside %v unlisted records/s: longest throttle %s, %d records stored during the 60 s cut", other, longest, admitted)
		if longest >= 10*time.Second {
			t.Errorf("beside %v unlisted records/s: held %s at a response, want under 10 s", other, longest)
		}
		if other == 0 && admitted > 288_000/4 {
			t.Errorf("alone: %d records stored during the cut to 0, want at most a quarter of the demand", admitted)
		}
	}
}

// TestClientQuotaLongerCutShared: however long the cut to 0 lasts, the
// shared client.id is never held 10 s at a response (issue 17): 5.4 s up
// to 180 s of cut, 8.1 s once from 193 s on (2,409 B/s stored), 18
// records/s of 4,800 offered through once the floors hold. Without the
// release floor ([Steering.NextBounded]) the stored value kept falling
// under the cut until one request a producer released after a throttle
// was worth more than the window plus 10 s of it: held 11.3 s at 70 s of
// cut, 22 s at 90 s and 1 min 47 s from 120 s on.
func TestClientQuotaLongerCutShared(t *testing.T) {
	for _, cut := range []int{120, 180, 300} {
		longest, admitted := longCut(t, cut, 0)
		t.Logf("cut %d s: longest throttle %s, %d records stored during the cut", cut, longest, admitted)
		if longest >= 10*time.Second {
			t.Errorf("cut %d s: held %s at a response (%d records stored), want under 10 s", cut, longest, admitted)
		}
		if offered := 4800 * cut; admitted > offered/4 {
			t.Errorf("cut %d s: %d of %d records stored, want at most a quarter of the demand", cut, admitted, offered)
		}
	}
}

// TestClientQuotaCutBindsBesideUnlisted: beside 1,000 unlisted records/s
// the cut still binds. The split's cap, the window's room less what the
// window holds ([Steering.Room]), keeps the listed client-id from being
// credited with the unlisted traffic: 192,640 stored; with no cap, or a
// cap of the span's worth of quota, all 288,000 records offered in 60 s.
func TestClientQuotaCutBindsBesideUnlisted(t *testing.T) {
	if _, admitted := longCut(t, 60, 1000); admitted > 250_000 {
		t.Errorf("beside 1,000 unlisted records/s: %d of 288,000 stored during the cut, want the cut to bind", admitted)
	}
}

// bufferedCut steers one producer that buffers what it is asked to send
// (100 kB/s) while Kafka holds it, up to maxBuf bytes, and sends it all
// when the hold ends; Kafka's sensor and throttle rule are played as in
// longCut, one reading a second with the bytes it sent. After 20 s
// unlimited the grant is cut to 0 for cut seconds, the first response
// after the cut holding it firstHold (a step down the estimate missed).
// It returns the longest throttle and the bytes sent during the cut.
func bufferedCut(cut int, maxBuf float64, firstHold time.Duration) (longest time.Duration, through float64) {
	s := Steering{Hold: time.Second}
	t0 := time.Unix(1000, 0)
	w := &kafkaRate{w: DefaultWindow}
	q := float64(Ceiling)
	var buf, sec float64
	var muted time.Duration
	const tick = 10 * time.Millisecond
	for at := time.Duration(0); at < time.Duration(20+cut)*time.Second; at += tick {
		buf = min(buf+100_000*tick.Seconds(), maxBuf)
		if at == 20*time.Second {
			muted = at + firstHold
		}
		if at >= muted && buf > 0 {
			h := w.record(at, buf, q)
			longest, muted = max(longest, h), at+h
			sec += buf
			if at >= 20*time.Second {
				through += buf
			}
			buf = 0
		}
		if (at+tick)%time.Second != 0 {
			continue
		}
		want := float64(Ceiling)
		if at >= 20*time.Second {
			want = 0
		}
		q = s.Next(t0.Add(at+tick), map[string]float64{"a": want}, map[string]float64{"a": sec})["a"]
		sec = 0
	}
	return longest, through
}

// TestSteeringBufferedCut: a producer that buffers while Kafka holds it
// releases more the longer it was held, so the release floor must not
// take such a burst for a request: from the 48 kB it releases after the
// 8 s hold (its buffer's most; Kafka, still counting the second before
// the cut, throttles it at once), a floor of a release a hold (without
// ReleaseShare's cap) let 46% of the demand through a cut to 0; with the
// cap 14.6%, held 6.0 s at most. Without the release floor it was held
// 9 min 47 s at a response. (A 16 kB buffer, this test's before Kafka
// 4.3.1's sensor was modelled, releases under the cap's tenth too little
// to tell: 17% through without the cap.)
func TestSteeringBufferedCut(t *testing.T) {
	const cut = 120
	longest, through := bufferedCut(cut, 48_000, 8*time.Second)
	t.Logf("longest throttle %s, %.0f of %d bytes sent during the cut", longest, through, 100_000*cut)
	if longest >= 10*time.Second {
		t.Errorf("held %s at a response, want under 10 s", longest)
	}
	if through > 0.25*100_000*cut {
		t.Errorf("%.0f of %d bytes sent during the cut to 0, want at most a quarter", through, 100_000*cut)
	}
}
