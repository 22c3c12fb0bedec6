package publish

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Window is how a Kafka broker measures a client's byte rate for its
// quota: over Num samples of Size each (the broker settings
// quota.window.num, default 11, and quota.window.size.seconds, default 1).
type Window struct {
	Num  int
	Size time.Duration
}

// DefaultWindow is Kafka's default quota window: 11 samples of 1 s.
var DefaultWindow = Window{Num: 11, Size: time.Second}

// Span is the longest stretch the broker averages a client's rate over,
// Num x Size; Kafka scales a throttle by it. A zero Window spans
// DefaultWindow's 11 s.
func (w Window) Span() time.Duration {
	if w.Num <= 0 || w.Size <= 0 {
		return DefaultWindow.Span()
	}
	return time.Duration(w.Num) * w.Size
}

// sample returns the length of one of the broker's samples, Size; a zero
// Window's is DefaultWindow's.
func (w Window) sample() time.Duration {
	if w.Num <= 0 || w.Size <= 0 {
		return DefaultWindow.Size
	}
	return w.Size
}

// Floor returns the lowest quota, in bytes per second, that keeps Kafka
// from holding a client longer than hold when its rate over the window
// was observed bytes per second. Kafka throttles a client over its quota
// Q for (observed - Q) / Q x span, so the throttle stays within hold for
// Q >= observed x span / (span + hold). Floor is 0 for hold <= 0 or
// observed <= 0.
func Floor(observed float64, w Window, hold time.Duration) float64 {
	if observed <= 0 || hold <= 0 {
		return 0
	}
	span := w.Span().Seconds()
	return observed * span / (span + hold.Seconds())
}

// Window returns the broker quota window the cluster reports
// (quota.window.num and quota.window.size.seconds, cluster-wide as any
// broker answers them), with DefaultWindow for a setting it does not
// report or reports out of range. The error is the request's: the
// window returned with it is DefaultWindow.
func (c *ClientQuotas) Window(ctx context.Context) (Window, error) {
	w := DefaultWindow
	rcs, err := c.adm.DescribeBrokerConfigs(ctx)
	if err != nil {
		return w, fmt.Errorf("describe broker configs: %w", err)
	}
	for _, rc := range rcs {
		for _, cfg := range rc.Configs {
			n, err := strconv.Atoi(cfg.MaybeValue())
			if err != nil || n <= 0 {
				continue
			}
			switch cfg.Key {
			case "quota.window.num":
				w.Num = n
			case "quota.window.size.seconds":
				w.Size = time.Duration(n) * time.Second
			}
		}
	}
	return w, nil
}

// Steering turns the byte rates the daemon wants for client-ids into the
// values to store on the broker so that Kafka holds a producer no longer
// than Hold (or the hold NextHolding is given for it) at a response: a
// quota that falls steps down (by at most the factor [Floor] allows per
// call) instead of jumping to what is wanted, and a decision of 0 msg/s
// lowers the quota gradually, never below MinShare of the client's old
// rate, rather than setting the 41 B/s minimum at once. Rising quotas are
// set at once (raising throttles nobody).
//
// Its estimate of the rate the broker observed for a client is the mean,
// over the window's span, of the rates the client was seen to send
// between calls (sent, an estimate the caller makes: the broker does not
// say what each client-id sends, see [Share]), or the larger mean one
// Hold ahead with the last rate going on; a client first seen is taken to
// have sent at its first rate over the whole span. Not safe for
// concurrent use; the zero value is ready, with DefaultWindow and no hold
// (no steering: values are what is wanted).
type Steering struct {
	// Window is the broker's quota window; zero means DefaultWindow.
	Window Window
	// Hold is the longest throttle a stored value may cause, typically
	// the observation interval. Zero or negative: no steering.
	Hold time.Duration
	last map[string]float64
	est  map[string]float64 // the window rate estimated at the last call
	peak map[string]sample  // the highest window rate estimated, fading
	past map[string][]sample
	rel  map[string]float64 // the fewest bytes seen released after a silence under a throttle
	top  map[string]float64 // the highest window rate estimated, not fading
}

// MinShare is the least share of the highest rate a client-id was
// estimated to send (that estimate halving every window span since) that
// the value stored keeps, whatever is wanted: a producer Kafka stopped
// sends what it buffered at once when its throttle ends, and over a
// quota near nothing (Kafka's floor is a few bytes per second) a burst of
// a few kilobytes holds it for minutes. 1% of a producer's old rate takes
// such a burst within the hold.
const MinShare = 0.01

// Last returns the value stored for client-id id at the last call to
// Next and whether it was below the rate the client was estimated to
// send over the broker's window, so that Kafka throttles it (held); ok is
// false for a client that got no value.
func (s *Steering) Last(id string) (stored float64, held, ok bool) {
	stored, ok = s.last[id]
	return stored, ok && stored < s.est[id], ok
}

