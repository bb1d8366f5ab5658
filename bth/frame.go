package bth

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
)

// Frame is a decoded RoCE v2 Ethernet frame: views into the bytes given to
// Decode (nothing is copied). Header views that the frame does not carry
// are nil. A Frame is reused across Decode calls; it is not safe for
// concurrent use.
type Frame struct {
	Eth  Ethernet // Ethernet header (MAC addresses; EtherType is 0x8100 when tagged)
	VLAN VLAN     // 802.1Q tag, or nil
	IPv4 IPv4     // IPv4 header, or nil for IPv6
	IPv6 IPv6     // IPv6 header, or nil for IPv4
	UDP  UDP
	BTH  BTH

	// Extension headers, nil when the opcode does not carry them.
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	CNPReserved  []byte // the 16 reserved bytes of a CNP

	// Set only by DecodeCaptured (see there).
	GRH   IPv6   // RoCE v1: the global route header (IPv4, IPv6 and UDP are nil), or nil
	DCETH []byte // Mellanox DC: the 8 bytes between the BTH and the RDETH, or nil
	RDETH RDETH  // Mellanox DC: the reliable datagram ETH, or nil

	Payload []byte // payload, without pad
	PadLen  int    // pad bytes between payload and ICRC (BTH PadCnt)
	ICRC    uint32 // ICRC as received (the little-endian word on the wire)

	pkt      []byte     // IP header through the ICRC (as far as captured when cut)
	cut      bool       // DecodeCaptured: the capture ends before the ICRC
	captured bool       // a view only DecodeCaptured sets (GRH, DCETH, RDETH) or cut is set
	extSet   ExtHeaders // extension header views currently set
	err      DecodeError
	scratch  icrcScratch
}

// Decode parses b as a RoCE v2 frame: Ethernet (optionally one 802.1Q tag),
// IPv4 without options or IPv6 without extension headers, UDP to port 4791,
// BTH, extension headers, payload, pad, ICRC. Bytes after the IP packet
// (Ethernet padding) are ignored. Decode checks every length, the IPv4 header
// checksum, the BTH TVer, the opcode and its payload rule, but not the ICRC:
// call VerifyICRC for that.
//
// On failure Decode returns a *DecodeError and leaves every view nil. To
// keep the drop path free of allocations the error lives in f: it stays
// valid only until the next Decode on f. The views point into b, which must not change while they are
// in use.
func (f *Frame) Decode(b []byte) error { return f.decode(b, false) }

