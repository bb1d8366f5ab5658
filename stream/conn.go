package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/roce"
)

// ErrReset is wrapped by the errors of a connection whose QP failed: the
// peer vanished (retries exhausted) or refused an access.
var ErrReset = errors.New("stream: connection reset")

const (
	recvDepth = 128 // receive requests posted per connection (Q)
	sendDepth = 256 // send queue depth
	recvID    = 1 << 63
)

// Addr is a stream endpoint: the IP of the RoCE GID, the side channel's
// TCP port and the QP number.
type Addr struct {
	IP   netip.Addr
	Port int
	QPN  uint32
}

// Network returns "xroce".
func (a Addr) Network() string { return "xroce" }

// String returns "ip:port".
func (a Addr) String() string { return netip.AddrPortFrom(a.IP, uint16(a.Port)).String() }

// Conn is a byte stream over one RC queue pair; it implements net.Conn.
// Its methods are safe for concurrent use: concurrent Writes are
// serialized, as are concurrent Reads.
type Conn struct {
	cfg          Config
	pd           *roce.PD
	cq           *roce.CQ
	qp           *roce.QP
	ring, stage  []byte
	ringMR       *roce.MR
	stageMR      *roce.MR
	rctl, sctl   []byte   // receive and send slots of control payloads
	rctlMR       *roce.MR // rctl, for receive requests
	sctlMR       *roce.MR // sctl, for ADVERT sends
	rregs, wregs regCache // Read and Write buffers registered for the direct path
	released     chan struct{}
	peerAddr     uint64
	peerKey      uint32
	laddr, raddr Addr
	cmc          *cm.Conn // the RDMA CM connection, when connected over it
	stop         context.CancelFunc
	pumpDone     chan struct{}
	watchDone    chan struct{} // rsWatch's or cmWatch's, when it runs
	closeOnce    sync.Once

	wmu sync.Mutex // serializes Write and CloseWrite
	rmu sync.Mutex // serializes Read

	// pollMu is held from a CQ poll to the end of handling what it
	// returned (by the pump or a spinning Read), so that completions are
	// handled in order; it guards cqGone and rwcs.
	pollMu   sync.Mutex
	cqGone   bool
	rwcs     [16]roce.WC  // a spinning Read's completions
	spinning atomic.Int32 // Reads polling the CQ
	spun     chan struct{}
	// readied says that a broadcast woke a goroutine blocked in
	// waitLocked; the pump yields before it sleeps (see pump).
	readied atomic.Bool

	// mu guards everything below; wake is closed and replaced whenever
	// the state changes, to wake every waiter.
	mu      sync.Mutex
	wake    chan struct{}
	waiting int // goroutines in waitLocked
	// Receive side: positions in the local ring (bytes since the start).
	head, tail uint64
	finRcvd    bool
	owedMsgs   uint32 // receive requests re-posted, not yet reported
	owedBytes  uint32 // ring bytes read, not yet reported
	// Send side: positions in the peer's ring.
	sent       uint64 // bytes posted
	peerFreed  uint64 // bytes the peer's reader consumed
	acked      uint64 // bytes whose WRITE completed
	msgCredits int    // receive requests the peer has for us
	sendsOut   int    // posted sends not yet completed
	finSent    bool
	posts      uint64 // sends posted
	completed  uint64 // send completions
	// Direct path, reader side: an ADVERT is outstanding for advMR until
	// the writer answers with DIRECT (directN bytes) or DECLINE. After a
	// DECLINE because the writer's data was small, advSkip Reads do not
	// advertise (advBackoff, doubling up to maxAdvBackoff; reset by a
	// DIRECT).
	advOut, declined, withdrawSent bool
	declinedSmall                  bool
	advMR                          *roce.MR
	directN                        int
	advBackoff, advSkip            int
	// Direct path, writer side: the peer's advert held, and a DECLINE
	// owed to it. advHint: the peer's reader advertised since the last
	// hold that found no advert, so a large Write holds (see holdLocked);
	// holdSince and drainedAt time the hold under way; probeSkip Writes
	// do not probe (probeBackoff doubles after each hold that timed out).
	haveAdv, declineOwed    bool
	declineSmall            bool // the DECLINE owed says the writes were small
	peerAdv                 advert
	advHint                 bool
	advSeen                 bool // the peer has advertised on this connection: it may probe
	holdSince, drainedAt    time.Time
	probeBackoff, probeSkip int
	// directAt is when the last DIRECT completed, until the next advert;
	// advGap averages the time from there to that advert (the reader's
	// time between Reads), which sets the hold's grace.
	directAt time.Time
	advGap   time.Duration
	err      error // the QP failed
	closed   bool
	rdl, wdl time.Time
	stats    Stats

	// rsocket's protocol (conn_rs.go) when rs is set: its state, its
	// target SGL (tgt, written by the peer), a gather list for posts, and
	// whether the writing side was shut down here.
	rs     *rsState
	tgt    []byte
	tgtMR  *roce.MR
	sgl    [2]roce.SGE
	rsShut bool
}

