package qp

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/xroce/xroce/bth"
)

// victim is an engine with two RC QPs in RTS facing a forging peer at ipA:
// bad (0x200), which the peer attacks, and good (0x201), which must keep
// working.
type victim struct {
	t         *testing.T
	e         *Engine
	out       *nullOut
	mem       *testMem
	rem       *region
	bad, good *QP
	rcq       [2]*testCQ
}

func newVictim(t *testing.T) *victim {
	v := &victim{t: t, out: &nullOut{}, mem: newTestMem()}
	e, err := NewEngine(EngineConfig{Out: v.out, LocalIPs: []netip.Addr{ipB}})
	if err != nil {
		t.Fatal(err)
	}
	v.e = e
	v.mem.add(localKey, localBase, 1<<17, AccessLocalWrite)
	v.rem = v.mem.add(remoteKey, remBase, 4096, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	v.mem.add(3, 0x9000_0000, 4096, AccessRemoteRead) // read-only region
	for i, qpn := range []uint32{0x200, 0x201} {
		v.rcq[i] = &testCQ{}
		q, err := e.CreateQP(Config{Type: RC, QPN: qpn, SendCQ: &testCQ{}, RecvCQ: v.rcq[i], Mem: v.mem})
		if err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			a Attr
			m AttrMask
		}{
			{Attr{State: StateInit, PKey: 0xffff, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}, AttrPKey | AttrPort | AttrAccessFlags},
			{Attr{State: StateRTR, AV: simAV(1), PathMTU: MTU1024, DestQPN: 0x100 + qpn, RQPSN: 500, MaxDestRdAtomic: 4, MinRNRTimer: 3},
				AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
			{Attr{State: StateRTS, SQPSN: 9, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic},
		}
		for _, s := range steps {
			if err := q.Modify(&s.a, AttrState|s.m); err != nil {
				t.Fatal(err)
			}
		}
		for k := range 4 {
			if err := q.PostRecv(&RecvWR{ID: uint64(k), SGL: sge(localBase+uint64(i)*0x8000+uint64(k)*2048, 2048)}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			v.bad = q
		} else {
			v.good = q
		}
	}
	return v
}

// frame forges a frame from the peer (ipA) with the given transport fields.
func forge(t *testing.T, ff bth.FrameFields, payload []byte) []byte {
	t.Helper()
	ff.SrcMAC, ff.DstMAC = simMACs[0], simMACs[1]
	if !ff.SrcIP.IsValid() {
		ff.SrcIP = ipA
	}
	if !ff.DstIP.IsValid() {
		ff.DstIP = ipB
	}
	ff.TTL, ff.SrcPort = 64, 0xC123
	if ff.BTH.PKey == 0 {
		ff.BTH.PKey = 0xffff
	}
	buf := make([]byte, ff.FrameLen(len(payload)))
	n, err := bth.Build(buf, &ff, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// input feeds frames and polls; it returns the frames the engine sent.
func (v *victim) input(frames ...[]byte) []bth.Frame {
	v.out.sent = v.out.sent[:0]
	v.e.Input(frames, 0)
	v.e.Poll(0)
	var got []bth.Frame
	for _, b := range v.out.sent {
		var f bth.Frame
		if err := f.Decode(b); err != nil || !f.VerifyICRC() {
			v.t.Fatalf("engine sent a bad frame: %v", err)
		}
		got = append(got, f)
	}
	return got
}

// checkGood proves the good QP still works: a SEND arrives and is ACKed.
func (v *victim) checkGood() {
	v.t.Helper()
	before := len(v.rcq[1].wcs)
	psn := v.good.ePSN
	msg := []byte("still here")
	resp := v.input(forge(v.t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x201, PSN: psn, AckReq: true}}, msg))
	if len(v.rcq[1].wcs) != before+1 || v.rcq[1].wcs[before].Status != WCSuccess {
		v.t.Fatalf("good QP: receive completions %+v", v.rcq[1].wcs)
	}
	if len(resp) != 1 || resp[0].Opcode() != bth.RCAck || resp[0].BTH.PSN() != psn || !resp[0].AETH.Syndrome().IsACK() {
		v.t.Fatalf("good QP: response %v", resp)
	}
	if v.good.State() != StateRTS {
		v.t.Fatalf("good QP in %v", v.good.State())
	}
}

func TestAdversarial(t *testing.T) {
	big := bytes.Repeat([]byte{0xCC}, 1024)
	for _, c := range []struct {
		name    string
		ff      bth.FrameFields
		payload []byte
		pre     *bth.FrameFields // sent first (accepted)
		pre2    bool             // and a MIDDLE after it
		nak     bth.Syndrome     // 0: silently dropped
		err     bool             // the bad QP ends in ERR
	}{
		{name: "unknown QPN", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x999, PSN: 500}}},
		{name: "QP 0", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0, PSN: 500}}},
		{name: "wrong P_Key", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: 500, PKey: 0x8001}}},
		{name: "wrong source IP", ff: bth.FrameFields{SrcIP: netip.MustParseAddr("198.18.0.9"), BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: 500}}},
		{name: "not our IP", ff: bth.FrameFields{DstIP: netip.MustParseAddr("198.18.0.7"), BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: 500}}},
		{name: "UC opcode on RC", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UCSendOnly, DestQP: 0x200, PSN: 500}}},
		{name: "UD opcode on RC", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UDSendOnly, DestQP: 0x200, PSN: 500}, DETH: bth.DETHFields{QKey: 1, SrcQP: 5}}},
		{name: "stray ACK", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCAck, DestQP: 0x200, PSN: 12345}, AETH: bth.AETHFields{Syndrome: bth.NakRemoteAccessError}}},
		{name: "stray READ response", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCReadResponseOnly, DestQP: 0x200, PSN: 8}}, payload: big[:8]},
		{name: "forged R_Key", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: 0xdead, DMALen: 16}}, payload: big[:16], nak: bth.NakRemoteAccessError, err: true},
		{name: "write past region", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase + 4090, RKey: remoteKey, DMALen: 16}}, payload: big[:16], nak: bth.NakRemoteAccessError, err: true},
		{name: "write address wraps", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: 1<<64 - 8, RKey: remoteKey, DMALen: 16}}, payload: big[:16], nak: bth.NakRemoteAccessError, err: true},
		{name: "write to read-only region", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: 0x9000_0000, RKey: 3, DMALen: 16}}, payload: big[:16], nak: bth.NakRemoteAccessError, err: true},
		{name: "payload beyond DMA length", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 8}}, payload: big[:16], nak: bth.NakInvalidRequest, err: true},
		{name: "payload over MTU", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteOnly, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 2048}}, payload: append(big, big...), nak: bth.NakInvalidRequest, err: true},
		{name: "FIRST shorter than MTU", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteFirst, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 2048}}, payload: big[:1000], nak: bth.NakInvalidRequest, err: true},
		{name: "read out of range", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCReadRequest, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 5000}}, nak: bth.NakRemoteAccessError, err: true},
		{name: "read 2 GiB", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCReadRequest, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 1<<32 - 1}}, nak: bth.NakRemoteAccessError, err: true},
		{name: "atomic forged key", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCFetchAdd, DestQP: 0x200, PSN: 500},
			AtomicETH: bth.AtomicETHFields{VA: remBase, RKey: 77, SwapAdd: 1}}, nak: bth.NakRemoteAccessError, err: true},
		{name: "atomic past end", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCFetchAdd, DestQP: 0x200, PSN: 500},
			AtomicETH: bth.AtomicETHFields{VA: remBase + 4096, RKey: remoteKey, SwapAdd: 1}}, nak: bth.NakRemoteAccessError, err: true},
		{name: "MIDDLE without FIRST", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendMiddle, DestQP: 0x200, PSN: 500}},
			payload: big, nak: bth.NakInvalidRequest, err: true},
		{name: "LAST without FIRST", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteLast, DestQP: 0x200, PSN: 500}},
			payload: big[:4], nak: bth.NakInvalidRequest, err: true},
		{name: "WRITE MIDDLE inside a SEND", pre: &bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendFirst, DestQP: 0x200, PSN: 500}},
			ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCWriteMiddle, DestQP: 0x200, PSN: 501}}, payload: big, nak: bth.NakInvalidRequest, err: true},
		{name: "SEND ONLY inside a SEND", pre: &bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendFirst, DestQP: 0x200, PSN: 500}},
			ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: 501}}, payload: big[:4], nak: bth.NakInvalidRequest, err: true},
		{name: "SEND over the receive buffer", pre: &bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendFirst, DestQP: 0x200, PSN: 500}},
			ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendMiddle, DestQP: 0x200, PSN: 501}}, payload: big, pre2: true, nak: bth.NakInvalidRequest, err: true},
		{name: "FLUSH forged key", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCFlush, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: 0x77, DMALen: 8}}, nak: bth.NakRemoteAccessError, err: true},
		{name: "ATOMIC_WRITE forged key", ff: bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCAtomicWrite, DestQP: 0x200, PSN: 500},
			RETH: bth.RETHFields{VA: remBase, RKey: 0x77, DMALen: 8}}, payload: big[:8], nak: bth.NakRemoteAccessError, err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVictim(t)
			if c.pre != nil {
				v.input(forge(t, *c.pre, big))
				if c.pre2 {
					p := *c.pre
					p.BTH.Opcode, p.BTH.PSN = bth.RCSendMiddle, 501
					v.input(forge(t, p, big))
					c.ff.BTH.PSN = 502
				}
			}
			resp := v.input(forge(t, c.ff, c.payload))
			if c.nak == 0 {
				if len(resp) != 0 {
					t.Fatalf("answered a frame that should be dropped: %v", resp[0].Opcode())
				}
				if v.e.Stats().RxDropped.Load() == 0 {
					t.Fatal("drop not counted")
				}
			} else {
				if len(resp) != 1 || resp[0].Opcode() != bth.RCAck || resp[0].AETH.Syndrome() != c.nak || resp[0].BTH.PSN() != c.ff.BTH.PSN {
					t.Fatalf("response %+v, want NAK %v for PSN %d", resp, c.nak, c.ff.BTH.PSN)
				}
			}
			if (v.bad.State() == StateErr) != c.err {
				t.Fatalf("bad QP in %v", v.bad.State())
			}
			if c.err && (v.bad.Stats().ErrNaksTx.Load() != 1 || v.bad.Stats().ToError.Load() != 1 || v.good.Stats().ErrNaksTx.Load() != 0) {
				t.Fatalf("per-QP counters: bad QP %d error NAKs, good QP %d", v.bad.Stats().ErrNaksTx.Load(), v.good.Stats().ErrNaksTx.Load())
			}
			for i, x := range v.rem.buf {
				if x != 0 {
					t.Fatalf("remote region byte %d = %#x: written", i, x)
				}
			}
			for _, r := range v.mem.regions {
				if !r.guardsIntact() {
					t.Fatalf("memory outside region %d touched", r.key)
				}
			}
			v.checkGood()
		})
	}
}

