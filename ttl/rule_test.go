package ttl

import (
	"errors"
	"testing"
	"time"
)

// t0 is the fixed "now" of the rule tests.
var t0 = time.UnixMilli(1_767_225_600_000).UTC()

func TestRuleCheck(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name         string
		maxAge       time.Duration
		deadline     time.Time // header deadline; zero: none
		ts           time.Time // broker timestamp; zero: unknown
		want         Reason
		wantDeadline time.Time // effective deadline
	}{
		// No header, no age bound: live forever, no deadline.
		{"nothing", 0, time.Time{}, t0.Add(-time.Hour), Live, time.Time{}},
		// A header deadline in the future: live, bounded by it.
		{"deadline ahead", 0, t0.Add(ms), t0, Live, t0.Add(ms)},
		// At the deadline is expired (Meta.Expired is "at or after").
		{"deadline now", 0, t0, t0, ReasonDeadline, t0},
		// Past the deadline.
		{"deadline passed", 0, t0.Add(-ms), t0, ReasonDeadline, t0.Add(-ms)},
		// Age within maxAge: live, bounded by timestamp + maxAge.
		{"young", time.Second, time.Time{}, t0.Add(-999 * ms), Live, t0.Add(ms)},
		// Age exactly maxAge: expired, so that a live message's context is
		// never done on arrival.
		{"age equals maxAge", time.Second, time.Time{}, t0.Add(-time.Second), ReasonMaxAge, t0},
		// Older than maxAge.
		{"old", time.Second, time.Time{}, t0.Add(-time.Hour), ReasonMaxAge, t0.Add(-time.Hour + time.Second)},
		// Both apply: the header deadline is the producer's word and wins.
		{"both expired", time.Second, t0.Add(-ms), t0.Add(-time.Hour), ReasonDeadline, t0.Add(-time.Hour + time.Second)},
		// Header deadline later than the age bound: the age bound decides
		// and is the effective deadline.
		{"age bound tighter", time.Second, t0.Add(time.Hour), t0.Add(-2 * time.Second), ReasonMaxAge, t0.Add(-time.Second)},
		// Age bound later than the header deadline: the header is tighter.
		{"header tighter", time.Hour, t0.Add(ms), t0, Live, t0.Add(ms)},
		// maxAge 0 disables the age bound however old the record.
		{"maxAge zero", 0, time.Time{}, time.Unix(1, 0), Live, time.Time{}},
		// Negative maxAge is treated as none (guards validate it away).
		{"maxAge negative", -time.Second, time.Time{}, t0.Add(-time.Hour), Live, time.Time{}},
		// Unknown timestamp (zero time): no age bound.
		{"no timestamp", time.Second, time.Time{}, time.Time{}, Live, time.Time{}},
		// Kafka's "no timestamp" (-1 ms) is before the epoch: unknown.
		{"kafka -1 timestamp", time.Second, time.Time{}, time.UnixMilli(-1), Live, time.Time{}},
		// The epoch itself is unknown too.
		{"epoch timestamp", time.Second, time.Time{}, time.Unix(0, 0), Live, time.Time{}},
		// A timestamp in the future (clock skew): negative age, live.
		{"future timestamp", time.Second, time.Time{}, t0.Add(time.Minute), Live, t0.Add(time.Minute + time.Second)},
		// Unknown timestamp but a passed header deadline: deadline.
		{"no timestamp, deadline passed", time.Second, t0.Add(-ms), time.Time{}, ReasonDeadline, t0.Add(-ms)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Rule{MaxAge: tc.maxAge}.Check(Meta{Deadline: tc.deadline}, tc.ts, t0)
			if v.Reason != tc.want || v.Expired() != (tc.want != Live) {
				t.Fatalf("reason = %v (expired %v), want %v", v.Reason, v.Expired(), tc.want)
			}
			if !v.Deadline.Equal(tc.wantDeadline) || v.Deadline.IsZero() != tc.wantDeadline.IsZero() {
				t.Fatalf("deadline = %v, want %v", v.Deadline, tc.wantDeadline)
			}
			// Invariant: live iff strictly before the effective deadline.
			if live := v.Deadline.IsZero() || t0.Before(v.Deadline); live != !v.Expired() {
				t.Fatalf("live=%v but deadline %v at now %v", live, v.Deadline, t0)
			}
			if v.HeaderErr != nil {
				t.Fatalf("HeaderErr = %v from Check", v.HeaderErr)
			}
		})
	}
}

