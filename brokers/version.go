package brokers

import (
	"regexp"
	"strconv"
)

// Version is a broker's version, major.minor.patch.
type Version [3]int

var semver = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)`)

// ParseVersion reads v as major.minor.patch (a leading "v", and anything
// after the patch, "-beta", allowed), as servers report their versions
// (nats.Conn.ConnectedServerVersion); ok is false when it does not read.
func ParseVersion(v string) (ver Version, ok bool) {
	m := semver.FindStringSubmatch(v)
	if m == nil {
		return Version{}, false
	}
	for i := range ver {
		n, err := strconv.Atoi(m[i+1])
		if err != nil { // digits too many for an int
			return Version{}, false
		}
		ver[i] = n
	}
	return ver, true
}

// AtLeast reports whether v is want or newer.
func (v Version) AtLeast(want Version) bool {
	for i := range v {
		if v[i] != want[i] {
			return v[i] > want[i]
		}
	}
	return true
}
