package qp

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// nullOut keeps what the engine sends; when limited, Alloc hands out only
// budget more buffers.
type nullOut struct {
	sent    [][]byte
	limited bool
	budget  int
}

func (o *nullOut) Alloc() []byte {
	if o.limited {
		if o.budget == 0 {
			return nil
		}
		o.budget--
	}
	return make([]byte, bufSize)
}
func (o *nullOut) Send(frame []byte) { o.sent = append(o.sent, frame) }

func newTestQP(t *testing.T, typ Type) (*QP, *testCQ, *testCQ) {
	t.Helper()
	e, err := NewEngine(EngineConfig{Out: &nullOut{}})
	if err != nil {
		t.Fatal(err)
	}
	scq, rcq := &testCQ{}, &testCQ{}
	mem := newTestMem()
	mem.add(localKey, localBase, 1<<16, AccessLocalWrite)
	q, err := e.CreateQP(Config{Type: typ, QPN: 0x42, SendCQ: scq, RecvCQ: rcq, Mem: mem, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	return q, scq, rcq
}

var testAV = AddressVector{SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2")}

// fullAttr has a valid value for every attribute.
func fullAttr(s State) *Attr {
	return &Attr{State: s, PKey: 0xffff, Port: 1, QKey: 0x11111111, AccessFlags: AccessRemoteWrite,
		AV: testAV, PathMTU: MTU1024, DestQPN: 0x43, RQPSN: 10, SQPSN: 20, MaxDestRdAtomic: 4, MaxRdAtomic: 4,
		MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7}
}

// path gives, per type, the masks that walk RESET→INIT→RTR→RTS.
func path(typ Type) [3]AttrMask {
	switch typ {
	case UC:
		return [3]AttrMask{AttrPKey | AttrPort | AttrAccessFlags, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, AttrSQPSN}
	case UD:
		return [3]AttrMask{AttrPKey | AttrPort | AttrQKey, 0, AttrSQPSN}
	}
	return [3]AttrMask{AttrPKey | AttrPort | AttrAccessFlags,
		AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic}
}

func walk(t *testing.T, q *QP, to State) {
	t.Helper()
	p := path(q.typ)
	for i, s := range []State{StateInit, StateRTR, StateRTS} {
		if q.State() >= s {
			continue
		}
		if err := q.Modify(fullAttr(s), AttrState|p[i]); err != nil {
			t.Fatalf("%v→%v: %v", q.State(), s, err)
		}
		if s == to {
			return
		}
	}
}

func TestNewQPDefaults(t *testing.T) {
	q, _, _ := newTestQP(t, RC)
	if q.State() != StateReset || q.Attr().PathMTU != MTU256 || q.mtu != 256 {
		t.Fatalf("new QP: state %v MTU %v, want RESET and 256", q.State(), q.Attr().PathMTU)
	}
	if p := q.UDPSourcePort(); p < 0xC000 {
		t.Fatalf("UDP source port %#x, want 0xC000..0xFFFF", p)
	}
}

func TestModifyLegalPath(t *testing.T) {
	for _, typ := range []Type{RC, UC, UD} {
		t.Run(typ.String(), func(t *testing.T) {
			q, _, _ := newTestQP(t, typ)
			walk(t, q, StateRTS)
			if q.State() != StateRTS {
				t.Fatalf("state %v, want RTS", q.State())
			}
			if typ != UD && (q.reqPSN != 20 || q.ePSN != 10 || q.mtu != 1024) {
				t.Fatalf("reqPSN %d ePSN %d mtu %d, want 20 10 1024", q.reqPSN, q.ePSN, q.mtu)
			}
			for _, step := range []struct {
				to   State
				mask AttrMask
			}{{StateSQD, 0}, {StateSQD, AttrTimeout * boolMask(typ == RC)}, {StateRTS, 0}, {StateRTS, AttrAccessFlags * boolMask(typ != UD)}} {
				if err := q.Modify(fullAttr(step.to), AttrState|step.mask); err != nil {
					t.Fatalf("→%v with %v: %v", step.to, step.mask, err)
				}
			}
			if err := q.Modify(fullAttr(StateReset), AttrState); err != nil || q.State() != StateReset {
				t.Fatalf("→RESET: %v, state %v", err, q.State())
			}
			walk(t, q, StateRTR)
			if q.State() != StateRTR {
				t.Fatalf("state %v after reset and walk to RTR", q.State())
			}
		})
	}
}

func boolMask(b bool) AttrMask {
	if b {
		return 1
	}
	return 0
}

func TestModifyErrors(t *testing.T) {
	rc := path(RC)
	for _, c := range []struct {
		name string
		typ  Type
		at   State // walk to this state first
		to   State
		mask AttrMask
		mod  func(*Attr)
		want error
		attr AttrMask
	}{
		{"RESET→RTR", RC, StateReset, StateRTR, rc[1], nil, ErrTransition, 0},
		{"RESET→RTS", RC, StateReset, StateRTS, rc[2], nil, ErrTransition, 0},
		{"INIT→RTS", RC, StateInit, StateRTS, rc[2], nil, ErrTransition, 0},
		{"RTR→SQD", RC, StateRTR, StateSQD, 0, nil, ErrTransition, 0},
		{"RTS→RTR", RC, StateRTS, StateRTR, rc[1], nil, ErrTransition, 0},
		{"RTS→INIT", RC, StateRTS, StateInit, 0, nil, ErrTransition, 0},
		{"→SQE", UD, StateRTS, StateSQE, 0, nil, ErrTransition, 0},
		{"INIT missing access", RC, StateReset, StateInit, AttrPKey | AttrPort, nil, ErrMissingAttr, AttrAccessFlags},
		{"UD INIT missing qkey", UD, StateReset, StateInit, AttrPKey | AttrPort, nil, ErrMissingAttr, AttrQKey},
		{"RTR missing dest QPN", RC, StateInit, StateRTR, rc[1] &^ AttrDestQPN, nil, ErrMissingAttr, AttrDestQPN},
		{"RTR missing AV", RC, StateInit, StateRTR, rc[1] &^ AttrAV, nil, ErrMissingAttr, AttrAV},
		{"RTR missing MTU", UC, StateInit, StateRTR, path(UC)[1] &^ AttrPathMTU, nil, ErrMissingAttr, AttrPathMTU},
		{"RTS missing retry", RC, StateRTR, StateRTS, rc[2] &^ AttrRetryCnt, nil, ErrMissingAttr, AttrRetryCnt},
		{"RTS missing SQ PSN", UD, StateRTR, StateRTS, 0, nil, ErrMissingAttr, AttrSQPSN},
		{"INIT with MTU", RC, StateReset, StateInit, rc[0] | AttrPathMTU, nil, ErrExtraAttr, AttrPathMTU},
		{"UC RTS with timeout", UC, StateRTR, StateRTS, AttrSQPSN | AttrTimeout, nil, ErrExtraAttr, AttrTimeout},
		{"RTS→RTS with SQ PSN", RC, StateRTS, StateRTS, AttrSQPSN, nil, ErrExtraAttr, AttrSQPSN},
		{"port 2", RC, StateReset, StateInit, rc[0], func(a *Attr) { a.Port = 2 }, ErrInvalidAttr, AttrPort},
		{"MTU 0", RC, StateInit, StateRTR, rc[1], func(a *Attr) { a.PathMTU = 0 }, ErrInvalidAttr, AttrPathMTU},
		{"MTU 8192", RC, StateInit, StateRTR, rc[1], func(a *Attr) { a.PathMTU = 6 }, ErrInvalidAttr, AttrPathMTU},
		{"retry 8", RC, StateRTR, StateRTS, rc[2], func(a *Attr) { a.RetryCnt = 8 }, ErrInvalidAttr, AttrRetryCnt},
		{"timeout 32", RC, StateRTR, StateRTS, rc[2], func(a *Attr) { a.Timeout = 32 }, ErrInvalidAttr, AttrTimeout},
		{"PSN 2^24", RC, StateRTR, StateRTS, rc[2], func(a *Attr) { a.SQPSN = 1 << 24 }, ErrInvalidAttr, AttrSQPSN},
		{"mixed families", RC, StateInit, StateRTR, rc[1], func(a *Attr) { a.AV.DstIP = netip.MustParseAddr("2001:db8::1") }, ErrInvalidAttr, AttrAV},
		{"bad cur state", RC, StateRTS, StateRTS, AttrCurState, func(a *Attr) { a.CurState = StateRTR }, ErrInvalidAttr, AttrCurState},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, _, _ := newTestQP(t, c.typ)
			if c.at != StateReset {
				walk(t, q, c.at)
			}
			before := q.Attr()
			a := fullAttr(c.to)
			if c.mod != nil {
				c.mod(a)
			}
			err := q.Modify(a, AttrState|c.mask)
			var me *ModifyError
			if !errors.Is(err, c.want) || !errors.As(err, &me) || me.Attrs != c.attr || me.From != c.at || me.To != c.to {
				t.Fatalf("Modify = %v, want %v naming %v", err, c.want, c.attr)
			}
			if q.Attr() != before {
				t.Fatalf("a failed Modify changed the QP: %+v, was %+v", q.Attr(), before)
			}
		})
	}
}

func TestModifyToErrFlushes(t *testing.T) {
	for _, from := range []State{StateInit, StateRTR, StateRTS} {
		t.Run(from.String(), func(t *testing.T) {
			q, scq, rcq := newTestQP(t, RC)
			walk(t, q, from)
			for i := range 3 {
				if err := q.PostRecv(&RecvWR{ID: uint64(100 + i), SGL: []SGE{{Addr: localBase, Length: 64, LKey: localKey}}}); err != nil {
					t.Fatal(err)
				}
			}
			nsend := 0
			if from == StateRTS {
				for i := range 2 {
					// Unsignaled: flushed requests complete anyway.
					if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend}); err != nil {
						t.Fatal(err)
					}
				}
				nsend = 2
			} else if err := q.PostSend(&SendWR{Opcode: WRSend}); !errors.Is(err, ErrState) {
				t.Fatalf("PostSend in %v = %v, want ErrState", from, err)
			}
			if err := q.Modify(&Attr{State: StateErr}, AttrState); err != nil {
				t.Fatal(err)
			}
			if len(scq.wcs) != nsend || len(rcq.wcs) != 3 {
				t.Fatalf("%d send and %d receive completions, want %d and 3", len(scq.wcs), len(rcq.wcs), nsend)
			}
			for i, wc := range scq.wcs {
				if wc.Status != WCWRFlushErr || wc.ID != uint64(i) || wc.Opcode != WCSend || wc.QPN != 0x42 {
					t.Fatalf("send completion %d = %+v, want WR_FLUSH_ERR", i, wc)
				}
			}
			for i, wc := range rcq.wcs {
				if wc.Status != WCWRFlushErr || wc.ID != uint64(100+i) || wc.Opcode != WCRecv {
					t.Fatalf("receive completion %d = %+v, want WR_FLUSH_ERR", i, wc)
				}
			}
			// In ERR, new requests are flushed at once.
			scq.wcs, rcq.wcs = nil, nil
			if err := q.PostSend(&SendWR{ID: 7, Opcode: WRRDMAWrite}); err != nil {
				t.Fatal(err)
			}
			if err := q.PostRecv(&RecvWR{ID: 8}); err != nil {
				t.Fatal(err)
			}
			if len(scq.wcs) != 1 || scq.wcs[0].Status != WCWRFlushErr || scq.wcs[0].Opcode != WCRDMAWrite ||
				len(rcq.wcs) != 1 || rcq.wcs[0].ID != 8 {
				t.Fatalf("after ERR: %+v %+v, want one flush each", scq.wcs, rcq.wcs)
			}
			// ERR→RESET→INIT works again.
			if err := q.Modify(&Attr{State: StateReset}, AttrState); err != nil {
				t.Fatal(err)
			}
			walk(t, q, StateInit)
		})
	}
}

