package bth

import (
	"testing"
)

// setECN rewrites the ECN bits of a decoded frame in place, keeping its
// DSCP, and fixes the IPv4 header checksum.
func setECN(f *Frame, e ECN) {
	if f.IPv4 != nil {
		f.IPv4.SetTOS(f.IPv4.TOS()&^3 | uint8(e))
	} else {
		f.IPv6.SetTrafficClass(f.IPv6.TrafficClass()&^3 | uint8(e))
	}
}

// TestECNKeepsICRC rewrites the ECN field of built frames and of the rxe
// captures to each codepoint: the frame still decodes (IPv4 checksum) and
// its ICRC still verifies, since the ICRC masks the TOS byte (IBTA Vol 1
// Annex A17.4.1; rxe_icrc.c sets it to ones). A switch that marks CE, or a
// sender that marks ECT, leaves the ICRC alone: rxe accepts both.
func TestECNKeepsICRC(t *testing.T) {
	var frames [][]byte
	var names []string
	ss := samples()
	for i := range ss {
		frames = append(frames, buildSample(t, &ss[i]))
		names = append(names, ss[i].name)
	}
	for _, p := range []string{"01_rc_pingpong.pcap", "07_send_bw_s4096.pcap", "08_uc_write_bw_s1500.pcap"} {
		for i, b := range readPcap(t, p) {
			if i >= 50 {
				break
			}
			frames = append(frames, b)
			names = append(names, p)
		}
	}
	var f Frame
	checked := 0
	for i, b := range frames {
		if err := f.Decode(b); err != nil || !f.VerifyICRC() {
			continue // not RoCE (ARP, CM over TCP) in a capture
		}
		checked++
		for _, e := range []ECN{ECT0, ECT1, CE, NotECT} {
			setECN(&f, e)
			if err := f.Decode(b); err != nil {
				t.Fatalf("%s frame %d with %v: %v", names[i], i, e, err)
			}
			if f.ECN() != e {
				t.Fatalf("%s frame %d: ECN %v, want %v", names[i], i, f.ECN(), e)
			}
			if !f.VerifyICRC() {
				t.Errorf("%s frame %d: ICRC fails with %v", names[i], i, e)
			}
		}
	}
	if checked < len(ss)+100 {
		t.Errorf("checked %d frames, want at least %d", checked, len(ss)+100)
	}
}

func TestMarkCE(t *testing.T) {
	ss := samples()
	for i := range ss {
		s := &ss[i]
		for _, tc := range []struct {
			from, want ECN
			marked     bool
		}{
			{NotECT, NotECT, false}, {ECT0, CE, true}, {ECT1, CE, true}, {CE, CE, false},
		} {
			s.ff.TOS = 26<<2 | uint8(tc.from)
			b := buildSample(t, s)
			if got := MarkCE(b); got != tc.marked {
				t.Errorf("%s: MarkCE(%v) = %v, want %v", s.name, tc.from, got, tc.marked)
			}
			var f Frame
			if err := f.Decode(b); err != nil {
				t.Fatalf("%s: after MarkCE(%v): %v", s.name, tc.from, err)
			}
			tos := f.ECN()
			if tos != tc.want {
				t.Errorf("%s: ECN after MarkCE(%v) = %v, want %v", s.name, tc.from, tos, tc.want)
			}
			var ff FrameFields
			f.Fields(&ff)
			if DSCPOf(ff.TOS) != 26 {
				t.Errorf("%s: DSCP after MarkCE = %d, want 26", s.name, DSCPOf(ff.TOS))
			}
			if !f.VerifyICRC() {
				t.Errorf("%s: ICRC fails after MarkCE(%v)", s.name, tc.from)
			}
		}
	}
	// Truncated frames are left alone, without a panic.
	s := &ss[0]
	s.ff.TOS = uint8(ECT0)
	b := buildSample(t, s)
	for n := range EthernetSize + IPv4Size {
		c := append([]byte(nil), b[:n]...)
		if MarkCE(c) {
			t.Errorf("MarkCE marked a frame cut to %d bytes", n)
		}
	}
}

func TestECNString(t *testing.T) {
	for e, want := range map[ECN]string{NotECT: "Not-ECT", ECT1: "ECT(1)", ECT0: "ECT(0)", CE: "CE", 7: "ECN(7)"} {
		if e.String() != want {
			t.Errorf("ECN(%d).String() = %q, want %q", uint8(e), e.String(), want)
		}
	}
}
