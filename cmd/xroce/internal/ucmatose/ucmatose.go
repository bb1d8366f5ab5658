//go:build linux

package ucmatose

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// xroce ucmatose is rdma-core's ucmatose (librdmacm/examples/cmatose.c,
// rdma-core 44): -c RC connections over rdma_cm, -C messages of -S bytes
// each way on each (the server sends first; the client has posted its
// receives before connecting), then the server disconnects. Same flags,
// same lines ("cmatose: ..."), the exit status is the "return status".
// -d names the interface (the device); ucmatose has no -d.

// Cmd is xroce ucmatose.
var Cmd = base.Command{Name: "ucmatose", Summary: "RDMA CM connection and SEND test with a peer, as rdma-core's ucmatose", Run: runUcmatose}

// ucmatoseOptions is ucmatose's command line.
type ucmatoseOptions struct {
	rdmacm.CmatestOptions
	ps      mad.PortSpace // -P
	port    string        // -p
	migrate bool          // -m
}

// ucmatoseUsage prints ucmatose's usage (stdout) for program name.
func ucmatoseUsage(w io.Writer, name string) {
	fmt.Fprintf(w, "usage: %s\n", name)
	fmt.Fprint(w, "\t[-s server_address]\n"+
		"\t[-b bind_address]\n"+
		"\t[-f address_format]\n"+
		"\t    name, ip, ipv6, or gid\n"+
		"\t[-P port_space]\n"+
		"\t    tcp or ib\n"+
		"\t[-c connections]\n"+
		"\t[-C message_count]\n"+
		"\t[-S message_size]\n"+
		"\t[-t type_of_service]\n"+
		"\t[-p port_number]\n"+
		"\t[-m(igrate)]\n"+
		"\t[-a ack_timeout]\n")
}

// parseUcmatose reads ucmatose's command line as its main does: glibc's
// message and the usage, status 1, for a mistake.
func parseUcmatose(stdout, stderr io.Writer, args []string) (o *ucmatoseOptions, code int, done bool) {
	o = &ucmatoseOptions{CmatestOptions: rdmacm.CmatestOptions{Connections: 1, Count: 10, Size: 100}, ps: mad.PortSpaceTCP, port: "7471"}
	opts, _ := base.Getopt(args, "s:b:f:P:c:C:S:t:p:a:md:")
	for _, op := range opts {
		if o.Set(stderr, op) {
			continue
		}
		switch op.C {
		case 'P':
			switch {
			case rdmacm.HasPrefixFold(op.Arg, "ib"):
				o.ps = mad.PortSpaceIB
			case !rdmacm.HasPrefixFold(op.Arg, "tcp"):
				fmt.Fprintln(stderr, "Warning: unknown port space format")
			}
		case 'p':
			o.port = op.Arg
		case 'm':
			o.migrate = true
		case 'a':
			// RDMA_OPTION_ID_ACK_TIMEOUT: the local QP's ACK time-out,
			// which package cm does not let a caller set; read, unused.
			_ = base.Strtoul8(op.Arg)
		default:
			fmt.Fprintf(stderr, "ucmatose: %s\n", op.Msg)
			ucmatoseUsage(stdout, "ucmatose")
			return nil, 1, true
		}
	}
	return o, 0, false
}

func runUcmatose(ctx context.Context, e *base.Env, args []string) error {
	o, code, done := parseUcmatose(e.Stdout, e.Stderr, args)
	if done {
		return base.Status(code)
	}
	t := &cmatose{Cmatest: rdmacm.Cmatest{Name: "cmatose", Stdout: e.Stdout, Stderr: e.Stderr, Count: o.Count}, o: o}
	return base.Status(t.run(ctx))
}

// cmatose is one run of ucmatose.
type cmatose struct {
	rdmacm.Cmatest
	o     *ucmatoseOptions
	nodes []*cmatoseNode
}

