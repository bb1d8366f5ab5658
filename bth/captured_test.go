package bth

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestDecodeCapturedHeaderOnly cuts every captured rxe frame at every
// length: cut after the headers, DecodeCaptured gives the same headers as
// Decode of the whole frame and no ICRC; cut inside a header, it names that
// header with ReasonCut. Decode still rejects every cut frame.
func TestDecodeCapturedHeaderOnly(t *testing.T) {
	var whole, cut Frame
	for _, name := range pcapNames(t) {
		for i, b := range readPcap(t, name) {
			if err := whole.Decode(b); err != nil {
				t.Fatalf("%s #%d: %v", name, i+1, err)
			}
			hdrEnd := whole.Len() - ICRCSize - whole.PadLen - len(whole.Payload)
			for n := EthernetSize + IPv4Size; n < whole.Len(); n++ {
				err := cut.DecodeCaptured(b[:n])
				if n < hdrEnd {
					var de *DecodeError
					if !errors.As(err, &de) || de.Reason != ReasonCut || de.Offset != n {
						t.Fatalf("%s #%d cut at %d (headers end at %d): %v, want ReasonCut at %d", name, i+1, n, hdrEnd, err, n)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s #%d cut at %d: %v", name, i+1, n, err)
				}
				if !cut.HeaderOnly() || cut.VerifyICRC() || cut.ICRC != 0 || cut.ComputeICRC() != 0 {
					t.Fatalf("%s #%d cut at %d: HeaderOnly %v VerifyICRC %v", name, i+1, n, cut.HeaderOnly(), cut.VerifyICRC())
				}
				if string(cut.BTH) != string(whole.BTH) || cut.Opcode() != whole.Opcode() ||
					cut.Opcode().Headers() != whole.Opcode().Headers() || cut.PadLen != whole.PadLen {
					t.Fatalf("%s #%d cut at %d: headers differ", name, i+1, n)
				}
				if want := min(len(whole.Payload), n-hdrEnd); len(cut.Payload) != want {
					t.Fatalf("%s #%d cut at %d: %d payload bytes, want %d", name, i+1, n, len(cut.Payload), want)
				}
				if err := whole.Decode(b[:n]); !errors.Is(err, ReasonTruncated) {
					t.Fatalf("%s #%d cut at %d: Decode = %v, want truncated", name, i+1, n, err)
				}
				if err := whole.Decode(b); err != nil {
					t.Fatal(err)
				}
			}
			// The whole frame decodes as Decode does.
			if err := cut.DecodeCaptured(b); err != nil || cut.HeaderOnly() || !cut.VerifyICRC() {
				t.Fatalf("%s #%d whole: %v HeaderOnly %v", name, i+1, err, cut.HeaderOnly())
			}
		}
	}
}

// TestSrcPortForICRC rewrites the source port of real rxe frames to 4791,
// as the RDMA sniffer does, and finds the original port again.
func TestSrcPortForICRC(t *testing.T) {
	var f Frame
	for _, name := range pcapNames(t) {
		for i, b := range readPcap(t, name)[:3] {
			b = append([]byte(nil), b...)
			if err := f.DecodeCaptured(b); err != nil {
				t.Fatal(err)
			}
			orig := f.UDP.SrcPort()
			if f.ICRCWithSrcPort(orig) != f.ICRC {
				t.Fatalf("%s #%d: ICRCWithSrcPort(own port) = %#x, want %#x", name, i+1, f.ICRCWithSrcPort(orig), f.ICRC)
			}
			binary.BigEndian.PutUint16(f.UDP, UDPPort)
			if f.VerifyICRC() {
				t.Fatalf("%s #%d: ICRC still matches after the port changed", name, i+1)
			}
			if p, ok := f.SrcPortForICRC(0xc000, 0xffff); !ok || p != orig {
				t.Errorf("%s #%d: SrcPortForICRC = %#x, %v; want %#x", name, i+1, p, ok, orig)
			}
			if p, ok := f.SrcPortForICRC(0xc000, orig-1); ok {
				t.Errorf("%s #%d: found port %#x below the original %#x", name, i+1, p, orig)
			}
		}
	}
}

func TestDecodeCapturedAllocs(t *testing.T) {
	b := readPcap(t, "04_write_bw_s8192.pcap")[0]
	b = append([]byte(nil), b...)
	binary.BigEndian.PutUint16(b[EthernetSize+IPv4Size:], UDPPort)
	var f Frame
	if n := testing.AllocsPerRun(20, func() {
		if err := f.DecodeCaptured(b); err != nil {
			t.Fatal(err)
		}
		if _, ok := f.SrcPortForICRC(0xc000, 0xffff); !ok {
			t.Fatal("no port")
		}
		_ = f.DecodeCaptured(b[:100])
	}); n != 0 {
		t.Errorf("DecodeCaptured and SrcPortForICRC: %v allocations", n)
	}
}

// hwFrames returns the frames of a ConnectX capture in ../shared/pcaps-hw
// (kept outside the repository), or skips.
func hwFrames(t *testing.T, name string) [][]byte {
	t.Helper()
	dir, err := filepath.Abs("../../shared/pcaps-hw")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, name))
	}
	if err != nil {
		t.Skipf("hardware captures (kept outside the repository) not found: %v", err)
	}
	return readPcapFile(t, filepath.Join(dir, name))
}

