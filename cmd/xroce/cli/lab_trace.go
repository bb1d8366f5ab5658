package cli

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/pktfmt"
)

// traceFrame is a frame kept for the sequence diagram.
type traceFrame struct {
	t    time.Time
	data []byte
}

// diagram draws frames between two hosts as a sequence diagram: A's
// frames as arrows to the right, B's to the left, one line each with the
// time since the first frame drawn.
type diagram struct {
	w     io.Writer
	a, b  netip.Addr
	t0    time.Time
	f     bth.Frame
	drawn int
}

// width is the number of columns between the two lifelines.
const diagramWidth = 78

func newDiagram(w io.Writer, a, b netip.Addr) *diagram {
	return &diagram{w: w, a: a, b: b}
}

// header prints the two lifelines' names.
func (d *diagram) header(nameA, nameB string) {
	left := fmt.Sprintf("A %s", nameA)
	right := fmt.Sprintf("B %s", nameB)
	fmt.Fprintf(d.w, "  %9s  %-*s%s\n", "ms", diagramWidth+2-len(right), left, right)
}

// frame draws one frame.
func (d *diagram) frame(f traceFrame) { d.draw(f, false) }

// lost draws a frame that never arrived: its arrow stops short with an X.
func (d *diagram) lost(f traceFrame) { d.draw(f, true) }

// skip notes frames left out of the diagram.
func (d *diagram) skip(n int) {
	if n > 0 {
		fmt.Fprintf(d.w, "  %9s  |%*s|\n", "", -diagramWidth, fmt.Sprintf("   ... %d frames ...", n))
	}
}

func (d *diagram) draw(f traceFrame, lost bool) {
	if d.t0.IsZero() {
		d.t0 = f.t
	}
	d.drawn++
	ms := float64(f.t.Sub(d.t0)) / float64(time.Millisecond)
	if err := d.f.Decode(f.data); err != nil {
		fmt.Fprintf(d.w, "  %9.3f  |%s| %v\n", ms, strings.Repeat(" ", diagramWidth), err)
		return
	}
	label := " " + pktfmt.Describe(&d.f) + " "
	if !d.f.VerifyICRC() {
		label += "ICRC BAD "
	}
	toB := d.f.SrcIP() != d.b
	fill := diagramWidth - 3 - len(label) // "-", "->" or "<-", "-"
	if fill < 0 {
		fill = 0
	}
	var line string
	switch {
	case toB && lost:
		line = "|-" + label + strings.Repeat("-", max(fill-1, 0)) + "X  |"
	case toB:
		line = "|-" + label + strings.Repeat("-", fill) + "->|"
	case lost:
		line = "|  X" + strings.Repeat("-", max(fill-1, 0)) + label + "-|"
	default:
		line = "|<-" + strings.Repeat("-", fill) + label + "-|"
	}
	fmt.Fprintf(d.w, "  %9.3f  %s\n", ms, line)
}

// drawFirstNAK draws the first PSN sequence NAK among kept, frames
// between a and b: the request it names as lost (the last one sent with
// that PSN before it), the NAK and the go-back-N retransmission that
// follows.
func drawFirstNAK(w io.Writer, a, b netip.Addr, kept []traceFrame) {
	var f bth.Frame
	for i, k := range kept {
		if f.Decode(k.data) != nil || f.AETH == nil || f.AETH.Syndrome() != bth.NakPSNSeqError {
			continue
		}
		psn, src := f.BTH.PSN(), f.DstIP() // the lost request went the other way
		lost := -1
		for j := i - 1; j >= 0; j-- {
			if f.Decode(kept[j].data) == nil && f.SrcIP() == src && f.Opcode().IsRequest() && f.BTH.PSN() == psn {
				lost = j
				break
			}
		}
		fmt.Fprintf(w, "\n  the first NAK: B saw PSN %d missing (X: it never reached B); A goes back to it:\n", psn)
		d := newDiagram(w, a, b)
		from := max(i-3, 0)
		if lost >= 0 {
			from = max(lost-2, 0)
			d.t0 = kept[from].t
			last := min(lost+2, i-1) // the last frame drawn around the lost one
			for j := from; j <= last; j++ {
				if j == lost {
					d.lost(kept[j])
				} else {
					d.frame(kept[j])
				}
			}
			// Then from the third frame before the NAK, or on at once:
			// never past the NAK (the lost frame may be the one before it).
			from = max(last+1, i-3)
			d.skip(from - (last + 1))
		} else {
			d.t0 = kept[from].t
		}
		// The NAK, then the first retransmission of the lost PSN.
		again := -1
		for j := i + 1; j < len(kept); j++ {
			if f.Decode(kept[j].data) == nil && f.SrcIP() == src && f.Opcode().IsRequest() && f.BTH.PSN() == psn {
				again = j
				break
			}
		}
		if again < 0 {
			for _, k := range kept[from:min(i+6, len(kept))] {
				d.frame(k)
			}
			return
		}
		upto := min(i+2, again)
		for _, k := range kept[from:upto] {
			d.frame(k)
		}
		d.skip(again - upto)
		for _, k := range kept[again:min(again+4, len(kept))] {
			d.frame(k)
		}
		return
	}
	if len(kept) > 0 {
		fmt.Fprintln(w, "\n  no PSN sequence NAK among the frames kept: the losses were recovered by ACK timeouts")
	}
}
