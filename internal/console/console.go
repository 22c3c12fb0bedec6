// Package console is the terminal view of a running daemon, for people on
// a shell: `lagbridge status` (targets, signals and grants, like a compact
// dashboard) and `lagbridge why` (the decision log of one producer, in
// words). Both speak the daemon's HTTP API (/v1/lag, /v1/quotas,
// /v1/events) with the token the daemon asks for.
//
// It starts no goroutine.
package console

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// ErrUnauthorized is returned (wrapped) when the daemon wants a token and
// got none; ErrUnknownToken and ErrForbidden, which refuse a token given,
// match it too.
var ErrUnauthorized = errors.New("the daemon refused the request: give a token with --token or LAGBRIDGE_TOKEN")

// ErrForbidden is returned (wrapped) when the daemon knows the token but
// does not let it read (a producer's token). It matches ErrUnauthorized.
var ErrForbidden error = forbidden{}

type forbidden struct{}

func (forbidden) Error() string {
	return "the daemon refused this token: status and why need a read or admin token (quota.auth.readTokens or adminTokens)"
}

func (forbidden) Is(target error) bool { return target == ErrUnauthorized }

// ErrUnknownToken is returned (wrapped) when the daemon answers 401 to a
// request that carried a token: it does not know that token (a typo, a
// token of another deployment, one rotated away). It matches
// ErrUnauthorized.
var ErrUnknownToken error = unknownToken{}

type unknownToken struct{}

func (unknownToken) Error() string {
	return "the daemon does not know this token: check --token or LAGBRIDGE_TOKEN (status and why need a read or admin token)"
}

func (unknownToken) Is(target error) bool { return target == ErrUnauthorized }

// Client reads a daemon's API. The zero HTTP means a client with a 10 s
// timeout. Safe for concurrent use.
type Client struct {
	// BaseURL is the daemon's address, such as http://127.0.0.1:9464.
	BaseURL string
	// Token, when set, is sent as a bearer token.
	Token string
	HTTP  *http.Client
}

// HTTPStatusError is a non-2xx answer other than 401 and 403.
type HTTPStatusError struct {
	Path    string
	Code    int
	Message string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Path, e.Code, e.Message)
}

// noDaemon reports whether err says that nothing answers at the address
// (a refused or failed connection, a name that does not resolve), where
// pointing at another daemon helps; a timeout of a daemon that hangs, a
// TLS failure or a cancel is not.
func noDaemon(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial" && !op.Timeout()
}

// clientCertRefused reports whether err, on an HTTPS request, is how a
// daemon that asks for client certificates (tls.clientCAFile, clientAuth
// require) refuses a client without one: under TLS 1.3 the server checks
// the client's certificate after the client's handshake is done, so the
// client hears it as the server's alert or, when its request was still
// being written, as a broken pipe or a reset connection.
func clientCertRefused(req *http.Request, err error) bool {
	if req.URL.Scheme != "https" {
		return false
	}
	var alert tls.AlertError
	return errors.As(err, &alert) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// untrusted reports whether err is a server certificate of an unknown CA.
func untrusted(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua)
}

