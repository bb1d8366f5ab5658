package bth

import "strconv"

// ECN is the Explicit Congestion Notification field (RFC 3168 §5): the two
// low bits of the IPv4 TOS byte or of the IPv6 traffic class. RoCE v2
// congestion control (IBTA Vol 1 Annex A17.9) uses it as IP does: senders
// mark their packets ECN-capable, a congested switch rewrites ECT to CE,
// and the receiver answers CE with a CNP. The TOS byte is masked out of the
// ICRC, so a switch may rewrite it without breaking the packet.
type ECN uint8

// ECN codepoints.
const (
	NotECT ECN = 0b00 // not ECN-capable transport
	ECT1   ECN = 0b01 // ECN-capable, ECT(1)
	ECT0   ECN = 0b10 // ECN-capable, ECT(0): what ConnectX NICs send
	CE     ECN = 0b11 // congestion experienced
)

var ecnNames = [4]string{"Not-ECT", "ECT(1)", "ECT(0)", "CE"}

func (e ECN) String() string {
	if e < 4 {
		return ecnNames[e]
	}
	return "ECN(" + strconv.Itoa(int(e)) + ")"
}

// ECNOf returns the ECN field of a TOS or traffic class byte.
func ECNOf(tos uint8) ECN { return ECN(tos & 3) }

// DSCPOf returns the Differentiated Services codepoint (the six high bits)
// of a TOS or traffic class byte.
func DSCPOf(tos uint8) uint8 { return tos >> 2 }

// ECN returns the frame's ECN field (IPv4 TOS or IPv6 traffic class), or
// NotECT for a frame without an IP header.
func (f *Frame) ECN() ECN {
	switch {
	case f.IPv4 != nil:
		return ECNOf(f.IPv4.TOS())
	case f.IPv6 != nil:
		return ECNOf(f.IPv6.TrafficClass())
	}
	return NotECT
}

// SetTOS rewrites the TOS byte in place and updates the header checksum.
func (h IPv4) SetTOS(tos uint8) {
	h[1] = tos
	h.SetChecksum()
}

// SetTrafficClass rewrites the traffic class in place.
func (h IPv6) SetTrafficClass(tc uint8) {
	h[0] = h[0]&0xf0 | tc>>4
	h[1] = h[1]&0x0f | tc<<4
}

// MarkCE sets the ECN field of the IPv4 or IPv6 packet in an Ethernet frame
// (untagged or with one 802.1Q tag) to CE if it is ECN-capable (ECT(0) or
// ECT(1)), as a congested switch does (RFC 3168 §5), updating the IPv4
// header checksum, and reports whether it did. A frame that is not IP, too
// short, Not-ECT or already CE is left alone. It only looks at the headers
// up to the TOS byte: a switch marks any IP packet, RoCE or not.
func MarkCE(frame []byte) bool {
	if len(frame) < EthernetSize {
		return false
	}
	off := EthernetSize
	et := Ethernet(frame).EtherType()
	if et == EtherTypeVLAN {
		if len(frame) < off+VLANSize {
			return false
		}
		et = VLAN(frame[off:]).EtherType()
		off += VLANSize
	}
	switch et {
	case EtherTypeIPv4:
		if len(frame) < off+IPv4Size {
			return false
		}
		ip := IPv4(frame[off : off+IPv4Size])
		if ip.Version() != 4 || ip.IHL() != 5 {
			return false
		}
		tos := ip.TOS()
		if e := ECNOf(tos); e != ECT0 && e != ECT1 {
			return false
		}
		ip.SetTOS(tos | uint8(CE))
		return true
	case EtherTypeIPv6:
		if len(frame) < off+IPv6Size {
			return false
		}
		ip := IPv6(frame[off : off+IPv6Size])
		if ip.Version() != 6 {
			return false
		}
		tc := ip.TrafficClass()
		if e := ECNOf(tc); e != ECT0 && e != ECT1 {
			return false
		}
		ip.SetTrafficClass(tc | uint8(CE))
		return true
	}
	return false
}
