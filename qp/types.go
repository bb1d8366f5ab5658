package qp

import (
	"net/netip"
	"strconv"
)

// Type is the transport service of a queue pair.
type Type uint8

// Queue pair types (the values of ibv_qp_type).
const (
	RC Type = 2 // Reliable Connection
	UC Type = 3 // Unreliable Connection
	UD Type = 4 // Unreliable Datagram
)

func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// MTU is a path MTU, numbered as ibv_mtu (1 = 256 bytes ... 5 = 4096 bytes).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU's payload size in bytes, or 0 when it is not valid.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return "MTU(" + strconv.Itoa(int(m)) + ")"
}

// Access is a set of access rights, with the bits of ibv_access_flags.
type Access uint32

// Access rights of a memory region or of a QP's remote operations.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// WROpcode is the operation of a send work request (ibv_wr_opcode values).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRSendWithInv      WROpcode = 9
)

var wrOpNames = [...]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", 7: "", 8: "", WRSendWithInv: "SEND_WITH_INV",
}

func (o WROpcode) String() string {
	if int(o) < len(wrOpNames) && wrOpNames[o] != "" {
		return wrOpNames[o]
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

func (o WROpcode) isSend() bool {
	return o == WRSend || o == WRSendWithImm || o == WRSendWithInv
}
func (o WROpcode) isWrite() bool  { return o == WRRDMAWrite || o == WRRDMAWriteWithImm }
func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// isReadLike reports whether the operation waits for response data (READ,
// atomics): those count against max_rd_atomic.
func (o WROpcode) isReadLike() bool { return o == WRRDMARead || o.isAtomic() }

// SendFlags are the flags of a send work request (ibv_send_flags values).
type SendFlags uint8

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // wait for earlier READs and atomics to complete first
	SendSignaled  SendFlags = 1 << 1 // generate a completion on success
	SendSolicited SendFlags = 1 << 2 // set the Solicited Event bit on the last packet
	SendInline    SendFlags = 1 << 3 // copy the data when posted; lkeys are not checked
)

// SGE is a scatter/gather element: Length bytes at Addr in the memory region
// named by LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// AddressVector says where a QP's packets go and how they are framed.
type AddressVector struct {
	DstMAC       [6]byte
	SrcMAC       [6]byte
	DstIP        netip.Addr // IPv4, IPv4-mapped or IPv6; the same family as SrcIP
	SrcIP        netip.Addr
	HopLimit     uint8 // IPv4 TTL or IPv6 hop limit; 0 means 64
	TrafficClass uint8 // IPv4 TOS or IPv6 traffic class; ECN bits 0 are sent as ECT(0) unless CCConfig.NoECT
	FlowLabel    uint32
}

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE  // gather list; copied at post time (at most Config.MaxSGE entries)
	Imm    uint32 // immediate data (WITH_IMM), as a host number sent big-endian
	InvKey uint32 // R_Key to invalidate (SEND_WITH_INV)

	// RDMA and atomic operations.
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare (CMP_AND_SWP) or addend (FETCH_AND_ADD)
	Swap       uint64 // swap value (CMP_AND_SWP)

	// UD only: the destination.
	AV         *AddressVector
	RemoteQPN  uint32
	RemoteQKey uint32 // when the high bit is set, the QP's own Q_Key is used
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE // scatter list; copied at post time
}

// WCStatus is the status of a work completion, with the values and meanings
// of ibv_wc_status.
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCFatalErr       WCStatus = 19
	WCGeneralErr     WCStatus = 21
	numWCStatus               = 22
)

