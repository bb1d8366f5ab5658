package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/qp"
	"github.com/xroce/xroce/roce"
)

// AgentConfig configures Open. The zero value gives the defaults.
type AgentConfig struct {
	Recv     int    // receive buffers on QP 1; 0 means 256
	Send     int    // MADs being sent at once; 0 means 64
	MaxConns int    // see Config.MaxConns
	Backlog  int    // see Config.Backlog
	Seed     uint64 // see Config.Seed
	// CloseWait bounds how long Close keeps answering the peers' resent
	// DREQs (see Close); 0 means 10 s, which covers the time-wait after
	// answering a DREQ of a Linux 6.1 peer (8.2 s); negative means Close
	// does not wait.
	CloseWait time.Duration
}

// grhSize is the GRH area in front of a UD receive.
const grhSize = 40

// Agent is the connection manager of one device: it owns the device's QP 1
// (the GSI), and one goroutine that receives MADs, runs the Engine and its
// timers. Its methods are safe for concurrent use.
type Agent struct {
	d     *roce.Device
	pd    *roce.PD
	cq    *roce.CQ
	gsi   *roce.QP
	mr    *roce.MR
	buf   []byte // Recv receive slots of 296 bytes, then Send send slots of 256
	nrecv int
	nsend int
	epoch time.Time
	mac   [6]byte
	kick  chan struct{}
	// handled is signalled when the goroutine has handled MADs after
	// Close began, for Close's wait to look again.
	handled   chan struct{}
	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closeErr  error
	closeWait time.Duration

	// rxMu guards rxIDs: connections whose QP took its first packet
	// (QP.NotifyReceive), for the goroutine to pass to Engine.Notify. It
	// is taken under a QP's worker lock, and takes nothing.
	rxMu  sync.Mutex
	rxIDs []uint32

	// mu guards the engine and everything below it.
	mu        sync.Mutex
	eng       *Engine
	freeSend  []int
	conns     map[uint32]*Conn
	reqs      map[uint32]*Request
	queries   map[uint32]*udQuery
	listeners map[uint64][]*Listener // by service ID: one per bound address
	todo      []func()
	closed    bool
}

// GUID is the CA GUID of a device with Ethernet address mac, made as rxe
// makes its node GUID (the modified EUI-64 of the MAC).
func GUID(mac [6]byte) uint64 {
	return uint64(mac[0]^2)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xff<<32 | 0xfe<<24 |
		uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

// Open starts the connection manager of d: it creates d's QP 1, which
// fails with roce.ErrBusy if d has one already.
func Open(d *roce.Device, cfg AgentConfig) (_ *Agent, err error) {
	if cfg.Recv <= 0 {
		cfg.Recv = 256
	}
	if cfg.Send <= 0 {
		cfg.Send = 64
	}
	if cfg.CloseWait == 0 {
		cfg.CloseWait = 10 * time.Second
	}
	a := &Agent{
		d: d, nrecv: cfg.Recv, nsend: cfg.Send, epoch: time.Now(), kick: make(chan struct{}, 1), handled: make(chan struct{}, 1), stop: make(chan struct{}),
		stopped: make(chan struct{}), conns: map[uint32]*Conn{}, reqs: map[uint32]*Request{}, queries: map[uint32]*udQuery{},
		listeners: map[uint64][]*Listener{}, closeWait: cfg.CloseWait,
	}
	copy(a.mac[:], d.Info().MAC)
	defer func() {
		if err != nil {
			a.release()
		}
	}()
	if a.pd, err = d.AllocPD(); err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	if a.cq, err = d.CreateCQ(cfg.Recv + cfg.Send); err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	a.gsi, err = a.pd.CreateQP(roce.QPConfig{Type: roce.UD, GSI: true, SendCQ: a.cq, RecvCQ: a.cq,
		MaxSendWR: cfg.Send, MaxRecvWR: cfg.Recv, MaxSGE: 1})
	if err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	init := roce.Attr{State: roce.StateInit, PKey: 0xffff, Port: 1, QKey: qp.GSIQKey}
	if err = a.gsi.Modify(&init, roce.AttrState|roce.AttrPKey|roce.AttrPort|roce.AttrQKey); err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	if err = a.gsi.Modify(&roce.Attr{State: roce.StateRTR}, roce.AttrState); err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	if err = a.gsi.Modify(&roce.Attr{State: roce.StateRTS}, roce.AttrState|roce.AttrSQPSN); err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	a.buf = make([]byte, cfg.Recv*(grhSize+mad.Size)+cfg.Send*mad.Size)
	if a.mr, err = a.pd.RegMR(a.buf, roce.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	for i := range cfg.Send {
		a.freeSend = append(a.freeSend, i)
	}
	for i := range cfg.Recv {
		if err = a.postRecv(i); err != nil {
			return nil, fmt.Errorf("cm: %w", err)
		}
	}
	a.eng, err = NewEngine(Config{GUID: GUID(a.mac), Out: (*agentOut)(a), Handler: (*agentHandler)(a),
		Seed: cfg.Seed, MaxConns: cfg.MaxConns, Backlog: cfg.Backlog})
	if err != nil {
		return nil, err
	}
	go a.run()
	return a, nil
}

// Device returns the agent's device.
func (a *Agent) Device() *roce.Device { return a.d }

// Stats returns the engine's counters.
func (a *Agent) Stats() *Stats { return a.eng.Stats() }

func (a *Agent) now() time.Duration { return time.Since(a.epoch) }

func (a *Agent) recvSlot(i int) []byte {
	const n = grhSize + mad.Size
	return a.buf[i*n : (i+1)*n]
}

func (a *Agent) sendSlot(i int) []byte {
	off := a.nrecv*(grhSize+mad.Size) + i*mad.Size
	return a.buf[off : off+mad.Size]
}

func (a *Agent) postRecv(i int) error {
	off := i * (grhSize + mad.Size)
	return a.gsi.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{a.mr.SGE(off, grhSize+mad.Size)}})
}

