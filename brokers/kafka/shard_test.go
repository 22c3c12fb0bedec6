package kafka

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

// mineAndTheirs is a cluster with the topics "mine" and "theirs" of
// partitions partitions, three records in each partition.
func mineAndTheirs(tb testing.TB, partitions int32) (*kfake.Cluster, *kadm.Client) {
	tb.Helper()
	c := newCluster(tb)
	adm := kadm.NewClient(newClient(tb, c))
	cl := newClient(tb, c)
	for _, topic := range []string{"mine", "theirs"} {
		createTopic(tb, adm, topic, partitions, nil)
		for p := range partitions {
			produceN(tb, cl, topic, p, 3, 0)
		}
	}
	return c, adm
}

// TestSetOwns: an observer narrowed to some topics reports every group of
// those topics and no other topic, a group committing on topics of both
// sides included; nil restores every topic; the change takes effect at the
// next cycle.
func TestSetOwns(t *testing.T) {
	c, adm := mineAndTheirs(t, 2)
	commit(t, adm, "both", "mine", map[int32]int64{0: 1, 1: 1})
	commit(t, adm, "both", "theirs", map[int32]int64{0: 1, 1: 1})
	commit(t, adm, "only-theirs", "theirs", map[int32]int64{0: 2, 1: 2})
	commit(t, adm, "only-mine", "mine", map[int32]int64{0: 3, 1: 3})
	o := newObserver(t, c, nil)

	pairs := func() []string {
		var out []string
		for _, s := range observe(t, o) {
			out = append(out, s.Target.Group+"/"+s.Target.Topic)
		}
		return out
	}
	steps := []struct {
		name string
		owns func(string) bool
		want []string
	}{
		{"every topic", nil, []string{"both/mine", "both/theirs", "only-mine/mine", "only-theirs/theirs"}},
		{"mine only", func(topic string) bool { return topic == "mine" }, []string{"both/mine", "only-mine/mine"}},
		{"theirs only", func(topic string) bool { return topic == "theirs" }, []string{"both/theirs", "only-theirs/theirs"}},
		{"none", func(string) bool { return false }, nil},
		{"every topic again", nil, []string{"both/mine", "both/theirs", "only-mine/mine", "only-theirs/theirs"}},
	}
	for _, st := range steps {
		o.SetOwns(st.owns)
		if got := pairs(); !slices.Equal(got, st.want) {
			t.Errorf("%s: observed %v, want %v", st.name, got, st.want)
		}
	}
}

// TestSetOwnsRecheck: under a filter, a group whose topics are all
// elsewhere is left out of the cycles (its describe and offsets are not
// read) until the next full one, every shardRecheck cycles: a group that
// starts committing on a watched topic is observed within that many
// cycles, and at once when the watched topics change.
func TestSetOwnsRecheck(t *testing.T) {
	c, adm := mineAndTheirs(t, 1)
	commit(t, adm, "moving", "theirs", map[int32]int64{0: 1})
	o := newObserver(t, c, nil)
	o.SetOwns(func(topic string) bool { return topic == "mine" })
	has := func() bool {
		for _, s := range observe(t, o) {
			if s.Target.Group == "moving" {
				return true
			}
		}
		return false
	}
	if has() {
		t.Fatal("a group on another shard's topic observed")
	}
	commit(t, adm, "moving", "mine", map[int32]int64{0: 2})
	cycles := 1
	for ; !has(); cycles++ {
		if cycles > shardRecheck {
			t.Fatalf("the group's commit on a watched topic not observed within %d cycles", shardRecheck)
		}
	}
	if cycles < 2 {
		t.Errorf("the group was read again at once (cycle %d): it is not left out between full cycles", cycles)
	}
	t.Logf("observed after %d cycles (full cycles every %d)", cycles, shardRecheck)

	// A change of the watched topics reads every group at once.
	commit(t, adm, "other", "theirs", map[int32]int64{0: 1})
	observe(t, o) // "other" is new: read, and marked elsewhere
	commit(t, adm, "other", "mine", map[int32]int64{0: 1})
	o.SetOwns(func(topic string) bool { return true })
	found := false
	for _, s := range observe(t, o) {
		found = found || s.Target.Group == "other" && s.Target.Topic == "mine"
	}
	if !found {
		t.Error("a change of the watched topics did not read every group")
	}
}