// cmatoseNode is one connection: its own PD, send and receive CQs, QP and
// message buffer, as cmatose's struct cmatest_node.
type cmatoseNode struct {
	pd        *roce.PD
	cq        [2]*roce.CQ // send, receive
	qp        *roce.QP
	mr        *roce.MR
	conn      *cm.Conn
	connected bool
}

const (
	cmatoseSendCQ = 0
	cmatoseRecvCQ = 1
)

// run is cmatose's main after the command line: its exit status is the
// return status it prints.
func (t *cmatose) run(ctx context.Context) int {
	a, ok := t.Start(ctx, "ucmatose", &t.o.CmatestOptions, t.o.port)
	if !ok {
		return 1
	}
	defer t.Close()
	t.nodes = rdmacm.AllocNodes[cmatoseNode](t.o.Connections)
	defer t.destroyNodes()
	var ret int
	if t.o.Dst != "" {
		ret = t.runClient(ctx, a)
	} else {
		ret = t.runServer(ctx, a)
	}
	return t.End(ret)
}

// initNode is cmatose's init_node: a PD, two CQs of message_count
// entries, an RC QP signalling every send, the message buffer. It returns
// the status (printing as cmatose does), 0 when all is well.
func (t *cmatose) initNode(n *cmatoseNode) int {
	var err error
	if n.pd, err = t.CM.Dev.AllocPD(); err != nil {
		t.Printf("cmatose: unable to allocate PD\n")
		return -int(syscall.ENOMEM)
	}
	cqe := t.Count
	if cqe == 0 {
		cqe = 1
	}
	if cqe > 0 {
		n.cq[cmatoseSendCQ], err = t.CM.Dev.CreateCQ(cqe)
		if err == nil {
			n.cq[cmatoseRecvCQ], err = t.CM.Dev.CreateCQ(cqe)
		}
	}
	if cqe < 0 || err != nil {
		t.Printf("cmatose: unable to create CQ\n")
		return -int(syscall.ENOMEM)
	}
	n.qp, err = n.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: n.cq[cmatoseSendCQ], RecvCQ: n.cq[cmatoseRecvCQ],
		MaxSendWR: cqe, MaxRecvWR: cqe, MaxSGE: 1, SignalAll: true})
	if err == nil {
		err = cm.PrepareQP(n.qp)
	}
	if err != nil {
		rdmacm.Perror(t.Stderr, "cmatose: unable to create QP", syscall.EINVAL)
		return -1
	}
	var ret int
	n.mr, ret = t.CreateMessage(n.pd, t.o.Size, t.o.Size)
	return ret
}

// postRecvs posts message_count receives into the message buffer.
func (t *cmatose) postRecvs(n *cmatoseNode) int {
	for range t.Count {
		if err := n.qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{n.mr.SGE(0, t.o.Size)}}); err != nil {
			ret := rdmacm.PostErrno(err)
			t.Printf("failed to post receives: %d\n", ret)
			return ret
		}
	}
	return 0
}

// postSends posts message_count SENDs of the message buffer.
func (t *cmatose) postSends(n *cmatoseNode) int {
	if !n.connected || t.Count == 0 {
		return 0
	}
	for range t.Count {
		if err := n.qp.PostSend(&roce.SendWR{Opcode: roce.WRSend, SGL: []roce.SGE{n.mr.SGE(0, t.o.Size)}}); err != nil {
			ret := rdmacm.PostErrno(err)
			t.Printf("failed to post sends: %d\n", ret)
			return ret
		}
	}
	return 0
}

// pollCQs is cmatose's poll_cqs: message_count completions on the send or
// receive CQ of each connected node. cmatose counts failed completions
// too; the clone stops at the first (status -1), and gives up on a peer
// silent for rdmacm.PeerTimeout.
func (t *cmatose) pollCQs(ctx context.Context, which int) int {
	var wc [1]roce.WC
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for range t.Count {
			if ret := t.Poll(ctx, n.cq[which], wc[:]); ret != 0 {
				return ret
			}
			if wc[0].Status != roce.WCSuccess {
				t.Printf("cmatose: failed completion: status %d (%v)\n", int(wc[0].Status), wc[0].Status)
				return -1
			}
		}
	}
	return 0
}

