package publish

import (
	"testing"
	"time"
)

// readEnds reads topic "t"'s end offsets into r, every partition's if
// complete, sec seconds after t0.
func readEnds(r *RecordSizes, t0 time.Time, sec int, ends map[int32]int64, complete bool) {
	r.readWindow("t", ends, complete, t0.Add(time.Duration(sec)*time.Second))
}

// TestRecordSizesWindow: what every producer of a topic sent over the
// window is the growth of its end offsets over the span and BusiestSlack,
// per second of the span, known once the readings cover that; a reading
// that may leave records out (without every partition's offset, without a
// partition the last had, offsets gone back) starts over.
func TestRecordSizesWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steady := func(r *RecordSizes, from, to int) {
		for sec := from; sec <= to; sec++ {
			readEnds(r, t0, sec, map[int32]int64{0: int64(sec) * 100, 1: int64(sec) * 10}, true)
		}
	}
	r := &RecordSizes{windows: map[string]*topicWindow{}}
	steady(r, 0, 12)
	if got, ok := r.Window("t", DefaultWindow); ok {
		t.Errorf("window %v known from readings over 12 s, less than the span and BusiestSlack", got)
	}
	steady(r, 13, 20)
	if got, ok := r.Window("t", DefaultWindow); !ok || got != 110*13/11.0 {
		t.Errorf("window %v (known %v), want 110 a second over 13 s per second of 11 s, %v", got, ok, 110*13/11.0)
	}
	for _, c := range []struct {
		name     string
		ends     map[int32]int64
		complete bool
	}{
		{"a partition's error", map[int32]int64{0: 2100, 1: 210}, false},
		{"a partition missing", map[int32]int64{0: 2100}, true},
		{"offsets gone back", map[int32]int64{0: 10, 1: 10}, true},
	} {
		r := &RecordSizes{windows: map[string]*topicWindow{}}
		steady(r, 0, 20)
		readEnds(r, t0, 21, c.ends, c.complete)
		if got, ok := r.Window("t", DefaultWindow); ok {
			t.Errorf("%s: window %v known at once", c.name, got)
		}
		steady(r, 22, 33)
		if got, ok := r.Window("t", DefaultWindow); ok {
			t.Errorf("%s: window %v known 12 s after, want unknown until the readings after it cover the span and BusiestSlack", c.name, got)
		}
		steady(r, 34, 35)
		if _, ok := r.Window("t", DefaultWindow); !ok {
			t.Errorf("%s: window unknown 14 s after", c.name)
		}
	}
}
