package bench

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"slices"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Chart layout, in pixels.
const (
	chartMargin = 16
	cellWidth   = 720
	cellGap     = 24
	titleH      = 24
	rateH       = 200
	ageH        = 100
	plotGap     = 22
	axisH       = 30
	rowGap      = 18
	plotLeft    = 62 // room for the y tick labels
	plotRight   = 14
	legendH     = 96
)

var (
	colBG       = color.RGBA{255, 255, 255, 255}
	colSlow     = color.RGBA{253, 234, 234, 255}
	colGrid     = color.RGBA{226, 226, 226, 255}
	colAxis     = color.RGBA{90, 90, 90, 255}
	colText     = color.RGBA{20, 20, 20, 255}
	colCapacity = color.RGBA{0, 0, 0, 255}
	colOffered  = color.RGBA{160, 160, 160, 255}
	colStored   = color.RGBA{31, 119, 180, 255}
	colAllowed  = color.RGBA{255, 127, 14, 255}
	colConsumed = color.RGBA{44, 160, 44, 255}
	colDead     = color.RGBA{214, 39, 40, 255}
	colHeadAge  = color.RGBA{148, 103, 189, 255}
	colTrueAge  = color.RGBA{23, 190, 207, 255}
)

// line styles
type style struct {
	c     color.RGBA
	width int
	dash  int // 0 solid; else on/off length in pixels
}

