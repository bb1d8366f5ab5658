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
	lblRoCE     = "roce"
	lblDrop     = "drop"
	lblDropped  = "dropped"
	lblRedirect = "redirect"
	lblDone     = "done"
	lblPass     = "pass"
)

// Symbols the program's map loads carry until the maps are associated with
// them: mapSymbol the XSKMAP, lossSymbol the loss threshold's value,
// countersSymbol the per-CPU counters.
const (
	mapSymbol      = "xsks_map"
	lossSymbol     = "loss_map"
	countersSymbol = "counters"
)

// lossAlways is the loss threshold that drops every RoCE frame: with a u32
// threshold "drop when bpf_get_prandom_u32() < threshold" cannot say 1, so
// the program tests for this value first.
const lossAlways = 0xffffffff

// Offsets of the fields of the counters map's value, struct counters in the
// program's C equivalent; counterValues is its Go twin.
const (
	countersRedirectedOff    = 0
	countersInjectedDropsOff = 8
	countersSize             = 16
)

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
//
//	// A RoCE v2 frame: loss injection, then the redirect.
//	u32 loss = loss_map[0];             // direct value access, no helper call
//	u32 zero = 0;
//	struct counters *c = bpf_map_lookup_elem(&counters, &zero); // per-CPU
//	if (loss != 0 && (loss == 0xffffffff || bpf_get_prandom_u32() < loss)) {
//		if (c) c->injected_drops++;
//		return XDP_DROP;
//	}
//	act = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
//	if (act == XDP_REDIRECT && c) c->redirected++;
//	return act;
//
// with
//
//	struct counters { u64 redirected, injected_drops; };
//
// Registers: R6 context, R2 data, R3 data_end, R4 start of the IP header,
// R5 bounds-check cursor, R0 the field under test; for a RoCE frame R7 the
// loss threshold and R8 this CPU's counters (or NULL), both kept across the
// helper calls.
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
		asm.Ja.Label(lblRoCE),

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

		// A RoCE frame. R7 = the loss threshold, read straight from the
		// array's value (BPF_PSEUDO_MAP_VALUE, Linux 5.5); R8 = this CPU's
		// counters. A threshold of 0 costs one compare.
		asm.LoadMapValue(asm.R1, 0, 0).WithReference(lossSymbol).WithSymbol(lblRoCE),
		asm.LoadMem(asm.R7, asm.R1, 0, asm.Word),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, 0).WithReference(countersSymbol),
		asm.FnMapLookupElem.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.JEq.Imm(asm.R7, 0, lblRedirect),
		asm.JEq.Imm32(asm.R7, -1, lblDrop), // lossAlways
		asm.FnGetPrandomU32.Call(),
		asm.JGE.Reg32(asm.R0, asm.R7, lblRedirect),

		// Injected loss: count it and drop the frame.
		asm.JEq.Imm(asm.R8, 0, lblDropped).WithSymbol(lblDrop),
		asm.LoadMem(asm.R1, asm.R8, countersInjectedDropsOff, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R8, countersInjectedDropsOff, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, XDPDrop).WithSymbol(lblDropped),
		asm.Return(),

		// bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS): the
		// flags argument is the action when the queue has no socket (≥ 5.3).
		// Only a real redirect is counted.
		asm.LoadMem(asm.R2, asm.R6, xdpMDRxQueueIndex, asm.Word).WithSymbol(lblRedirect),
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapSymbol),
		asm.Mov.Imm(asm.R3, XDPPass),
		asm.FnRedirectMap.Call(),
		asm.JNE.Imm(asm.R0, XDPRedirect, lblDone),
		asm.JEq.Imm(asm.R8, 0, lblDone),
		asm.LoadMem(asm.R1, asm.R8, countersRedirectedOff, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R8, countersRedirectedOff, asm.R1, asm.DWord),
		asm.Return().WithSymbol(lblDone),

		asm.Mov.Imm(asm.R0, XDPPass).WithSymbol(lblPass),
		asm.Return(),
	}
}