// decode is Decode, or DecodeCaptured when captured is set.
func (f *Frame) decode(b []byte, captured bool) error {
	// Every view is assigned on the way to success; fail clears them all.
	f.pkt = nil
	if f.captured {
		f.clearCaptured()
	}
	if len(b) < EthernetSize {
		return f.fail(LayerEthernet, ReasonTruncated, len(b))
	}
	f.Eth = Ethernet(b[:EthernetSize:EthernetSize])
	off := EthernetSize
	et := f.Eth.EtherType()
	if et == EtherTypeVLAN {
		if len(b) < off+VLANSize {
			return f.fail(LayerVLAN, ReasonTruncated, len(b))
		}
		f.VLAN = VLAN(b[off : off+VLANSize : off+VLANSize])
		et = f.VLAN.EtherType()
		off += VLANSize
	} else {
		f.VLAN = nil
	}
	var ipLen, hdrLen int
	switch et {
	case EtherTypeIPv4:
		if len(b) < off+IPv4Size {
			return f.fail(LayerIPv4, ReasonTruncated, len(b))
		}
		ip := IPv4(b[off : off+IPv4Size : off+IPv4Size])
		if ip[0] != 0x45 { // version 4, IHL 5
			switch {
			case ip.Version() != 4:
				return f.fail(LayerIPv4, ReasonIPVersion, off)
			case ip.IHL() < 5:
				return f.fail(LayerIPv4, ReasonLength, off)
			}
			return f.fail(LayerIPv4, ReasonIPOptions, off)
		}
		ipLen = int(ip.TotalLen())
		if ipLen < IPv4Size {
			return f.fail(LayerIPv4, ReasonLength, off+2)
		}
		if len(b)-off < ipLen && !captured {
			return f.fail(LayerIPv4, ReasonTruncated, len(b))
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // MF or fragment offset
			return f.fail(LayerIPv4, ReasonFragment, off+6)
		}
		if ip.Protocol() != ProtocolUDP {
			return f.fail(LayerIPv4, ReasonNotUDP, off+9)
		}
		if !ip.ChecksumValid() {
			return f.fail(LayerIPv4, ReasonChecksum, off+10)
		}
		f.IPv4, f.IPv6 = ip, nil
		hdrLen = IPv4Size
	case EtherTypeIPv6:
		if len(b) < off+IPv6Size {
			return f.fail(LayerIPv6, ReasonTruncated, len(b))
		}
		ip := IPv6(b[off : off+IPv6Size : off+IPv6Size])
		if ip.Version() != 6 {
			return f.fail(LayerIPv6, ReasonIPVersion, off)
		}
		ipLen = IPv6Size + int(ip.PayloadLen())
		if len(b)-off < ipLen && !captured {
			return f.fail(LayerIPv6, ReasonTruncated, len(b))
		}
		if ip.NextHeader() != ProtocolUDP {
			return f.fail(LayerIPv6, ReasonNotUDP, off+6)
		}
		// IPv4-mapped addresses never appear on the wire (Linux drops
		// such packets); rejecting them keeps IPv4 and IPv6 distinct.
		if isV4Mapped(ip[8:24]) {
			return f.fail(LayerIPv6, ReasonAddress, off+8)
		}
		if isV4Mapped(ip[24:40]) {
			return f.fail(LayerIPv6, ReasonAddress, off+24)
		}
		f.IPv4, f.IPv6 = nil, ip
		hdrLen = IPv6Size
	case EtherTypeRoCEv1:
		if !captured {
			return f.fail(LayerEthernet, ReasonEtherType, off-2)
		}
		if err := f.grh(b, off); err != nil {
			return err
		}
		ipLen, hdrLen = GRHSize+int(f.GRH.PayloadLen()), GRHSize
	default:
		return f.fail(LayerEthernet, ReasonEtherType, off-2)
	}
	// From here on, offsets are relative to pkt, the IP packet (RoCE v1:
	// the GRH packet) as far as captured; ipLen is its length on the wire.
	ipOff := off
	n := min(ipLen, len(b)-off) // less than ipLen only when captured
	pkt := b[off : off+n : off+n]
	off = hdrLen
	if f.GRH == nil {
		if len(pkt) < off+UDPSize {
			return f.fail(LayerUDP, truncated(pkt, ipLen), ipOff+len(pkt))
		}
		f.UDP = UDP(pkt[off : off+UDPSize : off+UDPSize])
		if int(f.UDP.Length()) != ipLen-off {
			return f.fail(LayerUDP, ReasonLength, ipOff+off+4)
		}
		if f.UDP.DstPort() != UDPPort {
			return f.fail(LayerUDP, ReasonPort, ipOff+off+2)
		}
		off += UDPSize
	}

	if ipLen < off+BTHSize+ICRCSize {
		return f.fail(LayerBTH, ReasonTruncated, ipOff+ipLen)
	}
	if len(pkt) < off+BTHSize {
		return f.fail(LayerBTH, ReasonCut, ipOff+len(pkt))
	}
	f.BTH = BTH(pkt[off : off+BTHSize : off+BTHSize])
	if f.BTH.TVer() != 0 {
		return f.fail(LayerBTH, ReasonTVer, ipOff+off+bthFlags)
	}
	op := &opTable[f.BTH.Opcode()]
	if op.hdrLen == 0 {
		if op = dcEntry(f.BTH.Opcode()); op == nil || !captured {
			return f.fail(LayerBTH, ReasonOpcode, ipOff+off)
		}
	}
	end := ipLen - ICRCSize // end of pad
	if end < off+int(op.hdrLen) {
		return f.fail(LayerExt, ReasonTruncated, ipOff+ipLen)
	}
	if len(pkt) < off+int(op.hdrLen) {
		return f.fail(LayerExt, ReasonCut, ipOff+len(pkt))
	}
	off += BTHSize
	if op.dc {
		off = f.dcHeaders(pkt, off)
	}
	if f.extSet != op.hdrs {
		f.clearExt()
	}
	if op.hdrs != 0 {
		off = f.extHeaders(pkt, off, op.hdrs)
	}
	pad := int(f.BTH.PadCnt())
	data := end - off // payload and pad
	switch {
	case data&3 != 0:
		return f.fail(LayerPayload, ReasonLength, ipOff+off)
	case data < pad:
		return f.fail(LayerPayload, ReasonPadCnt, ipOff+off)
	case op.payload == PayloadNone && data != 0:
		return f.fail(LayerPayload, ReasonPayload, ipOff+off)
	case op.payload == PayloadRequired && data == pad:
		return f.fail(LayerPayload, ReasonPayload, ipOff+off)
	}
	f.PadLen = pad
	f.pkt = pkt
	if len(pkt) < ipLen {
		// Header-only: the payload as far as captured, no ICRC.
		pe := min(end-pad, len(pkt))
		f.Payload = pkt[off:pe:pe]
		f.ICRC, f.cut, f.captured = 0, true, true
		return nil
	}
	f.Payload = pkt[off : end-pad : end-pad]
	f.ICRC = binary.LittleEndian.Uint32(pkt[end:])
	return nil
}

