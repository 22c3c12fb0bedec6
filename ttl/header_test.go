package ttl

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/importcheck"
)

func TestImportsOnlyStdlib(t *testing.T) {
	importcheck.Only(t, ".", "github.com/lagbridge/lagbridge/contract")
}

func TestParseDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    time.Time
		wantErr error
	}{
		// The canonical form writers produce.
		{"canonical", "1:1767225600123", time.UnixMilli(1767225600123), nil},
		// Surrounding spaces come from sloppy proxies; tolerated.
		{"spaces around", "  1:1767225600123 \t", time.UnixMilli(1767225600123), nil},
		// The epoch itself is a (long expired) deadline, not "none".
		{"epoch", "1:0", time.UnixMilli(0), nil},
		// Leading zeros are digits like any other.
		{"leading zeros", "1:0001", time.UnixMilli(1), nil},
		// 16 digits is the documented maximum.
		{"16 digits", "1:9999999999999999", time.UnixMilli(9999999999999999), nil},
		// 17 digits is refused rather than risk overflow.
		{"17 digits", "1:99999999999999999", time.Time{}, ErrMalformed},
		// A future version is not reinterpreted.
		{"version 2", "2:1767225600123", time.Time{}, ErrUnsupportedVersion},
		// No version at all (someone wrote raw millis).
		{"no version", "1767225600123", time.Time{}, ErrMalformed},
		// Empty value.
		{"empty", "", time.Time{}, ErrMalformed},
		// Version only.
		{"no millis", "1:", time.Time{}, ErrMalformed},
		// Signs are not digits.
		{"negative", "1:-5", time.Time{}, ErrMalformed},
		{"plus", "1:+5", time.Time{}, ErrMalformed},
		// Spaces inside are not tolerated.
		{"inner space", "1: 5", time.Time{}, ErrMalformed},
		// RFC 3339 is a different format, refused.
		{"rfc3339", "2026-01-01T00:00:00Z", time.Time{}, ErrMalformed},
		// Binary garbage.
		{"garbage", "\x00\xff:\x01", time.Time{}, ErrMalformed},
		// A second colon is garbage in the millis part.
		{"two colons", "1:12:34", time.Time{}, ErrMalformed},
		// Version with letters.
		{"bad version", "v1:12", time.Time{}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDeadline(tc.in)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("ParseDeadline(%q) err = %v, want %v", tc.in, err, tc.wantErr)
			}
			if !got.Equal(tc.want) || (tc.want.IsZero() != got.IsZero()) {
				t.Fatalf("ParseDeadline(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("every parse error must wrap ErrMalformed: %v", err)
			}
		})
	}
}

func TestDeadlineRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   time.Time
		want string
	}{
		// Sub-millisecond precision is rounded down: never later than meant.
		{"rounds down", time.Unix(1767225600, 123_999_999), "1:1767225600123"},
		// Zone does not matter: the value is UTC millis.
		{"zone", time.Unix(1767225600, 0).In(time.FixedZone("x", 3600)), "1:1767225600000"},
		// Before the epoch is clamped to 0 (expired), never negative.
		{"pre epoch", time.Unix(-10, 0), "1:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatDeadline(tc.in); got != tc.want {
				t.Fatalf("FormatDeadline = %q, want %q", got, tc.want)
			}
			back, err := ParseDeadline(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if back.After(tc.in) && tc.in.UnixMilli() >= 0 {
				t.Fatalf("round trip %v is later than %v", back, tc.in)
			}
		})
	}
}

func TestAppendDeadlineNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 32)
	d := time.Unix(1767225600, 0)
	if n := testing.AllocsPerRun(100, func() { buf = AppendDeadline(buf[:0], d) }); n != 0 {
		t.Fatalf("AppendDeadline allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseDeadline("1:1767225600123") }); n != 0 {
		t.Fatalf("ParseDeadline allocates %v times on success", n)
	}
}

func TestParseCriticality(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    Criticality
		wantErr bool
	}{
		// The four wire names.
		{"critical plus", "CRITICAL_PLUS", CriticalPlus, false},
		{"critical", "CRITICAL", Critical, false},
		{"sheddable plus", "SHEDDABLE_PLUS", SheddablePlus, false},
		{"sheddable", "SHEDDABLE", Sheddable, false},
		// Readers are lenient about case and dashes.
		{"lower dash", "sheddable-plus", SheddablePlus, false},
		// Empty says nothing: the default, no error.
		{"empty", "", Critical, false},
		// Unknown names fall back to the default and report.
		{"unknown", "URGENT", Critical, true},
		// Long garbage is reported, quoted short.
		{"long garbage", strings.Repeat("x", 1000), Critical, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCriticality(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("ParseCriticality(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.wantErr)
			}
			if err != nil && (!errors.Is(err, ErrMalformed) || len(err.Error()) > 300) {
				t.Fatalf("error %q must wrap ErrMalformed and stay short", err)
			}
		})
	}
}

