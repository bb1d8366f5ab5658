//go:build linux

package rdmaep

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"syscall"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/roce"
)

// xroce rdma_server and rdma_client are rdma-core's rdma_server and
// rdma_client (librdmacm/examples, the same in rdma-core 44 to 64), the
// examples of librdmacm's synchronous endpoint API (rdma_create_ep): one
// RC connection, one 16-byte SEND each way (the client's first, both all
// zeros, sent inline), then both sides disconnect at once, their DREQs
// crossing. Same flags, same lines, same statuses. -d names the interface
// (the device); the originals have no -d.

// Server is xroce rdma_server.
var Server = base.Command{Name: "rdma_server", Summary: "one 16-byte SEND each way over RDMA CM, as rdma-core's rdma_server", Run: runRdmaServer}

// Client is xroce rdma_client.
var Client = base.Command{Name: "rdma_client", Summary: "the client of rdma_server (and of rdma-core's), as rdma-core's rdma_client", Run: runRdmaClient}

// rdmaEPMsgSize is the size of the examples' send_msg and recv_msg.
const rdmaEPMsgSize = 16

// rdmaEPOptions is the command line of rdma_server and rdma_client.
type rdmaEPOptions struct {
	addr   string // -s
	port   string // -p
	ifname string // -d (xroce's)
}

// parseRdmaEP reads the command line of rdma_server or rdma_client
// (name); a mistake prints glibc's message and the usage, status 1.
func parseRdmaEP(stdout, stderr io.Writer, name, addr string, args []string) (o *rdmaEPOptions, code int, done bool) {
	o = &rdmaEPOptions{addr: addr, port: "7471"}
	opts, _ := base.Getopt(args, "s:p:d:")
	for _, op := range opts {
		switch op.C {
		case 's':
			o.addr = op.Arg
		case 'p':
			o.port = op.Arg
		case 'd':
			o.ifname = op.Arg
		default:
			fmt.Fprintf(stderr, "%s: %s\n", name, op.Msg)
			fmt.Fprintf(stdout, "usage: %s\n\t[-s server_address]\n\t[-p port_number]\n", name)
			return nil, 1, true
		}
	}
	return o, 0, false
}

func runRdmaServer(ctx context.Context, e *base.Env, args []string) error {
	return runRdmaEP(ctx, e, args, "rdma_server", "0.0.0.0", (*rdmaEP).server)
}

func runRdmaClient(ctx context.Context, e *base.Env, args []string) error {
	return runRdmaEP(ctx, e, args, "rdma_client", "127.0.0.1", (*rdmaEP).client)
}

// runRdmaEP is the main of rdma_server or rdma_client (name), whose -s is
// addr by default and whose run is run.
func runRdmaEP(ctx context.Context, e *base.Env, args []string, name, addr string, run func(*rdmaEP, context.Context) int) error {
	o, code, done := parseRdmaEP(e.Stdout, e.Stderr, name, addr, args)
	if done {
		return base.Status(code)
	}
	ep := &rdmaEP{o: o, name: name, stdout: e.Stdout, stderr: e.Stderr}
	fmt.Fprintf(e.Stdout, "%s: start\n", name)
	ret := run(ep, ctx)
	if ep.interrupted {
		return base.Status(rdmacm.ExitInterrupted)
	}
	fmt.Fprintf(e.Stdout, "%s: end %d\n", name, ret)
	return base.Status(ret)
}

// rdmaEP is one run of rdma_server or rdma_client: the endpoint's
// resources (rdma_create_ep's: a PD, a CQ each way, an RC QP of one send
// and one receive with 16 bytes inline, every send signalled).
type rdmaEP struct {
	o              *rdmaEPOptions
	name           string
	stdout, stderr io.Writer
	interrupted    bool

	d      *rdmacm.Device
	pd     *roce.PD
	sendCQ *roce.CQ
	recvCQ *roce.CQ
	qp     *roce.QP
	recvMR *roce.MR
	sendMR *roce.MR // the send buffer (sent inline, registered all the same)
	conn   *cm.Conn
}

