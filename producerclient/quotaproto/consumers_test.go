package quotaproto

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func validConsumerReport() ConsumerReport {
	return ConsumerReport{Kind: KindKafka, Cluster: "main", Group: "billing", Member: "billing-1", SentAtMs: 1764560000000,
		Topics: []ConsumerTopic{{Topic: "orders", Partitions: []ConsumerPartition{
			{Partition: 0, Position: 120, HeadTimeMs: 1764559999000},
			{Partition: 1, Position: 7, Idle: true},
		}}}}
}

func TestConsumerReportValidate(t *testing.T) {
	manyParts := make([]ConsumerPartition, MaxReportPartitions+1)
	for i := range manyParts {
		manyParts[i] = ConsumerPartition{Partition: int32(i), Idle: true}
	}
	cases := []struct {
		name   string
		mutate func(r *ConsumerReport)
		want   []string // substrings of the error; none: valid
	}{
		{"valid", func(*ConsumerReport) {}, nil},
		// Cluster and member are optional.
		{"minimal", func(r *ConsumerReport) { r.Cluster, r.Member, r.SentAtMs = "", "", 0 }, nil},
		{"nats stream", func(r *ConsumerReport) {
			r.Kind = KindNATS
			r.Topics[0].Partitions = r.Topics[0].Partitions[:1]
		}, nil},
		// Group names are not limited to producer id characters: Kafka
		// allows spaces and most punctuation.
		{"group with spaces", func(r *ConsumerReport) { r.Group = "team a/billing v2" }, nil},
		{"unknown kind", func(r *ConsumerReport) { r.Kind = "rabbit" }, []string{"kind"}},
		{"no group", func(r *ConsumerReport) { r.Group = "" }, []string{"group"}},
		{"control character in group", func(r *ConsumerReport) { r.Group = "a\nb" }, []string{"group"}},
		{"C1 control in group", func(r *ConsumerReport) { r.Group = "a\u0085b" }, []string{"group"}},
		{"invalid UTF-8 group", func(r *ConsumerReport) { r.Group = "a\xffb" }, []string{"group"}},
		// 255 characters, more bytes: the limit counts characters, as
		// the OpenAPI schema's maxLength does.
		{"long multibyte group", func(r *ConsumerReport) { r.Group = strings.Repeat("é", 255) }, nil},
		{"group too long", func(r *ConsumerReport) { r.Group = strings.Repeat("g", 256) }, []string{"group"}},
		{"bad member", func(r *ConsumerReport) { r.Member = "a b" }, []string{"member"}},
		{"negative sentAt", func(r *ConsumerReport) { r.SentAtMs = -1 }, []string{"sentAtMs"}},
		{"no topics", func(r *ConsumerReport) { r.Topics = nil }, []string{"0 topics"}},
		{"empty partitions", func(r *ConsumerReport) { r.Topics[0].Partitions = nil }, []string{"topics[0].partitions is empty"}},
		{"topic twice", func(r *ConsumerReport) { r.Topics = append(r.Topics, r.Topics[0]) }, []string{"topics[1].topic \"orders\" is listed twice"}},
		{"partition twice", func(r *ConsumerReport) { r.Topics[0].Partitions[1].Partition = 0 }, []string{"partitions[1].partition 0 is listed twice"}},
		{"negative partition and position", func(r *ConsumerReport) {
			r.Topics[0].Partitions[0].Partition, r.Topics[0].Partitions[0].Position = -1, -5
		}, []string{"partitions[0].partition -1", "partitions[0].position -5"}},
		{"nats partition 1", func(r *ConsumerReport) { r.Kind = KindNATS }, []string{"a NATS stream has one partition"}},
		// Exactly one of a head time and idle.
		{"neither head nor idle", func(r *ConsumerReport) { r.Topics[0].Partitions[1].Idle = false }, []string{"partitions[1]: give exactly one"}},
		{"both head and idle", func(r *ConsumerReport) { r.Topics[0].Partitions[0].Idle = true }, []string{"partitions[0]: give exactly one"}},
		{"zero head, not idle", func(r *ConsumerReport) { r.Topics[0].Partitions[0].HeadTimeMs = 0 }, []string{"partitions[0]: give exactly one"}},
		{"head time beyond year 5138", func(r *ConsumerReport) { r.Topics[0].Partitions[0].HeadTimeMs = 1e15 }, []string{"headTimeMs"}},
		// Held and heldMs are optional, only with a message in hand.
		{"held", func(r *ConsumerReport) { r.Topics[0].Partitions[0].Held, r.Topics[0].Partitions[0].HeldMs = 500, 1250 }, nil},
		{"held just taken", func(r *ConsumerReport) { r.Topics[0].Partitions[0].Held = MaxHeld }, nil},
		{"negative held", func(r *ConsumerReport) { r.Topics[0].Partitions[0].Held = -1 }, []string{"partitions[0].held -1 must be from 0"}},
		{"held beyond MaxHeld", func(r *ConsumerReport) { r.Topics[0].Partitions[0].Held = MaxHeld + 1 }, []string{"partitions[0].held"}},
		{"held while idle", func(r *ConsumerReport) { r.Topics[0].Partitions[1].Held = 3 }, []string{"partitions[1].held 3 needs headTimeMs"}},
		{"negative heldMs", func(r *ConsumerReport) {
			r.Topics[0].Partitions[0].Held, r.Topics[0].Partitions[0].HeldMs = 5, -1
		}, []string{"partitions[0].heldMs -1 must be from 0"}},
		{"heldMs over a day", func(r *ConsumerReport) {
			r.Topics[0].Partitions[0].Held, r.Topics[0].Partitions[0].HeldMs = 5, MaxHeldMs+1
		}, []string{"partitions[0].heldMs"}},
		{"heldMs without held", func(r *ConsumerReport) { r.Topics[0].Partitions[0].HeldMs = 100 }, []string{"partitions[0].heldMs 100 needs held"}},
		{"too many partitions", func(r *ConsumerReport) { r.Topics[0].Partitions = manyParts }, []string{"513 partitions, at most 512"}},
		// Every problem at once.
		{"several", func(r *ConsumerReport) { r.Kind, r.Group, r.Topics[0].Topic = "", "", "" }, []string{"kind", "group", "topics[0].topic"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := validConsumerReport()
			r.Topics[0].Partitions = append([]ConsumerPartition(nil), r.Topics[0].Partitions...)
			c.mutate(&r)
			err := r.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("valid report refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestConsumerReportWire pins the JSON names docs/quota-protocol.yaml
// documents.
func TestConsumerReportWire(t *testing.T) {
	rep := validConsumerReport()
	rep.Topics[0].Partitions[0].Held, rep.Topics[0].Partitions[0].HeldMs = 500, 1250
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"kafka","cluster":"main","group":"billing","member":"billing-1","sentAtMs":1764560000000,` +
		`"topics":[{"topic":"orders","partitions":[{"partition":0,"position":120,"headTimeMs":1764559999000,"held":500,"heldMs":1250},` +
		`{"partition":1,"position":7,"idle":true}]}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	// A maximal report fits the body limit.
	r := validConsumerReport()
	r.Group, r.Cluster, r.Member = strings.Repeat("g", 255), strings.Repeat("c", 128), strings.Repeat("m", 128)
	r.Topics[0].Topic = strings.Repeat("t", 249)
	r.Topics[0].Partitions = make([]ConsumerPartition, MaxReportPartitions)
	for i := range r.Topics[0].Partitions {
		r.Topics[0].Partitions[i] = ConsumerPartition{Partition: 1e9 + int32(i), Position: 1e18, HeadTimeMs: 1e14,
			Held: MaxHeld, HeldMs: MaxHeldMs}
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(r); len(b) > MaxBodyBytes {
		t.Errorf("a report of %d partitions is %d bytes, over MaxBodyBytes %d", MaxReportPartitions, len(b), MaxBodyBytes)
	}
	if got := (ConsumerPartition{HeadTimeMs: 1500}).HeadTime(); !got.Equal(time.UnixMilli(1500)) {
		t.Errorf("HeadTime = %v", got)
	}
	if got := (ConsumerPartition{Idle: true}).HeadTime(); !got.IsZero() {
		t.Errorf("idle HeadTime = %v, want zero", got)
	}
}

// TestRefusesHeld: only a refusal of the held counts as unknown fields
// makes a reporter drop them; a bad value of a known field does not.
func TestRefusesHeld(t *testing.T) {
	for text, want := range map[string]bool{
		"malformed body: topics[].partitions[].held: unknown field":                                         true,
		"malformed body: topics[].partitions[].heldMs: unknown field":                                       true,
		"malformed body: topics[].partitions[].extra: unknown field":                                        false,
		"malformed body: topics[].partitions[].heldMs: unknown field (keys are case-sensitive: \"heldMs\")": true,
		"topics[0].partitions[0].held: must be 1 to 1073741824":                                             false,
		"": false,
	} {
		if got := RefusesHeld(text); got != want {
			t.Errorf("RefusesHeld(%q) = %v, want %v", text, got, want)
		}
	}
}
