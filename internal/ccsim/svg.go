package ccsim

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xroce/xroce/qp"
)

// palette colours the flows (Okabe–Ito, readable by the colour blind).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"}

// SVG draws r as a self-contained SVG image: each flow's goodput at the
// receiver over time above, the bottleneck queue (window mean and
// maximum) with the marking thresholds below.
func (r *Result) SVG(w io.Writer, title string) error {
	const (
		width, left, right = 860, 60, 150
		top, rateH, gap    = 40, 240, 50
		queueH             = 140
		height             = top + rateH + gap + queueH + 40
	)
	plotW := float64(width - left - right)
	end := r.Config.Duration
	x := func(t time.Duration) float64 { return left + plotW*float64(t)/float64(end) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))

	// Goodput panel.
	line := float64(r.Config.LineRate) / 1e9
	yRate := func(g float64) float64 { return top + rateH - rateH*g/line }
	axes(&b, left, top, plotW, rateH, end, line, x)
	for i := range len(r.Config.Flows) {
		c := palette[i%len(palette)]
		var pts []string
		on := false
		for w, t := range r.Times {
			f := r.Config.Flows[i]
			if t <= f.Start || f.Stop > 0 && t-r.Config.Window > f.Stop {
				if on {
					polyline(&b, pts, c)
					pts, on = nil, false
				}
				continue
			}
			on = true
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(t-r.Config.Window/2), yRate(r.Goodput[w][i]/1e9)))
		}
		polyline(&b, pts, c)
		ly := top + 12 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">flow %d</text>`+"\n",
			width-right+15, ly, width-right+40, ly, c, width-right+46, ly+4, i+1)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" transform="rotate(-90 %d %d)" text-anchor="middle">goodput at the receiver (Gb/s)</text>`+"\n",
		16, top+rateH/2, 16, top+rateH/2)

	// Queue panel.
	qtop := float64(top + rateH + gap)
	qmax := float64(r.Config.Mark.Kmax) * 1.5
	for _, q := range r.QueueMax {
		qmax = max(qmax, float64(q))
	}
	qmax = niceCeil(qmax / 1000)
	yQ := func(q float64) float64 { return qtop + queueH - queueH*q/1000/qmax }
	axes(&b, left, qtop, plotW, queueH, end, qmax, x)
	for _, k := range []struct {
		v    int
		name string
	}{{r.Config.Mark.Kmin, "Kmin"}, {r.Config.Mark.Kmax, "Kmax"}} {
		if float64(k.v)/1000 <= qmax {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/><text x="%.1f" y="%.1f" fill="#666">%s %d KB</text>`+"\n",
				left, yQ(float64(k.v)), left+plotW, yQ(float64(k.v)), left+plotW+4, yQ(float64(k.v))+4, k.name, k.v/1000)
		}
	}
	var mean, peak []string
	for w, t := range r.Times {
		mean = append(mean, fmt.Sprintf("%.1f,%.1f", x(t-r.Config.Window/2), yQ(r.QueueAvg[w])))
		peak = append(peak, fmt.Sprintf("%.1f,%.1f", x(t-r.Config.Window/2), yQ(float64(r.QueueMax[w]))))
	}
	polyline(&b, peak, "#bbb")
	polyline(&b, mean, "#333")
	fmt.Fprintf(&b, `<text x="%d" y="%.0f" transform="rotate(-90 %d %.0f)" text-anchor="middle">bottleneck queue (KB)</text>`+"\n",
		16, qtop+queueH/2, 16, qtop+queueH/2)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#333" stroke-width="2"/><text x="%d" y="%.0f">mean</text>`+"\n",
		width-right+15, qtop+12, width-right+40, qtop+12, width-right+46, qtop+16)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#bbb" stroke-width="2"/><text x="%d" y="%.0f">max</text>`+"\n",
		width-right+15, qtop+30, width-right+40, qtop+30, width-right+46, qtop+34)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">time (ms), each point the mean of %v</text>`+"\n",
		left+plotW/2, height-8, r.Config.Window)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// axes draws a panel's frame, grid and tick labels.
