package bth

import "encoding/binary"

// BTHSize is the length of the Base Transport Header.
const BTHSize = 12

// BTH is a view of a Base Transport Header (IBTA Vol 1 §9.2). The slice must
// be at least BTHSize long.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad|  TVer |           Partition Key       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|   Resv6   |           Destination QP                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   Resv7     |           Packet Sequence Number              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S = Solicited Event, M = MigReq, Pad = PadCnt, F = FECN, B = BECN,
// A = AckReq. Byte 4 (FECN, BECN, Resv6) may be changed by the network and
// is masked out of the ICRC.
type BTH []byte

const (
	bthOpcode = 0
	bthFlags  = 1 // SE, MigReq, PadCnt, TVer
	bthPKey   = 2
	bthFECN   = 4 // FECN, BECN, Resv6
	bthDestQP = 5
	bthAck    = 8 // AckReq, Resv7
	bthPSN    = 9
)

// BTHFields holds the BTH's fields for Encode.
type BTHFields struct {
	Opcode Opcode
	SE     bool   // Solicited Event
	MigReq bool   // migration state
	PadCnt uint8  // pad bytes (0..3) added to make the payload a multiple of 4
	TVer   uint8  // transport header version, 0
	PKey   uint16 // partition key, 0xFFFF for the default partition
	FECN   bool   // forward explicit congestion notification
	BECN   bool   // backward explicit congestion notification
	DestQP uint32 // destination queue pair number (24 bits)
	AckReq bool   // acknowledge request
	PSN    PSN    // packet sequence number (24 bits)
}

// Opcode returns the OpCode field.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SE returns the Solicited Event bit.
func (b BTH) SE() bool { return b[bthFlags]&0x80 != 0 }

// MigReq returns the MigReq bit.
func (b BTH) MigReq() bool { return b[bthFlags]&0x40 != 0 }

// PadCnt returns the pad count: bytes (0..3) between payload and ICRC.
func (b BTH) PadCnt() uint8 { return b[bthFlags] >> 4 & 3 }

// TVer returns the transport header version (0 for IBTA 1.x).
func (b BTH) TVer() uint8 { return b[bthFlags] & 0xf }

// PKey returns the Partition Key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the Forward Explicit Congestion Notification bit.
func (b BTH) FECN() bool { return b[bthFECN]&0x80 != 0 }

// BECN returns the Backward Explicit Congestion Notification bit.
func (b BTH) BECN() bool { return b[bthFECN]&0x40 != 0 }

// DestQP returns the 24-bit Destination QP number.
func (b BTH) DestQP() uint32 { return uint24(b[bthDestQP:]) }

// AckReq returns the Acknowledge Request bit.
func (b BTH) AckReq() bool { return b[bthAck]&0x80 != 0 }

// PSN returns the 24-bit Packet Sequence Number.
func (b BTH) PSN() PSN { return PSN(uint24(b[bthPSN:])) }

// SetFECN sets or clears FECN in place (a switch marking congestion).
func (b BTH) SetFECN(v bool) { setBit(&b[bthFECN], 0x80, v) }

// SetBECN sets or clears BECN in place.
func (b BTH) SetBECN(v bool) { setBit(&b[bthFECN], 0x40, v) }

// SetAckReq sets or clears AckReq in place.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAck], 0x80, v) }

// SetPSN rewrites the PSN in place.
func (b BTH) SetPSN(p PSN) { putUint24(b[bthPSN:], uint32(p)) }

// Fields returns the header's fields.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: b.PadCnt(), TVer: b.TVer(),
		PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// Encode writes f into the view. Reserved bits are written as zero; values
// wider than their field are truncated to it.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHSize-1]
	b[bthOpcode] = byte(f.Opcode)
	b[bthFlags] = bit(f.SE, 0x80) | bit(f.MigReq, 0x40) | (f.PadCnt&3)<<4 | f.TVer&0xf
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	b[bthFECN] = bit(f.FECN, 0x80) | bit(f.BECN, 0x40)
	putUint24(b[bthDestQP:], f.DestQP)
	b[bthAck] = bit(f.AckReq, 0x80)
	putUint24(b[bthPSN:], uint32(f.PSN))
}

// CNPFields returns the BTH of a RoCE v2 Congestion Notification Packet
// (Annex A17) to destQP: opcode 0x81, BECN set, PSN 0. Build it with
// FrameFields.BTH = CNPFields(...); the 16 reserved bytes are written as
// zero.
func CNPFields(pkey uint16, destQP uint32) BTHFields {
	return BTHFields{Opcode: OpCNP, PKey: pkey, BECN: true, DestQP: destQP}
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

func setBit(p *byte, m byte, v bool) {
	if v {
		*p |= m
	} else {
		*p &^= m
	}
}

func uint24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func putUint24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