// Room returns the most bytes per second client-id id can have sent
// since the last call to Next under the value stored then, and false for
// a client that got no value. Kafka admits a client until the rate over
// its window passes its quota, so a client whose window holds little (a
// throttle just ended, or what it sent earlier has left the window) sends
// at once its quota times the window's span, less what the window still
// holds: its quota's worth a second only once the window is full. Taking
// a quota's worth a second for the most a client sent stored 20 kB/s
// after a burst of 1 MB that an 85 kB/s quota had let through in a
// second, and Kafka 4.3.1 held the three producers of that client-id
// 22 to 37 s at a response.
func (s *Steering) Room(id string, now time.Time) (float64, bool) {
	stored, ok := s.last[id]
	ps := s.past[id]
	if !ok || len(ps) == 0 {
		return stored, ok
	}
	prev := ps[len(ps)-1].at
	dt := now.Sub(prev).Seconds()
	if dt <= 0 {
		return stored, true
	}
	span := s.Window.Span()
	held := windowSum(ps, now.Add(-span), prev)
	return max(stored, (stored*span.Seconds()-held)/dt), true
}

// noteRelease keeps, for client-id id, the fewest bytes it was seen to
// send at rate r since the last call when it sent nothing in the reading
// before while the value stored held it: what a throttle's end released
// at once (a synchronous producer's request; the producers of a shared
// client.id released together send one each). Kafka holds a client whose
// quota Q is under its release B about B / Q at a response (the window
// then holds a release per hold), whatever the window's span, so the
// steering never stores less than B a hold (see [Steering.NextBounded]).
// A stored value that kept falling under a cut to 0, as its estimate and
// MinShare's peak fade, came below one release's worth: Kafka 4.3.1 held
// the three producers of a shared client.id 11 s at a response 48 s into
// the cut, 31 s at 57 s and 96 s by 175 s.
func (s *Steering) noteRelease(id string, now time.Time, r float64) {
	ps := s.past[id]
	if r <= 0 || len(ps) == 0 || ps[len(ps)-1].rate > 0 {
		return
	}
	if _, held, _ := s.Last(id); !held {
		return
	}
	b := r * now.Sub(ps[len(ps)-1].at).Seconds()
	if cur, ok := s.rel[id]; b > 0 && (!ok || b < cur) {
		s.rel[id] = b
	}
}

// ReleaseShare is the most of the highest rate a client-id was estimated
// to send that the release floor keeps ([Steering.NextBounded]): a
// producer that buffers while Kafka holds it releases what it buffered,
// which grows with the hold, and a floor of that over a hold let such a
// producer's whole demand through a cut to 0. A tenth keeps the cut's
// bite and still covers a synchronous producer sending a request a
// second or more (held then about 10 s a response at most).
const ReleaseShare = 0.1

type sample struct {
	at   time.Time
	rate float64
}

// windowSum returns the bytes samples ps (oldest first) stand for between
// start and end: each sample for the time since the one before, the
// oldest back to start.
func windowSum(ps []sample, start, end time.Time) float64 {
	var sum float64
	from := start
	for i, p := range ps {
		if i > 0 && ps[i-1].at.After(start) {
			from = ps[i-1].at
		}
		to := p.at
		if to.After(end) {
			to = end
		}
		if to.After(from) {
			sum += p.rate * to.Sub(from).Seconds()
		}
	}
	return sum
}

// Next returns the byte rate per client-id to store: for each client in
// want, at least want and at least the Floor of its estimated observed
// rate. sent is the byte rate each client was seen to send since the
// last call (a client absent from sent is taken to have sent all its
// last value allowed). now must not go backwards.
//
// The estimate counts the broker's window one Hold from now, with the
// client still at its last rate, when that holds more than the window
// now: a client whose rate rises (one just started, or one estimated
// low) fills the window until Kafka's next response, and a value computed
// from the window as it is now would hold it longer than Hold then.
func (s *Steering) Next(now time.Time, want, sent map[string]float64) map[string]float64 {
	return s.NextHolding(now, want, sent, nil)
}

// NextHolding is Next with a longest throttle of its own for some
// client-ids: hold[id], when positive, replaces Hold in id's Floor (the
// window is still projected one Hold ahead, the time to the next call).
func (s *Steering) NextHolding(now time.Time, want, sent map[string]float64, hold map[string]time.Duration) map[string]float64 {
	return s.NextBounded(now, want, sent, hold, nil)
}

