package bth

import (
	"errors"
	"hash/crc32"
)

// The RoCE v2 ICRC (IBTA Vol 1 Annex A17, and rxe's rxe_icrc.c) is the
// IEEE CRC-32 of:
//
//	8 bytes of 0xFF (standing for the masked LRH of native InfiniBand),
//	the IP header with its variant fields set to all ones
//	  (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit),
//	the UDP header with the checksum set to all ones,
//	the BTH with byte 4 (FECN, BECN, reserved) set to all ones,
//	the extension headers, the payload and the pad,
//
// stored on the wire little-endian (rxe keeps the CRC register inverted and
// seeds it with 0xdebb20e3, the state after the eight 0xFF bytes; the result
// is the same number).
//
// RoCE v1 (IBTA Vol 1 Annex A16) carries the BTH straight after a GRH, with
// no UDP header; its ICRC is the same CRC over the eight 0xFF bytes, the GRH
// with traffic class, flow label and hop limit set to ones, and the BTH with
// byte 4 set to ones, then the rest (checked against ConnectX captures).
//
// Verification copies only the masked IP, UDP and BTH headers (40 or 60
// bytes) into a 64-byte block in the Frame; extension headers, payload and
// pad are summed in place with crc32.Update, which uses the CPU's carry-less
// multiply instructions (AVX-512 from 1 KiB) on amd64 and arm64. The builder
// writes the variant fields as ones first and sums its packet in one pass.

// icrcSeed is the CRC after the eight 0xFF bytes.
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

const (
	icrcHdr4   = IPv4Size + UDPSize + BTHSize // 40
	icrcHdr6   = IPv6Size + UDPSize + BTHSize // 60
	icrcHdrGRH = GRHSize + BTHSize            // 52: RoCE v1, no UDP header
	// icrcBlock is the size of the masked copy: hash/crc32 takes its fast
	// carry-less multiply path only for 64 bytes or more, and the headers
	// are shorter, so a prefix fills the block (see icrcPrefix).
	icrcBlock = 64
)

// icrcKind says which headers precede the BTH: an IPv4 or IPv6 header and
// UDP (RoCE v2), or a GRH (RoCE v1). The values index icrcPrefix.
type icrcKind uint8

const (
	icrcGRH  icrcKind = 1
	icrcIPv4 icrcKind = 4
	icrcIPv6 icrcKind = 6
)

// icrcPrefix fills the 64-byte block in front of the masked headers of each
// kind. Each is chosen so that the CRC after it equals icrcSeed, the CRC
// after the eight 0xFF bytes: summing prefix and headers gives the same
// result as the eight 0xFF bytes and the headers, in one fast 64-byte step.
var icrcPrefix = [7][]byte{
	icrcGRH:  forgePrefix(icrcBlock - icrcHdrGRH),
	icrcIPv4: forgePrefix(icrcBlock - icrcHdr4),
	icrcIPv6: forgePrefix(icrcBlock - icrcHdr6),
}

// forgePrefix returns n >= 4 bytes after which crc32.Update's result is
// icrcSeed: n-4 zero bytes, then four bytes that steer the CRC register.
//
// With the register r (crc32.Update keeps it inverted), one byte b maps r to
// T[(r^b)&0xff] ^ r>>8, which is linear in r^b. Four bytes x (little-endian)
// therefore map r to g(r^x), where g is four rounds with zero input, an
// invertible linear map: x = r ^ g⁻¹(target). One round is inverted by
// finding the table entry whose top byte matches (those are all distinct).
func forgePrefix(n int) []byte {
	p := make([]byte, n)
	r := ^crc32.Update(0, crc32.IEEETable, p[:n-4])
	v := ^icrcSeed
	for range 4 {
		for i, e := range crc32.IEEETable {
			if e>>24 == v>>24 {
				v = (v^e)<<8 | uint32(i)
				break
			}
		}
	}
	x := r ^ v
	p[n-4], p[n-3], p[n-2], p[n-1] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	if crc32.Update(0, crc32.IEEETable, p) != icrcSeed {
		panic("bth: ICRC prefix does not reproduce the seed")
	}
	return p
}

// icrcScratch holds the masked copy of the headers. crc32.Update's
// argument escapes (it goes through a function variable), so the copy lives
// in a long-lived Frame rather than on the stack. The prefix is copied in
// only when the kind of headers changes.
type icrcScratch struct {
	b      [icrcBlock]byte
	prefix icrcKind // kind whose prefix b holds, 0 for none
}

