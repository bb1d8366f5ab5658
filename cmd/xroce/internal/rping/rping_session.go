//go:build linux

package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/roce"
)

func runRping(ctx context.Context, e *base.Env, args []string) error {
	r := &rping{stdout: &rdmacm.LockedWriter{W: e.Stdout}, stderr: &rdmacm.LockedWriter{W: e.Stderr}}
	o, code, done := parseRping(ctx, r.stdout, r.stderr, args)
	if done {
		return base.Status(code)
	}
	r.o = o
	return base.Status(r.run(ctx))
}

// rping is one run of the tool.
type rping struct {
	o              *rpingOptions
	stdout, stderr io.Writer
}

func (r *rping) debugf(format string, a ...any) {
	if r.o.debug {
		fmt.Fprintf(r.stdout, format, a...)
	}
}

// run is rping's main after the command line; it returns the exit status.
func (r *rping) run(ctx context.Context) int {
	o := r.o
	local, peer := o.addr, netip.Addr{}
	if o.server == 0 {
		local, peer = o.src, o.addr
		if o.addr.IsUnspecified() {
			// rping would connect to its own device; an xroce device
			// cannot reach itself.
			fmt.Fprintln(r.stderr, "rping: -c needs -a with the server's address (xroce cannot connect to itself)")
			rdmacm.Perror(r.stderr, "rdma_resolve_addr", syscall.EADDRNOTAVAIL)
			return -1
		}
	}
	ifname, ierr := rdmacm.Interface("", local, peer)
	if ierr != nil {
		switch {
		case ierr.Errno == syscall.EADDRNOTAVAIL && o.server == 1:
			rdmacm.Perror(r.stderr, "rdma_bind_addr", ierr.Errno)
			return -1
		case ierr.Errno == syscall.EADDRNOTAVAIL:
			rdmacm.Perror(r.stderr, "rdma_resolve_addr", ierr.Errno)
			return -1
		case ierr.Errno == syscall.ENETUNREACH:
			fmt.Fprintf(r.stderr, "cma event RDMA_CM_EVENT_ADDR_ERROR, error %d\n", -int(syscall.ENETUNREACH))
			fmt.Fprintf(r.stderr, "waiting for addr/route resolution state %d\n", rpIdle)
			return -1
		}
		if o.server == 1 {
			fmt.Fprintf(r.stderr, "rping: %v: bind one with -a ADDR\n", ierr)
		} else {
			fmt.Fprintf(r.stderr, "rping: %v\n", ierr)
		}
		fmt.Fprintln(r.stderr, "No RDMA devices were detected")
		return int(syscall.ENODEV)
	}
	d, err := rdmacm.Open(r.stderr, "rping", ifname)
	if err != nil {
		fmt.Fprintf(r.stderr, "rping: %v\n", err)
		fmt.Fprintln(r.stderr, "No RDMA devices were detected")
		return int(syscall.ENODEV)
	}
	defer d.Close()
	r.debugf("created cm_id %p\n", d.Agent)
	var ret int
	switch {
	case o.server == 0:
		ret = r.runClient(ctx, d)
	case o.persistent:
		ret = r.runPersistentServer(ctx, d)
	default:
		ret = r.runServer(ctx, d)
	}
	r.debugf("destroy cm_id %p\n", d.Agent)
	return ret
}

// rpingCB is rping's control block: one connection's resources and state,
// used by that connection's goroutine only.
type rpingCB struct {
	r      *rping
	d      *rdmacm.Device
	server bool

	pd                              *roce.PD
	cq                              *roce.CQ
	qp                              *roce.QP
	recvMR, sendMR, rdmaMR, startMR *roce.MR // startMR: the client's only
	conn                            *cm.Conn

	state      rpingState
	remoteRKey uint32
	remoteAddr uint64
	remoteLen  uint32
	cqDone     bool // rping's CQ thread has ended (a flush or an error)
	discSeen   bool // the DISCONNECTED event was handled
	wc         [1]roce.WC
	buf        [rdmacm.RpingInfoSize]byte
}

func (r *rping) newCB(d *rdmacm.Device, server bool) *rpingCB {
	return &rpingCB{r: r, d: d, server: server, state: rpIdle}
}

func (cb *rpingCB) debugf(format string, a ...any) { cb.r.debugf(format, a...) }

func (cb *rpingCB) side() string {
	if cb.server {
		return "server"
	}
	return "client"
}

