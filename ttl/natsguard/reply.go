package natsguard

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Origin is where and when a JetStream message was stored. The zero value
// means unknown (not a JetStream message).
type Origin struct {
	// Stream is the stream name.
	Stream string
	// Sequence is the stream sequence.
	Sequence uint64
	// Timestamp is when the stream stored the message (nanoseconds).
	Timestamp time.Time
}

// origin reads msg's Origin from its ack reply subject without allocating,
// falling back to msg.Metadata() for messages whose reply subject is not a
// JetStream ack subject (wrappers, test doubles).
func origin(msg jetstream.Msg) Origin {
	if o, ok := parseReply(msg.Reply()); ok {
		return o
	}
	meta, err := msg.Metadata()
	if err != nil || meta == nil {
		return Origin{}
	}
	return Origin{Stream: meta.Stream, Sequence: meta.Sequence.Stream, Timestamp: meta.Timestamp}
}

// parseReply parses a JetStream ack reply subject, as nats.go's
// jetstream.Msg.Metadata does, but only the three fields the guard needs
// and without allocating:
//
//	v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	v2: $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// v1 has exactly 9 tokens; v2 at least 11 (nats.go accepts 11 too). A
// number that is not all digits reads as 0, as in nats.go. It never panics.
func parseReply(reply string) (Origin, bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return Origin{}, false
	}
	rest := reply[len(prefix):]
	n := strings.Count(rest, ".") + 1 // tokens after the prefix
	var skip int
	switch {
	case n == 7:
		skip = 0
	case n >= 9:
		skip = 2
	default:
		return Origin{}, false
	}
	// tokens we want, relative to the stream token: stream 0, sseq 3, tm 5.
	var tok [6]string
	for i := 0; i < skip+len(tok); i++ {
		var t string
		t, rest, _ = strings.Cut(rest, ".")
		if i >= skip {
			tok[i-skip] = t
		}
	}
	return Origin{Stream: tok[0], Sequence: parseNum(tok[3]), Timestamp: time.Unix(0, int64(parseNum(tok[5])))}, true
}

// parseNum is nats.go's ParseNum: decimal digits only, else 0; it does not
// detect overflow (neither does nats.go).
func parseNum(s string) uint64 {
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
