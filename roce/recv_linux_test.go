package roce

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// waitSide is ppSide's wait for a goroutine that sleeps in CQ.Wait.
func waitSide(ctx context.Context, s *side) func() error {
	return func() error { return s.cq.Wait(ctx) }
}

// Goroutines that ping-pong with CQ.Wait take the link over from the
// workers and receive their messages themselves; once they stop, a
// message reaches a goroutine that sleeps on the CQ's armed notification
// through the worker goroutine.
func TestVethWaitWatches(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	a, b := rcPair(t, da, db, 128)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const iters = 2000
	errs := make(chan error, 2)
	go func() { errs <- ppSide(a, true, iters, waitSide(ctx, a)) }()
	go func() { errs <- ppSide(b, false, iters, waitSide(ctx, b)) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sa, sb := da.Stats(), db.Stats()
	t.Logf("a: %d of %d frames received by waiters, %d handovers, %d stand-bys; b: %d of %d, %d, %d",
		sa.WaiterFrames, sa.LinkRxFrames, sa.Handovers, sa.Standbys, sb.WaiterFrames, sb.LinkRxFrames, sb.Handovers, sb.Standbys)
	for _, s := range []Stats{sa, sb} {
		if s.WaiterFrames == 0 || s.Handovers == 0 {
			t.Errorf("waiter frames %d, handovers %d: the waiters never watched the link", s.WaiterFrames, s.Handovers)
		}
	}

	// Nobody waits in Wait now: the worker goroutine receives.
	goroutineReceives(t, a, b)
}

// goroutineReceives sends a message from a to b, whose goroutine sleeps on
// the CQ's armed notification, and checks that b's worker goroutine
// received it (neither a waiter nor Progress).
func goroutineReceives(t *testing.T, a, b *side) {
	t.Helper()
	before := b.d.Stats()
	if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(64, 64)}}); err != nil {
		t.Fatal(err)
	}
	ch := b.cq.Arm()
	if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(eventually):
		t.Fatal("no completion: the worker goroutine did not take the link back")
	}
	var wc [1]WC
	if b.cq.Poll(wc[:]) != 1 || wc[0].Status != WCSuccess || wc[0].Opcode != WCRecv {
		t.Fatalf("completion %+v", wc[0])
	}
	// The goroutine counts its batch after the round that completed it.
	after := b.d.Stats()
	for end := time.Now().Add(eventually); after.Batches == before.Batches && time.Now().Before(end); after = b.d.Stats() {
		time.Sleep(time.Millisecond)
	}
	if after.WaiterFrames != before.WaiterFrames || after.PolledFrames != before.PolledFrames || after.Batches == before.Batches {
		t.Errorf("waiter frames %d → %d, goroutine batches %d → %d, polled %d → %d, link frames %d → %d: want the goroutine's",
			before.WaiterFrames, after.WaiterFrames, before.Batches, after.Batches,
			before.PolledFrames, after.PolledFrames, before.LinkRxFrames, after.LinkRxFrames)
	}
}

// Two QPs on one link, each with a goroutine in Wait: one watches, the
// other sleeps on its CQ's notification and is woken by the watcher (or
// the goroutine), in every combination the scheduling gives.
func TestVethTwoWaiters(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	iters := 1000
	if testing.Short() {
		iters = 300
	}
	errs := make(chan error, 4)
	for i := range 2 {
		a, b := rcPair(t, da, db, 128)
		for _, s := range []*side{a, b} {
			go func() {
				err := ppSide(s, s == a, iters, waitSide(ctx, s))
				if err != nil {
					err = fmt.Errorf("pair %d: %w", i, err)
					cancel()
				}
				errs <- err
			}()
		}
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	sa, sb := da.Stats(), db.Stats()
	t.Logf("a: %d waiter frames of %d, b: %d of %d", sa.WaiterFrames, sa.LinkRxFrames, sb.WaiterFrames, sb.LinkRxFrames)
}

// A Wait that watches the link returns when its context is cancelled or
// reaches its deadline, and when the device closes.
func TestVethWaitEnds(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	a, _ := rcPair(t, da, db, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.cq.Wait(ctx) }()
	time.Sleep(20 * time.Millisecond)
	if s := da.Stats(); s.Handovers == 0 {
		t.Errorf("the waiter does not watch the link (stats %+v)", s)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: %v", err)
		}
	case <-time.After(eventually):
		t.Fatal("Wait did not return after its context was cancelled")
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer dcancel()
	if err := a.cq.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a deadline: %v, want its deadline", err)
	}

	go func() { done <- a.cq.Wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	da.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
	case <-time.After(eventually):
		t.Fatal("Wait did not return after Close")
	}
}