func TestRuleCheckHeaders(t *testing.T) {
	past, future := FormatDeadline(t0.Add(-time.Second)), FormatDeadline(t0.Add(time.Second))
	for _, tc := range []struct {
		name          string
		maxAge        time.Duration
		d             string
		hasD          bool
		c             string
		hasC          bool
		ts            time.Time
		want          Reason
		wantMalformed bool
		wantCrit      Criticality
	}{
		// No headers at all: live, nothing malformed.
		{"no headers", 0, "", false, "", false, t0, Live, false, Critical},
		// Well-formed passed deadline.
		{"deadline passed", 0, past, true, "SHEDDABLE", true, t0, ReasonDeadline, false, Sheddable},
		// Well-formed future deadline.
		{"deadline ahead", 0, future, true, "", false, t0, Live, false, Critical},
		// Garbage deadline: reported, judged as absent (live).
		{"malformed deadline", 0, "yesterday", true, "", false, t0, Live, true, Critical},
		// Garbage deadline does not save an old message from max-age.
		{"malformed deadline but old", time.Second, "yesterday", true, "", false, t0.Add(-time.Hour), ReasonMaxAge, true, Critical},
		// A future version is treated as no deadline.
		{"unsupported version", 0, "2:1", true, "", false, t0, Live, true, Critical},
		// Present but empty deadline header: malformed.
		{"empty deadline", 0, "", true, "", false, t0, Live, true, Critical},
		// Malformed criticality alone: reported, deadline still applies.
		{"malformed criticality", 0, past, true, "URGENT", true, t0, ReasonDeadline, true, Critical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Rule{MaxAge: tc.maxAge}.CheckHeaders(tc.d, tc.hasD, tc.c, tc.hasC, tc.ts, t0)
			if v.Reason != tc.want {
				t.Fatalf("reason = %v, want %v", v.Reason, tc.want)
			}
			if (v.HeaderErr != nil) != tc.wantMalformed {
				t.Fatalf("HeaderErr = %v, want malformed %v", v.HeaderErr, tc.wantMalformed)
			}
			if v.HeaderErr != nil && !errors.Is(v.HeaderErr, ErrMalformed) {
				t.Fatalf("HeaderErr %v does not wrap ErrMalformed", v.HeaderErr)
			}
			if v.Meta.Criticality != tc.wantCrit {
				t.Fatalf("criticality = %v, want %v", v.Meta.Criticality, tc.wantCrit)
			}
		})
	}
}

func TestReasonStringParse(t *testing.T) {
	for _, tc := range []struct {
		r    Reason
		want string
	}{
		// Each value's wire name round-trips.
		{Live, "live"},
		{ReasonDeadline, "deadline"},
		{ReasonMaxAge, "max-age"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", tc.r, got, tc.want)
		}
		if got, err := ParseReason(tc.want); err != nil || got != tc.r {
			t.Errorf("ParseReason(%q) = %v, %v", tc.want, got, err)
		}
	}
	// Out of range prints its number, parses as an error.
	if got := Reason(9).String(); got != "Reason(9)" {
		t.Errorf("Reason(9).String() = %q", got)
	}
	if r, err := ParseReason("Deadline"); !errors.Is(err, ErrMalformed) || r != Live {
		t.Errorf("ParseReason is exact: got %v, %v", r, err)
	}
	if len(ExpiredReasons) != NumReasons-1 {
		t.Errorf("ExpiredReasons %v misses a reason (NumReasons %d)", ExpiredReasons, NumReasons)
	}
}

