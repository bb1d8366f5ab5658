//go:build linux

package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// perf -R is perftest 4.5's rdma_cm mode (work_rdma_cm): the exchange runs
// over an RC connection that rdma_cm makes to the port (the control
// connection, perftest's create_comm_struct), and every data QP is
// connected with rdma_cm to the same port (create_rdma_cm_connection):
//
//  1. control connection; versions, system data, MTU over it;
//  2. a sync (an all-zero address), the data connections, another sync;
//  3. the test's exchanges as over TCP, addresses 56 bytes, no "done";
//  4. the client disconnects every data connection, the server answers;
//     the control connection goes as the ids are destroyed.
//
// With -c UD (send_bw, send_lat) the control connection is RC all the
// same; the data QPs are UD QPs of rdma_cm's UDP port space, at RTS with
// its Q_Key (mad.RDMAUDPQKey) as rdma_create_qp leaves them, and "connecting"
// one is SIDR (rdma_connect on a UD ID): the client's SIDR_REQ, the
// server's SIDR_REP with its QP number and Q_Key, where the client sends.
// SIDR does not tell the server the client's QP: a latency test's client
// sends it one SEND with immediate, the immediate its QP number, which
// the server answers at the address of its GRH. Step 4 sends nothing for
// UD.

const (
	// perfRetryCount is perftest's --retry_count default (DEF_RETRY_COUNT).
	perfRetryCount = 7
	// perfMinRNRTimer is perftest's MIN_RNR_TIMER: the RNR NAK timer its
	// server sets on its RC data QPs once it has accepted them.
	perfMinRNRTimer = 12
	// perfCMLinger is the least the server waits for the client's DREQs
	// before it disconnects the data connections itself (see
	// perfRun.cmLinger).
	perfCMLinger = 500 * time.Millisecond
)

// perfCM is the rdma_cm side of a run with -R.
type perfCM struct {
	agent *cm.Agent
	ctl   *cmChannel
	data  []*cm.Conn // QP i's connection
}

// perfCMHook, when not nil (tests), sees the run once its data
// connections are up (stage "connected") and once they are ended
// ("closed"). Server and client of one test call it from two goroutines.
var perfCMHook func(r *perfRun, stage string)

// cmChannel is perftest's control connection: an RC QP that keeps one
// receive of a pingpong_dest's size posted and carries each message of
// the exchange as one signaled SEND, waiting for each completion
// (rdma_write_data, rdma_read_data). It is the perftest.Transport of the
// exchange; its methods belong to the run's goroutine.
type cmChannel struct {
	ctx      context.Context
	pd       *roce.PD
	scq, rcq *roce.CQ
	qp       *roce.QP
	mr       *roce.MR
	buf      []byte // the receive area, then the send area
	conn     *cm.Conn
	deadline time.Time
	wait     time.Duration // what the deadline was set for, for errors
	wcs      [1]roce.WC
}

const (
	ctlSendOff = 64  // the send area; the receive area is at 0
	ctlMaxMsg  = 128 // the longest message sent
	ctlWRID    = 5   // perftest's SYNC_SPEC_ID
	ctlRecvLen = perftest.PingpongDestSize
)

