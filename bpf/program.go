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
	lblMark     = "mark"
	lblMarkNow  = "mark_now"
	lblMark6    = "mark6"
	lblMarked   = "marked"
	lblDone     = "done"
	lblPass     = "pass"
)

// Symbols the program's map loads carry until the maps are associated with
// them: mapSymbol the XSKMAP, lossSymbol the loss and marking thresholds'
// value, countersSymbol the per-CPU counters.
const (
	mapSymbol      = "xsks_map"
	lossSymbol     = "loss_map"
	countersSymbol = "counters"
)

// lossAlways is the loss threshold that drops every RoCE frame: with a u32
// threshold "drop when bpf_get_prandom_u32() < threshold" cannot say 1, so
// the program tests for this value first.
const lossAlways = 0xffffffff

// Offsets of the fields of the loss map's value, struct thresholds in the
// program's C equivalent; thresholdValues is its Go twin.
const (
	thresholdLossOff = 0
	thresholdMarkOff = 4
	thresholdsSize   = 8
)

// Offsets of the fields of the counters map's value, struct counters in the
// program's C equivalent; counterValues is its Go twin.
const (
	countersRedirectedOff    = 0
	countersInjectedDropsOff = 8
	countersMarkedCEOff      = 16
	countersSize             = 24
)