func TestCriticalityOrder(t *testing.T) {
	order := []Criticality{CriticalPlus, Critical, SheddablePlus, Sheddable}
	for i, c := range order {
		if c.Rank() != i {
			t.Errorf("%v.Rank() = %d, want %d", c, c.Rank(), i)
		}
		back, err := ParseCriticality(c.String())
		if err != nil || back != c {
			t.Errorf("round trip %v: %v %v", c, back, err)
		}
	}
	if bad := Criticality(9); bad.Valid() || bad.Rank() != 4 || bad.String() != "Criticality(9)" {
		t.Errorf("invalid criticality: %v %d %q", bad.Valid(), bad.Rank(), bad.String())
	}
}

func TestDecode(t *testing.T) {
	dl := time.UnixMilli(1767225600123)
	for _, tc := range []struct {
		name      string
		d         string
		hasD      bool
		c         string
		hasC      bool
		want      Meta
		wantError bool
	}{
		// Both headers well-formed.
		{"both", "1:1767225600123", true, "SHEDDABLE", true, Meta{dl, Sheddable}, false},
		// No headers: no deadline, default criticality, no error.
		{"none", "", false, "", false, Meta{}, false},
		// A garbage deadline is no deadline, and is reported; the good
		// criticality is kept.
		{"bad deadline", "soon", true, "SHEDDABLE", true, Meta{Criticality: Sheddable}, true},
		// A garbage criticality is the default; the good deadline is kept.
		{"bad criticality", "1:1767225600123", true, "??", true, Meta{Deadline: dl}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.d, tc.hasD, tc.c, tc.hasC)
			if !got.Deadline.Equal(tc.want.Deadline) || got.Criticality != tc.want.Criticality || (err != nil) != tc.wantError {
				t.Fatalf("Decode = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantError)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error must wrap ErrMalformed: %v", err)
			}
		})
	}
}

func TestMeta(t *testing.T) {
	now := time.Unix(1000, 0)
	var none Meta
	if none.HasDeadline() || none.Expired(now) || none.Remaining(now) <= 0 {
		t.Fatalf("zero Meta must have no deadline and never expire")
	}
	m := Meta{Deadline: now.Add(time.Second)}
	if !m.HasDeadline() || m.Expired(now) || m.Remaining(now) != time.Second {
		t.Fatalf("deadline in 1s: %v %v %v", m.HasDeadline(), m.Expired(now), m.Remaining(now))
	}
	if !m.Expired(now.Add(time.Second)) {
		t.Fatalf("a deadline is expired at its instant")
	}
}

func TestNATSTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   time.Duration
		want string
	}{
		// Whole seconds stay as they are.
		{"whole", 30 * time.Second, "30"},
		// Fractions round up: the broker never deletes before the deadline.
		{"fraction", 2500 * time.Millisecond, "3"},
		// One second is the server's minimum.
		{"sub second", 200 * time.Millisecond, "1"},
		// Already dead: the minimum, too.
		{"negative", -time.Second, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NATSTTL(tc.in); got != tc.want {
				t.Fatalf("NATSTTL(%v) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzParseDeadline holds the parser total: any input returns without
// panicking, errors wrap ErrMalformed, and whatever parses re-formats to a
// value that parses to the same instant. The seed corpus runs in normal
// tests; run the fuzzer with
//
//	go test ./ttl -run '^$' -fuzz FuzzParseDeadline -fuzztime 30s
func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{
		"1:1767225600123", "1:0", "2:5", "", ":", "1:", "::", "1:-1", "1:+1",
		"1:99999999999999999", " 1:5 ", "1:5\x00", "\xff\xfe", "01:5", "1:1e9",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Criticality parsing is fuzzed on the same inputs.
		if c, err := ParseCriticality(s); !c.Valid() || (err != nil && !errors.Is(err, ErrMalformed)) {
			t.Fatalf("ParseCriticality(%q) = %v, %v", s, c, err)
		}
		d, err := ParseDeadline(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			if !d.IsZero() {
				t.Fatalf("error with a non-zero deadline %v", d)
			}
			return
		}
		again, err := ParseDeadline(FormatDeadline(d))
		if err != nil || !again.Equal(d) {
			t.Fatalf("re-format of %q (%v) parses to %v, %v", s, d, again, err)
		}
	})
}

// FuzzDecode: any pair of header values decodes to a usable Meta.
func FuzzDecode(f *testing.F) {
	f.Add("1:1767225600123", "CRITICAL")
	f.Add("garbage", "sheddable-plus")
	f.Add("9:1", "\x00")
	f.Fuzz(func(t *testing.T, d, c string) {
		m, err := Decode(d, true, c, true)
		if !m.Criticality.Valid() {
			t.Fatalf("invalid criticality %v", m.Criticality)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error does not wrap ErrMalformed: %v", err)
		}
	})
}

func BenchmarkParseDeadline(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ParseDeadline("1:1767225600123")
	}
}
