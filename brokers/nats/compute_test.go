package nats

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/lag"
)

// state builds a stream state.
func state(first, last, msgs uint64) jetstream.StreamState {
	return jetstream.StreamState{FirstSeq: first, LastSeq: last, Msgs: msgs}
}

// TestRead pins the derivation of a reading and the cross-checks. Each
// case states the consumer's counters and the stream before and after the
// consumer read.
func TestRead(t *testing.T) {
	type want struct {
		lag, ackPending, committed, logStart, end int64
		err                                       string // substring; "" means none
		members                                   int
		state                                     string
		unfiltered                                bool
	}
	for _, tc := range []struct {
		name   string
		ci     jetstream.ConsumerInfo
		before jetstream.StreamState
		after  jetstream.StreamState
		subj   []string
		want   want
	}{
		{
			// The package doc's example: consistent counters, unfiltered.
			name: "consistent unfiltered",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 40}, Delivered: jetstream.SequenceInfo{Consumer: 70, Stream: 60},
				NumAckPending: 5, NumPending: 40,
			},
			before: state(1, 100, 100), after: state(1, 100, 100),
			want: want{lag: 45, ackPending: 5, committed: 41, logStart: 1, end: 101, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// The doc's example after MaxAge removed 1..80: the 5 ack
			// pending are gone; lag counts what is stored, silently.
			name: "removed past the ack floor",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 40}, Delivered: jetstream.SequenceInfo{Consumer: 70, Stream: 60},
				NumAckPending: 5, NumPending: 20,
			},
			before: state(81, 100, 20), after: state(81, 100, 20),
			want: want{lag: 20, ackPending: 5, committed: 41, logStart: 81, end: 101, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Everything removed: nothing stored, no lag.
			name: "stream emptied",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 1}, Delivered: jetstream.SequenceInfo{Consumer: 3, Stream: 3},
				NumAckPending: 2,
			},
			before: state(4, 3, 0), after: state(4, 3, 0),
			want: want{lag: 0, ackPending: 0, committed: 2, logStart: 4, end: 4, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Pending larger than anything the stream could have held:
			// reported and clamped.
			name: "pending exceeds stream messages",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 0}, NumPending: 500,
			},
			before: state(1, 100, 100), after: state(1, 100, 100),
			want: want{lag: 100, committed: 1, logStart: 1, end: 101, err: "pending exceeds stream messages: pending 500 > 100 stored", members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Publishing between the listing and the consumer read is not
			// an inconsistency: stored could have grown by 20.
			name: "pending grown by publishes during the cycle",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 0}, NumPending: 115,
			},
			before: state(1, 100, 100), after: state(1, 120, 120),
			want: want{lag: 115, committed: 1, logStart: 1, end: 121, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Removal between the consumer read and the stream read (Msgs
			// shrank) is not reported either; the storage clamp applies.
			name: "removed during the cycle",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 0}, NumPending: 100,
			},
			before: state(1, 100, 100), after: state(31, 100, 70),
			want: want{lag: 70, committed: 1, logStart: 31, end: 101, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// The server's running pending counter stuck low after MaxAge
			// expiry: sequence 4 is stored, after delivered 1, and existed
			// at the start of the cycle. Reported and raised.
			name: "pending below stored",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 1}, Delivered: jetstream.SequenceInfo{Consumer: 1, Stream: 1},
			},
			before: state(4, 4, 1), after: state(4, 4, 1),
			want: want{lag: 1, committed: 2, logStart: 4, end: 5, err: "pending below stored messages after delivered: pending 0 < 1", members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Messages published after the stream listing may not be
			// counted yet: no lower bound from them.
			name: "recent publishes not yet counted",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 100}, Delivered: jetstream.SequenceInfo{Consumer: 100, Stream: 100},
			},
			before: state(1, 100, 100), after: state(1, 120, 120),
			want: want{lag: 0, committed: 101, logStart: 1, end: 121, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Interior deletes lower the bound: 10 stored after delivered
			// 90 minus 4 deleted leaves 6, NumPending 6 is fine.
			name: "lower bound minus interior deletes",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 90}, Delivered: jetstream.SequenceInfo{Consumer: 90, Stream: 90},
				NumPending: 6,
			},
			before: jetstream.StreamState{FirstSeq: 1, LastSeq: 100, Msgs: 96, NumDeleted: 4},
			after:  jetstream.StreamState{FirstSeq: 1, LastSeq: 100, Msgs: 96, NumDeleted: 4},
			want:   want{lag: 6, committed: 91, logStart: 1, end: 101, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// DeliverLastPerSubject counts one message per subject: no
			// lower bound.
			name: "last per subject not bounded below",
			ci: jetstream.ConsumerInfo{
				Config:     jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy},
				NumPending: 3,
			},
			before: state(1, 100, 100), after: state(1, 100, 100),
			want: want{lag: 3, committed: 1, logStart: 1, end: 101, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Unprocessed larger than the sequence range after the floor:
			// reported and clamped.
			name: "unprocessed exceeds sequence range",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 90}, Delivered: jetstream.SequenceInfo{Consumer: 95, Stream: 95},
				NumAckPending: 8, NumPending: 5,
			},
			before: state(1, 100, 100), after: state(1, 100, 100),
			want: want{lag: 10, ackPending: 8, committed: 91, logStart: 1, end: 101, err: "unprocessed exceeds sequences after ack floor: pending 5 + ack pending 8 > last 100 - ack floor 90", members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// An ack floor beyond the last sequence (the stream was reset
			// under the consumer): reported, no lag.
			name: "ack floor beyond last",
			ci: jetstream.ConsumerInfo{
				AckFloor: jetstream.SequenceInfo{Stream: 500}, NumPending: 3,
			},
			before: state(1, 10, 10), after: state(1, 10, 10),
			want: want{lag: 0, committed: 501, logStart: 1, end: 11, err: "ack floor 500 beyond stream last sequence 10", members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Stream recreated between the two reads: only the later read
			// counts, so no spurious "pending exceeds" either.
			name: "stream reset between reads",
			ci: jetstream.ConsumerInfo{
				NumPending: 3,
			},
			before: state(1, 1000, 1000), after: state(1, 3, 3),
			want: want{lag: 3, committed: 1, logStart: 1, end: 4, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Filtered: End counts deliveries plus pending, not stream
			// sequences.
			name: "filtered end",
			ci: jetstream.ConsumerInfo{
				Config:   jetstream.ConsumerConfig{FilterSubject: "a.*"},
				AckFloor: jetstream.SequenceInfo{Consumer: 10, Stream: 50}, Delivered: jetstream.SequenceInfo{Consumer: 12, Stream: 60},
				NumAckPending: 2, NumPending: 7,
			},
			before: state(1, 100, 100), after: state(1, 100, 100), subj: []string{"a.*", "b.*"},
			want: want{lag: 9, ackPending: 2, committed: 51, logStart: 1, end: 19, members: -1, state: StateIdle},
		},
		{
			// Filters equal to the stream's subjects: unfiltered in effect.
			name: "filters equal stream subjects",
			ci: jetstream.ConsumerInfo{
				Config:     jetstream.ConsumerConfig{FilterSubjects: []string{"b.*", "a.*"}},
				NumPending: 4,
			},
			before: state(1, 4, 4), after: state(1, 4, 4), subj: []string{"a.*", "b.*"},
			want: want{lag: 4, committed: 1, logStart: 1, end: 5, members: -1, state: StateIdle, unfiltered: true},
		},
		{
			// Pull consumer with waiting requests: members = waiting.
			name:   "pull waiting",
			ci:     jetstream.ConsumerInfo{NumWaiting: 3},
			before: state(0, 0, 0), after: state(0, 0, 0),
			want: want{committed: 1, end: 1, members: 3, state: StateActive, unfiltered: true},
		},
		{
			// Push consumer bound: one member.
			name:   "push bound",
			ci:     jetstream.ConsumerInfo{Config: jetstream.ConsumerConfig{DeliverSubject: "d"}, PushBound: true},
			before: state(0, 0, 0), after: state(0, 0, 0),
			want: want{committed: 1, end: 1, members: 1, state: StateActive, unfiltered: true},
		},
		{
			// Push consumer unbound: zero members.
			name:   "push unbound",
			ci:     jetstream.ConsumerInfo{Config: jetstream.ConsumerConfig{DeliverSubject: "d"}},
			before: state(0, 0, 0), after: state(0, 0, 0),
			want: want{committed: 1, end: 1, members: 0, state: StateInactive, unfiltered: true},
		},
		{
			// Paused wins over the liveness state.
			name:   "paused",
			ci:     jetstream.ConsumerInfo{NumWaiting: 1, Paused: true},
			before: state(0, 0, 0), after: state(0, 0, 0),
			want: want{committed: 1, end: 1, members: 1, state: StatePaused, unfiltered: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := read(&tc.ci, streamView{subjects: tc.subj, before: tc.before, after: tc.after})
			p := r.part
			got := want{lag: p.Lag, ackPending: p.AckPending, committed: p.Committed, logStart: p.LogStart, end: p.End,
				members: r.members, state: r.state, unfiltered: r.unfiltered}
			w := tc.want
			w.err = ""
			if got != w {
				t.Errorf("got  %+v\nwant %+v", got, w)
			}
			switch {
			case tc.want.err == "" && p.Err != "":
				t.Errorf("unexpected err %q", p.Err)
			case !strings.Contains(p.Err, tc.want.err):
				t.Errorf("err %q, want it to contain %q", p.Err, tc.want.err)
			}
			// Invariants after the clamps.
			if p.Lag < 0 || p.AckPending > p.Lag || p.End < p.Lag {
				t.Errorf("invariant broken: %+v", p)
			}
		})
	}
}

