package mad

import "encoding/binary"

// REQPrivateSize is the room for private data in a REQ.
const REQPrivateSize = 92

// REQ is a view of the body of a ConnectRequest (IBTA Vol 1 §12.6,
// Table 106), BodySize bytes. Offsets are from the start of the body (add
// 24 for the MAD); the vendor ID is that of IBA comment #9434 (ECE).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                 Vendor ID                     |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Service ID (8)                         |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Local CA GUID (8)                       |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Reserved                            |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Local Q_Key                          |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local QPN                     | Responder Rsc |  32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Local EECN                    | Initiator Dpt |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Remote EECN                   |RemCMTO  |TT |E|  40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Starting PSN                  |LocCMTO  |Retry|  44
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Partition Key         |  MTU  |R| RNR |MaxCMR |S| XT  |  48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Primary Local Port LID     |    Primary Remote Port LID    |  52
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Primary Local Port GID (16)                    |  56
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Primary Remote Port GID (16)                   |  72
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Primary Flow Label          | Reserved  | Pkt Rate  |  88
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Traffic Class |   Hop Limit   |  SL   |L| Rsv | AckTO   | Rsv |  92
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Alternate path: the same 44 bytes as 52..95 (zero here)   |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Private Data (92)                       | 140
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RemCMTO/LocCMTO = Remote/Local CM Response Timeout (4.096 µs ×
// 2^value), TT = Transport Service Type (0 RC, 1 UC, 3 XRC with the
// extended transport), E = End-to-End Flow Control, Retry = Retry Count,
// R = RDC Exists, RNR = RNR Retry Count, MaxCMR = Max CM Retries, S = SRQ,
// XT = Extended Transport Type, L = Subnet Local, AckTO = Local ACK
// Timeout. On RoCE the LIDs are 0xFFFF, the GIDs are the IPv4-mapped (or
// IPv6) addresses of the two ports, the hop limit and traffic class are the
// IP TTL and TOS, and LAP/APR (the alternate path) are unused.
//
// The first 36 bytes of the private data of an rdma_cm REQ are a CMAHeader.
type REQ []byte

const (
	reqLocalCommID  = 0
	reqVendorID     = 5
	reqServiceID    = 8
	reqLocalCAGUID  = 16
	reqLocalQKey    = 28
	reqLocalQPN     = 32
	reqRespRes      = 35
	reqLocalEECN    = 36
	reqInitDepth    = 39
	reqRemoteEECN   = 40
	reqRemoteCMTO   = 43 // Remote CM Response Timeout, Transport Service Type, E2E Flow Control
	reqStartingPSN  = 44
	reqLocalCMTO    = 47 // Local CM Response Timeout, Retry Count
	reqPKey         = 48
	reqMTU          = 50 // Path MTU, RDC Exists, RNR Retry Count
	reqMaxCMRetries = 51 // Max CM Retries, SRQ, Extended Transport Type
	reqPrimary      = 52 // the primary path
	reqAlternate    = 96 // the alternate path
	reqPrivateData  = 140

	// Offsets inside a path (primary at 52, alternate at 96).
	pathLocalLID    = 0
	pathRemoteLID   = 2
	pathLocalGID    = 4
	pathRemoteGID   = 20
	pathFlowLabel   = 36 // Flow Label (20 bits), reserved (6), Packet Rate (6)
	pathFlowLabelSh = 12 // the Flow Label's shift in the big-endian word at pathFlowLabel
	pathPacketRate  = 39
	pathTClass      = 40
	pathHopLimit    = 41
	pathSL          = 42 // SL, Subnet Local
	pathLocalACKTO  = 43 // Local ACK Timeout
	reqPathSize     = 44
)

// REQFields holds the REQ's fields for Encode. The alternate path is not
// represented: Encode writes it as zero.
type REQFields struct {
	LocalCommID             uint32 // sender's communication ID
	VendorID                uint32 // ECE vendor ID (24 bits)
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32 // UD and RD only; 0 for RC
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8  // RDMA READ / atomic requests the sender accepts at once
	LocalEECN               uint32 // 24 bits, RD only
	InitiatorDepth          uint8  // RDMA READ / atomic requests the sender issues at once
	RemoteEECN              uint32 // 24 bits, RD only
	RemoteCMResponseTimeout uint8  // 5 bits: 4.096 µs × 2^value to expect the answer
	TransportType           uint8  // 2 bits: 0 RC, 1 UC, 2 RD, 3 XRC (with ExtTransportType)
	E2EFlowControl          bool
	StartingPSN             uint32 // 24 bits: the first PSN the sender will receive
	LocalCMResponseTimeout  uint8  // 5 bits: 4.096 µs × 2^value for the sender to answer
	RetryCount              uint8  // 3 bits: transport retries on timeout
	PKey                    uint16
	PathMTU                 uint8 // 4 bits: 1 256, 2 512, 3 1024, 4 2048, 5 4096
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits: 7 means retry forever
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits: 1 XRC

	PrimaryLocalLID, PrimaryRemoteLID uint16 // 0xFFFF on RoCE
	PrimaryLocalGID, PrimaryRemoteGID [16]byte
	PrimaryFlowLabel                  uint32 // 20 bits
	PrimaryPacketRate                 uint8  // 6 bits, IB rate encoding (0 = port current)
	PrimaryTrafficClass               uint8
	PrimaryHopLimit                   uint8
	PrimarySL                         uint8 // 4 bits
	PrimarySubnetLocal                bool
	PrimaryLocalACKTimeout            uint8 // 5 bits: 4.096 µs × 2^value

	PrivateData []byte // up to REQPrivateSize bytes
}

// LocalCommID returns the Local Communication ID.
func (r REQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[reqLocalCommID:]) }

