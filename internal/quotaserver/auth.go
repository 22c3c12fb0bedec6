package quotaserver

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// AuthMode says whether the quota protocol needs bearer tokens.
type AuthMode string

// The auth modes. The zero value (AuthUnset) means "tokens" when tokens are
// configured, and otherwise "none", but only on a loopback listener: see
// RefuseOpen.
const (
	AuthUnset AuthMode = ""
	// AuthNone serves the quota protocol to anyone who can reach the
	// daemon, on any address: the operator says so in words.
	AuthNone AuthMode = "none"
	// AuthTokens requires a bearer token on every quota protocol call.
	AuthTokens AuthMode = "tokens"
)

// Auth maps bearer tokens to what they may do. Tokens are compared by
// their SHA-256 hash; none is ever logged.
//
//   - Tokens act for the producers they list (POST /v1/leases, watch,
//     stream).
//   - AdminTokens may read /v1/quotas and the read endpoints.
//   - ReadTokens may read /v1/lag and /v1/quotas (the dashboard's data)
//     and nothing else. Without read tokens /v1/lag is open, and
//     /v1/quotas is open only when the quota protocol is (mode none).
type Auth struct {
	// Mode is none or tokens; empty: tokens when Tokens are set, else
	// none, and then only on a loopback listen address (RefuseOpen).
	Mode AuthMode `mapstructure:"mode"`
	// Tokens: each entry lets one token act for the listed producer ids,
	// and for as many as its MaxIDs says that its patterns ("*" any id,
	// "billing-*" a prefix) match.
	Tokens []Token `mapstructure:"tokens"`
	// AdminTokens may read /v1/quotas and what ReadTokens may read; they
	// need Tokens (they turn authentication on).
	AdminTokens []string `mapstructure:"adminTokens"`
	// ReadTokens may read /v1/lag and /v1/quotas; setting any closes both
	// to clients without a read or admin token. They may be set in either
	// mode.
	ReadTokens []string `mapstructure:"readTokens"`
}

// Token is one bearer token and the producers it may act for. A token has
// one entry, and is not also an admin or read token (Validate).
type Token struct {
	Token string `mapstructure:"token"`
	// Producers are the ids the token may act for (producers, and the
	// groups of consumer reports): exact ids, and patterns ("*" for any
	// id, "billing-*" for a prefix) when MaxIDs bounds them.
	Producers []string `mapstructure:"producers"`
	// MaxIDs is how many distinct ids the token's patterns may match at
	// once; an id unused for PatternIdle (1m) frees its place. Beyond,
	// 403. Required with a pattern, from 1 to MaxIDsLimit; must be zero
	// without one.
	MaxIDs int `mapstructure:"maxIds"`
}

// minTokenLen is the shortest token accepted: 16 characters.
const minTokenLen = 16

// Validate reports every problem at once.
func (a Auth) Validate() error {
	var errs []error
	switch a.Mode {
	case AuthUnset, AuthTokens, AuthNone:
	default:
		errs = append(errs, fmt.Errorf("auth.mode: %q is not none or tokens", a.Mode))
	}
	if a.Mode == AuthNone && (len(a.Tokens) > 0 || len(a.AdminTokens) > 0) {
		errs = append(errs, errors.New("auth.mode: none, but tokens or adminTokens are set: remove them, or set mode: tokens"))
	}
	if a.Mode == AuthTokens && len(a.Tokens) == 0 {
		errs = append(errs, errors.New("auth.tokens: mode is tokens but no token is set: list the producers' tokens"))
	}
	for i, t := range a.Tokens {
		if len(t.Token) < minTokenLen {
			errs = append(errs, fmt.Errorf("auth.tokens[%d].token: must be at least %d characters", i, minTokenLen))
		}
		if len(t.Producers) == 0 {
			errs = append(errs, fmt.Errorf("auth.tokens[%d].producers: list the producer ids this token may act for, or \"*\"", i))
		}
		errs = append(errs, validateScope(i, t)...)
	}
	// A producer token is one caller with one scope: the server keeps one
	// entry per token, so a second entry would silently drop the first's
	// producers, and the same token as an admin or read token would let a
	// producer read every grant. The messages name places, never tokens.
	producer := map[string]int{}
	for i, t := range a.Tokens {
		if j, dup := producer[t.Token]; dup {
			errs = append(errs, fmt.Errorf("auth.tokens[%d].token: the same as auth.tokens[%d].token: give each token one entry listing all its producers", i, j))
		} else {
			producer[t.Token] = i
		}
	}
	for i, t := range a.AdminTokens {
		if len(t) < minTokenLen {
			errs = append(errs, fmt.Errorf("auth.adminTokens[%d]: must be at least %d characters", i, minTokenLen))
		}
		if j, dup := producer[t]; dup {
			errs = append(errs, fmt.Errorf("auth.adminTokens[%d]: the same as auth.tokens[%d].token: a producer token may not read other producers' grants; use another token", i, j))
		}
	}
	for i, t := range a.ReadTokens {
		if len(t) < minTokenLen {
			errs = append(errs, fmt.Errorf("auth.readTokens[%d]: must be at least %d characters", i, minTokenLen))
		}
		if j, dup := producer[t]; dup {
			errs = append(errs, fmt.Errorf("auth.readTokens[%d]: the same as auth.tokens[%d].token: a producer token may not read other producers' grants; use another token", i, j))
		}
	}
	return errors.Join(errs...)
}