// sendID marks send work request IDs apart from receive ones.
const sendID = 1 << 32

// agentOut is the engine's Output: a MAD goes out of QP 1 to the peer's QP 1.
type agentOut Agent

// SendMAD implements Output (a.mu held).
func (o *agentOut) SendMAD(to *Peer, m mad.MAD) {
	a := (*Agent)(o)
	if len(a.freeSend) == 0 {
		a.eng.stats.TxNoBuffer.Add(1) // the MAD layer's retries cover it
		return
	}
	i := a.freeSend[len(a.freeSend)-1]
	copy(a.sendSlot(i), m)
	av := roce.AddressVector{DstMAC: to.MAC, SrcMAC: a.mac, DstIP: to.Addr.Unmap(), SrcIP: to.Local.Unmap(), HopLimit: 64}
	off := a.nrecv*(grhSize+mad.Size) + i*mad.Size
	wr := roce.SendWR{ID: sendID | uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled,
		SGL: []roce.SGE{a.mr.SGE(off, mad.Size)}, AV: &av, RemoteQPN: qp.GSIQPN, RemoteQKey: qp.GSIQKey}
	if err := a.gsi.PostSend(&wr); err != nil {
		a.eng.stats.TxNoBuffer.Add(1)
		return
	}
	a.freeSend = a.freeSend[:len(a.freeSend)-1]
}

// kickLoop wakes the goroutine to look at the engine's timers again.
func (a *Agent) kickLoop() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// run is the agent's goroutine: it feeds received MADs to the engine and
// runs its timers until Close.
func (a *Agent) run() {
	defer close(a.stopped)
	wcs := make([]roce.WC, 64)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n := a.cq.Poll(wcs)
		a.mu.Lock()
		now := a.now()
		for i := range wcs[:n] {
			a.completeLocked(now, &wcs[i])
		}
		a.notifyLocked(now)
		next := a.eng.Poll(now)
		a.runTodoLocked()
		next = min(next, a.eng.Poll(now))
		closed := a.closed
		a.mu.Unlock()
		if n > 0 {
			if closed {
				select {
				case a.handled <- struct{}{}:
				default:
				}
			}
			continue
		}
		// Arm, then look again: a completion between the Poll above
		// and Arm fires nothing.
		notify := a.cq.Arm()
		if a.cq.Len() > 0 {
			continue
		}
		wait := time.Hour
		if next != Never {
			wait = max(next-a.now(), 0)
		}
		timer.Reset(wait)
		select {
		case <-notify:
		case <-timer.C:
		case <-a.kick:
		case <-a.stop:
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// received is the QP.NotifyReceive function of the passive connection id:
// it queues id for the goroutine and wakes it (under the QP's worker
// lock: it takes nothing else).
func (a *Agent) received(id uint32) {
	a.rxMu.Lock()
	a.rxIDs = append(a.rxIDs, id)
	a.rxMu.Unlock()
	a.kickLoop()
}

// notifyLocked tells the engine of the connections whose QP took its
// first packet (COMM_EST): one whose RTU was lost is established now.
func (a *Agent) notifyLocked(now time.Duration) {
	a.rxMu.Lock()
	ids := a.rxIDs
	a.rxIDs = nil
	a.rxMu.Unlock()
	for _, id := range ids {
		a.eng.Notify(now, id)
	}
}

// completeLocked handles one completion of QP 1.
func (a *Agent) completeLocked(now time.Duration, wc *roce.WC) {
	if wc.ID&sendID != 0 {
		a.freeSend = append(a.freeSend, int(wc.ID&^sendID))
		return
	}
	if wc.Status != roce.WCSuccess {
		return // flushed: the QP is going away
	}
	i := int(wc.ID)
	b := a.recvSlot(i)
	if wc.ByteLen < grhSize+mad.Size {
		a.eng.stats.RxMalformed.Add(1)
	} else if peer, ok := peerOf(b[:grhSize], wc.SrcMAC); ok {
		a.eng.Input(now, b[grhSize:grhSize+mad.Size], &peer)
	}
	a.postRecv(i)
}

// peerOf reads the sender and the receiving address from a UD receive's
// GRH area: an IPv6 header, or 20 bytes then an IPv4 header.
func peerOf(grh []byte, mac [6]byte) (Peer, bool) {
	if grh[20]>>4 == 4 {
		src, _ := netip.AddrFromSlice(grh[20+12 : 20+16])
		dst, _ := netip.AddrFromSlice(grh[20+16 : 20+20])
		return Peer{Addr: src, Local: dst, MAC: mac}, true
	}
	if grh[0]>>4 == 6 {
		src, _ := netip.AddrFromSlice(grh[8:24])
		dst, _ := netip.AddrFromSlice(grh[24:40])
		return Peer{Addr: src, Local: dst, MAC: mac}, true
	}
	return Peer{}, false
}

// runTodoLocked runs the engine calls the handler deferred.
func (a *Agent) runTodoLocked() {
	for i := 0; i < len(a.todo); i++ { // a deferred call may defer more
		a.todo[i]()
		a.todo[i] = nil
	}
	a.todo = a.todo[:0]
}

// do runs f on the engine under the agent's lock at the current time, then
// what the handler deferred, and wakes the goroutine for the timers.
func (a *Agent) do(f func(now time.Duration) error) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	err := f(a.now())
	a.runTodoLocked()
	a.mu.Unlock()
	a.kickLoop()
	return err
}

// Close ends every connection as Destroy does (REJ, DREQ, the DREP to a
// DREQ not answered yet), stops the goroutine and frees QP 1. It is
// idempotent.
//
// Before it stops, Close waits until the connections that answered a DREQ
// (Conn.Disconnect or Close after the peer's, or Close itself) have
// finished time-wait, at most AgentConfig.CloseWait: if a DREP was lost,
// the peer resends its DREQ, and once the process is gone nothing would
// answer, so the peer (rping, perftest, rstream on Linux) would hang in
// its close for all its DREQ retries, half a minute. Time-wait after a
// DREP lasts until after the peer's first resend (about 2 s against a
// current kernel, see Engine.Answering). Close also waits while a DREQ
// of ours (Conn.Close, or Close itself) is in its first wait for a DREP,
// so that a DREQ of the peer's crossing it is answered; a peer that
// answers neither costs that one wait (Engine.Disconnecting). Close
// waits by default rather than by an option because every program that
// exits after a disconnect needs it, and the wait, bounded, costs
// nothing when no connection answered a DREQ and every DREQ of ours was
// answered.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		now := a.now()
		for id, c := range a.conns {
			a.eng.Destroy(now, id)
			c.failLocked(ErrClosed)
		}
		for id := range a.reqs {
			a.eng.Destroy(now, id)
			delete(a.reqs, id)
		}
		for _, ls := range a.listeners {
			for _, l := range ls {
				l.closeLocked()
			}
		}
		a.closed = true
		a.mu.Unlock()
		a.answerTimewait()
		// Let the last REJs and DREQs leave before QP 1 goes.
		for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			a.mu.Lock()
			idle := len(a.freeSend) == a.nsend
			a.mu.Unlock()
			if idle {
				break
			}
		}
		close(a.stop)
		<-a.stopped
		a.closeErr = a.release()
	})
	return a.closeErr
}