// newCMChannel makes the control QP and posts its receive.
func newCMChannel(ctx context.Context, dev *roce.Device) (_ *cmChannel, err error) {
	c := &cmChannel{ctx: ctx, buf: make([]byte, ctlSendOff+ctlMaxMsg)}
	defer func() {
		if err != nil {
			c.destroy()
		}
	}()
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if c.scq, err = dev.CreateCQ(4); err != nil {
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(4); err != nil {
		return nil, err
	}
	if c.qp, err = c.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: c.scq, RecvCQ: c.rcq, MaxSendWR: 2, MaxRecvWR: 2, MaxSGE: 1}); err != nil {
		return nil, err
	}
	if c.mr, err = c.pd.RegMR(c.buf, roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	if err = cm.PrepareQP(c.qp); err != nil {
		return nil, err
	}
	if err = c.postRecv(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cmChannel) postRecv() error {
	return c.qp.PostRecv(&roce.RecvWR{ID: ctlWRID, SGL: []roce.SGE{c.mr.SGE(0, ctlRecvLen)}})
}

// SetDeadline bounds the next messages.
func (c *cmChannel) SetDeadline(t time.Time) error {
	c.deadline, c.wait = t, time.Until(t).Round(time.Millisecond)
	return nil
}

// Send implements perftest.Transport.
func (c *cmChannel) Send(b []byte) error {
	if len(b) > ctlMaxMsg {
		return fmt.Errorf("control message of %d bytes, at most %d", len(b), ctlMaxMsg)
	}
	copy(c.buf[ctlSendOff:], b)
	wr := roce.SendWR{ID: ctlWRID, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{c.mr.SGE(ctlSendOff, len(b))}}
	if err := c.qp.PostSend(&wr); err != nil {
		return c.why(fmt.Errorf("post send on the rdma_cm control QP: %w", err))
	}
	wc, err := c.next(c.scq, true)
	if err != nil {
		return err
	}
	if wc.Status != roce.WCSuccess {
		return c.why(wcError(&wc))
	}
	return nil
}

// Recv implements perftest.Transport.
func (c *cmChannel) Recv(b []byte) error {
	wc, err := c.next(c.rcq, false)
	if err != nil {
		return err
	}
	if wc.Status != roce.WCSuccess {
		return c.why(wcError(&wc))
	}
	if int(wc.ByteLen) < len(b) {
		return fmt.Errorf("%w: control message of %d bytes, want %d", perftest.ErrBadMessage, wc.ByteLen, len(b))
	}
	copy(b, c.buf[:len(b)])
	if err := c.postRecv(); err != nil {
		return c.why(fmt.Errorf("post receive on the rdma_cm control QP: %w", err))
	}
	return nil
}

// next waits for the completion of the one request outstanding on cq;
// send says it is a SEND, whose wait the peer's DREQ ends: the peer got
// it (it disconnects once it has the answer it waited for) if its ACK
// was lost, and as its QP is in ERR the ACK will not come. A receive
// still completes after the DREQ, if the message was sent before it.
func (c *cmChannel) next(cq *roce.CQ, send bool) (roce.WC, error) {
	ctx := c.ctx
	if send && c.conn != nil {
		var cancel context.CancelFunc
		ctx, cancel = untilDone(ctx, c.conn.Done())
		defer cancel()
	}
	if _, err := waitCQ(ctx, cq, c.wcs[:], c.deadline, c.wait); err != nil {
		return roce.WC{}, c.why(err)
	}
	return c.wcs[0], nil
}

// untilDone returns ctx, ended too when done closes (a Conn's Done).
func untilDone(ctx context.Context, done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// why says that err comes of the peer's disconnecting, when it does.
func (c *cmChannel) why(err error) error {
	if c.conn != nil && errors.Is(c.conn.Err(), cm.ErrDisconnected) {
		return fmt.Errorf("%w (the rdma_cm control connection; %w)", perftest.ErrPeerClosed, err)
	}
	return err
}

// destroy frees the control QP's resources (after the connection ended).
func (c *cmChannel) destroy() {
	if c.qp != nil {
		c.qp.Destroy()
	}
	if c.mr != nil {
		c.mr.Dereg()
	}
	for _, cq := range []*roce.CQ{c.scq, c.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
}

// cmParam is the rdma_conn_param perftest gives rdma_connect and
// rdma_accept for data QPs: READs and atomics both ways out_reads deep
// for read and atomic tests, none for the others; transport and RNR retries
// --retry_count.
func (r *perfRun) cmParam() *cm.ConnParam {
	o := r.o
	p := &cm.ConnParam{RetryCount: uint8(min(o.retry, 7)), RNRRetryCount: uint8(min(o.retry, 7))}
	if o.test.verb == perftest.Read || o.test.verb == perftest.Atomic {
		p.ResponderResources, p.InitiatorDepth = perfOutReads, perfOutReads
	}
	if r.server {
		p.MinRNRTimer = perfMinRNRTimer
	}
	return p
}

// cmControl starts the connection manager on the device and makes the
// control connection within setup: the server listens on the port for one
// request and stops listening once it has accepted it
// (rdma_server_connect), the client connects to it (rdma_client_connect).
// Each asks for no READs, retries --retry_count, RNR retries 7. The server
// prints its "Waiting" banner once it listens. The exchange over the
// connection is bounded by ctx.
func (r *perfRun) cmControl(ctx, setup context.Context) error {
	o := r.o
	a, err := cm.Open(r.dev, cm.AgentConfig{Backlog: max(128, o.qps)})
	if err != nil {
		return fmt.Errorf("perf: cannot start rdma_cm on %s: %w", r.dev.Info().Name, err)
	}
	r.cm = &perfCM{agent: a}
	ch, err := newCMChannel(ctx, r.dev)
	if err != nil {
		return fmt.Errorf("perf: rdma_cm control QP: %w", err)
	}
	r.cm.ctl = ch
	r.ctl = ch
	param := &cm.ConnParam{RetryCount: uint8(min(o.retry, 7)), RNRRetryCount: 7}
	var conn *cm.Conn
	if r.server {
		l, err := a.Listen(netip.AddrPortFrom(netip.Addr{}, uint16(o.port)), &cm.ListenOptions{Backlog: 1})
		if err != nil {
			return fmt.Errorf("perf: couldn't listen to rdma_cm port %d: %w", o.port, err)
		}
		defer l.Close()
		fmt.Fprint(r.e.Stdout, perfWaiting)
		req, err := l.Accept(setup)
		if err != nil {
			if setup.Err() != nil {
				return fmt.Errorf("perf: no client connected to rdma_cm port %d within the timeout", o.port)
			}
			return fmt.Errorf("perf: rdma_cm port %d: %w", o.port, err)
		}
		if conn, err = req.Accept(setup, ch.qp, param); err != nil {
			return fmt.Errorf("perf: couldn't accept the rdma_cm connection of %v: %w", req.Remote, err)
		}
		l.Close()
	} else {
		dst, err := resolveHost(setup, o.host)
		if err != nil {
			return err
		}
		to := netip.AddrPortFrom(dst, uint16(o.port))
		if conn, err = a.Dial(setup, to, ch.qp, &cm.DialOptions{Param: param}); err != nil {
			return cmDialError(to, err)
		}
	}
	ch.conn = conn
	r.conn = perftest.NewCMConn(ch, !r.server)
	return nil
}

// resolveHost is host's address (an IPv4 one if it has both kinds).
func resolveHost(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("perf: cannot resolve %q: %w", host, errors.Join(err, errors.New("no address")))
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// cmDialError says why an rdma_cm connection to dst failed.
func cmDialError(dst netip.AddrPort, err error) error {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej) && rej.Reason == mad.RejInvalidServiceID:
		return fmt.Errorf("perf: couldn't connect to %v over rdma_cm: nothing listens on port %d (is the server running, with -R?)", dst, dst.Port())
	case errors.As(err, &rej):
		return fmt.Errorf("perf: couldn't connect to %v over rdma_cm: %w", dst, rej)
	case errors.Is(err, cm.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("perf: couldn't connect to %v over rdma_cm: no answer (is the address right? is the server running, with -R?)", dst)
	}
	return fmt.Errorf("perf: couldn't connect to %v over rdma_cm: %w", dst, err)
}

// cmConnect connects every data QP with rdma_cm as perftest's
// create_rdma_cm_connection does: a sync on the control connection, then
// the client connects QP after QP to the port and the server, listening
// on it again, accepts one request per QP in the order they come, then
// another sync. The server listens before it answers the first sync, so
// that a client that connects as soon as it has the answer finds the port
// open; perftest's server listens only after it, and cmDial (cmResolveUD)
// retries. UD QPs are found with SIDR in rdma_cm's UDP port space
// (rdma_cm_allocate_nodes).
func (r *perfRun) cmConnect(ctx context.Context) error {
	o := r.o
	ud := o.conn == "UD"
	var l *cm.Listener
	if r.server {
		ps := mad.PortSpaceTCP
		if ud {
			ps = mad.PortSpaceUDP
		}
		var err error
		if l, err = r.cm.agent.Listen(netip.AddrPortFrom(netip.Addr{}, uint16(o.port)), &cm.ListenOptions{PortSpace: ps, Backlog: o.qps}); err != nil {
			return fmt.Errorf("couldn't listen to rdma_cm port %d for the data connections: %w", o.port, err)
		}
		defer l.Close()
	}
	// The syncs send an address not filled in yet: zeros, as perftest's.
	var zero perftest.Dest
	r.deadline(o.timeout)
	if _, err := r.conn.HandShake(&zero); err != nil {
		return fmt.Errorf("sync before the rdma_cm data connections: %w", err)
	}
	p := r.cmParam()
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for i, q := range r.qps {
		var c *cm.Conn
		var err error
		switch {
		case ud && r.server:
			err = r.cmAcceptUD(cctx, l, q)
		case ud:
			err = r.cmResolveUD(cctx, q)
		case r.server:
			var req *cm.Request
			if req, err = l.Accept(cctx); err == nil {
				c, err = req.Accept(cctx, q.qp, p)
			}
		default:
			c, err = r.cmDial(cctx, q.qp, p)
		}
		if err != nil {
			if cctx.Err() != nil {
				err = fmt.Errorf("no answer within the timeout (%w)", err)
			}
			return fmt.Errorf("rdma_cm data connection %d of %d: %w", i+1, len(r.qps), err)
		}
		if c != nil {
			r.cm.data = append(r.cm.data, c)
		}
	}
	if l != nil {
		l.Close()
	}
	r.deadline(o.timeout)
	if _, err := r.conn.HandShake(&zero); err != nil {
		return fmt.Errorf("sync after the rdma_cm data connections: %w", err)
	}
	// perftest shows a PSN it made up (the CM chose the real one): this
	// shows the one the QP sends with. A UD QP's PSN (0, as librdmacm
	// sets it) is checked by no receiver: it shows the made-up one, as
	// perftest.
	for i, q := range r.qps {
		if a, err := q.qp.Query(); err == nil && !ud {
			r.my[i].PSN = uint32(a.SQPSN)
		}
	}
	if perfCMHook != nil {
		perfCMHook(r, "connected")
	}
	return nil
}

// cmDial connects q to the server's port. perftest's server listens for
// the data connections only after the sync: a request that finds nothing
// listening (REJ "invalid service ID") is sent again until ctx ends.
func (r *perfRun) cmDial(ctx context.Context, q *roce.QP, p *cm.ConnParam) (*cm.Conn, error) {
	ctl := r.cm.ctl.conn
	opts := &cm.DialOptions{Src: ctl.LocalAddr().Addr(), Param: p}
	if r.o.tos >= 0 {
		opts.TOS = uint8(r.o.tos)
	}
	for {
		c, err := r.cm.agent.Dial(ctx, ctl.RemoteAddr(), q, opts)
		var rej *cm.RejectError
		if err == nil || !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
			return c, err
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return nil, cmDialError(ctl.RemoteAddr(), err)
		}
	}
}

// readyUD brings a UD data QP to RTS as librdmacm's rdma_create_qp does
// on a UD ID (ucma_init_ud_qp): rdma_cm's UDP Q_Key, first PSN 0.
func readyUD(q *roce.QP) error {
	if err := q.Connect(context.Background(), roce.Endpoint{}, roce.Endpoint{}, roce.ConnectOptions{QKey: mad.RDMAUDPQKey}); err != nil {
		return fmt.Errorf("UD QP %#x: %w", q.QPN(), err)
	}
	return nil
}

// udHello reports whether the UD data QPs learn the client's QP from a
// first datagram: perftest's latency tests (and bidirectional bandwidth
// tests, which perf does not run) need to send to the client.
func (r *perfRun) udHello() bool { return r.o.test.lat }

// udHelloLen is the client's first datagram: 4 bytes (perftest sends what
// starts its buffer); the server's receive for it has room for the GRH.
const udHelloLen = 4

// cmAcceptUD answers the next SIDR request with p's QP, as perftest's
// server answers a UD ID's connect request
// (rdma_cm_connection_request_handler): p at RTS with rdma_cm's Q_Key,
// its QP number in the SIDR_REP, no private data. For a latency test it
// first posts a receive for the client's first datagram, and after the
// answer waits for it: its immediate is the client's QP number and its GRH
// the address to answer, with the datagram's TTL and TOS
// (rdma_cm_initialize_ud_connection_parameters, ibv_create_ah_from_wc);
// the Q_Key is p's own.
func (r *perfRun) cmAcceptUD(ctx context.Context, l *cm.Listener, p *perfQP) error {
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	if err := readyUD(p.qp); err != nil {
		req.Reject(nil)
		return err
	}
	if r.udHello() {
		if err := p.qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{p.recvSGE(udGRH + udHelloLen)}}); err != nil {
			req.Reject(nil)
			return fmt.Errorf("couldn't post the receive for the client's QP number: %w", err)
		}
	}
	if err := req.AcceptUD(p.qp, nil); err != nil {
		return fmt.Errorf("couldn't answer the SIDR request of %v: %w", req.Remote, err)
	}
	if !r.udHello() {
		return nil
	}
	if _, err := r.poll(ctx, r.rcq); err != nil {
		return fmt.Errorf("waiting for the client's QP number (its first datagram): %w", err)
	}
	wc := &r.wcs[0]
	if wc.Status != roce.WCSuccess || wc.Flags&roce.WCWithImm == 0 {
		return fmt.Errorf("the client's first datagram (%v, flags %#x) does not carry its QP number", wc.Status, wc.Flags)
	}
	av, ok := rdmacm.UDReplyAV(p.buf[p.half:p.half+udGRH], wc, r.dev.GIDs(), r.dev.Info().MAC)
	if !ok {
		return fmt.Errorf("no address to answer the client's first datagram with (its GRH)")
	}
	p.av, p.rqpn, p.qkey = &av, wc.Imm, mad.RDMAUDPQKey
	return nil
}

