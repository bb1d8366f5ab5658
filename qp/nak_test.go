package qp

import (
	"encoding/binary"
	"testing"
	"time"
)

// pair is a connected RC pair on a simulated wire with memory set up: a
// local region (lkey 1) and a remote region (rkey 2) on each side.
type pair struct {
	t    *testing.T
	n    *simNet
	a, b *QP
	cqs  [4]*testCQ
	la   *region // a's local region
	rb   *region // b's remote region
	lb   *region
}

func newPair(t *testing.T, f faults, tune func(*Attr)) *pair {
	n := newSimNet(t, 1, f)
	a, b, cqs := connect(t, n, RC, 1000, 2000, MTU1024, tune)
	p := &pair{t: t, n: n, a: a, b: b, cqs: cqs}
	p.la = n.ends[0].mem.add(localKey, localBase, 1<<20, AccessLocalWrite)
	n.ends[0].mem.add(remoteKey, remBase, 1<<16, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	p.lb = n.ends[1].mem.add(localKey, localBase, 1<<20, AccessLocalWrite)
	p.rb = n.ends[1].mem.add(remoteKey, remBase, 1<<16, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	return p
}

// run steps the wire until nothing is scheduled or limit passes.
func (p *pair) run(limit time.Duration) {
	for p.n.now < limit && p.n.step() {
	}
}

func (p *pair) post(wr SendWR) {
	p.t.Helper()
	if err := p.a.PostSend(&wr); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pair) recv(id uint64, n uint32) {
	p.t.Helper()
	if err := p.b.PostRecv(&RecvWR{ID: id, SGL: []SGE{{Addr: localBase, Length: n, LKey: localKey}}}); err != nil {
		p.t.Fatal(err)
	}
}

// want checks the completions of a's send queue.
func (p *pair) want(sts ...WCStatus) {
	p.t.Helper()
	got := p.cqs[0].wcs
	if len(got) != len(sts) {
		p.t.Fatalf("%d send completions %+v, want %v", len(got), got, sts)
	}
	for i, wc := range got {
		if wc.Status != sts[i] || wc.ID != uint64(i) {
			p.t.Fatalf("send completion %d = %v (%+v), want %v", i, wc.Status, wc, sts[i])
		}
	}
}

func sge(addr uint64, n uint32) []SGE { return []SGE{{Addr: addr, Length: n, LKey: localKey}} }

func TestNakRemoteAccess(t *testing.T) {
	for _, c := range []struct {
		name string
		wr   SendWR
		acc  Access // b's QP access flags
		want WCStatus
	}{
		{"write bad rkey", SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 100), RemoteAddr: remBase, RKey: 99}, AccessRemoteWrite, WCRemAccessErr},
		{"write past end", SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 3000), RemoteAddr: remBase + 1<<16 - 100, RKey: remoteKey}, AccessRemoteWrite, WCRemAccessErr},
		{"write before start", SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 10), RemoteAddr: remBase - 1, RKey: remoteKey}, AccessRemoteWrite, WCRemAccessErr},
		{"write no QP access", SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 10), RemoteAddr: remBase, RKey: remoteKey}, AccessRemoteRead, WCRemAccessErr},
		{"read no QP access", SendWR{Opcode: WRRDMARead, SGL: sge(localBase, 10), RemoteAddr: remBase, RKey: remoteKey}, AccessRemoteWrite, WCRemAccessErr},
		{"read bad rkey", SendWR{Opcode: WRRDMARead, SGL: sge(localBase, 10), RemoteAddr: remBase, RKey: 7}, AccessRemoteRead, WCRemAccessErr},
		{"atomic no access", SendWR{Opcode: WRAtomicFetchAdd, SGL: sge(localBase, 8), RemoteAddr: remBase, RKey: remoteKey, CompareAdd: 1}, AccessRemoteRead, WCRemAccessErr},
		{"atomic misaligned", SendWR{Opcode: WRAtomicFetchAdd, SGL: sge(localBase, 8), RemoteAddr: remBase + 4, RKey: remoteKey, CompareAdd: 1}, AccessRemoteAtomic, WCRemInvReqErr},
		{"atomic bad rkey", SendWR{Opcode: WRAtomicCmpAndSwp, SGL: sge(localBase, 8), RemoteAddr: remBase, RKey: 5}, AccessRemoteAtomic, WCRemAccessErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, faults{delay: time.Microsecond}, func(a *Attr) { a.AccessFlags = c.acc })
			if err := p.b.Modify(&Attr{State: StateRTS, AccessFlags: c.acc}, AttrState|AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			for i := range p.la.buf[:4096] {
				p.la.buf[i] = 0xEE
			}
			c.wr.Flags = SendSignaled
			p.post(c.wr)
			second := SendWR{ID: 1, Opcode: WRSend, SGL: sge(localBase, 1)}
			p.post(second)
			p.run(time.Second)
			p.want(c.want, WCWRFlushErr)
			if p.a.State() != StateErr || p.b.State() != StateErr {
				t.Fatalf("states %v %v, want ERR ERR", p.a.State(), p.b.State())
			}
			for i, x := range p.rb.buf {
				if x != 0 {
					t.Fatalf("remote byte %d = %#x: something was written", i, x)
				}
			}
			if !p.rb.guardsIntact() || !p.la.guardsIntact() {
				t.Fatal("memory outside a region was touched")
			}
			if got := p.n.ends[1].e.Stats().ErrNaksTx.Load(); got != 1 {
				t.Fatalf("%d error NAKs sent, want 1", got)
			}
			// The NAK's kind, counted by both QPs and engines.
			kind := func(s *Stats) [6]uint64 {
				return [6]uint64{s.InvReqNaksTx.Load(), s.RemAccessNaksTx.Load(), s.RemOpNaksTx.Load(),
					s.InvReqNaksRx.Load(), s.RemAccessNaksRx.Load(), s.RemOpNaksRx.Load()}
			}
			var wantB, wantA [6]uint64
			if c.want == WCRemInvReqErr {
				wantB[0], wantA[3] = 1, 1
			} else {
				wantB[1], wantA[4] = 1, 1
			}
			for _, x := range []struct {
				name string
				s    *Stats
				want [6]uint64
			}{{"qp b", p.b.Stats(), wantB}, {"engine b", p.n.ends[1].e.Stats(), wantB},
				{"qp a", p.a.Stats(), wantA}, {"engine a", p.n.ends[0].e.Stats(), wantA}} {
				if got := kind(x.s); got != x.want {
					t.Errorf("%s: NAKs by kind (inv/acc/op sent, inv/acc/op received) = %v, want %v", x.name, got, x.want)
				}
			}
		})
	}
}

