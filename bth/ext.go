package bth

import "encoding/binary"

// Extension header sizes (IBTA Vol 1 §9.3).
const (
	RETHSize         = 16
	AETHSize         = 4
	ImmDtSize        = 4
	IETHSize         = 4
	DETHSize         = 8
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
	FETHSize         = 4
	CNPReservedSize  = 16 // reserved bytes after the BTH of a CNP
)

// RETH is a view of the RDMA Extended Transport Header (IBTA Vol 1 §9.3), carried by
// RDMA WRITE FIRST/ONLY, RDMA READ REQUEST, FLUSH and ATOMIC_WRITE.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (63:32)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (31:0)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Remote Key                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          DMA Length                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RETH []byte

const (
	rethVA     = 0
	rethRKey   = 8
	rethDMALen = 12
)

// RETHFields holds the RETH's fields for Encode.
type RETHFields struct {
	VA     uint64 // virtual address
	RKey   uint32 // remote key
	DMALen uint32 // length of the whole RDMA operation in bytes
}

// VA returns the Virtual Address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[rethVA:]) }

// RKey returns the Remote Key.
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[rethRKey:]) }

// DMALen returns the DMA Length.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[rethDMALen:]) }

// Fields returns the header's fields.
func (h RETH) Fields() RETHFields { return RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()} }

// Encode writes f into the view.
func (h RETH) Encode(f *RETHFields) {
	_ = h[RETHSize-1]
	binary.BigEndian.PutUint64(h[rethVA:], f.VA)
	binary.BigEndian.PutUint32(h[rethRKey:], f.RKey)
	binary.BigEndian.PutUint32(h[rethDMALen:], f.DMALen)
}

// AETH is a view of the ACK Extended Transport Header (IBTA Vol 1 §9.3), carried by
// ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and RDMA READ RESPONSE FIRST/LAST/ONLY.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Syndrome    |             Message Sequence Number           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AETH []byte

// AETHFields holds the AETH's fields for Encode.
type AETHFields struct {
	Syndrome Syndrome
	MSN      PSN // message sequence number (24 bits)
}

// Syndrome returns the Syndrome.
func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }

// MSN returns the 24-bit Message Sequence Number.
func (h AETH) MSN() PSN { return PSN(uint24(h[1:])) }

// Fields returns the header's fields.
func (h AETH) Fields() AETHFields { return AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()} }

// Encode writes f into the view.
func (h AETH) Encode(f *AETHFields) {
	_ = h[AETHSize-1]
	h[0] = byte(f.Syndrome)
	putUint24(h[1:], uint32(f.MSN))
}

// ImmDt is a view of the Immediate Data header (IBTA Vol 1 §9.3): four opaque bytes
// handed to the receiver's completion, read here as a big-endian number.
type ImmDt []byte

// Imm returns the immediate data.
func (h ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(h) }

// Encode writes the immediate data.
func (h ImmDt) Encode(imm uint32) { binary.BigEndian.PutUint32(h, imm) }

// IETH is a view of the Invalidate Extended Transport Header (IBTA Vol 1 §9.3),
// carried by SEND LAST/ONLY WITH INVALIDATE.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h) }

// Encode writes the R_Key to invalidate.
func (h IETH) Encode(rkey uint32) { binary.BigEndian.PutUint32(h, rkey) }

// DETH is a view of the Datagram Extended Transport Header (IBTA Vol 1 §9.3), carried
// by UD packets.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Queue Key                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                Source QP                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DETH []byte

const (
	dethQKey  = 0
	dethSrcQP = 5
)

// DETHFields holds the DETH's fields for Encode.
type DETHFields struct {
	QKey  uint32 // queue key
	SrcQP uint32 // source queue pair number (24 bits)
}

// QKey returns the Queue Key.
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h[dethQKey:]) }

// SrcQP returns the 24-bit Source QP number.
func (h DETH) SrcQP() uint32 { return uint24(h[dethSrcQP:]) }

