package bench

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// ConsumerKind is how a row's consumer consumes and commits (Kafka) or
// acks (NATS). The naive side of a row runs the same consumer, except
// that what lagbridge adds to a consumer (the ttl guard, the consumer
// hook) is left out there.
type ConsumerKind string

// The consumers of the matrix.
const (
	// AutoCommit5s is a plain franz-go poll loop with the library's
	// default autocommit: every 5 s, the offsets of what the previous
	// poll returned (Java's default interval is 5 s too).
	AutoCommit5s ConsumerKind = "autocommit-5s"
	// JavaAutoCommit5s is the poll loop of Java's KafkaConsumer with its
	// defaults (enable.auto.commit, auto.commit.interval.ms 5000,
	// max.poll.records 500): the commit is made inside poll(), at the
	// first poll after the interval elapsed, of everything earlier polls
	// returned; a poll handled record by record delays it. In the full
	// matrix at 1 s.
	JavaAutoCommit5s ConsumerKind = "autocommit-5s-java"
	// AutoCommit1s is the same loop with kgo.AutoCommitInterval(1s).
	AutoCommit1s ConsumerKind = "autocommit-1s"
	// CommitPerPoll disables autocommit and commits synchronously after
	// processing each poll.
	CommitPerPoll ConsumerKind = "commit-per-poll"
	// Guard is the commit-per-poll loop behind the ttl guard
	// (ttl/kafkaguard's documented loop: expired records are committed
	// past unprocessed). The naive side runs CommitPerPoll.
	Guard ConsumerKind = "guard"
	// Hook is the AutoCommit5s loop with the consumer hook, which reports
	// the consumer's position to the daemon. The naive side runs
	// AutoCommit5s.
	Hook ConsumerKind = "hook"
	// Workers is a poll loop that hands each partition's records to that
	// partition's worker goroutine and polls on (franz-go's
	// goroutine-per-partition example), with franz-go's default
	// autocommit and the consumer hook in its KeepUntilFinished mode: a
	// record stays in hand until its worker calls Done. The naive side
	// runs the same consumer without the hook. Only by name (WorkerRows).
	Workers ConsumerKind = "workers"
	// workersPlain is the Workers consumer without the hook: the naive
	// side of the Workers rows, never a row of its own.
	workersPlain ConsumerKind = "workers-plain"
	// Marks20ms is the tuned consumer earlier versions of this benchmark
	// used for every run: it works through fetched records oldest first
	// across partitions and commits marked offsets every 20 ms. No real
	// consumer commits that often; the row shows what such a cadence buys.
	Marks20ms ConsumerKind = "marks-20ms"
	// AckEach is a NATS JetStream pull consumer that acks each message
	// when it is processed.
	AckEach ConsumerKind = "ack-each"
	// AckBatch is a NATS pull consumer (AckAll policy) that acks the last
	// message of each fetched batch of up to 100 once the batch is
	// processed.
	AckBatch ConsumerKind = "ack-batch"
)

// kafkaKind reports whether k is a Kafka consumer.
func (k ConsumerKind) kafkaKind() bool { return k != AckEach && k != AckBatch }

// naive is the consumer the naive side of a row runs.
func (k ConsumerKind) naive() ConsumerKind {
	switch k {
	case Guard:
		return CommitPerPoll
	case Hook:
		return AutoCommit5s
	case Workers:
		return workersPlain
	}
	return k
}

// reports reports whether k reports its position with the consumer hook.
func (k ConsumerKind) reports() bool { return k == Hook || k == Workers }

// CommitInterval is how long the broker's committed position can trail
// the consumer's real one, from commits alone: the autocommit interval,
// the ack batch (100 messages at the reduced 400 msg/s), or zero for
// consumers that commit what they processed after every poll (their
// cadence is the poll's processing time, not a setting). For Hook and
// Workers it is the commit interval of the consumer the hook rides on;
// the reports it sends do not depend on it.
func (k ConsumerKind) CommitInterval() time.Duration {
	switch k {
	case AutoCommit5s, JavaAutoCommit5s, Hook, Workers, workersPlain:
		return 5 * time.Second
	case AutoCommit1s:
		return time.Second
	case Marks20ms:
		return 20 * time.Millisecond
	case AckBatch:
		return 250 * time.Millisecond
	}
	return 0
}

