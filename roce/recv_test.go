package roce

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/link"
)

// pump calls Progress on the devices until done reports true or limit
// passes.
func pump(t *testing.T, limit time.Duration, done func() bool, ds ...*Device) {
	t.Helper()
	end := time.Now().Add(limit)
	for !done() {
		if time.Now().After(end) {
			t.Fatalf("nothing after %v of Progress", limit)
		}
		for _, d := range ds {
			d.Progress()
		}
	}
}

// Devices without worker goroutines: Progress alone receives, answers,
// retransmits (the pipe loses, duplicates and reorders frames) and
// completes, and every frame the links delivered went through it.
func TestProgressAlone(t *testing.T) {
	f := link.Faults{Loss: 0.02, Duplicate: 0.02, Reorder: 0.02}
	da, db := pipeDevices(t, 1, f, Config{noGoroutines: true})
	a, b := rcPair(t, da, db, 256<<10)
	var wc [1]WC
	got := func(cq *CQ, op WCOpcode) func() bool {
		return func() bool {
			if cq.Poll(wc[:]) == 0 {
				return false
			}
			if wc[0].Status != WCSuccess || wc[0].Opcode != op {
				t.Fatalf("completion %v %v, want %v success", wc[0].Opcode, wc[0].Status, op)
			}
			return true
		}
	}
	for i, size := range []int{1, 1024, 4097, 64 << 10, 256 << 10} {
		fill(a.buf[:size], uint64(i))
		if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
		pump(t, 20*time.Second, got(b.cq, WCRecv), da, db)
		pump(t, 20*time.Second, got(a.cq, WCSend), da, db)
		same(t, fmt.Sprintf("send %d", size), b.buf[:size], a.buf[:size])

		fill(b.buf[:size], uint64(i+100))
		if err := b.qp.PostSend(&SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{b.mr.SGE(0, size)}, RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		pump(t, 20*time.Second, got(b.cq, WCRDMAWrite), da, db)
		a.mr.Sync()
		same(t, fmt.Sprintf("write %d", size), a.buf[:size], b.buf[:size])
	}
	for _, d := range []*Device{da, db} {
		s := d.Stats()
		if s.Batches != 0 || s.PolledFrames == 0 || s.PolledFrames != s.LinkRxFrames {
			t.Errorf("worker batches %d, polled frames %d of %d received: want 0 and all", s.Batches, s.PolledFrames, s.LinkRxFrames)
		}
	}
	if s := da.Stats(); s.Retransmits == 0 {
		t.Logf("no retransmission (seeded loss hit no frame of a's)")
	}
}

// ppSide ping-pongs iters 64-byte SENDs over s as ibv_rc_pingpong does:
// receives posted ahead, each side sending once its previous send and the
// peer's message have completed, and checks each message's first byte.
// wait waits for s's CQ to have completions (or returns an error).
func ppSide(s *side, client bool, iters int, wait func() error) error {
	const depth = 4
	post := func() error { return s.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{s.mr.SGE(64, 64)}}) }
	for range depth {
		if err := post(); err != nil {
			return err
		}
	}
	sent, recvd := 0, 0
	send := func() error {
		s.buf[0] = byte(sent)
		sent++
		return s.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.mr.SGE(0, 64)}})
	}
	pending := 1 // the peer's message
	if client {
		if err := send(); err != nil {
			return err
		}
		pending = 3
	}
	var wcs [4]WC
	for recvd < iters || pending&2 != 0 {
		n := s.cq.Poll(wcs[:])
		if n == 0 {
			if err := wait(); err != nil {
				return fmt.Errorf("after %d sent, %d received: %w", sent, recvd, err)
			}
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != WCSuccess {
				return fmt.Errorf("completion %v (id %d)", wc.Status, wc.ID)
			}
			if wc.ID == 1 {
				if s.buf[64] != byte(recvd) {
					return fmt.Errorf("message %d has %d", recvd, s.buf[64])
				}
				recvd++
				if err := post(); err != nil {
					return err
				}
			}
			pending &^= int(wc.ID)
			if pending == 0 && sent < iters {
				if err := send(); err != nil {
					return err
				}
				pending = 3
			}
		}
	}
	return nil
}

// spinWait is ppSide's wait for a goroutine that spins on Poll and
// Progress.
func spinWait(ctx context.Context, cq *CQ) func() error {
	i := 0
	return func() error {
		cq.Progress()
		i++
		if i%256 == 0 {
			runtime.Gosched()
			return ctx.Err()
		}
		return nil
	}
}

