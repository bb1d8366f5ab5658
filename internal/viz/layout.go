package viz

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// This file turns a Capture into what the page template draws: coordinates
// and strings, computed once in Go so the template only places them.

// Sequence diagram geometry, in SVG user units.
const (
	seqWidth = 800
	seqLeft  = 108 // A's lifeline
	seqRight = 756 // B's lifeline
	seqTop   = 56  // first arrow
	seqRow   = 22  // between arrows
)

// seqView is one pair's sequence diagram.
type seqView struct {
	Width, Height  int
	XA, XB         int
	NameA, NameB   string // lifeline heads
	AddrA, AddrB   string
	Arrows         []arrowView
	Waits          []waitView
	Drawn, Packets int // arrows drawn of the pair's packets
}

// arrowView is one arrow: a packet, or a gap (PSNs that never showed up).
type arrowView struct {
	N      int // packet number; 0 for a gap
	Y      int
	X1, X2 int // from, to (the tip)
	LX     int // label's centre
	Class  string
	Label  string
	Time   string // ms since the pair's first packet
	Tip    string // hover text
	Dash   bool   // dashed line
	LY     int    // the label's baseline
	Head   string // the arrowhead's path, or an X short of the lifeline for a lost packet
}

// waitView is an RNR wait drawn along the requester's lifeline.
type waitView struct {
	X, Y1, Y2, LX, LY int
	Label             string
	Anchor            string
}

// newSeq lays out the first MaxArrows packets of pair pi.
func newSeq(c *Capture, pi int, pkts []int) seqView {
	p := c.Pairs[pi]
	v := seqView{Width: seqWidth, Height: seqTop, XA: seqLeft, XB: seqRight, Packets: len(pkts)}
	v.NameA, v.AddrA = endpointHead(p.A)
	v.NameB, v.AddrB = endpointHead(p.B)
	if len(pkts) == 0 {
		return v
	}
	t0 := c.Packets[pkts[0]].Time
	y := seqTop
	// rowOf is the row of each packet drawn, for the RNR waits.
	type drawnPkt struct {
		y     int
		fromA bool
	}
	var drawn []drawnPkt
	var waits []int // indexes in drawn of RNR NAKs
	for _, i := range pkts {
		if v.Drawn >= MaxArrows {
			break
		}
		pk := &c.Packets[i]
		from, to := v.XA, v.XB
		if !pk.FromA {
			from, to = v.XB, v.XA
		}
		ms := fmtMs(pk.Time - t0)
		if pk.Missing > 0 {
			label := fmt.Sprintf("%s missing before PSN %d: never in the capture", plural(pk.Missing, "PSN"), pk.PSN)
			xx := from + (to-from)*3/4
			v.Arrows = append(v.Arrows, arrowView{Y: y, X1: from, X2: xx, LX: (v.XA + v.XB) / 2, LY: y - 5,
				Class: "gap", Label: label, Tip: label, Dash: true, Head: xMark(xx, y)})
			y += seqRow
		}
		a := arrowView{N: pk.N, Y: y, X1: from, X2: to, LX: (v.XA + v.XB) / 2, LY: y - 5, Class: pk.Class(),
			Label: pk.Label, Time: ms, Tip: tip(pk), Head: arrowHead(from, to, y)}
		if pk.Marks&MarkLost != 0 {
			a.Dash = true
			a.X2 = to - (to-from)/10
			a.Head = xMark(a.X2, y)
		}
		v.Arrows = append(v.Arrows, a)
		if pk.Marks&MarkRNR != 0 && pk.RNRWait > 0 {
			waits = append(waits, len(drawn))
		}
		drawn = append(drawn, drawnPkt{y, pk.FromA})
		v.Drawn++
		y += seqRow
	}
	v.Height = y
	for _, w := range waits {
		// The NAK goes to the requester; its wait ends at the requester's
		// next packet (the retry), or at the end of the drawing.
		nak := drawn[w]
		x := v.XB
		if !nak.fromA {
			x = v.XA
		}
		end := y - seqRow/2
		for _, d := range drawn[w+1:] {
			if d.fromA == !nak.fromA {
				end = d.y
				break
			}
		}
		wv := waitView{X: x, Y1: nak.y, Y2: end, LY: (nak.y+end)/2 + 4, Label: "RNR wait " + fmtDur(c.Packets[pkts[w]].RNRWait)}
		if x == v.XA {
			wv.LX, wv.Anchor = x-8, "end"
		} else {
			wv.LX, wv.Anchor = x+8, "start"
		}
		v.Waits = append(v.Waits, wv)
	}
	return v
}