// Chart draws the runs over time as a PNG: one row per matrix row and load,
// the naive run on the left and the lagbridge run on the right. Each cell
// has the rates (capacity, offered, stored by the broker, allowed by the
// quota, processed, of which dead) and, below, the true head age (the
// bench's measure) and the daemon's against the deadline; the slow phase
// is shaded. It is a pure function.
func Chart(scn Scenario, results []Result) ([]byte, error) {
	type row struct {
		name  string
		load  float64
		cells [2]*Result
	}
	var rows []*row
	for i := range results {
		r := &results[i]
		var cur *row
		for _, x := range rows {
			if x.name == r.Row.Name() && x.load == r.Load {
				cur = x
			}
		}
		if cur == nil {
			cur = &row{name: r.Row.Name(), load: r.Load}
			rows = append(rows, cur)
		}
		if r.Mode == ModeNaive {
			cur.cells[0] = r
		} else {
			cur.cells[1] = r
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no results to chart")
	}
	rowH := titleH + rateH + plotGap + ageH + axisH + rowGap
	width := 2*chartMargin + 2*cellWidth + cellGap
	height := 2*chartMargin + legendH + len(rows)*rowH
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBG}, image.Point{}, draw.Src)

	drawLegend(img, scn, chartMargin, chartMargin)
	for ri, rw := range rows {
		y0 := chartMargin + legendH + ri*rowH
		// One rate scale per row, so naive and lagbridge compare.
		top := 1.1 * math.Max(rw.load*scn.Slow, scn.Normal)
		for ci, r := range rw.cells {
			x0 := chartMargin + ci*(cellWidth+cellGap)
			if r == nil {
				continue
			}
			cs := scn
			if r.Scenario.Normal > 0 {
				cs = r.Scenario
			}
			drawCell(img, cs, r, x0, y0, top)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func drawLegend(img *image.RGBA, scn Scenario, x, y int) {
	text(img, x, y+12, colText, fmt.Sprintf("lagbridge bench: consumer capacity %s msg/s, %s msg/s from %s to %s (shaded), deadline %s. Left: naive producers (fixed rate, 3 retries). Right: lagbridge SDK + daemon.",
		num(scn.Normal), num(scn.Slow), dur(scn.DropAt()), dur(scn.RecoverAt()), dur(scn.Deadline)))
	items := []struct {
		s     style
		label string
	}{
		{style{colCapacity, 1, 4}, "consumer capacity"},
		{style{colOffered, 2, 0}, "offered"},
		{style{colStored, 2, 0}, "produce rate (stored by the broker)"},
		{style{colAllowed, 2, 0}, "allowed rate (SDK quota)"},
		{style{colAllowed, 1, 3}, "allowed rate the daemon decided (ignored by naive producers)"},
		{style{colConsumed, 2, 0}, "consume rate (processed)"},
		{style{colDead, 2, 0}, "of which dead work (processed after the deadline)"},
		{style{colTrueAge, 2, 0}, "true head age, s (bench; lower plots)"},
		{style{colHeadAge, 1, 0}, "head age, s (daemon's; lower plots)"},
		{style{colDead, 1, 6}, "deadline"},
	}
	cx, cy := x, y+34
	for _, it := range items {
		w := 36 + 8 + 7*len(it.label) + 22
		if cx+w > img.Bounds().Dx()-chartMargin {
			cx, cy = x, cy+22
		}
		line(img, cx, cy, cx+36, cy, it.s)
		text(img, cx+44, cy+4, colText, it.label)
		cx += w
	}
	text(img, x, cy+26, colAxis, "Rates in msg/s over 500 ms windows; x axis: seconds since the start of the run.")
}

func drawCell(img *image.RGBA, scn Scenario, r *Result, x0, y0 int, top float64) {
	s := r.Series
	title := fmt.Sprintf("%s %sx %s: goodput %s, dead %s, head age p99 %s (daemon's %s)", r.Row.Name(), num(r.Load), r.Mode,
		pct(r.GoodputShare), pct(r.DeadShare), dur(r.TrueHeadAgeP99), dur(r.HeadAgeP99))
	text(img, x0, y0+13, colText, title)
	px0, px1 := x0+plotLeft, x0+cellWidth-plotRight
	dur := time.Duration(s.Bins()) * s.Bin
	xOf := func(t time.Duration) int {
		return px0 + int(math.Round(float64(px1-px0)*t.Seconds()/dur.Seconds()))
	}
	rateTop, rateBot := y0+titleH, y0+titleH+rateH
	ageTop := rateBot + plotGap
	ageBot := ageTop + ageH

	for _, p := range [][2]int{{rateTop, rateBot}, {ageTop, ageBot}} {
		fillRect(img, xOf(scn.DropAt()), p[0], xOf(scn.RecoverAt()), p[1], colSlow)
	}
	// Rate plot; the axis ends at its last tick.
	rateTicks := niceTicks(top, 5)
	top = rateTicks[len(rateTicks)-1]
	yRate := func(v float64) int { return rateBot - int(math.Round(float64(rateH)*v/top)) }
	for _, v := range rateTicks {
		y := yRate(v)
		line(img, px0, y, px1, y, style{colGrid, 1, 0})
		label := num(v)
		text(img, px0-8-7*len(label), y+4, colAxis, label)
	}
	timeTicks := niceTicks(dur.Seconds(), 10)
	for _, t := range timeTicks {
		x := xOf(time.Duration(t * float64(time.Second)))
		line(img, x, rateTop, x, rateBot, style{colGrid, 1, 0})
		line(img, x, ageTop, x, ageBot, style{colGrid, 1, 0})
		label := fmt.Sprintf("%gs", t)
		text(img, x-7*len(label)/2, ageBot+16, colAxis, label)
	}
	text(img, px0+4, rateTop+13, colAxis, "msg/s")

	n := s.Bins()
	window := max(1, int(500*time.Millisecond/s.Bin))
	rates := func(c [][]int64) []float64 {
		tot := total(c)
		out := make([]float64, n)
		for i := range out {
			out[i] = rate(tot, max(0, i+1-window), i+1, s.Bin.Seconds())
		}
		return out
	}
	xs := make([]int, n)
	for i := range xs {
		xs[i] = xOf(time.Duration(i+1) * s.Bin)
	}
	capa := make([]float64, n)
	for i := range capa {
		capa[i] = scn.Capacity(time.Duration(i)*s.Bin + s.Bin/2)
	}
	clip := func(v []float64) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			switch {
			case math.IsNaN(x) || math.IsInf(x, 1):
				out[i] = math.NaN()
			default:
				out[i] = math.Min(x, top)
			}
		}
		return out
	}
	consumed := make([][]int64, 0, 2*len(s.Good))
	consumed = append(append(consumed, s.Good...), s.Dead...)
	poly(img, xs, clip(rates(s.Offered)), yRate, style{colOffered, 2, 0})
	if r.Mode == ModeNaive {
		poly(img, xs, clip(s.Decided), yRate, style{colAllowed, 1, 3})
	} else {
		poly(img, xs, clip(s.Allowed), yRate, style{colAllowed, 2, 0})
	}
	poly(img, xs, clip(rates(consumed)), yRate, style{colConsumed, 2, 0})
	poly(img, xs, clip(rates(s.Dead)), yRate, style{colDead, 2, 0})
	poly(img, xs, clip(rates(s.Acked)), yRate, style{colStored, 2, 0})
	poly(img, xs, capa, yRate, style{colCapacity, 1, 4})
	frame(img, px0, rateTop, px1, rateBot)

	// Head age plot.
	maxAge := 2 * scn.Deadline.Seconds()
	for _, a := range append(slices.Clip(s.HeadAge), s.TrueHeadAge...) {
		if !math.IsNaN(a) {
			maxAge = math.Max(maxAge, a)
		}
	}
	ageTicks := niceTicks(maxAge, 3)
	ageTopV := ageTicks[len(ageTicks)-1]
	yAge := func(v float64) int { return ageBot - int(math.Round(float64(ageH)*v/ageTopV)) }
	for _, v := range ageTicks {
		y := yAge(v)
		line(img, px0, y, px1, y, style{colGrid, 1, 0})
		label := fmt.Sprintf("%gs", v)
		text(img, px0-8-7*len(label), y+4, colAxis, label)
	}
	text(img, px0+4, ageTop+13, colAxis, "head age")
	line(img, px0, yAge(scn.Deadline.Seconds()), px1, yAge(scn.Deadline.Seconds()), style{colDead, 1, 6})
	poly(img, xs, s.HeadAge, yAge, style{colHeadAge, 1, 0})
	if len(s.TrueHeadAge) == len(xs) {
		poly(img, xs, s.TrueHeadAge, yAge, style{colTrueAge, 2, 0})
	}
	frame(img, px0, ageTop, px1, ageBot)
}

