package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestPolicyValidate: every problem is reported at once, each as a
// FieldError wrapping ErrInvalidPolicy with the field's path.
func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		name   string
		p      Policy
		fields []string // the fields reported, in order; nil: valid
	}{
		{
			// The minimum: a name and a max age.
			name: "minimal is valid",
			p:    Policy{Name: "p", MaxAge: time.Second},
		},
		{
			// Everything set, all consistent.
			name: "full is valid",
			p: Policy{Name: "p", Match: Match{Kind: lag.KindNATS, Cluster: "eu-.*", Topic: "orders|payments", Group: ".*"},
				MaxAge: 2 * time.Second, HardAge: 5 * time.Second, ProcessingTime: 100 * time.Millisecond, MinRate: 10,
				Producers: []ProducerSpec{{ID: "a", Weight: 2, Criticality: CriticalPlus}, {ID: "b"}}, Mode: ModeAdvise, KafkaClientQuota: true},
		},
		{
			// The zero Policy misses both required fields.
			name:   "zero value",
			p:      Policy{},
			fields: []string{"name", "maxAge"},
		},
		{
			// Each field broken once: all reported together.
			name: "everything wrong",
			p: Policy{Name: "p", Match: Match{Kind: "rabbit", Cluster: "(", Topic: "[", Group: "a{2,1}"},
				MaxAge: time.Second, HardAge: 500 * time.Millisecond, ProcessingTime: time.Second, MinRate: -1,
				Producers: []ProducerSpec{{ID: ""}, {ID: "x", Weight: -1}, {ID: "x", Criticality: 7}}, Mode: "shadow"},
			fields: []string{"match.kind", "match.cluster", "match.topic", "match.group", "hardAge", "processingTime", "minRate",
				"producers[0].id", "producers[1].weight", "producers[2].id", "producers[2].criticality", "mode"},
		},
		{
			// Unlisted: an unknown admission, a cap out of range, and a
			// cap beside refuse are each reported.
			name:   "unlisted out of range",
			p:      Policy{Name: "p", MaxAge: time.Second, Unlisted: Unlisted{Admit: "all", Max: -1}},
			fields: []string{"unlisted.admit"},
		},
		{
			name:   "unlisted max too large",
			p:      Policy{Name: "p", MaxAge: time.Second, Unlisted: Unlisted{Max: MaxUnlistedLimit + 1}},
			fields: []string{"unlisted.max"},
		},
		{
			name:   "unlisted max beside refuse",
			p:      Policy{Name: "p", MaxAge: time.Second, Unlisted: Unlisted{Admit: RefuseUnlisted, Max: 3}},
			fields: []string{"unlisted.max"},
		},
		{
			name: "unlisted valid",
			p:    Policy{Name: "p", MaxAge: time.Second, Unlisted: Unlisted{Admit: AdmitSheddable, Max: 5}},
		},
		{
			// A pattern that does not compile alone but would once
			// anchored ("^(?:a)|(b)$": a prefix or a suffix, not the
			// names it says) is refused, and so is one that does not
			// compile at all; before, the first was accepted.
			name:   "patterns that compile only anchored",
			p:      Policy{Name: "p", MaxAge: time.Second, Match: Match{Topic: "a)|(b", Group: "x)|.*|(y"}},
			fields: []string{"match.topic", "match.group"},
		},
		{
			// Negative durations.
			name:   "negative durations",
			p:      Policy{Name: "p", MaxAge: -time.Second, HardAge: -1, ProcessingTime: -1},
			fields: []string{"maxAge", "hardAge", "processingTime"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			got := fieldsOf(t, err)
			if strings.Join(got, ",") != strings.Join(c.fields, ",") {
				t.Fatalf("fields %v, want %v\n%v", got, c.fields, err)
			}
		})
	}
}

// fieldsOf returns the Field of every FieldError in err, checking that each
// wraps ErrInvalidPolicy and reads "<field>: <problem>".
func fieldsOf(tb testing.TB, err error) []string {
	tb.Helper()
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrInvalidPolicy) {
		tb.Fatalf("%v does not wrap ErrInvalidPolicy", err)
	}
	var out []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			tb.Fatalf("%v is not a FieldError", e)
		}
		if !strings.HasPrefix(e.Error(), fe.Field+": ") {
			tb.Fatalf("message %q does not start with its field", e.Error())
		}
		out = append(out, fe.Field)
	}
	return out
}

// TestNewPolicies: problems are prefixed policies[i]., duplicate names are
// caught, and PrefixFields lets the caller add its own prefix.
func TestNewPolicies(t *testing.T) {
	_, err := NewPolicies([]Policy{
		{Name: "a", MaxAge: time.Second},
		{Name: "a", MaxAge: time.Second},
		{Name: "c"},
	})
	got := fieldsOf(t, err)
	want := []string{"policies[1].name", "policies[2].maxAge"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("fields %v, want %v", got, want)
	}
	got = fieldsOf(t, PrefixFields(err, "quota."))
	if got[0] != "quota.policies[1].name" {
		t.Fatalf("prefixed %v", got)
	}
	if PrefixFields(nil, "x") != nil {
		t.Fatal("PrefixFields(nil) != nil")
	}
	if err := PrefixFields(errors.New("plain"), "x."); err.Error() != "plain" {
		t.Fatalf("plain error changed: %v", err)
	}
	ps, err := NewPolicies(nil)
	if err != nil || ps.Len() != 0 {
		t.Fatalf("empty: %v %v", ps, err)
	}
	if _, ok := ps.Match(lag.Target{}); ok {
		t.Fatal("empty Policies matched")
	}
}

