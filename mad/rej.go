package mad

import (
	"encoding/binary"
	"fmt"
)

// Private-data room of REJ and MRA, and the room of the REJ's ARI.
const (
	REJPrivateSize = 148
	MRAPrivateSize = 222
	REJARISize     = 72 // Additional Rejection Information
)

// Values of the REJ's Message REJected and the MRA's Message MRAed: the
// message being rejected or acknowledged.
const (
	MsgREQ   uint8 = 0
	MsgREP   uint8 = 1
	MsgOther uint8 = 2 // REJ: no message (a REJ on its own); MRA: a LAP
)

// RejReason is the Reason of a REJ (IBTA Vol 1 §12.6, the Reason table of REJ; the
// kernel's enum ib_cm_rej_reason).
type RejReason uint16

// REJ reasons.
const (
	RejNoQP                      RejReason = 1
	RejNoEEC                     RejReason = 2
	RejNoResources               RejReason = 3
	RejTimeout                   RejReason = 4 // the ARI holds the rejecting CA's GUID
	RejUnsupported               RejReason = 5
	RejInvalidCommID             RejReason = 6
	RejInvalidCommInstance       RejReason = 7
	RejInvalidServiceID          RejReason = 8
	RejInvalidTransportType      RejReason = 9
	RejStaleConn                 RejReason = 10
	RejRDCNotExist               RejReason = 11
	RejInvalidGID                RejReason = 12 // the ARI holds a GID
	RejInvalidLID                RejReason = 13
	RejInvalidSL                 RejReason = 14
	RejInvalidTrafficClass       RejReason = 15
	RejInvalidHopLimit           RejReason = 16
	RejInvalidPacketRate         RejReason = 17
	RejInvalidAltGID             RejReason = 18
	RejInvalidAltLID             RejReason = 19
	RejInvalidAltSL              RejReason = 20
	RejInvalidAltTrafficClass    RejReason = 21
	RejInvalidAltHopLimit        RejReason = 22
	RejInvalidAltPacketRate      RejReason = 23
	RejPortCMRedirect            RejReason = 24
	RejPortRedirect              RejReason = 25
	RejInvalidMTU                RejReason = 26
	RejInsufficientRespResources RejReason = 27
	RejConsumerDefined           RejReason = 28 // rdma_reject, and every rdma_cm failure after the listener is found
	RejInvalidRNRRetry           RejReason = 29
	RejDuplicateLocalCommID      RejReason = 30
	RejInvalidClassVersion       RejReason = 31
	RejInvalidFlowLabel          RejReason = 32
	RejInvalidAltFlowLabel       RejReason = 33
	RejVendorOptionNotSupported  RejReason = 35 // ECE
)

var rejNames = [...]string{
	RejNoQP:                      "no QP",
	RejNoEEC:                     "no EEC",
	RejNoResources:               "no resources",
	RejTimeout:                   "timeout",
	RejUnsupported:               "unsupported request",
	RejInvalidCommID:             "invalid comm ID",
	RejInvalidCommInstance:       "invalid comm instance",
	RejInvalidServiceID:          "invalid service ID",
	RejInvalidTransportType:      "invalid transport type",
	RejStaleConn:                 "stale connection",
	RejRDCNotExist:               "RDC not exist",
	RejInvalidGID:                "invalid GID",
	RejInvalidLID:                "invalid LID",
	RejInvalidSL:                 "invalid SL",
	RejInvalidTrafficClass:       "invalid traffic class",
	RejInvalidHopLimit:           "invalid hop limit",
	RejInvalidPacketRate:         "invalid packet rate",
	RejInvalidAltGID:             "invalid alternate GID",
	RejInvalidAltLID:             "invalid alternate LID",
	RejInvalidAltSL:              "invalid alternate SL",
	RejInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejInvalidAltHopLimit:        "invalid alternate hop limit",
	RejInvalidAltPacketRate:      "invalid alternate packet rate",
	RejPortCMRedirect:            "port CM redirect",
	RejPortRedirect:              "port redirect",
	RejInvalidMTU:                "invalid MTU",
	RejInsufficientRespResources: "insufficient responder resources",
	RejConsumerDefined:           "consumer defined",
	RejInvalidRNRRetry:           "invalid RNR retry",
	RejDuplicateLocalCommID:      "duplicate local comm ID",
	RejInvalidClassVersion:       "invalid class version",
	RejInvalidFlowLabel:          "invalid flow label",
	RejInvalidAltFlowLabel:       "invalid alternate flow label",
	RejVendorOptionNotSupported:  "vendor option not supported",
}

func (r RejReason) String() string {
	if int(r) < len(rejNames) && rejNames[r] != "" {
		return rejNames[r]
	}
	return fmt.Sprintf("RejReason(%d)", uint16(r))
}

// REJ is a view of the body of a ConnectReject (IBTA Vol 1 §12.6,
// Table 108), BodySize bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|MsgR | Rsvd    |  ARI Length |R|            Reason             |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Additional Rejection Information (ARI, 72)           |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Private Data (148)                       |  84
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// MsgR = Message REJected (2 bits: MsgREQ, MsgREP, MsgOther). A REJ of a
// REQ is matched by its Remote Communication ID alone: Linux sends Local
// Communication ID 0 when it rejects before allocating one.
type REJ []byte