// ECN marking (RFC 3168 §5): the two low bits of the IPv4 TOS byte, or bits
// 4 and 5 of the IPv6 header's second byte (the low bits of the traffic
// class); 11 is CE.
const (
	ipv4ChecksumOff = 10
	ecnMask         = 3
	ecnMask6        = 0x30
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
//	// A RoCE v2 frame: loss injection, CE marking, then the redirect.
//	u32 loss = loss_map[0].loss;        // direct value access, no helper call
//	u32 zero = 0;
//	struct counters *c = bpf_map_lookup_elem(&counters, &zero); // per-CPU
//	if (loss != 0 && (loss == 0xffffffff || bpf_get_prandom_u32() < loss)) {
//		if (c) c->injected_drops++;
//		return XDP_DROP;
//	}
//	u32 mark = loss_map[0].mark;
//	if (mark != 0 && (mark == 0xffffffff || bpf_get_prandom_u32() < mark)) {
//		if (ip->version == 4) {
//			if ((ip->tos & 3) == 0 || (ip->tos & 3) == 3) goto redirect;
//			u16 old = *(u16 *)ip, new = old | htons(3); // TOS |= CE
//			ip->check = csum_replace(ip->check, old, new); // RFC 1624 eq. 3
//			*(u16 *)ip = new;
//		} else {
//			if ((ip6[1] & 0x30) == 0 || (ip6[1] & 0x30) == 0x30) goto redirect;
//			ip6[1] |= 0x30;                                // traffic class |= CE
//		}
//		if (c) c->marked_ce++;
//	}
//	redirect:
//	act = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
//	if (act == XDP_REDIRECT && c) c->redirected++;
//	return act;
//
// with
//
//	struct thresholds { u32 loss, mark; };
//	struct counters { u64 redirected, injected_drops, marked_ce; };
//
// Registers: R6 context, R2 data, R3 data_end, R4 start of the IP header,
// R5 bounds-check cursor, R0 the field under test; for a RoCE frame R7 the
// loss threshold, then the marking one, R8 this CPU's counters (or NULL)
// and R9 the IP header, all kept across the helper calls.
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
		asm.Mov.Reg(asm.R9, asm.R4).WithSymbol(lblRoCE),
		asm.LoadMapValue(asm.R1, 0, 0).WithReference(lossSymbol),
		asm.LoadMem(asm.R7, asm.R1, thresholdLossOff, asm.Word),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, 0).WithReference(countersSymbol),
		asm.FnMapLookupElem.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.JEq.Imm(asm.R7, 0, lblMark),
		asm.JEq.Imm32(asm.R7, -1, lblDrop), // lossAlways
		asm.FnGetPrandomU32.Call(),
		asm.JGE.Reg32(asm.R0, asm.R7, lblMark),

		// Injected loss: count it and drop the frame.
		asm.JEq.Imm(asm.R8, 0, lblDropped).WithSymbol(lblDrop),
		asm.LoadMem(asm.R1, asm.R8, countersInjectedDropsOff, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R8, countersInjectedDropsOff, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, XDPDrop).WithSymbol(lblDropped),
		asm.Return(),

		// CE marking, with its own threshold: R7 = the marking threshold.
		asm.LoadMapValue(asm.R1, 0, 0).WithReference(lossSymbol).WithSymbol(lblMark),
		asm.LoadMem(asm.R7, asm.R1, thresholdMarkOff, asm.Word),
		asm.JEq.Imm(asm.R7, 0, lblRedirect),
		asm.JEq.Imm32(asm.R7, -1, lblMarkNow), // lossAlways: every frame
		asm.FnGetPrandomU32.Call(),
		asm.JGE.Reg32(asm.R0, asm.R7, lblRedirect),
		asm.LoadMem(asm.R0, asm.R9, ipv4VerIHLOff, asm.Byte).WithSymbol(lblMarkNow),
		asm.RSh.Imm(asm.R0, 4),
		asm.JEq.Imm(asm.R0, 6, lblMark6),
		// IPv4: only an ECN-capable frame (ECT(0), ECT(1)) is marked.
		asm.LoadMem(asm.R1, asm.R9, 1, asm.Byte),
		asm.And.Imm(asm.R1, ecnMask),
		asm.JEq.Imm(asm.R1, 0, lblRedirect),
		asm.JEq.Imm(asm.R1, ecnMask, lblRedirect),
		// R3 the old first word (version, IHL, TOS), R4 the new one; the
		// checksum follows RFC 1624 eq. 3, HC' = ~(~HC + ~m + m'), in
		// native order, which the ones' complement sum does not mind.
		asm.LoadMem(asm.R3, asm.R9, 0, asm.Half),
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Or.Imm(asm.R4, wire16(ecnMask)),
		asm.LoadMem(asm.R5, asm.R9, ipv4ChecksumOff, asm.Half),
		asm.Xor.Imm(asm.R5, 0xffff),
		asm.Xor.Imm(asm.R3, 0xffff),
		asm.Add.Reg(asm.R5, asm.R3),
		asm.Add.Reg(asm.R5, asm.R4),
		asm.Mov.Reg(asm.R0, asm.R5),
		asm.RSh.Imm(asm.R0, 16),
		asm.And.Imm(asm.R5, 0xffff),
		asm.Add.Reg(asm.R5, asm.R0),
		asm.Mov.Reg(asm.R0, asm.R5),
		asm.RSh.Imm(asm.R0, 16),
		asm.And.Imm(asm.R5, 0xffff),
		asm.Add.Reg(asm.R5, asm.R0),
		asm.Xor.Imm(asm.R5, 0xffff),
		asm.StoreMem(asm.R9, ipv4ChecksumOff, asm.R5, asm.Half),
		asm.StoreMem(asm.R9, 0, asm.R4, asm.Half),
		asm.Ja.Label(lblMarked),
		// IPv6: the ECN bits are bits 5:4 of the second byte.
		asm.LoadMem(asm.R1, asm.R9, 1, asm.Byte).WithSymbol(lblMark6),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.And.Imm(asm.R2, ecnMask6),
		asm.JEq.Imm(asm.R2, 0, lblRedirect),
		asm.JEq.Imm(asm.R2, ecnMask6, lblRedirect),
		asm.Or.Imm(asm.R1, ecnMask6),
		asm.StoreMem(asm.R9, 1, asm.R1, asm.Byte),
		asm.JEq.Imm(asm.R8, 0, lblRedirect).WithSymbol(lblMarked),
		asm.LoadMem(asm.R1, asm.R8, countersMarkedCEOff, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R8, countersMarkedCEOff, asm.R1, asm.DWord),

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
