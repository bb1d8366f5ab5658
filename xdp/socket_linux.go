//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/link"
)

// Socket is one AF_XDP socket bound to one NIC queue. It implements link.Link.
//
// Concurrency: Alloc, Transmit, Receive and Release belong to one owner
// goroutine at a time (they also take an internal mutex, so that Close can
// wait for them). One exception: while the owner sleeps in Receive (which
// does not hold the mutex then), another goroutine may call Alloc,
// Transmit and Release; see ConcurrentTransmit. Wakeup, Info, Stats and
// Close may be called from any goroutine.
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
	// deadAt is when a Receive that found nothing and did not wait may
	// next look at SO_ERROR (checkDeadEvery).
	deadAt time.Time

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

// ConcurrentTransmit reports true (link.ConcurrentTransmitter): Alloc,
// Transmit and Release may be called by one goroutine while the owner waits
// in Receive, so that a caller can send at once instead of waking the owner
// to do it.
func (s *Socket) ConcurrentTransmit() bool { return true }

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
