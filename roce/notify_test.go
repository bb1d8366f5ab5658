package roce

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestNotifyReceive checks the COMM_EST source: NotifyReceive's function
// runs once, after the QP's first packet from its peer and not before; a
// QP that took a packet already calls it at once.
func TestNotifyReceive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, 1, noFaults, Config{})
		a, b := rcPair(t, da, db, 4096)
		var calls atomic.Int32
		if err := b.qp.NotifyReceive(func() { calls.Add(1) }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := calls.Load(); n != 0 {
			t.Fatalf("calls before any packet = %d, want 0", n)
		}
		for i := range 3 {
			if err := b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			want(t, a.cq, WCSend, WCSuccess)
			want(t, b.cq, WCRecv, WCSuccess)
		}
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("calls after 3 messages = %d, want 1", n)
		}
		var late atomic.Int32
		if err := b.qp.NotifyReceive(func() { late.Add(1) }); err != nil {
			t.Fatal(err)
		}
		if n := late.Load(); n != 1 {
			t.Fatalf("calls of a function given after the first packet = %d, want 1 at once", n)
		}
		// A QP destroyed before any packet forgets its function.
		c := newSide(t, da, RC, 0, nil, nil)
		var never atomic.Int32
		if err := c.qp.NotifyReceive(func() { never.Add(1) }); err != nil {
			t.Fatal(err)
		}
		c.qp.Destroy()
		if err := c.qp.NotifyReceive(func() {}); err == nil {
			t.Fatal("NotifyReceive on a destroyed QP succeeded")
		}
		a.qp.PostRecv(&RecvWR{ID: 9, SGL: []SGE{a.mr.SGE(0, 64)}})
		b.qp.PostSend(&SendWR{ID: 9, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{b.mr.SGE(0, 64)}})
		want(t, b.cq, WCSend, WCSuccess)
		synctest.Wait()
		if n := never.Load(); n != 0 {
			t.Fatalf("calls of a destroyed QP's function = %d, want 0", n)
		}
	})
}
