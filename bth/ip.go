package bth

import (
	"encoding/binary"
	"math/bits"
	"net"
	"net/netip"
)

// Sizes of the headers that carry RoCE v2.
const (
	EthernetSize = 14 // destination MAC, source MAC, EtherType (no FCS)
	VLANSize     = 4  // 802.1Q tag: TCI and the inner EtherType
	IPv4Size     = 20 // IPv4 header without options
	IPv6Size     = 40 // IPv6 fixed header
	UDPSize      = 8
	ICRCSize     = 4
)

// EtherTypes and numbers used by RoCE v2.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	EtherTypeVLAN = 0x8100 // IEEE 802.1Q
	ProtocolUDP   = 17
	UDPPort       = 4791 // IANA port for RoCE v2
)

// Ethernet is a view of an Ethernet II header (no FCS).
type Ethernet []byte

// Dst returns the destination MAC address (a view, not a copy).
func (e Ethernet) Dst() net.HardwareAddr { return net.HardwareAddr(e[0:6:6]) }

// Src returns the source MAC address (a view, not a copy).
func (e Ethernet) Src() net.HardwareAddr { return net.HardwareAddr(e[6:12:12]) }

// DstArray returns the destination MAC address as an array.
func (e Ethernet) DstArray() [6]byte { return [6]byte(e[0:6]) }

// SrcArray returns the source MAC address as an array.
func (e Ethernet) SrcArray() [6]byte { return [6]byte(e[6:12]) }

// EtherType returns the EtherType (0x8100 when a VLAN tag follows).
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[12:]) }

// VLAN is a view of the four bytes an 802.1Q tag adds after the MAC
// addresses: the Tag Control Information and the inner EtherType.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| PCP |D|        VLAN ID        |         EtherType             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type VLAN []byte

// TCI returns the Tag Control Information (PCP, DEI, VLAN ID).
func (v VLAN) TCI() uint16 { return binary.BigEndian.Uint16(v) }

// PCP returns the Priority Code Point (3 bits).
func (v VLAN) PCP() uint8 { return v[0] >> 5 }

// DEI returns the Drop Eligible Indicator.
func (v VLAN) DEI() bool { return v[0]&0x10 != 0 }

// ID returns the 12-bit VLAN identifier.
func (v VLAN) ID() uint16 { return v.TCI() & 0xfff }

// EtherType returns the EtherType of the tagged packet.
func (v VLAN) EtherType() uint16 { return binary.BigEndian.Uint16(v[2:]) }

// IPv4 is a view of an IPv4 header (RFC 791) without options.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |      TOS      |          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      TTL      |    Protocol   |         Header Checksum       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// TOS, TTL and the header checksum are masked out of the ICRC.
type IPv4 []byte

// Version returns the IP version field (4).
func (h IPv4) Version() uint8 { return h[0] >> 4 }

// IHL returns the header length in 32-bit words.
func (h IPv4) IHL() uint8 { return h[0] & 0xf }

// TOS returns the Type of Service byte (DSCP and ECN), the traffic class.
func (h IPv4) TOS() uint8 { return h[1] }

// TotalLen returns the Total Length of the IP packet.
func (h IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// ID returns the Identification field.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// DF returns the Don't Fragment flag.
func (h IPv4) DF() bool { return h[6]&0x40 != 0 }

// MF returns the More Fragments flag.
func (h IPv4) MF() bool { return h[6]&0x20 != 0 }

// FragOff returns the fragment offset in 8-byte units.
func (h IPv4) FragOff() uint16 { return binary.BigEndian.Uint16(h[6:]) & 0x1fff }

// TTL returns the Time To Live (the hop limit).
func (h IPv4) TTL() uint8 { return h[8] }

// Protocol returns the upper-layer protocol (17 for UDP).
func (h IPv4) Protocol() uint8 { return h[9] }

// Checksum returns the Header Checksum.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[10:]) }

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[12:16])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[16:20])) }

// ChecksumValid reports whether the header checksum is correct.
func (h IPv4) ChecksumValid() bool { return ipv4Sum(h) == 0xffff }

// ipv4Sum returns the folded ones' complement sum of the 20-byte header,
// added 64 bits at a time with end-around carries (RFC 1071 §2).
func ipv4Sum(h []byte) uint16 {
	_ = h[IPv4Size-1]
	s, c := bits.Add64(binary.BigEndian.Uint64(h[0:]), binary.BigEndian.Uint64(h[8:]), 0)
	s, c = bits.Add64(s, uint64(binary.BigEndian.Uint32(h[16:])), c)
	s += c // cannot carry again: s < 2^64-1 after a carry
	t := s>>32 + s&0xffffffff
	t = t>>16 + t&0xffff
	t = t>>16 + t&0xffff
	return uint16(t>>16 + t&0xffff)
}

// SetChecksum computes and stores the header checksum.
func (h IPv4) SetChecksum() {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^ipv4Sum(h))
}

// IPv6 is a view of the fixed IPv6 header (RFC 8200).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Source Address (128 bits)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Destination Address (128 bits)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Traffic class, flow label and hop limit are masked out of the ICRC.
type IPv6 []byte

// Version returns the IP version field (6).
func (h IPv6) Version() uint8 { return h[0] >> 4 }

// TrafficClass returns the Traffic Class.
func (h IPv6) TrafficClass() uint8 { return h[0]<<4 | h[1]>>4 }

// FlowLabel returns the 20-bit Flow Label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h) & 0xfffff }

// PayloadLen returns the Payload Length.
func (h IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// NextHeader returns the Next Header (17 for UDP).
func (h IPv6) NextHeader() uint8 { return h[6] }

// HopLimit returns the Hop Limit.
func (h IPv6) HopLimit() uint8 { return h[7] }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[8:24])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[24:40])) }

// UDP is a view of a UDP header (RFC 768).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Length             |           Checksum            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RoCE v2 senders set the checksum to 0; it is masked out of the ICRC.
type UDP []byte

// SrcPort returns the source port (flow entropy for RoCE v2).
func (h UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(h) }

// DstPort returns the destination port (4791 for RoCE v2).
func (h UDP) DstPort() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// Length returns the UDP Length (header and data).
func (h UDP) Length() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// Checksum returns the UDP Checksum.
func (h UDP) Checksum() uint16 { return binary.BigEndian.Uint16(h[6:]) }