// open is rdma_getaddrinfo and the device part of rdma_create_ep: it
// returns the address, or the status after printing what the original
// prints. passive is the server's RAI_PASSIVE.
func (ep *rdmaEP) open(ctx context.Context, passive bool) (netip.AddrPort, int) {
	addr, gerr := rdmacm.LookupAddr(ctx, ep.o.addr, false)
	var port uint16
	if gerr == nil {
		port, gerr = rdmacm.LookupPort(ep.o.port)
	}
	if gerr != nil {
		fmt.Fprintf(ep.stdout, "rdma_getaddrinfo: %s\n", gerr.Msg)
		return netip.AddrPort{}, gerr.Code
	}
	local, peer := addr, netip.Addr{}
	if !passive {
		local, peer = netip.Addr{}, addr
	}
	ifname, ierr := rdmacm.Interface(ep.o.ifname, local, peer)
	if ierr != nil {
		switch {
		case ierr.Errno == syscall.ENODEV && passive:
			fmt.Fprintf(ep.stderr, "%s: %v: name one with -d INTERFACE\n", ep.name, ierr)
		case ierr.Errno == syscall.ENODEV:
			fmt.Fprintf(ep.stderr, "%s: %v\n", ep.name, ierr)
		}
		rdmacm.Perror(ep.stderr, "rdma_create_ep", ierr.Errno)
		return netip.AddrPort{}, -1
	}
	d, err := rdmacm.Open(ep.stderr, ep.name, ifname)
	if err != nil {
		fmt.Fprintf(ep.stderr, "%s: %v\n", ep.name, err)
		rdmacm.Perror(ep.stderr, "rdma_create_ep", syscall.ENODEV)
		return netip.AddrPort{}, -1
	}
	ep.d = d
	return netip.AddrPortFrom(addr, port), 0
}

// close releases everything (rdma_destroy_ep, the device).
func (ep *rdmaEP) close() {
	if ep.d == nil {
		return
	}
	rdmacm.Release(ep.conn, ep.qp, []*roce.MR{ep.recvMR, ep.sendMR}, []*roce.CQ{ep.sendCQ, ep.recvCQ}, ep.pd)
	ep.d.Close()
}

// createQP makes the endpoint's QP and buffers and posts the receive.
func (ep *rdmaEP) createQP() int {
	d := ep.d.Dev
	var err error
	if ep.pd, err = d.AllocPD(); err == nil {
		if ep.sendCQ, err = d.CreateCQ(1); err == nil {
			ep.recvCQ, err = d.CreateCQ(1)
		}
	}
	if err == nil {
		ep.qp, err = ep.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: ep.sendCQ, RecvCQ: ep.recvCQ,
			MaxSendWR: 1, MaxRecvWR: 1, MaxSGE: 1, MaxInline: rdmaEPMsgSize, SignalAll: true})
	}
	if err == nil {
		err = cm.PrepareQP(ep.qp)
	}
	if err != nil {
		rdmacm.Perror(ep.stderr, "rdma_create_ep", syscall.ENOMEM)
		return -1
	}
	if ep.recvMR, err = ep.pd.RegMR(make([]byte, rdmaEPMsgSize), roce.AccessLocalWrite); err != nil {
		rdmacm.Perror(ep.stderr, "rdma_reg_msgs for recv_msg", syscall.ENOMEM)
		return -1
	}
	if ep.sendMR, err = ep.pd.RegMR(make([]byte, rdmaEPMsgSize), roce.AccessLocalWrite); err != nil {
		rdmacm.Perror(ep.stderr, "rdma_reg_msgs for send_msg", syscall.ENOMEM)
		return -1
	}
	if err := ep.qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{ep.recvMR.SGE(0, rdmaEPMsgSize)}}); err != nil {
		rdmacm.Perror(ep.stderr, "rdma_post_recv", syscall.Errno(rdmacm.PostErrno(err)))
		return -1
	}
	return 0
}

// send is rdma_post_send of the 16-byte message, inline.
func (ep *rdmaEP) send() int {
	err := ep.qp.PostSend(&roce.SendWR{Opcode: roce.WRSend, Flags: roce.SendInline | roce.SendSignaled,
		SGL: []roce.SGE{ep.sendMR.SGE(0, rdmaEPMsgSize)}})
	if err != nil {
		rdmacm.Perror(ep.stderr, "rdma_post_send", syscall.Errno(rdmacm.PostErrno(err)))
		return -1
	}
	return 0
}

