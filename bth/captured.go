package bth

// Captures hold more than a RoCE v2 receiver accepts. DecodeCaptured reads
// three kinds of such frames that real capture files contain, for tools:
//
//   - Header-only frames: a snap length (tcpdump -s, editcap -s) or a capture
//     tool that keeps only the headers cut the frame before its end. Every
//     header that was captured is decoded; the payload is what was captured
//     of it and the ICRC is missing (HeaderOnly).
//   - RoCE v1 (IBTA Vol 1 Annex A16): EtherType 0x8915, a GRH with the IPv6
//     header's layout (next header 0x1b), then the BTH; no IP or UDP header.
//   - Mellanox Dynamically Connected transport (DC): ConnectX cards send it
//     with the opcodes of the Reliable Datagram range (0x40-0x5f), which the
//     IBTA defines but nobody implements. After the BTH come 8 bytes whose
//     layout is not public (DCETH here; Wireshark counts them into the BTH),
//     then the RDETH and the DETH of IBTA Vol 1 §9.3.1 and §9.3.2, then the
//     headers of the operation (RETH, ImmDt, AETH, AtomicETH, AtomicAckETH).
//     This package reads acknowledgements the same way, AETH after the
//     DETH, which puts a sensible syndrome there (ACK, and the NAK "invalid
//     RD request" before a RESYNC); Wireshark reads the AETH in the RDETH's
//     place instead.
//
// None of these is ever accepted by Decode, which the receive path uses.

// Sizes of the headers only DecodeCaptured reads.
const (
	GRHSize   = 40 // RoCE v1 global route header
	DCETHSize = 8  // Mellanox DC: the bytes between the BTH and the RDETH
	RDETHSize = 4  // reliable datagram extended transport header

	// EtherTypeRoCEv1 is the EtherType of RoCE v1 (IBoE) frames.
	EtherTypeRoCEv1 = 0x8915
	// GRHNextHeaderBTH is the GRH next header value of IBA transport.
	GRHNextHeaderBTH = 0x1b
)

// RDETH is a view of the Reliable Datagram Extended Transport Header (IBTA
// Vol 1 §9.3.1), which Mellanox DC packets carry.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                 EE-Context                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RDETH []byte

// EEContext returns the end-to-end context.
func (h RDETH) EEContext() uint32 { return uint24(h[1:]) }

// DecodeCaptured is Decode for frames read from a capture: it also accepts
// header-only frames, RoCE v1 and Mellanox DC (see the package notes above),
// and reports a header that the capture cut with ReasonCut. It checks the
// same things as Decode otherwise, and allocates nothing.
func (f *Frame) DecodeCaptured(b []byte) error { return f.decode(b, true) }

// HeaderOnly reports whether the capture cut the frame after its headers:
// the payload is partial (or empty) and the ICRC was not captured.
func (f *Frame) HeaderOnly() bool { return f.cut }

// IsDC reports whether the frame is a Mellanox DC packet.
func (f *Frame) IsDC() bool { return f.RDETH != nil }

// IsRoCEv1 reports whether the frame is RoCE v1 (a GRH, no IP or UDP).
func (f *Frame) IsRoCEv1() bool { return f.GRH != nil }

// OpcodeName returns the opcode's name: Opcode.String, or for a DC packet
// the DC name ("DC RDMA_WRITE_ONLY").
func (f *Frame) OpcodeName() string {
	if f.RDETH != nil {
		return dcTable[f.BTH.Opcode()&0x1f].name
	}
	return f.BTH.Opcode().String()
}

// DCName returns the name of an opcode of the RD range (0x40-0x5f) as
// Mellanox DC uses it, like "DC RDMA_WRITE_ONLY", or "" for others.
func DCName(o Opcode) string {
	if e := dcEntry(o); e != nil {
		return e.name
	}
	return ""
}

func (f *Frame) clearCaptured() {
	f.GRH, f.DCETH, f.RDETH, f.cut, f.captured = nil, nil, nil, false, false
}

// grh sets the GRH view of a RoCE v1 frame from the GRH at off.
func (f *Frame) grh(b []byte, off int) error {
	if len(b) < off+GRHSize {
		return f.fail(LayerGRH, ReasonCut, len(b))
	}
	g := IPv6(b[off : off+GRHSize : off+GRHSize])
	if g.Version() != 6 {
		return f.fail(LayerGRH, ReasonIPVersion, off)
	}
	if g.NextHeader() != GRHNextHeaderBTH {
		return f.fail(LayerGRH, ReasonNextHeader, off+6)
	}
	f.IPv4, f.IPv6, f.UDP, f.GRH, f.captured = nil, nil, nil, g, true
	return nil
}

// dcEntry returns the opcode table entry of a DC opcode, or nil.
func dcEntry(o Opcode) *opEntry {
	if o.Transport() != RD || dcTable[o&0x1f].name == "" {
		return nil
	}
	return &dcTable[o&0x1f]
}

