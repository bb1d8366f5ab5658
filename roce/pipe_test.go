package roce

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/link"
)

// Loss, duplicates and reordering on the pipe: every operation still
// completes byte-exact.
func TestPipeLossy(t *testing.T) {
	for _, loss := range []float64{0.01, 0.1} {
		t.Run(fmt.Sprint(loss), func(t *testing.T) {
			f := link.Faults{Loss: loss, Duplicate: loss / 4, Reorder: loss / 4}
			da, db := pipeDevices(t, 2, f, Config{})
			a, b := newSide(t, da, RC, 256<<10, nil, nil), newSide(t, db, RC, 256<<10, nil, nil)
			connect(t, a, b, ConnectOptions{Timeout: 8}) // 1 ms ACK timeout
			testOps(t, a, b, []int{0, 100, 5000, 256 << 10})
			s := da.Stats()
			t.Logf("loss %v: %d retransmits, %d timeouts, %d seq NAKs, %d forwarded", loss, s.Retransmits, s.Timeouts, s.SeqNaksRx, s.Forwarded)
		})
	}
}

// Several seeds of 5% loss with duplicates, reordering and corrupted
// frames (caught by the ICRC): byte-exact every time.
func TestPipeFaultSeeds(t *testing.T) {
	f := link.Faults{Loss: 0.05, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.01}
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			da, db := pipeDevicesSeed(t, 2, f, Config{}, seed*100)
			a, b := newSide(t, da, RC, 64<<10, nil, nil), newSide(t, db, RC, 64<<10, nil, nil)
			connect(t, a, b, ConnectOptions{Timeout: 8})
			testOps(t, a, b, []int{0, 7000, 64 << 10})
			s := da.Stats()
			if s.Retransmits == 0 {
				t.Errorf("no retransmission with faults")
			}
			// One QP per device: its counters are the device's, but
			// for what reached no QP (corrupted frames).
			qa, qb := a.qp.Stats(), b.qp.Stats()
			if qa.Retransmits != s.Retransmits || qa.TxFrames != s.TxFrames || qa.TxBytes != s.TxBytes ||
				qa.SeqNaksRx != s.SeqNaksRx || qa.Duplicates != s.Duplicates || qa.RxOutOfSeq != s.RxOutOfSeq {
				t.Errorf("QP counters %+v, device %+v", qa.PacketStats, s)
			}
			if sb := db.Stats(); qb.RxFrames+sb.RxBadICRC+sb.RxMalformed+sb.RxUnknownQP != sb.RxFrames || qb.Duplicates != sb.Duplicates {
				t.Errorf("QP b counters %+v, device %+v", qb.PacketStats, sb)
			}
			if s.RxBadICRC+db.Stats().RxBadICRC == 0 {
				t.Errorf("no ICRC error counted with corrupted frames")
			}
		})
	}
}

// Many QPs on two workers at once, each moving its own data.
func TestPipeManyQPs(t *testing.T) {
	const nqp, size = 64, 64 << 10
	da, db := pipeDevices(t, 2, noFaults, Config{})
	// One extra QP on b puts each peer of a's QPs on the other worker, so
	// every frame arrives on the wrong queue and is forwarded.
	newSide(t, db, RC, 0, nil, nil)
	manyQPs(t, da, db, nqp, size)
	if s := da.Stats(); s.Forwarded == 0 || s.ForwardDropped != 0 {
		t.Errorf("%d frames forwarded between workers (%d dropped), want some (none)", s.Forwarded, s.ForwardDropped)
	}
}