// A ping-pong waited for with Wait allocates nothing, with a context that
// cannot be cancelled and with one that can, given to every Wait.
func TestVethWaitAllocs(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	a, b := rcPair(t, da, db, 64)
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), cctx} {
		for i := range 4 {
			b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, 64)}})
			a.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{a.mr.SGE(0, 64)}})
		}
		var wc [4]WC
		recv := func(s *side) {
			for s.cq.Poll(wc[:1]) == 0 {
				if err := s.cq.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if wc[0].Status != WCSuccess {
				t.Fatal(wc[0].Status)
			}
			if err := s.qp.PostRecv(&RecvWR{SGL: []SGE{s.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
		// b answers in its own goroutine, waiting in Wait too.
		bctx, bcancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var bwc [1]WC
			for {
				for b.cq.Poll(bwc[:]) == 0 {
					if b.cq.Wait(bctx) != nil {
						return
					}
				}
				b.qp.PostRecv(&RecvWR{SGL: []SGE{b.mr.SGE(0, 64)}})
				b.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{b.mr.SGE(0, 8)}})
			}
		}()
		op := func() {
			if err := a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
			recv(a)
		}
		for range 20 {
			op()
		}
		n := testing.AllocsPerRun(500, op)
		bcancel()
		wg.Wait()
		if n != 0 {
			t.Errorf("%v allocations per round trip waited for with Wait (ctx %v)", n, ctx)
		}
		// Drain what b's last answers left.
		for a.cq.Poll(wc[:]) > 0 {
		}
		runtime.Gosched()
	}
	if s := da.Stats(); s.WaiterFrames == 0 {
		t.Error("no frame received by a waiter")
	}
}

// Receivers that come and go never reorder frames: a stream of WRITEs over
// a perfect veth sees no sequence error while b's link is received by its
// worker goroutine, a Progress spinner and a waiter in turn.
//
// It runs on real time, so nothing in it may depend on speed: the ACK
// timer is off (a loaded machine can hold an ACK past the default 67 ms,
// and the go-back-N that follows is no reordering, but would hide one),
// and the WRITEs go on, past 300 ms, until each kind of receiver has taken
// frames (a spinner starved of CPU may catch none in 300 ms).
func TestVethReceiversKeepOrder(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	a, b := newSide(t, da, RC, 64<<10, nil, nil), newSide(t, db, RC, 64<<10, nil, nil)
	connect(t, a, b, ConnectOptions{Timeout: -1})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			switch i % 3 {
			case 0:
				end := time.Now().Add(300 * time.Microsecond)
				for time.Now().Before(end) {
					db.Progress()
				}
			case 1:
				// Nothing completes on b: Wait watches until its deadline.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
				b.cq.Wait(ctx)
				cancel()
			case 2:
				time.Sleep(2 * time.Millisecond)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	each := func() bool {
		s := db.Stats()
		return s.PolledFrames > 0 && s.WaiterFrames > 0 && s.Batches > 0
	}
	wr := &SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 16<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	var wcs [16]WC
	outstanding := 0
	start := time.Now()
	sending := func() bool {
		el := time.Since(start)
		return el < eventually && (el < 300*time.Millisecond || !each())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*eventually)
	defer cancel()
	for more := true; outstanding > 0 || more; {
		if more = more && sending(); more && outstanding < 8 {
			if err := a.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			outstanding++
			continue
		}
		n := a.cq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			if wc.Status != WCSuccess {
				t.Fatal(wc.Status)
			}
		}
		outstanding -= n
		if n == 0 && a.cq.Wait(ctx) != nil {
			t.Fatalf("%d WRITEs outstanding after %v (with no ACK timer, a lost frame is never sent again): stats %+v",
				outstanding, time.Since(start), db.Stats().Links)
		}
	}
	close(stop)
	wg.Wait()
	sa, sb := da.Stats(), db.Stats()
	t.Logf("b: %d frames in %v, %d polled, %d by waiters, %d goroutine batches", sb.LinkRxFrames, time.Since(start), sb.PolledFrames,
		sb.WaiterFrames, sb.Batches)
	if sb.PolledFrames == 0 || sb.WaiterFrames == 0 || sb.Batches == 0 {
		t.Errorf("b's link received by Progress %d, waiters %d, goroutine batches %d in %v: want each", sb.PolledFrames, sb.WaiterFrames,
			sb.Batches, eventually)
	}
	for _, s := range []Stats{sa, sb} {
		if s.RxOutOfSeq != 0 || s.SeqNaksTx != 0 || s.SeqNaksRx != 0 || s.Retransmits != 0 {
			t.Errorf("out of sequence %d, NAKs sent %d received %d, retransmits %d: want none on a perfect link",
				s.RxOutOfSeq, s.SeqNaksTx, s.SeqNaksRx, s.Retransmits)
		}
	}
}

