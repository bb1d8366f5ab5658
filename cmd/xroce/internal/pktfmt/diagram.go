package pktfmt

import (
	"fmt"
	"io"
	"strings"
)

// A Field is one header field for a bit diagram: its name as the IBTA spec
// writes it, its width in bits and the value it holds.
type Field struct {
	Name  string
	Bits  int
	Value uint64
	Hex   bool // print the value in hex
}

// DrawHeader writes a header as the spec draws it: rows of 32 bits, each
// field a box holding its name and value, the way RFCs and the IBTA
// specification lay out packet formats. Fields wider than a row are split
// across rows, the top bits first.
func DrawHeader(w io.Writer, title string, fields []Field) {
	const row = 32
	fmt.Fprintf(w, "  %s\n", title)
	fmt.Fprintln(w, "   0                   1                   2                   3")
	fmt.Fprintln(w, "   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1")
	border := "  +" + strings.Repeat("-+", row)
	fmt.Fprintln(w, border)
	var line strings.Builder
	used := 0
	flush := func() {
		if used == 0 {
			return
		}
		fmt.Fprintf(w, "  |%s\n", line.String())
		fmt.Fprintln(w, border)
		line.Reset()
		used = 0
	}
	for _, f := range fields {
		remaining := f.Bits
		part := 0
		for remaining > 0 {
			take := min(remaining, row-used)
			// The bits of f.value this piece shows: the top ones first.
			shift := remaining - take
			v := f.Value >> uint(shift)
			if take < 64 {
				v &= 1<<uint(take) - 1
			}
			name := f.Name
			if f.Bits > take || part > 0 {
				name = fmt.Sprintf("%s[%d:%d]", f.Name, shift+take-1, shift)
			}
			line.WriteString(cell(name, v, take, f.Hex))
			line.WriteByte('|')
			used += take
			remaining -= take
			part++
			if used == row {
				flush()
			}
		}
	}
	flush()
}

// cell renders one box of a diagram: 2*bits-1 characters, centred.
func cell(name string, v uint64, bits int, hex bool) string {
	width := 2*bits - 1
	val := fmt.Sprint(v)
	if hex {
		digits := (bits + 3) / 4
		val = fmt.Sprintf("0x%0*x", digits, v)
	}
	text := name + " " + val
	if len(text) > width {
		text = val
	}
	if len(text) > width && hex {
		text = fmt.Sprintf("%x", v)
	}
	if len(text) > width {
		text = text[:width]
	}
	pad := width - len(text)
	return strings.Repeat(" ", pad/2) + text + strings.Repeat(" ", pad-pad/2)
}
