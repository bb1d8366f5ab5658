package bpf

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/cilium/ebpf"
)

// withECN returns a copy of frame with its IP header's ECN bits set to ecn
// (and, for IPv4, a correct header checksum), and the IP header's offset.
func withECN(frame []byte, ecn byte) ([]byte, int) {
	b := bytes.Clone(frame)
	off := 14
	if binary.BigEndian.Uint16(b[12:]) == ethVLAN {
		off += 4
	}
	if b[off]>>4 == 4 {
		b[off+1] = b[off+1]&^3 | ecn
		binary.BigEndian.PutUint16(b[off+10:], 0)
		binary.BigEndian.PutUint16(b[off+10:], ^ipSum(b[off:off+20]))
	} else {
		b[off+1] = b[off+1]&^0x30 | ecn<<4
	}
	return b, off
}

// ipSum is the folded ones' complement sum of an IPv4 header.
func ipSum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// ecnOf returns the ECN bits of the IP header at off.
func ecnOf(b []byte, off int) byte {
	if b[off]>>4 == 4 {
		return b[off+1] & 3
	}
	return b[off+1] >> 4 & 3
}

// runOut runs the program on frame and returns its verdict and the frame as
// the program left it.
func runOut(t *testing.T, p *Program, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := p.prog.Run(opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// TestMarkCE: with marking at 1, every ECN-capable RoCE frame leaves CE
// with a correct IPv4 checksum and nothing else changed; Not-ECT and CE
// frames, and frames that are not RoCE, are untouched; the counter counts
// the marks.
func TestMarkCE(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadT(t, v.opts)
			if err := p.SetSocket(0, xskT(t)); err != nil {
				t.Fatal(err)
			}
			if err := p.SetMarkCE(1); err != nil {
				t.Fatal(err)
			}
			if p.MarkCE() != 1 || p.Loss() != 0 {
				t.Fatalf("MarkCE() %v Loss() %v after SetMarkCE(1)", p.MarkCE(), p.Loss())
			}
			marks := uint64(0)
			for _, f := range [][]byte{roce4(16), roce6(16), roceVLAN4(16), roceVLAN6(16)} {
				for ecn, want := range []byte{0, 3, 3, 3} { // Not-ECT, ECT(1), ECT(0), CE
					in, off := withECN(f, byte(ecn))
					verdict, out := runOut(t, p, in)
					if verdict != XDPRedirect {
						t.Fatalf("verdict %s, want XDP_REDIRECT", verdictName(verdict))
					}
					if got := ecnOf(out, off); got != want {
						t.Errorf("ECN %02b in: %02b out, want %02b", ecn, got, want)
					}
					if in[off]>>4 == 4 && ipSum(out[off:off+20]) != 0xffff {
						t.Errorf("ECN %02b: IPv4 checksum wrong after marking: % x", ecn, out[off:off+20])
					}
					// Nothing but the ECN bits (and the checksum) changed.
					diff := 0
					for i := range in {
						if in[i] != out[i] {
							diff++
						}
					}
					if max := map[bool]int{false: 0, true: 3}[ecn == 1 || ecn == 2]; diff > max {
						t.Errorf("ECN %02b: %d bytes changed", ecn, diff)
					}
					if ecn == 1 || ecn == 2 {
						marks++
					}
				}
			}
			// Not RoCE: passed as is.
			for _, c := range verdictCases() {
				if c.redirect {
					continue
				}
				if verdict, out := runOut(t, p, c.frame); verdict != XDPPass || !bytes.Equal(out, c.frame) {
					t.Errorf("%s: verdict %s, changed %v", c.name, verdictName(verdict), !bytes.Equal(out, c.frame))
				}
			}
			if c := countersT(t, p); c.MarkedCE != marks || c.InjectedDrops != 0 {
				t.Errorf("Counters() = %+v, want %d marked", c, marks)
			}
			// Loss comes first: a dropped frame is not marked.
			if err := p.SetLoss(1); err != nil {
				t.Fatal(err)
			}
			in, _ := withECN(roce4(16), 2)
			if verdict, _ := runOut(t, p, in); verdict != XDPDrop {
				t.Errorf("loss 1 and marking 1: verdict %s, want XDP_DROP", verdictName(verdict))
			}
			if c := countersT(t, p); c.MarkedCE != marks || p.MarkCE() != 1 {
				t.Errorf("a dropped frame was counted marked, or SetLoss lost the marking: %+v, MarkCE %v", c, p.MarkCE())
			}
		})
	}
}

// TestMarkCEBinomial: at 0.1 and 0.5, the marks are binomial.
func TestMarkCEBinomial(t *testing.T) {
	const n = 10000
	p := loadT(t, Options{})
	if err := p.SetSocket(0, xskT(t)); err != nil {
		t.Fatal(err)
	}
	in, off := withECN(roce4(16), 2)
	for _, prob := range []float64{0, 0.1, 0.5} {
		if err := p.SetMarkCE(prob); err != nil {
			t.Fatal(err)
		}
		marked := 0
		for range n {
			if _, out := runOut(t, p, in); ecnOf(out, off) == 3 {
				marked++
			}
		}
		checkBinomial(t, "marks", marked, n, prob)
	}
}

func TestSetMarkCEErrors(t *testing.T) {
	p := loadT(t, Options{})
	if err := p.SetMarkCE(0.25); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if err := p.SetMarkCE(bad); err == nil {
			t.Errorf("SetMarkCE(%v) succeeded", bad)
		}
	}
	if p.MarkCE() != 0.25 {
		t.Errorf("MarkCE() = %v after failed calls, want 0.25", p.MarkCE())
	}
	p.Close()
	if err := p.SetMarkCE(0.5); err == nil {
		t.Error("SetMarkCE on a closed program succeeded")
	}
}