// cmResolveUD finds a UD QP of the server's for p with SIDR, as perftest's
// client does (rdma_connect on a UD ID, then its ESTABLISHED handler,
// rdma_cm_establish_ud_connection): p at RTS with rdma_cm's Q_Key, a
// SIDR_REQ from the control connection's address (and -T's TOS) without
// private data of perftest's; p sends to the QP number and Q_Key of the
// SIDR_REP through the route's address. For a latency test it then sends
// the server its QP number: a SEND with immediate of 4 bytes
// (rdma_cm_send_ud_connection_parameters). perftest's server listens
// only after the sync: a request that finds nothing listening (SIDR
// status "service ID not supported") is sent again until ctx ends.
func (r *perfRun) cmResolveUD(ctx context.Context, p *perfQP) error {
	if err := readyUD(p.qp); err != nil {
		return err
	}
	ctl := r.cm.ctl.conn
	dst := ctl.RemoteAddr()
	opts := &cm.DialOptions{Src: ctl.LocalAddr().Addr(), PortSpace: mad.PortSpaceUDP}
	if r.o.tos >= 0 {
		opts.TOS = uint8(r.o.tos)
	}
	var t *cm.UDTarget
	var refused error // the server's last "service ID not supported"
	for {
		var err error
		t, err = r.cm.agent.ResolveUD(ctx, dst, opts)
		var se *cm.SIDRError
		if err == nil {
			break
		}
		if refused != nil && ctx.Err() != nil {
			// The deadline cut a retry short: what the server said is
			// the reason, not the cut.
			return cmResolveError(dst, refused)
		}
		if !errors.As(err, &se) || se.Status != mad.SIDRUnsupported {
			return cmResolveError(dst, err)
		}
		refused = err
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return cmResolveError(dst, err)
		}
	}
	p.av, p.rqpn, p.qkey = &t.AV, t.QPN, t.QKey
	if !r.udHello() {
		return nil
	}
	wr := roce.SendWR{Opcode: roce.WRSendWithImm, Flags: roce.SendSignaled, SGL: []roce.SGE{p.sendSGE(udHelloLen)},
		Imm: p.qp.QPN(), AV: p.av, RemoteQPN: p.rqpn, RemoteQKey: p.qkey}
	if err := p.qp.PostSend(&wr); err != nil {
		return fmt.Errorf("couldn't send the server our QP number: %w", err)
	}
	if _, err := r.poll(ctx, r.scq); err != nil {
		return fmt.Errorf("sending the server our QP number: %w", err)
	}
	if wc := &r.wcs[0]; wc.Status != roce.WCSuccess {
		return fmt.Errorf("sending the server our QP number: %w", wcError(wc))
	}
	return nil
}

