package publish

import (
	"math"
	"testing"
	"time"
)

// broker plays Kafka 4.3.1's quota accounting for one client (kafkaRate),
// a second at a time: send is the next second's bytes, in n requests
// spread over the second (n = 1: one request at its start), under quota
// q, and returns the longest throttle Kafka answers them with; a second
// with nothing sent is no request.
type broker struct {
	k    kafkaRate
	sent []float64 // bytes per second, one entry per second
}

func (b *broker) send(bytes, q float64, n int) time.Duration {
	at := time.Duration(len(b.sent)) * time.Second
	b.sent = append(b.sent, bytes)
	var d time.Duration
	for i := 0; bytes > 0 && i < n; i++ {
		d = max(d, b.k.record(at+time.Duration(i)*time.Second/time.Duration(n), bytes/float64(n), q))
	}
	return d
}

// TestSteeringBoundsThrottle: a producer with a steady demand, sending as
// much as its quota lets it, one observation per second. Whatever the
// grant (a cut to a tenth, a cut to 0 msg/s, a rise), the quota stored
// never makes Kafka's own rule hold the producer longer than the hold,
// reaches what is wanted when that stays, and rises at once.
func TestSteeringBoundsThrottle(t *testing.T) {
	const demand = 100_000.0 // B/s
	cases := []struct {
		name    string
		want    float64
		reach   int // seconds within which the stored value is within 5% of want
		hold    time.Duration
		noSteer bool
	}{
		// Kafka's rule makes a 1 s hold step slowly on its default
		// 11 s window: a tenth takes about two and a half minutes.
		{"cut to a tenth", demand / 10, 160, time.Second, false},
		{"cut to a half", demand / 2, 60, time.Second, false},
		{"0 msg/s is not a 41 B/s quota at once", 0, 0, time.Second, false},
		{"a longer hold steps faster", demand / 10, 40, 5 * time.Second, false},
		{"no hold: the value is what is wanted", demand / 10, 1, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &broker{k: kafkaRate{w: DefaultWindow}}
			for range 20 { // unthrottled, at full demand
				b.send(demand, Ceiling, 100)
			}
			s := Steering{Hold: c.hold}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var longest time.Duration
			reached := -1
			var first, v float64
			for sec := range 200 {
				now := t0.Add(time.Duration(sec) * time.Second)
				sent := b.sent[len(b.sent)-1]
				v = s.Next(now, map[string]float64{"legacy": c.want}, map[string]float64{"legacy": sent})["legacy"]
				if sec == 0 {
					first = v
				}
				longest = max(longest, b.send(min(demand, Marked(v)), Marked(v), 100))
				if reached < 0 && v <= max(c.want*1.05, c.want+MarkerModulus) {
					reached = sec
				}
			}
			if c.noSteer {
				if first != c.want {
					t.Fatalf("without hold the value is %v, want %v", first, c.want)
				}
				return
			}
			if longest > c.hold+c.hold/10 {
				t.Errorf("Kafka would hold the producer %v, longer than %v", longest, c.hold)
			}
			if lowest := Floor(demand, DefaultWindow, c.hold); first < lowest*0.99 {
				t.Errorf("the first value %v jumped from %v B/s (lowest allowed %v)", first, demand, lowest)
			}
			if c.reach > 0 && (reached < 0 || reached > c.reach) {
				t.Errorf("reached the wanted %v B/s after %d s (value %v), want within %d s", c.want, reached, v, c.reach)
			}
			t.Logf("longest throttle %v, first value %.0f, within 5%% of want after %d s", longest, first, reached)
		})
	}
	// A rise is set at once.
	s := Steering{Hold: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Next(t0, map[string]float64{"a": 1000}, map[string]float64{"a": 1000})
	if v := s.Next(t0.Add(time.Second), map[string]float64{"a": 50_000}, map[string]float64{"a": 1000})["a"]; v != 50_000 {
		t.Fatalf("a rise to 50000 B/s stored %v", v)
	}
}

