package demo

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestCast: the services' rates scale to the total asked for, each
// keeping its share of the story; no total (0, negative, +Inf) keeps the
// story's rates.
func TestCast(t *testing.T) {
	cases := []struct {
		name  string
		total float64
		want  float64
	}{
		{"half the story", 900, 900},
		{"the story", StoryRate, StoryRate},
		{"ten times", 18000, 18000},
		{"zero: the story", 0, StoryRate},
		{"negative: the story", -1, StoryRate},
		{"+Inf: the story", math.Inf(1), StoryRate},
	}
	for _, c := range cases {
		cast := Cast(c.total)
		var sum float64
		for i, p := range cast {
			sum += p.Rate
			if share, story := p.Rate/c.want, StoryProducers[i].Rate/StoryRate; math.Abs(share-story) > 1e-9 {
				t.Errorf("%s: %s offers %.4f of the total, the story %.4f", c.name, p.ID, share, story)
			}
		}
		if math.Abs(sum-c.want) > 1e-9 {
			t.Errorf("%s: the services offer %v together, want %v", c.name, sum, c.want)
		}
	}
	if StoryProducers[0].Rate != 300 {
		t.Errorf("Cast changed StoryProducers: %v", StoryProducers[0].Rate)
	}
}

// TestOptionsValidate: what the demo refuses before it starts anything.
// A negative --duration ran until interrupted before (as 0 does).
func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string // "": accepted
	}{
		{"the defaults", Options{}, ""},
		{"a duration and a rate", Options{Duration: time.Second, ProduceRate: 900}, ""},
		{"a negative duration", Options{Duration: -time.Second}, "--duration -1s: must not be negative"},
		{"a negative rate", Options{ProduceRate: -5}, "--rate -5"},
		{"an infinite rate", Options{ProduceRate: math.Inf(1)}, "--rate +Inf"},
		{"NaN", Options{ProduceRate: math.NaN()}, "--rate NaN"},
	}
	for _, c := range cases {
		o := c.o
		o.defaults()
		err := o.validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