// setupQP is rping_setup_qp: a PD, a CQ of 32 entries for both queues,
// an RC QP of 16 sends and 2 receives, one SGE each. It returns an errno.
func (cb *rpingCB) setupQP() int {
	var err error
	if cb.pd, err = cb.d.Dev.AllocPD(); err != nil {
		fmt.Fprintln(cb.r.stderr, "ibv_alloc_pd failed")
		return int(syscall.ENOMEM)
	}
	cb.debugf("created pd %p\n", cb.pd)
	cb.debugf("created channel %p\n", cb)
	if cb.cq, err = cb.d.Dev.CreateCQ(rpingSQDepth * 2); err != nil {
		fmt.Fprintln(cb.r.stderr, "ibv_create_cq failed")
		return int(syscall.ENOMEM)
	}
	cb.debugf("created cq %p\n", cb.cq)
	cb.qp, err = cb.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cb.cq, RecvCQ: cb.cq,
		MaxSendWR: rpingSQDepth, MaxRecvWR: 2, MaxSGE: 1})
	if err != nil {
		rdmacm.Perror(cb.r.stderr, "rdma_create_qp", syscall.ENOMEM)
		return -1
	}
	cb.debugf("created qp %p\n", cb.qp)
	return 0
}

// setupBuffers is rping_setup_buffers: the 16-byte receive and send
// buffers, the -S byte RDMA buffer that the peer may READ and WRITE, and
// the client's start buffer, with the same rights.
func (cb *rpingCB) setupBuffers() int {
	cb.debugf("rping_setup_buffers called on cb %p\n", cb)
	size := cb.r.o.size
	remote := roce.AccessLocalWrite | roce.AccessRemoteRead | roce.AccessRemoteWrite
	var err error
	if cb.recvMR, err = cb.pd.RegMR(make([]byte, rdmacm.RpingInfoSize), roce.AccessLocalWrite); err != nil {
		fmt.Fprintln(cb.r.stderr, "recv_buf reg_mr failed")
		return int(syscall.ENOMEM)
	}
	if cb.sendMR, err = cb.pd.RegMR(make([]byte, rdmacm.RpingInfoSize), 0); err != nil {
		fmt.Fprintln(cb.r.stderr, "send_buf reg_mr failed")
		return int(syscall.ENOMEM)
	}
	if cb.rdmaMR, err = cb.pd.RegMR(make([]byte, size), remote); err != nil {
		fmt.Fprintln(cb.r.stderr, "rdma_buf reg_mr failed")
		return int(syscall.ENOMEM)
	}
	if !cb.server {
		if cb.startMR, err = cb.pd.RegMR(make([]byte, size), remote); err != nil {
			fmt.Fprintln(cb.r.stderr, "start_buf reg_mr failed")
			return int(syscall.ENOMEM)
		}
	}
	cb.debugf("allocated & registered buffers...\n")
	return 0
}

// free releases the connection's resources, as rping_free_buffers and
// rping_free_qp (the device's Close would too; the persistent server
// lives on).
func (cb *rpingCB) free() {
	if cb.rdmaMR != nil {
		cb.debugf("rping_free_buffers called on cb %p\n", cb)
	}
	rdmacm.Release(cb.conn, cb.qp, []*roce.MR{cb.recvMR, cb.sendMR, cb.rdmaMR, cb.startMR}, []*roce.CQ{cb.cq}, cb.pd)
}

// setup is what rping_run_server and rping_run_client do before the
// connection: rping_setup_qp, rping_setup_buffers, the first receive
// posted, the CQ thread started. It returns the status of a failure,
// after its line, or 0.
func (cb *rpingCB) setup() int {
	w := cb.r.stderr
	if ret := cb.setupQP(); ret != 0 {
		fmt.Fprintf(w, "setup_qp failed: %d\n", ret)
		return ret
	}
	if ret := cb.setupBuffers(); ret != 0 {
		fmt.Fprintf(w, "rping_setup_buffers failed: %d\n", ret)
		return ret
	}
	if err := cm.PrepareQP(cb.qp); err != nil {
		fmt.Fprintf(w, "ibv_post_recv failed: %d\n", int(syscall.EINVAL))
		return int(syscall.EINVAL)
	}
	if err := cb.postRecv(); err != nil {
		fmt.Fprintf(w, "ibv_post_recv failed: %d\n", rdmacm.PostErrno(err))
		return rdmacm.PostErrno(err)
	}
	cb.debugf("cq_thread started.\n")
	return 0
}

