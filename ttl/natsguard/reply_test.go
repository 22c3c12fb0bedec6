package natsguard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
		want  Origin
		ok    bool
	}{
		// v1: 9 tokens.
		{"v1", "$JS.ACK.ORDERS.worker.1.42.7.1767225600123456789.3", Origin{"ORDERS", 42, time.Unix(0, 1767225600123456789)}, true},
		// v2 with domain, account hash and the trailing random token.
		{"v2", "$JS.ACK._.ACCHASH.ORDERS.worker.1.42.7.1767225600123456789.3.xyz", Origin{"ORDERS", 42, time.Unix(0, 1767225600123456789)}, true},
		// v2 without the trailing token (11 tokens) is still accepted.
		{"v2 short", "$JS.ACK.hub.H.S.c.2.9.9.5.0", Origin{"S", 9, time.Unix(0, 5)}, true},
		// v2 with more trailing tokens than today.
		{"v2 long", "$JS.ACK.hub.H.S.c.2.9.9.5.0.a.b.c", Origin{"S", 9, time.Unix(0, 5)}, true},
		// 10 tokens is neither.
		{"10 tokens", "$JS.ACK.a.S.c.2.9.9.5.0", Origin{}, false},
		// Too few tokens.
		{"short", "$JS.ACK.S.c.1.2", Origin{}, false},
		// Not an ack subject.
		{"inbox", "_INBOX.abc.def", Origin{}, false},
		// Empty.
		{"empty", "", Origin{}, false},
		// Non-digits read as 0, like nats.go.
		{"bad numbers", "$JS.ACK.S.c.x.y.z.w.v", Origin{"S", 0, time.Unix(0, 0)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseReply(tc.reply)
			if ok != tc.ok || got.Stream != tc.want.Stream || got.Sequence != tc.want.Sequence || !got.Timestamp.Equal(tc.want.Timestamp) {
				t.Fatalf("parseReply(%q) = %+v, %v; want %+v, %v", tc.reply, got, ok, tc.want, tc.ok)
			}
			// Differential: the reference (nats.go's algorithm) agrees.
			if ref, rok := referenceReply(tc.reply); rok != ok || ok && (ref.Stream != got.Stream || ref.Sequence != got.Sequence || !ref.Timestamp.Equal(got.Timestamp)) {
				t.Fatalf("reference says %+v, %v", ref, rok)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = parseReply("$JS.ACK._.H.ORDERS.w.1.42.7.1767225600123456789.3.xyz") }); n != 0 {
		t.Errorf("parseReply allocates %v times", n)
	}
}

// referenceReply is nats.go's internal/parser.GetMetadataFields (v1.55.0)
// restated, for differential tests.
func referenceReply(subject string) (Origin, bool) {
	const domain, stream, sseq, tm, pending = 2, 4, 7, 9, 10
	var tokens [pending + 1]string
	n := strings.Count(subject, ".") + 1
	if n < 9 || (n > 9 && n < 11) || !strings.HasPrefix(subject, "$JS.ACK.") {
		return Origin{}, false
	}
	for i := range tokens {
		if n == 9 && (i == domain || i == domain+1) {
			continue
		}
		tokens[i], subject, _ = strings.Cut(subject, ".")
	}
	return Origin{Stream: tokens[stream], Sequence: parseNum(tokens[sseq]), Timestamp: time.Unix(0, int64(parseNum(tokens[tm])))}, true
}

// FuzzParseReply: any subject parses without panicking and exactly as
// nats.go's algorithm does.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"$JS.ACK.S.c.1.2.3.4.5", "$JS.ACK._.H.S.c.1.2.3.4.5.r", "$JS.ACK.", "$JS.ACK........", "$JS.ACK..........", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseReply(s)
		ref, rok := referenceReply(s)
		if ok != rok || got.Stream != ref.Stream || got.Sequence != ref.Sequence || !got.Timestamp.Equal(ref.Timestamp) {
			t.Fatalf("parseReply(%q) = %+v, %v; reference %+v, %v", s, got, ok, ref, rok)
		}
	})
}

// TestReplyMatchesMetadata: on a real message from the embedded server,
// the allocation-free parse agrees with jetstream.Msg.Metadata.
func TestReplyMatchesMetadata(t *testing.T) {
	_, js := startNATS(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "r", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, "R", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		o, ok := parseReply(m.Reply())
		if !ok || o.Stream != meta.Stream || o.Sequence != meta.Sequence.Stream || !o.Timestamp.Equal(meta.Timestamp) {
			t.Fatalf("reply %q: parsed %+v, metadata %+v", m.Reply(), o, meta)
		}
	}
	if n != 3 {
		t.Fatalf("fetched %d", n)
	}
}
