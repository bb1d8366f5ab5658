//go:build linux

// The test loops: bandwidth (client and send_bw's receiver) and latency
// (write, read and send ping-pongs), and the work requests they post.

package perf

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/roce"
)

// sendTest runs send_bw and send_lat: the server posts receives, a
// barrier tells the client they are there, then the run.
func (r *perfRun) sendTest(ctx context.Context, wait time.Duration) error {
	o := r.o
	w := r.e.Stdout
	if o.test.lat {
		perftest.PrintLatHeader(w, o.duration > 0)
	} else {
		r.style.PrintBWHeader(w, o.gbits)
	}
	for _, size := range r.sizes() {
		if o.test.lat || r.server {
			if err := r.postRecvs(); err != nil {
				return err
			}
		}
		if err := r.barrier(o.timeout); err != nil {
			return err
		}
		var err error
		switch {
		case o.test.lat:
			err = r.latency(ctx, size)
		case r.server:
			var rep perftest.BWReport
			if rep, err = r.receiveBW(ctx, size); err == nil {
				r.style.PrintBW(w, rep, o.gbits)
			}
		default:
			var rep perftest.BWReport
			if rep, err = r.bandwidth(ctx, size); err == nil {
				r.style.PrintBW(w, rep, o.gbits)
			}
		}
		if err != nil {
			return err
		}
		// send_bw -a meets again after each size.
		if o.all && !o.test.lat {
			if err := r.barrier(o.timeout); err != nil {
				return err
			}
		}
	}
	io.WriteString(w, perftest.ResultLine)
	r.deadline(wait)
	return r.conn.Close(&r.my[0])
}

