package mad

import (
	"bytes"
	"errors"
	"math/bits"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseTruncated(t *testing.T) {
	for _, c := range allCaptured(t) {
		raw := []byte(c.m)
		for n := 0; n < Size; n++ {
			if m, err := Parse(raw[:n]); err != ErrShort || m != nil {
				t.Fatalf("%s #%d: Parse of %d bytes = %d bytes, %v; want ErrShort", c.file, c.frame, n, len(m), err)
			}
		}
		long := append(append([]byte(nil), raw...), 1, 2, 3, 4) // ICRC, pad: ignored
		if m, err := Parse(long); err != nil || len(m) != Size || &m[0] != &long[0] {
			t.Fatalf("%s #%d: Parse of %d bytes = %d bytes, %v", c.file, c.frame, len(long), len(m), err)
		}
	}
}

func TestCheckCM(t *testing.T) {
	good := make(MAD, Size)
	good.EncodeCM(0x1122334455667788, AttrREQ, 0)
	if err := good.CheckCM(); err != nil {
		t.Fatalf("CheckCM of EncodeCM output: %v", err)
	}
	for _, tc := range []struct {
		name string
		off  int
		v    byte
		want error
	}{
		{"base version 2", 0, 2, ErrVersion},
		{"subnet administration class", 1, 0x03, ErrClass},
		{"class version 1", 2, 1, ErrVersion},
		{"method Get", 3, MethodGet, ErrMethod},
		{"method GetResp", 3, MethodGetResp, ErrMethod},
	} {
		m := append(MAD(nil), good...)
		m[tc.off] = tc.v
		err := m.CheckCM()
		if !errors.Is(err, tc.want) || !strings.HasPrefix(tc.want.Error(), "mad: ") {
			t.Errorf("%s: CheckCM = %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, c := range allCaptured(t) {
		if err := c.m.CheckCM(); err != nil {
			t.Errorf("%s #%d: %v", c.file, c.frame, err)
		}
	}
}

func TestHeader(t *testing.T) {
	h := Header{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, Status: 0xabcd, ClassSpecific: 0x1234,
		TID: 0x0000000b2975ef71, AttrID: AttrDREQ, AttrMod: 0xdeadbeef}
	m := MAD(bytes.Repeat([]byte{0xff}, Size))
	m.EncodeHeader(&h)
	want := []byte{1, 7, 2, 3, 0xab, 0xcd, 0x12, 0x34, 0, 0, 0, 0x0b, 0x29, 0x75, 0xef, 0x71, 0, 0x15, 0, 0, 0xde, 0xad, 0xbe, 0xef}
	if !bytes.Equal(m[:HeaderSize], want) {
		t.Fatalf("EncodeHeader wrote\n%x\nwant\n%x", m[:HeaderSize], want)
	}
	if m[HeaderSize] != 0xff {
		t.Fatal("EncodeHeader wrote into the body")
	}
	if got := m.Header(); got != h {
		t.Fatalf("Header() = %+v, want %+v", got, h)
	}
	if len(m.Body()) != BodySize || &m.Body()[0] != &m[HeaderSize] {
		t.Fatal("Body is not the view of bytes 24..255")
	}
	for _, c := range allCaptured(t) {
		h := c.m.Header()
		m := make(MAD, Size)
		m.EncodeHeader(&h)
		if !bytes.Equal(m[:HeaderSize], c.m[:HeaderSize]) {
			t.Errorf("%s #%d: header re-encoded as %x, was %x", c.file, c.frame, m[:HeaderSize], c.m[:HeaderSize])
		}
		m.EncodeCM(h.TID, h.AttrID, h.AttrMod)
		if !bytes.Equal(m[:HeaderSize], c.m[:HeaderSize]) {
			t.Errorf("%s #%d: EncodeCM header %x, was %x", c.file, c.frame, m[:HeaderSize], c.m[:HeaderSize])
		}
	}
}

// reencode decodes a body with the view of attr, encodes its fields into
// out and returns the fields; ok is false for attributes without a view.
func reencode(attr AttrID, body, out []byte) (fields any, ok bool) {
	switch attr {
	case AttrREQ:
		f := REQ(body).Fields()
		REQ(out).Encode(&f)
		return f, true
	case AttrMRA:
		f := MRA(body).Fields()
		MRA(out).Encode(&f)
		return f, true
	case AttrREJ:
		f := REJ(body).Fields()
		REJ(out).Encode(&f)
		return f, true
	case AttrREP:
		f := REP(body).Fields()
		REP(out).Encode(&f)
		return f, true
	case AttrRTU:
		f := RTU(body).Fields()
		RTU(out).Encode(&f)
		return f, true
	case AttrDREQ:
		f := DREQ(body).Fields()
		DREQ(out).Encode(&f)
		return f, true
	case AttrDREP:
		f := DREP(body).Fields()
		DREP(out).Encode(&f)
		return f, true
	case AttrSIDRREQ:
		f := SIDRREQ(body).Fields()
		SIDRREQ(out).Encode(&f)
		return f, true
	case AttrSIDRREP:
		f := SIDRREP(body).Fields()
		SIDRREP(out).Encode(&f)
		return f, true
	}
	return nil, false
}

// TestRoundTrip re-encodes every captured message from its fields into a
// body full of 0xff: every byte must come back. No capture has a nonzero
// reserved bit, an alternate path or an ARI, so nothing is masked.
func TestRoundTrip(t *testing.T) {
	for _, c := range allCaptured(t) {
		out := bytes.Repeat([]byte{0xff}, BodySize)
		if _, ok := reencode(c.m.AttrID(), c.m.Body(), out); !ok {
			t.Errorf("%s #%d: no view for %v", c.file, c.frame, c.m.AttrID())
			continue
		}
		if !bytes.Equal(out, c.m.Body()) {
			t.Errorf("%s #%d %v: re-encoded body\n%x\nwant\n%x", c.file, c.frame, c.m.AttrID(), out, c.m.Body())
		}
	}
}

// TestEncodeInPlace encodes a view from its own Fields: the private data
// aliases the destination and must survive.
func TestEncodeInPlace(t *testing.T) {
	for _, c := range allCaptured(t) {
		body := append([]byte(nil), c.m.Body()...)
		reencode(c.m.AttrID(), body, body)
		if !bytes.Equal(body, c.m.Body()) {
			t.Errorf("%s #%d %v: encoding a view's fields into itself changed it", c.file, c.frame, c.m.AttrID())
		}
	}
}

func TestEncodeLimits(t *testing.T) {
	long := bytes.Repeat([]byte{0xaa}, 300)
	for _, tc := range []struct {
		name string
		room int
		enc  func(b []byte, pd []byte) []byte // encodes pd, returns the view's PrivateData
	}{
		{"REQ", REQPrivateSize, func(b, pd []byte) []byte { REQ(b).Encode(&REQFields{PrivateData: pd}); return REQ(b).PrivateData() }},
		{"MRA", MRAPrivateSize, func(b, pd []byte) []byte { MRA(b).Encode(&MRAFields{PrivateData: pd}); return MRA(b).PrivateData() }},
		{"REJ", REJPrivateSize, func(b, pd []byte) []byte { REJ(b).Encode(&REJFields{PrivateData: pd}); return REJ(b).PrivateData() }},
		{"REP", REPPrivateSize, func(b, pd []byte) []byte { REP(b).Encode(&REPFields{PrivateData: pd}); return REP(b).PrivateData() }},
		{"RTU", RTUPrivateSize, func(b, pd []byte) []byte { RTU(b).Encode(&RTUFields{PrivateData: pd}); return RTU(b).PrivateData() }},
		{"DREQ", DREQPrivateSize, func(b, pd []byte) []byte { DREQ(b).Encode(&DREQFields{PrivateData: pd}); return DREQ(b).PrivateData() }},
		{"DREP", DREPPrivateSize, func(b, pd []byte) []byte { DREP(b).Encode(&DREPFields{PrivateData: pd}); return DREP(b).PrivateData() }},
		{"SIDR_REQ", SIDRREQPrivateSize, func(b, pd []byte) []byte {
			SIDRREQ(b).Encode(&SIDRREQFields{PrivateData: pd})
			return SIDRREQ(b).PrivateData()
		}},
		{"SIDR_REP", SIDRREPPrivateSize, func(b, pd []byte) []byte {
			SIDRREP(b).Encode(&SIDRREPFields{PrivateData: pd})
			return SIDRREP(b).PrivateData()
		}},
	} {
		b := bytes.Repeat([]byte{0xff}, BodySize)
		pd := tc.enc(b, long)
		if len(pd) != tc.room || !bytes.Equal(pd, long[:tc.room]) {
			t.Errorf("%s: private data of %d bytes is %d: %x", tc.name, len(long), len(pd), pd)
		}
		pd = tc.enc(b, []byte{1, 2, 3})
		if want := append([]byte{1, 2, 3}, make([]byte, tc.room-3)...); !bytes.Equal(pd, want) {
			t.Errorf("%s: short private data not zero-padded: %x", tc.name, pd)
		}
		// Everything but the private data is zero for a zero Fields.
		if n := bytes.Count(b, []byte{0}); n != BodySize-3 {
			t.Errorf("%s: zero fields leave %d nonzero bytes:\n%x", tc.name, BodySize-n, b)
		}
	}

	// Fields wider than the wire are cut to it.
	b := make([]byte, BodySize)
	REQ(b).Encode(&REQFields{VendorID: 0xff123456, LocalQPN: 0x1abcdef, RemoteCMResponseTimeout: 0x3f, TransportType: 7,
		StartingPSN: 0xfffffffe, PathMTU: 0x13, RNRRetryCount: 9, MaxCMRetries: 0x1f, ExtTransportType: 9,
		PrimaryFlowLabel: 0x123456, PrimaryPacketRate: 0x7f, PrimarySL: 0x1f, PrimaryLocalACKTimeout: 0x3f})
	r := REQ(b)
	for _, c := range []struct {
		name      string
		got, want uint32
	}{
		{"VendorID", r.VendorID(), 0x123456}, {"LocalQPN", r.LocalQPN(), 0xabcdef},
		{"RemoteCMResponseTimeout", uint32(r.RemoteCMResponseTimeout()), 0x1f}, {"TransportType", uint32(r.TransportType()), 3},
		{"StartingPSN", r.StartingPSN(), 0xfffffe}, {"PathMTU", uint32(r.PathMTU()), 3}, {"RNRRetryCount", uint32(r.RNRRetryCount()), 1},
		{"MaxCMRetries", uint32(r.MaxCMRetries()), 0xf}, {"ExtTransportType", uint32(r.ExtTransportType()), 1},
		{"PrimaryFlowLabel", r.PrimaryFlowLabel(), 0x23456}, {"PrimaryPacketRate", uint32(r.PrimaryPacketRate()), 0x3f},
		{"PrimarySL", uint32(r.PrimarySL()), 0xf}, {"PrimaryLocalACKTimeout", uint32(r.PrimaryLocalACKTimeout()), 0x1f},
	} {
		if c.got != c.want {
			t.Errorf("REQ %s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if r[4] != 0 || r[88+2]&0x0f != 0 || r[91]&0xc0 != 0 || r[94]&7 != 0 || r[95]&7 != 0 || r.E2EFlowControl() || r.RDCExists() || r.SRQ() || r.PrimarySubnetLocal() {
		t.Errorf("REQ: a wide field spilled into its neighbours: %x", b[:96])
	}
}

func TestREJ(t *testing.T) {
	b := bytes.Repeat([]byte{0xff}, BodySize)
	guid := []byte{0x08, 0xc0, 0xeb, 0x03, 0x00, 0xda, 0xe2, 0xca}
	REJ(b).Encode(&REJFields{LocalCommID: 0, RemoteCommID: 0x71ef7529, MsgRejected: MsgREQ, ARILength: 99,
		Reason: RejTimeout, ARI: guid, PrivateData: []byte("no")})
	want := []byte{0, 0, 0, 0, 0x71, 0xef, 0x75, 0x29, 0x00, 8 << 1, 0, 4}
	if !bytes.Equal(b[:12], want) {
		t.Fatalf("REJ head %x, want %x", b[:12], want)
	}
	r := REJ(b)
	f := r.Fields()
	if f.ARILength != 8 || r.ARILength() != 8 || !bytes.Equal(f.ARI, guid) || f.Reason != RejTimeout || f.Reason.String() != "timeout" {
		t.Fatalf("REJ fields %+v", f)
	}
	if !bytes.Equal(b[12+8:84], make([]byte, 64)) || string(f.PrivateData[:3]) != "no\x00" {
		t.Fatal("ARI or private data not zero-padded")
	}
	// A length beyond the room is clamped in Fields, so that re-encoding is
	// stable.
	b[9] = 100 << 1
	if f := r.Fields(); r.ARILength() != 100 || f.ARILength != REJARISize || len(f.ARI) != REJARISize {
		t.Fatalf("ARI length 100: ARILength() %d, Fields %d/%d", r.ARILength(), f.ARILength, len(f.ARI))
	}
	REJ(b).Encode(&REJFields{MsgRejected: MsgOther, ARI: make([]byte, 100)})
	if r.MsgRejected() != MsgOther || r.ARILength() != REJARISize || b[8] != 0x80 {
		t.Fatalf("REJ msg %d ARI length %d byte 8 %#x", r.MsgRejected(), r.ARILength(), b[8])
	}
}

func TestMRA(t *testing.T) {
	b := bytes.Repeat([]byte{0xff}, BodySize)
	MRA(b).Encode(&MRAFields{LocalCommID: 1, RemoteCommID: 2, MsgMRAed: MsgREP, ServiceTimeout: 24})
	if want := []byte{0, 0, 0, 1, 0, 0, 0, 2, 0x40, 24 << 3, 0}; !bytes.Equal(b[:11], want) {
		t.Fatalf("MRA head %x, want %x", b[:11], want)
	}
	if f := MRA(b).Fields(); f.MsgMRAed != MsgREP || f.ServiceTimeout != 24 || len(f.PrivateData) != MRAPrivateSize {
		t.Fatalf("MRA fields %+v", f)
	}
}

func TestSIDR(t *testing.T) {
	b := bytes.Repeat([]byte{0xff}, BodySize)
	sid := ServiceID(PortSpaceUDP, 7174)
	SIDRREQ(b).Encode(&SIDRREQFields{RequestID: 0xcafe, PKey: 0xffff, ServiceID: sid, PrivateData: []byte{9}})
	if want := []byte{0, 0, 0xca, 0xfe, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 9, 0}; !bytes.Equal(b[:18], want) {
		t.Fatalf("SIDR_REQ head %x, want %x", b[:18], want)
	}
	if f := SIDRREQ(b).Fields(); f.RequestID != 0xcafe || f.PKey != 0xffff || f.ServiceID != sid || len(f.PrivateData) != SIDRREQPrivateSize {
		t.Fatalf("SIDR_REQ fields %+v", f)
	}

	b = bytes.Repeat([]byte{0xff}, BodySize)
	SIDRREP(b).Encode(&SIDRREPFields{RequestID: 0xcafe, Status: uint8(SIDRValid), VendorID: 0x02c9ab, QPN: 0x1234567,
		ServiceID: sid, QKey: RDMAUDPQKey, ARI: []byte{1, 2}})
	want := []byte{0, 0, 0xca, 0xfe, 0, 2, 0x02, 0xc9, 0x23, 0x45, 0x67, 0xab, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06,
		0x01, 0x23, 0x45, 0x67, 1, 2, 0}
	if !bytes.Equal(b[:27], want) {
		t.Fatalf("SIDR_REP head %x, want %x", b[:27], want)
	}
	r := SIDRREP(b)
	if r.Status() != SIDRValid || r.VendorID() != 0x02c9ab || r.QPN() != 0x234567 || r.QKey() != RDMAUDPQKey || !bytes.Equal(r.ARI(), []byte{1, 2}) {
		t.Fatalf("SIDR_REP fields %+v", r.Fields())
	}
	if !bytes.Equal(b[26:BodySize], make([]byte, BodySize-26)) {
		t.Fatal("SIDR_REP tail not zero")
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{AttrClassPortInfo.String(), "ClassPortInfo"}, {AttrREQ.String(), "REQ"}, {AttrMRA.String(), "MRA"},
		{AttrREJ.String(), "REJ"}, {AttrREP.String(), "REP"}, {AttrRTU.String(), "RTU"}, {AttrDREQ.String(), "DREQ"},
		{AttrDREP.String(), "DREP"}, {AttrSIDRREQ.String(), "SIDR_REQ"}, {AttrSIDRREP.String(), "SIDR_REP"},
		{AttrLAP.String(), "LAP"}, {AttrAPR.String(), "APR"}, {AttrID(0x20).String(), "AttrID(0x0020)"},
		{AttrID(0xffff).String(), "AttrID(0xffff)"}, {AttrID(0).String(), "AttrID(0x0000)"},
		{RejNoQP.String(), "no QP"}, {RejInvalidServiceID.String(), "invalid service ID"},
		{RejStaleConn.String(), "stale connection"}, {RejConsumerDefined.String(), "consumer defined"},
		{RejInsufficientRespResources.String(), "insufficient responder resources"},
		{RejInvalidAltFlowLabel.String(), "invalid alternate flow label"},
		{RejVendorOptionNotSupported.String(), "vendor option not supported"},
		{RejReason(0).String(), "RejReason(0)"}, {RejReason(34).String(), "RejReason(34)"}, {RejReason(999).String(), "RejReason(999)"},
		{SIDRValid.String(), "valid"}, {SIDRUnsupported.String(), "service ID not supported"}, {SIDRReject.String(), "rejected"},
		{SIDRNoQP.String(), "no QP"}, {SIDRRedirect.String(), "redirect"}, {SIDRUnsupportedVersion.String(), "unsupported class version"},
		{SIDRStatus(6).String(), "SIDRStatus(6)"},
		{PortSpaceTCP.String(), "TCP"}, {PortSpaceUDP.String(), "UDP"}, {PortSpaceIB.String(), "IB"}, {PortSpaceIPoIB.String(), "IPOIB"},
		{PortSpace(7).String(), "PortSpace(0x0007)"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
	// Every reason of the kernel's enum has a name.
	for r := RejNoQP; r <= RejVendorOptionNotSupported; r++ {
		if strings.HasPrefix(r.String(), "RejReason(") != (r == 34) {
			t.Errorf("RejReason %d: %q", r, r.String())
		}
	}
}

func TestServiceID(t *testing.T) {
	for _, tc := range []struct {
		ps   PortSpace
		port uint16
		id   uint64
	}{
		{PortSpaceTCP, 7174, 0x0000000001061C06},  // rping
		{PortSpaceTCP, 7471, 0x0000000001061D2F},  // rdma_server, ucmatose
		{PortSpaceTCP, 18515, 0x0000000001064853}, // perftest -R
		{PortSpaceTCP, 4420, 0x0000000001061144},  // NVMe over Fabrics
		{PortSpaceUDP, 0, 0x0000000001110000},
		{PortSpaceIB, 0xffff, 0x00000000013FFFFF},
		{PortSpaceIPoIB, 1, 0x0000000000020001},
	} {
		if got := ServiceID(tc.ps, tc.port); got != tc.id {
			t.Errorf("ServiceID(%v, %d) = %#016x, want %#016x", tc.ps, tc.port, got, tc.id)
		}
		if ps, port, ok := SplitServiceID(tc.id); !ok || ps != tc.ps || port != tc.port {
			t.Errorf("SplitServiceID(%#x) = %v, %d, %v", tc.id, ps, port, ok)
		}
	}
	for _, id := range []uint64{0, 0x0000000100061C06, 0x1000000001061C06, 0x0000000001071C06, 0x0000000000001C06} {
		if ps, port, ok := SplitServiceID(id); ok {
			t.Errorf("SplitServiceID(%#x) = %v, %d, true; want false", id, ps, port)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	// Each captured REQ's header is what Encode writes for its addresses.
	n := 0
	for _, c := range allCaptured(t) {
		if c.m.AttrID() != AttrREQ {
			continue
		}
		n++
		h := CMAHeader(REQ(c.m.Body()).PrivateData())
		if err := h.Check(); err != nil {
			t.Errorf("%s #%d: %v", c.file, c.frame, err)
		}
		out := make(CMAHeader, CMAHeaderSize)
		out.Encode(h.Src(), h.Dst(), h.Port())
		if !bytes.Equal(out, h[:CMAHeaderSize]) {
			t.Errorf("%s #%d: re-encoded header\n%x\nwant\n%x", c.file, c.frame, out, h[:CMAHeaderSize])
		}
		out.Encode(netip.AddrFrom16(h.Src().As16()), h.Dst(), h.Port()) // IPv4-mapped: the same
		if !bytes.Equal(out, h[:CMAHeaderSize]) {
			t.Errorf("%s #%d: IPv4-mapped source gives %x", c.file, c.frame, out)
		}
	}
	if n == 0 {
		t.Fatal("no REQ captured")
	}

	h := make(CMAHeader, CMAHeaderSize)
	src, dst := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	h.Encode(src, dst, 41234)
	if h.Version() != 0 || h.IPVersion() != 6 || h.Port() != 41234 || h.Src() != src || h.Dst() != dst || h.Check() != nil || h[1] != 0x60 {
		t.Fatalf("IPv6 header %x: v%d ip%d port %d %v -> %v", []byte(h), h.Version(), h.IPVersion(), h.Port(), h.Src(), h.Dst())
	}
	v4src, v4dst := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	h.Encode(v4src, v4dst, 0xa849)
	want := append([]byte{0, 0x40, 0xa8, 0x49}, make([]byte, 32)...)
	copy(want[16:], []byte{198, 18, 0, 1})
	copy(want[32:], []byte{198, 18, 0, 2})
	if !bytes.Equal(h, want) || h.Src() != v4src || h.Dst() != v4dst {
		t.Fatalf("IPv4 header %x, want %x", []byte(h), want)
	}

	// What the kernel checks, and only that.
	bad := func(f func(h CMAHeader)) CMAHeader {
		b := append(CMAHeader(nil), want...)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name string
		h    CMAHeader
		want error
	}{
		{"version 1", bad(func(h CMAHeader) { h[0] = 1 }), ErrCMAVersion},
		{"IP version 5", bad(func(h CMAHeader) { h[1] = 0x50 }), ErrCMAIPVersion},
		{"IP version 0", bad(func(h CMAHeader) { h[1] = 0x04 }), ErrCMAIPVersion},
		{"short", want[:CMAHeaderSize-1], ErrShort},
		{"low nibble of byte 1 set", bad(func(h CMAHeader) { h[1] = 0x4f }), nil},
		{"nonzero bytes before an IPv4 address", bad(func(h CMAHeader) { h[4], h[31] = 1, 0xff }), nil},
	} {
		if err := tc.h.Check(); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Check = %v, want %v", tc.name, err, tc.want)
		}
	}
	for n := 0; n < CMAHeaderSize; n++ {
		if err := CMAHeader(want[:n]).Check(); err != ErrShort {
			t.Fatalf("Check of %d bytes = %v, want ErrShort", n, err)
		}
	}
}

// TestCapturedConventions pins down what the captured rxe and ConnectX CM
// exchanges have in common, which a CM that talks to them must match.
func TestCapturedConventions(t *testing.T) {
	for _, c := range allCaptured(t) {
		where := c.file + " " + c.m.AttrID().String()
		if c.m.AttrMod() != 0 || c.m.Status() != 0 || c.m.ClassSpecific() != 0 {
			t.Errorf("%s: attribute modifier %#x, status %#x, class specific %#x", where, c.m.AttrMod(), c.m.Status(), c.m.ClassSpecific())
		}
		// The low 32 bits of the TID are the sender's comm ID as a
		// little-endian host reads it: byte-swapped on the wire.
		local := RTU(c.m.Body()).LocalCommID() // every message starts with the sender's comm ID
		sender := local
		switch c.m.AttrID() {
		case AttrREP, AttrREJ, AttrMRA:
			sender = RTU(c.m.Body()).RemoteCommID() // echo the REQ's TID (the RTU has it: same sender)
		case AttrDREP:
			sender = RTU(c.m.Body()).RemoteCommID() // echoes the DREQ's
		}
		if got := uint32(c.m.TID()); got != bits.ReverseBytes32(sender) {
			t.Errorf("%s: TID %#016x, comm ID %#08x", where, c.m.TID(), sender)
		}
		if c.m.TID()>>32 == 0 || c.m.TID()>>32 > 0xff {
			t.Errorf("%s: TID high half %#x: a small MAD agent number expected", where, c.m.TID()>>32)
		}
		if c.m.AttrID() != AttrREQ {
			continue
		}
		r := REQ(c.m.Body())
		h := CMAHeader(r.PrivateData())
		lg, rg := r.PrimaryLocalGID(), r.PrimaryRemoteGID()
		if r.PrimaryLocalLID() != 0xffff || r.PrimaryRemoteLID() != 0xffff || r.PKey() != 0xffff ||
			netip.AddrFrom16(lg).Unmap() != h.Src() || netip.AddrFrom16(rg).Unmap() != h.Dst() || !netip.AddrFrom16(lg).Is4In6() ||
			r.PrimaryHopLimit() != 64 || r.PrimarySubnetLocal() || r.MaxCMRetries() != 15 || r.PathMTU() != 3 ||
			r.TransportType() != 0 || r.LocalQKey() != 0 || r.PrimaryLocalACKTimeout() != 19 || r.VendorID() != 0 {
			t.Errorf("%s: unexpected path or parameters %+v", where, r.Fields())
		}
		if _, _, ok := SplitServiceID(r.ServiceID()); !ok {
			t.Errorf("%s: service ID %#x is not rdma_cm's", where, r.ServiceID())
		}
	}
}

func TestFieldsMatchGetters(t *testing.T) {
	// Every getter named after a Fields member returns the same value:
	// Fields is just the getters.
	for _, c := range allCaptured(t) {
		f, _ := reencode(c.m.AttrID(), c.m.Body(), make([]byte, BodySize))
		fv := reflect.ValueOf(f)
		var view reflect.Value
		switch c.m.AttrID() {
		case AttrREQ:
			view = reflect.ValueOf(REQ(c.m.Body()))
		case AttrREP:
			view = reflect.ValueOf(REP(c.m.Body()))
		case AttrRTU:
			view = reflect.ValueOf(RTU(c.m.Body()))
		case AttrDREQ:
			view = reflect.ValueOf(DREQ(c.m.Body()))
		case AttrDREP:
			view = reflect.ValueOf(DREP(c.m.Body()))
		}
		for i := 0; i < fv.NumField(); i++ {
			name := fv.Type().Field(i).Name
			m := view.MethodByName(name)
			if !m.IsValid() {
				t.Errorf("%v: no getter for %s", c.m.AttrID(), name)
				continue
			}
			got := m.Call(nil)[0]
			if got.Kind() != reflect.Slice && got.Convert(fv.Field(i).Type()).Interface() != fv.Field(i).Interface() {
				t.Errorf("%v: %s() = %v, Fields has %v", c.m.AttrID(), name, got, fv.Field(i))
			}
		}
	}
}