// connectError is a connection that failed: cmatose's event line; its
// status becomes the return status.
func (t *cmatose) connectError(err error) int {
	t.ConnectsLeft--
	return t.EventError(err)
}

// runServer is cmatose's run_server.
func (t *cmatose) runServer(ctx context.Context, a rdmacm.CmatestAddr) int {
	t.Printf("cmatose: starting server\n")
	l, ret := t.Listen(a, t.o.ps)
	if l == nil {
		return ret
	}
	defer l.Close()
	// connect_events: accept requests until -c connections are up.
	index := 0
	for t.ConnectsLeft > 0 {
		req, err := l.Accept(ctx)
		if err != nil {
			t.Interrupted = true
			return -1
		}
		if index == len(t.nodes) {
			t.Printf("cmatose: failing connection request\n")
			req.Reject(nil)
			return -int(syscall.ENOMEM)
		}
		n := t.nodes[index]
		index++
		ret := t.initNode(n)
		if ret == 0 {
			ret = t.postRecvs(n)
		}
		if ret != 0 {
			t.ConnectsLeft--
			t.Printf("cmatose: failing connection request\n")
			req.Reject(nil)
			return ret
		}
		if n.conn, err = rdmacm.Accept(ctx, req, n.qp, nil); err != nil {
			if ctx.Err() != nil {
				t.Interrupted = true
				return -1
			}
			return t.connectError(err)
		}
		n.connected = true
		t.ConnectsLeft--
	}
	if t.Count != 0 {
		t.Printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if ret := t.postSends(n); ret != 0 {
				return ret
			}
		}
		t.Printf("completing sends\n")
		if ret := t.pollCQs(ctx, cmatoseSendCQ); ret != 0 {
			return ret
		}
		t.Printf("receiving data transfers\n")
		if ret := t.pollCQs(ctx, cmatoseRecvCQ); ret != 0 {
			return ret
		}
		t.Printf("data transfers complete\n")
	}
	if t.o.migrate {
		t.Printf("migrating to new event channel\n")
	}
	t.Printf("cmatose: disconnecting\n")
	ret = t.disconnectAll(ctx)
	t.Printf("disconnected\n")
	return ret
}

// disconnectAll sends a DREQ on every connected node at once, as
// cmatose's run_server calls rdma_disconnect on each before it waits, and
// waits for every DISCONNECTED (the DREP or the DREQ's last time-out).
func (t *cmatose) disconnectAll(ctx context.Context) int {
	return t.eachConnected(ctx, func(dctx context.Context, c *cm.Conn) error { return c.Disconnect(dctx) })
}

// eachConnected runs end on every connected node's connection at once,
// with at most rdmacm.PeerTimeout to do it, and marks the nodes not connected.
// Its status is -1 if ctx ended, -ETIMEDOUT (saying so) if an end failed,
// 0 otherwise.
func (t *cmatose) eachConnected(ctx context.Context, end func(dctx context.Context, c *cm.Conn) error) int {
	dctx, cancel := context.WithTimeout(ctx, rdmacm.PeerTimeout())
	defer cancel()
	var wg sync.WaitGroup
	var silent atomic.Bool
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		n.connected = false
		wg.Go(func() {
			if end(dctx, n.conn) != nil {
				silent.Store(true)
			}
		})
	}
	wg.Wait()
	switch {
	case ctx.Err() != nil:
		t.Interrupted = true
		return -1
	case silent.Load():
		t.Printf("%s\n", rdmacm.SilentMsg("cmatose"))
		return -int(syscall.ETIMEDOUT)
	}
	return 0
}

