package mad

import "encoding/binary"

// Private-data room of REP and RTU.
const (
	REPPrivateSize = 196
	RTUPrivateSize = 224
)

// REP is a view of the body of a ConnectReply (IBTA Vol 1 §12.6,
// Table 110), BodySize bytes. The vendor ID (IBA comment #9434, ECE) is
// spread over the bytes after the QPN, the EECN and the PSN: VendorID[23:16]
// at 15, [15:8] at 19, [7:0] at 23.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Local Q_Key                          |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local QPN                     | VendorID 23:16|  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local EECN                    | VendorID 15:8 |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Starting PSN                  | VendorID 7:0  |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Responder Rsc | Initiator Dpt |TgtAckDly|FO |E| RNR |S|  Rsv  |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Local CA GUID (8)                       |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Private Data (196)                       |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// TgtAckDly = Target ACK Delay (4.096 µs × 2^value), FO = Failover
// Accepted, E = End-to-End Flow Control, RNR = RNR Retry Count, S = SRQ.
// Starting PSN is the first PSN the sender of the REP will receive.
type REP []byte

const (
	repLocalCommID  = 0
	repRemoteCommID = 4
	repLocalQKey    = 8
	repLocalQPN     = 12
	repVendorIDH    = 15
	repLocalEECN    = 16
	repVendorIDM    = 19
	repStartingPSN  = 20
	repVendorIDL    = 23
	repRespRes      = 24
	repInitDepth    = 25
	repAckDelay     = 26 // Target ACK Delay, Failover Accepted, E2E Flow Control
	repRNR          = 27 // RNR Retry Count, SRQ
	repLocalCAGUID  = 28
	repPrivateData  = 36
)

// REPFields holds the REP's fields for Encode.
type REPFields struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32 // UD and RD only; 0 for RC
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits, RD only
	StartingPSN               uint32 // 24 bits
	VendorID                  uint32 // ECE vendor ID (24 bits)
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits: 4.096 µs × 2^value
	FailoverAccepted          uint8 // 2 bits: 0 accepted, 1 not supported, 2 rejected
	E2EFlowControl            bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               []byte // up to REPPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r REP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[repLocalCommID:]) }

// RemoteCommID returns the Remote Communication ID.
func (r REP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[repRemoteCommID:]) }

// LocalQKey returns the Local Q_Key.
func (r REP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[repLocalQKey:]) }

// LocalQPN returns the 24-bit Local QPN.
func (r REP) LocalQPN() uint32 { return uint24(r[repLocalQPN:]) }

// LocalEECN returns the 24-bit Local EE Context Number.
func (r REP) LocalEECN() uint32 { return uint24(r[repLocalEECN:]) }

// StartingPSN returns the 24-bit Starting PSN.
func (r REP) StartingPSN() uint32 { return uint24(r[repStartingPSN:]) }

// VendorID returns the 24-bit ECE Vendor ID.
func (r REP) VendorID() uint32 {
	return uint32(r[repVendorIDH])<<16 | uint32(r[repVendorIDM])<<8 | uint32(r[repVendorIDL])
}

// ResponderResources returns the Responder Resources.
func (r REP) ResponderResources() uint8 { return r[repRespRes] }

// InitiatorDepth returns the Initiator Depth.
func (r REP) InitiatorDepth() uint8 { return r[repInitDepth] }

// TargetACKDelay returns the 5-bit Target ACK Delay.
func (r REP) TargetACKDelay() uint8 { return r[repAckDelay] >> 3 }

// FailoverAccepted returns the 2-bit Failover Accepted.
func (r REP) FailoverAccepted() uint8 { return r[repAckDelay] >> 1 & 3 }

// E2EFlowControl returns the End-to-End Flow Control bit.
func (r REP) E2EFlowControl() bool { return r[repAckDelay]&1 != 0 }

// RNRRetryCount returns the 3-bit RNR Retry Count.
func (r REP) RNRRetryCount() uint8 { return r[repRNR] >> 5 }

// SRQ returns the SRQ bit.
func (r REP) SRQ() bool { return r[repRNR]&0x10 != 0 }

// LocalCAGUID returns the Local CA GUID.
func (r REP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[repLocalCAGUID:]) }

// PrivateData returns the REPPrivateSize bytes of private data.
func (r REP) PrivateData() []byte { return r[repPrivateData : repPrivateData+REPPrivateSize] }

// Fields returns the REP's fields; PrivateData aliases the view.
func (r REP) Fields() REPFields {
	return REPFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), LocalQKey: r.LocalQKey(),
		LocalQPN: r.LocalQPN(), LocalEECN: r.LocalEECN(), StartingPSN: r.StartingPSN(), VendorID: r.VendorID(),
		ResponderResources: r.ResponderResources(), InitiatorDepth: r.InitiatorDepth(),
		TargetACKDelay: r.TargetACKDelay(), FailoverAccepted: r.FailoverAccepted(),
		E2EFlowControl: r.E2EFlowControl(), RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(),
		LocalCAGUID: r.LocalCAGUID(), PrivateData: r.PrivateData(),
	}
}

// Encode writes f into the whole body: reserved bits are written as zero,
// values wider than their field are truncated to it, and private data
// beyond REPPrivateSize is dropped (a shorter one is padded with zeros).
func (r REP) Encode(f *REPFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[repLocalCommID:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[repRemoteCommID:], f.RemoteCommID)
	binary.BigEndian.PutUint32(r[repLocalQKey:], f.LocalQKey)
	putUint24(r[repLocalQPN:], f.LocalQPN)
	r[repVendorIDH] = byte(f.VendorID >> 16)
	putUint24(r[repLocalEECN:], f.LocalEECN)
	r[repVendorIDM] = byte(f.VendorID >> 8)
	putUint24(r[repStartingPSN:], f.StartingPSN)
	r[repVendorIDL] = byte(f.VendorID)
	r[repRespRes] = f.ResponderResources
	r[repInitDepth] = f.InitiatorDepth
	r[repAckDelay] = f.TargetACKDelay<<3 | (f.FailoverAccepted&3)<<1 | bit(f.E2EFlowControl, 1)
	r[repRNR] = f.RNRRetryCount<<5 | bit(f.SRQ, 0x10)
	binary.BigEndian.PutUint64(r[repLocalCAGUID:], f.LocalCAGUID)
	putData(r[repPrivateData:repPrivateData+REPPrivateSize], f.PrivateData)
}

// RTU is a view of the body of a ReadyToUse (IBTA Vol 1 §12.6, Table 111),
// BodySize bytes.
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
type RTU []byte

// RTUFields holds the RTU's fields for Encode.
type RTUFields struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte // up to RTUPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r RTU) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// RemoteCommID returns the Remote Communication ID.
func (r RTU) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[4:]) }

// PrivateData returns the RTUPrivateSize bytes of private data.
func (r RTU) PrivateData() []byte { return r[8 : 8+RTUPrivateSize] }

// Fields returns the RTU's fields; PrivateData aliases the view.
func (r RTU) Fields() RTUFields {
	return RTUFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), PrivateData: r.PrivateData()}
}

// Encode writes f into the whole body; private data beyond RTUPrivateSize
// is dropped (a shorter one is padded with zeros).
func (r RTU) Encode(f *RTUFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[0:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[4:], f.RemoteCommID)
	putData(r[8:8+RTUPrivateSize], f.PrivateData)
}