func TestFloor(t *testing.T) {
	cases := []struct {
		name     string
		observed float64
		hold     time.Duration
		want     float64
	}{
		{"11 s window, 1 s hold", 12_000, time.Second, 11_000},
		{"hold as long as the window halves", 10_000, 11 * time.Second, 5_000},
		{"nothing observed", 0, time.Second, 0},
		{"no hold", 10_000, 0, 0},
	}
	for _, c := range cases {
		if got := Floor(c.observed, DefaultWindow, c.hold); got != c.want {
			t.Errorf("%s: Floor = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSteeringLast: a value stored below what the client was estimated to
// send is held (Kafka throttles it); one at what is wanted above it is
// not; a client no longer quoted has no value.
func TestSteeringLast(t *testing.T) {
	s := Steering{Hold: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Next(t0, map[string]float64{"cut": 0, "free": 50_000}, map[string]float64{"cut": 12_000, "free": 12_000})
	if v, held, ok := s.Last("cut"); !ok || !held || v != 11_000 {
		t.Errorf("cut: %v, held %v, ok %v; want 11000 held", v, held, ok)
	}
	if v, held, ok := s.Last("free"); !ok || held || v != 50_000 {
		t.Errorf("free: %v, held %v, ok %v; want 50000 not held", v, held, ok)
	}
	s.Next(t0.Add(time.Second), map[string]float64{"free": 50_000}, nil)
	if _, _, ok := s.Last("cut"); ok {
		t.Error("a client no longer quoted still has a value")
	}
}

// TestSteeringRisingRate: a client whose rate rises keeps filling the
// broker's window until Kafka's next response, so the value counts the
// window one hold ahead: 10 kB/s for ten seconds, then 110 kB/s for one
// seen and one more to come, not the one second seen alone (which would
// hold it longer than the hold). A client seen idle until it sends is
// taken to have sent so over the whole span: the broker's window may hold
// what it sent before the daemon saw it.
func TestSteeringRisingRate(t *testing.T) {
	s := Steering{Hold: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Next(t0, map[string]float64{"a": 0}, map[string]float64{"a": 10_000})
	got := s.Next(t0.Add(time.Second), map[string]float64{"a": 0}, map[string]float64{"a": 110_000})["a"]
	if want := Floor((9*10_000+2*110_000)/11., DefaultWindow, time.Second); math.Abs(got-want) > 1e-6 {
		t.Errorf("stored %v, want %v (the window one second ahead)", got, want)
	}
	var idle Steering
	idle.Hold = time.Second
	idle.Next(t0, map[string]float64{"a": 0}, map[string]float64{"a": 0})
	got = idle.Next(t0.Add(time.Second), map[string]float64{"a": 0}, map[string]float64{"a": 110_000})["a"]
	if want := Floor(110_000, DefaultWindow, time.Second); math.Abs(got-want) > 1e-6 {
		t.Errorf("seen idle, then at 110 kB/s: stored %v, want %v (as if first seen)", got, want)
	}
}

// TestSteeringMinShare: a producer stopped for good keeps a quota of 1% of
// the rate it sent, halving every window span, never Kafka's few bytes
// per second, over which the burst it sends when a throttle ends would
// hold it for minutes.
func TestSteeringMinShare(t *testing.T) {
	s := Steering{Hold: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Next(t0, map[string]float64{"a": 0}, map[string]float64{"a": 100_000})
	var v float64
	for sec := 1; sec <= 33; sec++ {
		v = s.Next(t0.Add(time.Duration(sec)*time.Second), map[string]float64{"a": 0}, map[string]float64{"a": 0})["a"]
	}
	// Three window spans later the estimate is 0 and the floor an eighth of 1%.
	if want := MinShare * 100_000 / 8; math.Abs(v-want) > 1 {
		t.Errorf("stored %v after 33 s of nothing sent, want %v", v, want)
	}
	// Without a hold there is no steering: the value is what is wanted.
	var free Steering
	free.Next(t0, map[string]float64{"a": 0}, map[string]float64{"a": 100_000})
	if v := free.Next(t0.Add(time.Second), map[string]float64{"a": 0}, nil)["a"]; v != 0 {
		t.Errorf("without a hold stored %v, want 0", v)
	}
}

// TestSteeringBoundedByBusiest: two client-ids share a topic, one
// sending 80% of it; the split the daemon makes credits each with half
// (the broker does not say who sent what), and both are cut to 0 msg/s.
// The big one sends as much as its quota lets it, in bursts after its
// throttles as a request handler's producer does. Steered from the split
// alone its value falls below what holds it LongestHold; with the
// busiest producer's rate over the window as the bound, Kafka 4.3.1's
// sensor (kafkaRate) never holds it longer than LongestHold plus one
// sample.
func TestSteeringBoundedByBusiest(t *testing.T) {
	const topic = 100_000.0 // B/s, both together
	for _, bounded := range []bool{false, true} {
		b := &broker{k: kafkaRate{w: DefaultWindow}}
		for range 20 {
			b.send(0.8*topic, Ceiling, 100)
		}
		s := Steering{Hold: 3 * time.Second}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var longest time.Duration
		wait := 0 // seconds of throttle left
		for sec := range 60 {
			now := t0.Add(time.Duration(sec) * time.Second)
			var window float64
			for _, v := range b.sent[max(len(b.sent)-DefaultWindow.Num, 0):] {
				window += v
			}
			var bound map[string]float64
			if bounded {
				bound = map[string]float64{"big": window / float64(DefaultWindow.Num), "small": window / float64(DefaultWindow.Num)}
			}
			// The split: half of what the topic received each.
			last := b.sent[len(b.sent)-1]
			split := (last + 0.2*topic) / 2
			out := s.NextBounded(now, map[string]float64{"big": 0, "small": 0},
				map[string]float64{"big": split, "small": split}, nil, bound)
			q := out["big"]
			if wait > 0 {
				wait--
				b.send(0, q, 1)
				continue
			}
			// One request's worth, then Kafka's answer: what the window
			// allows now is sent in a burst, then the throttle.
			allow := max(q*float64(DefaultWindow.Num)-window+last, q)
			d := b.send(allow, q, 1)
			longest = max(longest, d)
			wait = int(d / time.Second)
		}
		// Kafka 4.3.1 keeps a request counted until Num samples after the
		// last request of its sample (11-12 s, kafkaRate): the bound holds
		// to LongestHold plus that one sample (7.0 s here; the split alone
		// 12.4 s).
		want := LongestHold + DefaultWindow.Size
		if bounded && longest > want {
			t.Errorf("bounded: longest throttle %s, want at most %s", longest, want)
		}
		if !bounded && longest <= want {
			t.Errorf("split alone: longest throttle %s; the test no longer shows the split's error", longest)
		}
		t.Logf("bounded %v: longest throttle %s", bounded, longest)
	}
}

// TestSteeringRoom pins what a client-id can have sent since the last
// call under the value stored then: its quota times the window's span,
// less what the window still holds, over the time since; never less than
// its quota.
func TestSteeringRoom(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := Steering{Hold: time.Second}
	if _, ok := s.Room("a", t0); ok {
		t.Fatal("Room of a client that got no value: ok")
	}
	s.Next(t0, map[string]float64{"a": 1100}, map[string]float64{"a": 1100})
	s.Next(t0.Add(time.Second), map[string]float64{"a": 2200}, map[string]float64{"a": 0})
	cases := []struct {
		at   time.Duration
		want float64
	}{
		// Stored 2,200; the window from 8 s before t0 to the last call
		// holds 8 s of 1,100 and 1 s of nothing: (2,200 x 11 - 8,800) / 2.
		{3 * time.Second, 7700},
		// From 9.5 s before t0: (24,200 - 10,450) / 0.5.
		{1500 * time.Millisecond, 27500},
		{time.Second, 2200}, // no time since: the quota
	}
	for _, c := range cases {
		if got, ok := s.Room("a", t0.Add(c.at)); !ok || math.Abs(got-c.want) > 1e-6 {
			t.Errorf("Room at t0+%s = %v, %v; want %v", c.at, got, ok, c.want)
		}
	}
	// A value below the window's rate (stored 1,100 x 11/12 under a cut
	// to 100): the window one second later holds more than the quota's
	// span's worth, and the room is the quota.
	s = Steering{Hold: time.Second}
	s.Next(t0, map[string]float64{"a": 1100}, map[string]float64{"a": 1100})
	s.Next(t0.Add(time.Second), map[string]float64{"a": 100}, map[string]float64{"a": 1100})
	if got, _ := s.Room("a", t0.Add(2*time.Second)); math.Abs(got-1100*11.0/12) > 1e-6 {
		t.Errorf("Room under a cut = %v, want the stored %v", got, 1100*11.0/12)
	}
}

// TestSteeringWindowOneSampleLate: a client trickling 5,000 B/s under a
// cut to 0 with one release of 375 kB among its readings, and Kafka's
// window as the readings see it one sample longer than its span (the
// broker counts a request when it handles it, the daemon a reading's
// bytes over the whole interval before it). When the release leaves the
// steering's span it is still in Kafka's window for up to a sample: the
// value stored then holds the client no longer than LongestHold. On
// Kafka 4.3.1 under load the window counted bytes written 11.6 s before
// (by the producers' write times), and the value stepped down from the span alone
// (29,737 to 17,065 B/s a second after such a release left the span)
// held three producers of a shared client.id 14.6 s at a response.
func TestSteeringWindowOneSampleLate(t *testing.T) {
	s := Steering{Hold: time.Second}
	t0 := time.Unix(1000, 0)
	var sent []float64
	for sec := range 40 {
		r := 5000.0
		if sec == 15 {
			r = 375_000
		}
		sent = append(sent, r)
		q := s.Next(t0.Add(time.Duration(sec)*time.Second), map[string]float64{"a": 0}, map[string]float64{"a": r})["a"]
		// Kafka's window one sample late: the last Num+1 readings, over
		// the span.
		var sum float64
		for _, v := range sent[max(len(sent)-DefaultWindow.Num-1, 0):] {
			sum += v
		}
		rate, span := sum/DefaultWindow.Span().Seconds(), DefaultWindow.Span()
		if d := time.Duration((rate - q) / q * float64(span)); d > LongestHold+time.Millisecond {
			t.Errorf("t=%d s: stored %.0f B/s under a window of %.0f B/s: held %s, want at most %s", sec, q, rate, d, LongestHold)
		}
	}
}
