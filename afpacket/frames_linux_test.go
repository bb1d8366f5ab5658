package afpacket

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// Test frame builder: writes headers in network order into a buffer.

const (
	ethIPv4 = 0x0800
	ethIPv6 = 0x86dd
	ethVLAN = 0x8100
	ethQinQ = 0x88a8
	ethARP  = 0x0806

	protoTCP = 6
	protoUDP = 17
)

// addrs are the two ends of a test frame.
type addrs struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.Addr // IPv4
}

// frameSpec describes a frame to build.
type frameSpec struct {
	vlan     bool   // one 802.1Q tag
	ipv6     bool   // IPv6 instead of IPv4
	proto    uint8  // IP protocol; 0 = UDP
	dport    uint16 // UDP/TCP destination port; 0 = 4791
	options  int    // IPv4 option bytes
	fragWord uint16 // IPv4 flags and fragment offset; 0 = DF
	size     int    // total frame length; the payload fills the rest
	seed     byte   // payload pattern
}

// build writes the frame into b (which must hold s.size bytes) and returns
// it.
func (a addrs) build(b []byte, s frameSpec) []byte {
	if s.proto == 0 {
		s.proto = protoUDP
	}
	if s.dport == 0 {
		s.dport = roceV2Port
	}
	if s.fragWord == 0 {
		s.fragWord = 0x4000
	}
	b = b[:s.size]
	copy(b[0:6], a.dstMAC)
	copy(b[6:12], a.srcMAC)
	off := 12
	if s.vlan {
		binary.BigEndian.PutUint16(b[off:], ethVLAN)
		binary.BigEndian.PutUint16(b[off+2:], 100)
		off += 4
	}
	l3 := off + 2
	if s.ipv6 {
		binary.BigEndian.PutUint16(b[off:], ethIPv6)
		ip := b[l3 : l3+40]
		ip[0], ip[1], ip[2], ip[3] = 0x60, 0, 0, 0
		binary.BigEndian.PutUint16(ip[4:], uint16(s.size-l3-40))
		ip[6], ip[7] = s.proto, 64
		src, dst := netip.AddrFrom4([4]byte{198, 18, 0, 1}).As16(), netip.AddrFrom4([4]byte{198, 18, 0, 2}).As16()
		src[0], dst[0] = 0xfe, 0xfe // some addresses; IPv6 is off on the test veth
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
		l3 += 40
	} else {
		binary.BigEndian.PutUint16(b[off:], ethIPv4)
		hl := 20 + s.options
		ip := b[l3 : l3+hl]
		ip[0], ip[1] = byte(0x40|hl/4), 0
		binary.BigEndian.PutUint16(ip[2:], uint16(s.size-l3))
		binary.BigEndian.PutUint16(ip[4:], uint16(s.seed))
		binary.BigEndian.PutUint16(ip[6:], s.fragWord)
		ip[8], ip[9] = 64, s.proto
		binary.BigEndian.PutUint16(ip[10:], 0)
		copy(ip[12:16], a.src.AsSlice())
		copy(ip[16:20], a.dst.AsSlice())
		for i := 20; i < hl; i++ {
			ip[i] = 1 // NOP
		}
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
		l3 += hl
	}
	u := b[l3:]
	binary.BigEndian.PutUint16(u[0:], 0xc000|uint16(s.seed))
	binary.BigEndian.PutUint16(u[2:], s.dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	binary.BigEndian.PutUint16(u[6:], 0)
	for i := 8; i < len(u); i++ {
		u[i] = byte(i*7) ^ s.seed
	}
	return b
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// arpRequest writes an ARP request from a into b.
func (a addrs) arpRequest(b []byte) []byte {
	b = b[:42]
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], a.srcMAC)
	binary.BigEndian.PutUint16(b[12:], ethARP)
	copy(b[14:22], []byte{0, 1, 8, 0, 6, 4, 0, 1})
	copy(b[22:28], a.srcMAC)
	copy(b[28:32], a.src.AsSlice())
	copy(b[32:38], make([]byte, 6))
	copy(b[38:42], a.dst.AsSlice())
	return b
}