func TestNakInvalidRequestLength(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, nil)
	p.recv(77, 100)
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 2500)})
	p.run(time.Second)
	p.want(WCRemInvReqErr)
	r := p.cqs[3].wcs
	if len(r) != 1 || r[0].Status != WCLocLenErr || r[0].ID != 77 {
		t.Fatalf("receive completions %+v, want LOC_LEN_ERR for 77", r)
	}
}

func TestNakRemoteOpBadRecvLKey(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, nil)
	if err := p.b.PostRecv(&RecvWR{ID: 5, SGL: []SGE{{Addr: localBase, Length: 100, LKey: 42}}}); err != nil {
		t.Fatal(err)
	}
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10)})
	p.run(time.Second)
	p.want(WCRemOpErr)
	if r := p.cqs[3].wcs; len(r) != 1 || r[0].Status != WCLocProtErr {
		t.Fatalf("receive completions %+v, want LOC_PROT_ERR", r)
	}
}

func TestLocalProtection(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, nil)
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: localBase, Length: 10, LKey: 9}}})
	p.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10)})
	p.run(time.Second)
	p.want(WCLocProtErr, WCWRFlushErr)
	if p.a.State() != StateErr || p.b.State() != StateRTS {
		t.Fatalf("states %v %v, want ERR RTS", p.a.State(), p.b.State())
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	for _, rnr := range []uint8{0, 3} {
		p := newPair(t, faults{delay: time.Microsecond}, func(a *Attr) { a.RNRRetry = rnr; a.MinRNRTimer = 14 })
		p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10)})
		p.run(time.Second)
		p.want(WCRNRRetryExcErr)
		if got := p.n.ends[1].e.Stats().RNRNaksTx.Load(); got != uint64(rnr)+1 {
			t.Fatalf("rnr_retry %d: %d RNR NAKs, want %d", rnr, got, rnr+1)
		}
		// Code 14 is 1.28 ms: the requester waited that long each time.
		if min := time.Duration(rnr) * 1280 * time.Microsecond; p.n.now < min {
			t.Fatalf("rnr_retry %d: gave up at %v, before %v", rnr, p.n.now, min)
		}
	}
}

