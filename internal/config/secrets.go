package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/lagbridge/lagbridge/internal/quotaserver"
)

// resolveSecrets replaces every secret file setting in settings (as viper
// returns them: keys in lower case) by the value read from the file. A
// secret can be given inline or in a file, never both: <key>File next to
// <key>. Environment variables cannot reach settings inside lists
// (kafka[0]...), so files are how secrets stay out of the config file: a
// Kubernetes Secret mounted as a volume, or a systemd credential.
//
//	kafka[i].sasl.passwordFile       -> kafka[i].sasl.password
//	nats[i].passwordFile             -> nats[i].password
//	nats[i].tokenFile                -> nats[i].token
//	quota.auth.tokens[i].tokenFile   -> quota.auth.tokens[i].token
//	quota.auth.adminTokensFile       -> quota.auth.adminTokens (one per line)
//	quota.auth.readTokensFile        -> quota.auth.readTokens (one per line)
//
// A file holding one value loses one trailing newline ("\n" or "\r\n"),
// which editors and `echo` add; anything else in it is part of the value.
// The admin and read tokens files hold one token per line; surrounding blanks and
// empty lines are ignored.
//
// It returns one error per problem and the paths of the values it could not
// read, so that Load does not also report them as missing.
//
// It also returns the files of the quota protocol's tokens (authFiles), which
// Config.ReloadAuth reads again.
func resolveSecrets(settings map[string]any) (errs []error, unread map[string]bool, files authFiles) {
	unread = map[string]bool{}
	resolve := func(at string, m map[string]any, key string, list bool) (path string) {
		fileKey := key + "File"
		fk, ok := lookup(m, fileKey)
		if !ok {
			return
		}
		raw := m[fk]
		delete(m, fk)
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s%s: %s", at, fileKey, fmt.Sprintf(format, args...)))
			unread[at+key] = true
		}
		path, _ = raw.(string)
		if path == "" {
			fail("must be the path of a file, got %v", raw)
			return ""
		}
		if k, ok := lookup(m, key); ok && isSet(m[k]) {
			errs = append(errs, fmt.Errorf("%s%s: set together with %s%s; give the secret inline or in a file, not both", at, fileKey, at, key))
			return ""
		}
		one, tokens, err := readSecret(path, list)
		if err != nil {
			fail("%v", err)
			return ""
		}
		if k, ok := lookup(m, key); ok {
			delete(m, k)
		}
		if list {
			m[key] = tokens
		} else {
			m[key] = one
		}
		return path
	}
	for i, k := range maps(settings, "kafka") {
		at := fmt.Sprintf("kafka[%d].sasl.", i)
		if sasl, ok := child(k, "sasl"); ok {
			resolve(at, sasl, "password", false)
		}
	}
	for i, n := range maps(settings, "nats") {
		at := fmt.Sprintf("nats[%d].", i)
		resolve(at, n, "password", false)
		resolve(at, n, "token", false)
	}
	if q, ok := child(settings, "quota"); ok {
		if auth, ok := child(q, "auth"); ok {
			for i, t := range maps(auth, "tokens") {
				if p := resolve(fmt.Sprintf("quota.auth.tokens[%d].", i), t, "token", false); p != "" {
					if files.tokens == nil {
						files.tokens = map[int]string{}
					}
					files.tokens[i] = p
				}
			}
			files.admin = resolve("quota.auth.", auth, "adminTokens", true)
			files.read = resolve("quota.auth.", auth, "readTokens", true)
		}
	}
	return errs, unread, files
}

// readSecret reads a secret file: one value without its trailing newline,
// or (list) one token per non-blank line. An empty value or list is an
// error.
func readSecret(path string, list bool) (one string, tokens []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	s := string(b)
	if list {
		for _, line := range strings.Split(s, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				tokens = append(tokens, line)
			}
		}
		if len(tokens) == 0 {
			return "", nil, fmt.Errorf("%s holds no token", path)
		}
		return "", tokens, nil
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")
	if s == "" {
		return "", nil, fmt.Errorf("%s is empty", path)
	}
	return s, nil, nil
}

// authFiles are the files the quota protocol's tokens came from: by index
// of quota.auth.tokens, and the admin and read tokens files ("": none).
type authFiles struct {
	tokens      map[int]string
	admin, read string
}

// ReloadAuth reads the quota protocol's token files again
// (quota.auth.tokens[].tokenFile, adminTokensFile, readTokensFile) and
// returns c.Quota.Auth with their current contents, validated as Load
// validates them; everything else (the producers and maxIds of each token,
// the inline tokens) is the config's as loaded. changed reports whether a
// token differs from c's. With an error, auth is c's: keep serving it.
// The files are read whole each call: a few hundred bytes.
func (c Config) ReloadAuth() (auth quotaserver.Auth, changed bool, err error) {
	old := c.Quota.Auth
	if len(c.authFiles.tokens) == 0 && c.authFiles.admin == "" && c.authFiles.read == "" {
		return old, false, nil
	}
	auth = old
	auth.Tokens = slices.Clone(old.Tokens)
	var errs []error
	for i, path := range c.authFiles.tokens {
		if i >= len(auth.Tokens) {
			continue
		}
		tok, _, err := readSecret(path, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("quota.auth.tokens[%d].tokenFile: %w", i, err))
			continue
		}
		auth.Tokens[i].Token = tok
	}
	for _, f := range []struct {
		name, path string
		to         *[]string
	}{{"adminTokensFile", c.authFiles.admin, &auth.AdminTokens}, {"readTokensFile", c.authFiles.read, &auth.ReadTokens}} {
		if f.path == "" {
			continue
		}
		_, tokens, err := readSecret(f.path, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("quota.auth.%s: %w", f.name, err))
			continue
		}
		*f.to = tokens
	}
	if err := errors.Join(errs...); err != nil {
		return old, false, err
	}
	if err := auth.Validate(); err != nil {
		return old, false, err
	}
	changed = !slices.Equal(auth.AdminTokens, old.AdminTokens) || !slices.Equal(auth.ReadTokens, old.ReadTokens)
	for i := range auth.Tokens {
		changed = changed || auth.Tokens[i].Token != old.Tokens[i].Token
	}
	return auth, changed, nil
}

// lookup finds key in m whatever its case (viper lower-cases keys).
func lookup(m map[string]any, key string) (string, bool) {
	if _, ok := m[key]; ok {
		return key, true
	}
	for k := range m {
		if strings.EqualFold(k, key) {
			return k, true
		}
	}
	return "", false
}

// child returns the map under key, if there is one.
func child(m map[string]any, key string) (map[string]any, bool) {
	k, ok := lookup(m, key)
	if !ok {
		return nil, false
	}
	c, ok := m[k].(map[string]any)
	return c, ok
}

// maps returns the list under key, index for index; elements that are not
// maps are nil (the decoder reports them).
func maps(m map[string]any, key string) []map[string]any {
	k, ok := lookup(m, key)
	if !ok {
		return nil
	}
	list, _ := m[k].([]any)
	out := make([]map[string]any, len(list))
	for i, e := range list {
		out[i], _ = e.(map[string]any)
	}
	return out
}

// isSet reports whether an inline value is given: a non-empty string or a
// non-empty list.
func isSet(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case []string:
		return len(v) > 0
	}
	return true
}