// TestDecodeCapturedHardware reads the ConnectX captures of RoCE v1, DC and
// the RDMA sniffer: every ICRC matches (with the original source port where
// the sniffer rewrote it), and Decode still rejects v1 and DC.
func TestDecodeCapturedHardware(t *testing.T) {
	for _, tc := range []struct {
		name      string
		v1, dc    int
		snifferTo map[uint16]int // packets per original source port
	}{
		{"rocev1.pcap", 2468, 0, nil},
		{"rocev1_test.pcap", 323, 0, nil},
		{"dc-small.pcap", 0, 19, map[uint16]int{0xf7fc: 12, 0xd079: 7}},
		{"dc-small2.pcap", 0, 29, map[uint16]int{0xf018: 29}},
		{"rc-small.pcap", 0, 0, map[uint16]int{0xd0b3: 21}},
		{"uc-sg.pcap", 0, 0, map[uint16]int{0xe1be: 17}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f, strict Frame
			v1, dc := 0, 0
			ports := map[uint16]int{}
			for i, b := range hwFrames(t, tc.name) {
				if err := f.DecodeCaptured(b); err != nil {
					t.Fatalf("#%d: %v", i+1, err)
				}
				if f.IsRoCEv1() || f.IsDC() {
					if err := strict.Decode(b); err == nil {
						t.Errorf("#%d: Decode accepts a v1 or DC frame", i+1)
					}
				}
				if f.IsRoCEv1() {
					v1++
				}
				if f.IsDC() {
					dc++
					if len(f.DCETH) != DCETHSize || len(f.RDETH) != RDETHSize || f.DETH == nil || DCName(f.Opcode()) != f.OpcodeName() {
						t.Errorf("#%d: DC views %d %d %v, name %q", i+1, len(f.DCETH), len(f.RDETH), f.DETH != nil, f.OpcodeName())
					}
				}
				if f.VerifyICRC() {
					continue
				}
				p, ok := f.SrcPortForICRC(0xc000, 0xffff)
				if !ok || f.UDP.SrcPort() != UDPPort {
					t.Errorf("#%d: bad ICRC %#x (computed %#x), no source port matches", i+1, f.ICRC, f.ComputeICRC())
				}
				ports[p]++
			}
			if v1 != tc.v1 || dc != tc.dc {
				t.Errorf("%d RoCE v1, %d DC; want %d, %d", v1, dc, tc.v1, tc.dc)
			}
			if len(ports) != len(tc.snifferTo) {
				t.Errorf("original source ports %v, want %v", ports, tc.snifferTo)
			}
			for p, n := range tc.snifferTo {
				if ports[p] != n {
					t.Errorf("original source ports %v, want %v", ports, tc.snifferTo)
				}
			}
		})
	}
}

// TestDecodeCapturedDCLayout checks the DC headers of dc-small2: a write
// (DETH and RETH after the RDETH), the NAK that asks for a RESYNC and the
// RESYNC carrying perftest's DC key.
func TestDecodeCapturedDCLayout(t *testing.T) {
	frames := hwFrames(t, "dc-small2.pcap")
	var f Frame
	for _, tc := range []struct {
		n      int
		name   string
		check  func() bool
		detail string
	}{
		{1, "DC ACKNOWLEDGE", func() bool { return f.AETH.Syndrome() == 0x64 && f.RDETH.EEContext() == 0x61e97d }, "AETH NAK 0x64 (invalid RD request)"},
		{2, "DC ACKNOWLEDGE", func() bool { return f.AETH.Syndrome() == 0x1f && f.DETH.QKey() == 0xc0de }, "AETH ACK 0x1f"},
		{3, "DC RESYNC", func() bool { return binary.BigEndian.Uint32(f.Payload[12:]) == 0xffeeddcc }, "payload ends with perftest's DC key 0xffeeddcc"},
		{4, "DC RDMA_WRITE_FIRST", func() bool { return f.RETH.DMALen() == 262144 && f.BTH.DestQP() == 0x807ff4 }, "RETH dlen 262144"},
	} {
		if err := f.DecodeCaptured(frames[tc.n-1]); err != nil {
			t.Fatalf("#%d: %v", tc.n, err)
		}
		if f.OpcodeName() != tc.name || !tc.check() {
			t.Errorf("#%d: %s, want %s with %s", tc.n, f.OpcodeName(), tc.name, tc.detail)
		}
	}
}