func manyQPs(t *testing.T, da, db *Device, nqp, size int) {
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	var as, bs []*side
	for range nqp {
		a, b := newSide(t, da, RC, size, nil, pa), newSide(t, db, RC, size, nil, pb)
		connect(t, a, b, ConnectOptions{})
		as, bs = append(as, a), append(bs, b)
	}
	var wg sync.WaitGroup
	errs := make(chan error, nqp)
	for i := range nqp {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b := as[i], bs[i]
			fill(a.buf, uint64(i))
			if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, size)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				errs <- err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := a.cq.Wait(ctx); err != nil {
				errs <- fmt.Errorf("qp %d: %w", i, err)
				return
			}
			var wc [1]WC
			a.cq.Poll(wc[:])
			if wc[0].Status != WCSuccess {
				errs <- fmt.Errorf("qp %d: %v", i, wc[0].Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range nqp {
		bs[i].mr.Sync()
		same(t, fmt.Sprint("qp ", i), bs[i].buf, as[i].buf)
	}
	workers := map[*worker]int{}
	for _, a := range as {
		workers[a.qp.w]++
	}
	if len(workers) != len(da.workers) {
		t.Errorf("QPs on %d workers, want %d", len(workers), len(da.workers))
	}
}

// An SRQ shared by 16 QPs, with its limit event.
func TestPipeSRQ(t *testing.T) {
	da, db := pipeDevices(t, 2, noFaults, Config{})
	testSRQ(t, da, db)
}

func testSRQ(t *testing.T, da, db *Device) {
	const nqp, msg = 16, 2000
	pb, _ := db.AllocPD()
	srq, err := pb.CreateSRQ(SRQConfig{MaxWR: 64, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	rbuf := make([]byte, 64*msg)
	rmr, err := pb.RegMR(rbuf, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if err := srq.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{rmr.SGE(i*msg, msg)}}); err != nil {
			t.Fatal(err)
		}
	}
	rcq, _ := db.CreateCQ(256)
	var as []*side
	var bqps []*QP
	for range nqp {
		a := newSide(t, da, RC, msg, nil, nil)
		q, err := pb.CreateQP(QPConfig{Type: RC, SendCQ: rcq, RecvCQ: rcq, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		bqps = append(bqps, q)
		b := &side{d: db, pd: pb, cq: rcq, qp: q}
		connect(t, a, b, ConnectOptions{})
		as = append(as, a)
	}
	for i, a := range as {
		fill(a.buf, uint64(i))
		a.buf[0] = byte(i)
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, msg)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range as {
		want(t, a.cq, WCSend, WCSuccess)
	}
	seen := map[byte]bool{}
	for range nqp {
		wc := want(t, rcq, WCRecv, WCSuccess)
		got := rbuf[int(wc.ID)*msg : int(wc.ID+1)*msg]
		i := got[0]
		if seen[i] || int(i) >= nqp {
			t.Fatalf("message from qp %d twice or unknown", i)
		}
		seen[i] = true
		same(t, fmt.Sprint("srq message ", i), got, as[i].buf)
	}
	select {
	case e := <-db.Events():
		if e.Type != EventSRQLimitReached || e.SRQ != srq {
			t.Fatalf("event %v, want SRQ_LIMIT_REACHED", e.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SRQ limit event")
	}
	if n := srq.Len(); n != 64-nqp {
		t.Fatalf("SRQ holds %d requests, want %d", n, 64-nqp)
	}
	if err := srq.Destroy(); !errors.Is(err, ErrBusy) {
		t.Fatalf("destroy SRQ in use: %v, want ErrBusy", err)
	}
	// Each QP on the SRQ moved to ERR reports its last WQE once; then the
	// QPs and the SRQ can go.
	for _, q := range bqps {
		for range 2 {
			if err := q.Modify(&Attr{State: StateErr}, AttrState); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[uint32]int{}
	for len(got) < nqp {
		select {
		case e := <-db.Events():
			if e.Type != EventQPLastWQEReached {
				t.Fatalf("event %v, want QP_LAST_WQE_REACHED", e.Type)
			}
			got[e.QPN]++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d last-WQE events, want %d", len(got), nqp)
		}
	}
	select {
	case e := <-db.Events():
		t.Fatalf("extra event %v for qp %#x", e.Type, e.QPN)
	default:
	}
	for _, q := range bqps {
		if got[q.QPN()] != 1 {
			t.Fatalf("qp %#x: %d last-WQE events", q.QPN(), got[q.QPN()])
		}
		if err := srq.Destroy(); !errors.Is(err, ErrBusy) {
			t.Fatalf("destroy SRQ in use: %v, want ErrBusy", err)
		}
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy(); err != nil {
		t.Fatalf("destroy SRQ after its QPs: %v", err)
	}
	if err := srq.PostRecv(&RecvWR{}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("post to a destroyed SRQ: %v", err)
	}
}

// UD: datagrams with their GRH area and the sender's QPN. It runs in a
// synctest bubble: the wait for a datagram that must not arrive is on
// fake time.
func TestPipeUD(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, 1, noFaults, Config{})
		testUD(t, da, db)
	})
}

func testUD(t *testing.T, da, db *Device) {
	a, b := newSide(t, da, UD, 4096, nil, nil), newSide(t, db, UD, 4096, nil, nil)
	connect(t, a, b, ConnectOptions{})
	av, err := da.Resolve(context.Background(), ipOf(db))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{0, 1, 1024} {
		if err := b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, 40+1024)}}); err != nil {
			t.Fatal(err)
		}
		fill(a.buf[:n], uint64(n))
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)},
			AV: &av, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111}); err != nil {
			t.Fatal(err)
		}
		want(t, a.cq, WCSend, WCSuccess)
		wc := want(t, b.cq, WCRecv, WCSuccess)
		if int(wc.ByteLen) != n+40 || wc.SrcQP != a.qp.QPN() || wc.Flags&WCWithGRH == 0 {
			t.Fatalf("UD completion %+v", wc)
		}
		same(t, "UD payload", b.buf[40:40+n], a.buf[:n])
	}
	// A wrong Q_Key is dropped.
	b.qp.PostRecv(&RecvWR{ID: 9, SGL: []SGE{b.mr.SGE(0, 1064)}})
	a.qp.PostSend(&SendWR{ID: 9, Opcode: WRSend, Flags: SendSignaled, AV: &av, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x1234})
	want(t, a.cq, WCSend, WCSuccess)
	time.Sleep(20 * time.Millisecond)
	if n := b.cq.Len(); n != 0 {
		t.Fatalf("datagram with a wrong Q_Key completed")
	}
}

