//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/link"
)

// Socket is one AF_XDP socket bound to one NIC queue. It implements link.Link.
//
// Concurrency: Alloc, Transmit, Receive and Release belong to one owner
// goroutine at a time (they also take an internal mutex, uncontended in that
// use, so that Close can wait for them). Wakeup, Info, Stats and Close may be
// called from any goroutine.
type Socket struct {
	// Set at open, read-only afterwards.
	fd         int
	info       link.Info
	copyMode   bool
	sg         bool
	busyPoll   bool
	um         *umem
	mem        []byte
	frameSize  uint64
	shift      uint32
	rxFirst    uint32 // first receive chunk
	txFirst    uint32 // first chunk of transmit slot 0; receive chunks are [rxFirst, txFirst)
	txEnd      uint32 // one past the last transmit chunk
	slotChunks uint32 // chunks per transmit slot
	maxFrame   uint32
	linSize    uint32 // size of one linear buffer
	maxKicks   int
	spin       time.Duration // Config.Spin
	dev        *Device       // for the XSKMAP entry; nil for a socket without a program
	queue      int

	// mu is held by Alloc, Transmit, Receive and Release for their whole
	// call, and by Close while it tears the rings down: it guards every
	// field below and the ring memory.
	mu       sync.Mutex
	fill     *addrRing
	comp     *addrRing
	rx       *descRing
	tx       *descRing
	rxFree   []uint64 // chunk addresses ready for the fill ring
	txFree   []uint32 // transmit slots ready for Alloc
	txLeft   []uint8  // per slot: descriptors the kernel has not completed
	lin      []byte   // linear buffers for multi-descriptor receives
	linFree  []uint32
	linOwner []owner
	pfd      [2]unix.PollFd
	efdBuf   [8]byte
	dead     unix.Errno // why the kernel unbound the socket (SO_ERROR), 0 if it did not

	closed atomic.Bool
	// fdMu guards efd against Wakeup racing with Close.
	fdMu sync.RWMutex
	efd  int

	closeOnce sync.Once
	closeErr  error

	st stats
}

// stats are the socket's own counters, written by the owner goroutine and
// read by Stats.
type stats struct {
	rxFrames, rxBytes, txFrames, txBytes        atomic.Uint64
	rxDropped, txDropped, txNoBuffers, wakeups  atomic.Uint64
	rxLinearized, rxNoLinear, rxTooLong         atomic.Uint64
	badRelease, badTransmit, badDesc, txTooLong atomic.Uint64
	kickErrors                                  atomic.Uint64
}

var _ link.Link = (*Socket)(nil)

// socketParams is what newSocket needs from Open.
type socketParams struct {
	info       link.Info
	um         *umem
	sharedFD   int // socket holding the UMEM registration, or -1 to register it
	mode       string
	sg         bool
	ringSize   uint32
	first      uint32 // first chunk of this socket's range
	rxFrames   uint32
	txSlots    uint32
	slotChunks uint32
	linBuffers uint32
	busyPoll   time.Duration
	busyBudget int
	busyWait   time.Duration // how long to retry bind on EBUSY
	spin       time.Duration
}