func TestRNRForeverThenPost(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, func(a *Attr) { a.RNRRetry = 7 })
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10)})
	p.run(50 * time.Millisecond)
	if len(p.cqs[0].wcs) != 0 || p.n.ends[1].e.Stats().RNRNaksTx.Load() < 10 {
		t.Fatalf("rnr_retry 7: completions %+v after %d RNR NAKs", p.cqs[0].wcs, p.n.ends[1].e.Stats().RNRNaksTx.Load())
	}
	p.recv(1, 64)
	p.run(time.Second)
	p.want(WCSuccess)
}

func TestRetryExceeded(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, func(a *Attr) { a.RetryCnt = 2; a.Timeout = 10 })
	p.recv(1, 64)
	p.n.f.loss = 1 // the peer is gone
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10)})
	p.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 10)})
	p.run(10 * time.Second)
	p.want(WCRetryExcErr, WCWRFlushErr)
	// Timeout 10 is 4.19 ms; three timeouts (the first try and two retries).
	if to := 4096 * time.Nanosecond << 10; p.n.now < 3*to || p.n.now > 4*to {
		t.Fatalf("gave up at %v, want after 3 × %v", p.n.now, to)
	}
	if got := p.n.ends[0].e.Stats().Timeouts.Load(); got != 3 {
		t.Fatalf("%d timeouts, want 3", got)
	}
}

func TestOneSeqNakPerGap(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, nil)
	p.recv(1, 1<<16)
	// Drop the second packet of a 20-packet SEND once.
	drop := 1
	p.n.dropFn = func(from int, b []byte) bool {
		if from == 0 && drop >= 0 {
			drop--
			return drop < 0
		}
		return false
	}
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 20*1024)})
	p.run(time.Second)
	p.want(WCSuccess)
	st := p.n.ends[1].e.Stats()
	if st.SeqNaksTx.Load() != 1 {
		t.Fatalf("%d PSN sequence NAKs for one gap, want 1", st.SeqNaksTx.Load())
	}
	if p.n.ends[0].e.Stats().Timeouts.Load() != 0 {
		t.Fatal("recovered by timeout, not by the NAK")
	}
}

func TestAtomicNeverTwice(t *testing.T) {
	// Every frame is duplicated and the ACKs are lost half the time: the
	// requester retries, the responder must answer from its resources.
	p := newPair(t, faults{delay: time.Microsecond, dup: 1, jitter: 3 * time.Microsecond}, nil)
	k := 0
	p.n.dropFn = func(from int, b []byte) bool {
		k++
		return from == 1 && k%2 == 0
	}
	for i := range 20 {
		p.post(SendWR{ID: uint64(i), Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: sge(localBase+uint64(8*i), 8),
			RemoteAddr: remBase, RKey: remoteKey, CompareAdd: 1})
	}
	p.run(10 * time.Second)
	want := make([]WCStatus, 20)
	p.want(want...)
	if got := binary.LittleEndian.Uint64(p.rb.buf); got != 20 {
		t.Fatalf("counter = %d after 20 FETCH_ADD of 1, want 20", got)
	}
	for i := range 20 {
		if got := binary.LittleEndian.Uint64(p.la.buf[8*i:]); got != uint64(i) {
			t.Fatalf("FETCH_ADD %d returned %d, want %d", i, got, i)
		}
	}
	if p.n.ends[1].e.Stats().Duplicates.Load() == 0 {
		t.Fatal("no duplicates seen: the test did not test anything")
	}
}

