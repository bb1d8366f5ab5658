package mad

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"
)

// allAttrs are the attributes with a view.
var allAttrs = []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrSIDRREP}

// encodedSamples returns one MAD per view, built by Encode with every field
// set (and private data longer than any room).
func encodedSamples() []MAD {
	pd := bytes.Repeat([]byte{0x5a}, 250)
	ari := bytes.Repeat([]byte{0xa5}, 80)
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 1}
	var out []MAD
	for _, attr := range allAttrs {
		m := make(MAD, Size)
		m.EncodeCM(0x0000000b2975ef71, attr, 0)
		b := m.Body()
		switch attr {
		case AttrREQ:
			REQ(b).Encode(&REQFields{LocalCommID: 0x71ef7529, VendorID: 0x02c9, ServiceID: ServiceID(PortSpaceTCP, 7174),
				LocalCAGUID: 0x08c0eb0300dae2e6, LocalQPN: 0x137, ResponderResources: 1, InitiatorDepth: 1,
				RemoteCMResponseTimeout: 22, E2EFlowControl: true, StartingPSN: 0x9f931b, LocalCMResponseTimeout: 22,
				RetryCount: 7, PKey: 0xffff, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true,
				PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff, PrimaryLocalGID: gid, PrimaryRemoteGID: gid,
				PrimaryFlowLabel: 0x47cdd, PrimaryPacketRate: 7, PrimaryTrafficClass: 0x68, PrimaryHopLimit: 64,
				PrimarySL: 3, PrimarySubnetLocal: true, PrimaryLocalACKTimeout: 19, PrivateData: pd})
			CMAHeader(REQ(b).PrivateData()).Encode(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 41234)
		case AttrMRA:
			MRA(b).Encode(&MRAFields{LocalCommID: 1, RemoteCommID: 2, MsgMRAed: MsgREP, ServiceTimeout: 24, PrivateData: pd})
		case AttrREJ:
			REJ(b).Encode(&REJFields{LocalCommID: 1, RemoteCommID: 2, MsgRejected: MsgOther, Reason: RejInvalidGID, ARI: ari, PrivateData: pd})
		case AttrREP:
			REP(b).Encode(&REPFields{LocalCommID: 1, RemoteCommID: 2, LocalQPN: 0x167, StartingPSN: 0xbee37a, VendorID: 0x123456,
				ResponderResources: 3, InitiatorDepth: 3, TargetACKDelay: 16, FailoverAccepted: 1, E2EFlowControl: true,
				RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x08c0eb0300dae2ca, PrivateData: pd})
		case AttrRTU:
			RTU(b).Encode(&RTUFields{LocalCommID: 1, RemoteCommID: 2, PrivateData: pd})
		case AttrDREQ:
			DREQ(b).Encode(&DREQFields{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x167, PrivateData: pd})
		case AttrDREP:
			DREP(b).Encode(&DREPFields{LocalCommID: 1, RemoteCommID: 2, PrivateData: pd})
		case AttrSIDRREQ:
			SIDRREQ(b).Encode(&SIDRREQFields{RequestID: 7, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 7174), PrivateData: pd})
			CMAHeader(SIDRREQ(b).PrivateData()).Encode(netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), 41234)
		case AttrSIDRREP:
			SIDRREP(b).Encode(&SIDRREPFields{RequestID: 7, Status: uint8(SIDRRedirect), VendorID: 0xabcdef, QPN: 0x12,
				ServiceID: ServiceID(PortSpaceUDP, 7174), QKey: RDMAUDPQKey, ARI: ari, PrivateData: pd})
		}
		out = append(out, m)
	}
	return out
}

// checkCMAHeader decodes a CMAHeader and, when the kernel would accept
// it, checks that Encode of what it names gives the same names back.
func checkCMAHeader(t *testing.T, pd []byte) {
	h := CMAHeader(pd)
	err := h.Check()
	src, dst, port, ipv := h.Src(), h.Dst(), h.Port(), h.IPVersion()
	if err != nil || (ipv == 6 && src.Is4In6()) {
		return // an IPv4-mapped source is written back as IPv4
	}
	out := make(CMAHeader, CMAHeaderSize)
	out.Encode(src, dst, port)
	if out.Check() != nil || out.IPVersion() != ipv || out.Src() != src || out.Port() != port {
		t.Fatalf("CMA header %x re-encoded as %x", pd[:CMAHeaderSize], []byte(out))
	}
	if ipv == 4 && out.Dst() != dst || ipv == 6 && out.Dst().As16() != dst.As16() {
		t.Fatalf("CMA header %x: destination %v re-encoded as %v", pd[:CMAHeaderSize], dst, out.Dst())
	}
}