// LongestHold is the longest Kafka may hold a client-id at a response
// under a value the steering stores, whatever its estimate: under #17's
// 10 s with room for what the bound misses. Kafka divides a window's bytes
// by 10 to 11 s, not the 11 s span, and the bytes per record measured
// from the log were about 10% short of a request handler's Produce
// requests: with 8 s, Kafka 4.3.1 held the bench's producers 9.8 s.
const LongestHold = 6 * time.Second

// NextBounded is NextHolding that, while steering, never stores less
// for a client-id than the Floor, with LongestHold, of bound[id]: a byte
// rate the client-id cannot have sent more than over the broker's window
// (the busiest producer's of its topics). The estimate from sent may be
// short (it is an estimate of how a topic's rate splits among its
// client-ids), and Kafka holds a client-id f x (window + hold) - window
// when it sent f times the estimate. Nor, while steering, less than the
// fewest bytes the client-id was seen to release at a throttle's end
// (see noteRelease) a hold, up to ReleaseShare of the highest rate it was
// estimated to send: a floor that does not fade, so a cut that lasts
// still holds it about a hold at a response. Nor, while steering, less
// than the Floor, with LongestHold, of its readings over the window and
// one of the broker's samples more, over the span: a reading's bytes
// are taken as spread over the time since the last one, and Kafka's
// window, as the readings place bytes, reaches up to a sample further
// back (Kafka 4.3.1 under load still counted bytes written 11.6 s
// before). Stepping down from the span alone as a release left it held
// three producers of a shared client.id 14.6 s at a response.
func (s *Steering) NextBounded(now time.Time, want, sent map[string]float64, hold map[string]time.Duration, bound map[string]float64) map[string]float64 {
	if s.last == nil {
		s.last, s.est, s.peak, s.past = map[string]float64{}, map[string]float64{}, map[string]sample{}, map[string][]sample{}
		s.rel, s.top = map[string]float64{}, map[string]float64{}
	}
	span := s.Window.Span()
	seen := map[string]bool{}
	for id := range want {
		seen[id] = true
	}
	for id := range sent {
		seen[id] = true
	}
	for id := range s.past {
		seen[id] = true
	}
	out := make(map[string]float64, len(want))
	for id := range seen {
		r, known := sent[id]
		if prev, ok := s.last[id]; ok && !known {
			r = prev
		}
		s.noteRelease(id, now, r)
		prev := s.past[id]
		ps := append(prev, sample{now, max(r, 0)})
		if r > 0 && !slices.ContainsFunc(prev, func(p sample) bool { return p.rate > 0 && prev[len(prev)-1].at.Sub(p.at) < span }) {
			// Seen idle until now: the broker's window may still hold
			// what it sent before the daemon's first reading (or a
			// few seconds ago under the same client.id), so it is taken
			// to have sent so over the whole span, like a client first
			// seen. Taking the idle readings as the broker's made a
			// client that had sent for seconds look like one that just
			// started: on Kafka 4.3.1 its first cut held it 16 to 87 s.
			ps = []sample{{now, r}}
		}
		for len(ps) > 0 && now.Sub(ps[0].at) >= span+s.Window.sample() {
			ps = ps[1:]
		}
		w, wanted := want[id]
		// The broker's window covers the whole span: each sample stands
		// for the time since the one before, the oldest for the rest of
		// the span (a client first seen is taken to have sent so before).
		// The window one Hold ahead, with the last rate going on, counts
		// too when it holds more (a rising rate).
		ahead := max(s.Hold, 0)
		sum := windowSum(ps, now.Add(-span), now)
		sum = max(sum, windowSum(ps, now.Add(ahead-span), now)+max(r, 0)*ahead.Seconds())
		if !wanted {
			delete(s.last, id)
			delete(s.est, id)
			delete(s.peak, id)
			delete(s.rel, id)
			delete(s.top, id)
			if sum == 0 {
				delete(s.past, id) // idle and unquoted: nothing to remember
				continue
			}
			s.past[id] = ps
			continue
		}
		s.past[id] = ps
		h := s.Hold
		if hold[id] > 0 {
			h = hold[id]
		}
		est := sum / span.Seconds()
		pk := s.peak[id]
		pk.rate *= math.Exp2(-now.Sub(pk.at).Seconds() / span.Seconds())
		pk = sample{now, max(pk.rate, est)}
		s.peak[id] = pk
		s.top[id] = max(s.top[id], est)
		v := max(w, Floor(est, s.Window, h), 0)
		if h > 0 { // steering: never near nothing either
			v = max(v, MinShare*pk.rate, Floor(bound[id], s.Window, LongestHold), min(s.rel[id]/h.Seconds(), ReleaseShare*s.top[id]),
				Floor(windowSum(ps, now.Add(-span-s.Window.sample()), now)/span.Seconds(), s.Window, LongestHold))
		}
		out[id], s.last[id], s.est[id] = v, v, est
	}
	return out
}