// VendorID returns the 24-bit ECE Vendor ID.
func (r REQ) VendorID() uint32 { return uint24(r[reqVendorID:]) }

// ServiceID returns the ServiceID.
func (r REQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[reqServiceID:]) }

// LocalCAGUID returns the Local CA GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[reqLocalCAGUID:]) }

// LocalQKey returns the Local Q_Key.
func (r REQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[reqLocalQKey:]) }

// LocalQPN returns the 24-bit Local QPN.
func (r REQ) LocalQPN() uint32 { return uint24(r[reqLocalQPN:]) }

// ResponderResources returns the Responder Resources.
func (r REQ) ResponderResources() uint8 { return r[reqRespRes] }

// LocalEECN returns the 24-bit Local EE Context Number.
func (r REQ) LocalEECN() uint32 { return uint24(r[reqLocalEECN:]) }

// InitiatorDepth returns the Initiator Depth.
func (r REQ) InitiatorDepth() uint8 { return r[reqInitDepth] }

// RemoteEECN returns the 24-bit Remote EE Context Number.
func (r REQ) RemoteEECN() uint32 { return uint24(r[reqRemoteEECN:]) }

// RemoteCMResponseTimeout returns the 5-bit Remote CM Response Timeout.
func (r REQ) RemoteCMResponseTimeout() uint8 { return r[reqRemoteCMTO] >> 3 }

// TransportType returns the 2-bit Transport Service Type.
func (r REQ) TransportType() uint8 { return r[reqRemoteCMTO] >> 1 & 3 }

// E2EFlowControl returns the End-to-End Flow Control bit.
func (r REQ) E2EFlowControl() bool { return r[reqRemoteCMTO]&1 != 0 }

// StartingPSN returns the 24-bit Starting PSN.
func (r REQ) StartingPSN() uint32 { return uint24(r[reqStartingPSN:]) }

// LocalCMResponseTimeout returns the 5-bit Local CM Response Timeout.
func (r REQ) LocalCMResponseTimeout() uint8 { return r[reqLocalCMTO] >> 3 }

// RetryCount returns the 3-bit Retry Count.
func (r REQ) RetryCount() uint8 { return r[reqLocalCMTO] & 7 }

// PKey returns the Partition Key.
func (r REQ) PKey() uint16 { return binary.BigEndian.Uint16(r[reqPKey:]) }