// completion is rdma_get_send_comp or rdma_get_recv_comp (what names
// it). The originals take any completion; the clone wants the receive
// to have succeeded (a send flushed by the peer's DREQ is all right: the
// peer had it), and gives up when the peer is silent for rdmacm.PeerTimeout.
func (ep *rdmaEP) completion(ctx context.Context, cq *roce.CQ, what string) int {
	send := cq == ep.sendCQ
	var wc [1]roce.WC
	ok, err := rdmacm.PollOne(ctx, cq, wc[:], nil, rdmacm.PeerTimeout())
	switch {
	case ctx.Err() != nil:
		ep.interrupted = true
		return -1
	case err != nil || !ok:
		fmt.Fprintf(ep.stderr, "%s\n", rdmacm.SilentMsg(ep.name))
		rdmacm.Perror(ep.stderr, what, syscall.ETIMEDOUT)
		return -1
	case wc[0].Status == roce.WCSuccess,
		wc[0].Status == roce.WCWRFlushErr && send:
		return 0
	}
	fmt.Fprintf(ep.stderr, "%s: %s: completion failed: status %d (%v)\n", ep.name, what, int(wc[0].Status), wc[0].Status)
	return -1
}

// disconnect is the synchronous rdma_disconnect: the QP to ERR, a DREQ
// (or nothing if the peer's came first), and the wait for DISCONNECTED.
func (ep *rdmaEP) disconnect(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rdmacm.PeerTimeout())
	defer cancel()
	ep.conn.Disconnect(dctx)
}

// server is rdma_server.c's run.
func (ep *rdmaEP) server(ctx context.Context) int {
	bind, ret := ep.open(ctx, true)
	if ret != 0 {
		return ret
	}
	defer ep.close()
	l, err := ep.d.Agent.Listen(bind, nil)
	if err != nil {
		rdmacm.Perror(ep.stderr, "rdma_create_ep", syscall.EADDRNOTAVAIL)
		return -1
	}
	defer l.Close()
	rdmacm.Listening()
	req, err := l.Accept(ctx)
	if err != nil {
		ep.interrupted = true
		return -1
	}
	l.Close()
	if ret := ep.createQP(); ret != 0 {
		req.Reject(nil)
		return ret
	}
	if ep.conn, err = rdmacm.Accept(ctx, req, ep.qp, nil); err != nil {
		if ctx.Err() != nil {
			ep.interrupted = true
			return -1
		}
		rdmacm.Perror(ep.stderr, "rdma_accept", rdmacm.Errno(err))
		return -1
	}
	ret = ep.completion(ctx, ep.recvCQ, "rdma_get_recv_comp")
	if ret == 0 {
		if ret = ep.send(); ret == 0 {
			ret = ep.completion(ctx, ep.sendCQ, "rdma_get_send_comp")
		}
	}
	if !ep.interrupted {
		ep.disconnect(ctx)
	}
	return ret
}

// client is rdma_client.c's run.
func (ep *rdmaEP) client(ctx context.Context) int {
	dst, ret := ep.open(ctx, false)
	if ret != 0 {
		return ret
	}
	defer ep.close()
	if err := rdmacm.ResolvePeer(ctx, ep.d.Dev, dst.Addr()); err != nil {
		if ctx.Err() != nil {
			ep.interrupted = true
			return -1
		}
		rdmacm.Perror(ep.stderr, "rdma_create_ep", syscall.ETIMEDOUT)
		return -1
	}
	if ret := ep.createQP(); ret != 0 {
		return ret
	}
	conn, err := ep.d.Dial(ctx, dst, ep.qp, nil)
	if err != nil {
		if ctx.Err() != nil {
			ep.interrupted = true
			return -1
		}
		rdmacm.Perror(ep.stderr, "rdma_connect", rdmacm.Errno(err))
		return -1
	}
	ep.conn = conn
	if ret = ep.send(); ret == 0 {
		if ret = ep.completion(ctx, ep.sendCQ, "rdma_get_send_comp"); ret == 0 {
			ret = ep.completion(ctx, ep.recvCQ, "rdma_get_recv_comp")
		}
	}
	if !ep.interrupted {
		ep.disconnect(ctx)
	}
	return ret
}