func TestAdversarialBadICRC(t *testing.T) {
	v := newVictim(t)
	f := forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 0x200, PSN: 500}}, []byte("x"))
	f[len(f)-1] ^= 1
	if resp := v.input(f); len(resp) != 0 || len(v.rcq[0].wcs) != 0 || v.e.Stats().RxBadICRC.Load() != 1 {
		t.Fatalf("bad ICRC: response %v, completions %v", resp, v.rcq[0].wcs)
	}
	v.checkGood()
}

func TestAdversarialUDQKey(t *testing.T) {
	out := &nullOut{}
	e, _ := NewEngine(EngineConfig{Out: out})
	mem := newTestMem()
	mem.add(localKey, localBase, 1<<16, AccessLocalWrite)
	rcq := &testCQ{}
	q, _ := e.CreateQP(Config{Type: UD, QPN: 0x300, SendCQ: &testCQ{}, RecvCQ: rcq, Mem: mem})
	for _, s := range []struct {
		a Attr
		m AttrMask
	}{{Attr{State: StateInit, PKey: 0xffff, Port: 1, QKey: 0x11111111}, AttrPKey | AttrPort | AttrQKey}, {Attr{State: StateRTR}, 0}, {Attr{State: StateRTS, SQPSN: 1}, AttrSQPSN}} {
		if err := q.Modify(&s.a, AttrState|s.m); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.PostRecv(&RecvWR{ID: 1, SGL: sge(localBase, 2048+40)}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("datagram")
	e.Input([][]byte{forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UDSendOnly, DestQP: 0x300, PSN: 3}, DETH: bth.DETHFields{QKey: 0x22222222, SrcQP: 0x55}}, msg)}, 0)
	if len(rcq.wcs) != 0 {
		t.Fatalf("wrong Q_Key delivered: %+v", rcq.wcs)
	}
	good := forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UDSendOnlyImm, DestQP: 0x300, PSN: 99}, DETH: bth.DETHFields{QKey: 0x11111111, SrcQP: 0x55}, Imm: 0xabc}, msg)
	e.Input([][]byte{good}, 0)
	if len(rcq.wcs) != 1 {
		t.Fatalf("right Q_Key: completions %+v", rcq.wcs)
	}
	wc := rcq.wcs[0]
	if wc.Status != WCSuccess || wc.ByteLen != 40+uint32(len(msg)) || wc.SrcQP != 0x55 || wc.Flags != WCWithGRH|WCWithImm || wc.Imm != 0xabc {
		t.Fatalf("UD completion %+v", wc)
	}
	buf := mem.regions[localKey].buf
	if !bytes.Equal(buf[:20], make([]byte, 20)) || buf[20] != 0x45 || !bytes.Equal(buf[20+12:20+16], ipA.AsSlice()) || !bytes.Equal(buf[40:40+len(msg)], msg) {
		t.Fatalf("GRH area % x, payload %q", buf[:40], buf[40:40+len(msg)])
	}
}

