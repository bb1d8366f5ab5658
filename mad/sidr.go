package mad

import (
	"encoding/binary"
	"fmt"
)

// Private-data room of SIDR_REQ and SIDR_REP, and the room of the
// SIDR_REP's additional information.
const (
	SIDRREQPrivateSize = 216
	SIDRREPPrivateSize = 136
	SIDRREPARISize     = 72
)

// SIDRREQ is a view of the body of a ServiceIDResReq (IBTA Vol 1 chapter
// 12, Table 119), BodySize bytes: the UD counterpart of REQ, answered by
// SIDR_REP with the QPN and Q_Key serving ServiceID. rdma_cm puts a
// CMAHeader at the start of the private data, as in a REQ.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Request ID                           |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Partition Key         |           Reserved            |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Service ID (8)                         |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Private Data (216)                       |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type SIDRREQ []byte

// SIDRREQFields holds the SIDR_REQ's fields for Encode.
type SIDRREQFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // up to SIDRREQPrivateSize bytes
}

// RequestID returns the Request ID.
func (r SIDRREQ) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// PKey returns the Partition Key.
func (r SIDRREQ) PKey() uint16 { return binary.BigEndian.Uint16(r[4:]) }

// ServiceID returns the ServiceID.
func (r SIDRREQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// PrivateData returns the SIDRREQPrivateSize bytes of private data.
func (r SIDRREQ) PrivateData() []byte { return r[16 : 16+SIDRREQPrivateSize] }

// Fields returns the SIDR_REQ's fields; PrivateData aliases the view.
func (r SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{RequestID: r.RequestID(), PKey: r.PKey(), ServiceID: r.ServiceID(), PrivateData: r.PrivateData()}
}

// Encode writes f into the whole body: the reserved bytes are written as
// zero, and private data beyond SIDRREQPrivateSize is dropped (a shorter
// one is padded with zeros).
func (r SIDRREQ) Encode(f *SIDRREQFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[0:], f.RequestID)
	binary.BigEndian.PutUint16(r[4:], f.PKey)
	r[6], r[7] = 0, 0
	binary.BigEndian.PutUint64(r[8:], f.ServiceID)
	putData(r[16:16+SIDRREQPrivateSize], f.PrivateData)
}

// SIDRStatus is the Status of a SIDR_REP (IBTA Vol 1 chapter 12, Table 120;
// the kernel's enum ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRValid              SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2 // rejected by the service provider
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // the additional information holds a ClassPortInfo
	SIDRUnsupportedVersion SIDRStatus = 5 // unsupported class version
)

var sidrNames = [...]string{
	SIDRValid:              "valid",
	SIDRUnsupported:        "service ID not supported",
	SIDRReject:             "rejected",
	SIDRNoQP:               "no QP",
	SIDRRedirect:           "redirect",
	SIDRUnsupportedVersion: "unsupported class version",
}

func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}

// SIDRREP is a view of the body of a ServiceIDResReqResp (IBTA Vol 1
// chapter 12, Table 120), BodySize bytes. The vendor ID (IBA comment #9434,
// ECE) is VendorID[23:8] at 6 and [7:0] at 11.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Request ID                           |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Status     |  ARI Length   |        VendorID 23:8          |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      QPN                      | VendorID 7:0  |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Service ID (8)                         |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             Q_Key                             |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Additional Information (ARI, 72)                    |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Private Data (136)                       |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// rdma_cm's UDP port space answers with Q_Key RDMAUDPQKey.
type SIDRREP []byte

// SIDRREPFields holds the SIDR_REP's fields for Encode.
type SIDRREPFields struct {
	RequestID   uint32
	Status      uint8
	ARILength   uint8 // ignored by Encode, which writes len(ARI) (at most SIDRREPARISize)
	VendorID    uint32
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	ARI         []byte // up to SIDRREPARISize bytes
	PrivateData []byte // up to SIDRREPPrivateSize bytes
}

// RequestID returns the Request ID.
func (r SIDRREP) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// Status returns the Status.
func (r SIDRREP) Status() SIDRStatus { return SIDRStatus(r[4]) }

// ARILength returns the Additional Information Length as sent; it may
// exceed SIDRREPARISize, see ARI.
func (r SIDRREP) ARILength() uint8 { return r[5] }

// VendorID returns the 24-bit ECE Vendor ID.
func (r SIDRREP) VendorID() uint32 { return uint32(binary.BigEndian.Uint16(r[6:]))<<8 | uint32(r[11]) }

// QPN returns the 24-bit QPN.
func (r SIDRREP) QPN() uint32 { return uint24(r[8:]) }

// ServiceID returns the ServiceID.
func (r SIDRREP) ServiceID() uint64 { return binary.BigEndian.Uint64(r[12:]) }

// QKey returns the Q_Key.
func (r SIDRREP) QKey() uint32 { return binary.BigEndian.Uint32(r[20:]) }

// ARI returns the first ARILength bytes of the Additional Information, at
// most SIDRREPARISize.
func (r SIDRREP) ARI() []byte { return r[24 : 24+min(int(r.ARILength()), SIDRREPARISize)] }

// PrivateData returns the SIDRREPPrivateSize bytes of private data.
func (r SIDRREP) PrivateData() []byte { return r[96 : 96+SIDRREPPrivateSize] }

// Fields returns the SIDR_REP's fields; ARI and PrivateData alias the view,
// and ARILength is len(ARI) (the length sent, clamped to SIDRREPARISize).
func (r SIDRREP) Fields() SIDRREPFields {
	ari := r.ARI()
	return SIDRREPFields{
		RequestID: r.RequestID(), Status: uint8(r.Status()), ARILength: uint8(len(ari)), VendorID: r.VendorID(),
		QPN: r.QPN(), ServiceID: r.ServiceID(), QKey: r.QKey(), ARI: ari, PrivateData: r.PrivateData(),
	}
}

// Encode writes f into the whole body: ARI Length is len(f.ARI), values
// wider than their field are truncated to it, and ARI and private data
// beyond their room are dropped (shorter ones are padded with zeros).
func (r SIDRREP) Encode(f *SIDRREPFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[0:], f.RequestID)
	r[4] = f.Status
	r[5] = uint8(min(len(f.ARI), SIDRREPARISize))
	binary.BigEndian.PutUint16(r[6:], uint16(f.VendorID>>8))
	putUint24(r[8:], f.QPN)
	r[11] = byte(f.VendorID)
	binary.BigEndian.PutUint64(r[12:], f.ServiceID)
	binary.BigEndian.PutUint32(r[20:], f.QKey)
	putData(r[24:24+SIDRREPARISize], f.ARI)
	putData(r[96:96+SIDRREPPrivateSize], f.PrivateData)
}