// postRecv posts rping's one receive: 16 bytes into the receive buffer.
func (cb *rpingCB) postRecv() error {
	return cb.qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{cb.recvMR.SGE(0, rdmacm.RpingInfoSize)}})
}

// post posts wr on the send queue: 0, or the errno after rping's line.
func (cb *rpingCB) post(wr *roce.SendWR) int {
	if err := cb.qp.PostSend(wr); err != nil {
		ret := rdmacm.PostErrno(err)
		fmt.Fprintf(cb.r.stderr, "post send error %d\n", ret)
		return ret
	}
	return 0
}

// postSend SENDs the 16-byte send buffer, as post.
func (cb *rpingCB) postSend() int {
	return cb.post(&roce.SendWR{Opcode: roce.WRSend, Flags: roce.SendSignaled,
		SGL: []roce.SGE{cb.sendMR.SGE(0, rdmacm.RpingInfoSize)}})
}

// next stands for a sem_wait of rping's main thread: it handles the CQ's
// completions (rping's CQ thread) and the connection's end (its CM
// thread) until one of them would have posted the semaphore. A peer
// silent for rdmacm.PeerTimeout is an error (rping would wait for ever). It
// fails only when ctx ends.
func (cb *rpingCB) next(ctx context.Context) error {
	deadline := time.Now().Add(rdmacm.PeerTimeout())
	for {
		if !cb.cqDone {
			flushed := false
			for cb.cq.Poll(cb.wc[:]) == 1 {
				if cb.wc[0].Status == roce.WCWRFlushErr {
					flushed = true
					continue
				}
				if cb.complete(&cb.wc[0]) {
					return nil
				}
			}
			if flushed {
				cb.cqDone = true
			}
		}
		if !cb.discSeen {
			select {
			case <-cb.conn.Done():
				cb.discSeen = true
				cb.disconnected()
				cb.state = rpDisconnected
				return nil
			default:
			}
		}
		var notify, done <-chan struct{}
		if !cb.cqDone {
			notify = cb.cq.Arm()
			if cb.cq.Len() > 0 {
				continue
			}
		}
		if !cb.discSeen {
			done = cb.conn.Done()
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			fmt.Fprintln(cb.r.stderr, rdmacm.SilentMsg("rping"))
			cb.state = rpError
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-notify:
		case <-done:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}
}

// wait is a sem_wait of rping's tests and their check of the state it
// leaves: 0 if it is want, else -1 after rping's line. The error is ctx's
// end.
func (cb *rpingCB) wait(ctx context.Context, want rpingState) (int, error) {
	if err := cb.next(ctx); err != nil {
		return 0, err
	}
	if cb.state != want {
		fmt.Fprintf(cb.r.stderr, "wait for %v state %d\n", want, cb.state)
		return -1, nil
	}
	return 0, nil
}

// ended is the end of rping's tests after a failure (status ret) or ctx's
// end (err): a failure once the peer has disconnected is none.
func (cb *rpingCB) ended(ret int, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if cb.state == rpDisconnected {
		return 0, nil
	}
	return ret, nil
}

// complete handles one completion as rping_cq_event_handler does and
// says whether it posted the semaphore. An error ends the CQ thread.
func (cb *rpingCB) complete(wc *roce.WC) bool {
	fail := func() bool {
		cb.state = rpError
		cb.cqDone = true
		return true
	}
	if wc.Status != roce.WCSuccess {
		fmt.Fprintf(cb.r.stderr, "cq completion failed status %d\n", int(wc.Status))
		return fail()
	}
	switch wc.Opcode {
	case roce.WCSend:
		cb.debugf("send completion\n")
		return false
	case roce.WCRDMAWrite:
		cb.debugf("rdma write completion\n")
		cb.state = rpWriteComplete
		return true
	case roce.WCRDMARead:
		cb.debugf("rdma read completion\n")
		cb.state = rpReadComplete
		return true
	case roce.WCRecv:
		cb.debugf("recv completion\n")
		if wc.ByteLen != rdmacm.RpingInfoSize {
			fmt.Fprintf(cb.r.stderr, "Received bogus data, size %d\n", wc.ByteLen)
			fmt.Fprintf(cb.r.stderr, "recv wc error: %d\n", -1)
			return fail()
		}
		if cb.server {
			cb.recvMR.ReadAt(cb.buf[:], 0)
			info := rpingInfo(cb.buf[:])
			cb.remoteRKey, cb.remoteAddr, cb.remoteLen = info.RKey(), info.Buf(), info.Size()
			cb.debugf("Received rkey %x addr %x len %d from peer\n", cb.remoteRKey, cb.remoteAddr, cb.remoteLen)
			if cb.state <= rpConnected || cb.state == rpWriteComplete {
				cb.state = rpReadAdv
			} else {
				cb.state = rpWriteAdv
			}
		} else if cb.state == rpReadAdv {
			cb.state = rpWriteAdv
		} else {
			cb.state = rpWriteComplete
		}
		if err := cb.postRecv(); err != nil {
			fmt.Fprintf(cb.r.stderr, "post recv error: %d\n", rdmacm.PostErrno(err))
			return fail()
		}
		return true
	}
	cb.debugf("unknown!!!!! completion\n")
	return fail()
}

// disconnect is rping_disconnect: the QP to ERR and a DREQ, or after the
// peer's DREQ the DREP that answers it. The DREP to ours is the
// DISCONNECTED event rping's CM thread prints.
func (cb *rpingCB) disconnect(ctx context.Context, interrupted bool) {
	limit := rdmacm.PeerTimeout()
	if interrupted {
		limit = min(limit, 3*time.Second)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	if err := cb.conn.Disconnect(dctx); err == nil && !cb.discSeen && !interrupted {
		cb.discSeen = true
		cb.disconnected()
	}
}

// disconnected prints what rping's CM thread prints for
// RDMA_CM_EVENT_DISCONNECTED.
func (cb *rpingCB) disconnected() {
	id := "child"
	if !cb.server {
		id = "parent"
	}
	cb.debugf("cma_event type RDMA_CM_EVENT_DISCONNECTED cma_id %p (%s)\n", cb.conn, id)
	fmt.Fprintf(cb.r.stderr, "%s DISCONNECT EVENT...\n", cb.side())
}

// errFatalEvent ends a persistent server as rping's CM thread does with
// exit(-1) on a failed connection.
var errFatalEvent = errors.New("rping: fatal rdma_cm event")

// bindServer is rping_bind_server: listen on -a's address and -p's port.
func (r *rping) bindServer(d *rdmacm.Device) (*cm.Listener, int) {
	l, err := d.Agent.Listen(netip.AddrPortFrom(r.o.addr, r.o.port), nil)
	if err != nil {
		errno := syscall.EADDRNOTAVAIL
		if errors.Is(err, cm.ErrListening) {
			errno = syscall.EADDRINUSE
		}
		rdmacm.Perror(r.stderr, "rdma_bind_addr", errno)
		return nil, -1
	}
	r.debugf("rdma_bind_addr successful\n")
	r.debugf("rdma_listen\n")
	rdmacm.Listening()
	return l, 0
}

// request waits for the next connection request (unbounded, as rping).
func (r *rping) request(ctx context.Context, l *cm.Listener) (*cm.Request, error) {
	req, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	r.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id %p (child)\n", req)
	r.debugf("child cma %p\n", req)
	return req, nil
}

// runServer is rping_run_server: one client, then exit.
func (r *rping) runServer(ctx context.Context, d *rdmacm.Device) int {
	l, ret := r.bindServer(d)
	if l == nil {
		return ret
	}
	defer l.Close()
	req, err := r.request(ctx, l)
	if err != nil {
		return rdmacm.ExitInterrupted
	}
	// Further requests are refused at once rather than left waiting as
	// rping leaves them (its CM thread would take one over this one).
	l.Close()
	cb := r.newCB(d, true)
	defer cb.free()
	ret, _ = cb.serve(ctx, req, false)
	return ret
}

// runPersistentServer is rping_run_persistent_server: a goroutine per
// client, for ever (until ctx ends).
func (r *rping) runPersistentServer(ctx context.Context, d *rdmacm.Device) int {
	l, ret := r.bindServer(d)
	if l == nil {
		return ret
	}
	defer l.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for {
		req, err := r.request(ctx, l)
		if err != nil {
			break
		}
		cb := r.newCB(d, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cb.free()
			if _, fatal := cb.serve(ctx, req, true); fatal {
				cancel(errFatalEvent)
			}
		}()
	}
	wg.Wait()
	if errors.Is(context.Cause(ctx), errFatalEvent) {
		return -1
	}
	return rdmacm.ExitInterrupted
}

// serve is the server's side of one connection: rping_run_server's (or,
// persistent, the per-client thread's) resources, accept, test and
// disconnect. It returns the exit status, and whether rping's CM thread
// would have ended the process (a connection that failed to come up).
func (cb *rpingCB) serve(ctx context.Context, req *cm.Request, persistent bool) (int, bool) {
	w := cb.r.stderr
	if ret := cb.setup(); ret != 0 {
		req.Reject(nil)
		return ret, false
	}
	cb.state = rpConnectRequest
	cb.debugf("accepting client connection request\n")
	var p *cm.ConnParam
	if cb.r.o.selfQP {
		p = rdmacm.RpingConnParam()
	}
	conn, err := rdmacm.Accept(ctx, req, cb.qp, p)
	if err != nil {
		if ctx.Err() != nil {
			return rdmacm.ExitInterrupted, false
		}
		name, st := rdmacm.Event(err)
		fmt.Fprintf(w, "cma event %s, error %d\n", name, st)
		return -1, true
	}
	cb.conn = conn
	cb.debugf("cma_event type RDMA_CM_EVENT_ESTABLISHED cma_id %p (child)\n", conn)
	cb.debugf("ESTABLISHED\n")
	ret, err := cb.testServer(ctx)
	if err != nil {
		cb.disconnect(ctx, true)
		return rdmacm.ExitInterrupted, false
	}
	if ret != 0 && !persistent {
		fmt.Fprintf(w, "rping server failed: %d\n", ret)
	}
	cb.disconnect(ctx, false)
	return ret, false
}

// testServer is rping_test_server: READ each ping, say go ahead, WRITE it
// back, say go ahead again, until the client disconnects (status 0) or
// something fails (the error's status). The error is ctx's end.
func (cb *rpingCB) testServer(ctx context.Context) (int, error) {
	data := make([]byte, cb.r.o.size)
	for {
		if ret, err := cb.servePing(ctx, data); ret != 0 || err != nil {
			return cb.ended(ret, err)
		}
	}
}

// servePing is one turn of rping_test_server's loop, with data the room
// for the ping's data. It returns the status of the first failure, 0 if
// none; the error is ctx's end.
func (cb *rpingCB) servePing(ctx context.Context, data []byte) (int, error) {
	if ret, err := cb.wait(ctx, rpReadAdv); ret != 0 || err != nil {
		return ret, err
	}
	cb.debugf("server received sink adv\n")
	read := &roce.SendWR{Opcode: roce.WRRDMARead, Flags: roce.SendSignaled,
		SGL: []roce.SGE{cb.rdmaMR.SGE(0, int(cb.remoteLen))}, RemoteAddr: cb.remoteAddr, RKey: cb.remoteRKey}
	if ret := cb.post(read); ret != 0 {
		return ret, nil
	}
	cb.debugf("server posted rdma read req \n")
	if ret, err := cb.wait(ctx, rpReadComplete); ret != 0 || err != nil {
		return ret, err
	}
	cb.debugf("server received read complete\n")
	cb.rdmaMR.ReadAt(data, 0)
	if cb.r.o.verbose {
		fmt.Fprintf(cb.r.stdout, "server ping data: %s\n", rdmacm.CString(data))
	}
	if ret := cb.postSend(); ret != 0 {
		return ret, nil
	}
	cb.debugf("server posted go ahead\n")

	if ret, err := cb.wait(ctx, rpWriteAdv); ret != 0 || err != nil {
		return ret, err
	}
	cb.debugf("server received sink adv\n")
	n := min(len(rdmacm.CString(data))+1, len(data)) // strlen(rdma_buf) + 1
	sge := cb.rdmaMR.SGE(0, n)
	cb.debugf("rdma write from lkey %x laddr %x len %d\n", sge.LKey, sge.Addr, sge.Length)
	write := &roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
		SGL: []roce.SGE{sge}, RemoteAddr: cb.remoteAddr, RKey: cb.remoteRKey}
	if ret := cb.post(write); ret != 0 {
		return ret, nil
	}
	if ret, err := cb.wait(ctx, rpWriteComplete); ret != 0 || err != nil {
		return ret, err
	}
	cb.debugf("server rdma write complete \n")
	if ret := cb.postSend(); ret != 0 {
		return ret, nil
	}
	cb.debugf("server posted go ahead\n")
	return 0, nil
}

// runClient is rping_run_client: resolve, connect, ping, disconnect.
func (r *rping) runClient(ctx context.Context, d *rdmacm.Device) int {
	o := r.o
	w := r.stderr
	cb := r.newCB(d, false)
	defer cb.free()
	if err := rdmacm.ResolvePeer(ctx, d.Dev, o.addr); err != nil {
		if ctx.Err() != nil {
			return rdmacm.ExitInterrupted
		}
		fmt.Fprintf(w, "cma event RDMA_CM_EVENT_ADDR_ERROR, error %d\n", -int(syscall.ETIMEDOUT))
		fmt.Fprintf(w, "waiting for addr/route resolution state %d\n", rpIdle)
		return -1
	}
	r.debugf("cma_event type RDMA_CM_EVENT_ADDR_RESOLVED cma_id %p (parent)\n", d.Agent)
	r.debugf("cma_event type RDMA_CM_EVENT_ROUTE_RESOLVED cma_id %p (parent)\n", d.Agent)
	cb.state = rpRouteResolved
	r.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	if ret := cb.setup(); ret != 0 {
		return ret
	}

	conn, err := d.Dial(ctx, netip.AddrPortFrom(o.addr, o.port), cb.qp, &cm.DialOptions{Src: o.src, Param: rdmacm.RpingConnParam()})
	if err != nil {
		if ctx.Err() != nil {
			return rdmacm.ExitInterrupted
		}
		// rping's CM thread prints the event and exits with -1 while its
		// main thread, woken, says what it waited for.
		name, st := rdmacm.Event(err)
		fmt.Fprintf(w, "cma event %s, error %d\n", name, st)
		fmt.Fprintf(w, "wait for CONNECTED state %d\n", cb.state)
		fmt.Fprintf(w, "connect error %d\n", -1)
		return -1
	}
	cb.conn = conn
	if o.selfQP {
		r.debugf("cma_event type RDMA_CM_EVENT_CONNECT_RESPONSE cma_id %p (parent)\n", conn)
		r.debugf("CONNECT_RESPONSE\n")
	} else {
		r.debugf("cma_event type RDMA_CM_EVENT_ESTABLISHED cma_id %p (parent)\n", conn)
		r.debugf("ESTABLISHED\n")
	}
	cb.state = rpConnected
	r.debugf("rdma_connect successful\n")

	ret, err := cb.testClient(ctx)
	if err != nil {
		cb.disconnect(ctx, true)
		return rdmacm.ExitInterrupted
	}
	if ret != 0 {
		fmt.Fprintf(w, "rping client failed: %d\n", ret)
	}
	cb.disconnect(ctx, false)
	return ret
}

// formatSend is rping_format_send: advertise mr (all -S bytes of it).
func (cb *rpingCB) formatSend(mr *roce.MR) {
	rpingInfo(cb.buf[:]).Encode(mr.Addr(), mr.RKey(), uint32(cb.r.o.size))
	cb.sendMR.WriteAt(cb.buf[:], 0)
	cb.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), cb.r.o.size)
}