// Stats are a connection's counters.
type Stats struct {
	BytesWritten, BytesRead uint64 // payload bytes
	IndirectBytes           uint64 // bytes sent through the peer's ring
	DirectBytes             uint64 // bytes sent into advertised buffers
	DirectReads             uint64 // Reads that the peer filled directly
	Adverts, Declines       uint64 // ADVERTs sent, DECLINEs received
	Holds, HoldTimeouts     uint64 // large Writes that waited for an advert; of them, those that gave up
	RegHits, Registrations  uint64 // direct-path buffers found in the registration caches, and registered
	DataMsgs, CreditMsgs    uint64 // messages sent
	WriteWaits              uint64 // times a Write waited for credits
	Keepalives              uint64 // rsocket keepalives sent
	ProtocolErrors          uint64 // messages that broke the protocol (the connection then fails)
}

// Stats returns the connection's counters.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	s := c.stats
	c.mu.Unlock()
	for _, r := range []*regCache{&c.rregs, &c.wregs} {
		h, m := r.counts()
		s.RegHits += h
		s.Registrations += m
	}
	return s
}

func (c *Conn) start() {
	c.rregs = regCache{pd: c.pd, access: roce.AccessLocalWrite | roce.AccessRemoteWrite}
	c.wregs = regCache{pd: c.pd, access: roce.AccessLocalWrite}
	c.wake = make(chan struct{})
	c.spun = make(chan struct{}, 1)
	c.msgCredits = recvDepth
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.pumpDone = make(chan struct{})
	go c.pump(ctx)
	switch {
	case c.rs != nil && (c.cmc != nil || c.cfg.Keepalive > 0):
		c.watchDone = make(chan struct{})
		go c.rsWatch(ctx)
	case c.cmc != nil:
		c.watchDone = make(chan struct{})
		go c.cmWatch(ctx)
	}
}

// broadcastLocked wakes every waiter.
func (c *Conn) broadcastLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
	if c.waiting > 0 {
		c.readied.Store(true)
	}
}

// waitLocked waits, with c.mu released, for a state change or until dl.
func (c *Conn) waitLocked(dl time.Time) {
	ch := c.wake
	c.waiting++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiting--
	}()
	if dl.IsZero() {
		<-ch
		return
	}
	d := time.Until(dl)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func expired(dl time.Time) bool { return !dl.IsZero() && !time.Now().Before(dl) }

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "xroce", Source: c.laddr, Addr: c.raddr, Err: err}
}

