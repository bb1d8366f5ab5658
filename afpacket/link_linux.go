package afpacket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/link"
	"golang.org/x/sys/unix"
)

// Buffer states.
const (
	bufFree     = 0 // in a free list, owned by the link
	bufCaller   = 1 // handed out by Alloc or Receive
	bufInFlight = 2 // queued in the current Transmit call
)

// ctlSize is the control buffer each received message gets: room for one
// PACKET_AUXDATA message.
var ctlSize = unix.CmsgSpace(sizeofAuxdata)

// Link is an AF_PACKET link.Link. It follows link.Link's concurrency
// contract: Alloc, Transmit, Receive and Release from one goroutine at a
// time; Wakeup, Info, Stats and Close from any goroutine.
type Link struct {
	info   link.Info
	cfg    Config
	fd     int
	efd    int
	txWait time.Duration

	// opMu is held by Alloc, Transmit, Receive and Release, and by Close
	// while it releases the sockets and the pool, so Close never pulls a
	// descriptor out from under a call in progress. The owner goroutine
	// never contends for it; Close waits at most one Receive wait, which it
	// cuts short through the eventfd.
	opMu sync.Mutex
	// The buffer pool: slots of slotSize bytes in one slab; slots
	// [0, rxFrames) receive, the rest transmit. Guarded by opMu.
	slab     []byte
	slotSize int
	rxFrames int
	state    []uint8
	rxFree   []int32 // stacks of free slot indexes
	txFree   []int32
	// Scratch for recvmmsg and sendmmsg, guarded by opMu.
	rxMsgs []mmsghdr
	rxIov  []unix.Iovec
	rxCtl  []byte
	rxPost []int32
	txMsgs []mmsghdr
	txIov  []unix.Iovec
	txIdx  []int32
	pfd    [2]unix.PollFd
	ts     unix.Timespec
	evbuf  [8]byte

	// stateMu guards closed, and the descriptors' validity for Wakeup and
	// Stats, which do not take opMu.
	stateMu sync.RWMutex
	closed  bool
	isDone  atomic.Bool // closed, readable without stateMu
	one     [8]byte     // the eventfd increment Wakeup writes

	// statsMu guards the kernel counters, which PACKET_STATISTICS resets
	// on every read and Stats therefore accumulates.
	statsMu       sync.Mutex
	kernelPackets uint64
	kernelDrops   uint64

	rxCount, rxBytes, txCount, txBytes        atomic.Uint64
	rxDropped, txDropped, txNoBuffers, wakeup atomic.Uint64
	rxTruncated, rxNoBuffers, badRelease      atomic.Uint64
	rxVLANRestored                            atomic.Uint64
	txRetries, recvCalls, sendCalls           atomic.Uint64
}

var _ link.Link = (*Link)(nil)