func TestVerdictRemaining(t *testing.T) {
	v := Rule{MaxAge: time.Second}.Check(Meta{}, t0, t0)
	if got := v.Remaining(t0.Add(250 * time.Millisecond)); got != 750*time.Millisecond {
		t.Errorf("Remaining = %v, want 750ms", got)
	}
	if got := (Verdict{}).Remaining(t0); got != time.Duration(1<<63-1) {
		t.Errorf("no deadline: Remaining = %v, want max", got)
	}
}

func TestFormatTime(t *testing.T) {
	if got, want := FormatTime(time.UnixMilli(1_767_225_600_123).In(time.FixedZone("x", 3600))), "2026-01-01T00:00:00.123Z"; got != want {
		t.Errorf("FormatTime = %q, want %q", got, want)
	}
}

func TestStatsBalanced(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Stats
		want bool
	}{
		// Idle guard.
		{"zero", Stats{}, true},
		// Every received message accounted for.
		{"balanced", Stats{Received: 10, Processed: 6, Failed: 1, Expired: 3}, true},
		// One in flight (or lost): unbalanced.
		{"missing one", Stats{Received: 10, Processed: 6, Expired: 3}, false},
	} {
		if got := tc.s.Balanced(); got != tc.want {
			t.Errorf("%s: Balanced = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCheckNoAlloc(t *testing.T) {
	d := FormatDeadline(t0.Add(time.Second))
	r := Rule{MaxAge: time.Minute}
	if n := testing.AllocsPerRun(100, func() {
		_ = r.CheckHeaders(d, true, "CRITICAL", true, t0, t0)
	}); n != 0 {
		t.Errorf("CheckHeaders allocates %v times per call for well-formed headers", n)
	}
}

// FuzzCheckHeaders: any header values, timestamps, maxAge and now give a
// verdict without panicking, and the verdict is consistent: live iff now is
// strictly before the effective deadline; a malformed deadline is judged as
// absent; HeaderErr wraps ErrMalformed. Run with
//
//	go test ./ttl -run '^$' -fuzz FuzzCheckHeaders -fuzztime 30s
func FuzzCheckHeaders(f *testing.F) {
	f.Add("1:1767225600123", "CRITICAL", int64(1767225600000), int64(1767225600100), int64(time.Second))
	f.Add("garbage", "x", int64(-1), int64(0), int64(-5))
	f.Add("", "", int64(0), int64(1<<62), int64(1<<62))
	f.Add("1:9999999999999999", "sheddable", int64(1<<62), int64(-1<<62), int64(1))
	f.Fuzz(func(t *testing.T, d, c string, tsMillis, nowMillis, maxAge int64) {
		ts, now := time.UnixMilli(tsMillis), time.UnixMilli(nowMillis)
		v := Rule{MaxAge: time.Duration(maxAge)}.CheckHeaders(d, true, c, true, ts, now)
		if v.Reason >= numReasons {
			t.Fatalf("reason %d out of the closed set", v.Reason)
		}
		if live := v.Deadline.IsZero() || now.Before(v.Deadline); live == v.Expired() {
			t.Fatalf("expired=%v but deadline %v, now %v", v.Expired(), v.Deadline, now)
		}
		if v.HeaderErr != nil && !errors.Is(v.HeaderErr, ErrMalformed) {
			t.Fatalf("HeaderErr %v does not wrap ErrMalformed", v.HeaderErr)
		}
		if _, err := ParseDeadline(d); err != nil && !v.Meta.Deadline.IsZero() {
			t.Fatalf("malformed deadline %q judged as %v", d, v.Meta.Deadline)
		}
		if v.Reason == ReasonDeadline && !v.Meta.Expired(now) {
			t.Fatalf("reason deadline but header deadline %v not passed at %v", v.Meta.Deadline, now)
		}
		if _, err := ParseReason(d); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("ParseReason error %v does not wrap ErrMalformed", err)
		}
	})
}

func BenchmarkRuleCheckHeaders(b *testing.B) {
	d := FormatDeadline(t0.Add(time.Second))
	r := Rule{MaxAge: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.CheckHeaders(d, true, "CRITICAL", true, t0, t0)
	}
}
