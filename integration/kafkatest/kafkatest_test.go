package kafkatest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The testdata files are real stdout of
// `kafka.sh groups --describe ...` against Kafka 4.1.1 (see testdata/README).
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseGroupsDescribeInactive(t *testing.T) {
	rows, err := ParseGroupsDescribe(readTestdata(t, "describe_inactive.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []GroupRow{
		{Group: "g1", Topic: "t1", Partition: 2, CurrentOffset: 0, LogEndOffset: 0, Lag: 0},
		{Group: "g1", Topic: "t1", Partition: 1, CurrentOffset: 0, LogEndOffset: 0, Lag: 0},
		{Group: "g1", Topic: "t1", Partition: 0, CurrentOffset: 12, LogEndOffset: 30, Lag: 18},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got  %+v\nwant %+v", rows, want)
	}
	if got := TotalLag(rows); got != 18 {
		t.Fatalf("TotalLag = %d, want 18", got)
	}
}

func TestParseGroupsDescribeActiveUncommitted(t *testing.T) {
	rows, err := ParseGroupsDescribe(readTestdata(t, "describe_active_uncommitted.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("got %d rows, want 5: %+v", len(rows), rows)
	}
	want0 := GroupRow{
		Group: "lagbridge-test-group-2", Topic: "orders-v2.events", Partition: 0,
		CurrentOffset: -1, LogEndOffset: 0, Lag: -1,
		ConsumerID: "7nTPan3CQieMA42cZbjyaw", Host: "/127.0.0.1", ClientID: "cc-1",
	}
	if rows[0] != want0 {
		t.Fatalf("row 0 = %+v, want %+v", rows[0], want0)
	}
	last := rows[4]
	if last.Topic != "t1" || last.Partition != 0 || last.CurrentOffset != -1 || last.LogEndOffset != 30 || last.Lag != -1 {
		t.Fatalf("row 4 = %+v", last)
	}
	if got := TotalLag(rows); got != 0 {
		t.Fatalf("TotalLag = %d, want 0 (unknown lag counts as 0)", got)
	}
}

func TestParseGroupsDescribeActive(t *testing.T) {
	rows, err := ParseGroupsDescribe(readTestdata(t, "describe_active.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("got %d rows, want 5", len(rows))
	}
	if r := rows[0]; r.CurrentOffset != 7 || r.LogEndOffset != 7 || r.Lag != 0 || r.ClientID != "cc-1" {
		t.Fatalf("row 0 = %+v", r)
	}
}

func TestParseGroupsDescribeAllGroups(t *testing.T) {
	rows, err := ParseGroupsDescribe(readTestdata(t, "describe_all_groups.txt"))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range rows {
		count[r.Group]++
		if r.ConsumerID != "" || r.Host != "" || r.ClientID != "" {
			t.Errorf("inactive group row has member columns: %+v", r)
		}
	}
	if count["g1"] != 3 || count["lagbridge-test-group-2"] != 5 || len(count) != 2 {
		t.Fatalf("rows per group = %v", count)
	}
}

func TestParseGroupsDescribeNoTable(t *testing.T) {
	for _, name := range []string{"describe_missing.stdout.txt"} {
		rows, err := ParseGroupsDescribe(readTestdata(t, name))
		if err != nil || len(rows) != 0 {
			t.Fatalf("%s: rows=%v err=%v", name, rows, err)
		}
	}
	rows, err := ParseGroupsDescribe("\nConsumer group 'x' has no active members.\n")
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows=%v err=%v", rows, err)
	}
}

// Column widths follow the longest group id, so a group id with spaces (legal
// in Kafka) still parses; synthesised in the tool's own format.
func TestParseGroupsDescribeGroupWithSpaces(t *testing.T) {
	g := "my group ü"
	out := "\n" +
		fmt.Sprintf("%-10s %-5s %-10s %-15s %-15s %-15s %-15s %-15s %s\n", "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID") +
		fmt.Sprintf("%-10s %-5s %-10s %-15s %-15s %-15s %-15s %-15s %s\n", g, "a.b", "3", "9223372036854775000", "9223372036854775807", "807", "-", "-", "-")
	rows, err := ParseGroupsDescribe(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []GroupRow{{Group: g, Topic: "a.b", Partition: 3, CurrentOffset: 9223372036854775000, LogEndOffset: 9223372036854775807, Lag: 807}}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got %+v want %+v", rows, want)
	}
}

func TestParseGroupsDescribeMalformed(t *testing.T) {
	hdr := readTestdata(t, "describe_inactive.txt")
	hdr = hdr[:strings.Index(hdr, "CLIENT-ID")+len("CLIENT-ID")+1]
	for _, bad := range []string{
		hdr + "g1              t1              x          0               0               0\n",
		hdr + "g1              t1              0          zz              0               0\n",
		hdr + "g1              t1              0          1\n",
		hdr + "g1\n",
	} {
		if rows, err := ParseGroupsDescribe(bad); err == nil {
			t.Errorf("no error for %q: %+v", bad, rows)
		}
	}
}

func TestDescribeStderrError(t *testing.T) {
	err := describeStderrError("nope", readTestdata(t, "describe_missing.stderr.txt"))
	if !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("err = %v, want ErrGroupNotFound", err)
	}
	if !strings.Contains(err.Error(), "Group nope not found") {
		t.Fatalf("err = %v, want the tool's message", err)
	}
	if err := describeStderrError("g", "\nConsumer group 'g' has no active members.\n"); err != nil {
		t.Fatalf("no-active-members notice is not an error, got %v", err)
	}
	if err := describeStderrError("g", "Error: Executing consumer group command failed due to org.apache.kafka.common.errors.TimeoutException: x\n"); err == nil || errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("err = %v, want a generic error", err)
	}
}