// htons converts a 16-bit value to network byte order for sockaddr fields.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// Open opens an AF_PACKET link on the interface ifname in the calling
// thread's network namespace.
func Open(ifname string, cfg Config) (_ *Link, err error) {
	if cfg.RxFrames == 0 {
		cfg.RxFrames = DefaultRxFrames
	}
	if cfg.TxFrames == 0 {
		cfg.TxFrames = DefaultTxFrames
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.SocketBuffer == 0 {
		cfg.SocketBuffer = DefaultSocketBuffer
	}
	if cfg.TxWait == 0 {
		cfg.TxWait = DefaultTxWait
	}
	switch {
	case cfg.RxFrames < 1 || cfg.TxFrames < 1 || cfg.RxFrames+cfg.TxFrames > 1<<20:
		return nil, fmt.Errorf("afpacket: open %s: %d rx and %d tx frames out of range", ifname, cfg.RxFrames, cfg.TxFrames)
	case cfg.Batch < 1 || cfg.Batch > 1024:
		return nil, fmt.Errorf("afpacket: open %s: batch %d out of range 1..1024", ifname, cfg.Batch)
	case cfg.SocketBuffer < 0 || cfg.TxWait < 0:
		return nil, fmt.Errorf("afpacket: open %s: negative socket buffer or tx wait", ifname)
	}

	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("afpacket: open %q: %w: %w", ifname, ErrNoInterface, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afpacket: open %q: %w: hardware address %q is not Ethernet", ifname, ErrNoInterface, ifi.HardwareAddr)
	}

	l := &Link{cfg: cfg, fd: -1, efd: -1, txWait: cfg.TxWait}
	defer func() {
		if err != nil {
			l.closeFDs()
		}
	}()

	// Protocol 0: the socket is on no receive path until bind.
	l.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("afpacket: open %s: socket: %w", ifname, classify(err))
	}
	// The filter's first two instructions reject outgoing frames; the
	// rest, whose jumps only go forward, is the filter that keeps them.
	filter := roceFilter[:]
	if cfg.Outgoing {
		filter = roceFilter[outgoingCheckLen:]
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(l.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return nil, fmt.Errorf("afpacket: open %s: attach socket filter: %w", ifname, classify(err))
	}
	// Best effort: the filter rejects outgoing frames anyway, this only
	// saves the kernel cloning them for us (Linux 4.20).
	if !cfg.Outgoing {
		if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil &&
			!errors.Is(err, unix.ENOPROTOOPT) {
			return nil, fmt.Errorf("afpacket: open %s: PACKET_IGNORE_OUTGOING: %w", ifname, classify(err))
		}
	}
	if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		return nil, fmt.Errorf("afpacket: open %s: PACKET_AUXDATA: %w", ifname, classify(err))
	}
	if cfg.QdiscBypass {
		if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return nil, fmt.Errorf("afpacket: open %s: PACKET_QDISC_BYPASS: %w", ifname, classify(err))
		}
	}
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if err := unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, o[0], cfg.SocketBuffer); err != nil {
			// Without CAP_NET_ADMIN: as much as net.core.[rw]mem_max allows.
			if err := unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, o[1], cfg.SocketBuffer); err != nil {
				return nil, fmt.Errorf("afpacket: open %s: socket buffer: %w", ifname, err)
			}
		}
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(l.fd, sa); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("afpacket: open %s: bind: %w: %w", ifname, ErrNoInterface, err)
		}
		return nil, fmt.Errorf("afpacket: open %s: bind: %w", ifname, classify(err))
	}
	l.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("afpacket: open %s: eventfd: %w", ifname, err)
	}
	binary.NativeEndian.PutUint64(l.one[:], 1)

	maxFrame := ifi.MTU + ethHeaderLen + vlanTagLen
	l.info = link.Info{
		Kind:     "af_packet",
		Mode:     "recvmmsg",
		Name:     ifi.Name,
		Index:    ifi.Index,
		Queue:    0,
		MAC:      append(net.HardwareAddr(nil), ifi.HardwareAddr...),
		MTU:      ifi.MTU,
		MaxFrame: maxFrame,
	}
	l.initPool(maxFrame)
	// Nothing can be queued (the socket had no protocol before its filter
	// was in place), but make sure: drop whatever is there.
	l.drain()
	return l, nil
}

// classify adds the matching sentinel error to a socket error.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EPROTONOSUPPORT):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return err
}

// initPool allocates the slab and the scratch arrays.
func (l *Link) initPool(maxFrame int) {
	cfg := l.cfg
	// Room for the frame and the tag Receive may put back, 64-byte aligned.
	l.slotSize = (headroom + maxFrame + 63) &^ 63
	total := cfg.RxFrames + cfg.TxFrames
	l.slab = make([]byte, total*l.slotSize)
	l.rxFrames = cfg.RxFrames
	l.state = make([]uint8, total)
	l.rxFree = make([]int32, 0, cfg.RxFrames)
	for i := cfg.RxFrames - 1; i >= 0; i-- {
		l.rxFree = append(l.rxFree, int32(i))
	}
	l.txFree = make([]int32, 0, cfg.TxFrames)
	for i := total - 1; i >= cfg.RxFrames; i-- {
		l.txFree = append(l.txFree, int32(i))
	}
	l.rxMsgs = make([]mmsghdr, cfg.Batch)
	l.rxIov = make([]unix.Iovec, cfg.Batch)
	l.rxCtl = make([]byte, cfg.Batch*ctlSize)
	l.rxPost = make([]int32, cfg.Batch)
	l.txMsgs = make([]mmsghdr, cfg.Batch)
	l.txIov = make([]unix.Iovec, cfg.Batch)
	l.txIdx = make([]int32, cfg.Batch)
	for i := range l.rxMsgs {
		l.rxMsgs[i].hdr.Iov = &l.rxIov[i]
		l.rxMsgs[i].hdr.SetIovlen(1)
		l.txMsgs[i].hdr.Iov = &l.txIov[i]
		l.txMsgs[i].hdr.SetIovlen(1)
	}
}

// drain discards every queued frame.
func (l *Link) drain() {
	for {
		k := l.post(len(l.rxMsgs))
		r, e := recvmmsg(l.fd, l.rxMsgs[:k], unix.MSG_DONTWAIT)
		l.unpost(0, k)
		if e != 0 || r == 0 {
			return
		}
	}
}

