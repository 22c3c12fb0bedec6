package producerclient

// Reasons of rejections, the label values of lagbridge_client_rejected_total.
const (
	reasonRate = iota
	reasonInFlight
	reasonThrottled
	reasonStop
	reasonQuotaUnavailable
	reasonClosed
	reasonExpired
	reasonBroker
	reasonRetryBudget
	reasonCanceled
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
}

func (c *core) rejectCount(t *topic, reason int, r *RejectError) *RejectError {
	if !r.counted {
		t.rejected[reason].Add(1)
		r.counted, r.reason = true, uint8(reason)
	}
	return r
}

// uncounted marks r with its reason without counting it yet (see
// countRejects): a batch counts a rejection once per message it ends up
// handed to.
func uncounted(reason int, r *RejectError) *RejectError {
	r.reason = uint8(reason)
	return r
}

// countRejects counts r for n messages: n, or n-1 more when r was counted
// once already.
func (c *core) countRejects(t *topic, r *RejectError, n int) {
	if r.counted {
		n--
	}
	if n > 0 {
		t.rejected[r.reason].Add(uint64(n))
	}
	r.counted = true
}