// A waiter that receives a SEND and returns holds its ACK back for a post
// that does not come: the worker goroutine sends it, and the peer's SEND
// completes.
func TestVethWaitHeldAnswersLeave(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	a, b := rcPair(t, da, db, 64)
	for i := range 20 {
		if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		done := make(chan WC, 1)
		go func() { done <- wait(t, b.cq, 10*time.Second) }()
		time.Sleep(time.Millisecond) // b's goroutine waits in Wait
		if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if wc := <-done; wc.Status != WCSuccess {
			t.Fatalf("message %d: %v", i, wc.Status)
		}
		want(t, a.cq, WCSend, WCSuccess)
	}
	if s := db.Stats(); s.WaiterFrames == 0 {
		t.Error("no frame received by a waiter")
	}
}

// A goroutine that spins on Progress takes the link (the worker goroutine
// stops listening); once it stops, the goroutine takes the link back at
// an idle tick and receives again.
func TestVethProgressTakesLink(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{queues: 1})
	a, b := rcPair(t, da, db, 128)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- ppSide(a, true, 500, spinWait(ctx, a.cq)) }()
	go func() { errs <- ppSide(b, false, 500, spinWait(ctx, b.cq)) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	w := db.workers[0]
	if s := w.rx.Load(); s != rxPolled {
		t.Errorf("rx state %d while polled, want rxPolled", s)
	}
	if s := db.Stats(); s.PolledFrames == 0 {
		t.Error("no frame polled")
	}
	// Nobody polls now: at its second idle tick or so the goroutine
	// listens again.
	start := time.Now()
	for w.rx.Load() != rxWorker && time.Since(start) < eventually {
		time.Sleep(idleTick / 2)
	}
	if s := w.rx.Load(); s != rxWorker {
		t.Errorf("rx state %d %v after the pollers stopped, want rxWorker", s, eventually)
	}
	t.Logf("the goroutine took the link back after %v", time.Since(start).Round(time.Millisecond))
	goroutineReceives(t, a, b)
}

// When the interface under a device goes away, a goroutine in CQ.Wait
// neither hangs past its context nor spins on the failing socket: it
// hands the link back and sleeps, and the device counts the link errors.
// Each link error is followed by a pause of at least a millisecond (the
// worker goroutine's) or a sleep on the CQ (the waiter's), so however
// slow the machine there are at most about as many errors as
// milliseconds; a loop retrying the socket would count far more.
func TestVethWaiterInterfaceRemoved(t *testing.T) {
	da, db, _, p := vethPair(t, Config{}, vethOpts{queues: 1})
	a, _ := rcPair(t, da, db, 64)
	removed := time.Now()
	if err := p.A.RemoveInterface(); err != nil {
		t.Fatal(err)
	}
	const wait = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.cq.Wait(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(wait + eventually):
		t.Fatalf("Wait on a device whose interface is gone still waits %v after its deadline", eventually)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a device whose interface is gone = %v, want the context's deadline", err)
	}
	n := da.Stats().LinkErrors
	el := time.Since(removed)
	if n == 0 {
		t.Errorf("no link error counted in %v after the interface went away", el)
	}
	if most := uint64(el/time.Millisecond) + 10; n > most {
		t.Errorf("%d link errors in %v, want at most %d (one per millisecond): something spins on the dead link", n, el, most)
	}
	t.Logf("%d link errors in %v", n, el)
}