// recordsCommits reports whether the bench sees k's commits (or acks) as
// they are made (Series.Commits): every consumer that commits or acks in
// its own loop. The ones that commit on franz-go's autocommit timer (the
// 5 s and 1 s autocommits, the hook, the workers) are not seen; their
// commit interval is their setting.
func (k ConsumerKind) recordsCommits() bool {
	switch k {
	case CommitPerPoll, Guard, JavaAutoCommit5s, Marks20ms, AckEach, AckBatch:
		return true
	}
	return false
}

// ProducerKind is how a row's producers call the client.
type ProducerKind string

// The producers of the matrix.
const (
	// Sync: each request is handled by one of syncHandlers request
	// handlers per producer, which sends one message and waits for the
	// outcome (SDK Produce or NATS Publish; naive: kgo's ProduceSync or
	// JetStream Publish).
	Sync ProducerKind = "sync"
	// Async: each message is handed to the client without waiting
	// (SDK ProduceAsync / PublishAsync; naive: kgo Produce /
	// PublishMsgAsync).
	Async ProducerKind = "async"
	// Batch: what arrives in batchEvery is sent in one call that waits
	// for every outcome (SDK ProduceBatch; naive: kgo ProduceSync with
	// the batch; on NATS async publishes awaited together).
	Batch ProducerKind = "batch"
)

// Extra is a situation added to a row.
type Extra string

// The extras of the matrix.
const (
	// NoExtra is the plain scenario.
	NoExtra Extra = ""
	// Abandoned adds a second consumer on the same topic that never
	// consumes: on Kafka a group with committed offsets (at the start of
	// every partition) and no member, on NATS a durable that never
	// fetches. By design it must not throttle anyone. The daemon runs
	// with its default grace period (rules.abandonAfter); a consumer never
	// seen live is abandoned from its first reading, and the run starts
	// once the daemon reports it so.
	Abandoned Extra = "abandoned"
	// NoCommitYet drops the capacity 1 s into the run, before the
	// consumer's first commit: the group has live members and no
	// committed offset when the drop comes.
	NoCommitYet Extra = "no-commit-yet"
	// Members3 runs the Kafka consumer as a group of three members, each
	// with its own client (and hook) at a third of the capacity, so that
	// the group consumes what one consumer does; members report their
	// own partitions at their own poll times.
	Members3 Extra = "members3"
)

// members is how many members the row's Kafka consumer group runs.
func (e Extra) members() int {
	if e == Members3 {
		return 3
	}
	return 1
}

// Row is one line of the matrix: a consumer, a producer, the daemon's
// observation interval and an optional extra, on one broker. Each row runs
// at every load of the run, naive and lagbridge side by side.
type Row struct {
	Broker   string // BrokerKafka or BrokerNATS
	Consumer ConsumerKind
	Producer ProducerKind
	// Interval is the daemon's observation interval.
	Interval time.Duration
	Extra    Extra
	// Star marks the rows the issue asks for on real Kafka and NATS too.
	Star bool
}

// Name is the row's stable name, BROKER/CONSUMER/PRODUCER/INTERVAL[+EXTRA],
// e.g. "kafka/autocommit-5s/sync/1s" or "nats/ack-each/sync/250ms+abandoned":
// what --rows matches.
func (r Row) Name() string {
	n := fmt.Sprintf("%s/%s/%s/%s", r.Broker, r.Consumer, r.Producer, shortDur(r.Interval))
	if r.Extra != NoExtra {
		n += "+" + string(r.Extra)
	}
	return n
}

// scenario is scn adapted to the row (NoCommitYet drops the capacity at 1 s).
func (r Row) scenario(scn Scenario) Scenario {
	if r.Extra == NoCommitYet && scn.NormalFor > time.Second {
		scn.NormalFor = time.Second
	}
	return scn
}

// naiveKey identifies the naive run of a row at a load: the naive side
// does not depend on the observation interval (the daemon watches and
// nobody listens) nor on what lagbridge adds to the consumer, so rows
// that differ only there share one naive run.
func (r Row) naiveKey() string {
	return fmt.Sprintf("%s/%s/%s+%s", r.Broker, r.Consumer.naive(), r.Producer, r.Extra)
}

