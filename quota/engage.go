package quota

import "time"

// EngageWait is the wait past which the controller takes a target of policy
// p, observed every interval, to be saturated (the engage threshold of
// docs/quota-control.md): Engage/Setpoint of the setpoint wait
// min(Setpoint x budget, interval). With the defaults and a 2 s budget it
// is 0.4 s at a 1 s interval and 0.2 s at 250 ms. A consumer whose own
// report shows the message in hand older than this is late enough for an
// early decision (internal/daemon's Loop.Urgent). Zero for a policy
// without a budget. Safe for concurrent use: it reads only the
// controller's configuration.
func (c *Controller) EngageWait(p *Policy, interval time.Duration) time.Duration {
	budget := p.Budget()
	if budget <= 0 || interval <= 0 {
		return 0
	}
	_, engage := c.cfg.waits(budget.Seconds(), interval.Seconds())
	return time.Duration(engage * float64(time.Second))
}

// waits returns the standing wait the controller steers to under overload
// and its engage threshold, in seconds, for a budget of budget seconds
// observed every interval seconds: Setpoint of the budget but no more than
// one interval, and Engage/Setpoint of that.
func (cfg *ControllerConfig) waits(budget, interval float64) (set, engage float64) {
	set = min(cfg.Setpoint*budget, interval)
	return set, set * cfg.Engage / cfg.Setpoint
}
