//go:build linux

package xdp

// Receive side: the fill ring, the RX ring, linearizing multi-buffer frames
// and giving buffers back.

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/link"
)

// refill moves free receive chunks into the fill ring.
func (s *Socket) refill() {
	n := uint32(len(s.rxFree))
	if n == 0 {
		return
	}
	got, idx := s.fill.reserve(n)
	if got == 0 {
		return
	}
	free := s.rxFree[len(s.rxFree)-int(got):]
	for i, addr := range free {
		s.fill.set(idx+uint32(i), addr)
		s.um.owner[addr>>s.shift] = ownFill
	}
	s.rxFree = s.rxFree[:len(s.rxFree)-int(got)]
	s.fill.submit()
}

// Receive implements link.Link. Frames that fit a chunk are returned in
// place (zero copy); a frame spanning several descriptors is copied into one
// linear buffer.
func (s *Socket) Receive(bufs [][]byte, timeout time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	if s.dead != 0 {
		return 0, s.checkDead()
	}
	s.refill()
	if s.copyMode && s.tx.outstanding() != 0 {
		// A Transmit left descriptors behind (completion ring full):
		// push them now rather than wait for the next Transmit.
		s.kickTX()
		s.reap()
	}
	n := s.receiveBatch(bufs)
	if n > 0 || len(bufs) == 0 {
		return n, nil
	}
	if s.fill.needWakeup() || s.busyPoll {
		s.st.wakeups.Add(1)
		kickRX(s.fd)
		if n = s.receiveBatch(bufs); n > 0 {
			return n, nil
		}
	}
	if timeout == 0 {
		return 0, s.checkDeadEvery()
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if s.spin > 0 {
		d := s.spin
		if timeout > 0 && timeout < d {
			d = timeout
		}
		if n = s.spinReceive(bufs, d); n > 0 {
			return n, nil
		}
		if s.closed.Load() {
			return 0, link.ErrClosed
		}
	}
	for {
		// Sleep at most deadCheck at a time: a socket whose interface
		// went away is never reported by poll(2), only by SO_ERROR.
		wait := deadCheck
		if timeout > 0 {
			wait = min(max(time.Until(deadline), 0), deadCheck)
		}
		ts := unix.NsecToTimespec(int64(wait))
		s.pfd[0].Revents, s.pfd[1].Revents = 0, 0
		// Sleep without the mutex, so that Alloc, Transmit and Release
		// can run meanwhile (Close too: it wakes us first, and we look
		// at closed before touching anything it tears down).
		s.mu.Unlock()
		r, e := ppoll(s.pfd[:], &ts)
		s.mu.Lock()
		if s.closed.Load() {
			return 0, link.ErrClosed
		}
		if e != 0 && e != unix.EINTR {
			return 0, fmt.Errorf("poll AF_XDP socket: %w", e)
		}
		if r > 0 && s.pfd[1].Revents != 0 {
			unix.Read(s.efd, s.efdBuf[:]) // reset the eventfd
		}
		n = s.receiveBatch(bufs)
		if n > 0 || (r > 0 && s.pfd[1].Revents != 0) {
			return n, nil
		}
		if r == 0 && e == 0 {
			if err := s.checkDead(); err != nil {
				return 0, err
			}
		}
		if timeout > 0 && !time.Now().Before(deadline) {
			return 0, nil
		}
	}
}

// deadCheck is how often a waiting Receive checks whether the kernel
// unbound the socket.
const deadCheck = time.Second

// checkDead reports the error that unbound the socket, if any: when its
// interface goes away the kernel unbinds it and sets ENETDOWN in SO_ERROR,
// and poll(2) then just never reports input. Receive looks on timeouts
// (reading SO_ERROR clears it, so the error is kept).
func (s *Socket) checkDead() error {
	if s.dead == 0 {
		serr, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil || serr == 0 {
			return nil
		}
		s.dead = unix.Errno(serr)
	}
	return fmt.Errorf("receive on %s queue %d: socket unbound: %w", s.info.Name, s.info.Queue, s.dead)
}

// checkDeadEvery is checkDead at most once per deadCheck, for Receives
// that do not wait: a caller that sleeps on the socket's descriptor itself
// (package roce's watchers) learns so that the interface went away.
func (s *Socket) checkDeadEvery() error {
	now := time.Now()
	if now.Before(s.deadAt) {
		return nil
	}
	s.deadAt = now.Add(deadCheck)
	return s.checkDead()
}

// spinReceive polls the RX ring without sleeping for up to d, yielding the
// processor between looks, and returns as soon as frames arrive. Sleeping in
// poll(2) costs a wakeup per batch on the sending side (sock_def_readable)
// and a context switch here; a short spin avoids both under load.
func (s *Socket) spinReceive(bufs [][]byte, d time.Duration) int {
	end := time.Now().Add(d)
	for i := 0; ; i++ {
		if s.rx.refreshPending() > 0 {
			return s.receiveBatch(bufs)
		}
		if i&15 == 15 && (s.closed.Load() || time.Now().After(end)) {
			return 0
		}
		runtime.Gosched()
	}
}

// receiveBatch takes up to len(bufs) frames off the RX ring.
func (s *Socket) receiveBatch(bufs [][]byte) int {
	avail := s.rx.pending()
	if avail == 0 {
		return 0
	}
	var used uint32
	var n int
	var bytes uint64
	base := s.rx.cachedCons
	for n < len(bufs) && used < avail {
		d := s.rx.at(base + used)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			used++
			if !s.rxDescOK(d) {
				continue
			}
			c := d.Addr >> s.shift
			s.um.owner[c] = ownRx
			end := (c + 1) << s.shift
			bufs[n] = s.mem[d.Addr : d.Addr+uint64(d.Len) : end]
			bytes += uint64(d.Len)
			n++
			continue
		}
		// A frame in several descriptors: the kernel publishes all of
		// them together, but our view of the ring may end mid-frame.
		last := used
		for last < avail && s.rx.at(base+last).Options&unix.XDP_PKT_CONTD != 0 {
			last++
		}
		if last == avail {
			avail = s.rx.refreshPending()
			if last == avail {
				break
			}
			continue
		}
		if l, ok := s.linearize(base+used, base+last); ok {
			bufs[n] = l
			bytes += uint64(len(l))
			n++
		}
		used = last + 1
	}
	s.rx.release(used)
	s.st.rxFrames.Add(uint64(n))
	s.st.rxBytes.Add(bytes)
	return n
}

