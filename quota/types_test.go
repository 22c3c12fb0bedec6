package quota

import (
	"errors"
	"testing"
)

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