// TestReadAckCounters: only filtered consumers with an ack policy carry
// the counters that tell redeliveries from acknowledgements.
func TestReadAckCounters(t *testing.T) {
	acked := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sv := streamView{subjects: []string{"a.*", "b.*"}, before: state(1, 100, 100), after: state(1, 100, 100)}
	for _, tc := range []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want ackCounters
	}{
		{"filtered explicit", jetstream.ConsumerConfig{FilterSubject: "a.*", AckPolicy: jetstream.AckExplicitPolicy},
			ackCounters{tracked: true, delivered: 12, ackPending: 2, lastAck: acked}},
		{"filtered ack all", jetstream.ConsumerConfig{FilterSubject: "a.*", AckPolicy: jetstream.AckAllPolicy},
			ackCounters{tracked: true, delivered: 12, ackPending: 2, lastAck: acked}},
		{"filtered ack none", jetstream.ConsumerConfig{FilterSubject: "a.*", AckPolicy: jetstream.AckNonePolicy}, ackCounters{}},
		{"unfiltered", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}, ackCounters{}},
	} {
		ci := jetstream.ConsumerInfo{
			Config:        tc.cfg,
			AckFloor:      jetstream.SequenceInfo{Consumer: 10, Stream: 50, Last: &acked},
			Delivered:     jetstream.SequenceInfo{Consumer: 12, Stream: 60},
			NumAckPending: 2, NumPending: 7,
		}
		r := read(&ci, sv)
		if got := r.acks; got != tc.want {
			t.Errorf("%s: ack counters %+v, want %+v", tc.name, got, tc.want)
		}
		// The last ack's time is read for every consumer (Sample.LastAck,
		// the daemon's engaged cadence), filtered or not.
		if !r.acked.Equal(acked) {
			t.Errorf("%s: last ack %v, want %v", tc.name, r.acked, acked)
		}
	}
}