var wcStatusNames = [numWCStatus]string{
	WCSuccess: "SUCCESS", WCLocLenErr: "LOC_LEN_ERR", WCLocQPOpErr: "LOC_QP_OP_ERR", 3: "LOC_EEC_OP_ERR",
	WCLocProtErr: "LOC_PROT_ERR", WCWRFlushErr: "WR_FLUSH_ERR", 6: "MW_BIND_ERR", WCBadRespErr: "BAD_RESP_ERR",
	WCLocAccessErr: "LOC_ACCESS_ERR", WCRemInvReqErr: "REM_INV_REQ_ERR", WCRemAccessErr: "REM_ACCESS_ERR",
	WCRemOpErr: "REM_OP_ERR", WCRetryExcErr: "RETRY_EXC_ERR", WCRNRRetryExcErr: "RNR_RETRY_EXC_ERR",
	14: "LOC_RDD_VIOL_ERR", 15: "REM_INV_RD_REQ_ERR", 16: "REM_ABORT_ERR", 17: "INV_EECN_ERR",
	18: "INV_EEC_STATE_ERR", WCFatalErr: "FATAL_ERR", 20: "RESP_TIMEOUT_ERR", WCGeneralErr: "GENERAL_ERR",
}

func (s WCStatus) String() string {
	if s < numWCStatus {
		return wcStatusNames[s]
	}
	return "WCStatus(" + strconv.Itoa(int(s)) + ")"
}

// WCOpcode says what a work completion completes (ibv_wc_opcode values).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

func wcOpcodeOf(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	}
	return WCSend
}

// WCFlags are the flags of a work completion (ibv_wc_flags values).
type WCFlags uint8

// Completion flags.
const (
	WCWithGRH WCFlags = 1 << 0 // the receive buffer starts with a 40-byte GRH area (UD)
	WCWithImm WCFlags = 1 << 1 // Imm holds immediate data
	WCWithInv WCFlags = 1 << 3 // InvKey holds the R_Key the sender invalidated
)

// WC is a work completion (ibv_wc).
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   WCFlags
	ByteLen uint32 // bytes received (receive completions) or read
	Imm     uint32
	InvKey  uint32
	QPN     uint32 // the local QP
	SrcQP   uint32 // UD: the sender's QP number
	// SrcMAC is, on UD, the Ethernet source address of the frame (the
	// kernel's ib_wc.smac): where to answer without resolving the sender.
	SrcMAC [6]byte
	// Solicited is set on a receive completion whose message carried the
	// Solicited Event bit, for ibv_req_notify_cq(solicited_only); it is
	// not part of ibv_wc.
	Solicited bool
}

// Memory gives the engine access to registered memory; the verbs layer
// implements it (one per protection domain). Each method returns the bytes
// [addr, addr+length) of the region the key names, or ok false when the key is
// unknown, the range is not entirely inside the region, or the region does
// not grant every right in access. The engine reads and writes only through
// the returned slices, so it never touches memory outside a region.
type Memory interface {
	// Local resolves a local key (SGEs of work requests).
	Local(lkey uint32, addr uint64, length uint32, access Access) (b []byte, ok bool)
	// Remote resolves a remote key (RETH, AtomicETH) for a peer's request.
	Remote(rkey uint32, addr uint64, length uint32, access Access) (b []byte, ok bool)
	// Invalidate invalidates rkey for SEND_WITH_INV; false if it cannot.
	Invalidate(rkey uint32) bool
}

// CQ receives work completions. Complete must copy *wc if it keeps it.
type CQ interface {
	Complete(wc *WC)
}

// Output is where the engine writes frames: Alloc hands it a buffer to build
// a whole Ethernet frame in (nil when none is free now: the engine stops and
// continues at the next Poll), Send takes the built frame, a prefix of a
// buffer from Alloc, and its ownership. Buffers must be at least
// MaxFrameLen(path MTU) long. The verbs layer gives UMEM frames, so payload
// is copied once, from registered memory into the frame.
type Output interface {
	Alloc() []byte
	Send(frame []byte)
}

// The General Services Interface: QP 1 and its well-known Q_Key (IBTA
// Vol. 1 §13.5); management datagrams (MADs) travel between GSIs.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)