// postLocked posts wr as a message of kind, returning owed credits with
// it; ringBytes is how far it advances the peer's ring.
func (c *Conn) postLocked(kind uint32, wr roce.SendWR, ringBytes int) error {
	m, b := min(c.owedMsgs, maxMsgCredit), min(c.owedBytes, maxByteCredit)
	wr.ID, wr.Imm = c.sent+uint64(ringBytes), encodeImm(kind, m, b)
	if err := c.qp.PostSend(&wr); err != nil {
		return err
	}
	c.owedMsgs -= m
	c.owedBytes -= b
	c.msgCredits--
	c.sendsOut++
	c.posts++
	c.sent += uint64(ringBytes)
	switch kind {
	case kindData, kindDirect:
		c.stats.DataMsgs++
	default:
		c.stats.CreditMsgs++
	}
	return nil
}

// postEmptyLocked posts a message without payload.
func (c *Conn) postEmptyLocked(kind uint32) error {
	return c.postLocked(kind, roce.SendWR{Opcode: roce.WRRDMAWriteWithImm, RemoteAddr: c.peerAddr, RKey: c.peerKey}, 0)
}

// postRecv posts receive request i, with control slot i.
func (c *Conn) postRecv(i int) error {
	return c.qp.PostRecv(&roce.RecvWR{ID: recvID | uint64(i), SGL: []roce.SGE{c.rctlMR.SGE(i*slotSize, slotSize)}})
}

// canControlLocked says whether a message that returns credits (CREDIT,
// DECLINE, WITHDRAW) may be sent now.
func (c *Conn) canControlLocked() bool {
	return c.err == nil && c.sendsOut < sendDepth && c.msgCredits >= 1 && (c.msgCredits > 1 || c.owedMsgs > 0)
}

// canDataLocked says whether a message that needs two credits may be sent.
func (c *Conn) canDataLocked() bool {
	return c.err == nil && c.sendsOut < sendDepth && c.msgCredits >= 2
}

// maybeCreditLocked returns credits with a CREDIT message when a quarter
// of the receive requests or of the ring is owed and the rules allow it.
func (c *Conn) maybeCreditLocked() {
	if c.err != nil || c.qp == nil {
		return
	}
	if c.owedMsgs < recvDepth/4 && int(c.owedBytes) < len(c.ring)/4 {
		return
	}
	if !c.canControlLocked() {
		return
	}
	if err := c.postEmptyLocked(kindCredit); err != nil {
		c.failLocked(err)
	}
}

func (c *Conn) failLocked(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrReset, err)
	}
	c.broadcastLocked()
}

// pump handles the CQ's completions until ctx is done.
//
// With Config.ReadSpin, a Read that finds the ring empty polls the CQ
// itself for a while before it sleeps, receiving with CQ.Progress in its
// own goroutine, so a message goes from the link through the transport
// into the ring without waking the pump and then the reader. Meanwhile
// the pump keeps off the CQ, so that it is not woken for every message
// the spinning Read handles.
func (c *Conn) pump(ctx context.Context) {
	defer close(c.pumpDone)
	wcs := make([]roce.WC, 64)
	for {
		if c.pollCQ(wcs) > 0 {
			continue
		}
		if c.spinning.Load() > 0 {
			select {
			case <-c.spun:
			case <-ctx.Done():
				return
			}
			continue
		}
		// A reader this goroutine woke waits in its P's run queue;
		// CQ.Wait blocks this thread in ppoll with the P attached,
		// and nothing would run the reader until sysmon retakes the
		// P (see roce's watch.yield). Let it run first.
		if c.readied.Swap(false) {
			runtime.Gosched()
		}
		if err := c.cq.Wait(ctx); err != nil {
			if ctx.Err() == nil {
				c.mu.Lock()
				c.failLocked(err)
				c.mu.Unlock()
			}
			return
		}
	}
}

// pollCQ polls the CQ once and handles what it returned; the poll lock is
// held from Poll to the end of the handling, so completions are handled
// in order whoever polls.
func (c *Conn) pollCQ(wcs []roce.WC) int {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.cqGone {
		return 0
	}
	n := c.cq.Poll(wcs)
	if n == 0 {
		return 0
	}
	c.mu.Lock()
	for i := range wcs[:n] {
		c.handleLocked(&wcs[i])
	}
	if c.rs != nil {
		c.rsCreditsLocked()
	} else {
		c.flushDeclineLocked()
		c.maybeCreditLocked()
	}
	c.broadcastLocked()
	c.mu.Unlock()
	return n
}