// icrc computes the ICRC of an IP packet pkt (starting at the IP header,
// without options, and ending before the ICRC). pkt must hold at least the
// IP, UDP and BTH headers.
func (s *icrcScratch) icrc(pkt []byte, v6 bool) uint32 {
	if v6 {
		return s.sum(pkt, icrcIPv6, -1)
	}
	return s.sum(pkt, icrcIPv4, -1)
}

// sum computes the ICRC of pkt, which starts with headers of the given kind
// and ends before the ICRC. A sport of 0 or more stands in for the UDP
// source port (which the ICRC covers).
func (s *icrcScratch) sum(pkt []byte, kind icrcKind, sport int) uint32 {
	if s.prefix != kind {
		copy(s.b[:], icrcPrefix[kind])
		s.prefix = kind
	}
	h := s.b[len(icrcPrefix[kind]):]
	if kind == icrcIPv4 {
		copy(h, pkt[:icrcHdr4])
		h[1] = 0xff  // TOS
		h[8] = 0xff  // TTL
		h[10] = 0xff // header checksum
		h[11] = 0xff
	} else {
		copy(h, pkt[:len(h)])
		h[0] |= 0x0f // traffic class (high nibble)
		h[1] = 0xff  // traffic class (low nibble), flow label
		h[2] = 0xff  // flow label
		h[3] = 0xff  // flow label
		h[7] = 0xff  // hop limit
	}
	if kind != icrcGRH {
		u := len(h) - UDPSize - BTHSize
		if sport >= 0 {
			h[u], h[u+1] = byte(sport>>8), byte(sport)
		}
		h[u+6] = 0xff // UDP checksum
		h[u+7] = 0xff
	}
	h[len(h)-BTHSize+bthFECN] = 0xff // FECN, BECN, reserved
	c := crc32.Update(0, crc32.IEEETable, s.b[:])
	return crc32.Update(c, crc32.IEEETable, pkt[len(h):])
}

// icrcAlign holds prefixes of 4, 8 and 12 bytes after which the CRC is
// icrcSeed (see forgePrefix), indexed by length/4.
var icrcAlign = [4][]byte{nil, forgePrefix(4), forgePrefix(8), forgePrefix(12)}

// icrcInPlace computes the ICRC of the packet b[ip:], whose variant fields
// already hold all ones (the builder writes them so, then the real values).
// The packet's length is a multiple of 4; hash/crc32 sums 16-byte blocks
// with carry-less multiplication and the remainder a byte at a time, so the
// up to 12 bytes before the packet (the end of the Ethernet header, written
// afterwards by the caller) receive a prefix that makes the length a
// multiple of 16 without changing the result.
func icrcInPlace(b []byte, ip int) uint32 {
	k := -(len(b) - ip) & 15
	if k == 0 {
		return crc32.Update(icrcSeed, crc32.IEEETable, b[ip:])
	}
	copy(b[ip-k:ip], icrcAlign[k/4])
	return crc32.Update(0, crc32.IEEETable, b[ip-k:])
}

// ErrNotRoCE is returned by ICRC for a packet that is too short or not
// IPv4 (without options) or IPv6.
var ErrNotRoCE = errors.New("not a RoCE v2 IP packet")

// ICRC computes the RoCE v2 ICRC of an IP packet: pkt runs from the IP
// header (IPv4 without options, or IPv6 without extension headers) through
// the 4-byte ICRC field, whose content is ignored. Compare the result with
// binary.LittleEndian.Uint32(pkt[len(pkt)-4:]). It is meant for tools; the
// receive path uses Frame.VerifyICRC, which does not allocate.
func ICRC(pkt []byte) (uint32, error) {
	var h icrcScratch
	if len(pkt) < 1 {
		return 0, ErrNotRoCE
	}
	switch pkt[0] {
	case 0x45:
		if len(pkt) < icrcHdr4+ICRCSize {
			return 0, ErrNotRoCE
		}
		return h.icrc(pkt[:len(pkt)-ICRCSize], false), nil
	default:
		if pkt[0]>>4 != 6 || len(pkt) < icrcHdr6+ICRCSize {
			return 0, ErrNotRoCE
		}
		return h.icrc(pkt[:len(pkt)-ICRCSize], true), nil
	}
}
