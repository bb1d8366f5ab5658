package bth

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// fuzzSeeds adds the built samples and one captured frame of each kind.
func fuzzSeeds(f *testing.F) {
	for _, s := range samples() {
		f.Add(buildSample(f, &s))
	}
	seen := map[Opcode]bool{}
	for _, name := range pcapNames(f) {
		for _, b := range readPcap(f, name) {
			if len(b) > 20 && !seen[Opcode(b[EthernetSize+IPv4Size+UDPSize])] {
				seen[Opcode(b[EthernetSize+IPv4Size+UDPSize])] = true
				f.Add(b)
			}
		}
	}
}

// checkInvariants checks what a successful Decode promises.
func checkInvariants(t *testing.T, f *Frame, b []byte) {
	n := f.Len()
	if n > len(b) || n < EthernetSize+IPv4Size+UDPSize+BTHSize+ICRCSize {
		t.Fatalf("Len %d for %d bytes", n, len(b))
	}
	if len(f.Eth) != EthernetSize || len(f.UDP) != UDPSize || len(f.BTH) != BTHSize {
		t.Fatalf("view sizes eth %d udp %d bth %d", len(f.Eth), len(f.UDP), len(f.BTH))
	}
	if (f.IPv4 == nil) == (f.IPv6 == nil) || (f.IPv4 != nil && len(f.IPv4) != IPv4Size) || (f.IPv6 != nil && len(f.IPv6) != IPv6Size) {
		t.Fatalf("IP views %d %d", len(f.IPv4), len(f.IPv6))
	}
	if f.VLAN != nil && len(f.VLAN) != VLANSize {
		t.Fatalf("VLAN view %d", len(f.VLAN))
	}
	op := f.BTH.Opcode()
	if !op.Known() || f.BTH.TVer() != 0 || f.UDP.DstPort() != UDPPort {
		t.Fatalf("accepted opcode %v TVer %d port %d", op, f.BTH.TVer(), f.UDP.DstPort())
	}
	views := []struct {
		e Ext
		v []byte
	}{
		{ExtDETH, f.DETH}, {ExtFETH, f.FETH}, {ExtRETH, f.RETH}, {ExtAtomicETH, f.AtomicETH}, {ExtAETH, f.AETH},
		{ExtAtomicAckETH, f.AtomicAckETH}, {ExtImmDt, f.ImmDt}, {ExtIETH, f.IETH}, {ExtCNPReserved, f.CNPReserved},
	}
	for _, v := range views {
		if want := op.Headers().Has(v.e); (v.v != nil) != want || (want && len(v.v) != v.e.Size()) {
			t.Fatalf("%v: %v view has %d bytes", op, v.e, len(v.v))
		}
	}
	if f.PadLen != int(f.BTH.PadCnt()) || (len(f.Payload)+f.PadLen)%4 != 0 {
		t.Fatalf("payload %d pad %d", len(f.Payload), f.PadLen)
	}
	switch op.Payload() {
	case PayloadNone:
		if len(f.Payload)+f.PadLen != 0 {
			t.Fatalf("%v with payload %d pad %d", op, len(f.Payload), f.PadLen)
		}
	case PayloadRequired:
		if len(f.Payload) == 0 {
			t.Fatalf("%v without payload", op)
		}
	}
	hdr := f.Len() - len(f.Payload) - f.PadLen - ICRCSize
	if len(f.Payload) > 0 && &f.Payload[0] != &b[hdr] {
		t.Fatalf("payload is not a view at offset %d", hdr)
	}
	if f.IPv4 != nil && !f.IPv4.ChecksumValid() {
		t.Fatal("accepted a bad IPv4 checksum")
	}
	if f.ICRC != binary.LittleEndian.Uint32(b[n-ICRCSize:]) {
		t.Fatal("ICRC is not the last word of the IP packet")
	}
}

func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		if err := fr.Decode(b); err != nil {
			return
		}
		checkInvariants(t, &fr, b)
		_ = fr.VerifyICRC()
	})
}

