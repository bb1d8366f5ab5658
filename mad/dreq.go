package mad

import "encoding/binary"

// Private-data room of DREQ and DREP.
const (
	DREQPrivateSize = 220
	DREPPrivateSize = 224
)

// DREQ is a view of the body of a DisconnectRequest (IBTA Vol 1 §12.6,
// Table 112), BodySize bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Remote QPN/EECN                 |   Reserved    |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Private Data (220)                       |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Either side may send it; Linux ignores a DREQ whose Remote QPN is not
// the local QP of the connection.
type DREQ []byte

// DREQFields holds the DREQ's fields for Encode.
type DREQFields struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver's QPN (or EECN)
	PrivateData               []byte // up to DREQPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r DREQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// RemoteCommID returns the Remote Communication ID.
func (r DREQ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[4:]) }

// RemoteQPN returns the 24-bit Remote QPN/EECN.
func (r DREQ) RemoteQPN() uint32 { return uint24(r[8:]) }

// PrivateData returns the DREQPrivateSize bytes of private data.
func (r DREQ) PrivateData() []byte { return r[12 : 12+DREQPrivateSize] }

// Fields returns the DREQ's fields; PrivateData aliases the view.
func (r DREQ) Fields() DREQFields {
	return DREQFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), RemoteQPN: r.RemoteQPN(),
		PrivateData: r.PrivateData()}
}

// Encode writes f into the whole body: the reserved byte is written as
// zero, and private data beyond DREQPrivateSize is dropped (a shorter one
// is padded with zeros).
func (r DREQ) Encode(f *DREQFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[0:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[4:], f.RemoteCommID)
	putUint24(r[8:], f.RemoteQPN)
	r[11] = 0
	putData(r[12:12+DREQPrivateSize], f.PrivateData)
}

// DREP is a view of the body of a DisconnectReply (IBTA Vol 1 §12.6,
// Table 113), BodySize bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Private Data (224)                       |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DREP []byte

// DREPFields holds the DREP's fields for Encode.
type DREPFields struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte // up to DREPPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r DREP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// RemoteCommID returns the Remote Communication ID.
func (r DREP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[4:]) }

// PrivateData returns the DREPPrivateSize bytes of private data.
func (r DREP) PrivateData() []byte { return r[8 : 8+DREPPrivateSize] }

// Fields returns the DREP's fields; PrivateData aliases the view.
func (r DREP) Fields() DREPFields {
	return DREPFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), PrivateData: r.PrivateData()}
}

// Encode writes f into the whole body; private data beyond DREPPrivateSize
// is dropped (a shorter one is padded with zeros).
func (r DREP) Encode(f *DREPFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[0:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[4:], f.RemoteCommID)
	putData(r[8:8+DREPPrivateSize], f.PrivateData)
}