func TestUnsignaled(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, nil)
	p.recv(1, 64)
	p.recv(2, 64)
	p.post(SendWR{ID: 0, Opcode: WRSend, SGL: sge(localBase, 10)}) // unsignaled: no completion
	p.post(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(localBase, 10), RemoteAddr: remBase, RKey: remoteKey})
	p.post(SendWR{ID: 2, Opcode: WRSend, SGL: sge(localBase, 100)}) // unsignaled but fails (buffer too small): completes
	p.run(time.Second)
	got := p.cqs[0].wcs
	if len(got) != 2 || got[0].ID != 1 || got[0].Status != WCSuccess || got[0].Opcode != WCRDMAWrite || got[1].ID != 2 || got[1].Status != WCRemInvReqErr {
		t.Fatalf("completions %+v, want WRITE 1 SUCCESS and SEND 2 REM_INV_REQ_ERR", got)
	}
}

// Per-QP packet counters: bytes match across a loss-free wire, an RNR NAK
// counts a frame dropped for want of a receive request, and a QP in ERR
// counts what it drops as a bad state.
func TestQPCounters(t *testing.T) {
	p := newPair(t, faults{delay: time.Microsecond}, func(a *Attr) { a.RNRRetry = 7; a.MinRNRTimer = 1 })
	p.post(SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: sge(localBase, 3000)})
	p.run(50 * time.Microsecond)
	p.recv(1, 4096)
	p.run(time.Second)
	p.want(WCSuccess)
	a, b := p.a.Stats(), p.b.Stats()
	if a.TxBytes.Load() == 0 || a.TxBytes.Load() != b.RxBytes.Load() || b.TxBytes.Load() != a.RxBytes.Load() {
		t.Errorf("bytes a→b %d/%d, b→a %d/%d: want equal and not 0", a.TxBytes.Load(), b.RxBytes.Load(), b.TxBytes.Load(), a.RxBytes.Load())
	}
	if a.TxFrames.Load() != b.RxFrames.Load() || b.TxFrames.Load() != a.RxFrames.Load() {
		t.Errorf("frames a→b %d/%d, b→a %d/%d", a.TxFrames.Load(), b.RxFrames.Load(), b.TxFrames.Load(), a.RxFrames.Load())
	}
	if b.RNRNaksTx.Load() == 0 || b.RxNoRecv.Load() != b.RNRNaksTx.Load() || a.RNRNaksRx.Load() != b.RNRNaksTx.Load() {
		t.Errorf("RNR NAKs sent %d received %d, no-receive drops %d", b.RNRNaksTx.Load(), a.RNRNaksRx.Load(), b.RxNoRecv.Load())
	}
	if b.RxDropped.Load() != b.RxNoRecv.Load() {
		t.Errorf("b dropped %d frames, %d of them for no receive request: want all", b.RxDropped.Load(), b.RxNoRecv.Load())
	}
	if err := p.b.Modify(&Attr{State: StateErr}, AttrState); err != nil {
		t.Fatal(err)
	}
	p.post(SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 10), RemoteAddr: remBase, RKey: remoteKey})
	p.run(2 * time.Second)
	if b.RxBadState.Load() == 0 || p.n.ends[1].e.Stats().RxBadState.Load() != b.RxBadState.Load() {
		t.Errorf("QP in ERR: %d bad-state drops (engine %d), want some", b.RxBadState.Load(), p.n.ends[1].e.Stats().RxBadState.Load())
	}
}