// arrowHead is the path of an arrowhead at to, pointing away from from.
func arrowHead(from, to, y int) string {
	d := 9
	if to < from {
		d = -9
	}
	return fmt.Sprintf("M%d %dl%d -4v8z", to, y, -d)
}

// xMark is the path of an X at (x, y): where a lost packet ends.
func xMark(x, y int) string {
	return fmt.Sprintf("M%d %dl10 10m0 -10l-10 10", x-5, y-5)
}

func endpointHead(e Endpoint) (name, addr string) {
	qp := "QP ?"
	if e.QPKnown {
		qp = fmt.Sprintf("QP %#x", e.QP)
	}
	name = qp
	if e.Name != "" {
		name = e.Name + " " + qp
	}
	return name, e.Addr
}

// tip is the hover text of a packet's arrow or row.
func tip(p *Packet) string {
	s := fmt.Sprintf("#%d %s > %s %s QP %#06x PSN %d, %d B", p.N, p.Src, p.Dst, p.Opcode, p.DestQP, p.PSN, p.Wire)
	if p.Note != "" {
		s += "\n" + p.Note
	}
	if p.Error != "" {
		s += "\n" + p.Error
	}
	return s
}

// Graph geometry.
const (
	graphW, graphH = 1000, 300
	graphL, graphR = 78, 12
	graphT, graphB = 14, 34
	tputH          = 150
	tputBins       = 80
	graphMinPoints = 1
	markSize       = 3.0
)

// plot is the frame of a graph: its size and the plotting area.
type plot struct {
	W, H           int
	X0, X1, Y0, Y1 int // Y0 at the bottom
	AW, AH         int // the area's width and height
}

func newPlot(h int) plot {
	p := plot{W: graphW, H: h, X0: graphL, X1: graphW - graphR, Y0: h - graphB, Y1: graphT}
	p.AW, p.AH = p.X1-p.X0, p.Y0-p.Y1
	return p
}

// graphView is the PSN-over-time graph of one requester.
type graphView struct {
	plot
	Title  string
	Base   uint32 // PSN at 0 on the axis
	XTicks []tick
	YTicks []tick
	Paths  []pathView // marks, one path per class
	Acks   string     // the ACK line's points
	Counts string     // what is plotted
}

type tick struct {
	Pos   float64
	Label string
}

type pathView struct {
	Class string
	D     string
}

// tputView is the throughput of one pair, both directions.
type tputView struct {
	plot
	Bin          string // bin width
	XTicks       []tick
	YTicks       []tick
	LineA, LineB string
	NameA, NameB string
}

// psnUnwrap follows a 24-bit PSN sequence as an unbounded integer.
type psnUnwrap struct {
	prev  uint32
	value int64
	init  bool
}

func (u *psnUnwrap) at(psn uint32) int64 {
	if !u.init {
		u.prev, u.init = psn, true
		return 0
	}
	d := int32((psn-u.prev)<<8) >> 8 // wrap-safe difference of 24-bit numbers
	u.prev = psn
	u.value += int64(d)
	return u.value
}

// scale maps [lo, hi] onto [a, b].
type scale struct{ lo, hi, a, b float64 }

