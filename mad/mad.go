package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of a MAD (IBTA Vol 1 §13.4.2).
const (
	Size       = 256 // a whole MAD, as carried by one UD SEND to QP 1
	HeaderSize = 24  // the common MAD header
	BodySize   = 232 // the class-specific data after the header
)

// Values of the common header for the Communication Manager.
const (
	BaseVersion    = 1    // the only MAD base version (IBTA 1.x)
	ClassCM        = 0x07 // management class of the Communication Manager
	ClassVersionCM = 2    // CM class version sent by Linux and ConnectX

	MethodGet     = 0x01
	MethodSet     = 0x02
	MethodSend    = 0x03 // every CM message is a Send
	MethodGetResp = 0x81

	GSIQKey = 0x80010000 // Q_Key of QP 1, the General Services Interface
)

// Errors of Parse and CheckCM.
var (
	ErrShort   = errors.New("mad: shorter than its fixed size")
	ErrVersion = errors.New("mad: unsupported version")
	ErrClass   = errors.New("mad: not a Communication Management MAD")
	ErrMethod  = errors.New("mad: unexpected method")
)

// AttrID is a MAD Attribute ID; for the CM class it names the message.
type AttrID uint16

// CM attributes (IBTA Vol 1 §12.6; the kernel's CM_*_ATTR_ID).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010 // ConnectRequest
	AttrMRA           AttrID = 0x0011 // MsgRcptAck
	AttrREJ           AttrID = 0x0012 // ConnectReject
	AttrREP           AttrID = 0x0013 // ConnectReply
	AttrRTU           AttrID = 0x0014 // ReadyToUse
	AttrDREQ          AttrID = 0x0015 // DisconnectRequest
	AttrDREP          AttrID = 0x0016 // DisconnectReply
	AttrSIDRREQ       AttrID = 0x0017 // ServiceIDResReq
	AttrSIDRREP       AttrID = 0x0018 // ServiceIDResReqResp
	AttrLAP           AttrID = 0x0019 // LoadAlternatePath
	AttrAPR           AttrID = 0x001A // AlternatePathResponse
)

var attrNames = [...]string{
	AttrClassPortInfo: "ClassPortInfo",
	AttrREQ:           "REQ",
	AttrMRA:           "MRA",
	AttrREJ:           "REJ",
	AttrREP:           "REP",
	AttrRTU:           "RTU",
	AttrDREQ:          "DREQ",
	AttrDREP:          "DREP",
	AttrSIDRREQ:       "SIDR_REQ",
	AttrSIDRREP:       "SIDR_REP",
	AttrLAP:           "LAP",
	AttrAPR:           "APR",
}

func (a AttrID) String() string {
	if int(a) < len(attrNames) && attrNames[a] != "" {
		return attrNames[a]
	}
	return fmt.Sprintf("AttrID(0x%04x)", uint16(a))
}

// MAD is a view of a whole 256-byte Management Datagram: the common header
// (IBTA Vol 1 §13.4.2) followed by BodySize bytes of class data.
// Get one from Parse, which checks the length.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     TransactionID (63:32)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     TransactionID (31:0)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       AttributeModifier                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Data (232 bytes, the body)                  |
//	~                                                               ~
//
// R is the response bit of the method, part of Method here (0x81 is
// GetResp). CM MADs carry Base Version 1, Class 0x07, Class Version 2 and
// Method Send; the Attribute ID names the message and the Attribute
// Modifier holds the ECE options of REQ, REP and SIDR_REP (else 0).
type MAD []byte

const (
	madBaseVersion   = 0
	madMgmtClass     = 1
	madClassVersion  = 2
	madMethod        = 3
	madStatus        = 4
	madClassSpecific = 6
	madTID           = 8
	madAttrID        = 16
	madReserved      = 18
	madAttrMod       = 20
)

// Header holds the common MAD header's fields for EncodeHeader.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8 // including the response bit 0x80
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        AttrID
	AttrMod       uint32 // attribute modifier
}

// Parse returns the first Size bytes of b as a MAD, or ErrShort. It checks
// nothing else: see CheckCM.
func Parse(b []byte) (MAD, error) {
	if len(b) < Size {
		return nil, ErrShort
	}
	return MAD(b[:Size]), nil
}

