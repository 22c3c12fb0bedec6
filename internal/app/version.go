package app

import (
	"runtime/debug"
)

// Version is set at build time with -ldflags "-X ...app.Version=v1.2.3".
var Version = "dev"

// VersionString is what `lagbridge version` prints: Version when the build
// set it; otherwise what the Go toolchain recorded, so that a binary from
// `go install ...@v1.2.3` or `go build` in a checkout still says which
// code it is (the module version, or the commit and whether the tree had
// changes).
func VersionString() string {
	if Version != "dev" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo describes a build by its module version (not "(devel)")
// or its VCS revision (12 characters, "+modified" for a changed tree);
// "dev" when it records neither.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev[:min(len(rev), 12)] + modified
}