func (s scale) at(v float64) float64 {
	if s.hi == s.lo {
		return (s.a + s.b) / 2
	}
	return s.a + (v-s.lo)*(s.b-s.a)/(s.hi-s.lo)
}

// newGraphs draws the PSN graphs of pair pi: one for each end that sent
// requests, with the other end's responses and ACKs in the same PSN space.
func newGraphs(c *Capture, pi int, pkts []int) []graphView {
	if len(pkts) == 0 || c.Pairs[pi].Transport == "CM" {
		return nil
	}
	t0, t1 := c.Packets[pkts[0]].Time, c.Packets[pkts[len(pkts)-1]].Time
	xs := scale{float64(t0), float64(t1), graphL, graphW - graphR}
	var out []graphView
	for _, sideA := range []bool{true, false} {
		type pt struct {
			t     time.Duration
			u     int64
			class string
		}
		var pts, acks, naks []pt
		var u psnUnwrap
		var base uint32
		reqs, resps := 0, 0
		for _, i := range pkts {
			p := &c.Packets[i]
			// The requester's space: its requests, the other end's responses.
			if mine := p.FromA == sideA; mine == p.Response {
				continue
			}
			if !u.init {
				base = p.PSN
			}
			v := u.at(p.PSN)
			switch {
			case p.Marks&(MarkNAK|MarkNAKError|MarkRNR) != 0:
				naks = append(naks, pt{p.Time, v, p.Class()})
			case p.Acked:
				acks = append(acks, pt{p.Time, v, ""})
			case p.Data:
				pts = append(pts, pt{p.Time, v, p.Class()})
				if p.Response {
					resps++
				} else {
					reqs++
				}
			}
		}
		if len(pts) < graphMinPoints {
			continue
		}
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for _, set := range [][]pt{pts, acks, naks} {
			for _, q := range set {
				lo, hi = min(lo, q.u), max(hi, q.u)
			}
		}
		if hi == lo {
			lo, hi = lo-1, hi+1
		}
		ys := scale{float64(lo), float64(hi), graphH - graphB, graphT}
		p := c.Pairs[pi]
		from, to := p.A, p.B
		if !sideA {
			from, to = p.B, p.A
		}
		g := graphView{
			Title: fmt.Sprintf("PSNs of %s's requests (%s), with %s's responses and ACKs",
				epName(from), plural(reqs, "request"), epName(to)),
			Base: base, plot: newPlot(graphH),
		}
		if resps > 0 {
			g.Title = fmt.Sprintf("PSNs of %s's requests (%s) and %s's read responses (%d), with its ACKs",
				epName(from), plural(reqs, "request"), epName(to), resps)
		}
		g.XTicks = timeTicks(xs, t0, t1)
		for _, v := range niceTicks(float64(lo), float64(hi), 5) {
			g.YTicks = append(g.YTicks, tick{ys.at(v), fmt.Sprintf("+%d", int64(v))})
		}
		byClass := map[string]*strings.Builder{}
		var order []string
		add := func(class string, f func(b *strings.Builder)) {
			b := byClass[class]
			if b == nil {
				b = &strings.Builder{}
				byClass[class] = b
				order = append(order, class)
			}
			f(b)
		}
		for _, q := range pts {
			x, y := xs.at(float64(q.t)), ys.at(float64(q.u))
			add(q.class, func(b *strings.Builder) {
				fmt.Fprintf(b, "M%.1f %.1fh%gv%gh-%gz", x-markSize/2, y-markSize/2, markSize, markSize, markSize)
			})
		}
		for _, q := range naks {
			x, y := xs.at(float64(q.t)), ys.at(float64(q.u))
			add("x"+q.class, func(b *strings.Builder) {
				fmt.Fprintf(b, "M%.1f %.1fl8 8m0 -8l-8 8", x-4, y-4)
			})
		}
		for _, cl := range order {
			g.Paths = append(g.Paths, pathView{cl, byClass[cl].String()})
		}
		var ab strings.Builder
		for i, q := range acks {
			x, y := xs.at(float64(q.t)), ys.at(float64(q.u))
			if i > 0 {
				// A step: the acknowledged PSN holds until the next ACK.
				fmt.Fprintf(&ab, "%.1f,%.1f ", x, ys.at(float64(acks[i-1].u)))
			}
			fmt.Fprintf(&ab, "%.1f,%.1f ", x, y)
		}
		g.Acks = strings.TrimSpace(ab.String())
		g.Counts = fmt.Sprintf("PSN axis from %d; %s, %s, %s", base, plural(len(pts), "data packet"), plural(len(acks), "ACK"), plural(len(naks), "NAK"))
		out = append(out, g)
	}
	return out
}

