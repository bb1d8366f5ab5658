package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

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
	peerAddr     uint64
	peerKey      uint32
	laddr, raddr Addr
	stop         context.CancelFunc
	pumpDone     chan struct{}
	closeOnce    sync.Once

	wmu sync.Mutex // serializes Write and CloseWrite
	rmu sync.Mutex // serializes Read

	// mu guards everything below; wake is closed and replaced whenever
	// the state changes, to wake every waiter.
	mu   sync.Mutex
	wake chan struct{}
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
	err        error // the QP failed
	closed     bool
	rdl, wdl   time.Time
	stats      Stats
}

// Stats are a connection's counters.
type Stats struct {
	BytesWritten, BytesRead uint64 // payload bytes
	IndirectBytes           uint64 // bytes sent through the peer's ring
	DirectBytes             uint64 // bytes sent into advertised buffers (0: not built yet)
	DataMsgs, CreditMsgs    uint64 // messages sent
	WriteWaits              uint64 // times a Write waited for credits
}

// Stats returns the connection's counters.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Conn) start() {
	c.wake = make(chan struct{})
	c.msgCredits = recvDepth
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.pumpDone = make(chan struct{})
	go c.pump(ctx)
}

// broadcastLocked wakes every waiter.
func (c *Conn) broadcastLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// waitLocked waits, with c.mu released, for a state change or until dl.
func (c *Conn) waitLocked(dl time.Time) {
	ch := c.wake
	c.mu.Unlock()
	defer c.mu.Lock()
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

// postLocked sends one message of kind with n bytes from staging offset
// off (n may be 0), returning owed credits with it.
func (c *Conn) postLocked(kind uint32, off, n int) error {
	m, b := min(c.owedMsgs, maxMsgCredit), min(c.owedBytes, maxByteCredit)
	wr := roce.SendWR{
		ID: c.sent + uint64(n), Opcode: roce.WRRDMAWriteWithImm, Imm: encodeImm(kind, m, b),
		RemoteAddr: c.peerAddr + uint64(off), RKey: c.peerKey,
	}
	if n > 0 {
		wr.SGL = []roce.SGE{c.stageMR.SGE(off, n)}
	}
	if err := c.qp.PostSend(&wr); err != nil {
		return err
	}
	c.owedMsgs -= m
	c.owedBytes -= b
	c.msgCredits--
	c.sendsOut++
	c.sent += uint64(n)
	if kind == kindCredit {
		c.stats.CreditMsgs++
	} else {
		c.stats.DataMsgs++
	}
	return nil
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
	if c.sendsOut >= sendDepth || c.msgCredits < 1 || (c.msgCredits == 1 && c.owedMsgs == 0) {
		return
	}
	if err := c.postLocked(kindCredit, 0, 0); err != nil {
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
func (c *Conn) pump(ctx context.Context) {
	defer close(c.pumpDone)
	wcs := make([]roce.WC, 64)
	for {
		n := c.cq.Poll(wcs)
		if n == 0 {
			if err := c.cq.Wait(ctx); err != nil {
				if ctx.Err() == nil {
					c.mu.Lock()
					c.failLocked(err)
					c.mu.Unlock()
				}
				return
			}
			continue
		}
		c.mu.Lock()
		for i := range wcs[:n] {
			c.handleLocked(&wcs[i])
		}
		c.maybeCreditLocked()
		c.broadcastLocked()
		c.mu.Unlock()
	}
}

func (c *Conn) handleLocked(wc *roce.WC) {
	recv := wc.ID&recvID != 0
	if !recv {
		c.sendsOut--
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
	switch kind {
	case kindData:
		c.tail += uint64(wc.ByteLen)
	case kindFIN:
		c.finRcvd = true
	}
	if err := c.qp.PostRecv(&roce.RecvWR{ID: recvID}); err != nil {
		c.failLocked(err)
		return
	}
	c.owedMsgs++
}

// Read reads from the stream; io.EOF after the peer's CloseWrite or Close
// once everything it wrote was read.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return 0, c.opError("read", net.ErrClosed)
		case len(p) == 0:
			return 0, nil
		case c.tail > c.head:
		case c.finRcvd:
			return 0, io.EOF
		case c.err != nil:
			return 0, c.opError("read", c.err)
		case expired(c.rdl):
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		default:
			c.waitLocked(c.rdl)
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

// maxMsg bounds one DATA message, so that credits flow while a large
// Write is under way.
const maxMsg = 256 << 10

// Write writes p to the stream; it returns once every byte was posted to
// the peer's ring.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := uint64(len(c.stage))
	done := 0
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
			free = r - (c.sent - min(c.peerFreed, c.acked))
			if free > 0 && c.msgCredits >= 2 && c.sendsOut < sendDepth {
				break
			}
			if !waited {
				c.stats.WriteWaits++
			}
			c.waitLocked(c.wdl)
		}
		off := c.sent % r
		n := int(min(uint64(len(p)-done), free, r-off, maxMsg, r/4))
		c.mu.Unlock()
		copy(c.stage[off:], p[done:done+n])
		c.stageMR.Sync()
		c.mu.Lock()
		if err := c.postLocked(kindData, int(off), n); err != nil {
			c.failLocked(err)
			return done, c.opError("write", c.err)
		}
		done += n
		c.stats.BytesWritten += uint64(n)
		c.stats.IndirectBytes += uint64(n)
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
	return c.finLocked(time.Now().Add(c.cfg.Linger))
}

// finLocked sends FIN once, waiting for two message credits until dl.
func (c *Conn) finLocked(dl time.Time) error {
	for !c.finSent {
		switch {
		case c.err != nil:
			return c.opError("close", c.err)
		case expired(dl):
			return c.opError("close", os.ErrDeadlineExceeded)
		case c.msgCredits >= 2 && c.sendsOut < sendDepth:
			if err := c.postLocked(kindFIN, 0, 0); err != nil {
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
// for the peer to acknowledge it all, then frees the connection. Blocked
// Reads and Writes return errors wrapping net.ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opError("close", net.ErrClosed)
	}
	c.closed = true
	c.broadcastLocked()
	c.mu.Unlock()

	c.wmu.Lock()
	c.mu.Lock()
	dl := time.Now().Add(c.cfg.Linger)
	err := c.finLocked(dl)
	for c.err == nil && c.sendsOut > 0 && !expired(dl) {
		c.waitLocked(dl)
	}
	c.mu.Unlock()
	c.wmu.Unlock()
	c.release()
	return err
}

// release stops the pump and frees the verbs resources.
func (c *Conn) release() {
	c.closeOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.pumpDone
		}
		if c.qp != nil {
			c.qp.Destroy()
		}
		for _, m := range []*roce.MR{c.ringMR, c.stageMR} {
			if m != nil {
				m.Dereg()
			}
		}
		if c.cq != nil {
			c.cq.Destroy()
		}
		if c.pd != nil {
			c.pd.Dealloc()
		}
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