// Fields returns the header's fields.
func (h DETH) Fields() DETHFields { return DETHFields{QKey: h.QKey(), SrcQP: h.SrcQP()} }

// Encode writes f into the view; the reserved byte is written as zero.
func (h DETH) Encode(f *DETHFields) {
	_ = h[DETHSize-1]
	binary.BigEndian.PutUint32(h[dethQKey:], f.QKey)
	h[4] = 0
	putUint24(h[dethSrcQP:], f.SrcQP)
}

// AtomicETH is a view of the Atomic Extended Transport Header (IBTA Vol 1 §9.3),
// carried by COMPARE_SWAP and FETCH_ADD.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (63:0)                    |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Remote Key                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Swap (or Add) Data (63:0)                    |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Compare Data (63:0)                       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicETH []byte

const (
	atomicVA      = 0
	atomicRKey    = 8
	atomicSwapAdd = 12
	atomicCompare = 20
)

// AtomicETHFields holds the AtomicETH's fields for Encode.
type AtomicETHFields struct {
	VA      uint64 // virtual address, 8-byte aligned
	RKey    uint32 // remote key
	SwapAdd uint64 // swap value (COMPARE_SWAP) or addend (FETCH_ADD)
	Compare uint64 // compare value (COMPARE_SWAP)
}

// VA returns the Virtual Address.
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[atomicVA:]) }

// RKey returns the Remote Key.
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[atomicRKey:]) }

// SwapAdd returns the Swap (COMPARE_SWAP) or Add (FETCH_ADD) Data.
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[atomicSwapAdd:]) }

// Compare returns the Compare Data.
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[atomicCompare:]) }

// Fields returns the header's fields.
func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// Encode writes f into the view.
func (h AtomicETH) Encode(f *AtomicETHFields) {
	_ = h[AtomicETHSize-1]
	binary.BigEndian.PutUint64(h[atomicVA:], f.VA)
	binary.BigEndian.PutUint32(h[atomicRKey:], f.RKey)
	binary.BigEndian.PutUint64(h[atomicSwapAdd:], f.SwapAdd)
	binary.BigEndian.PutUint64(h[atomicCompare:], f.Compare)
}

// AtomicAckETH is a view of the Atomic Acknowledge Extended Transport Header
// (IBTA Vol 1 §9.3): the remote value before the atomic operation.
type AtomicAckETH []byte

// OrigRemoteData returns the Original Remote Data.
func (h AtomicAckETH) OrigRemoteData() uint64 { return binary.BigEndian.Uint64(h) }

// Encode writes the Original Remote Data.
func (h AtomicAckETH) Encode(orig uint64) { binary.BigEndian.PutUint64(h, orig) }

// FETH is a view of the Flush Extended Transport Header carried by FLUSH
// (IBTA memory placement extensions; rxe's struct rxe_feth).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Reserved                     |SEL|  PLT  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// SEL = selectivity level (0 memory region, 1 whole memory), PLT = placement
// type (bit 0 global visibility, bit 1 persistence).
type FETH []byte

// FETHFields holds the FETH's fields for Encode.
type FETHFields struct {
	SelectivityLevel uint8 // 2 bits
	PlacementType    uint8 // 4 bits
}

// SelectivityLevel returns the selectivity level (SEL, bits 5:4).
func (h FETH) SelectivityLevel() uint8 { return h[3] >> 4 & 3 }

// PlacementType returns the placement type (PLT, bits 3:0).
func (h FETH) PlacementType() uint8 { return h[3] & 0xf }

// Fields returns the header's fields.
func (h FETH) Fields() FETHFields {
	return FETHFields{SelectivityLevel: h.SelectivityLevel(), PlacementType: h.PlacementType()}
}

// Encode writes f into the view; reserved bits are written as zero.
func (h FETH) Encode(f *FETHFields) {
	_ = h[FETHSize-1]
	h[0], h[1], h[2] = 0, 0, 0
	h[3] = (f.SelectivityLevel&3)<<4 | f.PlacementType&0xf
}