// TestEndTracker: End never decreases for one identity, never falls below
// Lag, and restarts with a new identity. Consumers without ack counters
// (unfiltered, or AckNone) pass their raw End through.
func TestEndTracker(t *testing.T) {
	var et endTracker
	for i, step := range []struct {
		identity string
		raw      int64
		lag      int64
		want     int64
	}{
		{"a", 10, 0, 10}, // first reading
		{"a", 15, 0, 15}, // growth passes through
		{"a", 12, 0, 15}, // drop of 3 (purged before delivery) absorbed
		{"a", 14, 0, 17}, // later growth continues from the offset
		{"a", 0, 0, 17},  // everything purged: still monotonic
		{"a", 1, 20, 20}, // never below lag
		{"b", 5, 0, 5},   // consumer recreated: restart
		{"b", 7, 0, 7},   // and grow from there
	} {
		r := reading{identity: step.identity, part: lag.PartitionSample{End: step.raw, Lag: step.lag}}
		if got := et.apply(&r); got != step.want {
			t.Errorf("step %d: apply(%s, end %d, lag %d) = %d, want %d", i, step.identity, step.raw, step.lag, got, step.want)
		}
	}
}

// TestEndTrackerRedeliveries: for a filtered consumer with an ack policy,
// the growth of Delivered.Consumer - NumAckPending between two readings
// with the same last-ack time is redeliveries, taken out of End, so the
// consumed position End-Lag does not move; once the last-ack time moves,
// the deliveries count again (acknowledgements and any redeliveries of
// the same interval alike).
func TestEndTrackerRedeliveries(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var et endTracker
	for i, step := range []struct {
		name                       string
		identity                   string
		delivered, ackPending, lag int64 // lag: pending + ack pending
		pending                    int64
		lastAck                    time.Time
		want                       int64 // End
	}{
		// 1 of 3 delivered and ack pending, never acked.
		{"first reading", "a", 1, 1, 3, 2, time.Time{}, 3},
		// Nak loop: three redeliveries, nothing acked: End and End-Lag stay.
		{"redelivered 3 times", "a", 4, 1, 3, 2, time.Time{}, 3},
		// Two new messages published meanwhile: production only.
		{"published 2, redelivered 1", "a", 5, 1, 5, 4, time.Time{}, 5},
		// First delivery of 2 more, still no ack: lag unchanged, End too.
		{"delivered 2 new", "a", 7, 3, 5, 2, time.Time{}, 5},
		// An ack (the server stamped a time): deliveries count again.
		// One ack: Delivered - AckPending grows by 1, End-Lag by 1.
		{"acked 1", "a", 7, 2, 4, 2, t0, 5},
		// Same stamp, more redeliveries: held again.
		{"redelivered 2 after the ack", "a", 9, 2, 4, 2, t0, 5},
		// An ack and a redelivery in the same interval: both counted
		// (the documented approximation).
		{"acked 1 and redelivered 1", "a", 10, 1, 3, 2, t0.Add(time.Second), 6},
		// Last-ack time gone (server restart): may hide acks, counted.
		{"stamp gone", "a", 11, 1, 3, 2, time.Time{}, 7},
		// New identity: restart from the raw value.
		{"recreated", "b", 2, 1, 3, 2, time.Time{}, 4},
		{"recreated, redelivered", "b", 3, 1, 3, 2, time.Time{}, 4},
	} {
		r := reading{
			identity: step.identity,
			part:     lag.PartitionSample{End: step.delivered + step.pending, Lag: step.lag},
			acks:     ackCounters{tracked: true, delivered: step.delivered, ackPending: step.ackPending, lastAck: step.lastAck},
		}
		if got := et.apply(&r); got != step.want {
			t.Errorf("step %d (%s): End %d, want %d (consumed position %d)", i, step.name, got, step.want, got-step.lag)
		}
	}
}

