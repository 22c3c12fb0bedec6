package engine

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/internal/history"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// TestDecisionLog: the engine shows the decision log every cycle's
// decisions and leases; a consumer slowing below the produce rate cuts the
// sheddable producer with a named rule, the topic's signal change is
// logged, and the inputs carry the policy's budget.
func TestDecisionLog(t *testing.T) {
	c := &clock{now: t0}
	log := history.NewLog(history.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	e, _ := newEngine(t, c, quota.Policy{Name: "p", MaxAge: 2 * time.Second, ProcessingTime: 100 * time.Millisecond,
		Producers: []quota.ProducerSpec{{ID: "batch", Criticality: quota.Sheddable}}})
	e.declog = log
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(3)
	if _, err := e.Report(quotaproto.Report{Producer: "batch", Topics: []quotaproto.TopicDemand{{Topic: "orders", Demand: 1000}}}); err != nil {
		t.Fatal(err)
	}
	w.cycles(3)
	if evs, _ := log.Events(history.EventQuery{Kind: history.KindCut}); len(evs) != 0 {
		t.Fatalf("cuts while the consumer keeps up: %+v", evs)
	}
	w.consume = 300
	w.cycles(8)
	evs, _ := log.Events(history.EventQuery{Producer: "batch"})
	var cut, signal *history.Event
	for i := range evs {
		switch e := &evs[i]; {
		case e.Kind == history.KindCut && cut == nil:
			cut = e
		case e.Kind == history.KindSignal && signal == nil:
			signal = e
		}
	}
	if cut == nil || signal == nil {
		t.Fatalf("want a cut and a signal change of batch's topic, got %+v", evs)
	}
	if cut.Rule == quota.RuleNone || cut.Rule == quota.RuleUnlimited || cut.Rate >= 1000 || cut.Inputs.BudgetSeconds != 1.9 ||
		cut.Inputs.Lag <= 0 || cut.Topic != quota.TopicOf(target) || cut.Policy != "p" {
		t.Errorf("cut %+v: want a limiting rule, a rate under 1000/s, budget 1.9s and the backlog", cut)
	}
	if signal.PrevSignal != "ok" || signal.Signal == "ok" {
		t.Errorf("signal event %+v: want ok -> a limiting signal", signal)
	}
}