func TestAtomicWriteAndFlush(t *testing.T) {
	v := newVictim(t)
	aw := forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCAtomicWrite, DestQP: 0x200, PSN: 500, AckReq: true},
		RETH: bth.RETHFields{VA: remBase + 16, RKey: remoteKey, DMALen: 8}}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	resp := v.input(aw)
	if len(resp) != 1 || resp[0].Opcode() != bth.RCReadResponseOnly || len(resp[0].Payload) != 0 || resp[0].BTH.PSN() != 500 || resp[0].AETH.MSN() != 1 {
		t.Fatalf("ATOMIC_WRITE: responses %v", resp)
	}
	if !bytes.Equal(v.rem.buf[16:24], []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("ATOMIC_WRITE wrote % x", v.rem.buf[16:24])
	}
	// A duplicate is answered again but not executed again.
	v.rem.buf[16] = 0xFF
	resp = v.input(aw)
	if len(resp) != 1 || resp[0].Opcode() != bth.RCReadResponseOnly || v.rem.buf[16] != 0xFF {
		t.Fatalf("duplicate ATOMIC_WRITE: responses %v, byte %#x", resp, v.rem.buf[16])
	}
	fl := forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCFlush, DestQP: 0x200, PSN: 501, AckReq: true},
		FETH: bth.FETHFields{PlacementType: 1}, RETH: bth.RETHFields{VA: remBase, RKey: remoteKey, DMALen: 4096}}, nil)
	resp = v.input(fl)
	if len(resp) != 1 || resp[0].Opcode() != bth.RCReadResponseOnly || resp[0].BTH.PSN() != 501 || resp[0].AETH.MSN() != 2 {
		t.Fatalf("FLUSH: responses %v", resp)
	}
	// Misaligned ATOMIC_WRITE: invalid request.
	bad := forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.RCAtomicWrite, DestQP: 0x200, PSN: 502},
		RETH: bth.RETHFields{VA: remBase + 4, RKey: remoteKey, DMALen: 8}}, make([]byte, 8))
	if resp = v.input(bad); len(resp) != 1 || resp[0].AETH.Syndrome() != bth.NakInvalidRequest {
		t.Fatalf("misaligned ATOMIC_WRITE: %v", resp)
	}
}

