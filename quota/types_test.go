package quota

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestCriticality pins names, parsing, order and the zero value.
func TestCriticality(t *testing.T) {
	cases := []struct {
		in   string
		want Criticality
		err  bool
	}{
		{in: "CRITICAL_PLUS", want: CriticalPlus},     // canonical
		{in: "critical_plus", want: CriticalPlus},     // case-insensitive
		{in: "Critical-Plus", want: CriticalPlus},     // '-' as '_'
		{in: "CRITICAL", want: Critical},              // canonical
		{in: " sheddable_plus ", want: SheddablePlus}, // trimmed
		{in: "SHEDDABLE", want: Sheddable},            // canonical
		{in: "", want: Critical},                      // empty is the default
		{in: "urgent", err: true},                     // unknown
	}
	for _, c := range cases {
		got, err := ParseCriticality(c.in)
		if c.err {
			if !errors.Is(err, ErrUnknownName) {
				t.Errorf("%q: err %v, want ErrUnknownName", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	var zero Criticality
	if zero != Critical || zero.String() != "CRITICAL" {
		t.Errorf("zero value %v, want CRITICAL", zero)
	}
	for i, c := range Criticalities {
		if c.Rank() != i {
			t.Errorf("%v rank %d, want %d", c, c.Rank(), i)
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
	// JSON uses the text form, as a value and as a map key.
	b, err := json.Marshal(map[Criticality]Criticality{SheddablePlus: CriticalPlus})
	if err != nil || string(b) != `{"SHEDDABLE_PLUS":"CRITICAL_PLUS"}` {
		t.Fatalf("json %s, %v", b, err)
	}
	var m map[Criticality]Criticality
	if err := json.Unmarshal([]byte(`{"sheddable":"critical"}`), &m); err != nil || m[Sheddable] != Critical {
		t.Fatalf("unmarshal %v, %v", m, err)
	}
	if err := json.Unmarshal([]byte(`"nope"`), &zero); !errors.Is(err, ErrUnknownName) {
		t.Fatalf("unmarshal unknown: %v", err)
	}
}

// TestSignal pins the names, parsing and the numeric values (they are the
// lagbridge_quota_signal metric).
func TestSignal(t *testing.T) {
	want := map[Signal]string{SignalOK: "ok", SignalSlowDown: "slow-down", SignalStop: "stop", SignalAvoidPartitions: "avoid-partitions"}
	for s, name := range want {
		if s.String() != name {
			t.Errorf("%d: %q, want %q", s, s.String(), name)
		}
		for _, in := range []string{name, " " + name, "SLOW_DOWN"} {
			if in == "SLOW_DOWN" && s != SignalSlowDown {
				continue
			}
			got, err := ParseSignal(in)
			if err != nil || got != s {
				t.Errorf("parse %q: %v, %v", in, got, err)
			}
		}
		b, err := s.MarshalText()
		if err != nil || string(b) != name {
			t.Errorf("marshal %v: %s, %v", s, b, err)
		}
	}
	if SignalOK != 0 || SignalSlowDown != 1 || SignalStop != 2 || SignalAvoidPartitions != 3 {
		t.Error("signal numbers changed: they are a metric's values")
	}
	var s Signal
	if err := s.UnmarshalText([]byte("retry")); !errors.Is(err, ErrUnknownName) {
		t.Errorf("unknown signal: %v", err)
	}
	if _, err := Signal(7).MarshalText(); !errors.Is(err, ErrUnknownName) {
		t.Errorf("marshal invalid: %v", err)
	}
}

// TestMode: the zero value enforces; advise is the only other value.
func TestMode(t *testing.T) {
	var zero Mode
	if zero.Advisory() || zero.String() != "enforce" || !zero.Valid() {
		t.Errorf("zero mode: advisory %v string %q", zero.Advisory(), zero.String())
	}
	for in, want := range map[string]Mode{"": ModeEnforce, "ENFORCE": ModeEnforce, "Advise": ModeAdvise} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v", in, got, err)
		}
	}
	var m Mode
	if err := m.UnmarshalText([]byte("shadow")); !errors.Is(err, ErrUnknownName) {
		t.Errorf("unknown mode: %v", err)
	}
	if err := m.UnmarshalText([]byte("advise")); err != nil || !m.Advisory() {
		t.Errorf("advise: %v %v", m, err)
	}
	if _, err := Mode("x").MarshalText(); !errors.Is(err, ErrUnknownName) {
		t.Errorf("marshal invalid: %v", err)
	}
}
