package bth

import "strconv"

// Transport is the transport service an opcode belongs to: the top three bits
// of the BTH opcode (IBTA Vol 1 §9.2, the OpCode field).
type Transport uint8

// Transport services carried by RoCE v2. RD and XRC are not supported by
// xroce (nor by rxe); CNP is the RoCE v2 congestion notification packet.
const (
	RC  Transport = 0x00 // Reliable Connection
	UC  Transport = 0x20 // Unreliable Connection
	RD  Transport = 0x40 // Reliable Datagram (not implemented)
	UD  Transport = 0x60 // Unreliable Datagram
	CNP Transport = 0x80 // Congestion Notification (opcode 0x81)
	XRC Transport = 0xa0 // Extended Reliable Connection (not implemented)
)

func (t Transport) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case RD:
		return "RD"
	case UD:
		return "UD"
	case CNP:
		return "CNP"
	case XRC:
		return "XRC"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// Opcode is the BTH opcode: transport (bits 7:5) plus operation (bits 4:0).
type Opcode uint8

// Opcodes of RC, UC and UD (IBTA Vol 1 §9.2), plus FLUSH and
// ATOMIC_WRITE (IBTA memory placement extensions, as in rxe) and CNP.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17
	RCFlush              Opcode = 0x1c
	RCAtomicWrite        Opcode = 0x1d
	UCSendFirst          Opcode = 0x20
	UCSendMiddle         Opcode = 0x21
	UCSendLast           Opcode = 0x22
	UCSendLastImm        Opcode = 0x23
	UCSendOnly           Opcode = 0x24
	UCSendOnlyImm        Opcode = 0x25
	UCWriteFirst         Opcode = 0x26
	UCWriteMiddle        Opcode = 0x27
	UCWriteLast          Opcode = 0x28
	UCWriteLastImm       Opcode = 0x29
	UCWriteOnly          Opcode = 0x2a
	UCWriteOnlyImm       Opcode = 0x2b
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65
	OpCNP                Opcode = 0x81
)

// Transport returns the transport service of the opcode (bits 7:5).
func (o Opcode) Transport() Transport { return Transport(o & 0xe0) }

// Known reports whether the opcode is one this package can parse and build.
func (o Opcode) Known() bool { return opTable[o].hdrLen != 0 }

// Info returns the opcode's entry in the opcode table; ok is false for an
// opcode that RoCE v2 over RC, UC or UD does not define.
func (o Opcode) Info() (info OpInfo, ok bool) {
	e := &opTable[o]
	return OpInfo{Name: e.name, Transport: o.Transport(), Headers: e.hdrs, Payload: e.payload}, e.name != ""
}

// Headers returns the extension headers that follow the BTH, in wire order.
func (o Opcode) Headers() ExtHeaders { return opTable[o].hdrs }

// Payload returns whether the opcode carries a payload.
func (o Opcode) Payload() PayloadRule { return opTable[o].payload }

// String returns the name used by rxe and Wireshark, like "RC SEND_FIRST".
func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

// Operation classes, derived from the opcode table.

// IsSend reports whether the opcode is part of a SEND message.
func (o Opcode) IsSend() bool { return opTable[o].flags&opSend != 0 }

// IsWrite reports whether the opcode is part of an RDMA WRITE message.
func (o Opcode) IsWrite() bool { return opTable[o].flags&opWrite != 0 }

// IsReadResponse reports whether the opcode is an RDMA READ response packet.
func (o Opcode) IsReadResponse() bool { return opTable[o].flags&opReadResp != 0 }

// IsRequest reports whether the packet travels from requester to responder
// (everything but ACK, ATOMIC ACKNOWLEDGE and READ responses).
func (o Opcode) IsRequest() bool { return opTable[o].flags&opRequest != 0 }

// IsFirst reports whether the opcode starts a multi-packet message (FIRST).
func (o Opcode) IsFirst() bool { return opTable[o].flags&opFirst != 0 }

// IsMiddle reports whether the opcode is a MIDDLE packet of a message.
func (o Opcode) IsMiddle() bool { return opTable[o].flags&opMiddle != 0 }

// IsLast reports whether the opcode ends a message (LAST or ONLY).
func (o Opcode) IsLast() bool { return opTable[o].flags&opLast != 0 }

// IsOnly reports whether the opcode is a single-packet message (ONLY, and
// the single-packet operations READ REQUEST, ACK, atomics, FLUSH).
func (o Opcode) IsOnly() bool { return opTable[o].flags&(opFirst|opLast) == opFirst|opLast }

