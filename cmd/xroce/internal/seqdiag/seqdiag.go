// Package seqdiag draws RoCE v2 frames between two hosts as a text sequence
// diagram, one arrow a frame labelled by pktfmt.Describe, and the first PSN
// sequence NAK of a lossy exchange with the request it names and the
// go-back-N retransmission that follows.
//
// It is a package below the tools because lab draws its tour and loss phase
// with it and conform the frames of each check; it imports no tool.
package seqdiag

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/pktfmt"
)

// A Frame is a frame kept for the sequence diagram: when it was seen and
// its bytes.
type Frame struct {
	Time time.Time
	Data []byte
}

// A Diagram draws frames between two hosts as a sequence diagram: A's
// frames as arrows to the right, B's to the left, one line each with the
// time since the first frame drawn.
type Diagram struct {
	w     io.Writer
	a, b  netip.Addr
	t0    time.Time
	f     bth.Frame
	Drawn int // frames drawn so far
}

// diagramWidth is the number of columns between the two lifelines.
const diagramWidth = 78

// New returns a diagram of frames between a and b, written to w.
func New(w io.Writer, a, b netip.Addr) *Diagram {
	return &Diagram{w: w, a: a, b: b}
}

// Header prints the two lifelines' names.
func (d *Diagram) Header(nameA, nameB string) {
	left := fmt.Sprintf("A %s", nameA)
	right := fmt.Sprintf("B %s", nameB)
	fmt.Fprintf(d.w, "  %9s  %-*s%s\n", "ms", diagramWidth+2-len(right), left, right)
}

// Frame draws one frame.
func (d *Diagram) Frame(f Frame) { d.draw(f, false) }

// lost draws a frame that never arrived: its arrow stops short with an X.
func (d *Diagram) lost(f Frame) { d.draw(f, true) }

// Skip notes frames left out of the diagram.
func (d *Diagram) Skip(n int) {
	if n > 0 {
		fmt.Fprintf(d.w, "  %9s  |%*s|\n", "", -diagramWidth, fmt.Sprintf("   ... %d frames ...", n))
	}
}

func (d *Diagram) draw(f Frame, lost bool) {
	if d.t0.IsZero() {
		d.t0 = f.Time
	}
	d.Drawn++
	ms := float64(f.Time.Sub(d.t0)) / float64(time.Millisecond)
	if err := d.f.Decode(f.Data); err != nil {
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

// DrawFirstNAK draws the first PSN sequence NAK among kept, frames
// between a and b: the request it names as lost (the last one sent with
// that PSN before it), the NAK and the go-back-N retransmission that
// follows.
func DrawFirstNAK(w io.Writer, a, b netip.Addr, kept []Frame) {
	var f bth.Frame
	for i, k := range kept {
		if f.Decode(k.Data) != nil || f.AETH == nil || f.AETH.Syndrome() != bth.NakPSNSeqError {
			continue
		}
		psn, src := f.BTH.PSN(), f.DstIP() // the lost request went the other way
		lost := -1
		for j := i - 1; j >= 0; j-- {
			if f.Decode(kept[j].Data) == nil && f.SrcIP() == src && f.Opcode().IsRequest() && f.BTH.PSN() == psn {
				lost = j
				break
			}
		}
		fmt.Fprintf(w, "\n  the first NAK: B saw PSN %d missing (X: it never reached B); A goes back to it:\n", psn)
		d := New(w, a, b)
		from := max(i-3, 0)
		if lost >= 0 {
			from = max(lost-2, 0)
			d.t0 = kept[from].Time
			last := min(lost+2, i-1) // the last frame drawn around the lost one
			for j := from; j <= last; j++ {
				if j == lost {
					d.lost(kept[j])
				} else {
					d.Frame(kept[j])
				}
			}
			// Then from the third frame before the NAK, or on at once:
			// never past the NAK (the lost frame may be the one before it).
			from = max(last+1, i-3)
			d.Skip(from - (last + 1))
		} else {
			d.t0 = kept[from].Time
		}
		// The NAK, then the first retransmission of the lost PSN.
		again := -1
		for j := i + 1; j < len(kept); j++ {
			if f.Decode(kept[j].Data) == nil && f.SrcIP() == src && f.Opcode().IsRequest() && f.BTH.PSN() == psn {
				again = j
				break
			}
		}
		if again < 0 {
			for _, k := range kept[from:min(i+6, len(kept))] {
				d.Frame(k)
			}
			return
		}
		upto := min(i+2, again)
		for _, k := range kept[from:upto] {
			d.Frame(k)
		}
		d.Skip(again - upto)
		for _, k := range kept[again:min(again+4, len(kept))] {
			d.Frame(k)
		}
		return
	}
	if len(kept) > 0 {
		fmt.Fprintln(w, "\n  no PSN sequence NAK among the frames kept: the losses were recovered by ACK timeouts")
	}
}
