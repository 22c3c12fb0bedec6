package producerclient

// reason is why the SDK rejected a message: the label values of
// lagbridge_client_rejected_total (reasonNames).
//
// The count is kept apart from the error: the checks (admitChecks, admitN,
// takeToken, ...) return a rejection together with its reason, uncounted,
// and whoever hands the rejection to the caller counts it exactly once per
// message it is handed to (rejectCount for one message, countRejects for a
// run of records).
type reason uint8

// The reasons.
const (
	reasonRate reason = iota
	reasonInFlight
	reasonThrottled
	reasonStop
	reasonQuotaUnavailable
	reasonClosed
	reasonExpired
	reasonBroker
	reasonRetryBudget
	reasonCanceled
	reasonPartition
	numReasons
)

var reasonNames = [numReasons]string{
	reasonRate:             "rate",
	reasonInFlight:         "in_flight",
	reasonThrottled:        "throttled",
	reasonStop:             "stop",
	reasonQuotaUnavailable: "quota_unavailable",
	reasonClosed:           "closed",
	reasonExpired:          "expired",
	reasonBroker:           "broker",
	reasonRetryBudget:      "retry_budget",
	reasonCanceled:         "canceled",
	reasonPartition:        "partition",
}

// rejectCount counts r, the rejection of one message of t, under why and
// returns it.
func (c *core) rejectCount(t *topic, why reason, r *RejectError) *RejectError {
	t.rejected[why].Add(1)
	return r
}

// countRejects counts the rejection of n messages of t under why.
func (c *core) countRejects(t *topic, why reason, n int) {
	if n > 0 {
		t.rejected[why].Add(uint64(n))
	}
}