// TestGSI: QP 1 exists only as UD, takes only the well-known Q_Key, accepts
// the P_Keys 0xFFFF and 0x7FFF (rxe's rule for QP1), and its completions
// name the sender's MAC and QP.
func TestGSI(t *testing.T) {
	e, _ := NewEngine(EngineConfig{Out: &nullOut{}})
	mem := newTestMem()
	mem.add(localKey, localBase, 1<<16, AccessLocalWrite)
	if _, err := e.CreateQP(Config{Type: RC, QPN: GSIQPN, SendCQ: &testCQ{}, RecvCQ: &testCQ{}, Mem: mem}); err == nil {
		t.Fatal("RC QP numbered 1 created")
	}
	rcq := &testCQ{}
	q, err := e.CreateQP(Config{Type: UD, QPN: GSIQPN, SendCQ: &testCQ{}, RecvCQ: rcq, Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	init := Attr{State: StateInit, PKey: 0xffff, Port: 1, QKey: 0x11111111}
	if err := q.Modify(&init, AttrState|AttrPKey|AttrPort|AttrQKey); !errors.Is(err, ErrInvalidAttr) {
		t.Fatalf("GSI with Q_Key %#x: %v", init.QKey, err)
	}
	init.QKey = GSIQKey
	for _, s := range []struct {
		a Attr
		m AttrMask
	}{{init, AttrPKey | AttrPort | AttrQKey}, {Attr{State: StateRTR}, 0}, {Attr{State: StateRTS, SQPSN: 1}, AttrSQPSN}} {
		if err := q.Modify(&s.a, AttrState|s.m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if err := q.PostRecv(&RecvWR{ID: uint64(i), SGL: sge(localBase+uint64(i)*512, 296)}); err != nil {
			t.Fatal(err)
		}
	}
	mad := make([]byte, 256)
	mad[0] = 1
	for _, c := range []struct {
		name string
		pkey uint16
		qkey uint32
		ok   bool
	}{
		{"wrong Q_Key", 0xffff, 0x11111111, false},
		{"limited P_Key 0x7FFF", 0x7fff, GSIQKey, true},
		{"P_Key 0x8001", 0x8001, GSIQKey, false},
		{"well-known", 0xffff, GSIQKey, true},
	} {
		n := len(rcq.wcs)
		f := forge(t, bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UDSendOnly, DestQP: GSIQPN, PKey: c.pkey, PSN: 3}, DETH: bth.DETHFields{QKey: c.qkey, SrcQP: GSIQPN}}, mad)
		e.Input([][]byte{f}, 0)
		if got := len(rcq.wcs) > n; got != c.ok {
			t.Fatalf("%s: delivered %v, want %v", c.name, got, c.ok)
		}
		if !c.ok {
			continue
		}
		wc := rcq.wcs[len(rcq.wcs)-1]
		if wc.Status != WCSuccess || wc.ByteLen != 296 || wc.SrcQP != GSIQPN || !bytes.Equal(wc.SrcMAC[:], f[6:12]) {
			t.Fatalf("%s: completion %+v", c.name, wc)
		}
	}
	if got := q.Stats().RxBadKey.Load(); got != 2 {
		t.Fatalf("RxBadKey = %d, want 2", got)
	}
}