func isV4Mapped(a []byte) bool {
	return binary.BigEndian.Uint64(a) == 0 && binary.BigEndian.Uint32(a[8:]) == 0xffff
}

// extHeaders sets the extension header views for set h starting at off
// and returns the offset after them. The caller has checked the length and
// cleared the views not in h.
func (f *Frame) extHeaders(pkt []byte, off int, h ExtHeaders) int {
	f.extSet = h
	if h.Has(ExtDETH) {
		f.DETH = DETH(pkt[off : off+DETHSize : off+DETHSize])
		off += DETHSize
	}
	if h.Has(ExtFETH) {
		f.FETH = FETH(pkt[off : off+FETHSize : off+FETHSize])
		off += FETHSize
	}
	if h.Has(ExtRETH) {
		f.RETH = RETH(pkt[off : off+RETHSize : off+RETHSize])
		off += RETHSize
	}
	if h.Has(ExtAtomicETH) {
		f.AtomicETH = AtomicETH(pkt[off : off+AtomicETHSize : off+AtomicETHSize])
		off += AtomicETHSize
	}
	if h.Has(ExtAETH) {
		f.AETH = AETH(pkt[off : off+AETHSize : off+AETHSize])
		off += AETHSize
	}
	if h.Has(ExtAtomicAckETH) {
		f.AtomicAckETH = AtomicAckETH(pkt[off : off+AtomicAckETHSize : off+AtomicAckETHSize])
		off += AtomicAckETHSize
	}
	if h.Has(ExtImmDt) {
		f.ImmDt = ImmDt(pkt[off : off+ImmDtSize : off+ImmDtSize])
		off += ImmDtSize
	}
	if h.Has(ExtIETH) {
		f.IETH = IETH(pkt[off : off+IETHSize : off+IETHSize])
		off += IETHSize
	}
	if h.Has(ExtCNPReserved) {
		f.CNPReserved = pkt[off : off+CNPReservedSize : off+CNPReservedSize]
		off += CNPReservedSize
	}
	return off
}

func (f *Frame) clearExt() {
	f.DETH, f.FETH, f.RETH, f.AtomicETH, f.AETH = nil, nil, nil, nil, nil
	f.AtomicAckETH, f.ImmDt, f.IETH, f.CNPReserved = nil, nil, nil, nil
	f.extSet = 0
}

// reset clears the views (not the scratch space).
func (f *Frame) reset() {
	f.Eth, f.VLAN, f.IPv4, f.IPv6, f.UDP, f.BTH = nil, nil, nil, nil, nil, nil
	f.clearExt()
	f.clearCaptured()
	f.Payload, f.PadLen, f.ICRC, f.pkt = nil, 0, 0, nil
}

func (f *Frame) fail(l Layer, r Reason, off int) error {
	f.reset()
	f.err = DecodeError{Layer: l, Reason: r, Offset: off}
	return &f.err
}

// ComputeICRC returns the ICRC of the decoded frame's current bytes (0 for
// a header-only frame, whose payload was not captured).
func (f *Frame) ComputeICRC() uint32 {
	if f.captured {
		return f.computeCaptured(-1)
	}
	return f.scratch.icrc(f.pkt[:len(f.pkt)-ICRCSize], f.IPv6 != nil)
}

// VerifyICRC reports whether the frame's ICRC is correct. The frame must
// have been decoded successfully; a header-only frame's ICRC cannot be
// verified (see HeaderOnly).
func (f *Frame) VerifyICRC() bool { return f.pkt != nil && !f.cut && f.ComputeICRC() == f.ICRC }

// Opcode returns the BTH opcode.
func (f *Frame) Opcode() Opcode { return f.BTH.Opcode() }

// IsIPv6 reports whether the frame carries IPv6.
func (f *Frame) IsIPv6() bool { return f.IPv6 != nil }

// SrcIP returns the IP source address (for RoCE v1, the GRH's source GID).
func (f *Frame) SrcIP() netip.Addr {
	switch {
	case f.IPv4 != nil:
		return f.IPv4.Src()
	case f.GRH != nil:
		return f.GRH.Src()
	}
	return f.IPv6.Src()
}

// DstIP returns the IP destination address (for RoCE v1, the GRH's
// destination GID).
func (f *Frame) DstIP() netip.Addr {
	switch {
	case f.IPv4 != nil:
		return f.IPv4.Dst()
	case f.GRH != nil:
		return f.GRH.Dst()
	}
	return f.IPv6.Dst()
}

