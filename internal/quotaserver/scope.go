package quotaserver

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// MaxIDsLimit is the largest Token.MaxIDs.
const MaxIDsLimit = 100000

// PatternIdle is how long an id a token's pattern matched keeps its place
// in the token's MaxIDs without being used.
const PatternIdle = time.Minute

// isPattern reports whether a token's producers entry is a pattern: "*"
// (any id) or a prefix followed by "*" ("billing-*").
func isPattern(p string) bool { return strings.HasSuffix(p, "*") }

// validateScope returns the problems of t's producers and MaxIDs, each
// prefixed with the token's path (auth.tokens[i]).
func validateScope(i int, t Token) []error {
	var errs []error
	patterns := false
	for j, p := range t.Producers {
		switch {
		case isPattern(p):
			patterns = true
			if pre := strings.TrimSuffix(p, "*"); pre != "" && !quotaproto.ValidProducer(pre) {
				errs = append(errs, fmt.Errorf("auth.tokens[%d].producers[%d]: %q: a pattern is \"*\" or a valid producer id prefix followed by one \"*\"", i, j, p))
			}
		case !quotaproto.ValidProducer(p):
			errs = append(errs, fmt.Errorf("auth.tokens[%d].producers[%d]: %q is not a valid producer id", i, j, p))
		}
	}
	switch {
	case patterns && t.MaxIDs == 0:
		errs = append(errs, fmt.Errorf("auth.tokens[%d].maxIds: required with a pattern in producers: %q lets the token act for ids nobody listed, so say how many at once (1-%d)",
			i, strings.Join(t.Producers, ","), MaxIDsLimit))
	case t.MaxIDs < 0 || t.MaxIDs > MaxIDsLimit:
		errs = append(errs, fmt.Errorf("auth.tokens[%d].maxIds: must be from 1 to %d, got %d", i, MaxIDsLimit, t.MaxIDs))
	case !patterns && t.MaxIDs != 0:
		errs = append(errs, fmt.Errorf("auth.tokens[%d].maxIds: bounds the ids a pattern (\"*\", \"prefix*\") matches, and producers has none", i))
	}
	return errs
}

// scope is what one producer token may act for: the ids it lists, and at
// most max ids at once matched by its patterns. Safe for concurrent use.
type scope struct {
	ids      map[string]bool
	prefixes []string // of the patterns; "" for "*"
	max      int

	mu     sync.Mutex
	active map[string]time.Time // ids matched by a pattern -> last use
	swept  time.Time
}

func newScope(t Token) *scope {
	s := &scope{ids: map[string]bool{}, max: t.MaxIDs, active: map[string]time.Time{}}
	for _, p := range t.Producers {
		if isPattern(p) {
			s.prefixes = append(s.prefixes, strings.TrimSuffix(p, "*"))
		} else {
			s.ids[p] = true
		}
	}
	return s
}

// allows reports whether the token may act for id as of now. An id it
// lists is always allowed. An id one of its patterns matches takes one of
// max places, kept while used at least every PatternIdle; when all are
// taken, full is true. Freeing idle places costs O(max), at most once per
// second, so that a token at its bound answers a flood of new ids cheaply.
func (s *scope) allows(id string, now time.Time) (ok, full bool) {
	if s.ids[id] {
		return true, false
	}
	matched := false
	for _, pre := range s.prefixes {
		if strings.HasPrefix(id, pre) {
			matched = true
			break
		}
	}
	if !matched {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.active[id]; ok {
		s.active[id] = now
		return true, false
	}
	if len(s.active) >= s.max && now.Sub(s.swept) >= time.Second {
		s.swept = now
		for k, t := range s.active {
			if now.Sub(t) > PatternIdle {
				delete(s.active, k)
			}
		}
	}
	if len(s.active) >= s.max {
		return false, true
	}
	s.active[id] = now
	return true, false
}
