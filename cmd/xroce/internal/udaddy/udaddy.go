//go:build linux

package udaddy

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// xroce udaddy is rdma-core's udaddy (librdmacm/examples/udaddy.c,
// rdma-core 44): -c UD QPs that find the server's QPs with SIDR (port
// 7174 of rdma_cm's UDP port space, Q_Key 0x01234567), then -C datagrams
// of -S bytes each way on each: the client sends first, SEND with
// immediate carrying its QP number (big-endian); the server answers that
// QP number at the address the first datagram came from (its GRH). Same
// flags, same lines ("udaddy: ..."), the exit status is the "return
// status". -d names the interface (the device); udaddy has no -d.

// Cmd is xroce udaddy.
var Cmd = base.Command{Name: "udaddy", Summary: "RDMA CM UD (SIDR) datagram test with a peer, as rdma-core's udaddy", Run: runUdaddy}

// udaddyPort is udaddy's port: fixed, -p is the port space.
const udaddyPort = 7174

// udaddyOptions is udaddy's command line.
type udaddyOptions struct {
	rdmacm.CmatestOptions
	ps int32 // -p, -P: the port space, an int as udaddy keeps it
}

// udaddyUsage prints udaddy's usage (stdout) for program name.
func udaddyUsage(w io.Writer, name string) {
	fmt.Fprintf(w, "usage: %s\n", name)
	fmt.Fprint(w, "\t[-s server_address]\n"+
		"\t[-b bind_address]\n"+
		"\t[-f address_format]\n"+
		"\t    name, ip, ipv6, or gid\n"+
		"\t[-P port_space]\n"+
		"\t    udp or ipoib\n"+
		"\t[-c connections]\n"+
		"\t[-C message_count]\n"+
		"\t[-S message_size]\n"+
		"\t[-t type_of_service]\n")
	fmt.Fprintf(w, "\t[-p port_space - %#x for UDP (default), %#x for IPOIB]\n", int(mad.PortSpaceUDP), int(mad.PortSpaceIPoIB))
}

// parseUdaddy reads udaddy's command line as its main does: glibc's
// message and the usage, status 1, for a mistake.
func parseUdaddy(stdout, stderr io.Writer, args []string) (o *udaddyOptions, code int, done bool) {
	o = &udaddyOptions{CmatestOptions: rdmacm.CmatestOptions{Connections: 1, Count: 10, Size: 100}, ps: int32(mad.PortSpaceUDP)}
	opts, _ := base.Getopt(args, "s:b:c:C:S:t:p:P:f:d:")
	for _, op := range opts {
		if o.Set(stderr, op) {
			continue
		}
		switch op.C {
		case 'p':
			v, _ := base.Strtol(op.Arg, 0)
			o.ps = int32(v)
		case 'P':
			switch {
			case rdmacm.HasPrefixFold(op.Arg, "ipoib"):
				o.ps = int32(mad.PortSpaceIPoIB)
			case !rdmacm.HasPrefixFold(op.Arg, "udp"):
				fmt.Fprintln(stderr, "Warning: unknown port space format")
			}
		default:
			fmt.Fprintf(stderr, "udaddy: %s\n", op.Msg)
			udaddyUsage(stdout, "udaddy")
			return nil, 1, true
		}
	}
	return o, 0, false
}

func runUdaddy(ctx context.Context, e *base.Env, args []string) error {
	o, code, done := parseUdaddy(e.Stdout, e.Stderr, args)
	if done {
		return base.Status(code)
	}
	t := &udaddy{Cmatest: rdmacm.Cmatest{Name: "udaddy", Stdout: e.Stdout, Stderr: e.Stderr, Count: o.Count}, o: o}
	return base.Status(t.run(ctx))
}

// udaddy is one run of udaddy.
type udaddy struct {
	rdmacm.Cmatest
	o     *udaddyOptions
	nodes []*udaddyNode
}

// udaddyNode is one UD QP with its own PD, CQ (sends and receives) and
// message buffer, as udaddy's struct cmatest_node; av, remoteQPN and
// remoteQKey are where its datagrams go (ibv_ah, remote_qpn, remote_qkey).
type udaddyNode struct {
	pd         *roce.PD
	cq         *roce.CQ
	qp         *roce.QP
	mr         *roce.MR
	av         *roce.AddressVector
	remoteQPN  uint32
	remoteQKey uint32
	connected  bool
}