// Open reports whether the quota protocol is served without tokens.
func (a Auth) Open() bool { return len(a.Tokens) == 0 && len(a.AdminTokens) == 0 }

// ErrOpen is wrapped by RefuseOpen's error.
var ErrOpen = errors.New("the quota protocol would be open to anyone")

// RefuseOpen applies the refusal rule: a daemon serves the quota protocol
// without tokens only when its configuration says so (mode: none) or when
// it listens on loopback only. listen is a host:port, as configured or as
// bound; a host name other than localhost, an empty host and 0.0.0.0 or
// :: (every interface) are not loopback. It returns nil when the rule
// holds, else an error wrapping ErrOpen that says what to do.
func RefuseOpen(listen string, a Auth) error {
	if !a.Open() || a.Mode == AuthNone || Loopback(listen) {
		return nil
	}
	return fmt.Errorf("%w who can reach %s: anyone could report demand for any producer id and read its grant; "+
		"set quota.auth.tokens (tokens per producer; see the README's Security section), "+
		"listen on loopback only (127.0.0.1:9464), "+
		"or say quota.auth.mode: none to serve it without authentication on purpose", ErrOpen, listen)
}

// Loopback reports whether the host of the host:port listen is a loopback
// address (127.0.0.0/8, ::1) or "localhost".
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authState is the tokens in force: a Server holds one, replaced whole by
// SetAuth.
type authState struct {
	// token hash -> what the token may act for; nil map: auth off.
	tokens map[[32]byte]*scope
	// scopes are tokens' values by index of Auth.Tokens.
	scopes  []*scope
	admins  tokenSet
	readers tokenSet // nil: /v1/lag open, /v1/quotas open unless auth is on
	// replaced is closed when SetAuth puts other tokens in force: an open
	// stream checks then that its token still is one (revoked).
	replaced chan struct{}
}

// newAuthState hashes auth's tokens. The scope of a token (its producers,
// maxIds and the ids its patterns hold) is prev's of the same index when
// prev has one: a rotated token keeps its entry's places.
func newAuthState(auth Auth, prev *authState) *authState {
	st := &authState{admins: hashTokens(auth.AdminTokens), readers: hashTokens(auth.ReadTokens), replaced: make(chan struct{})}
	if auth.Open() {
		return st
	}
	st.tokens = map[[32]byte]*scope{}
	for i, t := range auth.Tokens {
		sc := newScope(t)
		if prev != nil && i < len(prev.scopes) {
			sc = prev.scopes[i]
		}
		st.scopes = append(st.scopes, sc)
		st.tokens[sha256.Sum256([]byte(t.Token))] = sc
	}
	return st
}

// SetAuth replaces the tokens in force with auth's: new requests are
// checked against them at once, and a stream open with a token no longer
// in force (or now another entry's) ends (a long-poll already waiting
// answers as usual).
// auth must be valid (Validate) and the same config with other token
// values (a token file rotated: config.ReloadAuth): the i-th producer token
// keeps the i-th entry's producers, maxIds and the ids its patterns hold.
// It refuses to open a server that has tokens or to close an open one
// (ErrAuthMode). Safe for concurrent use.
func (s *Server) SetAuth(auth Auth) error {
	prev := s.auth.Load()
	if (prev.tokens == nil) != auth.Open() || (prev.readers == nil) != (len(auth.ReadTokens) == 0) ||
		len(prev.scopes) != len(auth.Tokens) {
		return ErrAuthMode
	}
	if !s.auth.CompareAndSwap(prev, newAuthState(auth, prev)) {
		return s.SetAuth(auth) // another SetAuth came between
	}
	close(prev.replaced)
	return nil
}

// revoked reports whether the producer token of r, which authenticate
// found to act as perms, no longer does (SetAuth rotated it away). It
// returns the state it checked against, whose replaced says when to check
// again.
func (s *Server) revoked(r *http.Request, perms *scope) (bool, *authState) {
	st := s.auth.Load()
	if st.tokens == nil {
		return false, st
	}
	return st.tokens[sha256.Sum256([]byte(bearer(r)))] != perms, st
}