func axes(b *strings.Builder, left int, top, w, h float64, end time.Duration, ymax float64, x func(time.Duration) float64) {
	fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, w, h)
	step := niceStep(ymax / 5)
	for v := 0.0; v <= ymax+1e-9; v += step {
		yy := top + h - h*v/ymax
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, yy, float64(left)+w, yy, left-6, yy+4, trim(v))
	}
	tstep := time.Duration(niceStep(float64(end)/10/float64(time.Millisecond)) * float64(time.Millisecond))
	for t := time.Duration(0); t <= end; t += tstep {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(t), top+h+15, trim(float64(t)/float64(time.Millisecond)))
	}
}

func polyline(b *strings.Builder, pts []string, colour string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// niceCeil rounds v up to a multiple of its nice step.
func niceCeil(v float64) float64 {
	s := niceStep(v / 5)
	return math.Ceil(v/s) * s
}

func trim(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.4g", v), ".0") }

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Scenario is a named simulation docs/congestion.md plots.
type Scenario struct {
	File, Title string
	Config      Config
}

// Scenarios are docs/congestion.md's figures: the runs of the tests, drawn.
func Scenarios() []Scenario {
	const ms = time.Millisecond
	n := func(k int) []Flow {
		f := make([]Flow, k)
		for i := range f {
			f[i].Start = time.Duration(i) * 10 * time.Microsecond
		}
		return f
	}
	return []Scenario{
		{"cc-2-flows.svg", "2 flows, 10 Gb/s bottleneck, ConnectX DCQCN defaults", Config{Flows: n(2), Duration: 30 * ms, Window: 200 * time.Microsecond}},
		{"cc-8-flows.svg", "8 flows, 10 Gb/s bottleneck, ConnectX DCQCN defaults", Config{Flows: n(8), Duration: 100 * ms, Window: ms}},
		{"cc-join-leave.svg", "a third flow joins at 20 ms, the first leaves at 50 ms", Config{
			Flows: []Flow{{Stop: 50 * ms}, {Start: 10 * time.Microsecond}, {Start: 20 * ms}}, Duration: 80 * ms, Window: 500 * time.Microsecond}},
		{"cc-8-flows-no-dcqcn.svg", "8 flows without DCQCN (CNPs ignored): the queue holds the windows", Config{
			Flows: n(8), Duration: 20 * ms, Window: 200 * time.Microsecond, CC: qp.CCConfig{NoDCQCN: true}}},
	}
}

// Plot runs the scenarios and writes their SVGs into dir; it returns a
// line of figures per scenario.
func Plot(dir string) ([]string, error) {
	var lines []string
	for _, s := range Scenarios() {
		r, err := Run(s.Config)
		if err != nil {
			return lines, fmt.Errorf("%s: %w", s.File, err)
		}
		f, err := os.Create(filepath.Join(dir, s.File))
		if err != nil {
			return lines, err
		}
		err = r.SVG(f, s.Title)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return lines, fmt.Errorf("%s: %w", s.File, err)
		}
		from := r.Config.Duration * 3 / 4
		g, q, qmax := r.Mean(from, r.Config.Duration)
		var on []float64
		for i, f := range r.Config.Flows {
			if f.Stop == 0 || f.Stop > from {
				on = append(on, g[i])
			}
		}
		lines = append(lines, fmt.Sprintf("%s: last quarter: Jain %.3f, goodput%s, queue %.0f KB mean, %.0f KB max; whole run: %d marked, %d CNPs, %d dropped, %d retransmissions",
			s.File, Jain(on), gbits(g), q/1000, float64(qmax)/1000, r.Marked, r.CNPs, r.Dropped, r.Retransmits))
	}
	return lines, nil
}

func gbits(g []float64) string {
	s := ""
	for _, x := range g {
		s += fmt.Sprintf(" %.2f", x/1e9)
	}
	return s + " Gb/s"
}