// PathMTU returns the 4-bit Path Packet Payload MTU.
func (r REQ) PathMTU() uint8 { return r[reqMTU] >> 4 }

// RDCExists returns the RDC Exists bit.
func (r REQ) RDCExists() bool { return r[reqMTU]&0x08 != 0 }

// RNRRetryCount returns the 3-bit RNR Retry Count.
func (r REQ) RNRRetryCount() uint8 { return r[reqMTU] & 7 }

// MaxCMRetries returns the 4-bit Max CM Retries.
func (r REQ) MaxCMRetries() uint8 { return r[reqMaxCMRetries] >> 4 }

// SRQ returns the SRQ bit.
func (r REQ) SRQ() bool { return r[reqMaxCMRetries]&0x08 != 0 }

// ExtTransportType returns the 3-bit Extended Transport Type.
func (r REQ) ExtTransportType() uint8 { return r[reqMaxCMRetries] & 7 }

// PrimaryLocalLID returns the Primary Local Port LID.
func (r REQ) PrimaryLocalLID() uint16 {
	return binary.BigEndian.Uint16(r[reqPrimary+pathLocalLID:])
}

// PrimaryRemoteLID returns the Primary Remote Port LID.
func (r REQ) PrimaryRemoteLID() uint16 {
	return binary.BigEndian.Uint16(r[reqPrimary+pathRemoteLID:])
}

// PrimaryLocalGID returns the Primary Local Port GID.
func (r REQ) PrimaryLocalGID() [16]byte {
	return [16]byte(r[reqPrimary+pathLocalGID : reqPrimary+pathLocalGID+16])
}

// PrimaryRemoteGID returns the Primary Remote Port GID.
func (r REQ) PrimaryRemoteGID() [16]byte {
	return [16]byte(r[reqPrimary+pathRemoteGID : reqPrimary+pathRemoteGID+16])
}

// PrimaryFlowLabel returns the 20-bit Primary Flow Label.
func (r REQ) PrimaryFlowLabel() uint32 {
	return binary.BigEndian.Uint32(r[reqPrimary+pathFlowLabel:]) >> pathFlowLabelSh
}

// PrimaryPacketRate returns the 6-bit Primary Packet Rate.
func (r REQ) PrimaryPacketRate() uint8 { return r[reqPrimary+pathPacketRate] & 0x3f }

// PrimaryTrafficClass returns the Primary Traffic Class.
func (r REQ) PrimaryTrafficClass() uint8 { return r[reqPrimary+pathTClass] }

// PrimaryHopLimit returns the Primary Hop Limit.
func (r REQ) PrimaryHopLimit() uint8 { return r[reqPrimary+pathHopLimit] }

// PrimarySL returns the 4-bit Primary SL.
func (r REQ) PrimarySL() uint8 { return r[reqPrimary+pathSL] >> 4 }

// PrimarySubnetLocal returns the Primary Subnet Local bit.
func (r REQ) PrimarySubnetLocal() bool { return r[reqPrimary+pathSL]&0x08 != 0 }

// PrimaryLocalACKTimeout returns the 5-bit Primary Local ACK Timeout.
func (r REQ) PrimaryLocalACKTimeout() uint8 { return r[reqPrimary+pathLocalACKTO] >> 3 }

// AlternatePath returns the 44 bytes of the alternate path (Alternate
// Local Port LID through Alternate Local ACK Timeout), all zero when the
// sender offers none; RoCE senders never do.
func (r REQ) AlternatePath() []byte { return r[reqAlternate : reqAlternate+reqPathSize] }

// PrivateData returns the REQPrivateSize bytes of private data.
func (r REQ) PrivateData() []byte { return r[reqPrivateData : reqPrivateData+REQPrivateSize] }