// linearize copies the frame held by descriptors first..last (inclusive) into
// a linear buffer and frees their chunks. It drops the frame if no linear
// buffer is free or the frame is longer than MaxFrame.
func (s *Socket) linearize(first, last uint32) ([]byte, bool) {
	total := uint64(0)
	for i := first; i != last+1; i++ {
		total += uint64(s.rx.at(i).Len)
	}
	var dst []byte
	ok := false
	switch {
	case total > uint64(s.linSize):
		s.st.rxTooLong.Add(1)
		s.st.rxDropped.Add(1)
	case len(s.linFree) == 0:
		s.st.rxNoLinear.Add(1)
		s.st.rxDropped.Add(1)
	default:
		li := s.linFree[len(s.linFree)-1]
		s.linFree = s.linFree[:len(s.linFree)-1]
		s.linOwner[li] = ownRx
		off := int(li) * int(s.linSize)
		dst = s.lin[off : off+int(total) : off+int(s.linSize)]
		ok = true
		s.st.rxLinearized.Add(1)
	}
	at := 0
	for i := first; i != last+1; i++ {
		d := s.rx.at(i)
		if !s.rxDescOK(d) {
			continue
		}
		if ok {
			at += copy(dst[at:], s.mem[d.Addr:d.Addr+uint64(d.Len)])
		}
		c := d.Addr >> s.shift
		s.um.owner[c] = ownFree
		s.rxFree = append(s.rxFree, c<<s.shift)
	}
	if ok && at != len(dst) { // a bad descriptor in the frame
		s.release(dst)
		s.st.rxDropped.Add(1)
		return nil, false
	}
	return dst, ok
}

// rxDescOK checks that an RX descriptor names one of our receive chunks that
// is in the kernel's hands, and stays inside it. A descriptor that does not
// is counted ("bad_desc") and its chunk left alone.
func (s *Socket) rxDescOK(d *unix.XDPDesc) bool {
	c := d.Addr >> s.shift
	if c < uint64(s.rxFirst) || c >= uint64(s.txFirst) || s.um.owner[c] != ownFill ||
		d.Addr+uint64(d.Len) > (c+1)<<s.shift {
		s.st.badDesc.Add(1)
		return false
	}
	return true
}

// Release implements link.Link. A buffer that is not the caller's (already
// released, transmitted, or not from this socket) is ignored and counted as
// "bad_release".
func (s *Socket) Release(bufs [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	for _, b := range bufs {
		if !s.release(b) {
			s.st.badRelease.Add(1)
		}
	}
	// Hand receive chunks straight back to the kernel.
	s.refill()
}

// release gives one buffer back and reports whether it was the caller's.
func (s *Socket) release(b []byte) bool {
	kind, idx := s.locate(b)
	switch kind {
	case bufRxChunk:
		if s.um.owner[idx] != ownRx {
			return false
		}
		s.um.owner[idx] = ownFree
		s.rxFree = append(s.rxFree, uint64(idx)<<s.shift)
	case bufTxSlot:
		c := s.slotChunk(idx)
		if s.um.owner[c] != ownAlloc {
			return false
		}
		s.um.owner[c] = ownFree
		s.txFree = append(s.txFree, idx)
	case bufLinear:
		if s.linOwner[idx] != ownRx {
			return false
		}
		s.linOwner[idx] = ownFree
		s.linFree = append(s.linFree, idx)
	default:
		return false
	}
	return true
}