// dcHeaders sets the DCETH and RDETH views at off and returns the offset
// after them; the caller has checked the length.
func (f *Frame) dcHeaders(pkt []byte, off int) int {
	f.DCETH = pkt[off : off+DCETHSize : off+DCETHSize]
	off += DCETHSize
	f.RDETH = RDETH(pkt[off : off+RDETHSize : off+RDETHSize])
	f.captured = true
	return off + RDETHSize
}

// dcTable holds the DC opcodes by their low five bits: the RD opcodes of
// IBTA Vol 1 §9.2 with the headers ConnectX sends. Payload rules are not
// public: every opcode may carry payload.
var dcTable = func() (t [32]opEntry) {
	ops := []struct {
		code Opcode
		name string
		hdrs ExtHeaders
	}{
		{0x00, "SEND_FIRST", hDETH}, {0x01, "SEND_MIDDLE", hDETH}, {0x02, "SEND_LAST", hDETH},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", hDETH | hImm}, {0x04, "SEND_ONLY", hDETH},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", hDETH | hImm},
		{0x06, "RDMA_WRITE_FIRST", hDETH | hRETH}, {0x07, "RDMA_WRITE_MIDDLE", hDETH},
		{0x08, "RDMA_WRITE_LAST", hDETH}, {0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", hDETH | hImm},
		{0x0a, "RDMA_WRITE_ONLY", hDETH | hRETH}, {0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", hDETH | hRETH | hImm},
		{0x0c, "RDMA_READ_REQUEST", hDETH | hRETH},
		{0x0d, "RDMA_READ_RESPONSE_FIRST", hAETH}, {0x0e, "RDMA_READ_RESPONSE_MIDDLE", 0},
		{0x0f, "RDMA_READ_RESPONSE_LAST", hAETH}, {0x10, "RDMA_READ_RESPONSE_ONLY", hAETH},
		{0x11, "ACKNOWLEDGE", hDETH | hAETH}, {0x12, "ATOMIC_ACKNOWLEDGE", hDETH | hAETH | hAtomicAck},
		{0x13, "COMPARE_SWAP", hDETH | hAtomicETH}, {0x14, "FETCH_ADD", hDETH | hAtomicETH},
		{0x15, "RESYNC", hDETH},
	}
	for _, o := range ops {
		t[o.code] = opEntry{name: "DC " + o.name, hdrs: o.hdrs, payload: PayloadOptional, dc: true,
			hdrLen: uint8(BTHSize + DCETHSize + RDETHSize + o.hdrs.Size())}
	}
	return t
}()

// computeCaptured computes the ICRC of a frame DecodeCaptured read, with
// sport (when 0 or more) in place of the UDP source port; 0 for a
// header-only frame.
func (f *Frame) computeCaptured(sport int) uint32 {
	if f.cut || f.pkt == nil {
		return 0
	}
	kind := icrcIPv4
	switch {
	case f.GRH != nil:
		kind = icrcGRH
	case f.IPv6 != nil:
		kind = icrcIPv6
	}
	return f.scratch.sum(f.pkt[:len(f.pkt)-ICRCSize], kind, sport)
}

// ICRCWithSrcPort returns the ICRC the decoded frame would have with UDP
// source port sport: what its sender computed when a capture tool rewrote
// the port afterwards. It is 0 for RoCE v1 and header-only frames.
func (f *Frame) ICRCWithSrcPort(sport uint16) uint32 {
	if f.UDP == nil {
		return 0
	}
	return f.computeCaptured(int(sport))
}

// SrcPortForICRC searches the UDP source ports lo..hi for one with which the
// frame's ICRC matches, and returns the lowest. The ConnectX RDMA sniffer
// (tcpdump -i mlx5_X) writes 4791 over the source port after the card
// computed the ICRC; RoCE senders pick ports from 0xC000 up.
//
// The ICRC is an affine function of the port's 16 bits: with c(p) the ICRC
// for port p, c(p) = c(0) ^ XOR of (c(1<<i) ^ c(0)) over the bits i set in
// p. So 17 ICRCs of the frame give every port's by XOR: a search costs
// about as much as 17 verifications, whatever the range.
func (f *Frame) SrcPortForICRC(lo, hi uint16) (port uint16, ok bool) {
	if f.UDP == nil || f.cut || f.pkt == nil {
		return 0, false
	}
	var basis [16]uint32
	c0 := f.computeCaptured(0)
	for i := range basis {
		basis[i] = f.computeCaptured(1<<i) ^ c0
	}
	for p := int(lo); p <= int(hi); p++ {
		c := c0
		for i, v := range basis {
			if p>>i&1 != 0 {
				c ^= v
			}
		}
		if c == f.ICRC {
			return uint16(p), true
		}
	}
	return 0, false
}

// truncated is the Reason for a header that does not fit in pkt: the
// capture cut the packet (ReasonCut) or the packet itself is too short.
func truncated(pkt []byte, wireLen int) Reason {
	if len(pkt) < wireLen {
		return ReasonCut
	}
	return ReasonTruncated
}