func TestPostErrors(t *testing.T) {
	q, _, _ := newTestQP(t, RC)
	if err := q.PostRecv(&RecvWR{}); !errors.Is(err, ErrState) {
		t.Fatalf("PostRecv in RESET = %v, want ErrState", err)
	}
	walk(t, q, StateRTS)
	sgl := make([]SGE, 5)
	if err := q.PostSend(&SendWR{SGL: sgl}); !errors.Is(err, ErrTooManySGE) {
		t.Fatalf("5 SGEs = %v", err)
	}
	if err := q.PostSend(&SendWR{Opcode: WRSend, Flags: SendInline, SGL: []SGE{{Length: 1}}}); !errors.Is(err, ErrInline) {
		t.Fatalf("inline without MaxInline = %v", err)
	}
	if err := q.PostSend(&SendWR{Opcode: 8}); !errors.Is(err, ErrOpcode) {
		t.Fatalf("opcode 8 = %v", err)
	}
	for i := range 8 {
		if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.PostSend(&SendWR{Opcode: WRSend}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("9th request = %v, want ErrQueueFull", err)
	}
	u, _, _ := newTestQP(t, UC)
	walk(t, u, StateRTS)
	if err := u.PostSend(&SendWR{Opcode: WRRDMARead}); !errors.Is(err, ErrOpcode) {
		t.Fatalf("READ on UC = %v", err)
	}
}

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{StateRTS.String(), "RTS"}, {State(9).String(), "State(9)"},
		{WCRNRRetryExcErr.String(), "RNR_RETRY_EXC_ERR"}, {WCWRFlushErr.String(), "WR_FLUSH_ERR"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"}, {WRAtomicFetchAdd.String(), "ATOMIC_FETCH_AND_ADD"},
		{MTU4096.String(), "4096"}, {(AttrState | AttrAV).String(), "STATE|AV"}, {UD.String(), "UD"},
	} {
		if c.got != c.want {
			t.Errorf("String() = %q, want %q", c.got, c.want)
		}
	}
}

