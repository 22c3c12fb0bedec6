package nats

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSetOwns: an observer narrowed to some streams reports every consumer
// of those streams and nothing of the others; nil restores every stream;
// the change takes effect at the next cycle.
func TestSetOwns(t *testing.T) {
	s := startServer(t, nil)
	c := newClient(t, s)
	for _, name := range []string{"MINE", "THEIRS"} {
		c.stream(t, newStreamCfg(name))
		for _, cons := range []string{"a", "b"} {
			c.consumer(t, name, jetstream.ConsumerConfig{Durable: cons, AckPolicy: jetstream.AckExplicitPolicy})
		}
	}
	o := newObserver(t, s, nil)
	pairs := func() []string {
		var out []string
		for _, s := range observe(t, o) {
			out = append(out, s.Target.Topic+"/"+s.Target.Group)
		}
		slices.Sort(out)
		return out
	}
	steps := []struct {
		name string
		owns func(string) bool
		want []string
	}{
		{"every stream", nil, []string{"MINE/a", "MINE/b", "THEIRS/a", "THEIRS/b"}},
		{"mine only", func(st string) bool { return st == "MINE" }, []string{"MINE/a", "MINE/b"}},
		{"none", func(string) bool { return false }, nil},
		{"theirs only", func(st string) bool { return st == "THEIRS" }, []string{"THEIRS/a", "THEIRS/b"}},
		{"every stream again", nil, []string{"MINE/a", "MINE/b", "THEIRS/a", "THEIRS/b"}},
	}
	for _, st := range steps {
		o.SetOwns(st.owns)
		if got := pairs(); !slices.Equal(got, st.want) {
			t.Errorf("%s: observed %v, want %v", st.name, got, st.want)
		}
	}
}
