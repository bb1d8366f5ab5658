package bth

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (IBTA Vol 1 §9.3 AETH, §9.7.5): bits 6:5 give
// the kind (ACK, RNR NAK, NAK) and bits 4:0 its value (credit code, RNR timer
// code or NAK code).
type Syndrome uint8

// SyndromeKind is the kind of an AETH syndrome (bits 6:5).
type SyndromeKind uint8

// Syndrome kinds.
const (
	KindACK      SyndromeKind = 0 // positive acknowledgement, low bits = credit code
	KindRNRNak   SyndromeKind = 1 // receiver not ready, low bits = RNR timer code
	KindReserved SyndromeKind = 2 // reserved
	KindNAK      SyndromeKind = 3 // negative acknowledgement, low bits = NAK code
)

func (k SyndromeKind) String() string {
	switch k {
	case KindACK:
		return "ACK"
	case KindRNRNak:
		return "RNR NAK"
	case KindReserved:
		return "reserved"
	case KindNAK:
		return "NAK"
	}
	return "SyndromeKind(" + strconv.Itoa(int(k)) + ")"
}

// Well-known syndromes.
const (
	// SyndromeACKNoCredits is an ACK with credit code 31: credits not
	// tracked (what rxe always sends).
	SyndromeACKNoCredits Syndrome = 0x1f
	// NAK codes.
	NakPSNSeqError       Syndrome = 0x60 // PSN sequence error
	NakInvalidRequest    Syndrome = 0x61 // invalid request
	NakRemoteAccessError Syndrome = 0x62 // remote access error
	NakRemoteOpError     Syndrome = 0x63 // remote operational error
	NakInvalidRDRequest  Syndrome = 0x64 // invalid RD request (RD only)
)

// CreditsInvalid is the credit code that means "no credit count".
const CreditsInvalid = 31

// ACKSyndrome returns an ACK syndrome with the given credit code (0..31).
func ACKSyndrome(creditCode uint8) Syndrome { return Syndrome(creditCode & 0x1f) }

// RNRNakSyndrome returns an RNR NAK syndrome with the given timer code (0..31).
func RNRNakSyndrome(timerCode uint8) Syndrome { return Syndrome(0x20 | timerCode&0x1f) }

// Kind returns the syndrome's kind (bits 6:5).
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s >> 5 & 3) }

// Value returns the low five bits: credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// IsACK reports whether the syndrome is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Kind() == KindACK }

// IsRNRNak reports whether the syndrome is an RNR NAK.
func (s Syndrome) IsRNRNak() bool { return s.Kind() == KindRNRNak }

// IsNAK reports whether the syndrome is a NAK (not an RNR NAK).
func (s Syndrome) IsNAK() bool { return s.Kind() == KindNAK }

// Credits returns the number of receive WQEs an ACK's credit code stands for;
// ok is false for code 31 (invalid: credits not tracked) and for syndromes
// that are not ACKs.
func (s Syndrome) Credits() (n int, ok bool) {
	if !s.IsACK() || s.Value() == CreditsInvalid {
		return 0, false
	}
	return CreditCount(s.Value()), true
}

// RNRTimer returns how long an RNR NAK asks the requester to wait; 0 if the
// syndrome is not an RNR NAK.
func (s Syndrome) RNRTimer() time.Duration {
	if !s.IsRNRNak() {
		return 0
	}
	return RNRTimerDuration(s.Value())
}

func (s Syndrome) String() string {
	v := strconv.Itoa(int(s.Value()))
	switch s.Kind() {
	case KindACK:
		if s.Value() == CreditsInvalid {
			return "ACK credits=invalid"
		}
		return "ACK credits=" + strconv.Itoa(CreditCount(s.Value()))
	case KindRNRNak:
		return "RNR NAK timer=" + RNRTimerDuration(s.Value()).String()
	case KindNAK:
		switch s {
		case NakPSNSeqError:
			return "NAK PSN sequence error"
		case NakInvalidRequest:
			return "NAK invalid request"
		case NakRemoteAccessError:
			return "NAK remote access error"
		case NakRemoteOpError:
			return "NAK remote operational error"
		case NakInvalidRDRequest:
			return "NAK invalid RD request"
		}
		return "NAK code=" + v
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// creditTable maps credit codes 0..30 to receive WQE counts (IBTA Vol 1
// §9.7, end-to-end flow control; the same table as ROCE.md and rxe).
var creditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
	512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCount returns the number of receive WQEs a credit code (0..30)
// stands for; -1 for code 31 (invalid) or any larger value.
func CreditCount(code uint8) int {
	if int(code) < len(creditTable) {
		return int(creditTable[code])
	}
	return -1
}

// CreditCode returns the largest credit code whose count does not exceed n.
func CreditCode(n int) uint8 {
	c := uint8(0)
	for i, v := range creditTable {
		if int(v) <= n {
			c = uint8(i)
		}
	}
	return c
}

// rnrTable maps RNR timer codes to delays in units of 10 µs (IBTA Vol 1
// §9.7, RNR NAK timer encoding): code 0 is the longest wait, 655.36 ms.
var rnrTable = [32]uint32{
	65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
	512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
}

// RNRTimerDuration returns the delay an RNR timer code (0..31) stands for.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTable[code&0x1f]) * 10 * time.Microsecond
}

// RNRTimerCode returns the code of the shortest RNR delay that is at least d
// (code 0, 655.36 ms, for anything longer than 491.52 ms).
func RNRTimerCode(d time.Duration) uint8 {
	for c := uint8(1); c < 32; c++ {
		if RNRTimerDuration(c) >= d {
			return c
		}
	}
	return 0
}