// answerTimewait keeps the goroutine answering DREQs until the last
// time-wait after a DREP of ours ends and every first DREQ of ours had
// its time to be answered (Engine.Disconnecting), or a.closeWait passes.
func (a *Agent) answerTimewait() {
	end := a.now() + a.closeWait
	for {
		a.mu.Lock()
		n, until := a.eng.Answering()
		m, first := a.eng.Disconnecting()
		n, until = n+m, max(until, first)
		now := a.now()
		a.mu.Unlock()
		until = min(until, end)
		if n == 0 || now >= until {
			return
		}
		// A DREP or the peer's DREQ may end the wait sooner.
		t := time.NewTimer(until - now)
		select {
		case <-t.C:
		case <-a.handled:
		}
		t.Stop()
	}
}

func (a *Agent) release() error {
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	if a.gsi != nil {
		keep(a.gsi.Destroy())
	}
	if a.mr != nil {
		keep(a.mr.Dereg())
	}
	if a.cq != nil {
		keep(a.cq.Destroy())
	}
	if a.pd != nil {
		keep(a.pd.Dealloc())
	}
	return first
}

// agentHandler is the engine's Handler (a.mu held).
type agentHandler Agent

// Received implements Handler: whether the connection's QP got anything
// (the fallback at the REP's time-out of QP.NotifyReceive's COMM_EST).
func (h *agentHandler) Received(id uint32) bool {
	c := h.conns[id]
	return c != nil && c.qp != nil && c.qp.Stats().RxFrames > 0
}

// Event implements Handler.
func (h *agentHandler) Event(ev *Event) {
	a := (*Agent)(h)
	switch ev.Type {
	case EventRequest, EventSIDRRequest:
		a.onRequestLocked(ev)
		return
	case EventSIDRReply, EventUnreachable:
		if q := a.queries[ev.ID]; q != nil {
			if ev.Type == EventSIDRReply {
				q.rep = ev.SIDRREP.Fields()
				q.rep.PrivateData = append([]byte(nil), ev.PrivateData...)
				q.answered = true
			}
			close(q.ch)
			delete(a.queries, ev.ID)
			return
		}
	}
	if r := a.reqs[ev.ID]; r != nil {
		// A request the application has not answered timed out or was
		// withdrawn by the peer.
		delete(a.reqs, ev.ID)
		r.gone = true
		return
	}
	c := a.conns[ev.ID]
	if c == nil {
		return
	}
	switch ev.Type {
	case EventReply:
		c.rep = ev.REP.Fields()
		c.peerData = append(c.peerData[:0], ev.PrivateData...)
		c.rep.PrivateData = c.peerData
		c.replied = true
		c.signal()
	case EventEstablished:
		c.established = true
		c.signal()
	case EventRejected:
		c.failLocked(&RejectError{Reason: ev.Reason, ARI: append([]byte(nil), ev.ARI...),
			PrivateData: append([]byte(nil), ev.PrivateData...)})
		a.todo = append(a.todo, func() { a.forgetLocked(c) })
	case EventUnreachable:
		c.failLocked(ErrUnreachable)
		a.todo = append(a.todo, func() { a.forgetLocked(c) })
	case EventDisconnectRequest:
		// RDMA_CM_EVENT_DISCONNECTED: the QP stays as it is, so what the
		// peer sent before its DREQ completes and our own sends are not
		// flushed by the CM; Disconnect or Close stops the QP and answers
		// with the DREP (the kernel's rdma_disconnect, rdma_destroy_id).
		c.failLocked(ErrDisconnected)
	case EventDisconnected:
		c.failLocked(nil)
	case EventTimewaitExit:
		delete(a.conns, ev.ID)
	}
}

