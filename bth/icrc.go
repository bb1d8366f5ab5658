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
// Only the masked headers (at most 60 bytes) are copied, to the stack; the
// rest is summed in place with crc32.Update, which uses the CPU's carry-less
// multiply instructions on amd64 and arm64.

// icrcSeed is the CRC after the eight 0xFF bytes.
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

const (
	icrcHdr4 = IPv4Size + UDPSize + BTHSize
	icrcHdr6 = IPv6Size + UDPSize + BTHSize
)

// icrcScratch holds the masked copy of the headers. crc32.Update's
// argument escapes (it goes through a function variable), so the copy lives
// in a long-lived Frame rather than on the stack.
type icrcScratch [icrcHdr6]byte

// icrc computes the ICRC of an IP packet pkt (starting at the IP header,
// without options, and ending before the ICRC). pkt must hold at least the
// IP, UDP and BTH headers.
func (h *icrcScratch) icrc(pkt []byte, v6 bool) uint32 {
	var n int
	if v6 {
		n = icrcHdr6
		copy(h[:], pkt[:icrcHdr6])
		h[0] |= 0x0f // traffic class (high nibble)
		h[1] = 0xff  // traffic class (low nibble), flow label
		h[2] = 0xff  // flow label
		h[3] = 0xff  // flow label
		h[7] = 0xff  // hop limit
	} else {
		n = icrcHdr4
		copy(h[:icrcHdr4], pkt[:icrcHdr4])
		h[1] = 0xff  // TOS
		h[8] = 0xff  // TTL
		h[10] = 0xff // header checksum
		h[11] = 0xff
	}
	u := n - UDPSize - BTHSize
	h[u+6] = 0xff // UDP checksum
	h[u+7] = 0xff
	h[u+UDPSize+bthFECN] = 0xff // FECN, BECN, reserved
	c := crc32.Update(icrcSeed, crc32.IEEETable, h[:n])
	return crc32.Update(c, crc32.IEEETable, pkt[n:])
}

// icrcMasked computes the ICRC of a packet whose variant fields already
// hold all ones (the builder writes them so, then the real values).
func icrcMasked(pkt []byte) uint32 { return crc32.Update(icrcSeed, crc32.IEEETable, pkt) }

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
