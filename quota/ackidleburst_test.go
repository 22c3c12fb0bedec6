package quota

import (
	"testing"
	"time"
)

// TestSimAckingIdleBurst: a NATS consumer acking each message (or each
// batch of 100), capacity 2,500 msg/s, offered 2,000 msg/s for 10 s
// (estimated at 2,000), then 1,000 msg/s, then 3,000 records within
// 0.1 s ending 0.2 s before the reading at 15 s, then 2,000 msg/s. At
// lag 0 at 14 s and acking as it goes, it read 1,450 msg/s consumed
// with the burst queued: taken as its capacity (the estimate cut from
// 2,000), the producers were limited to 438 msg/s, 1,562 records
// refused against 875 with the estimate kept, for the same head age.
func TestSimAckingIdleBurst(t *testing.T) {
	for _, batch := range []float64{0, 100} {
		offer := func(tt float64) float64 {
			switch {
			case tt < 10:
				return 2000
			case tt < 14.7:
				return 1000
			case tt < 14.8:
				return 31000
			}
			return 2000
		}
		r := runSim(t, simConfig{
			duration:  30 * time.Second,
			capacity:  constant(2500),
			policy:    drainPolicy(),
			natsAcks:  true,
			ackBatch:  batch,
			producers: []*simProducer{{id: "p", offer: offer}},
		})
		for _, s := range r.between(14.5, 15.5) {
			if s.dec.Rule == RuleSaturated && s.dec.Rate < 1000 {
				t.Errorf("batch %v: the burst's reading: %s at %.0f/s (%s), want the estimate kept", batch, s.dec.Rule, s.dec.Rate, s.dec.Reason)
			}
		}
	}
}

// TestSimAckingDrop: the same consumers offered 2,000 msg/s at their
// 2,000 msg/s, the capacity falling to 400 msg/s 50 ms after a reading
// at lag 0: the first reading after it drains (idleBefore read it as
// "saturated" at the old capacity, 1,740 msg/s admitted: 2,844 records
// dead against 1,104).
func TestSimAckingDrop(t *testing.T) {
	for _, batch := range []float64{0, 100} {
		r := runSim(t, simConfig{
			duration:  30 * time.Second,
			capacity:  step(12.05, 2000, 400),
			policy:    drainPolicy(),
			natsAcks:  true,
			ackBatch:  batch,
			producers: producersOffering(1, 2000),
		})
		for _, s := range r.between(12.05, 13.05) {
			if s.dec.Rule != RuleDrain {
				t.Errorf("batch %v: the first reading after the drop: %s at %.0f/s (%s), want drain", batch, s.dec.Rule, s.dec.Rate, s.dec.Reason)
			}
		}
	}
}
