package bth

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// testFrames returns built sample frames and a few captured ones.
func testFrames(t testing.TB) map[string][]byte {
	m := map[string][]byte{}
	for _, s := range samples() {
		m[s.name] = buildSample(t, &s)
	}
	for _, c := range []struct {
		file string
		n    int
	}{{"01_rc_pingpong.pcap", 0}, {"02_ud_pingpong.pcap", 0}, {"05_read_bw_s8192.pcap", 1}, {"06_atomic_bw.pcap", 1}, {"09_rping_rdmacm.pcap", 0}} {
		m[c.file] = readPcap(t, c.file)[c.n]
	}
	return m
}

func TestDecodeTruncated(t *testing.T) {
	var f Frame
	for name, b := range testFrames(t) {
		for i := 0; i < len(b); i++ {
			err := f.Decode(b[:i])
			if err == nil {
				t.Errorf("%s: Decode of %d of %d bytes succeeded", name, i, len(b))
				continue
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Errorf("%s[:%d]: error %v is not a *DecodeError", name, i, err)
			}
		}
		if err := f.Decode(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// uncovered reports whether byte i of a frame is one that neither Decode's
// checks nor the ICRC protect: the MAC addresses, the VLAN TCI, the IPv6
// traffic class, flow label and hop limit, the UDP checksum and BTH byte 4
// (FECN, BECN). The spec masks these out of the ICRC because the network
// may change them; the Ethernet FCS (not part of the frame here) covers them
// on the wire. IPv4 TOS and TTL are masked too but covered by the IPv4
// header checksum, which Decode checks.
func uncovered(f *Frame, i int, bit byte) bool {
	ip := EthernetSize
	if f.VLAN != nil {
		if i == 14 || i == 15 {
			return true
		}
		ip += VLANSize
	}
	if i < 12 {
		return true
	}
	udp := ip + IPv4Size
	if f.IPv6 != nil {
		udp = ip + IPv6Size
		switch {
		case i == ip && bit&0x0f != 0, i > ip && i < ip+4, i == ip+7:
			return true
		}
	}
	return i == udp+6 || i == udp+7 || i == udp+UDPSize+bthFECN
}

func TestDecodeBitFlips(t *testing.T) {
	var f, o Frame
	for name, orig := range testFrames(t) {
		if err := o.Decode(orig); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := o.Len()
		b := append([]byte(nil), orig[:n]...)
		for i := range n {
			for bit := byte(1); bit != 0; bit <<= 1 {
				b[i] ^= bit
				err := f.Decode(b)
				switch free := uncovered(&o, i, bit); {
				case free && err != nil:
					t.Errorf("%s: flip of uncovered byte %d bit %#x: %v", name, i, bit, err)
				case free && !f.VerifyICRC():
					t.Errorf("%s: flip of uncovered byte %d bit %#x fails the ICRC", name, i, bit)
				case !free && err == nil && f.VerifyICRC():
					t.Errorf("%s: flip of byte %d bit %#x decodes and passes the ICRC", name, i, bit)
				}
				b[i] ^= bit
			}
		}
	}
}

// TestDecodeEthernetPadding checks that bytes after the IP packet (the
// padding of short Ethernet frames, or trailers) are ignored.
func TestDecodeEthernetPadding(t *testing.T) {
	for _, s := range samples()[:8] {
		b := buildSample(t, &s)
		padded := append(append([]byte(nil), b...), make([]byte, 17)...)
		var f Frame
		if err := f.Decode(padded); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !f.VerifyICRC() || f.Len() != len(b) || len(f.Payload) != len(s.payload) {
			t.Errorf("%s: padded frame: ICRC ok %v, Len %d want %d, payload %d want %d",
				s.name, f.VerifyICRC(), f.Len(), len(b), len(f.Payload), len(s.payload))
		}
	}
	// An ACK over IPv4 is 62 bytes, the shortest RoCE v2 frame: above the
	// 60 byte minimum, so real frames are never padded.
	s := samples()[8]
	s.ff.VLAN = false
	if b := buildSample(t, &s); len(b) != 62 {
		t.Errorf("IPv4 ACK is %d bytes, want 62", len(b))
	}
}

func TestDecodeErrors(t *testing.T) {
	ss := samples()
	v4 := buildSample(t, &ss[1])  // rc-send-only-v4-pad3 (5 bytes payload, PadCnt 3)
	v6 := buildSample(t, &ss[2])  // rc-send-only-empty-v6
	vl := buildSample(t, &ss[3])  // VLAN, IPv4
	ack := buildSample(t, &ss[8]) // VLAN, IPv4 ACK
	const ip = EthernetSize
	const udp = ip + IPv4Size
	const bth = udp + UDPSize
	const bth6 = EthernetSize + IPv6Size + UDPSize
	mod := func(b []byte, f func([]byte)) []byte {
		c := append([]byte(nil), b...)
		f(c)
		return c
	}
	// fix4 recomputes the IPv4 header checksum after a change.
	fix4 := func(b []byte) { IPv4(b[ip:]).SetChecksum() }
	tests := []struct {
		name   string
		b      []byte
		layer  Layer
		reason Reason
		off    int
	}{
		{"empty", nil, LayerEthernet, ReasonTruncated, 0},
		{"arp", mod(v4, func(b []byte) { b[12], b[13] = 0x08, 0x06 }), LayerEthernet, ReasonEtherType, 12},
		{"qinq", mod(vl, func(b []byte) { b[16], b[17] = 0x81, 0x00 }), LayerEthernet, ReasonEtherType, 16},
		{"vlan truncated", vl[:16], LayerVLAN, ReasonTruncated, 16},
		{"ipv4 version 6", mod(v4, func(b []byte) { b[ip] = 0x65 }), LayerIPv4, ReasonIPVersion, ip},
		{"ipv4 ihl 4", mod(v4, func(b []byte) { b[ip] = 0x44 }), LayerIPv4, ReasonLength, ip},
		{"ipv4 options", mod(v4, func(b []byte) { b[ip] = 0x46; fix4(b) }), LayerIPv4, ReasonIPOptions, ip},
		{"ipv4 total length short", mod(v4, func(b []byte) { binary.BigEndian.PutUint16(b[ip+2:], 19); fix4(b) }), LayerIPv4, ReasonLength, ip + 2},
		{"ipv4 total length long", mod(v4, func(b []byte) { binary.BigEndian.PutUint16(b[ip+2:], uint16(len(b)-ip+1)); fix4(b) }), LayerIPv4, ReasonTruncated, len(v4)},
		{"ipv4 more fragments", mod(v4, func(b []byte) { b[ip+6] |= 0x20; fix4(b) }), LayerIPv4, ReasonFragment, ip + 6},
		{"ipv4 fragment offset", mod(v4, func(b []byte) { b[ip+7] = 1; fix4(b) }), LayerIPv4, ReasonFragment, ip + 6},
		{"ipv4 tcp", mod(v4, func(b []byte) { b[ip+9] = 6; fix4(b) }), LayerIPv4, ReasonNotUDP, ip + 9},
		{"ipv4 checksum", mod(v4, func(b []byte) { b[ip+8]-- }), LayerIPv4, ReasonChecksum, ip + 10},
		{"ipv6 version 4", mod(v6, func(b []byte) { b[ip] = 0x46 }), LayerIPv6, ReasonIPVersion, ip},
		{"ipv6 hop-by-hop", mod(v6, func(b []byte) { b[ip+6] = 0 }), LayerIPv6, ReasonNotUDP, ip + 6},
		{"ipv6 payload length long", mod(v6, func(b []byte) { b[ip+5]++ }), LayerIPv6, ReasonTruncated, len(v6)},
		{"ipv6 mapped source", mod(v6, func(b []byte) { copy(b[ip+8:], netip.MustParseAddr("::ffff:198.18.0.1").AsSlice()) }), LayerIPv6, ReasonAddress, ip + 8},
		{"ipv6 mapped destination", mod(v6, func(b []byte) { copy(b[ip+24:], netip.MustParseAddr("::ffff:198.18.0.1").AsSlice()) }), LayerIPv6, ReasonAddress, ip + 24},
		{"ipv6 truncated", v6[:ip+39], LayerIPv6, ReasonTruncated, ip + 39},
		{"udp length", mod(v4, func(b []byte) { b[udp+5]-- }), LayerUDP, ReasonLength, udp + 4},
		{"udp port", mod(v4, func(b []byte) { b[udp+3]++ }), LayerUDP, ReasonPort, udp + 2},
		{"udp truncated", mod(v4[:udp+7], func(b []byte) { binary.BigEndian.PutUint16(b[ip+2:], IPv4Size+7); fix4(b) }), LayerUDP, ReasonTruncated, udp + 7},
		{"bth truncated", mod(v4[:bth+15], func(b []byte) {
			binary.BigEndian.PutUint16(b[ip+2:], IPv4Size+UDPSize+15)
			binary.BigEndian.PutUint16(b[udp+4:], UDPSize+15)
			fix4(b)
		}), LayerBTH, ReasonTruncated, bth + 15},
		{"tver", mod(v4, func(b []byte) { b[bth+1] |= 1 }), LayerBTH, ReasonTVer, bth + 1},
		{"opcode", mod(v4, func(b []byte) { b[bth] = 0x15 }), LayerBTH, ReasonOpcode, bth},
		{"rd opcode", mod(v4, func(b []byte) { b[bth] = 0x44 }), LayerBTH, ReasonOpcode, bth},
		{"ext truncated", mod(v4, func(b []byte) { b[bth] = byte(RCCompareSwap) }), LayerExt, ReasonTruncated, len(v4)},
		{"padcnt too big", mod(ack, func(b []byte) { b[bth+VLANSize+1] |= 0x30 }), LayerPayload, ReasonPadCnt, bth + VLANSize + BTHSize + AETHSize},
		{"payload on ack", mod(v4, func(b []byte) { b[bth] = byte(RCAck) }), LayerPayload, ReasonPayload, bth + BTHSize + AETHSize},
		{"no payload in send first", mod(v6, func(b []byte) { b[bth6] = byte(RCSendFirst) }), LayerPayload, ReasonPayload, bth6 + BTHSize},
	}
	var f Frame
	for _, tt := range tests {
		err := f.Decode(tt.b)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%s: Decode error = %v, want a *DecodeError", tt.name, err)
			continue
		}
		if de.Layer != tt.layer || de.Reason != tt.reason || de.Offset != tt.off {
			t.Errorf("%s: Decode error = %v (layer %v, reason %v, offset %d), want layer %v, reason %v, offset %d",
				tt.name, err, de.Layer, de.Reason, de.Offset, tt.layer, tt.reason, tt.off)
		}
		if !errors.Is(err, tt.reason) {
			t.Errorf("%s: errors.Is(%v, %v) = false", tt.name, err, tt.reason)
		}
		if f.Eth != nil || f.VLAN != nil || f.IPv4 != nil || f.IPv6 != nil || f.UDP != nil || f.BTH != nil ||
			f.RETH != nil || f.AETH != nil || f.Payload != nil || f.VerifyICRC() {
			t.Errorf("%s: views left after a failed Decode", tt.name)
		}
		// A good frame decodes after a bad one.
		if err := f.Decode(ack); err != nil || !f.VerifyICRC() || f.AETH == nil {
			t.Errorf("%s: good frame after bad: %v", tt.name, err)
		}
		if err := f.Decode(tt.b); err == nil {
			t.Errorf("%s: second Decode succeeded", tt.name)
		}
	}
}

// TestDecodeOddPayloadLength: a frame whose payload+pad is not a multiple
// of four, with consistent IP and UDP lengths.
func TestDecodeOddPayloadLength(t *testing.T) {
	s := samples()[1] // RC SEND_ONLY, 5 bytes + 3 pad
	b := buildSample(t, &s)
	// Drop one pad byte: total transport length 1 short of a multiple of 4.
	b = append(b[:len(b)-ICRCSize-1], b[len(b)-ICRCSize:]...)
	binary.BigEndian.PutUint16(b[EthernetSize+2:], uint16(len(b)-EthernetSize))
	IPv4(b[EthernetSize:]).SetChecksum()
	binary.BigEndian.PutUint16(b[EthernetSize+IPv4Size+4:], uint16(len(b)-EthernetSize-IPv4Size))
	var f Frame
	err := f.Decode(b)
	if !errors.Is(err, ReasonLength) {
		t.Errorf("Decode = %v, want %v", err, ReasonLength)
	}
}

func TestFrameAccessors(t *testing.T) {
	s := samples()[3] // rc-send-last-imm-vlan-v4
	b := buildSample(t, &s)
	var f Frame
	if err := f.Decode(b); err != nil {
		t.Fatal(err)
	}
	if got := f.SrcIP(); got != netip.MustParseAddr("198.18.0.1") {
		t.Errorf("SrcIP = %v", got)
	}
	if got := f.DstIP(); got != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("DstIP = %v", got)
	}
	if got := f.SrcMAC().String(); got != "02:00:00:00:00:01" {
		t.Errorf("SrcMAC = %v", got)
	}
	if got := f.DstMAC().String(); got != "02:00:00:00:00:02" {
		t.Errorf("DstMAC = %v", got)
	}
	if f.VLAN == nil || f.VLAN.ID() != 0x123 || f.VLAN.PCP() != 3 || f.VLAN.DEI() || f.VLAN.EtherType() != EtherTypeIPv4 {
		t.Errorf("VLAN = %x", []byte(f.VLAN))
	}
	if f.Eth.EtherType() != EtherTypeVLAN || f.IsIPv6() || f.Opcode() != RCSendLastImm || f.ImmDt.Imm() != 0xdeadbeef {
		t.Errorf("EtherType %#x IsIPv6 %v Opcode %v Imm %#x", f.Eth.EtherType(), f.IsIPv6(), f.Opcode(), f.ImmDt.Imm())
	}
	if f.IPv4.TTL() != 64 || f.IPv4.TOS() != 2 || f.IPv4.ID() != 0x1234 || f.IPv4.Protocol() != ProtocolUDP || f.IPv4.Version() != 4 || f.IPv4.IHL() != 5 || f.IPv4.MF() || f.IPv4.FragOff() != 0 {
		t.Errorf("IPv4 header %x", []byte(f.IPv4))
	}
	s6 := samples()[2]
	if err := f.Decode(buildSample(t, &s6)); err != nil {
		t.Fatal(err)
	}
	if f.SrcIP() != netip.MustParseAddr("2001:db8::1") || f.DstIP() != netip.MustParseAddr("2001:db8::2") ||
		f.IPv6.FlowLabel() != 0xabcde || f.IPv6.TrafficClass() != 0x68 || f.IPv6.HopLimit() != 1 || f.IPv6.NextHeader() != ProtocolUDP {
		t.Errorf("IPv6 header %x", []byte(f.IPv6))
	}
}

// TestBuildIPv4MappedGID: RoCE v2 GIDs of IPv4 ports are ::ffff:a.b.c.d;
// building with them gives IPv4 frames.
func TestBuildIPv4MappedGID(t *testing.T) {
	s := samples()[1]
	s.ff.SrcIP = netip.MustParseAddr("::ffff:198.18.0.1")
	want := buildSample(t, &samples()[1])
	if got := buildSample(t, &s); string(got) != string(want) {
		t.Errorf("frame with mapped source differs:\n got %x\nwant %x", got, want)
	}
}

func TestAllocs(t *testing.T) {
	ss := samples()
	good := buildSample(t, &ss[0])
	bad := append([]byte(nil), good...)
	bad[EthernetSize+IPv4Size+2]++ // wrong UDP port
	var f Frame
	if n := testing.AllocsPerRun(100, func() {
		if f.Decode(good) != nil || !f.VerifyICRC() {
			panic("decode failed")
		}
	}); n != 0 {
		t.Errorf("Decode+VerifyICRC: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if f.Decode(bad) == nil {
			panic("decode succeeded")
		}
	}); n != 0 {
		t.Errorf("Decode of a bad frame: %v allocs, want 0", n)
	}
	for _, s := range ss {
		buf := make([]byte, s.ff.FrameLen(len(s.payload)))
		copy(buf[s.ff.HeaderLen():], s.payload)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := BuildInPlace(buf, &s.ff, len(s.payload)); err != nil {
				panic(err)
			}
		}); n != 0 {
			t.Errorf("%s: BuildInPlace: %v allocs, want 0", s.name, n)
		}
		if n := testing.AllocsPerRun(100, func() {
			if _, err := Build(buf, &s.ff, s.payload); err != nil {
				panic(err)
			}
		}); n != 0 {
			t.Errorf("%s: Build: %v allocs, want 0", s.name, n)
		}
	}
	var ff FrameFields
	if n := testing.AllocsPerRun(100, func() {
		_ = f.Decode(good)
		f.Fields(&ff)
		_, _ = f.SrcIP(), f.DstIP()
		_, _ = f.SrcMAC(), f.DstMAC()
	}); n != 0 {
		t.Errorf("Fields and address helpers: %v allocs, want 0", n)
	}
}

// TestFrameReuse decodes frames of every kind one after another into the
// same Frame: no view of an earlier frame may survive.
func TestFrameReuse(t *testing.T) {
	ss := samples()
	frames := make([][]byte, len(ss))
	for i := range ss {
		frames[i] = buildSample(t, &ss[i])
	}
	var f Frame
	for round := range 3 {
		for i := range frames {
			j := (i*7 + round) % len(frames)
			if err := f.Decode(frames[j]); err != nil {
				t.Fatalf("%s: %v", ss[j].name, err)
			}
			checkInvariants(t, &f, frames[j])
			if !f.VerifyICRC() {
				t.Fatalf("%s: ICRC", ss[j].name)
			}
		}
	}
}