// runClient is cmatose's run_client.
func (t *cmatose) runClient(ctx context.Context, a rdmacm.CmatestAddr) int {
	t.Printf("cmatose: starting client\n")
	if ret := t.Connecting(a); ret != 0 {
		return ret
	}
	ret := t.connectAll(ctx, netip.AddrPortFrom(a.Peer, a.Port), a.Local)
	if t.Interrupted {
		return -1
	}
	if ret == 0 {
		ret = t.exchange(ctx)
		if t.Interrupted {
			return -1
		}
	}
	// disconnect_events: the server's DREQ on each connection, in the
	// order they come (not the order of the nodes: the server's accept
	// order is its own), answered as cmatose's rdma_disconnect on
	// DISCONNECTED does (the QP stops, the DREP goes).
	if t.Silent {
		return ret
	}
	answer := func(dctx context.Context, c *cm.Conn) error {
		select {
		case <-c.Done():
			c.Disconnect(ctx)
			return nil
		case <-dctx.Done():
			return dctx.Err()
		}
	}
	if r := t.eachConnected(ctx, answer); r != 0 {
		return r
	}
	return ret
}

// exchange is the client's data phase: message_count receives on each
// connection, then as many SENDs back; then -m's line.
func (t *cmatose) exchange(ctx context.Context) int {
	if t.Count != 0 {
		t.Printf("receiving data transfers\n")
		if ret := t.pollCQs(ctx, cmatoseRecvCQ); ret != 0 {
			return ret
		}
		t.Printf("sending replies\n")
		for _, n := range t.nodes {
			if ret := t.postSends(n); ret != 0 {
				return ret
			}
		}
		t.Printf("data transfers complete\n")
	}
	if t.o.migrate {
		t.Printf("migrating to new event channel\n")
	}
	return 0
}

// connectAll resolves and connects every node at once, as cmatose's
// rdma_resolve_addr calls and connect_events: each node's resources and
// receives are ready before its REQ; the first failure ends the wait.
func (t *cmatose) connectAll(ctx context.Context, dst netip.AddrPort, src netip.Addr) int {
	if t.ConnectsLeft <= 0 {
		return 0
	}
	type dialed struct {
		n    *cmatoseNode
		conn *cm.Conn
		ret  int // init_node or post_recvs failed
		err  error
	}
	results := make(chan dialed, len(t.nodes))
	dctx, cancel := context.WithTimeout(ctx, 2*rdmacm.PeerTimeout())
	defer cancel()
	opts := &cm.DialOptions{Src: src, PortSpace: t.o.ps, TOS: t.o.TOS,
		Param: &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}}
	for _, n := range t.nodes {
		// route_handler, once the address and route are resolved.
		if err := rdmacm.ResolvePeer(dctx, t.CM.Dev, dst.Addr()); err != nil {
			results <- dialed{n: n, err: rdmacm.ErrAddr}
			continue
		}
		if ret := t.initNode(n); ret != 0 {
			results <- dialed{n: n, ret: ret}
			continue
		}
		if ret := t.postRecvs(n); ret != 0 {
			results <- dialed{n: n, ret: ret}
			continue
		}
		go func() {
			c, err := t.CM.Agent.Dial(dctx, dst, n.qp, opts)
			results <- dialed{n: n, conn: c, err: err}
		}()
	}
	for t.ConnectsLeft > 0 {
		var r dialed
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Interrupted = true
			return -1
		}
		switch {
		case r.ret != 0:
			t.ConnectsLeft--
			return r.ret
		case r.err == rdmacm.ErrAddr:
			t.ConnectsLeft--
			return t.AddrError()
		case r.err != nil:
			if ctx.Err() != nil {
				t.Interrupted = true
				return -1
			}
			return t.connectError(r.err)
		}
		r.n.conn, r.n.connected = r.conn, true
		t.ConnectsLeft--
	}
	return 0
}

// destroyNodes releases every node (destroy_nodes); a connection still up
// goes as rdma_destroy_id makes it go.
func (t *cmatose) destroyNodes() {
	for _, n := range t.nodes {
		rdmacm.Release(n.conn, n.qp, []*roce.MR{n.mr}, n.cq[:], n.pd)
	}
}