// Fields returns the REQ's fields; PrivateData aliases the view.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID: r.LocalCommID(), VendorID: r.VendorID(), ServiceID: r.ServiceID(), LocalCAGUID: r.LocalCAGUID(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), ResponderResources: r.ResponderResources(),
		LocalEECN: r.LocalEECN(), InitiatorDepth: r.InitiatorDepth(), RemoteEECN: r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(), TransportType: r.TransportType(),
		E2EFlowControl: r.E2EFlowControl(), StartingPSN: r.StartingPSN(),
		LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(), PKey: r.PKey(),
		PathMTU: r.PathMTU(), RDCExists: r.RDCExists(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(), ExtTransportType: r.ExtTransportType(),
		PrimaryLocalLID: r.PrimaryLocalLID(), PrimaryRemoteLID: r.PrimaryRemoteLID(),
		PrimaryLocalGID: r.PrimaryLocalGID(), PrimaryRemoteGID: r.PrimaryRemoteGID(),
		PrimaryFlowLabel: r.PrimaryFlowLabel(), PrimaryPacketRate: r.PrimaryPacketRate(),
		PrimaryTrafficClass: r.PrimaryTrafficClass(), PrimaryHopLimit: r.PrimaryHopLimit(),
		PrimarySL: r.PrimarySL(), PrimarySubnetLocal: r.PrimarySubnetLocal(),
		PrimaryLocalACKTimeout: r.PrimaryLocalACKTimeout(),
		PrivateData:            r.PrivateData(),
	}
}

// Encode writes f into the whole body: reserved bits and the alternate path
// are written as zero, values wider than their field are truncated to it,
// and private data beyond REQPrivateSize is dropped (a shorter one is
// padded with zeros).
func (r REQ) Encode(f *REQFields) {
	_ = r[BodySize-1]
	binary.BigEndian.PutUint32(r[reqLocalCommID:], f.LocalCommID)
	r[4] = 0
	putUint24(r[reqVendorID:], f.VendorID)
	binary.BigEndian.PutUint64(r[reqServiceID:], f.ServiceID)
	binary.BigEndian.PutUint64(r[reqLocalCAGUID:], f.LocalCAGUID)
	binary.BigEndian.PutUint32(r[24:], 0)
	binary.BigEndian.PutUint32(r[reqLocalQKey:], f.LocalQKey)
	putUint24(r[reqLocalQPN:], f.LocalQPN)
	r[reqRespRes] = f.ResponderResources
	putUint24(r[reqLocalEECN:], f.LocalEECN)
	r[reqInitDepth] = f.InitiatorDepth
	putUint24(r[reqRemoteEECN:], f.RemoteEECN)
	r[reqRemoteCMTO] = f.RemoteCMResponseTimeout<<3 | (f.TransportType&3)<<1 | bit(f.E2EFlowControl, 1)
	putUint24(r[reqStartingPSN:], f.StartingPSN)
	r[reqLocalCMTO] = f.LocalCMResponseTimeout<<3 | f.RetryCount&7
	binary.BigEndian.PutUint16(r[reqPKey:], f.PKey)
	r[reqMTU] = f.PathMTU<<4 | bit(f.RDCExists, 0x08) | f.RNRRetryCount&7
	r[reqMaxCMRetries] = f.MaxCMRetries<<4 | bit(f.SRQ, 0x08) | f.ExtTransportType&7
	p := r[reqPrimary : reqPrimary+reqPathSize]
	binary.BigEndian.PutUint16(p[pathLocalLID:], f.PrimaryLocalLID)
	binary.BigEndian.PutUint16(p[pathRemoteLID:], f.PrimaryRemoteLID)
	copy(p[pathLocalGID:], f.PrimaryLocalGID[:])
	copy(p[pathRemoteGID:], f.PrimaryRemoteGID[:])
	binary.BigEndian.PutUint32(p[pathFlowLabel:], f.PrimaryFlowLabel<<pathFlowLabelSh|uint32(f.PrimaryPacketRate&0x3f))
	p[pathTClass] = f.PrimaryTrafficClass
	p[pathHopLimit] = f.PrimaryHopLimit
	p[pathSL] = f.PrimarySL<<4 | bit(f.PrimarySubnetLocal, 0x08)
	p[pathLocalACKTO] = f.PrimaryLocalACKTimeout << 3
	clear(r[reqAlternate : reqAlternate+reqPathSize])
	putData(r[reqPrivateData:reqPrivateData+REQPrivateSize], f.PrivateData)
}
