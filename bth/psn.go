package bth

import "strconv"

// PSN is a 24-bit sequence number: the BTH Packet Sequence Number, and also
// the AETH Message Sequence Number (MSN). Arithmetic wraps modulo 2^24 and
// comparisons are valid within a window of 2^23 (IBTA Vol 1 §9.7), the
// same serial-number arithmetic as rxe's psn_compare.
type PSN uint32

// PSNMask keeps the low 24 bits.
const PSNMask = 1<<24 - 1

// PSNWindow is the half range within which Less and Diff are meaningful.
const PSNWindow = 1 << 23

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return PSN((uint32(p) - n) & PSNMask) }

// Diff returns the signed distance p-q, in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Less reports whether p comes before q.
func (p PSN) Less(q PSN) bool { return int32((uint32(p)-uint32(q))<<8) < 0 }

// LessEq reports whether p comes before q or equals it.
func (p PSN) LessEq(q PSN) bool { return int32((uint32(p)-uint32(q))<<8) <= 0 }

// InWindow reports whether p lies in [first, first+size) modulo 2^24.
func (p PSN) InWindow(first PSN, size uint32) bool {
	return (uint32(p)-uint32(first))&PSNMask < size
}

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }

func (p PSN) String() string { return strconv.FormatUint(uint64(p), 10) }