// portSpace is the port space as the kernel's rdma_cm takes it (a 16-bit
// field of rdma_create_id), and whether it knows it.
func (t *udaddy) portSpace() (mad.PortSpace, bool) {
	ps := mad.PortSpace(uint16(t.o.ps))
	switch ps {
	case mad.PortSpaceIPoIB, mad.PortSpaceTCP, mad.PortSpaceUDP, mad.PortSpaceIB:
		return ps, true
	}
	return ps, false
}

// run is udaddy's main after the command line: its exit status is the
// return status it prints.
func (t *udaddy) run(ctx context.Context) int {
	a, ok := t.Start(ctx, "udaddy", &t.o.CmatestOptions, strconv.Itoa(udaddyPort))
	if !ok {
		return 1
	}
	defer t.Close()
	// alloc_nodes: the client's rdma_create_id calls refuse a port space
	// the kernel does not know, and udaddy exits without a word.
	if _, ok := t.portSpace(); !ok && t.o.Dst != "" && t.o.Connections > 0 {
		return 1
	}
	t.nodes = rdmacm.AllocNodes[udaddyNode](t.o.Connections)
	defer t.destroyNodes()
	var ret int
	if t.o.Dst != "" {
		ret = t.runClient(ctx, a)
	} else {
		ret = t.runServer(ctx, a)
	}
	return t.End(ret)
}

// verifyParams is udaddy's verify_test_params: a datagram is one packet,
// so -S may not exceed the port's active MTU.
func (t *udaddy) verifyParams() int {
	mtu := t.CM.Dev.Info().ActiveMTU.Bytes()
	if t.Count != 0 && t.o.Size > mtu {
		t.Printf("udaddy: message_size %d is larger than active mtu %d\n", t.o.Size, mtu)
		return -int(syscall.EINVAL)
	}
	return 0
}

// initNode is udaddy's init_node: a PD, one CQ of twice message_count
// entries, a UD QP at RTS with rdma_cm's Q_Key (as rdma_create_qp leaves
// it) that signals only the sends asked to, the message buffer. It
// returns the status (printing as udaddy does), 0 when all is well.
func (t *udaddy) initNode(n *udaddyNode) int {
	var err error
	if n.pd, err = t.CM.Dev.AllocPD(); err != nil {
		t.Printf("udaddy: unable to allocate PD\n")
		return -int(syscall.ENOMEM)
	}
	cqe, wr := 2, 1
	if t.Count != 0 {
		cqe, wr = 2*t.Count, t.Count
	}
	if cqe > 0 {
		n.cq, err = t.CM.Dev.CreateCQ(cqe)
	}
	if cqe <= 0 || err != nil {
		t.Printf("udaddy: unable to create CQ\n")
		return -int(syscall.ENOMEM)
	}
	n.qp, err = n.pd.CreateQP(roce.QPConfig{Type: roce.UD, SendCQ: n.cq, RecvCQ: n.cq, MaxSendWR: wr, MaxRecvWR: wr, MaxSGE: 1})
	errno := syscall.EINVAL
	switch ps, _ := t.portSpace(); {
	case err != nil:
	case ps == mad.PortSpaceIPoIB:
		// rdma_cm takes an IPoIB ID's Q_Key from the IB broadcast
		// group, which a RoCE port has not: the kernel's
		// rdma_init_qp_attr fails with ENODEV.
		errno = syscall.ENODEV
	case ps != mad.PortSpaceUDP:
		// A TCP or IB port space makes an RC rdma_cm ID, whose QP
		// attributes a UD QP refuses.
	default:
		err = n.qp.Connect(context.Background(), roce.Endpoint{}, roce.Endpoint{}, roce.ConnectOptions{QKey: mad.RDMAUDPQKey})
		errno = 0
		if err != nil {
			errno = syscall.EINVAL
		}
	}
	if errno != 0 {
		rdmacm.Perror(t.Stderr, "udaddy: unable to create QP", errno)
		return -1
	}
	// udaddy's receives all land in one buffer of -S bytes and the GRH;
	// here the first has a slot of its own, so that its GRH, read for the
	// server's reply, is not written again under the reader.
	var ret int
	n.mr, ret = t.CreateMessage(n.pd, t.o.Size, 2*(t.o.Size+rdmacm.GRHSize))
	return ret
}