// niceTicks returns about n round tick values from 0 up to at least hi.
func niceTicks(hi float64, n int) []float64 {
	if !(hi > 0) {
		hi = 1
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, math.Round(v*1e6)/1e6)
		if v >= hi-1e-9 {
			break
		}
	}
	return out
}

func frame(img *image.RGBA, x0, y0, x1, y1 int) {
	s := style{colAxis, 1, 0}
	line(img, x0, y0, x1, y0, s)
	line(img, x0, y1, x1, y1, s)
	line(img, x0, y0, x0, y1, s)
	line(img, x1, y0, x1, y1, s)
}

func fillRect(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	draw.Draw(img, image.Rect(x0, y0, x1, y1), &image.Uniform{c}, image.Point{}, draw.Src)
}

// poly draws a polyline through (xs[i], y(vs[i])), broken at NaN values.
func poly(img *image.RGBA, xs []int, vs []float64, y func(float64) int, s style) {
	px, py, have := 0, 0, false
	for i, v := range vs {
		if math.IsNaN(v) {
			have = false
			continue
		}
		x, yy := xs[i], y(v)
		if have {
			line(img, px, py, x, yy, s)
		}
		px, py, have = x, yy, true
	}
}

// line draws a (dashed) line of width s.width with Bresenham's algorithm.
func line(img *image.RGBA, x0, y0, x1, y1 int, s style) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	step := 0
	for {
		if s.dash == 0 || (step/s.dash)%2 == 0 {
			for w := range s.width {
				for v := range s.width {
					img.SetRGBA(x0+w-s.width/2, y0+v-s.width/2, s.c)
				}
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		step++
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func text(img *image.RGBA, x, y int, c color.RGBA, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
