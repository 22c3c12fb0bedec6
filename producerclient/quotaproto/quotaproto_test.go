package quotaproto

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var kvKeyChars = regexp.MustCompile(`^[-/_=.A-Za-z0-9]+$`)

func TestKVKeyRoundTrip(t *testing.T) {
	cases := []struct{ producer, topic string }{
		{"svc-a", "orders"},
		// Dots in either name must not be taken for the separator.
		{"svc.a", "orders.v1"},
		{"ns:svc_a", "EVENTS"},
		{"a=b", "t/x y"},
	}
	for _, c := range cases {
		k := KVKey(c.producer, c.topic)
		if !kvKeyChars.MatchString(k) || strings.Count(k, ".") != 1 {
			t.Errorf("%q: key %q is not a valid single-dot KV key", c, k)
		}
		p, tp, err := ParseKVKey(k)
		if err != nil || p != c.producer || tp != c.topic {
			t.Errorf("%q: round trip gave %q %q %v", c, p, tp, err)
		}
		if !strings.HasPrefix(k, KVProducerPrefix(c.producer)) {
			t.Errorf("%q: prefix", c)
		}
	}
	for _, bad := range []string{"noseparator", "a.b.c", "a=4.b", "a=ZZ.b"} {
		if _, _, err := ParseKVKey(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseKVKey(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestReportValidateAll(t *testing.T) {
	r := Report{Producer: "", Topics: []TopicDemand{{Topic: ""}, {Topic: "a", Criticality: "x", Demand: -1}}}
	err := r.Validate()
	for _, want := range []string{"producer", "topics[0].topic", "topics[1].criticality", "topics[1].demand"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %s in %v", want, err)
		}
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("not ErrInvalid")
	}
}

// TestRefusesMeasured: both refusals an older daemon gives the 1.7 field
// (review-idlezero: the lenient decoder's text was not recognised, so every
// report with an idle topic got a 400 and the leases expired), and none of
// another 400's.
func TestRefusesMeasured(t *testing.T) {
	for text, want := range map[string]bool{
		"malformed body: topics[].measured: unknown field": true,
		`malformed report: json: unknown field "measured"`: true,
		`malformed report: json: unknown field "demands"`:  false,
		"malformed body: topics[].demand: must be >= 0":    false,
	} {
		if got := RefusesMeasured(text); got != want {
			t.Errorf("RefusesMeasured(%q) = %v, want %v", text, got, want)
		}
	}
}