// CheckCM reports whether the header is that of a CM message as Linux
// accepts it: base version 1 (else ErrVersion), class 0x07 (ErrClass), class
// version 2 (ErrVersion) and method Send (ErrMethod).
func (m MAD) CheckCM() error {
	switch {
	case m.BaseVersion() != BaseVersion:
		return fmt.Errorf("base version %d, want %d: %w", m.BaseVersion(), BaseVersion, ErrVersion)
	case m.MgmtClass() != ClassCM:
		return fmt.Errorf("management class 0x%02x, want 0x%02x: %w", m.MgmtClass(), ClassCM, ErrClass)
	case m.ClassVersion() != ClassVersionCM:
		return fmt.Errorf("CM class version %d, want %d: %w", m.ClassVersion(), ClassVersionCM, ErrVersion)
	case m.Method() != MethodSend:
		return fmt.Errorf("method 0x%02x, want Send (0x%02x): %w", m.Method(), MethodSend, ErrMethod)
	}
	return nil
}

// BaseVersion returns the BaseVersion.
func (m MAD) BaseVersion() uint8 { return m[madBaseVersion] }

// MgmtClass returns the MgmtClass.
func (m MAD) MgmtClass() uint8 { return m[madMgmtClass] }

// ClassVersion returns the ClassVersion.
func (m MAD) ClassVersion() uint8 { return m[madClassVersion] }

// Method returns the Method, including the response bit (0x80).
func (m MAD) Method() uint8 { return m[madMethod] }

// Status returns the Status.
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[madStatus:]) }

// ClassSpecific returns the ClassSpecific field.
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[madClassSpecific:]) }

// TID returns the TransactionID.
func (m MAD) TID() uint64 { return binary.BigEndian.Uint64(m[madTID:]) }

// AttrID returns the AttributeID.
func (m MAD) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(m[madAttrID:])) }

// AttrMod returns the AttributeModifier.
func (m MAD) AttrMod() uint32 { return binary.BigEndian.Uint32(m[madAttrMod:]) }

// Body returns the BodySize bytes after the header, the view of the
// attribute (REQ(m.Body()), ...).
func (m MAD) Body() []byte { return m[HeaderSize:Size] }

// Header returns the header's fields.
func (m MAD) Header() Header {
	return Header{
		BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(), Method: m.Method(),
		Status: m.Status(), ClassSpecific: m.ClassSpecific(), TID: m.TID(), AttrID: m.AttrID(), AttrMod: m.AttrMod(),
	}
}

// EncodeHeader writes h into bytes 0..23; the reserved field is written as
// zero. The body is left alone.
func (m MAD) EncodeHeader(h *Header) {
	_ = m[HeaderSize-1]
	m[madBaseVersion] = h.BaseVersion
	m[madMgmtClass] = h.MgmtClass
	m[madClassVersion] = h.ClassVersion
	m[madMethod] = h.Method
	binary.BigEndian.PutUint16(m[madStatus:], h.Status)
	binary.BigEndian.PutUint16(m[madClassSpecific:], h.ClassSpecific)
	binary.BigEndian.PutUint64(m[madTID:], h.TID)
	binary.BigEndian.PutUint16(m[madAttrID:], uint16(h.AttrID))
	m[madReserved], m[madReserved+1] = 0, 0
	binary.BigEndian.PutUint32(m[madAttrMod:], h.AttrMod)
}

// EncodeCM writes the header of a CM message: base version 1, class 0x07,
// class version 2, method Send, status 0, and the given transaction ID,
// attribute and attribute modifier.
func (m MAD) EncodeCM(tid uint64, attr AttrID, attrMod uint32) {
	m.EncodeHeader(&Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: ClassVersionCM,
		Method: MethodSend, TID: tid, AttrID: attr, AttrMod: attrMod})
}

// Bit-field helpers, shared by the message views.

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

func uint24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func putUint24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

// putData copies data into room and zeroes what it leaves over. The copy
// may overlap room (Fields then Encode on the same view).
func putData(room, data []byte) {
	n := copy(room, data)
	clear(room[n:])
}