// newSocket creates, configures and binds one socket. On error it leaves
// nothing behind.
func newSocket(p socketParams) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, classify("create AF_XDP socket", err)
	}
	p.um.ref()
	s := &Socket{
		fd:         fd,
		efd:        -1,
		info:       p.info,
		sg:         p.sg,
		um:         p.um,
		mem:        p.um.mem,
		frameSize:  uint64(p.um.frameSize),
		shift:      p.um.shift,
		rxFirst:    p.first,
		txFirst:    p.first + p.rxFrames,
		slotChunks: p.slotChunks,
		maxFrame:   uint32(p.info.MaxFrame),
		queue:      p.info.Queue,
		busyPoll:   p.busyPoll > 0,
		maxKicks:   int(p.ringSize)/8 + 64,
		spin:       p.spin,
	}
	s.txEnd = s.txFirst + p.txSlots*p.slotChunks
	defer func() {
		if err != nil {
			s.teardown()
		}
	}()

	if p.sharedFD < 0 {
		if err := p.um.register(fd); err != nil {
			return nil, err
		}
	}
	for _, r := range []struct {
		opt  int
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, "completion"},
		{unix.XDP_RX_RING, "rx"},
		{unix.XDP_TX_RING, "tx"},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, int(p.ringSize)); err != nil {
			return nil, classify("set "+r.name+" ring size", err)
		}
	}
	off, err := mmapOffsets(fd)
	if err != nil {
		return nil, classify("get mmap offsets", err)
	}
	if s.fill, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, p.ringSize, true); err != nil {
		return nil, fmt.Errorf("fill ring: %w", err)
	}
	if s.comp, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, p.ringSize, false); err != nil {
		return nil, fmt.Errorf("completion ring: %w", err)
	}
	if s.rx, err = mapDescRing(fd, unix.XDP_PGOFF_RX_RING, off.Rx, p.ringSize, false); err != nil {
		return nil, fmt.Errorf("rx ring: %w", err)
	}
	if s.tx, err = mapDescRing(fd, unix.XDP_PGOFF_TX_RING, off.Tx, p.ringSize, true); err != nil {
		return nil, fmt.Errorf("tx ring: %w", err)
	}

	// Free lists: every receive chunk, every transmit slot.
	s.rxFree = make([]uint64, 0, p.rxFrames)
	for c := s.txFirst; c > s.rxFirst; c-- {
		s.rxFree = append(s.rxFree, uint64(c-1)<<s.shift)
		s.um.owner[c-1] = ownFree
	}
	s.txFree = make([]uint32, 0, p.txSlots)
	for i := p.txSlots; i > 0; i-- {
		s.txFree = append(s.txFree, i-1)
		s.um.owner[s.slotChunk(i-1)] = ownFree
	}
	s.txLeft = make([]uint8, p.txSlots)
	if p.sg {
		s.linSize = s.maxFrame
		s.lin = make([]byte, int(p.linBuffers)*int(s.linSize))
		s.linOwner = make([]owner, p.linBuffers)
		s.linFree = make([]uint32, 0, p.linBuffers)
		for i := p.linBuffers; i > 0; i-- {
			s.linFree = append(s.linFree, i-1)
		}
	}
	// Give the kernel receive buffers before binding, so the first frames
	// find some.
	s.refill()

	flags := uint16(0)
	if p.sharedFD >= 0 {
		flags = unix.XDP_SHARED_UMEM // mode, wakeup and SG come from the UMEM's owner
	} else {
		flags = unix.XDP_USE_NEED_WAKEUP
		if p.sg {
			flags |= unix.XDP_USE_SG
		}
		switch p.mode {
		case ModeCopy:
			flags |= unix.XDP_COPY
		case ModeZeroCopy:
			flags |= unix.XDP_ZEROCOPY
		}
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(p.info.Index), QueueID: uint32(p.info.Queue)}
	if p.sharedFD >= 0 {
		sa.SharedUmemFD = uint32(p.sharedFD)
	}
	if err := bindRetry(fd, sa, p.busyWait); err != nil {
		if p.sg && p.sharedFD < 0 && errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("bind AF_XDP socket to %s queue %d with multi-buffer (XDP_USE_SG, Linux 6.6+, needed above %d-byte frames): %w: %w",
				p.info.Name, p.info.Queue, p.um.frameSize-p.um.headroom-unix.XDP_PACKET_HEADROOM, ErrMTU, err)
		}
		if p.mode == ModeZeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
			return nil, fmt.Errorf("bind AF_XDP socket to %s queue %d: %w: %w", p.info.Name, p.info.Queue, ErrNoZeroCopy, err)
		}
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("bind AF_XDP socket to %s queue %d (does the interface have that queue? see ethtool -l): %w",
				p.info.Name, p.info.Queue, err)
		}
		return nil, classify(fmt.Sprintf("bind AF_XDP socket to %s queue %d", p.info.Name, p.info.Queue), err)
	}
	var opts uint32
	if err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_OPTIONS, ptrOf(&opts), 4); err != nil {
		return nil, classify("get xdp options", err)
	}
	if opts&unix.XDP_OPTIONS_ZEROCOPY != 0 {
		s.info.Mode = ModeZeroCopy
	} else {
		s.info.Mode = ModeCopy
		s.copyMode = true
	}
	// In copy mode the kernel sends at most max_tx_budget frames per
	// sendto (32 by default); let one kick drain the ring. Older kernels do
	// not know the option: then we just kick more often.
	if s.copyMode {
		_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(p.ringSize))
	}
	if p.busyPoll > 0 {
		us := int(p.busyPoll / time.Microsecond)
		if us < 1 {
			us = 1
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, 1); err != nil {
			return nil, classify("set SO_PREFER_BUSY_POLL", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, us); err != nil {
			return nil, classify("set SO_BUSY_POLL", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL_BUDGET, p.busyBudget); err != nil {
			return nil, classify("set SO_BUSY_POLL_BUDGET", err)
		}
	}
	s.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create eventfd: %w", err)
	}
	s.pfd = [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(s.efd), Events: unix.POLLIN}}
	return s, nil
}

