package quotaproto

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultKVBucket is the NATS KV bucket the daemon publishes leases to.
const DefaultKVBucket = "lagbridge-quotas"

// KVKey is the key of a producer's lease on a topic in the NATS KV bucket:
// the two names escaped and joined by a dot. The value is a JSON Lease.
//
// NATS KV keys allow only [-/_=.A-Za-z0-9], and producer ids and topic names
// may contain dots, so each name is escaped: every byte outside
// [-_A-Za-z0-9] becomes =XX (upper-case hex). The escape is reversible and
// never produces a dot, so the single dot separates the two names.
// A watcher of one producer's leases watches "<escaped producer>.>".
func KVKey(producer, topic string) string {
	return kvEscape(producer) + "." + kvEscape(topic)
}

// ParseKVKey reverses KVKey.
func ParseKVKey(key string) (producer, topic string, err error) {
	p, t, ok := strings.Cut(key, ".")
	if !ok || strings.Contains(t, ".") {
		return "", "", fmt.Errorf("%w: KV key %q is not <producer>.<topic>", ErrInvalid, key)
	}
	if producer, err = kvUnescape(p); err != nil {
		return "", "", err
	}
	if topic, err = kvUnescape(t); err != nil {
		return "", "", err
	}
	return producer, topic, nil
}

// KVProducerPrefix is the key prefix of all of a producer's leases.
func KVProducerPrefix(producer string) string { return kvEscape(producer) + "." }

func kvSafe(c byte) bool {
	return c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func kvEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; kvSafe(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

func kvUnescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '=' {
			b.WriteByte(c)
			continue
		}
		if i+3 > len(s) {
			return "", fmt.Errorf("%w: truncated escape in KV key part %q", ErrInvalid, s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("%w: bad escape %q in KV key part %q", ErrInvalid, s[i:i+3], s)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}
