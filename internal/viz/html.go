package viz

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
)

//go:embed page.html
var pageHTML string

//go:embed page.css
var pageCSS string

//go:embed page.js
var pageJS string

var pageTmpl = template.Must(template.New("page").Parse(pageHTML))

// pageData is what page.html draws.
type pageData struct {
	Title, Source string
	Stats         []string
	Notes         []string
	Legend        []legendItem
	Pairs         []pairView
	Rows          []rowView
	Data          template.JS // the packets' headers, as JSON
	CSS           template.CSS
	Script        template.JS
}

type legendItem struct{ Class, Text string }

type pairView struct {
	ID     string
	Title  string
	Note   string
	Seq    seqView
	Graphs []graphView
	Tput   *tputView
}

type rowView struct {
	N                 int
	Time              string
	Src, Dst, QP      string
	Info, Note, Class string
}

// Write renders c as one HTML page.
func Write(w io.Writer, c *Capture) error {
	d := pageData{Title: c.Title, Source: c.Source, CSS: template.CSS(pageCSS), Script: template.JS(pageJS)}
	d.Stats = stats(c)
	d.Notes = append(d.Notes, c.Notes...)
	if c.Truncated > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("The capture has %d more RoCE v2 packets than the %d shown: the list and graphs end at packet %d.",
			c.Truncated, len(c.Packets), c.Packets[len(c.Packets)-1].N))
	}
	d.Legend = append(d.Legend, legendItem{"req", "request"}, legendItem{"resp", "ACK or response"})
	for _, k := range kinds {
		d.Legend = append(d.Legend, legendItem{k.class, k.legend})
	}
	byPair := make([][]int, len(c.Pairs))
	for i := range c.Packets {
		if p := c.Packets[i].Pair; p >= 0 && p < len(c.Pairs) {
			byPair[p] = append(byPair[p], i)
		}
	}
	for pi, pkts := range byPair {
		if len(pkts) == 0 {
			continue
		}
		p := c.Pairs[pi]
		na, aa := endpointHead(p.A)
		nb, ab := endpointHead(p.B)
		name := fmt.Sprintf("%s: %s %s ⇄ %s %s", p.Transport, aa, na, ab, nb)
		pv := pairView{
			ID:    "pair" + strconv.Itoa(pi),
			Title: name + ", " + plural(len(pkts), "packet"),
			Seq:   newSeq(c, pi, pkts),
		}
		if pv.Seq.Drawn < len(pkts) {
			pv.Note = fmt.Sprintf("The diagram draws the first %d of the pair's %d packets (the graphs and the list have them all).",
				pv.Seq.Drawn, len(pkts))
			d.Notes = append(d.Notes, fmt.Sprintf("%s: the diagram draws the first %d of %d packets.", name, pv.Seq.Drawn, len(pkts)))
		}
		pv.Graphs = newGraphs(c, pi, pkts)
		pv.Tput = newTput(c, pi, pkts)
		d.Pairs = append(d.Pairs, pv)
	}
	d.Rows = make([]rowView, len(c.Packets))
	for i := range c.Packets {
		p := &c.Packets[i]
		d.Rows[i] = rowView{
			N: p.N, Time: strconv.FormatFloat(p.Time.Seconds(), 'f', 6, 64),
			Src: p.Src, Dst: p.Dst, QP: fmt.Sprintf("0x%06x", p.DestQP),
			Info: p.Label, Note: p.Note, Class: p.Class(),
		}
		if p.Error != "" {
			d.Rows[i].Note = strings.TrimPrefix(p.Note+"; "+p.Error, "; ")
		}
	}
	data, err := headerJSON(c)
	if err != nil {
		return err
	}
	d.Data = template.JS(data)
	return pageTmpl.Execute(w, d)
}

// stats are the numbers at the top of the page.
func stats(c *Capture) []string {
	n := map[Mark]int{}
	for i := range c.Packets {
		for _, k := range kinds {
			if c.Packets[i].Marks&k.mark != 0 {
				n[k.mark]++
			}
		}
	}
	out := []string{
		plural(c.Frames, "frame"),
		fmt.Sprintf("%d RoCE v2", len(c.Packets)+c.Truncated),
		fmt.Sprintf("%d other", c.Skipped),
		fmt.Sprintf("%d QP pairs", len(c.Pairs)),
	}
	for _, k := range []struct {
		m    Mark
		what string
	}{
		{MarkRetrans, "retransmitted packet"}, {MarkNAK, "PSN sequence NAK"}, {MarkNAKError, "error NAK"},
		{MarkRNR, "RNR NAK"}, {MarkLost, "lost packet"}, {MarkGap, "gap"}, {MarkCM, "CM message"}, {MarkBad, "bad packet"},
	} {
		if n[k.m] > 0 {
			out = append(out, plural(n[k.m], k.what))
		}
	}
	return out
}

// headerJSON is the packets' headers for the script: each distinct header
// layout (name, fields and widths) once, then per packet the layouts it
// uses with their titles and values.
//
//	{"layouts": [["BTH", [["OpCode", 8], ...], about], ...],
//	 "pkts": [[N, [[layout, title, [value, ...]], ...]], ...]}
func headerJSON(c *Capture) ([]byte, error) {
	type layout struct {
		name, about, fields string
	}
	index := map[layout]int{}
	var layouts [][3]any
	pkts := make([][2]any, 0, len(c.Packets))
	var key strings.Builder
	for i := range c.Packets {
		p := &c.Packets[i]
		hs := make([][3]any, 0, len(p.Headers))
		for _, h := range p.Headers {
			key.Reset()
			fields := make([][2]any, len(h.Fields))
			values := make([]string, len(h.Fields))
			for j, f := range h.Fields {
				fmt.Fprintf(&key, "%s/%d;", f.Name, f.Bits)
				fields[j] = [2]any{f.Name, f.Bits}
				values[j] = f.Value
			}
			l := layout{h.Name, h.About, key.String()}
			li, ok := index[l]
			if !ok {
				li = len(layouts)
				index[l] = li
				layouts = append(layouts, [3]any{h.Name, fields, h.About})
			}
			hs = append(hs, [3]any{li, h.Title, values})
		}
		pkts = append(pkts, [2]any{p.N, hs})
	}
	// encoding/json escapes <, > and &, so the result is safe in a script
	// element.
	return json.Marshal(map[string]any{"layouts": layouts, "pkts": pkts})
}