// postRecvs posts message_count receives of -S bytes and the GRH.
func (t *udaddy) postRecvs(n *udaddyNode) int {
	slot := t.o.Size + rdmacm.GRHSize
	for i := range t.Count {
		off := 0
		if i > 0 {
			off = slot
		}
		if err := n.qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{n.mr.SGE(off, slot)}}); err != nil {
			ret := rdmacm.PostErrno(err)
			t.Printf("failed to post receives: %d\n", ret)
			return ret
		}
	}
	return 0
}

// postSends posts message_count SENDs with immediate of -S bytes to the
// node's peer, the immediate being the node's QP number.
func (t *udaddy) postSends(n *udaddyNode, flags roce.SendFlags) int {
	if !n.connected || t.Count == 0 {
		return 0
	}
	for range t.Count {
		err := n.qp.PostSend(&roce.SendWR{Opcode: roce.WRSendWithImm, Flags: flags, SGL: []roce.SGE{n.mr.SGE(0, t.o.Size)},
			Imm: n.qp.QPN(), AV: n.av, RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey})
		if err != nil {
			ret := rdmacm.PostErrno(err)
			t.Printf("failed to post sends: %d\n", ret)
			return ret
		}
	}
	return 0
}

// pollCQs is udaddy's poll_cqs: message_count completions on the CQ of
// each connected node, failed ones included, as udaddy counts them. A
// node without a peer address yet (the server's) takes it from its first
// completion. It gives up on a peer silent for rdmacm.PeerTimeout.
func (t *udaddy) pollCQs(ctx context.Context) int {
	var wc [1]roce.WC
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for range t.Count {
			if ret := t.Poll(ctx, n.cq, wc[:]); ret != 0 {
				return ret
			}
			if n.av == nil {
				// create_reply_ah: ibv_create_ah_from_wc, the immediate's
				// QP number, the node's own Q_Key; the GRH is the first
				// slot's.
				av, ok := rdmacm.UDReplyAV(n.mr.Bytes()[:rdmacm.GRHSize], &wc[0], t.CM.Dev.GIDs(), t.CM.Dev.Info().MAC)
				if !ok {
					t.Printf("udaddy: failed to create reply AH\n")
					return -1
				}
				n.av, n.remoteQPN, n.remoteQKey = &av, wc[0].Imm, mad.RDMAUDPQKey
			}
		}
	}
	return 0
}

// runServer is udaddy's run_server.
func (t *udaddy) runServer(ctx context.Context, a rdmacm.CmatestAddr) int {
	t.Printf("udaddy: starting server\n")
	ps, ok := t.portSpace()
	if !ok {
		rdmacm.Perror(t.Stderr, "udaddy: listen request failed", syscall.EINVAL)
		return -1
	}
	l, ret := t.Listen(a, ps)
	if l == nil {
		return ret
	}
	defer l.Close()
	// udaddy goes on after connect_events whatever it returns: with the
	// connections it has.
	t.connectEvents(ctx, l)
	if t.Interrupted {
		return -1
	}
	if t.Count != 0 {
		t.Printf("receiving data transfers\n")
		if ret := t.pollCQs(ctx); ret != 0 {
			return ret
		}
		t.Printf("sending replies\n")
		for _, n := range t.nodes {
			if ret := t.postSends(n, roce.SendSignaled); ret != 0 {
				return ret
			}
		}
		if ret := t.pollCQs(ctx); ret != 0 {
			return ret
		}
		t.Printf("data transfers complete\n")
	}
	return 0
}

