// Package bth implements the RoCE v2 wire format: the InfiniBand Base
// Transport Header (BTH), its extension headers, the invariant CRC (ICRC) and
// whole Ethernet / IPv4 or IPv6 / UDP 4791 frames that carry them.
//
// It follows the InfiniBand Architecture Specification Volume 1, Release 1.4
// (chapter 9, "Transport Layer": §9.2 BTH, §9.3 extension headers, §9.7 the
// reliable service's PSNs, ACK syndromes, credits and RNR timers), and Annex
// A17 "RoCEv2" (UDP destination port 4791, the ICRC computed over the
// IP/UDP/BTH headers with their variant fields masked). Where
// the Linux soft-RoCE driver (drivers/infiniband/sw/rxe) differs from the
// spec, the package accepts both and emits what the spec says; the golden
// tests use captures of real rxe traffic.
//
// # Views
//
// Every header is a named byte slice (BTH, RETH, AETH, ImmDt, IETH, DETH,
// AtomicETH, AtomicAckETH, FETH, and the plain Ethernet, VLAN, IPv4, IPv6 and
// UDP headers around them). Accessors read the spec's fields straight from
// the bytes and Encode writes them from a fields struct; neither allocates.
// A view's accessors assume the slice is at least the header's size: Frame.Decode
// validates lengths once, at the edge, and hands out views that are safe to read.
//
// # Frames
//
// Frame.Decode parses a whole Ethernet frame without copying or allocating and
// reports a *DecodeError naming the layer, the offset and a typed Reason when
// the frame is not a well-formed RoCE v2 packet. Frame.VerifyICRC checks the
// ICRC. Build and BuildInPlace write a frame into a caller's buffer, around a
// payload that may already sit at its final offset (HeaderLen tells where),
// filling lengths, the IPv4 header checksum, the pad and the ICRC.
//
// IPv4 packets with options (IHL > 5), IPv4 fragments and IPv6 packets with
// extension headers are rejected: no RoCE v2 implementation sends them, and
// the ICRC of such packets would cover the options. Ethernet padding after
// the IP packet (short frames padded to 60 bytes) is ignored.
package bth