// validate reports the problems of one row.
func (r Row) validate() []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: row %s: "+format, append([]any{ErrInvalidOptions, r.Name()}, args...)...))
	}
	switch r.Broker {
	case BrokerKafka:
		if !r.Consumer.kafkaKind() {
			add("%s is a NATS consumer", r.Consumer)
		}
	case BrokerNATS:
		if r.Consumer != AckEach && r.Consumer != AckBatch {
			add("%s is a Kafka consumer", r.Consumer)
		}
	default:
		add("broker %q is not %q or %q", r.Broker, BrokerKafka, BrokerNATS)
	}
	switch r.Consumer {
	case AutoCommit5s, JavaAutoCommit5s, AutoCommit1s, CommitPerPoll, Guard, Hook, Workers, Marks20ms, AckEach, AckBatch:
	default:
		add("unknown consumer %q", r.Consumer)
	}
	switch r.Producer {
	case Sync, Async, Batch:
	case Legacy:
		if r.Broker != BrokerKafka {
			add("legacy producers are Kafka producers (client quotas)")
		}
	default:
		add("unknown producer %q", r.Producer)
	}
	switch r.Extra {
	case NoExtra, Abandoned, NoCommitYet:
	case Members3:
		if r.Broker != BrokerKafka || r.Consumer == Workers || r.Consumer == Marks20ms {
			add("members3 runs a Kafka poll-loop consumer (not %s/%s) as three members", r.Broker, r.Consumer)
		}
	default:
		add("unknown extra %q", r.Extra)
	}
	if r.Interval < 100*time.Millisecond || r.Interval > time.Minute {
		add("interval must be from 100ms to 1m (the daemon's limits), got %v", r.Interval)
	}
	return errs
}

// FullMatrix is every row of issue 12's matrix:
//   - Kafka, synchronous producers, at 1 s and 250 ms: franz-go's default
//     autocommit (5 s), autocommit 1 s, commit per poll, the ttl guard,
//     the consumer hook, and the 20 ms commits earlier versions used; at
//     1 s, Java's 5 s auto-commit too;
//   - Kafka, the guard, at 1 s: asynchronous and batch producers;
//   - NATS, at 1 s and 250 ms: acking each message and acking in batches;
//   - at 1 s: an abandoned second group (Kafka) and durable (NATS) on the
//     same topic, and a group whose capacity drops before its first commit.
//
// The rows marked Star are the ones issue 12 asks for on real Kafka and on
// NATS as well.
func FullMatrix() []Row {
	var rows []Row
	for _, iv := range []time.Duration{time.Second, 250 * time.Millisecond} {
		for _, c := range []ConsumerKind{AutoCommit5s, AutoCommit1s, CommitPerPoll, Guard, Hook, Marks20ms} {
			star := (c == AutoCommit5s && iv == time.Second) || c == CommitPerPoll || c == Guard || c == Hook
			rows = append(rows, Row{Broker: BrokerKafka, Consumer: c, Producer: Sync, Interval: iv, Star: star})
			if c == AutoCommit5s && iv == time.Second {
				rows = append(rows, Row{Broker: BrokerKafka, Consumer: JavaAutoCommit5s, Producer: Sync, Interval: iv})
			}
		}
	}
	for _, p := range []ProducerKind{Async, Batch} {
		rows = append(rows, Row{Broker: BrokerKafka, Consumer: Guard, Producer: p, Interval: time.Second})
	}
	for _, iv := range []time.Duration{time.Second, 250 * time.Millisecond} {
		for _, c := range []ConsumerKind{AckEach, AckBatch} {
			rows = append(rows, Row{Broker: BrokerNATS, Consumer: c, Producer: Sync, Interval: iv, Star: true})
		}
	}
	rows = append(rows,
		Row{Broker: BrokerKafka, Consumer: AutoCommit5s, Producer: Sync, Interval: time.Second, Extra: Abandoned, Star: true},
		Row{Broker: BrokerNATS, Consumer: AckEach, Producer: Sync, Interval: time.Second, Extra: Abandoned, Star: true},
		Row{Broker: BrokerKafka, Consumer: AutoCommit5s, Producer: Sync, Interval: time.Second, Extra: NoCommitYet, Star: true},
	)
	return rows
}