// testClient is rping_test_client: count pings (0: until ctx ends or the
// server leaves). It returns rping's status, or ctx's error.
func (cb *rpingCB) testClient(ctx context.Context) (int, error) {
	o := cb.r.o
	start := make([]byte, o.size)
	got := make([]byte, o.size)
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		if ret, err := cb.clientPing(ctx, ping, start, got); ret != 0 || err != nil {
			return cb.ended(ret, err)
		}
	}
	return 0, nil
}

// clientPing is one turn of rping_test_client's loop: ping number ping's
// data written into the start buffer (start, its copy) and advertised,
// the sink advertised, what the server wrote there read into got, checked
// (-V) and printed (-v). It returns the status of the first failure, 0 if
// none; the error is ctx's end.
func (cb *rpingCB) clientPing(ctx context.Context, ping int, start, got []byte) (int, error) {
	o := cb.r.o
	cb.state = rpReadAdv
	rdmacm.RpingFill(start, ping)
	cb.startMR.WriteAt(start, 0)
	cb.formatSend(cb.startMR)
	if ret := cb.postSend(); ret != 0 {
		return ret, nil
	}
	if ret, err := cb.wait(ctx, rpWriteAdv); ret != 0 || err != nil {
		return ret, err
	}
	cb.formatSend(cb.rdmaMR)
	if ret := cb.postSend(); ret != 0 {
		return ret, nil
	}
	if ret, err := cb.wait(ctx, rpWriteComplete); ret != 0 || err != nil {
		return ret, err
	}
	cb.rdmaMR.ReadAt(got, 0)
	if o.validate && string(start) != string(got) {
		fmt.Fprintf(cb.r.stderr, "data mismatch!\n")
		return -1, nil
	}
	if o.verbose {
		fmt.Fprintf(cb.r.stdout, "ping data: %s\n", rdmacm.CString(got))
	}
	return 0, nil
}