// postRecvs fills every QP's receive queue up to the RX depth. Each
// receive takes the largest message, so that receives left over from one
// size of -a serve the next.
func (r *perfRun) postRecvs() error {
	if r.rout == nil {
		r.rout = make([]int, len(r.qps))
	}
	for i := range r.qps {
		for r.rout[i] < r.o.rxDepth {
			if err := r.postRecv(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// postRecv posts one receive on QP i.
func (r *perfRun) postRecv(i int) error {
	p := r.qps[i]
	if err := p.qp.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{p.recvSGE(p.half)}}); err != nil {
		return fmt.Errorf("couldn't post receive: %w", err)
	}
	r.rout[i]++
	return nil
}

// sendWR builds QP i's request of size bytes.
func (r *perfRun) sendWR(i, size int) roce.SendWR {
	p, rem := r.qps[i], &r.rem[i]
	wr := roce.SendWR{ID: uint64(i)}
	switch r.o.test.verb {
	case perftest.Write:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = roce.WRRDMAWrite, []roce.SGE{p.sendSGE(size)}, rem.VAddr, rem.RKey
	case perftest.Read:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = roce.WRRDMARead, []roce.SGE{p.sendSGE(size)}, rem.VAddr, rem.RKey
	case perftest.Atomic:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = roce.WRAtomicFetchAdd, []roce.SGE{p.sendSGE(8)}, rem.VAddr, rem.RKey
		wr.CompareAdd = 1
		if r.o.atomicType == "CMP_AND_SWAP" {
			wr.Opcode, wr.CompareAdd, wr.Swap = roce.WRAtomicCmpAndSwp, 0, 1
		}
	default:
		wr.Opcode, wr.SGL = roce.WRSend, []roce.SGE{p.sendSGE(size)}
		if p.av != nil {
			wr.AV, wr.RemoteQPN, wr.RemoteQKey = p.av, p.rqpn, p.qkey
		}
	}
	return wr
}

// bandwidth runs the client's side of a bandwidth test for one size:
// every QP keeps up to the TX depth requests outstanding, one in cqMod
// signaled.
func (r *perfRun) bandwidth(ctx context.Context, size int) (perftest.BWReport, error) {
	o := r.o
	if err := r.pace(size); err != nil {
		return perftest.BWReport{}, err
	}
	nq := len(r.qps)
	iters := o.iters
	var end time.Time
	if o.duration > 0 {
		iters = 0
		end = time.Now().Add(time.Duration(o.duration) * time.Second)
	}
	total := iters * nq
	var posted, completed []time.Duration
	if o.duration == 0 {
		posted, completed = make([]time.Duration, 0, total), make([]time.Duration, 0, total)
	}
	scnt, ccnt := make([]int, nq), make([]int, nq)
	wrs := make([]roce.SendWR, nq)
	for i := range wrs {
		wrs[i] = r.sendWR(i, size)
	}
	origin := time.Now()
	var first time.Duration = -1
	var last time.Duration
	var done int
	prog := newProgress(r.e.Stderr, o.test.name)
	stopped := false
	for {
		if o.duration > 0 && !stopped && time.Now().After(end) {
			stopped = true
		}
		all := true
		for i := range r.qps {
			limit := iters
			if o.duration > 0 {
				// Post while running; once stopped, up to the next
				// signaled request, so that every one completes.
				limit = scnt[i] + o.txDepth
				if stopped {
					limit = (scnt[i] + o.cqMod - 1) / o.cqMod * o.cqMod
				}
			}
			for scnt[i] < limit && scnt[i]-ccnt[i] < o.txDepth {
				wr := &wrs[i]
				wr.Flags = 0
				if (scnt[i]+1)%o.cqMod == 0 || o.duration == 0 && scnt[i]+1 == limit {
					wr.Flags = roce.SendSignaled
				}
				if err := r.qps[i].qp.PostSend(wr); err != nil {
					return perftest.BWReport{}, fmt.Errorf("couldn't post send: %w", err)
				}
				if first < 0 {
					first = time.Since(origin)
				}
				if posted != nil {
					posted = append(posted, time.Since(origin))
				}
				scnt[i]++
			}
			if scnt[i] != ccnt[i] || o.duration == 0 && scnt[i] < limit {
				all = false
			}
		}
		if all && (o.duration == 0 || stopped) {
			break
		}
		n, err := r.poll(ctx, r.scq)
		if err != nil {
			return perftest.BWReport{}, fmt.Errorf("after %d of %d completions: %w", done, total, err)
		}
		now := time.Since(origin)
		for _, wc := range r.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return perftest.BWReport{}, wcError(&wc)
			}
			i := int(wc.ID)
			// A signaled request completes the unsignaled ones
			// before it.
			covered := max(min(o.cqMod, scnt[i]-ccnt[i]), 1)
			ccnt[i] += covered
			done += covered
			for range covered {
				if completed != nil {
					completed = append(completed, now)
				}
			}
			last = now
		}
		prog.tick(time.Now(), done, total, int64(done)*int64(size))
	}
	if o.duration > 0 {
		return perftest.Rate(size, done, last-first, o.gbits), nil
	}
	return perftest.BW(size, posted, completed[:len(posted)], o.cqMod, o.gbits), nil
}