// ErrAuthMode is SetAuth's error for tokens that would open, close or
// reshape the server's authentication: that takes a restart.
var ErrAuthMode = errors.New("quotaserver: new tokens would change which endpoints need a token, or the producer tokens' entries; restart to change them")

// tokenSet is a set of token hashes; nil means "not configured".
type tokenSet map[[32]byte]bool

func hashTokens(list []string) tokenSet {
	if len(list) == 0 {
		return nil
	}
	s := tokenSet{}
	for _, t := range list {
		s[sha256.Sum256([]byte(t))] = true
	}
	return s
}

// bearer returns the request's bearer token, or "".
func bearer(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok
}

// unauthorized writes 401 with the challenge.
func (s *Server) unauthorized(w http.ResponseWriter, endpoint, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="lagbridge"`)
	s.fail(w, endpoint, http.StatusUnauthorized, "%s", msg)
}

// authenticate checks that the request carries a known producer token (when auth is on) and returns what the token may act for
// (nil with auth off). It writes the error itself: 401 without a known
// token, 403 for an admin or read token.
// Every endpoint calls it (or readable) before any other work.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, endpoint string) (*scope, bool) {
	st := s.auth.Load()
	if st.tokens == nil {
		return nil, true
	}
	tok := bearer(r)
	if tok == "" {
		s.unauthorized(w, endpoint, "a bearer token is required")
		return nil, false
	}
	h := sha256.Sum256([]byte(tok))
	if m := st.tokens[h]; m != nil {
		return m, true
	}
	if st.admins[h] || st.readers[h] {
		what := "act for producers"
		if endpoint == "consumer-report" {
			what = "report for consumer groups"
		}
		s.fail(w, endpoint, http.StatusForbidden, "an admin or read token may not %s; use a producer token", what)
		return nil, false
	}
	s.unauthorized(w, endpoint, "unknown token")
	return nil, false
}

// permits checks that a token with perms (from authenticate) may act for
// producer (or a consumer report's group; what names which, for the
// message); it writes the error itself: 403 when the token does not list
// it, or lists it by a pattern that matches MaxIDs other ids already.
func (s *Server) permits(w http.ResponseWriter, endpoint string, perms *scope, what, producer string) bool {
	if perms == nil { // auth off (authenticate's nil scope)
		return true
	}
	ok, full := perms.allows(producer, s.Now())
	switch {
	case ok:
		return true
	case full:
		s.fail(w, endpoint, http.StatusForbidden, "this token acts for %d ids its patterns match already (its maxIds); %q must wait until one is unused for %v", perms.max, producer, PatternIdle)
	default:
		s.fail(w, endpoint, http.StatusForbidden, "this token may not act for %s %q", what, producer)
	}
	return false
}

// readable checks access to a read endpoint (/v1/lag, /v1/quotas and the
// dashboard's data): open unless read tokens are configured or, for
// closed (/v1/quotas), producer auth is on; then a read or admin token is
// needed. It writes the error itself: 401 without a known token, 403
// with a producer token.
func (s *Server) readable(w http.ResponseWriter, r *http.Request, endpoint string, closed bool) bool {
	st := s.auth.Load()
	if st.readers == nil && !closed {
		return true
	}
	tok := bearer(r)
	if tok == "" {
		s.unauthorized(w, endpoint, "a read or admin bearer token is required")
		return false
	}
	h := sha256.Sum256([]byte(tok))
	if st.readers[h] || st.admins[h] {
		return true
	}
	if st.tokens[h] != nil {
		s.fail(w, endpoint, http.StatusForbidden, "a producer token may not read this; use a read or admin token")
		return false
	}
	s.unauthorized(w, endpoint, "unknown token")
	return false
}

// ReadAccess guards the daemon's read endpoints outside this package
// (/v1/lag, and any later one): it returns true when r may read, and
// otherwise writes 401 or 403 itself. Safe for concurrent use.
func (s *Server) ReadAccess(w http.ResponseWriter, r *http.Request) bool {
	return s.readable(w, r, "read", false)
}

// ReadGuard wraps a read endpoint's handler (/v1/history) with
// ReadAccess.
func (s *Server) ReadGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.ReadAccess(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// ClosedReadGuard wraps a read endpoint that names producers and their
// grants (/v1/events) with the check of /v1/quotas: open only while no
// token of any kind is configured; with producer auth on, or read tokens
// set, a read or admin token is needed (401 without, 403 with a producer
// token), so that who produces what at which rate is never public while
// the quota protocol is guarded.
func (s *Server) ClosedReadGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.readable(w, r, "read", s.auth.Load().tokens != nil) {
			h.ServeHTTP(w, r)
		}
	})
}
