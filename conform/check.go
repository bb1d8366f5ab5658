package conform

import (
	"fmt"
	"strconv"
	"time"

	"github.com/xroce/xroce/bth"
)

// Verdict is a check's result.
type Verdict uint8

// Verdicts.
const (
	Pass  Verdict = iota + 1 // the peer did what the rule requires
	Fail                     // it did not
	Known                    // it did not, in a way documented for a named implementation
	Skip                     // the QP under test cannot host the check
)

var verdictNames = [...]string{Pass: "PASS", Fail: "FAIL", Known: "KNOWN", Skip: "SKIP"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) && verdictNames[v] != "" {
		return verdictNames[v]
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// MarshalText makes a Verdict its name in JSON.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads a Verdict's name.
func (v *Verdict) UnmarshalText(b []byte) error {
	for i, n := range verdictNames {
		if n != "" && n == string(b) {
			*v = Verdict(i)
			return nil
		}
	}
	return fmt.Errorf("conform: unknown verdict %q", b)
}

// Ops is a set of remote operations a QP and its region allow.
type Ops uint8

// Remote operations.
const (
	OpWrite Ops = 1 << iota
	OpRead
	OpAtomic
)

// Need is what a check (or one of its steps) needs of the QP under test.
type Need uint16

// Needs.
const (
	NeedWrite    Need = 1 << iota // remote WRITE into the region
	NeedRead                      // remote READ of the region
	NeedAtomic                    // remote atomics on the region
	NeedRecv                      // receives posted, of a known length
	NeedNoRecv                    // no receive posted (a SEND draws an RNR NAK)
	NeedProbe                     // a harmless acknowledged request: a WRITE, or a SEND into a posted receive
	NeedDenied                    // a remote operation the QP or region does not allow
	NeedRdAtomic                  // the peer's responder resources (max_dest_rd_atomic) are known
	NeedRNRTimer                  // the RNR timer the peer advertises is known
	NeedLarge                     // a region (for WRITE) or receive (for SEND) of 4 path MTUs
	NeedUD                        // a UD QP (the other needs are an RC QP's)
)

// Target is the QP under test, as the out-of-band exchange described it.
type Target struct {
	QPN  uint32  // its QP number
	PSN  bth.PSN // the first PSN it expects from the puppet
	MTU  int     // path MTU in bytes
	PKey uint16  // its P_Key; 0 means 0xFFFF

	// A region it offers to remote access: address, R_Key, length (0:
	// none) and the operations it and the QP allow.
	VA     uint64
	RKey   uint32
	Len    uint32
	Allows Ops
	// Denies are operations known to be refused on the region (0:
	// unknown, and resp.access-denied cannot run).
	Denies Ops

	// Receives: whether some are posted, and their length (0: unknown).
	RecvPosted bool
	RecvLen    uint32

	// MinRNRTimer is the RNR timer code its RNR NAKs should carry (0:
	// unknown). MaxDestRdAtomic is the READs and atomics it keeps as
	// responder resources (0: unknown).
	MinRNRTimer     uint8
	MaxDestRdAtomic int

	// UD: a UD QP, whose Q_Key is QKey; it hosts only the checks that
	// need NeedUD, and an RC QP none of those.
	UD   bool
	QKey uint32
}

// Has reports whether t meets n.
func (t *Target) Has(n Need) bool {
	if t.UD != (n&NeedUD != 0) {
		return false
	}
	for bit := Need(1); bit != 0 && bit <= n; bit <<= 1 {
		if n&bit == 0 {
			continue
		}
		var m bool
		switch bit {
		case NeedWrite:
			m = t.Allows&OpWrite != 0 && t.Len >= 64
		case NeedRead:
			m = t.Allows&OpRead != 0 && t.Len >= 64
		case NeedAtomic:
			m = t.Allows&OpAtomic != 0 && t.Len >= 64
		case NeedRecv:
			m = t.RecvPosted && t.RecvLen > 0
		case NeedNoRecv:
			m = !t.RecvPosted
		case NeedProbe:
			m = t.Allows&OpWrite != 0 && t.Len >= 64 || t.RecvPosted && t.RecvLen >= 64
		case NeedDenied:
			m = t.Len >= 64 && t.Denies != 0
		case NeedRdAtomic:
			m = t.MaxDestRdAtomic > 0
		case NeedRNRTimer:
			m = t.MinRNRTimer != 0
		case NeedLarge:
			m = t.Allows&OpWrite != 0 && t.Len >= uint32(4*t.MTU) || t.RecvPosted && t.RecvLen >= uint32(4*t.MTU)
		case NeedUD:
			m = t.UD
		}
		if !m {
			return false
		}
	}
	return true
}

// Check is one rule, tested: what it is about, what it sends, what the
// rule requires, and how.
type Check struct {
	Name     string // stable identifier, e.g. "resp.psn-gap"
	Rule     string // the specification's section (or the rule in words)
	Sends    string // what the puppet sends, one sentence
	Requires string // what the rule requires, one sentence
	Needs    Need   // what the QP under test must offer
	// Fatal: the check leaves a conforming QP in the error state, so
	// the next check needs another QP.
	Fatal bool
	Steps []Step
	// Serve are the phases of a requester check (the puppet serves, the
	// peer is the requester), instead of Steps; PeerNeeds is what the
	// requester must show for it.
	Serve     []Phase
	PeerNeeds PeerNeed
	// Known are documented deviations: a failure whose code is here is
	// KNOWN, with the deviation's note.
	Known []Deviation
}

// Deviation is a documented way a named implementation departs from the
// rule.
type Deviation struct {
	Code string // the failure code a step's judge reports
	Impl string // who does it, e.g. "rxe (Linux 6.1)"
	Note string // what it does instead and why
}

// Step sends packets, waits for answers and judges them.
type Step struct {
	Needs Need     // the step runs only if the target meets these; else it is skipped
	Send  []Packet // sent in order, at once
	// Wait is how long answers are collected; 0 means DefaultWait.
	// Until ends the wait as soon as that many answers to the puppet's
	// QP arrived (0: wait the whole time, as a check of silence must).
	Wait  time.Duration
	Until int
	// Judge looks at what came back during the step.
	Judge func(x *Ctx) Outcome
}

// DefaultWait is how long a step waits for answers unless it says.
const DefaultWait = 300 * time.Millisecond

// Outcome is a step's judgement: ok or not, what was seen, and for a
// failure a short code that Deviations refer to.
type Outcome struct {
	OK   bool
	Obs  string
	Code string
	// Skip: the peer did not show what the check needs (a requester with
	// a single request outstanding ...): the verdict is SKIP.
	Skip bool
}

// Size is a length relative to the target: n = MTUs×MTU + Regions×region
// length + Recvs×receive length + Bytes.
type Size struct {
	MTUs, Regions, Recvs, Bytes int
}

func (s Size) of(t *Target) int {
	return s.MTUs*t.MTU + s.Regions*int(t.Len) + s.Recvs*int(t.RecvLen) + s.Bytes
}

// B is a size of n bytes.
func B(n int) Size { return Size{Bytes: n} }

// Pseudo-opcodes a Packet may name, resolved against the target when the
// packet is built.
const (
	// OpProbe is a harmless acknowledged request: a WRITE ONLY into the
	// region when the QP allows WRITE, else a SEND ONLY into a posted
	// receive.
	OpProbe bth.Opcode = 0xf0
	// OpDenied is an operation the target denies (Target.Denies): a
	// READ, else a WRITE, else a FETCH_ADD.
	OpDenied bth.Opcode = 0xf1
	// OpReadBurst is one READ more than the target's responder
	// resources, at consecutive PSNs from the packet's, sent at once.
	OpReadBurst bth.Opcode = 0xf2
)

// Fault is something wrong injected into a packet after it is built.
type Fault uint8

// Faults.
const (
	FaultNone   Fault = iota
	FaultICRC         // the ICRC is wrong
	FaultPKey         // a P_Key of another partition (0x1234)
	FaultTVer         // BTH TVer 1
	FaultPadCnt       // PadCnt 3 on a packet without payload
	FaultDestQP       // to a QP number that does not exist (the target's with its top bits flipped)
)

var faultNames = [...]string{"", "bad ICRC", "P_Key 0x1234", "TVer 1", "PadCnt 3", "unknown QP"}

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Packet describes a request to send, relative to the target. A SEND or
// WRITE ONLY longer than the path MTU is sent as FIRST, MIDDLE … LAST,
// each a full MTU but the last, on consecutive PSNs from PSN, AckReq on the
// last.
type Packet struct {
	Op      bth.Opcode
	PSN     int  // offset from the target's first PSN
	AckReq  bool // (the last packet of a segmented message gets it anyway)
	Payload Size // SEND/WRITE payload
	// RETH or AtomicETH: DMA length (RETH; for WRITE ONLY the payload
	// length unless DMASet), offset of the address into the region, a
	// changed R_Key.
	DMA    Size
	DMASet bool
	Offset Size
	BadKey bool
	// Atomic operands.
	SwapAdd, Compare uint64
	Fault            Fault
	Repeat           int  // sent this many times in a row (0 means once)
	CE               bool // the IP header's ECN field says Congestion Experienced (11)
	BadQKey          bool // UD: a Q_Key other than the target's
}