// HasImm reports whether the opcode carries ImmDt.
func (o Opcode) HasImm() bool { return opTable[o].hdrs.Has(ExtImmDt) }

// Ext names one extension header.
type Ext uint8

// Extension headers, numbered in the order they appear on the wire after
// the BTH (IBTA Vol 1 §9.3; FETH precedes RETH as in rxe's FLUSH).
const (
	ExtDETH         Ext = iota // Datagram ETH, UD
	ExtFETH                    // Flush ETH, FLUSH
	ExtRETH                    // RDMA ETH, WRITE FIRST/ONLY, READ REQUEST, FLUSH, ATOMIC_WRITE
	ExtAtomicETH               // Atomic ETH, CMP_SWAP and FETCH_ADD
	ExtAETH                    // ACK ETH, ACK and READ responses
	ExtAtomicAckETH            // Atomic ACK ETH, ATOMIC ACKNOWLEDGE
	ExtImmDt                   // Immediate data, *_WITH_IMMEDIATE
	ExtIETH                    // Invalidate ETH, SEND_*_WITH_INVALIDATE
	ExtCNPReserved             // the 16 reserved bytes of a CNP
	numExt
)

var extNames = [numExt]string{"DETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPReserved"}

var extSizes = [numExt]int{DETHSize, FETHSize, RETHSize, AtomicETHSize, AETHSize, AtomicAckETHSize, ImmDtSize, IETHSize, CNPReservedSize}

func (e Ext) String() string {
	if e < numExt {
		return extNames[e]
	}
	return "Ext(" + strconv.Itoa(int(e)) + ")"
}

// Size returns the extension header's length in bytes.
func (e Ext) Size() int {
	if e < numExt {
		return extSizes[e]
	}
	return 0
}

// ExtHeaders is a set of extension headers. Iterating it in bit order
// (All) gives the wire order.
type ExtHeaders uint16

// Has reports whether e is in the set.
func (h ExtHeaders) Has(e Ext) bool { return h&(1<<e) != 0 }

// Size returns the total length of the extension headers in the set.
func (h ExtHeaders) Size() int {
	n := 0
	for e := Ext(0); e < numExt; e++ {
		if h.Has(e) {
			n += extSizes[e]
		}
	}
	return n
}

// All calls yield for each header of the set in wire order.
func (h ExtHeaders) All(yield func(Ext) bool) {
	for e := Ext(0); e < numExt; e++ {
		if h.Has(e) && !yield(e) {
			return
		}
	}
}