// TestNewPoliciesDuplicateBesideOtherProblems pins that a duplicate name is
// reported even when either policy of that name has problems of its own:
// one `lagbridge check` run must name every mistake, not reveal the
// duplicate only after the other problem is fixed. Unnamed policies are
// reported as unnamed, not as duplicates of each other.
func TestNewPoliciesDuplicateBesideOtherProblems(t *testing.T) {
	_, err := NewPolicies([]Policy{
		{Name: "a"},                      // no maxAge
		{Name: "a", MaxAge: time.Second}, // duplicate of the invalid first
		{Name: "a"},                      // duplicate, and no maxAge
		{MaxAge: time.Second},
		{MaxAge: time.Second},
	})
	got := fieldsOf(t, err)
	want := []string{"policies[0].maxAge", "policies[1].name", "policies[2].maxAge", "policies[2].name", "policies[3].name", "policies[4].name"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("fields %v, want %v", got, want)
	}
	if !strings.Contains(err.Error(), `policies[2].name: duplicates policies[0] ("a")`) {
		t.Fatalf("duplicate not named after its first occurrence: %v", err)
	}
}

// TestPoliciesMatch: anchored patterns, empty matches anything, first match
// wins.
func TestPoliciesMatch(t *testing.T) {
	ps, err := NewPolicies([]Policy{
		{Name: "orders-billing", Match: Match{Topic: "orders", Group: "billing"}, MaxAge: time.Second},
		{Name: "orders-any", Match: Match{Topic: "orders.*"}, MaxAge: 2 * time.Second},
		{Name: "nats-eu", Match: Match{Kind: lag.KindNATS, Cluster: "eu-[0-9]+"}, MaxAge: 3 * time.Second},
		{Name: "default", MaxAge: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		target lag.Target
		want   string
	}{
		{lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "billing"}, "orders-billing"}, // exact
		{lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders", Group: "billing-2"}, "orders-any"},   // group anchored
		{lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "orders-eu", Group: "billing"}, "orders-any"},  // topic anchored
		{lag.Target{Kind: lag.KindNATS, Cluster: "eu-1", Topic: "events", Group: "x"}, "nats-eu"},            // kind and cluster
		{lag.Target{Kind: lag.KindKafka, Cluster: "eu-1", Topic: "events", Group: "x"}, "default"},           // kind differs
		{lag.Target{Kind: lag.KindNATS, Cluster: "eu-1x", Topic: "events", Group: "x"}, "default"},           // cluster anchored
		{lag.Target{Kind: lag.KindKafka, Cluster: "c", Topic: "xorders", Group: "billing"}, "default"},       // anchored at start
	}
	for _, c := range cases {
		p, ok := ps.Match(c.target)
		if !ok || p.Name != c.want {
			t.Errorf("%v: matched %q (%v), want %q", c.target, p.Name, ok, c.want)
		}
	}
	if p, ok := ps.ByName("nats-eu"); !ok || p.MaxAge != 3*time.Second {
		t.Errorf("ByName: %v %v", p, ok)
	}
	if _, ok := ps.ByName("nope"); ok {
		t.Error("ByName found a missing policy")
	}
}

// TestPolicyHelpers: Budget, Producer, EffectiveWeight.
func TestPolicyHelpers(t *testing.T) {
	p := Policy{MaxAge: 2 * time.Second, ProcessingTime: 300 * time.Millisecond, Producers: []ProducerSpec{{ID: "a"}, {ID: "b", Weight: 2.5}}}
	if p.Budget() != 1700*time.Millisecond {
		t.Errorf("budget %v", p.Budget())
	}
	if s, ok := p.Producer("a"); !ok || s.EffectiveWeight() != 1 {
		t.Errorf("a: %v %v", s, ok)
	}
	if s, ok := p.Producer("b"); !ok || s.EffectiveWeight() != 2.5 {
		t.Errorf("b: %v %v", s, ok)
	}
	if _, ok := p.Producer("c"); ok {
		t.Error("found c")
	}
	// A policy from Policies finds its producers through an index, with
	// the same answers.
	p.Name = "p"
	ps, err := NewPolicies([]Policy{p})
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := ps.ByName("p")
	if cp.index == nil {
		t.Fatal("no index")
	}
	for _, id := range []string{"a", "b", "c"} {
		want, wantOK := p.Producer(id)
		if got, ok := cp.Producer(id); got != want || ok != wantOK {
			t.Errorf("%s: %v %v, want %v %v", id, got, ok, want, wantOK)
		}
	}
}
