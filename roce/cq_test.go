package roce

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestCQOverflow(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	pa, _ := da.AllocPD()
	cq, _ := da.CreateCQ(4)
	q, _ := pa.CreateQP(QPConfig{Type: RC, SendCQ: cq, RecvCQ: cq})
	a := &side{d: da, pd: pa, cq: cq, qp: q}
	b := newSide(t, db, RC, 64, nil, nil)
	connect(t, a, b, ConnectOptions{})
	for i := range 8 {
		if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	e := <-da.Events()
	if e.Type != EventCQError || e.CQ != cq {
		t.Fatalf("event %+v", e)
	}
	if err := cq.Err(); !errors.Is(err, ErrCQOverflow) || cq.Overflows() == 0 {
		t.Fatalf("Err %v, %d overflows", err, cq.Overflows())
	}
	if err := cq.Destroy(); !errors.Is(err, ErrBusy) {
		t.Fatalf("destroy CQ in use: %v", err)
	}
	// The QP whose completion was lost goes to ERR, with its event.
	select {
	case e := <-da.Events():
		if e.Type != EventQPFatal || e.QPN != q.QPN() {
			t.Fatalf("event %+v, want QP_FATAL for qp %#x", e, q.QPN())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no QP_FATAL event after the CQ overflowed")
	}
	if st := q.State(); st != StateErr {
		t.Fatalf("QP in %v after its CQ overflowed, want ERR", st)
	}
	if err := q.PostSend(&SendWR{ID: 9, Opcode: WRRDMAWrite, Flags: SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if s := q.Stats(); s.SendErrors == 0 {
		t.Errorf("QP stats %+v: want flushed requests", s)
	}
	// The other QP, whose CQ has room, is untouched.
	if st := b.qp.State(); st != StateRTS {
		t.Fatalf("peer QP in %v, want RTS", st)
	}
}

func TestPollAllocs(t *testing.T) {
	da, _ := pipeDevices(t, 1, noFaults, Config{})
	cq, _ := da.CreateCQ(16)
	wcs := make([]WC, 8)
	wc := WC{ID: 1}
	if n := testing.AllocsPerRun(100, func() {
		cq.complete(&wc)
		cq.Poll(wcs)
	}); n != 0 {
		t.Fatalf("%v allocations per completion and Poll", n)
	}
}

// ArmSolicited fires for a solicited message only, once per arming.
func TestArmSolicited(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := rcPair(t, da, db, 64)
	for i := range 3 {
		b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, 64)}})
	}
	sol := b.cq.ArmSolicited()
	a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}})
	want(t, b.cq, WCRecv, WCSuccess)
	select {
	case <-sol:
		t.Fatal("solicited notification for an unsolicited message")
	default:
	}
	a.qp.PostSend(&SendWR{Opcode: WRSend, Flags: SendSolicited, SGL: []SGE{a.mr.SGE(0, 8)}})
	select {
	case <-sol:
	case <-time.After(5 * time.Second):
		t.Fatal("no solicited notification")
	}
	if wc := want(t, b.cq, WCRecv, WCSuccess); !wc.Solicited {
		t.Fatalf("completion %+v not marked solicited", wc)
	}
	// Fired once: a second solicited message without re-arming is not
	// notified.
	a.qp.PostSend(&SendWR{Opcode: WRSend, Flags: SendSolicited, SGL: []SGE{a.mr.SGE(0, 8)}})
	want(t, b.cq, WCRecv, WCSuccess)
	select {
	case <-sol:
		t.Fatal("notification without arming again")
	default:
	}
}

// Arm fires once for the next completion after it, not for one before.
// It runs in a synctest bubble: the wait for a notification that must
// not come is on fake time.
func TestArm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, 1, noFaults, Config{})
		a, b := rcPair(t, da, db, 64)
		for i := range 2 {
			b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, 64)}})
		}
		a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.cq.Wait(ctx); err != nil {
			t.Fatalf("wait for the first completion: %v", err)
		}
		ch := b.cq.Arm()
		select {
		case <-ch:
			t.Fatal("notification for a completion added before Arm")
		case <-time.After(20 * time.Millisecond):
		}
		a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}})
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("no notification")
		}
		if b.cq.Len() != 2 {
			t.Fatalf("%d completions, want 2", b.cq.Len())
		}
	})
}

// Arming an SRQ limit above its current length fires at once.
func TestSRQArmBelow(t *testing.T) {
	da, _ := pipeDevices(t, 1, noFaults, Config{})
	pd, _ := da.AllocPD()
	srq, err := pd.CreateSRQ(SRQConfig{MaxWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	srq.PostRecv(&RecvWR{ID: 1})
	if err := srq.Arm(4); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-da.Events():
		if e.Type != EventSRQLimitReached || e.SRQ != srq {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SRQ limit event")
	}
	if err := srq.Arm(17); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Arm above MaxWR: %v", err)
	}
	if err := srq.Destroy(); err != nil || srq.Destroy() != nil {
		t.Fatal("destroy twice:", err)
	}
	if err := srq.PostRecv(&RecvWR{}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("post to a destroyed SRQ: %v", err)
	}
}