// String lists the headers in wire order, like "RETH+ImmDt".
func (h ExtHeaders) String() string {
	var buf [64]byte
	b := buf[:0]
	for e := Ext(0); e < numExt; e++ {
		if h.Has(e) {
			if len(b) > 0 {
				b = append(b, '+')
			}
			b = append(b, extNames[e]...)
		}
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// PayloadRule says whether a packet with a given opcode carries payload.
type PayloadRule uint8

// Payload rules. FIRST and MIDDLE packets must also carry exactly one path
// MTU, and LAST packets 1..MTU bytes; that depends on the QP and is checked
// by the transport, not here.
const (
	PayloadNone     PayloadRule = iota // no payload (ACK, READ REQUEST, atomics, FLUSH, CNP)
	PayloadOptional                    // 0..MTU bytes (ONLY packets, READ RESPONSE ONLY)
	PayloadRequired                    // at least one byte (FIRST, MIDDLE, LAST; ATOMIC_WRITE's 8 bytes)
)

func (p PayloadRule) String() string {
	switch p {
	case PayloadNone:
		return "none"
	case PayloadOptional:
		return "optional"
	case PayloadRequired:
		return "required"
	}
	return "PayloadRule(" + strconv.Itoa(int(p)) + ")"
}

// OpInfo describes an opcode: its name, transport, the extension headers that
// follow the BTH and whether it carries payload.
type OpInfo struct {
	Name      string
	Transport Transport
	Headers   ExtHeaders
	Payload   PayloadRule
}

type opFlags uint8

const (
	opSend opFlags = 1 << iota
	opWrite
	opReadResp
	opRequest
	opFirst
	opMiddle
	opLast
)

type opEntry struct {
	hdrs    ExtHeaders
	hdrLen  uint8 // BTH + extension headers; 0 for unknown opcodes
	payload PayloadRule
	flags   opFlags
	dc      bool // a Mellanox DC opcode (dcTable): DCETH and RDETH follow the BTH
	name    string
}

const (
	hDETH      = ExtHeaders(1 << ExtDETH)
	hFETH      = ExtHeaders(1 << ExtFETH)
	hRETH      = ExtHeaders(1 << ExtRETH)
	hAtomicETH = ExtHeaders(1 << ExtAtomicETH)
	hAETH      = ExtHeaders(1 << ExtAETH)
	hAtomicAck = ExtHeaders(1 << ExtAtomicAckETH)
	hImm       = ExtHeaders(1 << ExtImmDt)
	hIETH      = ExtHeaders(1 << ExtIETH)
	hCNP       = ExtHeaders(1 << ExtCNPReserved)
)

// opTable is indexed by opcode; entries with an empty name are unknown.
var opTable = func() (t [256]opEntry) {
	const (
		req   = opRequest
		first = opFirst
		mid   = opMiddle
		last  = opLast
		only  = opFirst | opLast
	)
	type op struct {
		code    Opcode
		name    string
		hdrs    ExtHeaders
		payload PayloadRule
		flags   opFlags
	}
	// The SEND and WRITE families are the same for RC and UC.
	family := func(base Opcode, tr string) []op {
		return []op{
			{base + 0x00, tr + " SEND_FIRST", 0, PayloadRequired, opSend | req | first},
			{base + 0x01, tr + " SEND_MIDDLE", 0, PayloadRequired, opSend | req | mid},
			{base + 0x02, tr + " SEND_LAST", 0, PayloadRequired, opSend | req | last},
			{base + 0x03, tr + " SEND_LAST_WITH_IMMEDIATE", hImm, PayloadRequired, opSend | req | last},
			{base + 0x04, tr + " SEND_ONLY", 0, PayloadOptional, opSend | req | only},
			{base + 0x05, tr + " SEND_ONLY_WITH_IMMEDIATE", hImm, PayloadOptional, opSend | req | only},
			{base + 0x06, tr + " RDMA_WRITE_FIRST", hRETH, PayloadRequired, opWrite | req | first},
			{base + 0x07, tr + " RDMA_WRITE_MIDDLE", 0, PayloadRequired, opWrite | req | mid},
			{base + 0x08, tr + " RDMA_WRITE_LAST", 0, PayloadRequired, opWrite | req | last},
			{base + 0x09, tr + " RDMA_WRITE_LAST_WITH_IMMEDIATE", hImm, PayloadRequired, opWrite | req | last},
			{base + 0x0a, tr + " RDMA_WRITE_ONLY", hRETH, PayloadOptional, opWrite | req | only},
			{base + 0x0b, tr + " RDMA_WRITE_ONLY_WITH_IMMEDIATE", hRETH | hImm, PayloadOptional, opWrite | req | only},
		}
	}
	ops := append(family(0x00, "RC"), family(0x20, "UC")...)
	ops = append(ops,
		op{RCReadRequest, "RC RDMA_READ_REQUEST", hRETH, PayloadNone, req | only},
		op{RCReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", hAETH, PayloadRequired, opReadResp | first},
		op{RCReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", 0, PayloadRequired, opReadResp | mid},
		op{RCReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", hAETH, PayloadRequired, opReadResp | last},
		op{RCReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", hAETH, PayloadOptional, opReadResp | only},
		op{RCAck, "RC ACKNOWLEDGE", hAETH, PayloadNone, only},
		op{RCAtomicAck, "RC ATOMIC_ACKNOWLEDGE", hAETH | hAtomicAck, PayloadNone, only},
		op{RCCompareSwap, "RC COMPARE_SWAP", hAtomicETH, PayloadNone, req | only},
		op{RCFetchAdd, "RC FETCH_ADD", hAtomicETH, PayloadNone, req | only},
		op{RCSendLastInv, "RC SEND_LAST_WITH_INVALIDATE", hIETH, PayloadRequired, opSend | req | last},
		op{RCSendOnlyInv, "RC SEND_ONLY_WITH_INVALIDATE", hIETH, PayloadOptional, opSend | req | only},
		op{RCFlush, "RC FLUSH", hFETH | hRETH, PayloadNone, req | only},
		op{RCAtomicWrite, "RC ATOMIC_WRITE", hRETH, PayloadRequired, req | only},
		op{UDSendOnly, "UD SEND_ONLY", hDETH, PayloadOptional, opSend | req | only},
		op{UDSendOnlyImm, "UD SEND_ONLY_WITH_IMMEDIATE", hDETH | hImm, PayloadOptional, opSend | req | only},
		op{OpCNP, "CNP", hCNP, PayloadNone, 0},
	)
	for _, o := range ops {
		t[o.code] = opEntry{name: o.name, hdrs: o.hdrs, hdrLen: uint8(BTHSize + o.hdrs.Size()), payload: o.payload, flags: o.flags}
	}
	return t
}()
