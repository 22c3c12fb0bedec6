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
	set := min(time.Duration(c.cfg.Setpoint*float64(budget)), interval)
	return time.Duration(float64(set) * c.cfg.Engage / c.cfg.Setpoint)
}