// forgetLocked drops c once the engine has forgotten its connection
// (connections that end in time-wait are dropped at EventTimewaitExit).
func (a *Agent) forgetLocked(c *Conn) {
	if a.eng.State(c.id) == StateIdle && a.conns[c.id] == c {
		delete(a.conns, c.id)
	}
}

// onRequestLocked checks a REQ as the kernel's rdma_cm does
// (cma_ib_id_from_event, cma_check_req_qp_type) and queues it on its
// listener; a REQ it refuses is rejected with reason 28 and no data, as
// the kernel does once a listener exists.
func (a *Agent) onRequestLocked(ev *Event) {
	id := ev.ID
	sidr := ev.Type == EventSIDRRequest
	reject := func(reason mad.RejReason) {
		a.todo = append(a.todo, func() {
			if sidr {
				a.eng.SIDRReply(a.now(), id, &mad.SIDRREPFields{Status: uint8(mad.SIDRReject)})
				return
			}
			a.eng.Reject(a.now(), id, reason, nil, nil)
		})
	}
	var sid uint64
	var pd []byte
	if sidr {
		sid, pd = ev.SIDRREQ.ServiceID(), ev.SIDRREQ.PrivateData()
	} else {
		sid, pd = ev.REQ.ServiceID(), ev.REQ.PrivateData()
	}
	if len(a.listeners[sid]) == 0 {
		reject(mad.RejInvalidServiceID)
		return
	}
	h := mad.CMAHeader(pd[:mad.CMAHeaderSize])
	dst, src := h.Dst(), h.Src()
	l := a.listenerFor(sid, dst)
	switch {
	case l == nil, h.Check() != nil, !a.isLocal(dst), !src.IsValid(), src.IsUnspecified(), src.IsLoopback(), src.IsMulticast(),
		!sidr && l.ps == mad.PortSpaceTCP && ev.REQ.TransportType() != 0,
		!sidr && l.ps == mad.PortSpaceUDP, sidr && l.ps == mad.PortSpaceTCP:
		reject(mad.RejConsumerDefined)
		return
	}
	if !sidr {
		switch r := ev.REQ; {
		case !a.isLocal(addrOf(r.PrimaryRemoteGID())):
			reject(mad.RejInvalidGID)
			return
		case qp.MTU(r.PathMTU()).Bytes() == 0:
			reject(mad.RejInvalidMTU)
			return
		}
	}
	if len(l.queue) == cap(l.queue) {
		reject(mad.RejNoResources)
		return
	}
	req := &Request{a: a, id: id, peer: *ev.Peer, sidr: sidr,
		Remote: netip.AddrPortFrom(src, h.Port()), Local: netip.AddrPortFrom(dst, l.port)}
	req.data = append([]byte(nil), pd...)
	req.Param.PrivateData = req.data[mad.CMAHeaderSize:]
	if !sidr {
		r := ev.REQ
		req.fields = r.Fields()
		req.fields.PrivateData = req.data
		req.Param.ResponderResources, req.Param.InitiatorDepth = r.ResponderResources(), r.InitiatorDepth()
		req.Param.FlowControl, req.Param.RetryCount, req.Param.RNRRetryCount = r.E2EFlowControl(), r.RetryCount(), r.RNRRetryCount()
	}
	a.reqs[id] = req
	l.queue <- req
}

// listenerFor returns the listener of sid bound to dst, or else the one
// bound to no address (cma_find_listener), or nil.
func (a *Agent) listenerFor(sid uint64, dst netip.Addr) *Listener {
	var any *Listener
	for _, l := range a.listeners[sid] {
		switch {
		case wildcard(l.addr):
			any = l
		case l.addr.Unmap() == dst.Unmap():
			return l
		}
	}
	return any
}

// wildcard reports whether a listener bound to addr takes every address.
func wildcard(addr netip.Addr) bool { return !addr.IsValid() || addr.IsUnspecified() }

// isLocal reports whether addr is one of the device's addresses.
func (a *Agent) isLocal(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, g := range a.d.GIDs() {
		if g.Unmap() == addr {
			return true
		}
	}
	return false
}

// Listener receives connection requests for a port (rdma_listen).
type Listener struct {
	a     *Agent
	ps    mad.PortSpace
	port  uint16
	addr  netip.Addr // bound address; unspecified means any
	sid   uint64
	queue chan *Request
	done  chan struct{}

	closed bool // guarded by a.mu
}

// ListenOptions are the options of Listen.
type ListenOptions struct {
	PortSpace mad.PortSpace // 0 means TCP (RDMA_PS_TCP)
	Backlog   int           // requests waiting for Accept; 0 means 128
}