// progress receives on the CQ's links in the calling goroutine
// (roce.CQ.Progress), unless the CQ is gone.
func (c *Conn) progress() {
	c.pollMu.Lock()
	if !c.cqGone {
		c.cq.Progress()
	}
	c.pollMu.Unlock()
}

// spinLocked polls the CQ from the calling Read for up to Config.ReadSpin
// (or until dl) and says whether the connection's state changed
// meanwhile, by its own poll or another's.
func (c *Conn) spinLocked(dl time.Time) bool {
	ch := c.wake
	c.spinning.Add(1)
	c.mu.Unlock()
	changed := c.spin(ch, earliest(time.Now().Add(c.cfg.ReadSpin), dl))
	c.spinning.Add(-1)
	select {
	case c.spun <- struct{}{}:
	default:
	}
	c.mu.Lock()
	if !changed {
		// A change after the last look must not be lost: the caller
		// waits on the new wake channel.
		select {
		case <-ch:
			changed = true
		default:
		}
	}
	return changed
}

// spin receives and polls until a completion is handled, ch is closed or
// end passes.
func (c *Conn) spin(ch chan struct{}, end time.Time) bool {
	for i := 0; ; i++ {
		if c.pollCQ(c.rwcs[:]) > 0 {
			return true
		}
		c.progress()
		if c.pollCQ(c.rwcs[:]) > 0 {
			return true
		}
		select {
		case <-ch:
			return true
		default:
		}
		if i%8 == 7 {
			if !time.Now().Before(end) {
				return false
			}
			runtime.Gosched()
		}
	}
}

func (c *Conn) handleLocked(wc *roce.WC) {
	if c.rs != nil {
		c.rsHandleLocked(wc)
		return
	}
	recv := wc.ID&recvID != 0
	if !recv {
		c.sendsOut--
		c.completed++
	}
	if wc.Status != roce.WCSuccess {
		c.failLocked(fmt.Errorf("completion %v", wc.Status))
		return
	}
	if !recv {
		c.acked = max(c.acked, wc.ID)
		return
	}
	kind, m, b := decodeImm(wc.Imm)
	c.msgCredits += int(m)
	c.peerFreed += uint64(b)
	slot := int(wc.ID &^ recvID)
	switch kind {
	case kindData:
		c.tail += uint64(wc.ByteLen)
	case kindFIN:
		c.finRcvd = true
	case kindDirect, kindDecline, kindDeclineSmall, kindAdvert, kindWithdraw:
		c.handleDirectLocked(kind, wc, slot)
	}
	if err := c.postRecv(slot); err != nil {
		c.failLocked(err)
		return
	}
	c.owedMsgs++
}

