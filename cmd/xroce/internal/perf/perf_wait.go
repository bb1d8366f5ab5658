//go:build linux

// Waiting for completions and for the peer's WRITEs: busy polling in
// latency tests, polling then sleeping on the CQ in bandwidth tests.

package perf

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/roce"
)

// poll waits for completions on cq (busy-polling with pollCQ in latency
// tests, with waitCQ in bandwidth tests) and gives up after the timeout
// without one.
func (r *perfRun) poll(ctx context.Context, cq *roce.CQ) (int, error) {
	if n := cq.Poll(r.wcs[:]); n > 0 {
		return n, nil
	}
	if r.o.test.lat {
		return device.PollCQ(ctx, cq, r.wcs[:], time.Now().Add(r.o.timeout), r.o.timeout)
	}
	for {
		// Many QPs served in turn may all be far from their next
		// signaled request (-q 4096 -s 65536: 100 × 64 KiB each, 27 GB
		// before the first completion): while the peer's frames keep
		// coming, the run is long, not stuck.
		rx := r.dev.Stats().RxFrames
		n, err := waitCQ(ctx, cq, r.wcs[:], time.Now().Add(r.o.timeout), r.o.timeout)
		if errors.Is(err, errNoCompletion) && r.dev.Stats().RxFrames != rx {
			continue
		}
		return n, err
	}
}

// errNoCompletion: waitCQ waited its whole timeout.
var errNoCompletion = errors.New("no completion")

// waitCQ waits for completions on cq until deadline: it polls
// waitPolls times, yielding to other goroutines (the device's goroutine
// among them, which receives meanwhile), then sleeps in CQ.Wait, which
// receives in this goroutine, and so on. The bandwidth tests wait so:
// their completions come in streams (busy-polling them with pollCQ was no
// faster: see docs/benchmarks.md).
func waitCQ(ctx context.Context, cq *roce.CQ, wcs []roce.WC, deadline time.Time, timeout time.Duration) (int, error) {
	for {
		for range waitPolls {
			if n := cq.Poll(wcs); n > 0 {
				return n, nil
			}
			runtime.Gosched()
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		err := cq.Wait(wctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return 0, fmt.Errorf("%w for %v: is the peer still there?", errNoCompletion, timeout)
			}
			return 0, err
		}
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
	}
}

// waitPolls is how many times waitCQ polls before it sleeps.
const waitPolls = 200

func wcError(wc *roce.WC) error {
	return &wcStatusError{status: wc.Status, qpn: wc.QPN, id: wc.ID}
}

// wcStatusError is a completion that failed.
type wcStatusError struct {
	status roce.WCStatus
	qpn    uint32
	id     uint64
}

func (e *wcStatusError) Error() string {
	return fmt.Sprintf("completion with error: %v (%d) on QP %#x, wr_id %d", e.status, int(e.status), e.qpn, e.id)
}

// waitWrite waits until the byte at off of p's buffer is want: the peer's
// WRITE has landed. A WRITE completes nothing on this side, so it watches
// the QP's received-frame counter (atomic loads, no lock) and looks at the
// byte (MR.Load8: under the workers' locks, as the peer's next WRITE may
// land while we look) only when a frame has come. Between looks it does
// the device's receive work itself (roce.Device.Progress), as a poller of
// a CQ does: no worker goroutine has to wake up for the WRITE to land.
// It gives up after the timeout, or at end (0 then).
func (r *perfRun) waitWrite(ctx context.Context, p *perfQP, off int, want byte, end time.Time) error {
	deadline := time.Now().Add(r.o.timeout)
	last := ^uint64(0)
	for i := 1; ; i++ {
		if rx := p.qp.Stats().RxFrames; rx != last {
			last = rx
			if p.mr.Load8(off) == want {
				return nil
			}
		}
		r.dev.Progress()
		if i%device.SpinYield == 0 {
			runtime.Gosched()
		}
		if i%1024 == 0 {
			if over(end) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no write from the peer for %v (message %d)", r.o.timeout, want)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// pollLast is pollOne of the send CQ for the completion of this side's
// last message of a latency test; done says the peer ended first. The
// peer ends its loop once that message has landed and, with rdma_cm,
// disconnects; when the ACK of it is lost, the peer's QP is in ERR by the
// time we resend, and the completion never comes (perftest does not wait
// for it). So the peer's DREQ ends the wait: the message was received.
// Only with rdma_cm, where the disconnection is known.
func (r *perfRun) pollLast(ctx context.Context) (n int, done bool, err error) {
	if r.cm == nil || len(r.cm.data) == 0 {
		n, err = r.pollOne(ctx, r.scq)
		return n, false, err
	}
	conn := r.cm.data[0]
	wctx, cancel := untilDone(ctx, conn.Done())
	defer cancel()
	n, err = r.pollOne(wctx, r.scq)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		if r.peerDisconnected() {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("the rdma_cm data connection ended: %w", conn.Err())
	}
	return n, false, err
}

// pollOne waits for completions on cq and checks their status.
func (r *perfRun) pollOne(ctx context.Context, cq *roce.CQ) (int, error) {
	n, err := r.poll(ctx, cq)
	if err != nil {
		return 0, err
	}
	for _, wc := range r.wcs[:n] {
		if wc.Status != roce.WCSuccess {
			return 0, wcError(&wc)
		}
	}
	return n, nil
}

// pollUntil waits for completions on cq until end (0 then), or the
// timeout.
func (r *perfRun) pollUntil(ctx context.Context, cq *roce.CQ, end time.Time) (int, error) {
	deadline := time.Now().Add(r.o.timeout)
	for i := 0; ; i++ {
		n, err := r.drain(cq) // an empty CQ's Poll does the device's receive work
		if n > 0 || err != nil {
			return n, err
		}
		if i%device.SpinYield == device.SpinYield-1 {
			runtime.Gosched()
		}
		if i%1024 == 1023 {
			if over(end) {
				return 0, nil
			}
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("no completion for %v: is the peer still there?", r.o.timeout)
			}
		}
	}
}

// drain collects the completions cq holds, without waiting.
func (r *perfRun) drain(cq *roce.CQ) (int, error) {
	n := cq.Poll(r.wcs[:])
	for _, wc := range r.wcs[:n] {
		if wc.Status != roce.WCSuccess {
			return 0, wcError(&wc)
		}
	}
	return n, nil
}