// Everything at once, for the race detector: two devices with two links
// each (frames cross between workers), a lossy pipe, QPs whose goroutines
// wait by spinning on Poll and Progress, by Wait and by Arm, and a
// goroutine that calls Progress on both devices all along.
func TestProgressConcurrent(t *testing.T) {
	f := link.Faults{Loss: 0.01, Duplicate: 0.01, Reorder: 0.02}
	da, db := pipeDevices(t, 2, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	iters := 300
	if testing.Short() {
		iters = 100
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			da.Progress()
			db.Progress()
			runtime.Gosched()
		}
	}()
	// A QP on b first, so that each pair's QPs are on different workers
	// and their frames cross to the other worker.
	newSide(t, db, RC, 0, nil, nil)
	errs := make(chan error, 8)
	for i, style := range []string{"spin", "wait", "arm", "spin"} {
		a, b := rcPair(t, da, db, 128)
		for _, s := range []*side{a, b} {
			wait := spinWait(ctx, s.cq)
			switch style {
			case "wait":
				wait = func() error {
					wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
					defer wcancel()
					if err := s.cq.Wait(wctx); err != nil && ctx.Err() != nil {
						return err
					}
					return nil
				}
			case "arm":
				wait = func() error {
					ch := s.cq.Arm()
					if s.cq.Len() > 0 {
						return nil
					}
					select {
					case <-ch:
					case <-time.After(50 * time.Millisecond):
					}
					return ctx.Err()
				}
			}
			go func() {
				err := ppSide(s, s == a, iters, wait)
				if err != nil {
					err = fmt.Errorf("qp %d (%s): %w", i, style, err)
					cancel()
				}
				errs <- err
			}()
		}
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	sa, sb := da.Stats(), db.Stats()
	t.Logf("a: %d of %d frames polled, %d forwarded; b: %d of %d, %d forwarded",
		sa.PolledFrames, sa.LinkRxFrames, sa.Forwarded, sb.PolledFrames, sb.LinkRxFrames, sb.Forwarded)
	if sa.Forwarded == 0 || sb.Forwarded == 0 {
		t.Error("no frame crossed workers")
	}
}

// Progress allocates nothing, idle or carrying traffic.
func TestProgressAllocs(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, r := rcPair(t, da, db, 64<<10)
	if n := testing.AllocsPerRun(1000, func() { da.Progress() }); n != 0 {
		t.Errorf("%v allocations per idle Progress", n)
	}
	wr := &SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()}
	var wcs [4]WC
	op := func() {
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for i := 0; a.cq.Poll(wcs[:]) == 0; i++ {
			a.cq.Progress()
			db.Progress()
			if i == 1e8 {
				t.Fatal("no completion")
			}
		}
	}
	for range 10 {
		op()
	}
	if n := testing.AllocsPerRun(200, op); n != 0 {
		t.Errorf("%v allocations per 64 KiB WRITE waited for by spinning", n)
	}
	if s := da.Stats(); s.PolledFrames == 0 {
		t.Error("no frame polled")
	}
}

// drowsyLink is a pipe end whose WaitReceive sleeps its whole timeout,
// blind to arriving frames: its worker goroutine wakes only at its own
// deadlines, as one the scheduler has not run yet, and leaves the frames
// to a Progress caller.
type drowsyLink struct{ *link.PipeEnd }

func (l drowsyLink) WaitReceive(timeout time.Duration) (bool, error) {
	time.Sleep(max(timeout, 0))
	return false, nil
}

// Answers a Progress call held back go out without another call: the
// worker goroutine sends them within holdMax. It runs in a synctest
// bubble, on fake time; b's goroutine sleeps through the SEND's arrival
// (drowsyLink), so that it is b's Progress that receives it.
func TestProgressHeldAnswersLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pa, pb := link.NewPipe(link.PipeConfig{Buffers: 512, MACA: macA, MACB: macB})
		da, err := NewDevice([]link.Link{pa}, Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { da.Close() })
		db, err := NewDevice([]link.Link{drowsyLink{pb}}, Config{Addrs: []netip.Addr{ipB}, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: macA}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		a, b := rcPair(t, da, db, 64)
		if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // b's goroutine asleep
		start := time.Now()
		if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		var wc [1]WC
		tx := db.Stats().LinkTxFrames
		if db.Progress() != 1 || b.cq.Poll(wc[:]) != 1 {
			t.Fatal("b's Progress did not receive the SEND")
		}
		if got := db.Stats().LinkTxFrames; got != tx {
			t.Errorf("b transmitted %d frames as it received the SEND, want 0 (ACK held back)", got-tx)
		}
		// b never calls into its device again: a's SEND completes all the
		// same, once b's goroutine sends the ACK b's Progress held back.
		want(t, a.cq, WCSend, WCSuccess)
		if el := time.Since(start); el == 0 || el > holdMax {
			t.Errorf("a's SEND completed after %v, want within holdMax (%v), not at once", el, holdMax)
		}
	})
}

// countLink counts Transmit calls and frames.
type countLink struct {
	link.Link
	calls, frames int
}

func (c *countLink) Transmit(bufs [][]byte) (int, error) {
	c.calls++
	c.frames += len(bufs)
	return c.Link.Transmit(bufs)
}

// A poller holds the ACK of a message it received back until it answers,
// and both leave in one transmit call (one system call with AF_XDP).
func TestProgressHoldsAnswers(t *testing.T) {
	pa, pb := link.NewPipe(link.PipeConfig{Buffers: 512, MACA: macA, MACB: macB})
	lb := &countLink{Link: pb}
	da, err := NewDevice([]link.Link{pa}, Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}, noGoroutines: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := NewDevice([]link.Link{lb}, Config{Addrs: []netip.Addr{ipB}, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: macA}, noGoroutines: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	a, b := rcPair(t, da, db, 64)
	var wc [1]WC
	for i := range 10 {
		if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		calls, frames := lb.calls, lb.frames
		pump(t, 10*time.Second, func() bool { return b.cq.Poll(wc[:]) == 1 }, db)
		if lb.calls != calls {
			t.Fatalf("message %d: b transmitted %d times before answering, want 0 (ACK held back)", i, lb.calls-calls)
		}
		if err := b.qp.PostSend(&SendWR{ID: 3, Opcode: WRSend, SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if lb.calls != calls+1 || lb.frames != frames+2 {
			t.Fatalf("message %d: b's answer took %d transmit calls for %d frames, want 1 for 2 (ACK and SEND)", i, lb.calls-calls, lb.frames-frames)
		}
		if err := a.qp.PostRecv(&RecvWR{ID: 4, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		pump(t, 10*time.Second, func() bool { return a.cq.Poll(wc[:]) == 1 }, da)
		da.Progress() // sends a's ACK
		pump(t, 10*time.Second, func() bool { return b.qp.q.SendQueued() == 0 }, db)
	}
}