const (
	rejLocalCommID  = 0
	rejRemoteCommID = 4
	rejMsg          = 8 // Message REJected (2 bits)
	rejARILength    = 9 // ARI Length (7 bits)
	rejReason       = 10
	rejARI          = 12
	rejPrivateData  = 84
)

// REJFields holds the REJ's fields for Encode.
type REJFields struct {
	LocalCommID, RemoteCommID uint32
	MsgRejected               uint8 // MsgREQ, MsgREP or MsgOther (2 bits)
	ARILength                 uint8 // ignored by Encode, which writes len(ARI) (at most REJARISize)
	Reason                    RejReason
	ARI                       []byte // up to REJARISize bytes
	PrivateData               []byte // up to REJPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r REJ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[rejLocalCommID:]) }

// RemoteCommID returns the Remote Communication ID.
func (r REJ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[rejRemoteCommID:]) }

// MsgRejected returns the 2-bit Message REJected.
func (r REJ) MsgRejected() uint8 { return r[rejMsg] >> 6 }

// ARILength returns the 7-bit Rejected Info Length as sent; it may exceed
// REJARISize, see ARI.
func (r REJ) ARILength() uint8 { return r[rejARILength] >> 1 }

// Reason returns the Reason.
func (r REJ) Reason() RejReason { return RejReason(binary.BigEndian.Uint16(r[rejReason:])) }

// ARI returns the first ARILength bytes of the Additional Rejection
// Information, at most REJARISize.
func (r REJ) ARI() []byte { return r[rejARI : rejARI+min(int(r.ARILength()), REJARISize)] }

// PrivateData returns the REJPrivateSize bytes of private data.
func (r REJ) PrivateData() []byte { return r[rejPrivateData : rejPrivateData+REJPrivateSize] }

// Fields returns the REJ's fields; ARI and PrivateData alias the view, and
// ARILength is len(ARI) (the length sent, clamped to REJARISize).
func (r REJ) Fields() REJFields {
	ari := r.ARI()
	return REJFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), MsgRejected: r.MsgRejected(),
		ARILength: uint8(len(ari)), Reason: r.Reason(), ARI: ari, PrivateData: r.PrivateData(),
	}
}

// Encode writes f into the whole body: reserved bits are written as zero,
// ARILength is len(f.ARI), and ARI and private data beyond their room are
// dropped (shorter ones are padded with zeros).
func (r REJ) Encode(f *REJFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[rejLocalCommID:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[rejRemoteCommID:], f.RemoteCommID)
	r[rejMsg] = f.MsgRejected << 6
	r[rejARILength] = uint8(min(len(f.ARI), REJARISize)) << 1
	binary.BigEndian.PutUint16(r[rejReason:], uint16(f.Reason))
	putData(r[rejARI:rejARI+REJARISize], f.ARI)
	putData(r[rejPrivateData:rejPrivateData+REJPrivateSize], f.PrivateData)
}

// MRA is a view of the body of a MsgRcptAck (IBTA Vol 1 §12.6, Table
// 107), BodySize bytes: the sender needs more time to answer the REQ, REP
// or LAP named by Message MRAed.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|MsgM |  Rsvd   |SvcTimeout | Rsv |  Private Data (222) ...    |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// MsgM = Message MRAed (2 bits: MsgREQ, MsgREP, MsgOther for a LAP);
// SvcTimeout = Service Timeout (5 bits, 4.096 µs × 2^value).
type MRA []byte

// MRAFields holds the MRA's fields for Encode.
type MRAFields struct {
	LocalCommID, RemoteCommID uint32
	MsgMRAed                  uint8  // MsgREQ, MsgREP or MsgOther (2 bits)
	ServiceTimeout            uint8  // 5 bits: 4.096 µs × 2^value
	PrivateData               []byte // up to MRAPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r MRA) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// RemoteCommID returns the Remote Communication ID.
func (r MRA) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[4:]) }

// MsgMRAed returns the 2-bit Message MRAed.
func (r MRA) MsgMRAed() uint8 { return r[8] >> 6 }

// ServiceTimeout returns the 5-bit Service Timeout.
func (r MRA) ServiceTimeout() uint8 { return r[9] >> 3 }

// PrivateData returns the MRAPrivateSize bytes of private data.
func (r MRA) PrivateData() []byte { return r[10 : 10+MRAPrivateSize] }

// Fields returns the MRA's fields; PrivateData aliases the view.
func (r MRA) Fields() MRAFields {
	return MRAFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), MsgMRAed: r.MsgMRAed(),
		ServiceTimeout: r.ServiceTimeout(), PrivateData: r.PrivateData()}
}

// Encode writes f into the whole body: reserved bits are written as zero,
// values wider than their field are truncated to it, and private data
// beyond MRAPrivateSize is dropped (a shorter one is padded with zeros).
func (r MRA) Encode(f *MRAFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[0:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[4:], f.RemoteCommID)
	r[8] = f.MsgMRAed << 6
	r[9] = f.ServiceTimeout << 3
	putData(r[10:10+MRAPrivateSize], f.PrivateData)
}
