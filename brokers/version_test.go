package brokers

import "testing"

func TestParseVersion(t *testing.T) {
	for v, want := range map[string]bool{"2.10.4": true, "2.10.3": false, "2.11.0-beta": true, "v2.12.1": true,
		"1.99.99": false, "": false, "3.0.0": true, "2.10": false, "x2.11.0": false} {
		got, ok := ParseVersion(v)
		if ok && got.AtLeast(Version{2, 10, 4}) != want || !ok && want {
			t.Errorf("ParseVersion(%q) = %v, %v: at least 2.10.4 %v, want %v", v, got, ok, ok && got.AtLeast(Version{2, 10, 4}), want)
		}
	}
}