func ipOf(d *Device) (ip netip.Addr) {
	for _, a := range d.local {
		if a.Is4() {
			return a
		}
	}
	return ip
}

// A peer that vanishes: the requester ends in RETRY_EXC_ERR when its
// retry budget is spent, and the QP's fatal event is raised. It runs in a
// synctest bubble, on fake time.
func TestPipePeerVanishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, 1, noFaults, Config{})
		a, b := newSide(t, da, RC, 4096, nil, nil), newSide(t, db, RC, 4096, nil, nil)
		connect(t, a, b, ConnectOptions{Timeout: 12, RetryCnt: 2}) // 16.8 ms × 3
		db.Close()
		start := time.Now()
		if err := a.qp.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		want(t, a.cq, WCRDMAWrite, WCRetryExcErr)
		// On fake time the timeouts are exact: the first try and two
		// retries, each waiting 4.096 µs × 2^12.
		if el, want := time.Since(start), 3*(4096*time.Nanosecond<<12); el != want {
			t.Fatalf("RETRY_EXC_ERR after %v, want %v", el, want)
		}
		if st := a.qp.State(); st != StateErr {
			t.Fatalf("QP in %v, want ERR", st)
		}
		if s := a.qp.Stats(); s.SendErrors != 1 || s.LastError != WCRetryExcErr {
			t.Fatalf("QP stats %+v", s)
		}
		select {
		case e := <-da.Events():
			if e.Type != EventQPFatal || e.QPN != a.qp.QPN() {
				t.Fatalf("event %+v", e)
			}
		case <-time.After(time.Second):
			t.Fatal("no QP fatal event")
		}
		// The memory is free again.
		if err := a.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
	})
}

// Closing a device with traffic in flight flushes every request and
// releases everything. It runs in a synctest bubble: no time passes
// before Close, so the 5 ms pipe delay keeps the frames in flight.
func TestPipeCloseInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, 2, link.Faults{Delay: 5 * time.Millisecond}, Config{})
		a, b := rcPair(t, da, db, 1<<20)
		for i := range 32 {
			if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 16 {
			if err := a.qp.PostRecv(&RecvWR{ID: uint64(100 + i), SGL: []SGE{a.mr.SGE(0, 10)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := da.Close(); err != nil {
			t.Fatal(err)
		}
		if err := da.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		var wcs [64]WC
		n := a.cq.Poll(wcs[:])
		flushed := 0
		for _, wc := range wcs[:n] {
			if wc.Status == WCWRFlushErr {
				flushed++
			}
		}
		if n != 48 || flushed == 0 {
			t.Fatalf("%d completions (%d flushed) after Close, want 48", n, flushed)
		}
		if s := da.Stats(); s.MRs != 0 || s.PinnedPages != 0 {
			t.Fatalf("after Close: %d MRs, %d pinned pages", s.MRs, s.PinnedPages)
		}
		if err := a.qp.PostSend(&SendWR{Opcode: WRSend}); !errors.Is(err, ErrClosed) {
			t.Fatalf("post after Close: %v, want ErrClosed", err)
		}
		if _, err := da.AllocPD(); !errors.Is(err, ErrClosed) {
			t.Fatalf("AllocPD after Close: %v", err)
		}
		if err := a.cq.Wait(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
	})
}

// UC: SEND and WRITE (UC has no READ or atomics: refused at post).
func TestPipeUC(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := newSide(t, da, UC, 1<<16, nil, nil), newSide(t, db, UC, 1<<16, nil, nil)
	connect(t, a, b, ConnectOptions{})
	for _, n := range []int{0, 1500, 1 << 16} {
		fill(a.buf[:n], uint64(n))
		b.qp.PostRecv(&RecvWR{SGL: []SGE{b.mr.SGE(0, n)}})
		if err := a.qp.PostSend(&SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
		want(t, a.cq, WCSend, WCSuccess)
		want(t, b.cq, WCRecv, WCSuccess)
		same(t, "UC SEND", b.buf[:n], a.buf[:n])
		fill(a.buf[:n], uint64(n)+1)
		b.qp.PostRecv(&RecvWR{})
		if err := a.qp.PostSend(&SendWR{Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		want(t, a.cq, WCRDMAWrite, WCSuccess)
		want(t, b.cq, WCRecvRDMAWithImm, WCSuccess)
		same(t, "UC WRITE", b.buf[:n], a.buf[:n])
	}
	if err := a.qp.PostSend(&SendWR{Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(0, 8)}}); !errors.Is(err, ErrOpcode) {
		t.Fatalf("READ on UC: %v, want ErrOpcode", err)
	}
}