// cmResolveError says why the SIDR request to dst failed.
func cmResolveError(dst netip.AddrPort, err error) error {
	var se *cm.SIDRError
	switch {
	case errors.As(err, &se) && se.Status == mad.SIDRUnsupported:
		return fmt.Errorf("couldn't find a UD QP at %v with SIDR: nothing listens on UDP port %d (is the server running, with -R -c UD?)", dst, dst.Port())
	case errors.Is(err, cm.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("couldn't find a UD QP at %v with SIDR: no answer (is the server running, with -R -c UD?)", dst)
	}
	return fmt.Errorf("couldn't find a UD QP at %v with SIDR: %w", dst, err)
}

// cmClose ends the rdma_cm connections. After a run that went well it
// does what perftest 4.5 does (destroy_ctx, rdma_cm_disconnect_nodes):
// the client disconnects every data connection (DREQ) and waits for the
// DREPs; the server waits a moment for those DREQs, then disconnects
// every connection: its DREP answers the DREQs that came, a DREQ ends
// the others. (The agent's Close keeps answering resent DREQs while the
// connections are in time-wait.) Then, or at once after a failure,
// the connections go as destroyed ids do: the control connection with a
// DREQ nobody waits for. UD data QPs have no connection to end.
func (r *perfRun) cmClose(ok bool) {
	p := r.cm
	if p == nil {
		return
	}
	if ok && len(p.data) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), r.o.timeout)
		if r.server {
			linger := time.NewTimer(r.cmLinger())
		wait:
			for _, c := range p.data {
				select {
				case <-c.Done():
				case <-linger.C:
					break wait
				}
			}
			linger.Stop()
		}
		var wg sync.WaitGroup
		for _, c := range p.data {
			wg.Go(func() { c.Disconnect(ctx) })
		}
		wg.Wait()
		cancel()
	}
	for _, c := range p.data {
		c.Close()
	}
	if p.ctl != nil && p.ctl.conn != nil {
		p.ctl.conn.Close()
	}
	if perfCMHook != nil {
		perfCMHook(r, "closed")
	}
	p.agent.Close()
	if p.ctl != nil {
		p.ctl.destroy()
	}
}