// receiveBW is the server's side of send_bw: count the receives, keep
// the receive queues full, and compute the bandwidth from the first
// receive to the last.
func (r *perfRun) receiveBW(ctx context.Context, size int) (perftest.BWReport, error) {
	o := r.o
	nq := len(r.qps)
	total := o.iters * nq
	// The receiver sees no posts: it times the messages after the first
	// batch of receives, from that batch to the last (the first batch's
	// bytes arrived before its clock started).
	var t0, tl time.Duration
	n0 := 0
	got := make([]int, nq)
	origin := time.Now()
	var end time.Time
	if o.duration > 0 {
		total = 0
		end = origin.Add(time.Duration(o.duration)*time.Second + o.timeout)
	}
	prog := newProgress(r.e.Stderr, o.test.name)
	done := 0
	for total == 0 || done < total {
		if o.duration > 0 && time.Now().After(end) {
			break
		}
		n, err := r.poll(ctx, r.rcq)
		if err != nil {
			if o.duration > 0 && done > 0 {
				break // the client stopped sending
			}
			if o.conn == "UD" && done > 0 && ctx.Err() == nil {
				fmt.Fprintf(r.e.Stderr, "perf: %s: %d of %d messages lost (UD does not retransmit)\n", o.test.name, total-done, total)
				break
			}
			return perftest.BWReport{}, fmt.Errorf("after %d of %d receives: %w", done, total, err)
		}
		now := time.Since(origin)
		for _, wc := range r.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return perftest.BWReport{}, wcError(&wc)
			}
			i := int(wc.ID)
			got[i]++
			r.rout[i]--
			done++
			if n0 == 0 || now == t0 {
				t0, n0 = now, done
			}
			tl = now
			if o.duration > 0 || got[i]+r.rout[i] < o.iters {
				if err := r.postRecv(i); err != nil {
					return perftest.BWReport{}, err
				}
			}
		}
		prog.tick(time.Now(), done, total, int64(done)*int64(size))
	}
	return receiverRate(size, done, n0, t0, tl, o.duration > 0, o.gbits), nil
}

// receiverRate is the receiver's report: done messages, the first n0 of
// them received at t0 (one batch), the last at tl. Its peak is its
// average. A duration run reports no rate, as perftest's server; a run
// whose receives all came in one batch reports none either (zero, never
// bytes over the zero time between two reads of the clock).
func receiverRate(size, done, n0 int, t0, tl time.Duration, duration, gbits bool) perftest.BWReport {
	if duration || done < 2 || tl <= t0 {
		return perftest.BWReport{Size: uint64(size), Iters: uint64(done)}
	}
	rep := perftest.Rate(size, done-n0, tl-t0, gbits)
	rep.Iters = uint64(done)
	return rep
}

// latency runs one size of a latency test on QP 0.
func (r *perfRun) latency(ctx context.Context, size int) error {
	o := r.o
	iters := o.iters
	var end time.Time
	if o.duration > 0 {
		iters = 1 << 62
		end = time.Now().Add(time.Duration(o.duration) * time.Second)
	}
	var posted []time.Duration
	origin := time.Now()
	r.prog = newProgress(r.e.Stderr, o.test.name)
	var err error
	var n int
	switch o.test.verb {
	case perftest.Write:
		n, err = r.writeLat(ctx, size, iters, end, origin, &posted)
	case perftest.Read:
		n, err = r.readLat(ctx, size, iters, end, origin, &posted)
	default:
		n, err = r.sendLat(ctx, size, iters, end, origin, &posted)
	}
	if err != nil {
		return err
	}
	rtt := o.test.verb != perftest.Read
	if o.duration > 0 {
		perftest.PrintLatDuration(r.e.Stdout, size, n, time.Since(origin), rtt)
		return nil
	}
	perftest.PrintLat(r.e.Stdout, perftest.Latency(size, posted, rtt))
	return nil
}

// latProgress reports a latency run's progress now and then.
func (r *perfRun) latProgress(n, size int) {
	if n%1024 != 0 {
		return
	}
	total := r.o.iters
	if r.o.duration > 0 {
		total = 0
	}
	r.prog.tick(time.Now(), n, total, int64(n)*int64(size))
}

// over reports whether a duration run is over.
func over(end time.Time) bool { return !end.IsZero() && time.Now().After(end) }

