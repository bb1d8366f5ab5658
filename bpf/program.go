package bpf

import (
	"encoding/binary"

	"github.com/cilium/ebpf/asm"
)

// RoCEv2Port is the UDP destination port IANA assigned to RoCE v2
// (IBTA Vol. 1 Annex A17.2.2).
const RoCEv2Port = 4791

// XDP verdicts (include/uapi/linux/bpf.h, enum xdp_action).
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTx       = 3
	XDPRedirect = 4
)

// Offsets of the fields of struct xdp_md, the XDP program's context
// (include/uapi/linux/bpf.h).
const (
	xdpMDData         = 0
	xdpMDDataEnd      = 4
	xdpMDRxQueueIndex = 16
)

// Header sizes and field offsets the program reads.
const (
	ethHeaderLen  = 14
	ethTypeOff    = 12
	vlanTagLen    = 4
	ipv4HeaderLen = 20 // IHL 5: the program refuses options
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	udpDstPortOff = 2

	ipv4VerIHLOff   = 0
	ipv4FragOff     = 6 // flags (3 bits) and fragment offset (13 bits)
	ipv4ProtocolOff = 9
	ipv6VerOff      = 0
	ipv6NextHdrOff  = 6

	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86dd
	etherTypeDot1Q = 0x8100

	ipProtoUDP = 17
	ipv4V5IHL5 = 0x45   // version 4, header length 5 words
	ipv4MFOff  = 0x3fff // More Fragments flag and fragment offset
)

// wire16 returns the value a native-endian 16-bit load gives for the
// big-endian (network order) value v: the program compares loaded header
// fields against these constants instead of swapping every field it reads.
func wire16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// Symbols of the program's jump targets.
const (
	lblL3       = "l3"
	lblIPv4     = "ipv4"
	lblIPv6     = "ipv6"
	lblRedirect = "redirect"
	lblPass     = "pass"
)

// mapSymbol is the reference the program's map load carries until the XSKMAP
// is associated with it.
const mapSymbol = "xsks_map"

// instructions returns the XDP program. In C it would read:
//
//	eth = data; if (eth + 14 > data_end) return XDP_PASS;
//	type = eth->h_proto; l3 = eth + 14;
//	if (type == htons(0x8100)) {          // one 802.1Q tag
//		if (l3 + 4 > data_end) return XDP_PASS;
//		type = *(u16 *)(eth + 16); l3 += 4;
//	}
//	if (type == htons(0x0800)) {
//		if (l3 + 28 > data_end) return XDP_PASS;
//		if (ip->ver_ihl != 0x45) return XDP_PASS;          // IPv4, no options
//		if (ip->frag_off & htons(0x3fff)) return XDP_PASS; // not a fragment
//		if (ip->protocol != IPPROTO_UDP) return XDP_PASS;
//		udp = l3 + 20;
//	} else if (type == htons(0x86dd)) {
//		if (l3 + 48 > data_end) return XDP_PASS;
//		if ((ip6->ver & 0xf0) != 0x60) return XDP_PASS;
//		if (ip6->nexthdr != IPPROTO_UDP) return XDP_PASS;  // no extension headers
//		udp = l3 + 40;
//	} else return XDP_PASS;
//	if (udp->dest != htons(4791)) return XDP_PASS;
//	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
//
// Registers: R6 context, R2 data, R3 data_end, R4 start of the IP header,
// R5 bounds-check cursor, R0 the field under test.
//
// With frags (multi-buffer XDP) data..data_end covers only the first buffer;
// the headers the program reads are always there, so the same code serves
// both variants.
func instructions() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, xdpMDData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, xdpMDDataEnd, asm.Word),

		// Ethernet header.
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, ethHeaderLen),
		asm.JGT.Reg(asm.R4, asm.R3, lblPass),
		asm.LoadMem(asm.R0, asm.R2, ethTypeOff, asm.Half),
		asm.JNE.Imm(asm.R0, wire16(etherTypeDot1Q), lblL3),

		// One 802.1Q tag: the real EtherType follows the TCI.
		asm.Add.Imm(asm.R4, vlanTagLen),
		asm.JGT.Reg(asm.R4, asm.R3, lblPass),
		asm.LoadMem(asm.R0, asm.R2, ethTypeOff+vlanTagLen, asm.Half),

		asm.JEq.Imm(asm.R0, wire16(etherTypeIPv4), lblIPv4).WithSymbol(lblL3),
		asm.JEq.Imm(asm.R0, wire16(etherTypeIPv6), lblIPv6),
		asm.Ja.Label(lblPass),

		// IPv4 without options, not a fragment, carrying UDP.
		asm.Mov.Reg(asm.R5, asm.R4).WithSymbol(lblIPv4),
		asm.Add.Imm(asm.R5, ipv4HeaderLen+udpHeaderLen),
		asm.JGT.Reg(asm.R5, asm.R3, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv4VerIHLOff, asm.Byte),
		asm.JNE.Imm(asm.R0, ipv4V5IHL5, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv4FragOff, asm.Half),
		asm.And.Imm(asm.R0, wire16(ipv4MFOff)),
		asm.JNE.Imm(asm.R0, 0, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv4ProtocolOff, asm.Byte),
		asm.JNE.Imm(asm.R0, ipProtoUDP, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv4HeaderLen+udpDstPortOff, asm.Half),
		asm.JNE.Imm(asm.R0, wire16(RoCEv2Port), lblPass),
		asm.Ja.Label(lblRedirect),

		// IPv6 with UDP as the first next header.
		asm.Mov.Reg(asm.R5, asm.R4).WithSymbol(lblIPv6),
		asm.Add.Imm(asm.R5, ipv6HeaderLen+udpHeaderLen),
		asm.JGT.Reg(asm.R5, asm.R3, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv6VerOff, asm.Byte),
		asm.And.Imm(asm.R0, 0xf0),
		asm.JNE.Imm(asm.R0, 0x60, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv6NextHdrOff, asm.Byte),
		asm.JNE.Imm(asm.R0, ipProtoUDP, lblPass),
		asm.LoadMem(asm.R0, asm.R4, ipv6HeaderLen+udpDstPortOff, asm.Half),
		asm.JNE.Imm(asm.R0, wire16(RoCEv2Port), lblPass),

		// bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS): the
		// flags argument is the action when the queue has no socket (≥ 5.3).
		asm.LoadMem(asm.R2, asm.R6, xdpMDRxQueueIndex, asm.Word).WithSymbol(lblRedirect),
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapSymbol),
		asm.Mov.Imm(asm.R3, XDPPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, XDPPass).WithSymbol(lblPass),
		asm.Return(),
	}
}