// newTput bins the pair's bytes on the wire over time, each direction.
func newTput(c *Capture, pi int, pkts []int) *tputView {
	if len(pkts) < 2 || c.Pairs[pi].Transport == "CM" {
		return nil
	}
	t0, t1 := c.Packets[pkts[0]].Time, c.Packets[pkts[len(pkts)-1]].Time
	if t1 <= t0 {
		return nil
	}
	bin := (t1 - t0 + tputBins - 1) / tputBins
	var a, b [tputBins]float64
	for _, i := range pkts {
		p := &c.Packets[i]
		k := min(int((p.Time-t0)/bin), tputBins-1)
		if p.FromA {
			a[k] += float64(p.Wire)
		} else {
			b[k] += float64(p.Wire)
		}
	}
	top := 0.0
	for k := range a {
		a[k] = a[k] * 8 / bin.Seconds() / 1e6 // Mbit/s
		b[k] = b[k] * 8 / bin.Seconds() / 1e6
		top = max(top, a[k], b[k])
	}
	if top == 0 {
		return nil
	}
	xs := scale{float64(t0), float64(t0 + bin*tputBins), graphL, graphW - graphR}
	ys := scale{0, top, tputH - graphB, graphT}
	line := func(v *[tputBins]float64) string {
		var s strings.Builder
		for k := range v {
			x0, x1 := xs.at(float64(t0+bin*time.Duration(k))), xs.at(float64(t0+bin*time.Duration(k+1)))
			y := ys.at(v[k])
			fmt.Fprintf(&s, "%.1f,%.1f %.1f,%.1f ", x0, y, x1, y)
		}
		return strings.TrimSpace(s.String())
	}
	p := c.Pairs[pi]
	v := &tputView{plot: newPlot(tputH), Bin: fmtDur(bin), LineA: line(&a), LineB: line(&b),
		NameA: epName(p.A) + " → " + epName(p.B), NameB: epName(p.B) + " → " + epName(p.A)}
	v.XTicks = timeTicks(xs, t0, t0+bin*tputBins)
	for _, y := range niceTicks(0, top, 4) {
		v.YTicks = append(v.YTicks, tick{ys.at(y), strconv.FormatFloat(y, 'f', -1, 64)})
	}
	return v
}

func epName(e Endpoint) string {
	if e.Name != "" {
		return e.Name
	}
	return e.Addr
}

// timeTicks labels the time axis in ms since t0.
func timeTicks(xs scale, t0, t1 time.Duration) []tick {
	var out []tick
	for _, v := range niceTicks(0, float64(t1-t0)/1e6, 6) {
		out = append(out, tick{xs.at(float64(t0) + v*1e6), strconv.FormatFloat(v, 'g', 6, 64)})
	}
	return out
}

// niceTicks returns about n round values from lo to hi.
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) || math.IsInf(hi-lo, 0) || n < 1 {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9 && len(out) < 4*n; v += step {
		out = append(out, v)
	}
	return out
}

func fmtMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'g', 4, 64) + " s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'g', 4, 64) + " ms"
	}
	return strconv.FormatFloat(float64(d)/1e3, 'g', 4, 64) + " µs"
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