// Read reads from the stream; io.EOF after the peer's CloseWrite or Close
// once everything it wrote was read. With Config.DirectThreshold, a large
// Read that finds nothing queued may be filled by the writer directly.
func (c *Conn) Read(p []byte) (int, error) {
	if c.rs != nil {
		return c.rsRead(p)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	tried := false // an advert was tried in this call
	for {
		switch {
		case c.closed:
			if c.advOut {
				// The peer may write into p until the QP is gone.
				c.mu.Unlock()
				<-c.released
				c.mu.Lock()
			}
			return 0, c.opError("read", net.ErrClosed)
		case len(p) == 0:
			return 0, nil
		case c.advOut:
			if n, done, err := c.readAdvertLocked(); done {
				return n, err
			}
			continue
		case c.tail > c.head:
		case c.finRcvd:
			return 0, io.EOF
		case c.err != nil:
			return 0, c.opError("read", c.err)
		case expired(c.rdl):
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		case !tried && c.cfg.DirectThreshold > 0 && len(p) >= c.cfg.DirectThreshold && c.canDataLocked():
			tried = true
			if c.advSkip > 0 {
				c.advSkip--
				continue
			}
			c.advertLocked(p)
			continue
		default:
			if c.cfg.ReadSpin <= 0 || !c.spinLocked(c.rdl) {
				c.waitLocked(c.rdl)
			}
			continue
		}
		break
	}
	r := uint64(len(c.ring))
	off := c.head % r
	n := int(min(uint64(len(p)), c.tail-c.head, r-off))
	c.mu.Unlock()
	c.ringMR.Sync()
	copy(p, c.ring[off:off+uint64(n)])
	c.ringMR.Sync()
	c.mu.Lock()
	c.head += uint64(n)
	c.owedBytes += uint32(n)
	c.stats.BytesRead += uint64(n)
	c.maybeCreditLocked()
	return n, nil
}

// earliest returns the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// maxMsg bounds one DATA message, so that credits flow while a large
// Write is under way.
const maxMsg = 256 << 10

// Write writes p to the stream; it returns once every byte was posted to
// the peer's ring.
func (c *Conn) Write(p []byte) (int, error) {
	if c.rs != nil {
		return c.rsWrite(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := uint64(len(c.stage))
	done := 0
	if c.probeSkip > 0 {
		c.probeSkip--
	}
	for done < len(p) {
		var free uint64
		for waited := false; ; waited = true {
			switch {
			case c.closed:
				return done, c.opError("write", net.ErrClosed)
			case c.finSent:
				return done, c.opError("write", net.ErrClosed)
			case c.err != nil:
				return done, c.opError("write", c.err)
			case expired(c.wdl):
				return done, c.opError("write", os.ErrDeadlineExceeded)
			}
			if c.haveAdv && len(p)-done < minDirect {
				// Small writes go to the ring: the advert goes back,
				// saying so.
				c.haveAdv, c.declineOwed, c.declineSmall = false, true, true
				c.flushDeclineLocked()
			}
			if c.haveAdv && c.canDataLocked() {
				break
			}
			free = r - (c.sent - min(c.peerFreed, c.acked))
			if dl, ok := c.holdLocked(len(p)-done, free < holdMin); ok {
				c.waitLocked(earliest(dl, c.wdl))
				continue
			}
			if free > 0 && c.canDataLocked() {
				break
			}
			if !waited {
				c.stats.WriteWaits++
			}
			c.waitLocked(c.wdl)
		}
		if c.haveAdv {
			n, err := c.writeDirectLocked(p[done:])
			done += n
			if err != nil {
				return done, err
			}
			continue
		}
		off := c.sent % r
		n := int(min(uint64(len(p)-done), free, r-off, maxMsg, r/4))
		c.mu.Unlock()
		copy(c.stage[off:], p[done:done+n])
		c.stageMR.Sync()
		c.mu.Lock()
		wr := roce.SendWR{Opcode: roce.WRRDMAWriteWithImm, SGL: []roce.SGE{c.stageMR.SGE(int(off), n)},
			RemoteAddr: c.peerAddr + off, RKey: c.peerKey}
		if err := c.postLocked(kindData, wr, n); err != nil {
			c.failLocked(err)
			return done, c.opError("write", c.err)
		}
		done += n
		c.stats.BytesWritten += uint64(n)
		c.stats.IndirectBytes += uint64(n)
		if c.haveAdv {
			// An advert taken while these bytes were being copied: they
			// precede it, so it goes back (the reader waits for an
			// answer even if no Write follows).
			c.haveAdv, c.declineOwed = false, true
			c.flushDeclineLocked()
		}
	}
	return done, nil
}

// CloseWrite shuts down the writing side: the peer reads io.EOF after
// everything written so far. Later Writes fail.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("close", net.ErrClosed)
	}
	if c.rs != nil {
		return c.rsShutdownLocked(false, time.Now().Add(c.cfg.Linger))
	}
	return c.finLocked(time.Now().Add(c.cfg.Linger))
}

// finLocked sends FIN once, waiting for two message credits until dl.
func (c *Conn) finLocked(dl time.Time) error {
	if c.haveAdv {
		c.haveAdv, c.declineOwed = false, true
	}
	for !c.finSent {
		c.flushDeclineLocked()
		switch {
		case c.err != nil:
			return c.opError("close", c.err)
		case expired(dl):
			return c.opError("close", os.ErrDeadlineExceeded)
		case !c.declineOwed && c.canDataLocked():
			if err := c.postEmptyLocked(kindFIN); err != nil {
				c.failLocked(err)
				continue
			}
			c.finSent = true
			return nil
		}
		c.waitLocked(dl)
	}
	return nil
}

// Close sends FIN after everything written, waits at most Config.Linger
// for the peer to acknowledge it all, then frees the connection (in the
// background, after the peer's FIN or a second, if it has not come).
// Blocked Reads and Writes return errors wrapping net.ErrClosed.
func (c *Conn) Close() error {
	if !c.markClosed() {
		return c.opError("close", net.ErrClosed)
	}
	if c.rs != nil {
		return c.rsClose()
	}
	c.wmu.Lock()
	c.mu.Lock()
	dl := time.Now().Add(c.cfg.Linger)
	err := c.finLocked(dl)
	for c.err == nil && c.sendsOut > 0 && !expired(dl) {
		c.waitLocked(dl)
	}
	finWait := c.err == nil && !c.finRcvd
	c.mu.Unlock()
	c.wmu.Unlock()
	if !finWait {
		c.release()
		return err
	}
	// As TCP's FIN_WAIT: the QP stays a moment after Close returns, so
	// that the peer's own FIN (and credits) are acknowledged rather than
	// retried into a reset when both ends close at once.
	go func() {
		c.mu.Lock()
		for dl := time.Now().Add(finWait2); c.err == nil && !c.finRcvd && !expired(dl); {
			c.waitLocked(dl)
		}
		c.mu.Unlock()
		c.release()
	}()
	return err
}

// markClosed marks the connection closed, waking every blocked call;
// false if it already was.
func (c *Conn) markClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.closed = true
	c.broadcastLocked()
	return true
}