// bindRetry binds, retrying for up to wait while the queue is busy (a socket
// closed a moment ago is released by the kernel asynchronously).
func bindRetry(fd int, sa *unix.SockaddrXDP, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	delay := time.Millisecond
	for {
		err := unix.Bind(fd, sa)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// FD returns the socket's file descriptor, for registering it in an XSKMAP.
func (s *Socket) FD() int { return s.fd }

// Info describes the socket; Mode is ModeZeroCopy or ModeCopy.
func (s *Socket) Info() link.Info { return s.info }

// slotChunk returns the first chunk of transmit slot i.
func (s *Socket) slotChunk(i uint32) uint32 { return s.txFirst + i*s.slotChunks }

// bufKind says where a buffer given back to us lives.
type bufKind uint8

const (
	bufForeign bufKind = iota
	bufRxChunk         // a receive chunk; idx is the chunk
	bufTxSlot          // a transmit slot; idx is the slot
	bufLinear          // a linear buffer; idx is its number
)

// locate finds which of our buffers b is (by address: b may be any
// subslice of what we handed out).
func (s *Socket) locate(b []byte) (bufKind, uint32) {
	if cap(b) == 0 {
		return bufForeign, 0
	}
	p := bufAddr(b)
	if off := p - s.um.base; off < uintptr(len(s.mem)) {
		c := uint32(off >> s.shift)
		switch {
		case c >= s.rxFirst && c < s.txFirst:
			return bufRxChunk, c
		case c >= s.txFirst && c < s.txEnd:
			return bufTxSlot, (c - s.txFirst) / s.slotChunks
		}
		return bufForeign, 0
	}
	if off := p - memBase(s.lin); len(s.lin) > 0 && off < uintptr(len(s.lin)) {
		return bufLinear, uint32(off) / s.linSize
	}
	return bufForeign, 0
}

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
		return 0, nil
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
		r, e := ppoll(s.pfd[:], &ts)
		if e != 0 && e != unix.EINTR {
			return 0, fmt.Errorf("poll AF_XDP socket: %w", e)
		}
		if s.closed.Load() {
			return 0, link.ErrClosed
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

// Alloc implements link.Link: transmit buffers of length MaxFrame, each in
// one UMEM slot (several consecutive chunks when MaxFrame exceeds a chunk).
func (s *Socket) Alloc(bufs [][]byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0
	}
	if len(s.txFree) < len(bufs) {
		s.reap()
		if len(s.txFree) < len(bufs) && s.copyMode && s.tx.outstanding() > 0 {
			s.kickTX()
			s.reap()
		}
	}
	n := min(len(bufs), len(s.txFree))
	hr := uint64(s.um.headroom)
	for i := range n {
		slot := s.txFree[len(s.txFree)-1-i]
		c := s.slotChunk(slot)
		s.um.owner[c] = ownAlloc
		off := uint64(c)<<s.shift + hr
		end := off + uint64(s.maxFrame)
		bufs[i] = s.mem[off:end:end]
	}
	s.txFree = s.txFree[:len(s.txFree)-n]
	if n < len(bufs) {
		s.st.txNoBuffers.Add(1)
	}
	return n
}

// reap takes transmitted chunks off the completion ring.
func (s *Socket) reap() {
	n := s.comp.pending()
	if n == 0 {
		return
	}
	base := s.comp.cachedCons
	for i := range n {
		c := uint32(s.comp.get(base+i) >> s.shift)
		switch {
		case c >= s.txFirst && c < s.txEnd:
			slot := (c - s.txFirst) / s.slotChunks
			first := s.slotChunk(slot)
			if s.um.owner[first] != ownTx || s.txLeft[slot] == 0 {
				s.st.badDesc.Add(1)
				continue
			}
			s.txLeft[slot]--
			if s.txLeft[slot] == 0 {
				s.um.owner[first] = ownFree
				s.txFree = append(s.txFree, slot)
			}
		case c >= s.rxFirst && c < s.txFirst:
			if s.um.owner[c] != ownTx {
				s.st.badDesc.Add(1)
				continue
			}
			s.um.owner[c] = ownFree
			s.rxFree = append(s.rxFree, uint64(c)<<s.shift)
		default:
			s.st.badDesc.Add(1)
		}
	}
	s.comp.release(n)
}

// Transmit implements link.Link. Buffers from Alloc (resliced as the frame
// needs) and received buffers that fit one chunk (for in-place replies) can
// be sent; a received frame that was linearized (longer than a chunk) cannot:
// copy it into an Alloc'd buffer. A frame longer than a chunk goes out as
// several descriptors chained with XDP_PKT_CONTD, without copying.
func (s *Socket) Transmit(bufs [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	s.reap()
	var sent int
	var bytes uint64
	var err error
	for _, b := range bufs {
		kind, idx := s.locate(b)
		ok := false
		switch kind {
		case bufTxSlot:
			ok = s.um.owner[s.slotChunk(idx)] == ownAlloc
		case bufRxChunk:
			ok = s.um.owner[idx] == ownRx
		case bufLinear:
			// Not in the UMEM: give it back and refuse it.
			s.release(b)
		}
		if !ok {
			s.st.badTransmit.Add(1)
			s.st.txDropped.Add(1)
			err = fmt.Errorf("transmit: %w", ErrBadBuffer)
			continue
		}
		addr := uint64(bufAddr(b) - s.um.base)
		l := uint64(len(b))
		var limit uint64 // end of the memory this buffer may use
		if kind == bufTxSlot {
			limit = uint64(s.slotChunk(idx)+s.slotChunks) << s.shift
		} else {
			limit = uint64(idx+1) << s.shift
		}
		nd := uint32((addr+l-1)>>s.shift-addr>>s.shift) + 1
		if l == 0 {
			s.release(b)
			s.st.txDropped.Add(1)
			err = fmt.Errorf("transmit: empty frame")
			continue
		}
		if l > uint64(s.maxFrame) || addr+l > limit || (nd > 1 && !s.sg) {
			s.release(b)
			s.st.txTooLong.Add(1)
			s.st.txDropped.Add(1)
			err = fmt.Errorf("transmit %d bytes (max %d): %w", l, s.maxFrame, ErrFrameTooLarge)
			continue
		}
		got, ri := s.tx.reserve(nd)
		if got < nd {
			// Ring full: push out what we have and make room.
			s.tx.cachedProd -= got
			s.tx.submit()
			if kerr := s.kickTX(); kerr != nil {
				err = kerr
			}
			s.reap()
			got, ri = s.tx.reserve(nd)
			if got < nd {
				s.tx.cachedProd -= got
				s.release(b)
				s.st.txDropped.Add(1)
				continue
			}
		}
		for i := range nd {
			d := s.tx.at(ri + i)
			chunkEnd := (addr>>s.shift + 1) << s.shift
			seg := min(l, chunkEnd-addr)
			d.Addr, d.Len, d.Options = addr, uint32(seg), 0
			if seg < l {
				d.Options = unix.XDP_PKT_CONTD
			}
			addr += seg
			l -= seg
		}
		if kind == bufTxSlot {
			s.um.owner[s.slotChunk(idx)] = ownTx
			s.txLeft[idx] = uint8(nd)
		} else {
			s.um.owner[idx] = ownTx
		}
		sent++
		bytes += uint64(len(b))
	}
	if sent > 0 {
		s.tx.submit()
		if kerr := s.kickTX(); kerr != nil {
			err = kerr
		}
	}
	s.st.txFrames.Add(uint64(sent))
	s.st.txBytes.Add(bytes)
	return sent, err
}

// kickTX tells the kernel to send what the TX ring holds. In copy mode the
// kernel transmits only inside sendto, a bounded batch per call, and says
// EAGAIN while descriptors remain (or the completion ring is full), so we
// loop, reaping completions, until it has taken them all.
func (s *Socket) kickTX() error {
	if !s.copyMode {
		if !s.tx.needWakeup() {
			return nil
		}
		s.st.wakeups.Add(1)
		switch e := kick(s.fd); e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			return nil
		default:
			s.st.kickErrors.Add(1)
			return fmt.Errorf("kick tx: %w", e)
		}
	}
	for range s.maxKicks {
		s.st.wakeups.Add(1)
		switch e := kick(s.fd); e {
		case 0:
			return nil
		case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			// EBUSY/ENOBUFS: the device dropped a frame (counted by
			// the kernel); keep going with the rest.
			s.reap()
			if s.tx.outstanding() == 0 {
				return nil
			}
		default:
			s.st.kickErrors.Add(1)
			return fmt.Errorf("kick tx: %w", e)
		}
	}
	return nil
}

// Wakeup implements link.Link.
func (s *Socket) Wakeup() {
	s.fdMu.RLock()
	defer s.fdMu.RUnlock()
	if s.efd >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(s.efd, one[:])
	}
}

// Stats implements link.Link; Extra holds the kernel's XDP_STATISTICS and the
// socket's own event counters.
func (s *Socket) Stats() link.Stats {
	st := link.Stats{
		RxFrames:    s.st.rxFrames.Load(),
		RxBytes:     s.st.rxBytes.Load(),
		TxFrames:    s.st.txFrames.Load(),
		TxBytes:     s.st.txBytes.Load(),
		RxDropped:   s.st.rxDropped.Load(),
		TxDropped:   s.st.txDropped.Load(),
		TxNoBuffers: s.st.txNoBuffers.Load(),
		Wakeups:     s.st.wakeups.Load(),
		Extra: map[string]uint64{
			"rx_linearized":       s.st.rxLinearized.Load(),
			"rx_linear_exhausted": s.st.rxNoLinear.Load(),
			"rx_too_long":         s.st.rxTooLong.Load(),
			"tx_too_long":         s.st.txTooLong.Load(),
			"bad_release":         s.st.badRelease.Load(),
			"bad_transmit":        s.st.badTransmit.Load(),
			"bad_desc":            s.st.badDesc.Load(),
			"kick_errors":         s.st.kickErrors.Load(),
		},
	}
	s.fdMu.RLock()
	defer s.fdMu.RUnlock()
	if s.efd < 0 { // closed
		return st
	}
	if k, err := xdpStatistics(s.fd); err == nil {
		st.RxDropped += k.Rx_dropped + k.Rx_invalid_descs + k.Rx_ring_full
		st.Extra["rx_dropped"] = k.Rx_dropped
		st.Extra["rx_invalid_descs"] = k.Rx_invalid_descs
		st.Extra["tx_invalid_descs"] = k.Tx_invalid_descs
		st.Extra["rx_ring_full"] = k.Rx_ring_full
		st.Extra["rx_fill_ring_empty_descs"] = k.Rx_fill_ring_empty_descs
		st.Extra["tx_ring_empty_descs"] = k.Tx_ring_empty_descs
	}
	return st
}

// Close implements link.Link: it removes the socket from the XDP program's
// map, closes it and unmaps its rings. It waits for a Receive in progress to
// return (with ErrClosed). It is idempotent.
func (s *Socket) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.Wakeup()
		s.mu.Lock()
		defer s.mu.Unlock()
		var errs []error
		if s.dev != nil {
			errs = append(errs, s.dev.clearSocket(s.queue))
		}
		errs = append(errs, s.teardown())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// teardown releases everything newSocket acquired; it tolerates a partly
// built socket.
func (s *Socket) teardown() error {
	var errs []error
	s.fdMu.Lock()
	if s.efd >= 0 {
		errs = append(errs, unix.Close(s.efd))
		s.efd = -1
	}
	s.fdMu.Unlock()
	if s.fill != nil {
		errs = append(errs, s.fill.unmap())
	}
	if s.comp != nil {
		errs = append(errs, s.comp.unmap())
	}
	if s.rx != nil {
		errs = append(errs, s.rx.unmap())
	}
	if s.tx != nil {
		errs = append(errs, s.tx.unmap())
	}
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	if s.um != nil {
		errs = append(errs, s.um.unref())
		s.um = nil
	}
	s.closed.Store(true)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close AF_XDP socket: %w", err)
	}
	return nil
}
