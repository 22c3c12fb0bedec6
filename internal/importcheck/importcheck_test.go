package importcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what the checks report.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestShortFuncs: a function of max lines passes, one line more fails with
// its file, line and name; test files and methods count as written.
func TestShortFuncs(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// four is four lines long.
func four() {
	_ = 1
	_ = 2
}

type T struct{}

func (T) five() {
	_ = 1
	_ = 2
	_ = 3
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	long := "package p\n\nfunc inTest() {\n" + strings.Repeat("\t_ = 0\n", 20) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		max  int
		want []string // each reported problem names one of these
	}{
		{"both within", 5, nil},
		{"the method over", 4, []string{"p.go:11: five is 5 lines long, more than 4"}},
		{"both over", 3, []string{"p.go:4: four is 4 lines long", "p.go:11: five is 5 lines long"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			ShortFuncs(r, dir, c.max)
			if len(r.errs) != len(c.want) {
				t.Fatalf("reported %q, want %d problems", r.errs, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(r.errs[i], w) {
					t.Errorf("problem %q does not say %q", r.errs[i], w)
				}
			}
		})
	}
}