// post takes up to k free receive buffers and points the first of rxMsgs at
// them; it returns how many.
func (l *Link) post(k int) int {
	k = min(k, len(l.rxMsgs), len(l.rxFree))
	for i := 0; i < k; i++ {
		idx := l.rxFree[len(l.rxFree)-1]
		l.rxFree = l.rxFree[:len(l.rxFree)-1]
		l.rxPost[i] = idx
		off := int(idx)*l.slotSize + headroom
		setIov(&l.rxIov[i], l.slab[off:off+l.info.MaxFrame])
		h := &l.rxMsgs[i].hdr
		h.Control = &l.rxCtl[i*ctlSize]
		h.SetControllen(ctlSize)
		h.Flags = 0
	}
	return k
}

// unpost returns the posted buffers rxPost[from:to] to the free list.
func (l *Link) unpost(from, to int) {
	l.rxFree = append(l.rxFree, l.rxPost[from:to]...)
}

// Info describes the link.
func (l *Link) Info() link.Info {
	info := l.info
	info.MAC = append(net.HardwareAddr(nil), l.info.MAC...)
	return info
}

// Alloc hands out free transmit buffers of length Info().MaxFrame.
func (l *Link) Alloc(bufs [][]byte) int {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.isDone.Load() {
		return 0
	}
	n := min(len(bufs), len(l.txFree))
	size := l.info.MaxFrame
	for i := 0; i < n; i++ {
		idx := l.txFree[len(l.txFree)-1]
		l.txFree = l.txFree[:len(l.txFree)-1]
		l.state[idx] = bufCaller
		off := int(idx) * l.slotSize
		bufs[i] = l.slab[off : off+size : off+size]
	}
	if n < len(bufs) {
		l.txNoBuffers.Add(1)
	}
	return n
}

// Release gives buffers back to the link. Buffers the caller does not own
// are ignored (and counted as "bad_release" in Stats.Extra).
func (l *Link) Release(bufs [][]byte) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.isDone.Load() {
		return
	}
	for _, b := range bufs {
		idx, ok := slotOf(l.slab, l.slotSize, b)
		if !ok || l.state[idx] != bufCaller {
			l.badRelease.Add(1)
			continue
		}
		l.free(int32(idx))
	}
}

// free returns slot idx to its free list.
func (l *Link) free(idx int32) {
	l.state[idx] = bufFree
	if int(idx) < l.rxFrames {
		l.rxFree = append(l.rxFree, idx)
	} else {
		l.txFree = append(l.txFree, idx)
	}
}

// Transmit sends frames with sendmmsg and takes every buffer back. When the
// socket buffer or the device queue stays full for Config.TxWait it drops
// the rest of the batch and counts them in TxDropped without an error (a
// transient condition); frames of a bad size or buffers the caller does not
// own are dropped with ErrFrameSize or ErrNotOwned, and a frame the kernel
// refuses with the kernel's error.
func (l *Link) Transmit(bufs [][]byte) (int, error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.isDone.Load() {
		return 0, link.ErrClosed
	}
	var firstErr error
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	sent := 0
	for i := 0; i < len(bufs); {
		m := 0
		for ; i < len(bufs) && m < len(l.txMsgs); i++ {
			b := bufs[i]
			idx, ok := slotOf(l.slab, l.slotSize, b)
			if !ok || l.state[idx] != bufCaller {
				l.txDropped.Add(1)
				note(fmt.Errorf("afpacket: transmit frame %d: %w", i, ErrNotOwned))
				continue
			}
			if !l.sizeOK(b) {
				l.txDropped.Add(1)
				l.free(int32(idx))
				note(fmt.Errorf("afpacket: transmit frame %d of %d bytes (max %d with an 802.1Q tag): %w",
					i, len(b), l.info.MaxFrame, ErrFrameSize))
				continue
			}
			l.state[idx] = bufInFlight
			setIov(&l.txIov[m], b)
			l.txIdx[m] = int32(idx)
			m++
		}
		if m == 0 {
			continue
		}
		n, err := l.sendBatch(m)
		sent += n
		if err != nil {
			note(err)
		}
		for _, idx := range l.txIdx[:m] {
			l.free(idx)
		}
	}
	return sent, firstErr
}