// TestSchedule: InfoInterval == Interval refreshes every cycle despite
// tick noise; the phase is stable, within [0, jitter*interval), and only
// delays the first re-fetch.
func TestSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newSchedule(Config{Interval: time.Second, InfoInterval: time.Second, Jitter: 0.2})
	for _, name := range []string{"A", "B", "ORDERS", "S01"} {
		// A tick slightly early still refreshes: by up to slack-phase
		// (50ms here) for the first re-fetch, by up to the slack (250ms)
		// after that.
		if next := s.next(name, t0, true); t0.Add(950 * time.Millisecond).Before(next) {
			t.Errorf("%s: first re-fetch due at %v, want by the next tick even if 50ms early", name, next.Sub(t0))
		}
		if next := s.next(name, t0, false); t0.Add(750 * time.Millisecond).Before(next) {
			t.Errorf("%s: re-fetch due at %v, want by the next tick even if 250ms early", name, next.Sub(t0))
		}
		if p := s.phase(name); p < 0 || p >= 200*time.Millisecond || p != s.phase(name) {
			t.Errorf("%s: phase %v", name, p)
		}
	}
	s = newSchedule(Config{Interval: time.Second, InfoInterval: 5 * time.Second, Jitter: 0.5})
	if got := s.next("X", t0, false).Sub(t0); got != 4750*time.Millisecond {
		t.Errorf("steady state: due after %v, want 4.75s", got)
	}
	if got := s.next("X", t0, true).Sub(t0); got != 4750*time.Millisecond+s.phase("X") {
		t.Errorf("first: due after %v, want 4.75s + phase", got)
	}
	s = newSchedule(Config{Interval: time.Second, InfoInterval: 5 * time.Second, Jitter: 0})
	if s.phase("X") != 0 {
		t.Error("zero jitter: non-zero phase")
	}
}

