package bth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// FrameFields describes a RoCE v2 frame to build. The IP version follows the
// addresses: both IPv4 (or IPv4-mapped IPv6, the RoCE v2 GID form
// ::ffff:a.b.c.d) or both IPv6.
type FrameFields struct {
	DstMAC, SrcMAC [6]byte
	VLAN           bool   // add an 802.1Q tag
	VLANTCI        uint16 // PCP (3 bits), DEI (1), VLAN ID (12)

	SrcIP, DstIP netip.Addr
	TOS          uint8  // IPv4 TOS or IPv6 traffic class (DSCP and ECN)
	TTL          uint8  // IPv4 TTL or IPv6 hop limit
	IPID         uint16 // IPv4 identification
	FlowLabel    uint32 // IPv6 flow label (20 bits)
	SrcPort      uint16 // UDP source port (flow entropy); the destination is 4791

	// BTH; PadCnt is ignored and computed from the payload length.
	BTH BTHFields

	// Extension headers, used when BTH.Opcode carries them.
	DETH      DETHFields
	FETH      FETHFields
	RETH      RETHFields
	AtomicETH AtomicETHFields
	AETH      AETHFields
	AtomicAck uint64 // AtomicAckETH original remote data
	Imm       uint32 // ImmDt
	IETH      uint32 // IETH R_Key to invalidate
}

// Build errors.
var (
	ErrUnknownOpcode = errors.New("unknown opcode")
	ErrAddrFamily    = errors.New("source and destination must both be IPv4 or both IPv6")
	ErrShortBuffer   = errors.New("buffer too small")
	ErrPayloadRule   = errors.New("payload length not allowed for opcode")
	ErrTooLong       = errors.New("packet too long for IP")
)

// is6 reports whether the frame is IPv6, or an error for mixed families.
func (ff *FrameFields) is6() (bool, error) {
	s, d := ff.SrcIP.Unmap(), ff.DstIP.Unmap()
	switch {
	case s.Is4() && d.Is4():
		return false, nil
	case s.Is6() && d.Is6():
		return true, nil
	}
	return false, ErrAddrFamily
}

// HeaderLen returns the length of everything before the payload: Ethernet,
// VLAN tag, IP, UDP, BTH and the opcode's extension headers. A payload placed
// at buf[HeaderLen():] can be framed in place by BuildInPlace. It returns 0
// for an unknown opcode.
func (ff *FrameFields) HeaderLen() int {
	op := &opTable[ff.BTH.Opcode]
	if op.hdrLen == 0 {
		return 0
	}
	n := EthernetSize + UDPSize + int(op.hdrLen)
	if ff.VLAN {
		n += VLANSize
	}
	if s := ff.SrcIP.Unmap(); s.Is4() {
		n += IPv4Size
	} else {
		n += IPv6Size
	}
	return n
}

// FrameLen returns the length of the frame with a payload of n bytes:
// headers, payload, pad and ICRC.
func (ff *FrameFields) FrameLen(n int) int { return ff.HeaderLen() + n + padLen(n) + ICRCSize }

func padLen(n int) int { return -n & 3 }

// Build writes a frame with the given payload into buf and returns its
// length. It copies the payload to buf[ff.HeaderLen():]; when the payload is
// already there, the copy is skipped. See BuildInPlace.
func Build(buf []byte, ff *FrameFields, payload []byte) (int, error) {
	h := ff.HeaderLen()
	if h == 0 {
		return 0, fmt.Errorf("build %v: %w", ff.BTH.Opcode, ErrUnknownOpcode)
	}
	if len(buf) < h+len(payload) {
		return 0, fmt.Errorf("build %v: %w", ff.BTH.Opcode, ErrShortBuffer)
	}
	if dst := buf[h : h+len(payload)]; len(payload) > 0 && &dst[0] != &payload[0] {
		copy(dst, payload)
	}
	return BuildInPlace(buf, ff, len(payload))
}

