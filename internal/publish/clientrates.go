package publish

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
)

// TopicRate is one topic a client-id writes, as its client quota counts
// it. Rates are bytes per second as the broker charges them.
type TopicRate struct {
	// Topic is the topic's name.
	Topic string
	// Allowed is the byte rate the client-id is granted on the topic;
	// +Inf when its grant there is unlimited.
	Allowed float64
	// Sent is an estimate of the byte rate the client-id sends to the
	// topic (the broker does not say what each client-id sends: the
	// caller decides how a topic's rate is shared out).
	Sent float64
	// Whole is the byte rate all producers together send to the topic:
	// an upper bound of what the client-id sends there, the allowance of
	// an unlimited grant.
	Whole float64
}

// Writer is one client-id writing a topic, as [Share] splits the topic's
// rate.
type Writer struct {
	// Held is true when the client-id's stored quota is below what it was
	// estimated to send ([Steering.Last]): Kafka throttles it.
	Held bool
	// Cap is the most it can be sending to the topic (what its stored
	// quota lets through, [Steering.Room], in the unit of the rate
	// shared); +Inf when it has none.
	Cap float64
}

// Share splits a topic's produce rate among the client-ids writing it,
// since the broker does not say what each one sends: first in equal
// parts among the client-ids the broker is not holding, none more than
// its Cap, then what is left among the held ones the same way. A held
// client-id is thus taken to send only what the others cannot account
// for: a request handler's producer that Kafka throttles for about a
// second at each response sends next to nothing, and counting the free
// producers' traffic as its own would keep its quota above what it
// really sends, so that it bursts again as soon as Kafka's window
// forgets its past (what the bench's legacy rows did). A held producer
// that keeps sending at its quota (one that buffers, sending
// asynchronously) is then underestimated, and so is one sending more
// than an equal part: Kafka holds it longer than the steering's hold at
// a response (the bench's legacy rows recorded 10 to 45 s).
//
// With no one held, n writers of a topic receiving R each get R/n (or
// their Cap). Rate left over once every one reached its Cap (an
// unlisted producer's) is attributed to no one.
func Share(rate float64, ws []Writer) []float64 {
	out := make([]float64, len(ws))
	left := max(rate, 0)
	for _, held := range []bool{false, true} {
		var idx []int
		for i, w := range ws {
			if w.Held == held {
				idx = append(idx, i)
			}
		}
		// Equal parts, none above its cap: fill the smallest caps first.
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(ws[a].Cap, ws[b].Cap) })
		for k, i := range idx {
			part := min(left/float64(len(idx)-k), max(ws[i].Cap, 0))
			out[i] = part
			left -= part
		}
	}
	return out
}

// Leaders is, per topic, the share of the topic's partitions each broker
// leads (broker id to a share in (0, 1]; a topic's shares add up to 1).
// A producer that spreads its records over the partitions, as franz-go's
// and Java's default partitioners do for keyless records, sends each
// broker that share of its bytes to the topic.
type Leaders map[string]map[int32]float64

// Ceiling is the quota, in bytes per second, lagbridge keeps on a listed
// client-id whose grants are all unlimited: about 1 TB/s, which throttles
// no one. It is there because a Kafka broker measures client rates only
// while some client quota is set: without it the first cut finds the
// broker's quota window empty, and the producer is held only once the
// window has filled again, up to 11 s later on the default window (the
// bench's legacy rows sent at full rate for 4 to 6 s after every first
// cut). With it the broker knows what the client sent over the whole
// window, and a cut binds at the next produce request.
const Ceiling = 1 << 40

// UnlimitedHeadroom multiplies the whole produce rate of a topic where a
// client-id's grant is unlimited when it counts in that client-id's quota
// (a client-id also granted a finite rate elsewhere): lagbridge never
// throttles unlimited traffic on purpose, and a topic's smoothed rate
// lags a rise in its traffic.
const UnlimitedHeadroom = 2

// PerBroker returns what one client-id's producer_byte_rate must carry
// and an estimate of what the client-id sends, both on the broker that
// receives the most of it. Kafka applies a client-id quota on every
// broker separately, so a client whose traffic spreads over k brokers
// equally gets its grant with a quota of a k-th of it: each topic's
// rates are split over the brokers by leaders (a topic missing from
// leaders counts whole on every broker, which never throttles more than
// asked), and the busiest broker's sums are returned.
//
// A topic with an unlimited grant counts UnlimitedHeadroom times its
// Whole rate in allowed; quoted is false when every grant is unlimited
// (the client-id is then given Ceiling).
//
// Example: grants of 1,000 B/s on topic a (leaders: broker 1 half, broker
// 2 half) and 600 B/s on topic b (broker 1 alone): broker 1 carries 500 +
// 600 = 1,100 B/s, broker 2 500 B/s, so allowed is 1,100 B/s.
func PerBroker(rates []TopicRate, leaders Leaders) (allowed, sent float64, quoted bool) {
	// Every broker any topic names, and -1 standing for any broker when
	// none is named.
	brokers := map[int32]bool{}
	for _, r := range rates {
		for b := range leaders[r.Topic] {
			brokers[b] = true
		}
		quoted = quoted || !math.IsInf(r.Allowed, 1)
	}
	if len(brokers) == 0 {
		brokers[-1] = true
	}
	for b := range brokers {
		var a, s float64
		for _, r := range rates {
			share := 1.0 // a topic whose leaders are not known: whole on every broker
			if ls, ok := leaders[r.Topic]; ok {
				share = ls[b]
			}
			grant := r.Allowed
			if math.IsInf(grant, 1) {
				grant = UnlimitedHeadroom * r.Whole
			}
			a += share * max(grant, 0)
			s += share * max(r.Sent, 0)
		}
		allowed, sent = max(allowed, a), max(sent, s)
	}
	return allowed, sent, quoted
}

// Leaders returns, for each of topics, the share of its partitions each
// broker leads, from one Metadata request. A topic the answer lacks, or
// whose partitions all lack a leader, is left out; a partition without a
// leader is not counted. The error is the request's.
func (c *ClientQuotas) Leaders(ctx context.Context, topics []string) (Leaders, error) {
	out := Leaders{}
	if len(topics) == 0 {
		return out, nil
	}
	md, err := c.adm.Metadata(ctx, topics...)
	if err != nil {
		return out, fmt.Errorf("metadata: %w", err)
	}
	for _, t := range topics {
		td, ok := md.Topics[t]
		if !ok || td.Err != nil {
			continue
		}
		led := map[int32]float64{}
		var n float64
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				continue
			}
			led[p.Leader]++
			n++
		}
		if n == 0 {
			continue
		}
		for b := range led {
			led[b] /= n
		}
		out[t] = led
	}
	return out, nil
}