// cmLinger is how long the server lets the data QPs answer after its
// run: a latency test's server ends when the client's last message has
// arrived, but the client still waits for the ACK of it (perftest's server
// disconnects at once, and the client, retrying forever with retry_cnt 7,
// hangs). So the server lingers (answerLinger), at least perfCMLinger and
// at most -timeout; a client that disconnects ends the wait at once.
func (r *perfRun) cmLinger() time.Duration {
	qps := make([]*roce.QP, len(r.qps))
	for i, p := range r.qps {
		qps[i] = p.qp
	}
	return device.AnswerLinger(perfCMLinger, r.o.timeout, qps...)
}

// cmErr adds to err that the peer disconnected the data connections, when
// it did (its process ended, say).
func (r *perfRun) cmErr(err error) error {
	if r.peerDisconnected() {
		return fmt.Errorf("%w (the peer disconnected the rdma_cm data connections)", err)
	}
	return err
}

// peerDisconnected says whether the peer disconnected one of the rdma_cm
// data connections; false without rdma_cm, where nothing tells.
func (r *perfRun) peerDisconnected() bool {
	if r.cm == nil {
		return false
	}
	for _, c := range r.cm.data {
		if errors.Is(c.Err(), cm.ErrDisconnected) {
			return true
		}
	}
	return false
}