// canonical returns the frame as the builder writes it: no Ethernet padding,
// reserved bits zero, IPv4 DF set, UDP checksum 0, IPv4 header checksum and
// ICRC recomputed. It is written from the spec, independently of Build.
func canonical(f *Frame) []byte {
	c := make([]byte, f.Len())
	pkt := c[len(c)-len(f.pkt):]
	copy(c, f.Eth)
	if f.VLAN != nil {
		copy(c[EthernetSize:], f.VLAN)
	}
	copy(pkt, f.pkt)
	ipLen := IPv6Size
	if f.IPv4 != nil {
		ipLen = IPv4Size
		pkt[6] = 0x40 // DF, no fragment
	}
	u := pkt[ipLen:]
	u[6], u[7] = 0, 0
	bth := u[UDPSize:]
	bth[4] &= 0xc0 // FECN, BECN; reserved 0
	bth[8] &= 0x80 // AckReq; reserved 0
	ext := bth[BTHSize:]
	switch {
	case f.DETH != nil:
		ext[4] = 0
	case f.FETH != nil:
		ext[0], ext[1], ext[2] = 0, 0, 0
		ext[3] &= 0x3f
	case f.CNPReserved != nil:
		clear(ext[:CNPReservedSize])
	}
	end := len(pkt) - ICRCSize
	clear(pkt[end-f.PadLen : end]) // pad bytes are zero
	// ICRC: 8 bytes of 0xFF, then the packet with variant fields as ones.
	m := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, pkt[:end]...)
	if f.IPv4 != nil {
		m[8+1], m[8+8], m[8+10], m[8+11] = 0xff, 0xff, 0xff, 0xff
	} else {
		m[8] |= 0x0f
		m[8+1], m[8+2], m[8+3], m[8+7] = 0xff, 0xff, 0xff, 0xff
	}
	m[8+ipLen+6], m[8+ipLen+7] = 0xff, 0xff
	m[8+ipLen+UDPSize+4] = 0xff
	binary.LittleEndian.PutUint32(pkt[end:], crc32.ChecksumIEEE(m))
	if f.IPv4 != nil {
		pkt[10], pkt[11] = 0, 0
		var s uint32
		for i := 0; i < IPv4Size; i += 2 {
			s += uint32(binary.BigEndian.Uint16(pkt[i:]))
		}
		for s > 0xffff {
			s = s>>16 + s&0xffff
		}
		binary.BigEndian.PutUint16(pkt[10:], ^uint16(s))
	}
	return c
}

// fixLengths makes the IP and UDP lengths and the IPv4 checksum of a fuzzed
// frame consistent with its size, so that mutations reach the BTH and the
// extension headers instead of dying at the first length check.
func fixLengths(b []byte) {
	l2 := EthernetSize
	if len(b) >= 18 && binary.BigEndian.Uint16(b[12:]) == EtherTypeVLAN {
		l2 += VLANSize
	}
	if len(b) < l2+IPv6Size+UDPSize || len(b)-l2 > 0xffff {
		return
	}
	ip := b[l2:]
	switch binary.BigEndian.Uint16(b[l2-2:]) {
	case EtherTypeIPv4:
		if ip[0] != 0x45 {
			return
		}
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
		binary.BigEndian.PutUint16(ip[IPv4Size+4:], uint16(len(ip)-IPv4Size))
		IPv4(ip).SetChecksum()
	case EtherTypeIPv6:
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-IPv6Size))
		binary.BigEndian.PutUint16(ip[IPv6Size+4:], uint16(len(ip)-IPv6Size))
	}
}

// FuzzRoundTrip decodes, rebuilds from the decoded fields and checks that
// the result is the canonical form of the input; a canonical input with a
// good ICRC comes back byte for byte.
func FuzzRoundTrip(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixLengths(b)
		var fr Frame
		if err := fr.Decode(b); err != nil {
			return
		}
		icrcOK := fr.VerifyICRC()
		var ff FrameFields
		fr.Fields(&ff)
		want := canonical(&fr)
		buf := make([]byte, ff.FrameLen(len(fr.Payload)))
		n, err := Build(buf, &ff, fr.Payload)
		if err != nil {
			t.Fatalf("Build of decoded fields: %v", err)
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("rebuilt frame differs from canonical input\n got %x\nwant %x", buf[:n], want)
		}
		if icrcOK && bytes.Equal(want, b[:fr.Len()]) != bytes.Equal(buf[:n], b[:fr.Len()]) {
			t.Fatal("canonical input not rebuilt byte for byte")
		}
		var again Frame
		if err := again.Decode(buf[:n]); err != nil || !again.VerifyICRC() {
			t.Fatalf("rebuilt frame: %v, ICRC ok %v", err, again.VerifyICRC())
		}
		var ff2 FrameFields
		again.Fields(&ff2)
		if ff2 != ff {
			t.Fatalf("fields changed across rebuild:\n%+v\n%+v", ff, ff2)
		}
	})
}
