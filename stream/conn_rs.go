package stream

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/roce"
)

// This file binds rsState (rsocket.go) to a Conn: its verbs resources, the
// RDMA CM exchange of connect data, and Read, Write and the closes. The
// pump, the poll lock, deadlines and the wake channel are the Conn's, as
// for xroce's own protocol.

// Protocol is a stream's wire protocol.
type Protocol uint8

// Protocols.
const (
	// ProtocolXroce is xroce's own (see the package doc): credits in
	// every immediate, a mirrored ring, and the direct path.
	ProtocolXroce Protocol = iota
	// ProtocolRsocket is librdmacm's rsocket protocol, spoken by
	// rstream, rcopy and programs under librspreload.so. It connects
	// over RDMA CM only.
	ProtocolRsocket
)

func (p Protocol) String() string {
	switch p {
	case ProtocolXroce:
		return "xroce"
	case ProtocolRsocket:
		return "rsocket"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// hostBigEndian is the byte order rsocket peers are asked to store SGL
// updates in: this host's, as rsocket.c asks.
var hostBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// newRSConn makes an rsocket connection's verbs resources: PD, CQ, the
// receive ring (remotely writable), the staging buffer with its control
// slots, the target SGL (remotely writable) and the RC QP, in RESET.
func newRSConn(d *roce.Device, cfg Config) (_ *Conn, err error) {
	c := &Conn{cfg: cfg, ring: make([]byte, cfg.RingSize),
		stage: make([]byte, cfg.RingSize+rsCtrlCredits*rsSGESize), tgt: make([]byte, rsSGLSize*rsSGESize),
		released: make(chan struct{})}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.pd, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if c.cq, err = d.CreateCQ(2 * rsQueueSize); err != nil {
		return nil, err
	}
	if c.ringMR, err = c.pd.RegMR(c.ring, roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if c.stageMR, err = c.pd.RegMR(c.stage, roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.tgtMR, err = c.pd.RegMR(c.tgt, roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	c.qp, err = c.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: c.cq, RecvCQ: c.cq,
		MaxSendWR: rsQueueSize, MaxRecvWR: rsQueueSize, MaxSGE: 2, SignalAll: true})
	if err != nil {
		return nil, err
	}
	big := hostBigEndian != cfg.rsSwapOrder
	c.rs = newRSState(uint32(cfg.RingSize), uint32(cfg.RingSize), c.ringMR.Addr(), c.ringMR.RKey(), big)
	if err := cm.PrepareQP(c.qp); err != nil {
		return nil, err
	}
	for range rsQueueSize {
		if err := c.qp.PostRecv(&roce.RecvWR{ID: recvID}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// rsParam are the connection parameters of an rsocket: no READs, flow
// control, RNR retries for ever (rsocket relies on them).
func rsParam(cfg Config, data []byte) *cm.ConnParam {
	return &cm.ConnParam{FlowControl: true, RetryCount: uint8(cfg.Connect.RetryCnt), RNRRetryCount: 7,
		MinRNRTimer: 12, ACKTimeout: uint8(cfg.Connect.Timeout), PrivateData: data}
}

// rsConnDataOf returns c's connect data.
func (c *Conn) rsConnDataOf() []byte {
	var b [rsConnDataSize]byte
	d := c.rs.connData(c.tgtMR.Addr(), c.tgtMR.RKey())
	d.put(b[:])
	return b[:]
}

// dialRS connects an rsocket to addr.
func (cfg Config) dialRS(ctx context.Context, a *cm.Agent, addr netip.AddrPort) (_ *Conn, err error) {
	c, err := newRSConn(a.Device(), cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	cc, err := a.Dial(ctx, addr, c.qp, &cm.DialOptions{Param: rsParam(cfg, c.rsConnDataOf())})
	if err != nil {
		return nil, err
	}
	c.cmc = cc
	peer, err := parseRSConnData(cc.PrivateData())
	if err != nil {
		return nil, err
	}
	c.rs.connect(peer)
	c.startCM(cc, 0, 0)
	return c, nil
}

// acceptRS sets up the passive side of an rsocket whose connect data is
// peer.
func acceptRS(ctx context.Context, d *roce.Device, req *cm.Request, peer rsConnData, cfg Config) (_ *Conn, err error) {
	c, err := newRSConn(d, cfg)
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	cc, err := req.Accept(ctx, c.qp, rsParam(cfg, c.rsConnDataOf()))
	if err != nil {
		return nil, err
	}
	c.cmc = cc
	c.rs.connect(peer)
	c.startCM(cc, 0, 0)
	return c, nil
}

// cmWatch runs beside the pump of a stream connected over RDMA CM with
// the direct protocol until ctx ends: the peer sends its DREQ once it
// has let go of the connection (after FIN), so the DREQ is answered at
// once, which stops the QP, rather than when this side closes.
func (c *Conn) cmWatch(ctx context.Context) {
	defer close(c.watchDone)
	select {
	case <-ctx.Done():
	case <-c.cmc.Done():
		c.cmc.Disconnect(ctx)
	}
}

// rsWatch runs beside the pump of an rsocket connection until ctx ends:
// it turns the CM's disconnection into the rsocket's and sends keepalives
// (a zero-length RDMA WRITE every Config.Keepalive, as rsocket's
// SO_KEEPALIVE does) so that a vanished peer fails the connection.
func (c *Conn) rsWatch(ctx context.Context) {
	defer close(c.watchDone)
	var tick <-chan time.Time
	if c.cfg.Keepalive > 0 {
		t := time.NewTicker(c.cfg.Keepalive)
		defer t.Stop()
		tick = t.C
	}
	var gone <-chan struct{}
	if c.cmc != nil {
		gone = c.cmc.Done()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-gone:
			// The peer's DREQ comes after the ACKs of all it sent, so
			// its last messages' completions are in the CQ: handle
			// them first, or a Read could see the end before them.
			gone = nil
			var wcs [16]roce.WC
			for c.pollCQ(wcs[:]) > 0 {
			}
			c.mu.Lock()
			c.rs.disconnect()
			c.broadcastLocked()
			c.mu.Unlock()
			// Then answer, as rsocket's shutdown does on
			// RDMA_CM_EVENT_DISCONNECTED: the QP stops (our sends the
			// peer will never acknowledge are flushed, so Close does
			// not wait for them) and the DREP goes.
			c.cmc.Disconnect(ctx)
		case <-tick:
			c.mu.Lock()
			if c.err == nil && c.rs.connected && c.rs.ctrlAvail() {
				c.rsPostCtrlLocked(c.rs.takeCtrl(rsCtrlKeepalive))
				c.stats.Keepalives++
			}
			c.mu.Unlock()
		}
	}
}

// rsHandleLocked handles one completion of an rsocket connection.
func (c *Conn) rsHandleLocked(wc *roce.WC) {
	if wc.ID&recvID == 0 {
		c.sendsOut--
		c.completed++
		was := c.rs.connected
		c.rs.sendDone(uint32(wc.ID), wc.Status == roce.WCSuccess)
		if wc.Status != roce.WCSuccess && was {
			c.failLocked(fmt.Errorf("completion %v", wc.Status))
		}
		return
	}
	if wc.Status != roce.WCSuccess {
		return // flushed: the QP is going down, as after a DISCONNECT
	}
	if wc.Imm>>29 == rsOpSGL && wc.ByteLen > 0 {
		c.tgtMR.Sync()
	}
	if err := c.rs.recv(wc.Imm, wc.Flags&roce.WCWithImm != 0, wc.ByteLen, c.tgt); err != nil {
		c.stats.ProtocolErrors++
		c.rs.disconnect()
		c.failLocked(err)
		return
	}
	if !c.rs.connected {
		return
	}
	if err := c.qp.PostRecv(&roce.RecvWR{ID: recvID}); err != nil {
		c.failLocked(err)
	}
}

// rsPostCtrlLocked posts a control message.
func (c *Conn) rsPostCtrlLocked(m rsCtrl) {
	wr := roce.SendWR{ID: uint64(m.msg), Opcode: roce.WRRDMAWriteWithImm, Imm: m.msg}
	switch {
	case m.msg == rsMsg(rsOpCtrl, rsCtrlKeepalive):
		wr.Opcode, wr.Imm = roce.WRRDMAWrite, 0
	case m.payload:
		c.sgl[0] = c.stageMR.SGE(int(c.rs.stageSize)+m.slot*rsSGESize, rsSGESize)
		wr.SGL, wr.RemoteAddr, wr.RKey = c.sgl[:1], m.addr, m.key
	}
	if err := c.rsPostLocked(&wr, false); err != nil {
		c.failLocked(err)
	}
}

// rsPostLocked posts wr, a DATA message when data (else a control one),
// and counts it as in flight.
func (c *Conn) rsPostLocked(wr *roce.SendWR, data bool) error {
	if err := c.qp.PostSend(wr); err != nil {
		return err
	}
	c.sendsOut++
	c.posts++
	if data {
		c.stats.DataMsgs++
	} else {
		c.stats.CreditMsgs++
	}
	return nil
}

// rsCreditsLocked grants the peer more while a grant is due.
func (c *Conn) rsCreditsLocked() {
	for c.err == nil && c.rs.wantCredits() {
		c.rsPostCtrlLocked(c.rs.credits(c.stage[c.rs.stageSize:]))
	}
}

// rsRead reads from an rsocket: bytes queued are read even after the
// peer disconnected; then io.EOF.
func (c *Conn) rsRead(p []byte) (int, error) {
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
		case c.rs.haveData():
			c.ringMR.Sync()
			n := c.rs.read(p, c.ring)
			c.stats.BytesRead += uint64(n)
			c.rsCreditsLocked()
			return n, nil
		case c.err != nil:
			return 0, c.opError("read", c.err)
		case !c.rs.readable:
			return 0, io.EOF
		case expired(c.rdl):
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		if c.cfg.ReadSpin <= 0 || !c.spinLocked(c.rdl) {
			c.waitLocked(c.rdl)
		}
	}
}

// rsWrite writes to an rsocket: each DATA message is staged and written
// into the peer's ring; sizes grow from 2 KiB to 64 KiB within a Write, as
// rsend does, so a small write leaves at once and a large one moves in
// large pieces.
func (c *Conn) rsWrite(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	done, olen := 0, rsMinXfer
	for done < len(p) {
		for waited := false; ; waited = true {
			switch {
			case c.closed || c.rsShut:
				return done, c.opError("write", net.ErrClosed)
			case c.err != nil:
				return done, c.opError("write", c.err)
			case !c.rs.writable:
				return done, c.opError("write", fmt.Errorf("%w: the peer disconnected", ErrReset))
			case expired(c.wdl):
				return done, c.opError("write", os.ErrDeadlineExceeded)
			}
			if c.rs.canSend() {
				break
			}
			if !waited {
				c.stats.WriteWaits++
			}
			c.waitLocked(c.wdl)
		}
		want := len(p) - done
		if olen < want {
			want = olen
			olen = min(2*olen, rsMaxXfer)
		}
		d := c.rs.nextData(want)
		n := int(d.n1 + d.n2)
		copy(c.stage[d.off:d.off+d.n1], p[done:])
		copy(c.stage[:d.n2], p[done+int(d.n1):])
		c.stageMR.Sync()
		c.sgl[0] = c.stageMR.SGE(int(d.off), int(d.n1))
		sgl := c.sgl[:1]
		if d.n2 > 0 {
			c.sgl[1] = c.stageMR.SGE(0, int(d.n2))
			sgl = c.sgl[:2]
		}
		wr := roce.SendWR{ID: uint64(d.imm), Opcode: roce.WRRDMAWriteWithImm, SGL: sgl, Imm: d.imm,
			RemoteAddr: d.addr, RKey: d.key}
		if err := c.rsPostLocked(&wr, true); err != nil {
			c.failLocked(err)
			return done, c.opError("write", c.err)
		}
		c.stats.BytesWritten += uint64(n)
		c.stats.IndirectBytes += uint64(n)
		done += n
	}
	return done, nil
}

// rsShutdownLocked shuts down the writing side (both: the connection),
// telling the peer with a control message, and waits until dl for every
// send to complete, as rshutdown does.
func (c *Conn) rsShutdownLocked(both bool, dl time.Time) error {
	ctrl, due := c.rs.shutdown(both)
	c.rsShut = true
	if due {
		for c.err == nil && c.rs.connected && !c.rs.ctrlAvail() && !expired(dl) {
			c.waitLocked(dl)
		}
		if c.err == nil && c.rs.connected && c.rs.ctrlAvail() {
			c.rsPostCtrlLocked(c.rs.takeCtrl(ctrl))
		}
	}
	for c.err == nil && !c.rs.allSendsDone() && !expired(dl) {
		c.waitLocked(dl)
	}
	switch {
	case c.err != nil:
		return c.opError("close", c.err)
	case !c.rs.allSendsDone():
		return c.opError("close", os.ErrDeadlineExceeded)
	}
	return nil
}

// rsClose, for Close once it marked the connection closed, shuts the
// rsocket down (DISCONNECT), waits at most Config.Linger for its sends,
// and frees it; the CM connection ends with a DREQ.
func (c *Conn) rsClose() error {
	c.wmu.Lock()
	c.mu.Lock()
	err := c.rsShutdownLocked(true, time.Now().Add(c.cfg.Linger))
	c.mu.Unlock()
	c.wmu.Unlock()
	c.release()
	return err
}
