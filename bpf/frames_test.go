package bpf

import (
	"encoding/binary"
)

// Test frame builder: each function appends one header in network order.

var (
	testDstMAC = []byte{0x02, 0x78, 0x72, 0x00, 0x00, 0x02}
	testSrcMAC = []byte{0x02, 0x78, 0x72, 0x00, 0x00, 0x01}
)

const (
	ethIPv4 = 0x0800
	ethIPv6 = 0x86dd
	ethVLAN = 0x8100
	ethARP  = 0x0806
	ethQinQ = 0x88a8

	protoTCP = 6
	protoUDP = 17
	protoHop = 0 // IPv6 hop-by-hop options
)

func appendEth(b []byte, etherType uint16) []byte {
	b = append(b, testDstMAC...)
	b = append(b, testSrcMAC...)
	return binary.BigEndian.AppendUint16(b, etherType)
}

func appendVLAN(b []byte, vid uint16, etherType uint16) []byte {
	b = binary.BigEndian.AppendUint16(b, vid&0x0fff)
	return binary.BigEndian.AppendUint16(b, etherType)
}

// ipv4Opts describes an IPv4 header; the zero value means a plain header
// with DF set carrying UDP.
type ipv4Opts struct {
	proto    uint8
	options  int    // bytes of options (multiple of 4)
	fragWord uint16 // flags and fragment offset; 0 means DF only
	payload  int    // bytes after the IP header
}

func appendIPv4(b []byte, o ipv4Opts) []byte {
	if o.proto == 0 {
		o.proto = protoUDP
	}
	if o.fragWord == 0 {
		o.fragWord = 0x4000 // DF
	}
	hlen := 20 + o.options
	b = append(b, byte(0x40|hlen/4), 0)
	b = binary.BigEndian.AppendUint16(b, uint16(hlen+o.payload))
	b = binary.BigEndian.AppendUint16(b, 0x1234) // identification
	b = binary.BigEndian.AppendUint16(b, o.fragWord)
	b = append(b, 64, o.proto, 0, 0) // TTL, protocol, checksum (not checked)
	b = append(b, 198, 18, 0, 1)     // source
	b = append(b, 198, 18, 0, 2)     // destination
	for i := 0; i < o.options; i++ {
		b = append(b, 1) // NOP options
	}
	return b
}

func appendIPv6(b []byte, next uint8, payload int) []byte {
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(payload))
	b = append(b, next, 64)
	src := [16]byte{0: 0xfe, 1: 0x80, 15: 1}
	dst := [16]byte{0: 0xfe, 1: 0x80, 15: 2}
	b = append(b, src[:]...)
	return append(b, dst[:]...)
}

func appendUDP(b []byte, dport uint16, payload int) []byte {
	b = binary.BigEndian.AppendUint16(b, 0xc123)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(8+payload))
	return binary.BigEndian.AppendUint16(b, 0)
}

// appendBTH appends a RoCE SEND ONLY to QP 0x11, then payload bytes and a
// (not computed) ICRC: the program never looks past UDP.
func appendBTH(b []byte, payload int) []byte {
	b = append(b, 0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1)
	for i := 0; i < payload; i++ {
		b = append(b, byte(i))
	}
	return append(b, 0xde, 0xad, 0xbe, 0xef)
}

// roceLen is the UDP payload length of appendBTH(payload).
func roceLen(payload int) int { return 12 + payload + 4 }

func roce4(payload int) []byte {
	b := appendEth(nil, ethIPv4)
	b = appendIPv4(b, ipv4Opts{payload: 8 + roceLen(payload)})
	b = appendUDP(b, RoCEv2Port, roceLen(payload))
	return appendBTH(b, payload)
}

func roce6(payload int) []byte {
	b := appendEth(nil, ethIPv6)
	b = appendIPv6(b, protoUDP, 8+roceLen(payload))
	b = appendUDP(b, RoCEv2Port, roceLen(payload))
	return appendBTH(b, payload)
}

func roceVLAN4(payload int) []byte {
	b := appendEth(nil, ethVLAN)
	b = appendVLAN(b, 100, ethIPv4)
	b = appendIPv4(b, ipv4Opts{payload: 8 + roceLen(payload)})
	b = appendUDP(b, RoCEv2Port, roceLen(payload))
	return appendBTH(b, payload)
}

func roceVLAN6(payload int) []byte {
	b := appendEth(nil, ethVLAN)
	b = appendVLAN(b, 100, ethIPv6)
	b = appendIPv6(b, protoUDP, 8+roceLen(payload))
	b = appendUDP(b, RoCEv2Port, roceLen(payload))
	return appendBTH(b, payload)
}
