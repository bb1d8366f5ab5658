package roce

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// testOps runs every operation at each size between a and b.
func testOps(t *testing.T, a, b *side, sizes []int) {
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// SEND and SEND_WITH_IMM.
			for _, op := range []WROpcode{WRSend, WRSendWithImm} {
				fill(a.buf[:n], uint64(n)+uint64(op))
				b.mr.Sync()
				clear(b.buf[:n])
				if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, n)}}); err != nil {
					t.Fatal(err)
				}
				if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: op, Flags: SendSignaled, Imm: 0xfeed, SGL: []SGE{a.mr.SGE(0, n)}}); err != nil {
					t.Fatal(err)
				}
				want(t, a.cq, WCSend, WCSuccess)
				wc := want(t, b.cq, WCRecv, WCSuccess)
				if int(wc.ByteLen) != n || (op == WRSendWithImm) != (wc.Flags&WCWithImm != 0) || op == WRSendWithImm && wc.Imm != 0xfeed {
					t.Fatalf("%v: recv completion %+v", op, wc)
				}
				same(t, op.String(), b.buf[:n], a.buf[:n])
			}
			// RDMA WRITE and WRITE_WITH_IMM into b.
			for _, op := range []WROpcode{WRRDMAWrite, WRRDMAWriteWithImm} {
				fill(a.buf[:n], uint64(n)*3+uint64(op))
				b.mr.Sync() // the device's accesses so far happen before ours
				clear(b.buf[:n])
				b.mr.Sync() // and ours before its next ones
				if op == WRRDMAWriteWithImm {
					if err := b.qp.PostRecv(&RecvWR{ID: 3}); err != nil {
						t.Fatal(err)
					}
				}
				wr := &SendWR{ID: 4, Opcode: op, Flags: SendSignaled, Imm: 0xbeef, SGL: []SGE{a.mr.SGE(0, n)},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if err := a.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				want(t, a.cq, WCRDMAWrite, WCSuccess)
				if op == WRRDMAWriteWithImm {
					wc := want(t, b.cq, WCRecvRDMAWithImm, WCSuccess)
					if wc.Imm != 0xbeef || int(wc.ByteLen) != n {
						t.Fatalf("write with imm: %+v", wc)
					}
				}
				b.mr.Sync()
				same(t, op.String(), b.buf[:n], a.buf[:n])
			}
			// RDMA READ from b.
			b.mr.Sync()
			fill(b.buf[:n], uint64(n)*5)
			b.mr.Sync()
			clear(a.buf[:n])
			if err := a.qp.PostSend(&SendWR{ID: 5, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			want(t, a.cq, WCRDMARead, WCSuccess)
			same(t, "READ", a.buf[:n], b.buf[:n])
		})
	}
	t.Run("atomics", func(t *testing.T) {
		b.mr.Sync()
		binary.LittleEndian.PutUint64(b.buf[8:], 40)
		b.mr.Sync()
		post := func(wr SendWR) uint64 {
			wr.Flags, wr.SGL, wr.RemoteAddr, wr.RKey = SendSignaled, []SGE{a.mr.SGE(0, 8)}, b.mr.Addr()+8, b.mr.RKey()
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			op := WCFetchAdd
			if wr.Opcode == WRAtomicCmpAndSwp {
				op = WCCompSwap
			}
			want(t, a.cq, op, WCSuccess)
			return binary.LittleEndian.Uint64(a.buf)
		}
		if old := post(SendWR{Opcode: WRAtomicFetchAdd, CompareAdd: 2}); old != 40 {
			t.Fatalf("FETCH_ADD returned %d, want 40", old)
		}
		if old := post(SendWR{Opcode: WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 7}); old != 42 {
			t.Fatalf("CMP_SWAP returned %d, want 42", old)
		}
		if old := post(SendWR{Opcode: WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 9}); old != 7 {
			t.Fatalf("failing CMP_SWAP returned %d, want 7", old)
		}
		b.mr.Sync()
		if v := binary.LittleEndian.Uint64(b.buf[8:]); v != 7 {
			t.Fatalf("remote value %d, want 7", v)
		}
	})
}

func TestPipeOps(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := rcPair(t, da, db, 1<<20)
	testOps(t, a, b, []int{0, 1, 1023, 1024, 1025, 4096, 65536, 1 << 20})
	if s := b.qp.Stats(); s.RecvCompletions != 8*3 || s.RecvErrors != 0 {
		t.Fatalf("receiver's QP stats %+v, want 24 receive completions", s)
	}
	if s := a.qp.Stats(); s.SendCompletions != 8*5+3 || s.SendErrors != 0 {
		t.Fatalf("sender's QP stats %+v, want 43 send completions", s)
	}
}

// A list of work requests is posted in order under one call; a refused
// one stops the list, the ones before it posted, its index in the error.
func TestPostList(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := rcPair(t, da, db, 256)
	recv := func(i int) *RecvWR { return &RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(64*i, 64)}} }
	if err := b.qp.PostRecv(recv(0), recv(1), recv(2)); err != nil {
		t.Fatal(err)
	}
	send := func(i int) *SendWR {
		a.buf[i] = byte(10 + i)
		return &SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(i, 1)}}
	}
	if err := a.qp.PostSend(send(0), send(1), send(2)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if wc := want(t, b.cq, WCRecv, WCSuccess); wc.ID != uint64(i) || b.buf[64*i] != byte(10+i) {
			t.Fatalf("receive %d: completion %+v, byte %d", i, wc, b.buf[64*i])
		}
		if wc := want(t, a.cq, WCSend, WCSuccess); wc.ID != uint64(i) {
			t.Fatalf("send %d: completion %+v", i, wc)
		}
	}
	// Too many SGEs (the default is 4) in the second request.
	bad := &SendWR{ID: 9, Opcode: WRSend, SGL: make([]SGE, 5)}
	err := a.qp.PostSend(send(0), bad, send(2))
	if err == nil || !strings.Contains(err.Error(), "request 1 of 3") {
		t.Fatalf("list with a bad request: %v", err)
	}
	if err := b.qp.PostRecv(recv(0)); err != nil {
		t.Fatal(err)
	}
	if wc := want(t, a.cq, WCSend, WCSuccess); wc.ID != 0 {
		t.Fatalf("completion %+v: want the request before the bad one", wc)
	}
	if n := testing.AllocsPerRun(100, func() {
		b.qp.PostRecv(&RecvWR{SGL: []SGE{b.mr.SGE(0, 64)}}, &RecvWR{SGL: []SGE{b.mr.SGE(64, 64)}})
		a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 1)}}, &SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(1, 1)}})
		var wc [2]WC
		for got := 0; got < 2; {
			got += b.cq.Poll(wc[:])
			if got < 2 {
				waitArmed(b.cq)
			}
		}
	}); n != 0 {
		t.Errorf("%v allocations per list of two sends and two receives", n)
	}
}
