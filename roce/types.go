package roce

import "github.com/xroce/xroce/qp"

// The work request, completion and attribute types are those of package qp,
// the transport engine; they are re-exported here so that users import only
// roce.
type (
	SGE           = qp.SGE
	SendWR        = qp.SendWR
	RecvWR        = qp.RecvWR
	WC            = qp.WC
	WCStatus      = qp.WCStatus
	WCOpcode      = qp.WCOpcode
	WCFlags       = qp.WCFlags
	WROpcode      = qp.WROpcode
	SendFlags     = qp.SendFlags
	Attr          = qp.Attr
	AttrMask      = qp.AttrMask
	AddressVector = qp.AddressVector
	QPType        = qp.Type
	QPState       = qp.State
	MTU           = qp.MTU
	Access        = qp.Access
	ModifyError   = qp.ModifyError
	CCConfig      = qp.CCConfig
	DCQCNParams   = qp.DCQCNParams
)

// DefaultDCQCN returns ConnectX's DCQCN parameters (qp.DefaultDCQCN), to
// change some of them in Config.CC.DCQCN.
func DefaultDCQCN() DCQCNParams { return qp.DefaultDCQCN() }

// Queue pair types.
const (
	RC = qp.RC
	UC = qp.UC
	UD = qp.UD
)

// Path MTUs.
const (
	MTU256  = qp.MTU256
	MTU512  = qp.MTU512
	MTU1024 = qp.MTU1024
	MTU2048 = qp.MTU2048
	MTU4096 = qp.MTU4096
)

// Queue pair states.
const (
	StateReset = qp.StateReset
	StateInit  = qp.StateInit
	StateRTR   = qp.StateRTR
	StateRTS   = qp.StateRTS
	StateSQD   = qp.StateSQD
	StateSQE   = qp.StateSQE
	StateErr   = qp.StateErr
)

// Access rights of memory regions and of a QP's remote operations.
const (
	AccessLocalWrite   = qp.AccessLocalWrite
	AccessRemoteWrite  = qp.AccessRemoteWrite
	AccessRemoteRead   = qp.AccessRemoteRead
	AccessRemoteAtomic = qp.AccessRemoteAtomic
)

// Send work request opcodes.
const (
	WRRDMAWrite        = qp.WRRDMAWrite
	WRRDMAWriteWithImm = qp.WRRDMAWriteWithImm
	WRSend             = qp.WRSend
	WRSendWithImm      = qp.WRSendWithImm
	WRRDMARead         = qp.WRRDMARead
	WRAtomicCmpAndSwp  = qp.WRAtomicCmpAndSwp
	WRAtomicFetchAdd   = qp.WRAtomicFetchAdd
)

// Send flags.
const (
	SendFence     = qp.SendFence
	SendSignaled  = qp.SendSignaled
	SendSolicited = qp.SendSolicited
	SendInline    = qp.SendInline
)

// Completion statuses.
const (
	WCSuccess        = qp.WCSuccess
	WCLocLenErr      = qp.WCLocLenErr
	WCLocQPOpErr     = qp.WCLocQPOpErr
	WCLocProtErr     = qp.WCLocProtErr
	WCWRFlushErr     = qp.WCWRFlushErr
	WCBadRespErr     = qp.WCBadRespErr
	WCLocAccessErr   = qp.WCLocAccessErr
	WCRemInvReqErr   = qp.WCRemInvReqErr
	WCRemAccessErr   = qp.WCRemAccessErr
	WCRemOpErr       = qp.WCRemOpErr
	WCRetryExcErr    = qp.WCRetryExcErr
	WCRNRRetryExcErr = qp.WCRNRRetryExcErr
	WCGeneralErr     = qp.WCGeneralErr
)

// Completion opcodes.
const (
	WCSend            = qp.WCSend
	WCRDMAWrite       = qp.WCRDMAWrite
	WCRDMARead        = qp.WCRDMARead
	WCCompSwap        = qp.WCCompSwap
	WCFetchAdd        = qp.WCFetchAdd
	WCRecv            = qp.WCRecv
	WCRecvRDMAWithImm = qp.WCRecvRDMAWithImm
)

// Completion flags.
const (
	WCWithGRH = qp.WCWithGRH
	WCWithImm = qp.WCWithImm
)

// Attribute mask bits for QP.Modify.
const (
	AttrState           = qp.AttrState
	AttrCurState        = qp.AttrCurState
	AttrAccessFlags     = qp.AttrAccessFlags
	AttrPKey            = qp.AttrPKey
	AttrPort            = qp.AttrPort
	AttrQKey            = qp.AttrQKey
	AttrAV              = qp.AttrAV
	AttrPathMTU         = qp.AttrPathMTU
	AttrTimeout         = qp.AttrTimeout
	AttrRetryCnt        = qp.AttrRetryCnt
	AttrRNRRetry        = qp.AttrRNRRetry
	AttrRQPSN           = qp.AttrRQPSN
	AttrMaxRdAtomic     = qp.AttrMaxRdAtomic
	AttrMinRNRTimer     = qp.AttrMinRNRTimer
	AttrSQPSN           = qp.AttrSQPSN
	AttrMaxDestRdAtomic = qp.AttrMaxDestRdAtomic
	AttrDestQPN         = qp.AttrDestQPN
)

// Errors of QP.Modify and of posting, from the engine; errors.Is finds them.
var (
	ErrTransition  = qp.ErrTransition
	ErrMissingAttr = qp.ErrMissingAttr
	ErrExtraAttr   = qp.ErrExtraAttr
	ErrInvalidAttr = qp.ErrInvalidAttr
	ErrState       = qp.ErrState
	ErrQueueFull   = qp.ErrQueueFull
	ErrTooManySGE  = qp.ErrTooManySGE
	ErrInline      = qp.ErrInline
	ErrOpcode      = qp.ErrOpcode
)