// TestConsumerFilters covers the filter-subject normalisation.
func TestConsumerFilters(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        jetstream.ConsumerConfig
		stream     []string
		want       string
		unfiltered bool
	}{
		{"none", jetstream.ConsumerConfig{}, []string{"a"}, ">", true},                                                   // no filter
		{"full wildcard", jetstream.ConsumerConfig{FilterSubject: ">"}, []string{"a"}, ">", true},                        // ">" is everything
		{"one", jetstream.ConsumerConfig{FilterSubject: "a.1"}, []string{"a.*"}, "a.1", false},                           // plain filter
		{"several sorted", jetstream.ConsumerConfig{FilterSubjects: []string{"b", "a", "b"}}, nil, "a,b", false},         // deduped, sorted
		{"equal to stream", jetstream.ConsumerConfig{FilterSubjects: []string{"b", "a"}}, []string{"a", "b"}, ">", true}, // whole stream
		{"subset of stream", jetstream.ConsumerConfig{FilterSubject: "a"}, []string{"a", "b"}, "a", false},               // part of it
	} {
		got, unf := consumerFilters(tc.cfg, tc.stream)
		if strings.Join(got, ",") != tc.want || unf != tc.unfiltered {
			t.Errorf("%s: got %v %v, want %s %v", tc.name, got, unf, tc.want, tc.unfiltered)
		}
	}
}

