package config

import (
	"fmt"
	"os"
	"strings"
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
func resolveSecrets(settings map[string]any) (errs []error, unread map[string]bool) {
	unread = map[string]bool{}
	resolve := func(at string, m map[string]any, key string, list bool) {
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
		path, _ := raw.(string)
		if path == "" {
			fail("must be the path of a file, got %v", raw)
			return
		}
		if k, ok := lookup(m, key); ok && isSet(m[k]) {
			errs = append(errs, fmt.Errorf("%s%s: set together with %s%s; give the secret inline or in a file, not both", at, fileKey, at, key))
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			fail("%v", err)
			return
		}
		s := string(b)
		if k, ok := lookup(m, key); ok {
			delete(m, k)
		}
		if list {
			var tokens []string
			for _, line := range strings.Split(s, "\n") {
				if line = strings.TrimSpace(line); line != "" {
					tokens = append(tokens, line)
				}
			}
			if len(tokens) == 0 {
				fail("%s holds no token", path)
				return
			}
			m[key] = tokens
			return
		}
		s = strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")
		if s == "" {
			fail("%s is empty", path)
			return
		}
		m[key] = s
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
				resolve(fmt.Sprintf("quota.auth.tokens[%d].", i), t, "token", false)
			}
			resolve("quota.auth.", auth, "adminTokens", true)
			resolve("quota.auth.", auth, "readTokens", true)
		}
	}
	return errs, unread
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
