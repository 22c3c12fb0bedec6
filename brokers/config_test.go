package brokers

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lagbridge/lagbridge/internal/importcheck"
)

func TestImports(t *testing.T) { importcheck.Only(t, ".") }

// TestCheckHostPort: a host and a port from 1 to 65535, IPv6 in brackets.
func TestCheckHostPort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // a part of the problem; "" for none
	}{
		{"kafka-0:9092", ""},           // host and port
		{"[::1]:9092", ""},             // IPv6 in brackets
		{"10.0.0.1:65535", ""},         // highest port
		{"nohost", "not host:port"},    // no port
		{"::1:9092", "not host:port"},  // IPv6 without brackets
		{":9092", "no host"},           // no host
		{"h:0", `port "0"`},            // port 0 does not dial
		{"h:65536", `port "65536"`},    // beyond the range
		{"h:x", `port "x" is not a n`}, // not a number
	} {
		err := CheckHostPort(tc.in)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckHostPort(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestFilterMatch: anchored include/exclude semantics, for both observers.
func TestFilterMatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Filter
		in   []string
		out  []string
	}{
		// The zero filter selects everything.
		{"zero", Filter{}, []string{"a", "", "orders"}, nil},
		// Patterns are anchored at both ends.
		{"anchored", Filter{Include: []string{"orders"}}, []string{"orders"}, []string{"orders-dlq", "old-orders", "orders2"}},
		// Alternation is anchored as a whole, not per branch.
		{"alternation", Filter{Include: []string{"a|b"}}, []string{"a", "b"}, []string{"ab", "xa", "bx"}},
		// Any include selects; exclude wins over include.
		{"exclude wins", Filter{Include: []string{"ORDERS", "PAY.*"}, Exclude: []string{".*_DLQ"}}, []string{"ORDERS", "PAYMENTS"}, []string{"PAYOUT_DLQ", "AUDIT"}},
		// Exclude alone removes from everything.
		{"exclude only", Filter{Exclude: []string{"tmp.*"}}, []string{"orders"}, []string{"tmp", "tmp-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.f.Compile()
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.in {
				if !m.Match(n) {
					t.Errorf("%q not selected", n)
				}
			}
			for _, n := range tc.out {
				if m.Match(n) {
					t.Errorf("%q selected", n)
				}
			}
		})
	}
	if !(Matcher{}).Match("anything") {
		t.Error("the zero Matcher must select everything")
	}
}

// TestFilterCheck: every bad pattern is reported, with its place.
func TestFilterCheck(t *testing.T) {
	// The message quotes the pattern as written, not anchored; a pattern
	// that compiles only once anchored ("^(?:a)|(b)$" selects every name
	// starting with a or ending with b) is refused like any other that
	// does not compile; before, it was accepted.
	f := Filter{Include: []string{"ok", "(", "a)|(b"}, Exclude: []string{"[z-a]"}}
	errs := f.Check("kafka", "groups")
	want := []string{
		"kafka.groups.include[1]: error parsing regexp: missing closing ): `(`",
		"kafka.groups.include[2]: error parsing regexp: unexpected ): `a)|(b`",
		"kafka.groups.exclude[0]: error parsing regexp: invalid character class range: `z-a`",
	}
	if len(errs) != len(want) {
		t.Fatalf("%d problems, want %d: %v", len(errs), len(want), errs)
	}
	for i, e := range errs {
		if e.Error() != want[i] || !errors.Is(e, ErrInvalidConfig) {
			t.Errorf("problem %d: %v, want %s wrapping ErrInvalidConfig", i, e, want[i])
		}
	}
	if _, err := f.Compile(); err == nil {
		t.Error("Compile accepted a bad pattern")
	}
	if errs := (Filter{}).Check("nats", "streams"); errs != nil {
		t.Errorf("zero filter: %v", errs)
	}
}

// TestInSection: the section is replaced structurally, in joined errors
// too, and the rest of each error is kept.
func TestInSection(t *testing.T) {
	other := errors.New("not a config error")
	err := errors.Join(
		&ConfigError{Section: "kafka", Field: "brokers[0]", Problem: "bad"},
		&ConfigError{Section: "kafka", Field: "tls.caFile", Problem: "gone", Err: fs.ErrNotExist},
		other,
	)
	got := InSection(err, "kafka[2]")
	want := "kafka[2].brokers[0]: bad\nkafka[2].tls.caFile: gone\nnot a config error"
	if got.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", got, want)
	}
	if !errors.Is(got, ErrInvalidConfig) || !errors.Is(got, fs.ErrNotExist) || !errors.Is(got, other) {
		t.Errorf("lost a cause: %v", got)
	}
	if err.Error() == got.Error() {
		t.Error("InSection changed its argument")
	}
	if InSection(nil, "x") != nil {
		t.Error("InSection(nil) != nil")
	}
}

// TestTLS: the pair rule, files that cannot be read (with their cause), and
// a CA file without a certificate.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		tls      TLS
		want     []string
		notExist bool
	}{
		// The zero value is nothing to load.
		{"zero", TLS{}, nil, false},
		// A certificate needs its key, and a key its certificate.
		{"cert alone", TLS{CertFile: "c.pem"}, []string{"nats.tls.keyFile: required with nats.tls.certFile"}, false},
		{"key alone", TLS{KeyFile: "k.pem"}, []string{"nats.tls.certFile: required with nats.tls.keyFile"}, false},
		// A missing file keeps its cause.
		{"missing ca", TLS{CAFile: filepath.Join(dir, "none.pem")}, []string{"nats.tls.caFile: open "}, true},
		{"missing pair", TLS{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem")}, []string{"nats.tls.certFile: open "}, true},
		// A CA file must hold a certificate.
		{"no PEM", TLS{CAFile: notPEM}, []string{"nats.tls.caFile: " + notPEM + ": no PEM certificate found"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, errs := tc.tls.Load("nats")
			if cfg == nil || cfg.MinVersion == 0 {
				t.Fatalf("config %v", cfg)
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("problems %v, want %v", errs, tc.want)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tc.want[i]) || !errors.Is(e, ErrInvalidConfig) {
					t.Errorf("problem %v, want %q... wrapping ErrInvalidConfig", e, tc.want[i])
				}
				if tc.notExist && !errors.Is(e, fs.ErrNotExist) {
					t.Errorf("problem %v lost its cause", e)
				}
			}
			if (tc.tls.CheckPair("nats") != nil) != (tc.name == "cert alone" || tc.name == "key alone") {
				t.Errorf("CheckPair: %v", tc.tls.CheckPair("nats"))
			}
		})
	}
	if (TLS{}).Set() || !(TLS{ServerName: "x"}).Set() {
		t.Error("Set")
	}
}