// TestValidate: each bad field is reported with the nats.<field> shape,
// and a config with many problems reports all of them at once.
func TestValidate(t *testing.T) {
	ok := Config{Cluster: "c", URLs: []string{"nats://127.0.0.1:4222"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no cluster", func(c *Config) { c.Cluster = " " }, "nats.cluster: required"},                                         // blank cluster
		{"no urls", func(c *Config) { c.URLs = nil }, "nats.urls: at least one server URL is required"},                       // nothing to dial
		{"bad scheme", func(c *Config) { c.URLs = []string{"http://x:1"} }, `nats.urls[0]: unsupported scheme "http"`},        // wrong scheme
		{"empty url", func(c *Config) { c.URLs = []string{"nats://a:1", ""} }, "nats.urls[1]: empty URL"},                     // blank entry
		{"bare host ok", func(c *Config) { c.URLs = []string{"127.0.0.1:4222"} }, ""},                                         // host:port accepted
		{"bad domain", func(c *Config) { c.Domain = "a.b" }, "nats.domain: must be a single subject token"},                   // dotted domain
		{"bad stream re", func(c *Config) { c.Streams.Include = []string{"("} }, "nats.streams.include[0]: "},                 // regexp error
		{"bad consumer re", func(c *Config) { c.Consumers.Exclude = []string{"ok", "[z-a]"} }, "nats.consumers.exclude[1]: "}, // regexp error
		{"half mTLS", func(c *Config) { c.TLS.CertFile = "c.pem" }, "nats.tls.keyFile: required with nats.tls.certFile"},      // key missing
		{"two auth", func(c *Config) { c.Token, c.CredsFile = "t", "f" }, "nats.auth: at most one authentication method may be set, got credsFile, token"},
		// Files the config names are read, so that check names a missing one.
		{"missing creds", func(c *Config) { c.CredsFile = "/nonexistent/lb.creds" }, "nats.credsFile: open /nonexistent/lb.creds: no such file"},
		{"creds a directory", func(c *Config) { c.CredsFile = os.TempDir() }, "nats.credsFile: " + os.TempDir() + " is not a regular file"},
		{"missing nkey", func(c *Config) { c.NKeyFile = "/nonexistent/lb.nk" }, "nats.nkeyFile: "},
		{"missing ca", func(c *Config) { c.TLS.CAFile = "/nonexistent/ca.pem" }, "nats.tls.caFile: open /nonexistent/ca.pem"},
		{"password alone", func(c *Config) { c.Password = "p" }, "nats.user: required when password is set"},       // password needs user
		{"negative interval", func(c *Config) { c.InfoInterval = -1 }, "nats.infoInterval: must not be negative"},  // negative duration
		{"jitter above 1", func(c *Config) { c.Jitter = 1.5 }, "nats.jitter: must be at most 1"},                   // fraction
		{"negative jitter ok", func(c *Config) { c.Jitter = -1 }, ""},                                              // disables jitter
		{"negative pages", func(c *Config) { c.MaxListPages = -1 }, "nats.maxListPages: must not be negative"},     // bound
		{"negative concurrency", func(c *Config) { c.Concurrency = -2 }, "nats.concurrency: must not be negative"}, // workers
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.URLs = append([]string(nil), ok.URLs...)
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to contain %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("err %v does not wrap ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.HasPrefix(ce.Error(), "nats.") {
				t.Errorf("err %v: no *ConfigError", err)
			}
		})
	}

	// Everything wrong at once: every problem is listed.
	bad := Config{
		URLs:         []string{"http://x"},
		Streams:      Filter{Include: []string{"("}},
		Token:        "t",
		User:         "u",
		Jitter:       2,
		InfoInterval: -time.Second,
	}
	err := bad.Validate()
	var n int
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		n = len(j.Unwrap())
	}
	for _, field := range []string{"nats.cluster:", "nats.urls[0]:", "nats.streams.include[0]:", "nats.auth:", "nats.jitter:", "nats.infoInterval:"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("missing %s in:\n%v", field, err)
		}
	}
	if n != 6 {
		t.Errorf("%d problems reported, want 6:\n%v", n, err)
	}
}

// TestCheckURL pins which server URLs are refused: those nats.go
// would never dial, read as the observer's client reads them.
func TestCheckURL(t *testing.T) {
	good := []string{"nats://127.0.0.1:4222", "nats-0.nats", "tls://nats:4443", "ws://nats", "wss://nats:443", "nats://[::1]:4222", "nats://u:p@nats:4222", "nats:4222",
		"nats://user:pa,ss@127.0.0.1:4222"} // a comma in a password is not two URLs
	bad := map[string]string{
		"::::":                   "not host:port",
		"nats://::::":            "not host:port",
		"nats://a:4222,nats://b": "holds a comma",
		"a,b":                    "holds a comma",
		"nats://nats:0":          "port \"0\"",
		"http://nats:4222":       "unsupported scheme",
		"nats://:4222":           "no host",
		"nats://nats:port":       "is not a URL",
		"":                       "empty URL",
		" nats://nats:4222":      "is not a URL", // nats.go does not trim
	}
	for _, u := range good {
		if p := checkURL(u); p != "" {
			t.Errorf("%q refused: %s", u, p)
		}
	}
	for u, want := range bad {
		if p := checkURL(u); p == "" || !strings.Contains(p, want) {
			t.Errorf("%q: problem %q, want one containing %q", u, p, want)
		}
	}
}