// BuildInPlace writes the headers, pad and ICRC of a frame around a payload
// of n bytes that already sits at buf[ff.HeaderLen():], and returns the
// frame's length (ff.FrameLen(n)). It fills the IPv4 total length (DF set)
// and header checksum or the IPv6 payload length, the UDP length (checksum
// 0), the BTH PadCnt, zero pad bytes and the ICRC. It does not allocate.
func BuildInPlace(buf []byte, ff *FrameFields, n int) (int, error) {
	op := &opTable[ff.BTH.Opcode]
	if op.hdrLen == 0 {
		return 0, fmt.Errorf("build %v: %w", ff.BTH.Opcode, ErrUnknownOpcode)
	}
	v6, err := ff.is6()
	if err != nil {
		return 0, fmt.Errorf("build %v: %w", ff.BTH.Opcode, err)
	}
	switch {
	case n < 0,
		op.payload == PayloadNone && n != 0,
		op.payload == PayloadRequired && n == 0:
		return 0, fmt.Errorf("build %v with %d bytes: %w", ff.BTH.Opcode, n, ErrPayloadRule)
	}
	pad := padLen(n)
	ipHdr := IPv4Size
	if v6 {
		ipHdr = IPv6Size
	}
	udpLen := UDPSize + int(op.hdrLen) + n + pad + ICRCSize
	ipLen := ipHdr + udpLen
	if udpLen > 0xffff || (!v6 && ipLen > 0xffff) {
		return 0, fmt.Errorf("build %v with %d bytes: %w", ff.BTH.Opcode, n, ErrTooLong)
	}
	off := EthernetSize
	if ff.VLAN {
		off += VLANSize
	}
	total := off + ipLen
	if len(buf) < total {
		return 0, fmt.Errorf("build %v: %w", ff.BTH.Opcode, ErrShortBuffer)
	}
	buf = buf[:total:total]

	// The variant fields are first written as all ones, as the ICRC sees
	// them, so that the ICRC is one pass over the packet; then they get
	// their real values.
	pkt := buf[off:]
	if v6 {
		ip := pkt[:IPv6Size]
		binary.BigEndian.PutUint32(ip, 6<<28|0x0fffffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = ProtocolUDP
		ip[7] = 0xff
		s, d := ff.SrcIP.As16(), ff.DstIP.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
	} else {
		ip := IPv4(pkt[:IPv4Size])
		ip[0] = 0x45
		ip[1] = 0xff
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
		binary.BigEndian.PutUint16(ip[4:], ff.IPID)
		ip[6], ip[7] = 0x40, 0 // DF
		ip[8] = 0xff
		ip[9] = ProtocolUDP
		ip[10], ip[11] = 0xff, 0xff
		s, d := ff.SrcIP.Unmap().As4(), ff.DstIP.Unmap().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
	}
	u := pkt[ipHdr:]
	binary.BigEndian.PutUint16(u, ff.SrcPort)
	binary.BigEndian.PutUint16(u[2:], UDPPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xff, 0xff

	o := ipHdr + UDPSize
	bf := ff.BTH
	bf.PadCnt = uint8(pad)
	bth := BTH(pkt[o : o+BTHSize])
	bth.Encode(&bf)
	bth[bthFECN] = 0xff
	o += BTHSize
	if op.hdrs != 0 {
		o = ff.encodeExt(pkt, o, op.hdrs)
	}
	o += n
	for i := 0; i < pad; i++ {
		pkt[o+i] = 0
	}
	o += pad
	binary.LittleEndian.PutUint32(pkt[o:], icrcInPlace(buf[:off+o], off))

	// icrcInPlace used the end of the Ethernet header as scratch: write it now.
	copy(buf[0:6], ff.DstMAC[:])
	copy(buf[6:12], ff.SrcMAC[:])
	if ff.VLAN {
		binary.BigEndian.PutUint16(buf[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(buf[14:], ff.VLANTCI)
	}
	bth[bthFECN] = bit(bf.FECN, 0x80) | bit(bf.BECN, 0x40)
	u[6], u[7] = 0, 0
	if v6 {
		binary.BigEndian.PutUint16(buf[off-2:], EtherTypeIPv6)
		binary.BigEndian.PutUint32(pkt, 6<<28|uint32(ff.TOS)<<20|ff.FlowLabel&0xfffff)
		pkt[7] = ff.TTL
	} else {
		binary.BigEndian.PutUint16(buf[off-2:], EtherTypeIPv4)
		ip := IPv4(pkt[:IPv4Size])
		ip[1] = ff.TOS
		ip[8] = ff.TTL
		ip.SetChecksum()
	}
	return total, nil
}

func (ff *FrameFields) encodeExt(pkt []byte, o int, h ExtHeaders) int {
	if h.Has(ExtDETH) {
		DETH(pkt[o:]).Encode(&ff.DETH)
		o += DETHSize
	}
	if h.Has(ExtFETH) {
		FETH(pkt[o:]).Encode(&ff.FETH)
		o += FETHSize
	}
	if h.Has(ExtRETH) {
		RETH(pkt[o:]).Encode(&ff.RETH)
		o += RETHSize
	}
	if h.Has(ExtAtomicETH) {
		AtomicETH(pkt[o:]).Encode(&ff.AtomicETH)
		o += AtomicETHSize
	}
	if h.Has(ExtAETH) {
		AETH(pkt[o:]).Encode(&ff.AETH)
		o += AETHSize
	}
	if h.Has(ExtAtomicAckETH) {
		AtomicAckETH(pkt[o:]).Encode(ff.AtomicAck)
		o += AtomicAckETHSize
	}
	if h.Has(ExtImmDt) {
		ImmDt(pkt[o:]).Encode(ff.Imm)
		o += ImmDtSize
	}
	if h.Has(ExtIETH) {
		IETH(pkt[o:]).Encode(ff.IETH)
		o += IETHSize
	}
	if h.Has(ExtCNPReserved) {
		clear(pkt[o : o+CNPReservedSize])
		o += CNPReservedSize
	}
	return o
}

// Fields fills ff with the decoded frame's fields, so that building ff with
// f.Payload gives the frame back (with reserved bits, the UDP checksum and
// the IPv4 flags in their canonical form: zero, zero, DF).
func (f *Frame) Fields(ff *FrameFields) {
	*ff = FrameFields{
		DstMAC: f.Eth.DstArray(),
		SrcMAC: f.Eth.SrcArray(),
		SrcIP:  f.SrcIP(),
		DstIP:  f.DstIP(),
	}
	if f.VLAN != nil {
		ff.VLAN = true
		ff.VLANTCI = f.VLAN.TCI()
	}
	if f.IPv4 != nil {
		ff.TOS = f.IPv4.TOS()
		ff.TTL = f.IPv4.TTL()
		ff.IPID = f.IPv4.ID()
	} else if f.IPv6 != nil {
		ff.TOS = f.IPv6.TrafficClass()
		ff.TTL = f.IPv6.HopLimit()
		ff.FlowLabel = f.IPv6.FlowLabel()
	}
	if f.UDP != nil {
		ff.SrcPort = f.UDP.SrcPort()
	}
	if f.BTH == nil {
		return
	}
	ff.BTH = f.BTH.Fields()
	if f.DETH != nil {
		ff.DETH = f.DETH.Fields()
	}
	if f.FETH != nil {
		ff.FETH = f.FETH.Fields()
	}
	if f.RETH != nil {
		ff.RETH = f.RETH.Fields()
	}
	if f.AtomicETH != nil {
		ff.AtomicETH = f.AtomicETH.Fields()
	}
	if f.AETH != nil {
		ff.AETH = f.AETH.Fields()
	}
	if f.AtomicAckETH != nil {
		ff.AtomicAck = f.AtomicAckETH.OrigRemoteData()
	}
	if f.ImmDt != nil {
		ff.Imm = f.ImmDt.Imm()
	}
	if f.IETH != nil {
		ff.IETH = f.IETH.RKey()
	}
}