// writeLat is perftest's write ping-pong: each side writes the message
// into the peer's buffer, its last byte the sequence number, and waits for
// the peer's write to change its own last byte. The server writes first.
func (r *perfRun) writeLat(ctx context.Context, size, iters int, end, origin time.Time, posted *[]time.Duration) (int, error) {
	p := r.qps[0]
	wr := r.sendWR(0, size)
	wr.Flags = roce.SendSignaled
	pollAt := p.half + size - 1
	scnt, rcnt, ccnt := 0, 0, 0
	for scnt < iters || rcnt < iters || ccnt < scnt {
		if rcnt < iters && !(scnt < 1 && r.server) {
			rcnt++
			if err := r.waitWrite(ctx, p, pollAt, byte(rcnt), end); err != nil {
				return scnt, err
			}
			if over(end) {
				return scnt, nil // each side ends a duration run at its own time
			}
		}
		if over(end) {
			iters = max(scnt, rcnt)
		}
		// The previous WRITE must be done before its buffer changes (it
		// is, but for its ACK, once the peer has answered it).
		for ccnt < scnt {
			var n int
			var err error
			if scnt == iters && rcnt == iters {
				var done bool
				if n, done, err = r.pollLast(ctx); done {
					return scnt, nil
				}
			} else {
				n, err = r.pollOne(ctx, r.scq)
			}
			if err != nil {
				return scnt, err
			}
			ccnt += n
		}
		if scnt < iters {
			*posted = append(*posted, time.Since(origin))
			r.latProgress(len(*posted), size)
			scnt++
			p.buf[size-1] = byte(scnt)
			if err := p.qp.PostSend(&wr); err != nil {
				return scnt, fmt.Errorf("couldn't post send: %w", err)
			}
		}
	}
	return scnt, nil
}

// readLat is the client's read loop: one READ at a time.
func (r *perfRun) readLat(ctx context.Context, size, iters int, end, origin time.Time, posted *[]time.Duration) (int, error) {
	wr := r.sendWR(0, size)
	wr.Flags = roce.SendSignaled
	n := 0
	for n < iters && !over(end) {
		*posted = append(*posted, time.Since(origin))
		r.latProgress(len(*posted), size)
		if err := r.qps[0].qp.PostSend(&wr); err != nil {
			return n, fmt.Errorf("couldn't post read: %w", err)
		}
		k, err := r.poll(ctx, r.scq)
		if err != nil {
			return n, err
		}
		if r.wcs[0].Status != roce.WCSuccess {
			return n, wcError(&r.wcs[0])
		}
		n += k
	}
	return n, nil
}

// sendLat is perftest's send ping-pong: the client sends first, each side
// answers a receive with a send.
func (r *perfRun) sendLat(ctx context.Context, size, iters int, end, origin time.Time, posted *[]time.Duration) (int, error) {
	p := r.qps[0]
	wr := r.sendWR(0, size)
	wr.Flags = roce.SendSignaled
	scnt, rcnt, ccnt := 0, 0, 0
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !r.server) {
			var n int
			var err error
			if end.IsZero() {
				n, err = r.pollOne(ctx, r.rcq)
			} else {
				// A duration run ends on each side at its own
				// time: stop waiting then.
				n, err = r.pollUntil(ctx, r.rcq, end)
				if err == nil && n == 0 {
					break
				}
			}
			if err != nil {
				return scnt, fmt.Errorf("after %d receives: %w", rcnt, err)
			}
			rcnt += n
			r.rout[0] -= n
			for range n {
				if err := r.postRecv(0); err != nil {
					return scnt, err
				}
			}
		}
		if over(end) {
			iters = max(scnt, rcnt)
		}
		if scnt < iters {
			*posted = append(*posted, time.Since(origin))
			r.latProgress(len(*posted), size)
			scnt++
			if err := p.qp.PostSend(&wr); err != nil {
				return scnt, fmt.Errorf("couldn't post send: %w", err)
			}
		}
		n, err := r.drain(r.scq)
		if err != nil {
			return scnt, err
		}
		ccnt += n
		for scnt-ccnt > r.o.txDepth+8 {
			n, err := r.pollOne(ctx, r.scq)
			if err != nil {
				return scnt, err
			}
			ccnt += n
		}
	}
	for ccnt < scnt {
		n, done, err := r.pollLast(ctx)
		if done {
			return scnt, nil
		}
		if err != nil {
			return scnt, err
		}
		ccnt += n
	}
	return scnt, nil
}
