package quotaserver

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestScope: a token acts for the ids it lists, and for at most MaxIDs ids
// its patterns match at once; an idle id frees its place, found by a sweep
// that runs at most once a second.
func TestScope(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := newScope(Token{Producers: []string{"checkout", "batch-*"}, MaxIDs: 2})
	steps := []struct {
		name     string
		id       string
		at       time.Duration
		ok, full bool
	}{
		{"a listed id, any time", "checkout", 0, true, false},
		{"an id nothing matches", "orders-api", 0, false, false},
		{"the first id of the pattern", "batch-1", 0, true, false},
		{"the second", "batch-2", 0, true, false},
		{"a third: full", "batch-3", 0, false, true},
		{"one in use again", "batch-1", 30 * time.Second, true, false},
		{"listed ids never count", "checkout", 30 * time.Second, true, false},
		// batch-2 idle for more than PatternIdle: its place frees.
		{"batch-2 idle, batch-3 takes its place", "batch-3", PatternIdle + time.Second, true, false},
		{"batch-2 is new again: full", "batch-2", PatternIdle + time.Second, false, true},
		// batch-1 (last used at 30 s) is not idle long enough yet.
		{"a sweep frees nothing", "batch-4", 89900 * time.Millisecond, false, true},
		// It is now, but the last sweep was under a second ago.
		{"no second sweep within a second", "batch-4", 90500 * time.Millisecond, false, true},
		{"the next sweep frees it", "batch-4", 90900 * time.Millisecond, true, false},
	}
	for _, st := range steps {
		ok, full := s.allows(st.id, t0.Add(st.at))
		if ok != st.ok || full != st.full {
			t.Fatalf("%s: allows(%s) = %v, %v; want %v, %v", st.name, st.id, ok, full, st.ok, st.full)
		}
	}
	// "*" matches any id, bounded the same way.
	any := newScope(Token{Producers: []string{"*"}, MaxIDs: 100})
	for i := range 150 {
		ok, full := any.allows(fmt.Sprintf("anon-%d", i), t0)
		if ok != (i < 100) || full != (i >= 100) {
			t.Fatalf("anon-%d: %v, %v", i, ok, full)
		}
	}
}

// TestValidateScope: a pattern needs maxIds, maxIds needs a pattern, and
// a pattern is "*" or a valid prefix and one "*".
func TestValidateScope(t *testing.T) {
	cases := []struct {
		name string
		tok  Token
		want []string // substrings of the problems, in order; nil: valid
	}{
		{name: "exact ids", tok: Token{Producers: []string{"a", "b"}}},
		{name: "star with a bound", tok: Token{Producers: []string{"*"}, MaxIDs: 50}},
		{name: "prefix with a bound", tok: Token{Producers: []string{"a", "billing-*"}, MaxIDs: 5}},
		{name: "star without a bound", tok: Token{Producers: []string{"*"}}, want: []string{"tokens[0].maxIds: required with a pattern"}},
		{name: "a bound without a pattern", tok: Token{Producers: []string{"a"}, MaxIDs: 3}, want: []string{"tokens[0].maxIds: bounds the ids a pattern"}},
		{name: "bound out of range", tok: Token{Producers: []string{"*"}, MaxIDs: MaxIDsLimit + 1}, want: []string{"tokens[0].maxIds: must be from 1"}},
		{name: "star in the middle", tok: Token{Producers: []string{"a*b", "x y*"}, MaxIDs: 1}, want: []string{`producers[0]: "a*b" is not a valid producer id`, `producers[1]: "x y*": a pattern is`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := validateScope(0, c.tok)
			if len(errs) != len(c.want) {
				t.Fatalf("problems %v, want %d", errs, len(c.want))
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), c.want[i]) {
					t.Errorf("problem %q, want %q", e, c.want[i])
				}
			}
		})
	}
}