func FuzzMAD(f *testing.F) {
	for _, c := range allCaptured(f) {
		f.Add([]byte(c.m))
	}
	for _, m := range encodedSamples() {
		f.Add([]byte(m))
	}
	f.Add(make([]byte, Size-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if len(b) >= Size {
				t.Fatalf("Parse of %d bytes: %v", len(b), err)
			}
			return
		}
		_ = m.CheckCM()
		_ = m.AttrID().String()
		h := m.Header()
		m2 := make(MAD, Size)
		m2.EncodeHeader(&h)
		if m2.Header() != h {
			t.Fatalf("header %+v re-encoded as %+v", h, m2.Header())
		}
		// Every view reads any body; decode, encode, decode is stable and
		// the second encoding is the same bytes as the first.
		for _, attr := range allAttrs {
			out1, out2 := make([]byte, BodySize), make([]byte, BodySize)
			f1, _ := reencode(attr, m.Body(), out1)
			f2, _ := reencode(attr, out1, out2)
			if !reflect.DeepEqual(f1, f2) {
				t.Fatalf("%v: fields changed across encode:\n%+v\n%+v", attr, f1, f2)
			}
			if !bytes.Equal(out1, out2) {
				t.Fatalf("%v: encoding is not canonical:\n%x\n%x", attr, out1, out2)
			}
		}
		_ = REJ(m.Body()).Reason().String()
		_ = SIDRREP(m.Body()).Status().String()
		checkCMAHeader(t, REQ(m.Body()).PrivateData())
		checkCMAHeader(t, SIDRREQ(m.Body()).PrivateData())
		for _, id := range []uint64{REQ(m.Body()).ServiceID(), SIDRREQ(m.Body()).ServiceID()} {
			if ps, port, ok := SplitServiceID(id); ok && ServiceID(ps, port) != id {
				t.Fatalf("service ID %#x split into %v %d", id, ps, port)
			}
		}
	})
}

// TestEncodedSamples checks the samples: they decode to what was encoded.
func TestEncodedSamples(t *testing.T) {
	for _, m := range encodedSamples() {
		if err := m.CheckCM(); err != nil {
			t.Fatalf("%v: %v", m.AttrID(), err)
		}
		out := make([]byte, BodySize)
		reencode(m.AttrID(), m.Body(), out)
		if !bytes.Equal(out, m.Body()) {
			t.Errorf("%v: sample not stable:\n%x\n%x", m.AttrID(), out, m.Body())
		}
	}
	r := REQ(encodedSamples()[0].Body())
	h := CMAHeader(r.PrivateData())
	if h.Check() != nil || h.Src() != netip.MustParseAddr("198.18.0.1") || h.Port() != 41234 || r.PrimarySL() != 3 || r.PrimaryFlowLabel() != 0x47cdd {
		t.Errorf("REQ sample: %+v", r.Fields())
	}
}

// decodeEncode are the zero-allocation paths: parse, check, decode every
// field and encode them again.
var decodeEncode = map[AttrID]func(m MAD, out []byte){
	AttrREQ: func(m MAD, out []byte) {
		f := REQ(m.Body()).Fields()
		REQ(out).Encode(&f)
		h := CMAHeader(f.PrivateData)
		if h.Check() == nil {
			_, _ = h.Src(), h.Dst()
		}
		_, _, _ = SplitServiceID(f.ServiceID)
	},
	AttrMRA: func(m MAD, out []byte) { f := MRA(m.Body()).Fields(); MRA(out).Encode(&f) },
	AttrREJ: func(m MAD, out []byte) { f := REJ(m.Body()).Fields(); REJ(out).Encode(&f) },
	AttrREP: func(m MAD, out []byte) { f := REP(m.Body()).Fields(); REP(out).Encode(&f) },
	AttrRTU: func(m MAD, out []byte) { f := RTU(m.Body()).Fields(); RTU(out).Encode(&f) },
	AttrDREQ: func(m MAD, out []byte) {
		f := DREQ(m.Body()).Fields()
		DREQ(out).Encode(&f)
	},
	AttrDREP: func(m MAD, out []byte) {
		f := DREP(m.Body()).Fields()
		DREP(out).Encode(&f)
	},
	AttrSIDRREQ: func(m MAD, out []byte) {
		f := SIDRREQ(m.Body()).Fields()
		SIDRREQ(out).Encode(&f)
		_ = CMAHeader(f.PrivateData).Src()
	},
	AttrSIDRREP: func(m MAD, out []byte) {
		f := SIDRREP(m.Body()).Fields()
		SIDRREP(out).Encode(&f)
	},
}

func TestAllocs(t *testing.T) {
	for _, raw := range encodedSamples() {
		attr := raw.AttrID()
		run := decodeEncode[attr]
		out := make([]byte, BodySize)
		hdr := make(MAD, Size)
		allocs := testing.AllocsPerRun(100, func() {
			m, err := Parse(raw)
			if err != nil || m.CheckCM() != nil {
				panic("bad sample")
			}
			h := m.Header()
			hdr.EncodeHeader(&h)
			hdr.EncodeCM(m.TID(), m.AttrID(), m.AttrMod())
			run(m, out)
		})
		if allocs != 0 {
			t.Errorf("%v: parse, decode and encode allocate %.1f times", attr, allocs)
		}
	}
}

func BenchmarkREQ(b *testing.B) {
	m := encodedSamples()[0]
	out := make([]byte, BodySize)
	run := decodeEncode[AttrREQ]
	b.ReportAllocs()
	b.SetBytes(Size)
	for b.Loop() {
		mm, _ := Parse(m)
		if mm.CheckCM() != nil {
			b.Fatal("bad sample")
		}
		run(mm, out)
	}
}