// sizeOK reports whether the kernel will take frame b: at least an
// Ethernet header, at most MTU+14 bytes, or MTU+18 with an 802.1Q tag
// (packet_extra_vlan_len_allowed in net/packet/af_packet.c).
func (l *Link) sizeOK(b []byte) bool {
	if len(b) < ethHeaderLen || len(b) > l.info.MaxFrame {
		return false
	}
	if len(b) > l.info.MTU+ethHeaderLen {
		return b[12] == 0x81 && b[13] == 0x00
	}
	return true
}

// sendBatch sends txMsgs[:m], retrying while the socket buffer or device
// queue is full for up to txWait, and returns how many were sent.
func (l *Link) sendBatch(m int) (int, error) {
	var firstErr error
	var deadline time.Time
	sent, off := 0, 0
	for off < m {
		l.sendCalls.Add(1)
		n, e := sendmmsg(l.fd, l.txMsgs[off:m], unix.MSG_DONTWAIT)
		if e == 0 {
			for _, iov := range l.txIov[off : off+n] {
				l.txBytes.Add(uint64(iov.Len))
			}
			l.txCount.Add(uint64(n))
			sent += n
			off += n
			continue
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.ENOBUFS:
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(l.txWait)
			} else if now.After(deadline) {
				// Transient: counted, not reported as an error.
				l.txDropped.Add(uint64(m - off))
				return sent, firstErr
			}
			l.txRetries.Add(1)
			if e == unix.EAGAIN {
				l.waitWritable(deadline.Sub(now))
			} else {
				runtime.Gosched()
			}
		default:
			// This frame failed for a reason of its own: drop it, go on.
			l.txDropped.Add(1)
			if firstErr == nil {
				firstErr = fmt.Errorf("afpacket: transmit: %w", e)
			}
			off++
		}
	}
	return sent, firstErr
}

// waitWritable waits up to d for room in the socket's send buffer.
func (l *Link) waitWritable(d time.Duration) {
	l.pfd[0] = unix.PollFd{Fd: int32(l.fd), Events: unix.POLLOUT}
	l.ts = unix.NsecToTimespec(int64(d))
	l.wakeup.Add(1)
	unix.Ppoll(l.pfd[:1], &l.ts, nil)
}

// Receive waits up to timeout for frames and returns the ready ones. When
// the caller holds every receive buffer it returns 0, nil at once, whatever
// the timeout (counted as "rx_no_buffers"): nothing can be received until
// the caller releases some.
func (l *Link) Receive(bufs [][]byte, timeout time.Duration) (int, error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.isDone.Load() {
		return 0, link.ErrClosed
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	n, err := l.recv(bufs)
	if n > 0 || err != nil || timeout == 0 {
		return n, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		tsp := (*unix.Timespec)(nil)
		if timeout > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return 0, nil
			}
			l.ts = unix.NsecToTimespec(int64(left))
			tsp = &l.ts
		}
		l.pfd[0] = unix.PollFd{Fd: int32(l.fd), Events: unix.POLLIN}
		l.pfd[1] = unix.PollFd{Fd: int32(l.efd), Events: unix.POLLIN}
		l.wakeup.Add(1)
		_, err := unix.Ppoll(l.pfd[:], tsp, nil)
		if l.isDone.Load() {
			return 0, link.ErrClosed
		}
		if err != nil && err != unix.EINTR {
			return 0, fmt.Errorf("afpacket: receive: poll: %w", err)
		}
		woken := l.pfd[1].Revents&unix.POLLIN != 0
		if woken {
			unix.Read(l.efd, l.evbuf[:]) // reset the eventfd
		}
		if l.pfd[0].Revents != 0 || woken {
			n, err := l.recv(bufs)
			if n > 0 || err != nil || woken {
				return n, err
			}
		}
	}
}