func TestDecodeCapturedErrors(t *testing.T) {
	b := readPcap(t, "02_ud_pingpong.pcap")[0]
	v1 := func(mod func([]byte)) []byte {
		// A RoCE v1 frame made from the v2 one: a GRH instead of IPv4 and UDP.
		const ip = EthernetSize
		hdr := IPv4Size + UDPSize
		out := make([]byte, len(b)-hdr+GRHSize)
		copy(out, b[:ip])
		binary.BigEndian.PutUint16(out[12:], EtherTypeRoCEv1)
		g := out[ip : ip+GRHSize]
		g[0] = 0x60
		binary.BigEndian.PutUint16(g[4:], uint16(len(b)-ip-hdr))
		g[6] = GRHNextHeaderBTH
		copy(out[ip+GRHSize:], b[ip+hdr:])
		mod(out)
		return out
	}
	for _, tc := range []struct {
		name   string
		b      []byte
		layer  Layer
		reason Reason
		off    int
	}{
		{"grh cut", v1(func([]byte) {})[:EthernetSize+30], LayerGRH, ReasonCut, EthernetSize + 30},
		{"grh version", v1(func(b []byte) { b[EthernetSize] = 0x40 }), LayerGRH, ReasonIPVersion, EthernetSize},
		{"grh next header", v1(func(b []byte) { b[EthernetSize+6] = 17 }), LayerGRH, ReasonNextHeader, EthernetSize + 6},
		{"bth cut", b[:EthernetSize+IPv4Size+UDPSize+5], LayerBTH, ReasonCut, EthernetSize + IPv4Size + UDPSize + 5},
		{"deth cut", b[:EthernetSize+IPv4Size+UDPSize+BTHSize+3], LayerExt, ReasonCut, EthernetSize + IPv4Size + UDPSize + BTHSize + 3},
		{"udp cut", b[:EthernetSize+IPv4Size+3], LayerUDP, ReasonCut, EthernetSize + IPv4Size + 3},
	} {
		var f Frame
		err := f.DecodeCaptured(tc.b)
		var de *DecodeError
		if !errors.As(err, &de) || de.Layer != tc.layer || de.Reason != tc.reason || de.Offset != tc.off {
			t.Errorf("%s: %v, want %v %v at %d", tc.name, err, tc.layer, tc.reason, tc.off)
		}
		if f.GRH != nil || f.BTH != nil || f.HeaderOnly() {
			t.Errorf("%s: views left after an error", tc.name)
		}
	}
	// The v1 frame made above decodes and its ICRC is computed the v1 way
	// (the v2 ICRC it carries does not match).
	var f Frame
	if err := f.DecodeCaptured(v1(func([]byte) {})); err != nil || !f.IsRoCEv1() || f.UDP != nil || f.VerifyICRC() {
		t.Errorf("synthetic v1 frame: %v, v1 %v", err, f.IsRoCEv1())
	}
	// A stale v1 or DC view never survives a Decode.
	if err := f.Decode(b); err != nil || f.GRH != nil || f.RDETH != nil || f.HeaderOnly() {
		t.Errorf("Decode after DecodeCaptured: %v, stale views", err)
	}
}

// FuzzDecodeCaptured feeds arbitrary frames, whole and cut, to
// DecodeCaptured: it may fail, never panic, and what it accepts has its
// views inside the frame and an ICRC that can be computed and searched.
func FuzzDecodeCaptured(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		if err := fr.DecodeCaptured(b); err != nil {
			return
		}
		if fr.BTH == nil || len(fr.BTH) != BTHSize || (fr.GRH == nil) == (fr.UDP == nil) {
			t.Fatalf("views: bth %d grh %v udp %v", len(fr.BTH), fr.GRH != nil, fr.UDP != nil)
		}
		if fr.IsDC() && (len(fr.DCETH) != DCETHSize || len(fr.RDETH) != RDETHSize || DCName(fr.Opcode()) == "") {
			t.Fatalf("DC views %d %d", len(fr.DCETH), len(fr.RDETH))
		}
		if fr.HeaderOnly() && (fr.VerifyICRC() || fr.ICRC != 0) {
			t.Fatal("header-only frame with an ICRC")
		}
		_ = fr.VerifyICRC()
		_, _ = fr.SrcPortForICRC(0xfff0, 0xffff)
		_ = fr.OpcodeName()
		// A prefix is either rejected or header-only.
		if n := len(fr.Packet()); n > 0 {
			var cut Frame
			if err := cut.DecodeCaptured(b[:len(b)-1]); err == nil && !cut.HeaderOnly() && len(b)-1 < fr.Len() {
				t.Fatalf("cut frame not header-only")
			}
		}
	})
}