// connectEvents is the server's connect_events with connect_handler:
// each request gets a node, its receives posted, and a SIDR_REP with the
// node's QP number, until -c are answered or one fails.
func (t *udaddy) connectEvents(ctx context.Context, l *cm.Listener) int {
	index := 0
	for t.ConnectsLeft > 0 {
		req, err := l.Accept(ctx)
		if err != nil {
			t.Interrupted = true
			return -1
		}
		n := t.nodes[index]
		index++
		ret := t.verifyParams()
		if ret == 0 {
			ret = t.initNode(n)
		}
		if ret == 0 {
			ret = t.postRecvs(n)
		}
		if ret == 0 {
			if err := req.AcceptUD(n.qp, nil); err != nil {
				rdmacm.Perror(t.Stderr, "udaddy: failure accepting", syscall.EINVAL)
				ret = -1
			}
		}
		if ret != 0 {
			t.ConnectsLeft--
			t.Printf("udaddy: failing connection request\n")
			req.Reject(nil)
			return ret
		}
		n.connected = true
		t.ConnectsLeft--
	}
	return 0
}

// runClient is udaddy's run_client.
func (t *udaddy) runClient(ctx context.Context, a rdmacm.CmatestAddr) int {
	t.Printf("udaddy: starting client\n")
	if ret := t.Connecting(a); ret != 0 {
		return ret
	}
	if ret := t.resolveAll(ctx, netip.AddrPortFrom(a.Peer, a.Port), a.Local); ret != 0 || t.Interrupted {
		return ret
	}
	if t.Count != 0 {
		t.Printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if ret := t.postSends(n, 0); ret != 0 {
				return ret
			}
		}
		t.Printf("receiving data transfers\n")
		if ret := t.pollCQs(ctx); ret != 0 {
			return ret
		}
		t.Printf("data transfers complete\n")
	}
	return 0
}

// resolveAll is the client's rdma_resolve_addr calls and connect_events:
// each node, its resources made and receives posted, asks the server for
// a QP with SIDR (route_handler's rdma_connect), all at once; the first
// failure ends the wait.
func (t *udaddy) resolveAll(ctx context.Context, dst netip.AddrPort, src netip.Addr) int {
	if t.ConnectsLeft <= 0 {
		return 0
	}
	type resolved struct {
		n      *udaddyNode
		target *cm.UDTarget
		ret    int // verify_test_params, init_node or post_recvs failed
		err    error
	}
	results := make(chan resolved, len(t.nodes))
	rctx, cancel := context.WithTimeout(ctx, 2*rdmacm.PeerTimeout())
	defer cancel()
	ps, _ := t.portSpace()
	opts := &cm.DialOptions{Src: src, PortSpace: ps}
	if t.o.SetTOS {
		opts.TOS = t.o.TOS
	}
	for _, n := range t.nodes {
		// A node that fails here ends connect_events before the next
		// node's turn: launch no more.
		if err := rdmacm.ResolvePeer(rctx, t.CM.Dev, dst.Addr()); err != nil {
			results <- resolved{n: n, err: rdmacm.ErrAddr}
			break
		}
		ret := t.verifyParams()
		if ret == 0 {
			ret = t.initNode(n)
		}
		if ret == 0 {
			ret = t.postRecvs(n)
		}
		if ret != 0 {
			results <- resolved{n: n, ret: ret}
			break
		}
		go func() {
			target, err := t.CM.Agent.ResolveUD(rctx, dst, opts)
			results <- resolved{n: n, target: target, err: err}
		}()
	}
	for t.ConnectsLeft > 0 {
		var r resolved
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Interrupted = true
			return -1
		}
		t.ConnectsLeft--
		switch {
		case ctx.Err() != nil:
			t.Interrupted = true
			return -1
		case r.ret != 0:
			return r.ret
		case r.err == rdmacm.ErrAddr:
			return t.AddrError()
		case r.err != nil:
			return t.EventError(r.err)
		}
		// resolved_handler
		r.n.av, r.n.remoteQPN, r.n.remoteQKey = &r.target.AV, r.target.QPN, r.target.QKey
		r.n.connected = true
	}
	return 0
}

// destroyNodes releases every node (destroy_nodes).
func (t *udaddy) destroyNodes() {
	for _, n := range t.nodes {
		rdmacm.Release(nil, n.qp, []*roce.MR{n.mr}, []*roce.CQ{n.cq}, n.pd)
	}
}