// finWait2 is how long a closed connection waits for the peer's FIN.
const finWait2 = time.Second

// release stops the pump and frees the verbs resources.
func (c *Conn) release() {
	c.closeOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.pumpDone
			if c.watchDone != nil {
				<-c.watchDone
			}
		}
		if c.cmc != nil {
			c.cmc.Close() // the peer's CM is told (DREQ)
		}
		if c.qp != nil {
			c.qp.Destroy()
		}
		for _, m := range []*roce.MR{c.ringMR, c.stageMR, c.tgtMR} {
			if m != nil {
				m.Dereg()
			}
		}
		if c.cq != nil {
			c.pollMu.Lock()
			c.cqGone = true
			c.cq.Destroy()
			c.pollMu.Unlock()
		}
		c.mu.Lock()
		c.advMR = nil
		c.mu.Unlock()
		c.rregs.close()
		c.wregs.close()
		for _, m := range []*roce.MR{c.rctlMR, c.sctlMR} {
			if m != nil {
				m.Dereg()
			}
		}
		if c.pd != nil {
			c.pd.Dealloc()
		}
		close(c.released)
	})
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl, c.wdl = t, t
	c.broadcastLocked()
	return nil
}

// SetReadDeadline sets the deadline of Read calls, pending ones included.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	c.broadcastLocked()
	return nil
}

// SetWriteDeadline sets the deadline of Write calls, pending ones included.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = t
	c.broadcastLocked()
	return nil
}

// String names the connection for logs.
func (c *Conn) String() string {
	return c.laddr.String() + "->" + c.raddr.String() + " qp " + strconv.FormatUint(uint64(c.laddr.QPN), 16)
}