func TestRequired(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		m    map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"CI": "true"}, true},
		{map[string]string{"CI": "false"}, false},
		{map[string]string{EnvRequire: "1"}, true},
		{map[string]string{EnvRequire: "0"}, false},
	} {
		if got := required(env(c.m)); got != c.want {
			t.Errorf("required(%v) = %v, want %v", c.m, got, c.want)
		}
	}
}

func TestCheckBootstrapRejectsNonLoopback(t *testing.T) {
	for _, a := range []string{"10.0.0.1:9092", "example.com:9092", "127.0.0.1:39092,192.168.1.2:9092", "nonsense"} {
		if err := checkBootstrap(a); err == nil {
			t.Errorf("checkBootstrap(%q) accepted a non-loopback or bad address", a)
		}
	}
}

func TestScriptPath(t *testing.T) {
	p, err := scriptPath()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "kafka.sh" {
		t.Fatalf("scriptPath = %q", p)
	}
}

// TestLiveGroupsDescribe checks the whole chain against the real broker:
// kafka.sh topics/produce/consume, then GroupsDescribe. Skipped without a
// broker (fails in CI).
func TestLiveGroupsDescribe(t *testing.T) {
	addr := Bootstrap(t)
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	topic, group := "kafkatest-live-"+suffix, "kafkatest-live-g-"+suffix

	if _, err := GroupsDescribe(t, group); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("describe of a missing group: err = %v, want ErrGroupNotFound", err)
	}
	if _, _, err := RunScript(t, "topics", "--bootstrap-server", addr, "--create", "--topic", topic, "--partitions", "2"); err != nil {
		t.Fatal(err)
	}
	// 10 records; the console producer's sticky partitioner decides where
	// they land, so the assertions below use totals only.
	if _, _, err := RunScriptStdin(t, strings.NewReader(strings.Repeat("x\n", 10)), "produce", "--bootstrap-server", addr, "--topic", topic); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RunScript(t, "consume", "--bootstrap-server", addr, "--topic", topic, "--group", group,
		"--from-beginning", "--max-messages", "4", "--consumer-property", "group.protocol=consumer",
		"--timeout-ms", "30000"); err != nil {
		t.Fatal(err)
	}
	rows, err := GroupsDescribe(t, group)
	if err != nil {
		t.Fatal(err)
	}
	var committed, end int64
	for _, r := range rows {
		if r.Group != group || r.Topic != topic {
			t.Fatalf("unexpected row %+v", r)
		}
		if r.CurrentOffset > 0 {
			committed += r.CurrentOffset
		}
		end += r.LogEndOffset
	}
	if end != 10 || committed != 4 || TotalLag(rows) != 6 {
		t.Fatalf("end=%d committed=%d lag=%d, want 10/4/6; rows %+v", end, committed, TotalLag(rows), rows)
	}
	if _, _, err := RunScript(t, "topics", "--bootstrap-server", addr, "--delete", "--topic", topic); err != nil {
		t.Log(err)
	}
}