// recv takes the frames that are ready, without waiting.
func (l *Link) recv(bufs [][]byte) (int, error) {
	k := l.post(len(bufs))
	if k == 0 {
		l.rxNoBuffers.Add(1)
		return 0, nil
	}
	l.recvCalls.Add(1)
	r, e := recvmmsg(l.fd, l.rxMsgs[:k], unix.MSG_DONTWAIT)
	if e != 0 {
		l.unpost(0, k)
		if e == unix.EAGAIN || e == unix.EINTR {
			return 0, nil
		}
		return 0, fmt.Errorf("afpacket: receive: %w", e)
	}
	out := 0
	for i := 0; i < r; i++ {
		idx := l.rxPost[i]
		m := &l.rxMsgs[i]
		n := int(m.n)
		if m.hdr.Flags&unix.MSG_TRUNC != 0 || n < ethHeaderLen {
			// Larger than the MTU allows (or a runt the filter let by).
			l.rxTruncated.Add(1)
			l.rxDropped.Add(1)
			l.rxFree = append(l.rxFree, idx)
			continue
		}
		slot := int(idx) * l.slotSize
		start := slot + headroom
		ctl := l.rxCtl[i*ctlSize : i*ctlSize+int(m.hdr.Controllen)]
		if tci, tpid, ok := auxVLAN(ctl); ok {
			// Put the tag back between the addresses and the EtherType.
			f := l.slab[slot : slot+headroom+n]
			copy(f[0:12], f[headroom:headroom+12])
			binary.BigEndian.PutUint16(f[12:14], tpid)
			binary.BigEndian.PutUint16(f[14:16], tci)
			start, n = slot, n+vlanTagLen
			l.rxVLANRestored.Add(1)
		}
		l.state[idx] = bufCaller
		bufs[out] = l.slab[start : start+n : slot+l.slotSize]
		out++
		l.rxBytes.Add(uint64(n))
	}
	l.unpost(r, k)
	l.rxCount.Add(uint64(out))
	return out, nil
}

// FD returns the socket's descriptor, for waiting until it polls
// readable (poll(2), or Go's netpoller on a duplicate) and then calling
// Receive with a zero timeout. It is non-blocking; do not read from it.
func (l *Link) FD() int { return l.fd }

// Wakeup makes a waiting Receive return, or the next one not wait.
func (l *Link) Wakeup() {
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	if l.closed {
		return
	}
	unix.Write(l.efd, l.one[:])
}

// Stats returns the link's counters. Extra holds the kernel's
// PACKET_STATISTICS ("kernel_packets" accepted by the filter,
// "kernel_drops" lost because the socket buffer was full) and the link's
// own: "rx_truncated", "rx_vlan_restored" (frames whose 802.1Q tag was put
// back from PACKET_AUXDATA), "rx_no_buffers", "bad_release", "tx_retries",
// "recvmmsg_calls", "sendmmsg_calls".
func (l *Link) Stats() link.Stats {
	l.statsMu.Lock()
	l.stateMu.RLock()
	if !l.closed {
		if st, err := unix.GetsockoptTpacketStats(l.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			l.kernelPackets += uint64(st.Packets)
			l.kernelDrops += uint64(st.Drops)
		}
	}
	l.stateMu.RUnlock()
	kp, kd := l.kernelPackets, l.kernelDrops
	l.statsMu.Unlock()
	return link.Stats{
		RxFrames:    l.rxCount.Load(),
		RxBytes:     l.rxBytes.Load(),
		TxFrames:    l.txCount.Load(),
		TxBytes:     l.txBytes.Load(),
		RxDropped:   l.rxDropped.Load() + kd,
		TxDropped:   l.txDropped.Load(),
		TxNoBuffers: l.txNoBuffers.Load(),
		Wakeups:     l.wakeup.Load(),
		Extra: map[string]uint64{
			"kernel_packets":   kp,
			"kernel_drops":     kd,
			"rx_truncated":     l.rxTruncated.Load(),
			"rx_vlan_restored": l.rxVLANRestored.Load(),
			"rx_no_buffers":    l.rxNoBuffers.Load(),
			"bad_release":      l.badRelease.Load(),
			"tx_retries":       l.txRetries.Load(),
			"recvmmsg_calls":   l.recvCalls.Load(),
			"sendmmsg_calls":   l.sendCalls.Load(),
		},
	}
}

// Close closes the socket and releases the buffers; every buffer handed out
// becomes invalid. A Receive waiting in another goroutine returns
// link.ErrClosed. Close is idempotent.
func (l *Link) Close() error {
	l.stateMu.Lock()
	if l.closed {
		l.stateMu.Unlock()
		return nil
	}
	l.closed = true
	l.isDone.Store(true)
	unix.Write(l.efd, l.one[:]) // cut a waiting Receive short
	l.stateMu.Unlock()

	l.opMu.Lock()
	defer l.opMu.Unlock()
	// Fold the last kernel counters in before the socket goes.
	l.statsMu.Lock()
	if st, err := unix.GetsockoptTpacketStats(l.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		l.kernelPackets += uint64(st.Packets)
		l.kernelDrops += uint64(st.Drops)
	}
	l.statsMu.Unlock()
	err := l.closeFDs()
	l.slab, l.rxFree, l.txFree = nil, nil, nil
	return err
}

func (l *Link) closeFDs() error {
	var errs []error
	for _, fd := range []*int{&l.fd, &l.efd} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("afpacket: close: %w", err))
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