// ShortMatrix is the --short selection: one row per question, small enough
// to finish in a few minutes at --short's loads and scale.
func ShortMatrix() []Row {
	return []Row{
		{Broker: BrokerKafka, Consumer: AutoCommit5s, Producer: Sync, Interval: time.Second, Star: true},
		{Broker: BrokerKafka, Consumer: CommitPerPoll, Producer: Sync, Interval: 250 * time.Millisecond, Star: true},
		{Broker: BrokerKafka, Consumer: Guard, Producer: Async, Interval: time.Second},
		{Broker: BrokerKafka, Consumer: Hook, Producer: Sync, Interval: time.Second, Star: true},
		{Broker: BrokerNATS, Consumer: AckBatch, Producer: Sync, Interval: time.Second, Star: true},
		{Broker: BrokerKafka, Consumer: AutoCommit5s, Producer: Sync, Interval: time.Second, Extra: Abandoned, Star: true},
	}
}

// SelectRows returns the rows of m whose name matches one of the patterns,
// keeping m's order: a path.Match glob matches the whole Row.Name or any
// run of its slash-separated parts ("kafka/guard/*" every guard row,
// "*/250ms" every row at 250 ms, since "*" stops at a slash); a pattern
// without a glob character also matches as a substring. With no patterns
// it returns m. A pattern that is not a valid glob is an error wrapping
// ErrInvalidOptions.
func SelectRows(m []Row, patterns []string) ([]Row, error) {
	if len(patterns) == 0 {
		return m, nil
	}
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("%w: --rows %q: %v", ErrInvalidOptions, p, err)
		}
	}
	var out []Row
	for _, r := range m {
		name := r.Name()
		for _, p := range patterns {
			if globParts(p, name) || (!strings.ContainsAny(p, "*?[") && strings.Contains(name, p)) {
				out = append(out, r)
				break
			}
		}
	}
	return out, nil
}

// globParts reports whether the glob p (valid, see SelectRows) matches
// name or a run of its whole slash-separated parts.
func globParts(p, name string) bool {
	parts := strings.Split(name, "/")
	n := strings.Count(p, "/") + 1
	for i := 0; i+n <= len(parts); i++ {
		if ok, _ := path.Match(p, strings.Join(parts[i:i+n], "/")); ok {
			return true
		}
	}
	return false
}

// ParseRow reads a row name as Row.Name writes it, for rows outside the
// built-in matrices (e.g. "kafka/autocommit-1s/batch/250ms+abandoned").
func ParseRow(name string) (Row, error) {
	base, extra, _ := strings.Cut(name, "+")
	parts := strings.Split(base, "/")
	if len(parts) != 4 {
		return Row{}, fmt.Errorf("%w: row %q is not BROKER/CONSUMER/PRODUCER/INTERVAL[+EXTRA]", ErrInvalidOptions, name)
	}
	iv, err := time.ParseDuration(parts[3])
	if err != nil {
		return Row{}, fmt.Errorf("%w: row %q: interval: %v", ErrInvalidOptions, name, err)
	}
	r := Row{Broker: parts[0], Consumer: ConsumerKind(parts[1]), Producer: ProducerKind(parts[2]), Interval: iv, Extra: Extra(extra)}
	if errs := r.validate(); len(errs) > 0 {
		return Row{}, errs[0]
	}
	return r, nil
}

// shortDur writes 1s, 250ms, 1m30s without trailing zero units.
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// phaseNote names the rows among rows whose phases differ from scn's
// (+no-commit-yet drops the capacity at 1 s), with theirs, for the lines
// that print scn's phases as the run's: "" when every row runs scn's. A
// header that printed only scn's told a +no-commit-yet run's reader the
// capacity fell at 10 s of 45 s when it fell at 1 s of 36 s.
func phaseNote(scn Scenario, rows []Row) string {
	var notes []string
	seen := map[Extra]bool{}
	for _, r := range rows {
		s := r.scenario(scn)
		if seen[r.Extra] || (s.DropAt() == scn.DropAt() && s.RecoverAt() == scn.RecoverAt() && s.Duration() == scn.Duration()) {
			continue
		}
		seen[r.Extra] = true
		notes = append(notes, fmt.Sprintf("+%s rows: %s msg/s from %s to %s, runs of %s",
			r.Extra, num(s.Slow), dur(s.DropAt()), dur(s.RecoverAt()), dur(s.Duration())))
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}
