package contract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestImports: the vocabulary is importable by the pure cores.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/lagbridge/lagbridge/producerclient/quotaproto")
}

// TestParseCriticality pins names, leniency, the default and the error.
func TestParseCriticality(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Criticality
		err  bool
	}{
		{"canonical", "CRITICAL_PLUS", CriticalPlus, false},
		{"lower case", "critical_plus", CriticalPlus, false},
		{"dash for underscore", "Critical-Plus", CriticalPlus, false},
		{"canonical default", "CRITICAL", Critical, false},
		{"surrounding spaces", " sheddable_plus ", SheddablePlus, false},
		{"canonical last", "SHEDDABLE", Sheddable, false},
		// Nothing said is the default, not an error.
		{"empty", "", Critical, false},
		{"blank", "   ", Critical, false},
		// Unknown names are the default and an error.
		{"unknown", "urgent", Critical, true},
		{"prefix of a name", "CRIT", Critical, true},
		{"longer than any name", "SHEDDABLE_PLUS_PLUS", Critical, true},
		{"garbage", "\x00\xff", Critical, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCriticality(tc.in)
			if got != tc.want || (err != nil) != tc.err {
				t.Fatalf("ParseCriticality(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
			if err != nil && !errors.Is(err, ErrUnknownName) {
				t.Fatalf("error %v does not wrap ErrUnknownName", err)
			}
		})
	}
}

// TestCriticalityOrder pins the zero value, the priority order, the round
// trip through the wire names and the invalid value.
func TestCriticalityOrder(t *testing.T) {
	var zero Criticality
	if zero != Critical || zero.String() != quotaproto.Critical {
		t.Errorf("zero value %v, want CRITICAL", zero)
	}
	for i, c := range Criticalities {
		if c.Rank() != i || !c.Valid() {
			t.Errorf("%v: rank %d valid %v, want rank %d", c, c.Rank(), c.Valid(), i)
		}
		if !quotaproto.ValidCriticality(c.String()) {
			t.Errorf("%v: the protocol does not accept its name", c)
		}
		back, err := ParseCriticality(c.String())
		if err != nil || back != c {
			t.Errorf("round trip %v -> %v, %v", c, back, err)
		}
	}
	bad := Criticality(9)
	if bad.Valid() || bad.Rank() != 4 || bad.String() != "Criticality(9)" {
		t.Errorf("invalid value: valid %v rank %d string %q", bad.Valid(), bad.Rank(), bad.String())
	}
	if _, err := bad.MarshalText(); !errors.Is(err, ErrUnknownName) {
		t.Errorf("marshal invalid: %v", err)
	}
}

// TestSignalNames pins the wire names and the numeric values (the
// lagbridge_quota_signal metric).
func TestSignalNames(t *testing.T) {
	for _, tc := range []struct {
		s    Signal
		n    uint8
		wire string
	}{
		{SignalOK, 0, quotaproto.SignalOK},
		{SignalSlowDown, 1, quotaproto.SignalSlowDown},
		{SignalStop, 2, quotaproto.SignalStop},
		{SignalAvoidPartitions, 3, quotaproto.SignalAvoidPartitions},
	} {
		t.Run(tc.wire, func(t *testing.T) {
			if uint8(tc.s) != tc.n || tc.s.String() != tc.wire || !tc.s.Valid() {
				t.Fatalf("%d %q valid %v, want %d %q", uint8(tc.s), tc.s.String(), tc.s.Valid(), tc.n, tc.wire)
			}
			for _, in := range []string{tc.wire, " " + tc.wire + " ", strings.ToUpper(strings.ReplaceAll(tc.wire, "-", "_"))} {
				if got, err := ParseSignal(in); err != nil || got != tc.s {
					t.Errorf("ParseSignal(%q) = %v, %v", in, got, err)
				}
			}
		})
	}
	for _, in := range []string{"", "retry", "try-elsewhere", strings.Repeat("x", 1000)} {
		if got, err := ParseSignal(in); got != SignalOK || !errors.Is(err, ErrUnknownName) {
			t.Errorf("ParseSignal(%q) = %v, %v; want ok and ErrUnknownName", in, got, err)
		} else if len(err.Error()) > 200 {
			t.Errorf("ParseSignal(%d bytes): error of %d bytes, want it bounded", len(in), len(err.Error()))
		}
	}
	if bad := Signal(7); bad.Valid() || bad.String() != "Signal(7)" {
		t.Errorf("invalid signal: valid %v string %q", bad.Valid(), bad.String())
	}
	if _, err := Signal(7).MarshalText(); !errors.Is(err, ErrUnknownName) {
		t.Errorf("marshal invalid: %v", err)
	}
}

// TestText: JSON uses the wire names, as values and as map keys, and an
// unknown name leaves the value unchanged.
func TestText(t *testing.T) {
	b, err := json.Marshal(map[Criticality]Signal{SheddablePlus: SignalAvoidPartitions})
	if err != nil || string(b) != `{"SHEDDABLE_PLUS":"avoid-partitions"}` {
		t.Fatalf("json %s, %v", b, err)
	}
	var m map[Criticality]Signal
	if err := json.Unmarshal([]byte(`{"sheddable":"slow_down"}`), &m); err != nil || m[Sheddable] != SignalSlowDown {
		t.Fatalf("unmarshal %v, %v", m, err)
	}
	c, s := SheddablePlus, SignalStop
	if err := json.Unmarshal([]byte(`"nope"`), &c); !errors.Is(err, ErrUnknownName) || c != SheddablePlus {
		t.Errorf("unmarshal unknown criticality: %v, %v", c, err)
	}
	if err := json.Unmarshal([]byte(`"nope"`), &s); !errors.Is(err, ErrUnknownName) || s != SignalStop {
		t.Errorf("unmarshal unknown signal: %v, %v", s, err)
	}
}

// TestNoAlloc: the exact wire names parse and print without allocating
// (the SDK parses a header per message).
func TestNoAlloc(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		_, _ = ParseCriticality("SHEDDABLE_PLUS")
		_, _ = ParseSignal("avoid-partitions")
		_ = Sheddable.String()
		_ = SignalStop.String()
	}); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}

// FuzzParse: any input gives a valid value, and an error only wrapping
// ErrUnknownName.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "CRITICAL", "critical-plus", "slow-down", "\x00", "SHEDDABLE_PLUS "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := ParseCriticality(s); !c.Valid() || (err != nil && !errors.Is(err, ErrUnknownName)) {
			t.Fatalf("ParseCriticality(%q) = %v, %v", s, c, err)
		}
		if g, err := ParseSignal(s); !g.Valid() || (err != nil && !errors.Is(err, ErrUnknownName)) {
			t.Fatalf("ParseSignal(%q) = %v, %v", s, g, err)
		}
	})
}