// Listen listens for connections to addr's port (and, when addr's address
// is specified, to that address only), as rdma_bind_addr and rdma_listen.
func (a *Agent) Listen(addr netip.AddrPort, o *ListenOptions) (*Listener, error) {
	var opts ListenOptions
	if o != nil {
		opts = *o
	}
	if opts.PortSpace == 0 {
		opts.PortSpace = mad.PortSpaceTCP
	}
	if opts.Backlog <= 0 {
		opts.Backlog = 128
	}
	if !wildcard(addr.Addr()) && !a.isLocal(addr.Addr()) {
		return nil, fmt.Errorf("cm: listen on %v: %w of %s", addr, ErrAddrNotLocal, a.d.Info().Name)
	}
	l := &Listener{a: a, ps: opts.PortSpace, port: addr.Port(), addr: addr.Addr(),
		sid: mad.ServiceID(opts.PortSpace, addr.Port()), queue: make(chan *Request, opts.Backlog), done: make(chan struct{})}
	err := a.do(func(time.Duration) error {
		ls := a.listeners[l.sid]
		for _, o := range ls {
			if wildcard(o.addr) && wildcard(l.addr) || !wildcard(o.addr) && o.addr.Unmap() == l.addr.Unmap() {
				return fmt.Errorf("listen on %v: %w", addr, ErrListening)
			}
		}
		if len(ls) == 0 {
			if err := a.eng.Listen(l.sid); err != nil {
				return err
			}
		}
		a.listeners[l.sid] = append(ls, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	return l, nil
}

// Addr returns the address the listener was given.
func (l *Listener) Addr() netip.AddrPort { return netip.AddrPortFrom(l.addr, l.port) }

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	for {
		select {
		case r := <-l.queue:
			l.a.mu.Lock()
			gone := r.gone
			l.a.mu.Unlock()
			if gone {
				continue
			}
			return r, nil
		case <-l.done:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops listening; requests not accepted yet are rejected.
func (l *Listener) Close() error {
	return l.a.do(func(time.Duration) error {
		l.closeLocked()
		return nil
	})
}

func (l *Listener) closeLocked() {
	if l.closed {
		return
	}
	l.closed = true
	a := l.a
	ls := a.listeners[l.sid]
	for i, o := range ls {
		if o == l {
			ls = append(ls[:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		a.eng.Unlisten(l.sid)
		delete(a.listeners, l.sid)
	} else {
		a.listeners[l.sid] = ls
	}
	close(l.done)
	for {
		select {
		case r := <-l.queue:
			if !r.gone {
				a.eng.Reject(a.now(), r.id, mad.RejConsumerDefined, nil, nil)
				delete(a.reqs, r.id)
			}
		default:
			return
		}
	}
}

// Request is a connection request (RDMA_CM_EVENT_CONNECT_REQUEST): Accept
// or Reject it.
type Request struct {
	Remote netip.AddrPort // the active side's address and port (the rdma_cm header's)
	Local  netip.AddrPort // the address it connected to
	// Param is what the peer asked: its responder resources and initiator
	// depth, retries, flow control, and its private data after the
	// rdma_cm header (56 bytes, as librdmacm reports it).
	Param ConnParam

	a      *Agent
	id     uint32
	peer   Peer
	sidr   bool // a SIDR_REQ: answer with AcceptUD or Reject
	fields mad.REQFields
	data   []byte
	gone   bool // guarded by a.mu: timed out or withdrawn
}

// REQ returns the request's REQ fields.
func (r *Request) REQ() mad.REQFields { return r.fields }

// QPN returns the peer's QP number.
func (r *Request) QPN() uint32 { return r.fields.LocalQPN }

// UD reports whether the request is a SIDR request (a UD peer asking for
// a QP number and Q_Key): answer it with AcceptUD.
func (r *Request) UD() bool { return r.sidr }

// Reject refuses the request with reason 28 (consumer defined) and data
// (at most 148 bytes), as rdma_reject; a SIDR request gets a SIDR_REP
// with status "rejected" and the data.
func (r *Request) Reject(data []byte) error {
	return r.a.do(func(now time.Duration) error {
		delete(r.a.reqs, r.id)
		if r.sidr {
			return r.a.eng.SIDRReply(now, r.id, &mad.SIDRREPFields{Status: uint8(mad.SIDRReject), PrivateData: data})
		}
		return r.a.eng.Reject(now, r.id, mad.RejConsumerDefined, nil, data)
	})
}

// AcceptUD answers a SIDR request with q's QP number and rdma_cm's UDP
// Q_Key (mad.RDMAUDPQKey; q must use it) and data (at most 136 bytes), as
// rdma_accept on a UD rdma_cm ID. The requester's own QP number is not in
// a SIDR request: rdma_cm programs send it in their first message.
func (r *Request) AcceptUD(q *roce.QP, data []byte) error {
	if !r.sidr {
		return fmt.Errorf("cm: accept UD: not a SIDR request")
	}
	return r.a.do(func(now time.Duration) error {
		if r.gone {
			return ErrUnreachable
		}
		delete(r.a.reqs, r.id)
		return r.a.eng.SIDRReply(now, r.id, &mad.SIDRREPFields{Status: uint8(mad.SIDRValid), QPN: q.QPN(),
			QKey: mad.RDMAUDPQKey, PrivateData: data})
	})
}

// AddressVector returns where the requester's datagrams come from: the
// address vector to answer it with.
func (r *Request) AddressVector() roce.AddressVector {
	return roce.AddressVector{DstMAC: r.peer.MAC, SrcMAC: r.a.mac, DstIP: r.peer.Addr.Unmap(), SrcIP: r.peer.Local.Unmap(), HopLimit: 64}
}

// udQuery is a SIDR request of ResolveUD waiting for its answer.
type udQuery struct {
	ch       chan struct{}
	answered bool // guarded by a.mu
	rep      mad.SIDRREPFields
}

// UDTarget is a UD service found by ResolveUD (rdma_cm's ESTABLISHED event
// on a UD ID): send to QPN with QKey through AV.
type UDTarget struct {
	AV          roce.AddressVector
	QPN         uint32
	QKey        uint32
	PrivateData []byte // the SIDR_REP's (136 bytes)
}

// SIDRError is the error of a SIDR request answered with a status other
// than valid.
type SIDRError struct {
	Status      mad.SIDRStatus
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return fmt.Sprintf("cm: SIDR request refused: status %d (%v)", uint8(e.Status), e.Status)
}

// ResolveUD asks the UD service at dst for its QP number and Q_Key with
// SIDR (IBTA §12.11), as rdma_connect on a UD rdma_cm ID: a SIDR_REQ with
// the rdma_cm header and o.Param's private data (at most 180 bytes),
// resent as the kernel does.
func (a *Agent) ResolveUD(ctx context.Context, dst netip.AddrPort, o *DialOptions) (*UDTarget, error) {
	var opts DialOptions
	if o != nil {
		opts = *o
	}
	if opts.PortSpace == 0 {
		opts.PortSpace = mad.PortSpaceUDP
	}
	var user []byte
	if opts.Param != nil {
		user = opts.Param.PrivateData
	}
	if len(user) > mad.SIDRREQPrivateSize-mad.CMAHeaderSize {
		return nil, fmt.Errorf("cm: resolve %v: %d bytes of private data, at most %d", dst, len(user), mad.SIDRREQPrivateSize-mad.CMAHeaderSize)
	}
	av, sport, err := a.route(ctx, dst, &opts)
	if err != nil {
		return nil, err
	}
	var priv [mad.SIDRREQPrivateSize]byte
	mad.CMAHeader(priv[:mad.CMAHeaderSize]).Encode(av.SrcIP, av.DstIP, sport)
	copy(priv[mad.CMAHeaderSize:], user)
	peer := Peer{Addr: av.DstIP, Local: av.SrcIP, MAC: av.DstMAC}
	q := &udQuery{ch: make(chan struct{})}
	var id uint32
	err = a.do(func(now time.Duration) error {
		var err error
		id, err = a.eng.SIDRQuery(now, &peer, &mad.SIDRREQFields{PKey: 0xffff, ServiceID: mad.ServiceID(opts.PortSpace, dst.Port()),
			PrivateData: priv[:]}, ms(ResponseTimeout), MaxCMRetries)
		if err == nil {
			a.queries[id] = q
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cm: resolve %v: %w", dst, err)
	}
	select {
	case <-q.ch:
	case <-ctx.Done():
		a.do(func(now time.Duration) error {
			delete(a.queries, id)
			a.eng.Destroy(now, id)
			return nil
		})
		return nil, fmt.Errorf("cm: resolve %v: %w", dst, ctx.Err())
	}
	a.mu.Lock()
	answered, rep := q.answered, q.rep
	a.mu.Unlock()
	switch {
	case !answered:
		return nil, fmt.Errorf("cm: resolve %v: %w", dst, ErrUnreachable)
	case mad.SIDRStatus(rep.Status) != mad.SIDRValid:
		return nil, fmt.Errorf("cm: resolve %v: %w", dst, &SIDRError{Status: mad.SIDRStatus(rep.Status), PrivateData: rep.PrivateData})
	}
	return &UDTarget{AV: av, QPN: rep.QPN, QKey: rep.QKey, PrivateData: rep.PrivateData}, nil
}

// route resolves dst for Dial and ResolveUD: the address vector (source
// address from opts or the route) and the rdma_cm header's source port.
func (a *Agent) route(ctx context.Context, dst netip.AddrPort, opts *DialOptions) (roce.AddressVector, uint16, error) {
	av, err := a.d.Resolve(ctx, dst.Addr())
	if err != nil {
		return av, 0, fmt.Errorf("cm: resolve %v: %w", dst, err)
	}
	if opts.Src.IsValid() {
		if !a.isLocal(opts.Src) {
			return av, 0, fmt.Errorf("cm: resolve %v: source %v: %w of %s", dst, opts.Src, ErrAddrNotLocal, a.d.Info().Name)
		}
		av.SrcIP = opts.Src.Unmap()
	}
	av.HopLimit, av.TrafficClass = 64, opts.TOS
	sport := opts.SrcPort
	if sport == 0 {
		sport = uint16(32768 + randN(28232)) // ip_local_port_range
	}
	return av, sport, nil
}

// Accept brings q (in RESET or INIT, of the requested transport) to RTS
// towards the requester as the kernel's rdma_cm would, sends the REP, and
// waits until the connection is established (the RTU, or data on q) or
// fails. p nil means librdmacm's rdma_accept(NULL): serve as many READs as
// the peer asked to issue, issue as many as it serves, RNR retry 7.
func (r *Request) Accept(ctx context.Context, q *roce.QP, p *ConnParam) (*Conn, error) {
	if r.sidr {
		return nil, fmt.Errorf("cm: accept: a SIDR request is answered with AcceptUD")
	}
	a := r.a
	f := &r.fields
	param := ConnParam{ResponderResources: min(f.InitiatorDepth, maxRdAtomic),
		InitiatorDepth: min(f.ResponderResources, maxRdAtomic), RetryCount: f.RetryCount, RNRRetryCount: 7}
	if p != nil {
		param = *p
		param.ResponderResources = min(param.ResponderResources, maxRdAtomic)
		param.InitiatorDepth = min(param.InitiatorDepth, f.ResponderResources, maxRdAtomic)
	}
	param.FlowControl = p != nil && p.FlowControl
	mtu := min(roce.MTU(f.PathMTU), a.d.Info().ActiveMTU)
	av := roce.AddressVector{DstMAC: r.peer.MAC, SrcMAC: a.mac, DstIP: r.peer.Addr.Unmap(), SrcIP: r.peer.Local.Unmap(),
		HopLimit: 64, TrafficClass: f.PrimaryTrafficClass}
	psn := randPSN()
	timeout := ackTimeout(CAAckDelay, max(f.PrimaryLocalACKTimeout, 1)-1)
	if param.ACKTimeout != 0 {
		timeout = param.ACKTimeout
	}
	sq, rq := connPSNs(false, f.StartingPSN, psn)
	rtr, rtrMask := rtrAttrs(av, mtu, f.LocalQPN, rq, param.ResponderResources, param.MinRNRTimer)
	rts, rtsMask := rtsAttrs(sq, timeout, f.RetryCount, f.RNRRetryCount, param.InitiatorDepth)
	if err := readyQP(q, rtr, rtrMask, rts, rtsMask); err != nil {
		r.Reject(nil)
		return nil, fmt.Errorf("cm: accept: %w", err)
	}
	c := newConn(a, q, r.Local, r.Remote, param)
	c.peerData = r.Param.PrivateData
	// COMM_EST: if the RTU is lost, the first packet on q establishes
	// the connection (armed before the REP goes, so none is missed).
	id := r.id
	q.NotifyReceive(func() { a.received(id) })
	rep := mad.REPFields{LocalQPN: q.QPN(), StartingPSN: psn, ResponderResources: param.ResponderResources,
		InitiatorDepth: param.InitiatorDepth, TargetACKDelay: CAAckDelay, E2EFlowControl: param.FlowControl,
		RNRRetryCount: param.RNRRetryCount, SRQ: q.HasSRQ(), PrivateData: param.PrivateData}
	err := a.do(func(now time.Duration) error {
		if r.gone {
			return ErrUnreachable
		}
		delete(a.reqs, r.id)
		if err := a.eng.Accept(now, r.id, &rep); err != nil {
			return err
		}
		c.id = r.id
		a.conns[r.id] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cm: accept: %w", err)
	}
	for {
		a.mu.Lock()
		est, failed, cerr := c.established, c.failed, c.err
		a.mu.Unlock()
		switch {
		case est:
			return c, nil
		case failed:
			if errors.Is(cerr, ErrUnreachable) {
				return nil, fmt.Errorf("cm: accept: %w: the REP went out %d times", cerr, 1+int(f.MaxCMRetries))
			}
			return nil, fmt.Errorf("cm: accept: %w", cerr)
		}
		select {
		case <-c.step:
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

// DialOptions are the options of Dial.
type DialOptions struct {
	Src       netip.Addr    // source address; zero means the route's
	SrcPort   uint16        // the port in the rdma_cm header; 0 means a random one
	PortSpace mad.PortSpace // 0 means TCP
	Param     *ConnParam    // nil means rdma_connect(NULL)'s
	TOS       uint8         // traffic class of the connection (rdma_set_option TOS)
}

// Dial connects q (RC or UC, in RESET or INIT) to the listener at dst, as
// rdma_resolve_addr, rdma_resolve_route and rdma_connect: it resolves the
// peer, sends the REQ (retried as the kernel does), brings q to RTS from
// the REP and sends the RTU.
func (a *Agent) Dial(ctx context.Context, dst netip.AddrPort, q *roce.QP, o *DialOptions) (*Conn, error) {
	var opts DialOptions
	if o != nil {
		opts = *o
	}
	if opts.PortSpace == 0 {
		opts.PortSpace = mad.PortSpaceTCP
	}
	p := defaultConnParam()
	if opts.Param != nil {
		p = *opts.Param
		p.ResponderResources = min(p.ResponderResources, maxRdAtomic)
		p.InitiatorDepth = min(p.InitiatorDepth, maxRdAtomic)
	}
	if len(p.PrivateData) > mad.REQPrivateSize-mad.CMAHeaderSize {
		return nil, fmt.Errorf("cm: dial %v: %d bytes of private data, at most %d", dst, len(p.PrivateData), mad.REQPrivateSize-mad.CMAHeaderSize)
	}
	av, sport, err := a.route(ctx, dst, &opts)
	if err != nil {
		return nil, err
	}
	var priv [mad.REQPrivateSize]byte
	mad.CMAHeader(priv[:mad.CMAHeaderSize]).Encode(av.SrcIP, av.DstIP, sport)
	copy(priv[mad.CMAHeaderSize:], p.PrivateData)
	psn := randPSN()
	transport := uint8(0)
	if q.Type() == roce.UC {
		transport = 1
	}
	mtu := a.d.Info().ActiveMTU
	localACK := ackTimeout(CAAckDelay, PacketLifeTime)
	if p.ACKTimeout != 0 {
		localACK = p.ACKTimeout
	}
	req := ConnectRequest{PacketLifeTime: PacketLifeTime, REQ: mad.REQFields{
		ServiceID: mad.ServiceID(opts.PortSpace, dst.Port()), LocalQPN: q.QPN(),
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: ResponseTimeout, TransportType: transport, E2EFlowControl: p.FlowControl,
		StartingPSN: psn, LocalCMResponseTimeout: ResponseTimeout, RetryCount: p.RetryCount, PKey: 0xffff,
		PathMTU: uint8(mtu), RNRRetryCount: p.RNRRetryCount, MaxCMRetries: MaxCMRetries, SRQ: q.HasSRQ(),
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: gidOf(av.SrcIP), PrimaryRemoteGID: gidOf(av.DstIP),
		PrimaryFlowLabel:    (uint32(sport)*31 + uint32(dst.Port())) & 0xfffff,
		PrimaryTrafficClass: opts.TOS, PrimaryHopLimit: 64,
		PrimaryLocalACKTimeout: localACK,
		PrivateData:            priv[:],
	}}
	peer := Peer{Addr: av.DstIP, Local: av.SrcIP, MAC: av.DstMAC}
	c := newConn(a, q, netip.AddrPortFrom(av.SrcIP, sport), dst, p)
	err = a.do(func(now time.Duration) error {
		id, err := a.eng.Connect(now, &peer, &req)
		if err != nil {
			return err
		}
		c.id = id
		a.conns[id] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cm: dial %v: %w", dst, err)
	}
	for {
		a.mu.Lock()
		replied, failed, cerr := c.replied, c.failed, c.err
		a.mu.Unlock()
		if failed {
			if errors.Is(cerr, ErrUnreachable) {
				return nil, fmt.Errorf("cm: dial %v: %w: the REQ went out %d times", dst, cerr, 1+MaxCMRetries)
			}
			return nil, fmt.Errorf("cm: dial %v: %w", dst, cerr)
		}
		if replied {
			break
		}
		select {
		case <-c.step:
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("cm: dial %v: %w", dst, ctx.Err())
		}
	}
	// The REP: ready q with the crossed-over depths, then the RTU.
	rep := &c.rep
	c.param.ResponderResources, c.param.InitiatorDepth = rep.InitiatorDepth, rep.ResponderResources
	c.param.RNRRetryCount = rep.RNRRetryCount
	sq, rq := connPSNs(true, psn, rep.StartingPSN)
	rtr, rtrMask := rtrAttrs(av, mtu, rep.LocalQPN, rq, rep.InitiatorDepth, p.MinRNRTimer)
	timeout := ackTimeout(rep.TargetACKDelay, PacketLifeTime)
	if p.ACKTimeout != 0 {
		timeout = p.ACKTimeout
	}
	rts, rtsMask := rtsAttrs(sq, timeout, p.RetryCount, rep.RNRRetryCount, rep.ResponderResources)
	if err := readyQP(q, rtr, rtrMask, rts, rtsMask); err != nil {
		a.do(func(now time.Duration) error {
			err := a.eng.Reject(now, c.id, mad.RejConsumerDefined, nil, nil)
			c.failLocked(ErrClosed)
			a.forgetLocked(c)
			return err
		})
		return nil, fmt.Errorf("cm: dial %v: %w", dst, err)
	}
	err = a.do(func(now time.Duration) error {
		if c.failed {
			return c.err
		}
		c.established = true
		return a.eng.Establish(now, c.id, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("cm: dial %v: %w", dst, err)
	}
	return c, nil
}

// Conn is an RDMA CM connection: a QP at RTS towards the peer's, and the
// CM state that ends it.
type Conn struct {
	a      *Agent
	id     uint32
	qp     *roce.QP
	local  netip.AddrPort
	remote netip.AddrPort
	param  ConnParam
	step   chan struct{}
	done   chan struct{}

	// Guarded by a.mu.
	rep         mad.REPFields
	peerData    []byte
	replied     bool
	established bool
	failed      bool
	err         error
}

func newConn(a *Agent, q *roce.QP, local, remote netip.AddrPort, p ConnParam) *Conn {
	return &Conn{a: a, qp: q, local: local, remote: remote, param: p, step: make(chan struct{}, 1), done: make(chan struct{})}
}

func (c *Conn) signal() {
	select {
	case c.step <- struct{}{}:
	default:
	}
}

// failLocked ends the connection with err (nil: a disconnection we asked for).
func (c *Conn) failLocked(err error) {
	if c.failed {
		return
	}
	c.failed, c.err = true, err
	close(c.done)
	c.signal()
}

// QP returns the connection's queue pair.
func (c *Conn) QP() *roce.QP { return c.qp }

// LocalAddr and RemoteAddr return the connection's addresses and ports.
func (c *Conn) LocalAddr() netip.AddrPort  { return c.local }
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// Param returns the connection's parameters as this side uses them:
// responder resources and initiator depth after the exchange.
func (c *Conn) Param() ConnParam { return c.param }

// PrivateData returns the peer's private data: the REP's (196 bytes) on
// the active side, the REQ's after the rdma_cm header (56) on the passive.
func (c *Conn) PrivateData() []byte { return c.peerData }

// ID returns the connection's local communication ID.
func (c *Conn) ID() uint32 { return c.id }

// Done is closed when the connection ends: the peer disconnected or was
// lost, or Disconnect finished. After the peer's DREQ the QP is still as
// it was, so that what the peer sent before completes; call Disconnect
// or Close to answer it.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended: ErrDisconnected (the peer's DREQ),
// ErrUnreachable, a *RejectError, ErrClosed, or nil after Disconnect.
func (c *Conn) Err() error {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return c.err
}

// Disconnect ends the connection as rdma_disconnect does: the QP moves to
// ERR (its outstanding work requests are flushed), then a DREQ goes out;
// it waits for the DREP (or the DREQ's last time-out) or ctx. After the
// peer's DREQ (Done closed, Err ErrDisconnected) it answers with the DREP
// and returns.
func (c *Conn) Disconnect(ctx context.Context) error {
	c.qp.Modify(&roce.Attr{State: roce.StateErr}, roce.AttrState)
	err := c.a.do(func(now time.Duration) error {
		if c.failed && c.a.eng.State(c.id) != StateDreqRcvd {
			return nil // ended already, or answered by Close
		}
		return c.a.eng.Disconnect(now, c.id, nil)
	})
	if err != nil {
		return fmt.Errorf("cm: disconnect: %w", err)
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close lets the connection go without waiting, as rdma_destroy_id: the CM
// sends what Engine.Destroy sends and the QP moves to ERR. The QP stays
// the caller's to destroy.
func (c *Conn) Close() error {
	c.qp.Modify(&roce.Attr{State: roce.StateErr}, roce.AttrState)
	return c.a.do(func(now time.Duration) error {
		c.a.eng.Destroy(now, c.id)
		c.failLocked(ErrClosed)
		// The engine raises no more events for a destroyed connection
		// (its EventTimewaitExit included), so c goes now; what the
		// engine still does for it (a DREQ, time-wait) needs no Conn.
		if c.a.conns[c.id] == c {
			delete(c.a.conns, c.id)
		}
		return nil
	})
}

// randPSN is a random first PSN (the kernel's random 24-bit seq_num).
func randPSN() uint32 { return rand.Uint32() & 0xffffff }

func randN(n int) int { return rand.IntN(n) }