// get decodes the JSON answer of GET path into v.
func (c *Client) get(ctx context.Context, path string, v any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.BaseURL, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if noDaemon(err) {
			return fmt.Errorf("%w (is a lagbridge daemon running there? --url or LAGBRIDGE_URL says where)", err)
		}
		if untrusted(err) {
			return fmt.Errorf("%w (the daemon's certificate is signed by a CA this machine does not trust: give that CA with --cacert, or as SSL_CERT_FILE=ca.crt)", err)
		}
		if clientCertRefused(req, err) {
			return fmt.Errorf("%w (a daemon that asks for client certificates, tls.clientCAFile, refuses a client without one: give it with --cert and --key)", err)
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		if c.Token != "" {
			return fmt.Errorf("%s: HTTP %d: %w", path, resp.StatusCode, ErrUnknownToken)
		}
		return fmt.Errorf("%s: HTTP %d: %w", path, resp.StatusCode, ErrUnauthorized)
	}
	if resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("%s: HTTP %d: %w", path, resp.StatusCode, ErrForbidden)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error any `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != nil {
			msg = fmt.Sprint(e.Error)
		}
		return &HTTPStatusError{Path: path, Code: resp.StatusCode, Message: msg}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: the answer is not what a lagbridge daemon sends: %w", path, err)
	}
	return nil
}

// readiness returns the daemon's /readyz line ("ready: leader of a
// (epoch 3)", "not ready: ..."), "" when it cannot be read. Any status
// goes: a 503 says why the replica is not ready.
func (c *Client) readiness(ctx context.Context) string {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.BaseURL, "/")+"/readyz", nil)
	if err != nil {
		return ""
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable) {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// quotas is the body of /v1/quotas.
type quotas struct {
	Targets   []quota.Decision      `json:"targets"`
	Producers []quotaproto.LeaseSet `json:"producers"`
	Policies  []quota.Policy        `json:"policies"`
}

// clientQuota reports whether the daemon sets a Kafka client quota from
// the rate of policy's decisions on a topic of kind: the policy sets
// kafkaClientQuota, enforces, and lists producer (with producer "", any
// producer). known is false when the policies could not be read (ps nil)
// for a Kafka topic: a NATS topic never gets a client quota.
func clientQuota(ps []quota.Policy, kind lag.Kind, policy, producer string) (quoted, known bool) {
	if kind != lag.KindKafka {
		return false, true
	}
	if ps == nil {
		return false, false
	}
	i := slices.IndexFunc(ps, func(p quota.Policy) bool { return p.Name == policy })
	if i < 0 {
		return false, true
	}
	return ps[i].ClientQuotaFor(producer) && ps[i].Mode != quota.ModeAdvise, true
}

// granted is rate r under signal as the SDK's producers get it, for
// humans. Under stop the SDK admits nothing whatever the rate (ErrStop,
// producerclient): the rate, the policy's minRate, reaches only a Kafka
// client quota (kafkaClientQuota, for producers without the SDK), said
// beside it where one is set (quoted) or, when the policies could not be
// read (!known), where one may be. Before, status showed "20/s" and why
// "-> 20/s, stop" for a minRate: 20 policy whose SDK producers delivered
// nothing (newuser7, session 37).
func granted(r float64, signal string, quoted, known bool) string {
	if signal != quota.SignalStop.String() || r == 0 {
		return rate(r)
	}
	switch {
	case !known:
		return "0/s (client quota, if set: " + rate(r) + ")"
	case quoted:
		return "0/s (client quota " + rate(r) + ")"
	}
	return "0/s"
}

// Status writes a compact view of the daemon: its clusters, every target
// with status, lag, head age, rates, allowed rate and signal, and every
// producer's grants. Without access to /v1/quotas (a read or admin
// token) it says so and shows the rest.
func Status(ctx context.Context, c *Client, w io.Writer) error {
	var lagResp daemon.LagResponse
	if err := c.get(ctx, "/v1/lag?partitions=false", &lagResp); err != nil {
		return err
	}
	var q quotas
	qerr := c.get(ctx, "/v1/quotas", &q)
	var status *HTTPStatusError
	switch {
	case qerr == nil:
	case errors.Is(qerr, ErrUnauthorized):
		qerr = errors.New("quotas: not shown, /v1/quotas needs an admin or read token (--token)")
	case errors.As(qerr, &status) && status.Code == http.StatusNotFound:
		qerr = errors.New("quotas: this daemon has no quota engine")
	}
	decisions := map[string]quota.Decision{}
	for _, d := range q.Targets {
		decisions[d.Target.String()] = d
	}
	topics := topicDecisions(q.Targets)
	fmt.Fprintf(w, "lagbridge at %s, %s\n", c.BaseURL, lagResp.GeneratedAt.Local().Format("15:04:05"))
	if ready := c.readiness(ctx); ready != "" && ready != "ready" {
		fmt.Fprintf(w, "readyz: %s\n", ready) // /readyz's body: a cluster never reached; with ha, the role per cluster
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tKIND\tTARGETS\tLAST DATA\tERROR")
	for _, cl := range lagResp.Clusters {
		last := "never"
		if cl.Observed {
			last = ago(lagResp.GeneratedAt.Sub(cl.LastSuccess))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cl.Name, cl.Kind, cl.Targets, last, orDash(cl.Err))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(lagResp.Shards) > 0 {
		shards(w, lagResp.Shards)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tSTATUS\tLAG\tHEAD AGE\tPRODUCE\tCONSUME\tALLOWED\tSIGNAL\tRULE")
	for _, t := range lagResp.Targets {
		head := "unknown"
		if t.HeadAgeKnown {
			head = secs(t.HeadAgeSeconds)
		}
		produce, consume := "-", "-"
		if t.RatesKnown {
			produce, consume = rate(t.ProduceRate), rate(t.ConsumeRate)
		}
		allowed, signal, rule := "no quota", "-", "-"
		if d, ok := decisions[t.Target.String()]; ok {
			quoted, known := clientQuota(q.Policies, t.Target.Kind, topics[quota.TopicOf(t.Target)].Policy, "")
			allowed, signal, rule = granted(d.Rate, d.Signal.String(), quoted, known), d.Signal.String(), d.Rule.String()
		}
		st := string(t.Status)
		if t.UncommittedPartitions > 0 {
			st += fmt.Sprintf(" (%d without commit)", t.UncommittedPartitions)
		}
		fmt.Fprintf(tw, "%s/%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Cluster, t.Topic, t.Group, st, t.Lag, head,
			produce, consume, allowed, signal, rule)
	}
	if len(lagResp.Targets) == 0 {
		fmt.Fprintln(tw, "(no target observed yet)")
	}
	tw.Flush()
	fmt.Fprintln(w)
	if qerr != nil {
		fmt.Fprintln(w, qerr)
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRODUCER\tTOPIC\tGRANT\tSIGNAL\tRETRY AFTER\tAVOID\tMODE")
	rows := 0
	for _, set := range q.Producers {
		for _, l := range set.Leases {
			r := "unlimited"
			if l.Rate != nil {
				quoted, known := leaseQuoted(q.Policies, topics, set.Producer, l.Topic)
				r = granted(*l.Rate, l.Signal, quoted, known)
			}
			retry, avoid, mode := "-", "-", "enforce"
			if l.RetryAfterMs > 0 {
				retry = secs(float64(l.RetryAfterMs) / 1000)
			}
			if len(l.AvoidPartitions) > 0 {
				avoid = strings.Trim(fmt.Sprint(l.AvoidPartitions), "[]")
			}
			if l.Advisory {
				mode = "advise"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", set.Producer, l.Topic, r, l.Signal, retry, avoid, mode)
			rows++
		}
	}
	if rows == 0 {
		fmt.Fprintln(tw, "(no producer has reported)")
	}
	return tw.Flush()
}

// topicDecisions combines the targets' decisions per topic as the engine
// does (quota.CombineTopics): a topic's client quotas follow the policy
// of its binding decision, not each group's.
func topicDecisions(ds []quota.Decision) map[quota.Topic]quota.TopicDecision {
	out := map[quota.Topic]quota.TopicDecision{}
	for _, td := range quota.CombineTopics(ds) {
		out[td.Topic()] = td
	}
	return out
}

// leaseQuoted reports whether producer's lease on topic (a name: leases
// name no cluster) gets a Kafka client quota: every topic of that name
// (of topics, by cluster) is a Kafka one decided by a policy that sets one
// for producer (quoted), or none is. When they disagree (the same name on
// a NATS and a Kafka cluster, or under two policies), the lease is the
// strictest of the clusters' (publish.Set) and which one it is is not
// known here: known is false.
func leaseQuoted(ps []quota.Policy, topics map[quota.Topic]quota.TopicDecision, producer, topic string) (quoted, known bool) {
	var yes, no int
	for t, d := range topics {
		if t.Name != topic {
			continue
		}
		if c, _ := clientQuota(ps, t.Kind, d.Policy, producer); c {
			yes++
		} else {
			no++
		}
	}
	return yes > 0 && no == 0, yes == 0 || no == 0
}

// shards writes which replica observes which shards of each cluster, one
// line per cluster ("shards of c: r0 (this replica) 0, 2; r1 1, 3 (for
// r2)": r1 stands in for r2, silent, see shard.Exchange.Observers): the
// targets below are this replica's shards' only.
func shards(w io.Writer, views []daemon.ShardView) {
	type owned struct {
		self   bool
		shards []string
	}
	byCluster := map[string]map[string]*owned{}
	var clusters []string
	for _, v := range views {
		if byCluster[v.Cluster] == nil {
			byCluster[v.Cluster] = map[string]*owned{}
			clusters = append(clusters, v.Cluster)
		}
		owner := cmp.Or(v.Owner, "(unassigned)")
		o := byCluster[v.Cluster][owner]
		if o == nil {
			o = &owned{self: v.Self}
			byCluster[v.Cluster][owner] = o
		}
		if v.StandIn {
			o.shards = append(o.shards, fmt.Sprintf("%d (for %s)", v.Shard, cmp.Or(v.Assigned, "(unassigned)")))
		} else {
			o.shards = append(o.shards, fmt.Sprint(v.Shard))
		}
	}
	for _, c := range clusters {
		var parts []string
		for _, owner := range slices.Sorted(maps.Keys(byCluster[c])) {
			o := byCluster[c][owner]
			if o.self {
				owner += " (this replica)"
			}
			parts = append(parts, owner+" "+strings.Join(o.shards, ", "))
		}
		fmt.Fprintf(w, "shards of %s: %s\n", c, strings.Join(parts, "; "))
	}
	fmt.Fprintln(w, "(targets: this replica's shards only; ask the others for theirs)")
	fmt.Fprintln(w)
}

// Why writes the decisions that affected producer in the last since
// (0: everything the daemon holds): every cut and release of its grants
// and every signal change of its topics, each with its time, rule and
// inputs, oldest first. Over the API it is /v1/events?producer=...&since=...
func Why(ctx context.Context, c *Client, w io.Writer, producer string, since time.Duration) error {
	if producer == "" {
		return errors.New("a producer id is required (--producer)")
	}
	v := url.Values{"producer": {producer}}
	if since > 0 {
		v.Set("since", since.String())
	}
	var resp history.EventsResponse
	if err := c.get(ctx, "/v1/events?"+v.Encode(), &resp); err != nil {
		return err
	}
	from := resp.GeneratedAt.Add(-since)
	if since == 0 || from.Before(resp.StartedAt) {
		from = resp.StartedAt
	}
	fmt.Fprintf(w, "decisions for producer %s since %s (%d)\n", producer, from.Local().Format("15:04:05"), len(resp.Events))
	if since > 0 && resp.GeneratedAt.Add(-since).Before(resp.StartedAt) {
		fmt.Fprintf(w, "note: the daemon started at %s; it knows nothing older\n", resp.StartedAt.Local().Format("15:04:05"))
	}
	if resp.Dropped > 0 {
		fmt.Fprintf(w, "note: the log dropped its %d oldest events (history.events)\n", resp.Dropped)
	}
	var q quotas
	if len(resp.Events) > 0 && c.get(ctx, "/v1/quotas", &q) == nil && q.Policies == nil {
		q.Policies = []quota.Policy{} // read: no policy
	}
	for _, e := range resp.Events {
		fmt.Fprintln(w, line(e, q.Policies, producer))
	}
	if len(resp.Events) == 0 {
		fmt.Fprintf(w, "no decision cut, released or signalled %s in that time\n", producer)
		unknownProducer(ctx, c, w, producer)
	}
	return nil
}

// unknownProducer adds to an empty why whether the daemon leases to
// producer at all: a misspelt id reads like a producer nothing happened
// to. It says nothing when /v1/quotas cannot be read (no read or admin
// token, no quota engine).
func unknownProducer(ctx context.Context, c *Client, w io.Writer, producer string) {
	var q quotas
	if c.get(ctx, "/v1/quotas", &q) != nil {
		return
	}
	var known []string
	for _, p := range q.Producers {
		if p.Producer == producer {
			return
		}
		known = append(known, p.Producer)
	}
	slices.Sort(known)
	list := "none"
	if len(known) > 0 {
		const most = 10
		list = strings.Join(known[:min(len(known), most)], ", ")
		if len(known) > most {
			list += fmt.Sprintf(", ... (%d in all)", len(known))
		}
	}
	fmt.Fprintf(w, "note: the daemon leases nothing to %s now (producers it leases to: %s); check the id\n", producer, list)
}

// Line is one event in words:
//
//	04:12:04.120 cut     kafka/demo-kafka/orders  1000/s -> 0/s, slow-down  rule drain: lag 3400, head age 3.40s, capacity 400/s, predicted wait 8.50s, budget 2s
//
// A rate under stop reads as what the SDK admits, none (see granted); the
// policies are not known here, so a Kafka client quota under stop is
// named as one that may be set. Why, which reads the policies, says
// whether it is.
func Line(e history.Event) string { return line(e, nil, "") }

// line is Line with the daemon's policies (nil: not known) and the
// producer why is about ("": any).
func line(e history.Event, ps []quota.Policy, producer string) string {
	quoted, known := clientQuota(ps, e.Topic.Kind, e.Policy, producer)
	var what string
	switch e.Kind {
	case history.KindSignal:
		what = fmt.Sprintf("signal %s -> %s, allowed %s", e.PrevSignal, e.Signal, granted(e.Rate, e.Signal, quoted, known))
	default:
		what = fmt.Sprintf("%s -> %s, %s", granted(e.PrevRate, e.PrevSignal, quoted, known), granted(e.Rate, e.Signal, quoted, known), e.Signal)
	}
	in := e.Inputs
	capacity := rate(in.Capacity)
	if !in.CapacityKnown {
		capacity = "at least " + capacity
	}
	wait := secs(in.WaitSeconds)
	if in.WaitSeconds < 0 {
		wait = "never drains"
	}
	line := fmt.Sprintf("%s %-7s %s  %s  rule %s: lag %d, head age %s, capacity %s, predicted wait %s, budget %s",
		e.At.Local().Format("15:04:05.000"), e.Kind, e.Topic, what, e.Rule, in.Lag, secs(in.HeadAgeSeconds), capacity, wait,
		secs(in.BudgetSeconds))
	if e.Rule == quota.RuleHardAge && e.Reason != "" {
		// The hard age is not among the inputs, and a stop for it with
		// the head well under it (the predicted wait is past it) reads as
		// wrong without the controller's words.
		line += " (" + e.Reason + ")"
	}
	if e.NotServed {
		// A follower's own decision (ha): its producers were served the
		// leader's; ask the leader.
		line += " [not served: this replica followed]"
	}
	return line
}

// rate is msg/s for humans: "unlimited", "1000/s", "12.5/s".
func rate(r float64) string { return history.RateText(r) }

// secs is a duration in seconds for humans: "850ms", "3.40s", "2m05s".
func secs(s float64) string {
	switch {
	case s < 1:
		return strconv.Itoa(int(math.Round(s*1000))) + "ms"
	case s < 60:
		return strconv.FormatFloat(s, 'f', 2, 64) + "s"
	}
	return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
}

func ago(d time.Duration) string { return secs(max(0, d.Seconds())) + " ago" }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