// SrcMAC returns the source MAC address (a view into the frame).
func (f *Frame) SrcMAC() net.HardwareAddr { return f.Eth.Src() }

// DstMAC returns the destination MAC address (a view into the frame).
func (f *Frame) DstMAC() net.HardwareAddr { return f.Eth.Dst() }

// Packet returns the IP packet: from the IP header through the ICRC,
// without Ethernet header or padding.
func (f *Frame) Packet() []byte { return f.pkt }

// Len returns the frame's length without Ethernet padding.
func (f *Frame) Len() int {
	n := EthernetSize + len(f.pkt)
	if f.VLAN != nil {
		n += VLANSize
	}
	return n
}

// Layer names the header a DecodeError is about.
type Layer uint8

// Layers of a RoCE v2 frame.
const (
	LayerEthernet Layer = iota
	LayerVLAN
	LayerIPv4
	LayerIPv6
	LayerUDP
	LayerBTH
	LayerExt     // extension headers
	LayerPayload // payload, pad and ICRC
	LayerGRH     // RoCE v1 global route header (DecodeCaptured only)
)

func (l Layer) String() string {
	switch l {
	case LayerEthernet:
		return "ethernet"
	case LayerVLAN:
		return "vlan"
	case LayerIPv4:
		return "ipv4"
	case LayerIPv6:
		return "ipv6"
	case LayerUDP:
		return "udp"
	case LayerBTH:
		return "bth"
	case LayerExt:
		return "extension headers"
	case LayerPayload:
		return "payload"
	case LayerGRH:
		return "grh"
	}
	return "Layer(" + strconv.Itoa(int(l)) + ")"
}

// Reason says what is wrong with a frame. A Reason is an error, so
// errors.Is(err, bth.ReasonTruncated) matches a *DecodeError.
type Reason uint8

// Decode failure reasons.
const (
	ReasonTruncated  Reason = iota + 1 // frame ends inside a header
	ReasonEtherType                    // not IPv4, IPv6 or one 802.1Q tag
	ReasonIPVersion                    // IP version does not match the EtherType
	ReasonIPOptions                    // IPv4 options (IHL > 5), not used by RoCE v2
	ReasonFragment                     // IPv4 fragment
	ReasonChecksum                     // bad IPv4 header checksum
	ReasonNotUDP                       // IP protocol (or IPv6 next header) is not UDP
	ReasonLength                       // a length field is inconsistent
	ReasonPort                         // UDP destination port is not 4791
	ReasonTVer                         // BTH TVer is not 0
	ReasonOpcode                       // opcode unknown to RoCE v2 RC/UC/UD
	ReasonPadCnt                       // PadCnt larger than the data after the headers
	ReasonPayload                      // payload where the opcode allows none, or none where it needs some
	ReasonAddress                      // IPv4-mapped address in an IPv6 header
	ReasonCut                          // DecodeCaptured: the capture ends inside a header (snap length)
	ReasonNextHeader                   // DecodeCaptured: a RoCE v1 GRH whose next header is not the BTH
)

var reasonText = [...]string{
	ReasonTruncated:  "truncated",
	ReasonEtherType:  "not IPv4 or IPv6",
	ReasonIPVersion:  "wrong IP version",
	ReasonIPOptions:  "IPv4 options not supported",
	ReasonFragment:   "IPv4 fragment",
	ReasonChecksum:   "bad header checksum",
	ReasonNotUDP:     "not UDP",
	ReasonLength:     "bad length",
	ReasonPort:       "not UDP port 4791",
	ReasonTVer:       "unsupported TVer",
	ReasonOpcode:     "unknown opcode",
	ReasonPadCnt:     "PadCnt exceeds data",
	ReasonPayload:    "payload not allowed or missing for opcode",
	ReasonAddress:    "IPv4-mapped address in IPv6 header",
	ReasonCut:        "cut short by the capture",
	ReasonNextHeader: "GRH next header is not BTH (0x1b)",
}

func (r Reason) String() string {
	if int(r) < len(reasonText) && reasonText[r] != "" {
		return reasonText[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Error implements error.
func (r Reason) Error() string { return r.String() }

// DecodeError describes why Frame.Decode rejected a frame.
type DecodeError struct {
	Layer  Layer
	Reason Reason
	Offset int // byte offset in the frame of the offending field (or the frame length when truncated)
}

func (e *DecodeError) Error() string {
	return "decode " + e.Layer.String() + " at " + strconv.Itoa(e.Offset) + ": " + e.Reason.String()
}

// Unwrap returns the Reason.
func (e *DecodeError) Unwrap() error { return e.Reason }