func TestUDSendErrorToSQE(t *testing.T) {
	n := newSimNet(t, 1, faults{delay: time.Microsecond})
	n.ends[0].mem.add(localKey, localBase, 1<<16, AccessLocalWrite)
	n.ends[1].mem.add(localKey, localBase, 1<<16, AccessLocalWrite)
	a, b, cqs := connect(t, n, UD, 1, 2, MTU1024, nil)
	av := simAV(0)
	big := SendWR{ID: 0, Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 2000), AV: &av, RemoteQPN: b.QPN(), RemoteQKey: 0x11111111}
	next := SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10), AV: &av, RemoteQPN: b.QPN(), RemoteQKey: 0x11111111}
	if err := a.PostSend(&big); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(&next); err != nil {
		t.Fatal(err)
	}
	for n.step() {
	}
	wcs := cqs[0].wcs
	if len(wcs) != 2 || wcs[0].Status != WCLocLenErr || wcs[1].Status != WCWRFlushErr || a.State() != StateSQE {
		t.Fatalf("UD send over the MTU: %+v, state %v; want LOC_LEN_ERR, WR_FLUSH_ERR, SQE", wcs, a.State())
	}
	// The receive side of a QP in SQE still works, and SQE→RTS recovers.
	if err := a.PostRecv(&RecvWR{ID: 9, SGL: sge(localBase+4096, 100)}); err != nil {
		t.Fatal(err)
	}
	back := simAV(1)
	if err := b.PostSend(&SendWR{Opcode: WRSend, SGL: sge(localBase, 10), AV: &back, RemoteQPN: a.QPN(), RemoteQKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	for n.step() {
	}
	if r := cqs[1].wcs; len(r) != 1 || r[0].Status != WCSuccess || r[0].ByteLen != 50 {
		t.Fatalf("receive in SQE: %+v", r)
	}
	if err := a.Modify(&Attr{State: StateRTS, CurState: StateSQE}, AttrState|AttrCurState); err != nil {
		t.Fatal(err)
	}
	cqs[0].wcs = nil
	next.ID = 2
	if err := a.PostSend(&next); err != nil {
		t.Fatal(err)
	}
	for n.step() {
	}
	if wcs := cqs[0].wcs; len(wcs) != 1 || wcs[0].Status != WCSuccess {
		t.Fatalf("after SQE→RTS: %+v", wcs)
	}
}

func TestMaxFrameLen(t *testing.T) {
	if got := MaxFrameLen(MTU4096); got > bufSize || got < 4096+14+20+8+12+4 {
		t.Fatalf("MaxFrameLen(4096) = %d", got)
	}
	if got := MaxFrameLen(MTU1024); got != MaxFrameLen(MTU4096)-3072 {
		t.Fatalf("MaxFrameLen(1024) = %d", got)
	}
}
