package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

var (
	ipA  = netip.MustParseAddr("198.18.0.1")
	ipB  = netip.MustParseAddr("198.18.0.2")
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}
)

// pipeAgents returns the CM agents of two devices joined by n pipes.
func pipeAgents(t testing.TB, n int, f link.Faults) (*Agent, *Agent) {
	t.Helper()
	return pipeAgentsConfig(t, n, f, AgentConfig{})
}

// pipeAgentsConfig is pipeAgents with the agents' configuration.
func pipeAgentsConfig(t testing.TB, n int, f link.Faults, cfg AgentConfig) (*Agent, *Agent) {
	t.Helper()
	var la, lb []link.Link
	for i := range n {
		a, b := link.NewPipe(link.PipeConfig{Seed: uint64(i + 1), AtoB: f, BtoA: f, Buffers: 2048, MACA: macA, MACB: macB})
		la, lb = append(la, a), append(lb, b)
	}
	da, err := roce.NewDevice(la, roce.Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
	if err != nil {
		t.Fatal(err)
	}
	db, err := roce.NewDevice(lb, roce.Config{Addrs: []netip.Addr{ipB}, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: macA}})
	if err != nil {
		t.Fatal(err)
	}
	aa, err := Open(da, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ab, err := Open(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		aa.Close()
		ab.Close()
		da.Close()
		db.Close()
	})
	return aa, ab
}

type end struct {
	pd  *roce.PD
	cq  *roce.CQ
	qp  *roce.QP
	buf []byte
	mr  *roce.MR
}

func newEnd(t testing.TB, d *roce.Device) *end {
	t.Helper()
	e := &end{}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, 1<<16)
	if e.mr, err = e.pd.RegMR(e.buf, roce.AccessLocalWrite|roce.AccessRemoteRead|roce.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	return e
}

func waitWC(t testing.TB, cq *roce.CQ) roce.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]roce.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("wait for a completion: %v", err)
		}
	}
	return wc[0]
}

// TestDialAccept: a connection made through the CM carries a SEND and an
// RDMA READ (the depths crossed over), and the peer's disconnect ends it.
func TestDialAccept(t *testing.T) {
	aa, ab := pipeAgents(t, 2, link.Faults{})
	l, err := ab.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	server := newEnd(t, ab.Device())
	type result struct {
		c   *Conn
		req *Request
		err error
	}
	done := make(chan result, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			done <- result{err: err}
			return
		}
		PrepareQP(server.qp)
		if err := server.qp.PostRecv(&roce.RecvWR{ID: 1, SGL: []roce.SGE{server.mr.SGE(0, 4096)}}); err != nil {
			done <- result{err: err}
			return
		}
		c, err := req.Accept(ctx, server.qp, &ConnParam{ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7, PrivateData: []byte("welcome")})
		done <- result{c, req, err}
	}()
	client := newEnd(t, aa.Device())
	c, err := aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, &DialOptions{Param: &ConnParam{
		ResponderResources: 2, InitiatorDepth: 8, RetryCount: 7, RNRRetryCount: 7, PrivateData: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.HasPrefix(c.PrivateData(), []byte("welcome")) || len(c.PrivateData()) != mad.REPPrivateSize {
		t.Fatalf("REP private data %q (%d bytes)", c.PrivateData()[:8], len(c.PrivateData()))
	}
	if !bytes.HasPrefix(r.req.Param.PrivateData, []byte("hello")) || len(r.req.Param.PrivateData) != 56 {
		t.Fatalf("REQ private data %q (%d bytes)", r.req.Param.PrivateData, len(r.req.Param.PrivateData))
	}
	if r.req.Remote != c.LocalAddr() || r.req.Local.Addr() != ipB || r.req.Local.Port() != 7471 {
		t.Fatalf("request from %v to %v, conn %v", r.req.Remote, r.req.Local, c.LocalAddr())
	}
	// Crossed over: each side issues at most the READs the other serves
	// (the server's depth clamped to the client's 2).
	ca, _ := client.qp.Query()
	sa, _ := server.qp.Query()
	if ca.MaxRdAtomic != 4 || ca.MaxDestRdAtomic != 2 || sa.MaxRdAtomic != 2 || sa.MaxDestRdAtomic != 4 {
		t.Fatalf("client rd_atomic %d/%d, server %d/%d", ca.MaxRdAtomic, ca.MaxDestRdAtomic, sa.MaxRdAtomic, sa.MaxDestRdAtomic)
	}
	if ca.SQPSN != sa.RQPSN || sa.SQPSN != ca.RQPSN || ca.DestQPN != server.qp.QPN() || sa.DestQPN != client.qp.QPN() {
		t.Fatalf("PSNs/QPNs do not cross: client %+v server %+v", ca, sa)
	}
	// As the kernel's CM: the REQ's Starting PSN is the client's receive
	// PSN, which the server sends from.
	if psn := r.req.REQ().StartingPSN; uint32(ca.RQPSN) != psn || uint32(sa.SQPSN) != psn {
		t.Fatalf("REQ Starting PSN %#x, client rq_psn %#x, server sq_psn %#x", psn, ca.RQPSN, sa.SQPSN)
	}

	copy(client.buf, "ping over rdma_cm")
	if err := client.qp.PostSend(&roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{client.mr.SGE(0, 17)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, server.cq); wc.Status != roce.WCSuccess || string(server.buf[:17]) != "ping over rdma_cm" {
		t.Fatalf("server receive %+v %q", wc, server.buf[:17])
	}
	waitWC(t, client.cq)
	copy(server.buf[100:], "read me")
	if err := client.qp.PostSend(&roce.SendWR{ID: 3, Opcode: roce.WRRDMARead, Flags: roce.SendSignaled,
		SGL: []roce.SGE{client.mr.SGE(200, 7)}, RemoteAddr: server.mr.Addr() + 100, RKey: server.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, client.cq); wc.Status != roce.WCSuccess || string(client.buf[200:207]) != "read me" {
		t.Fatalf("READ %+v %q", wc, client.buf[200:207])
	}

	// The server answers the client's DREQ when it disconnects in turn
	// (rdma_disconnect on RDMA_CM_EVENT_DISCONNECTED); until then its
	// QP is as it was.
	served := make(chan error, 1)
	go func() {
		select {
		case <-r.c.Done():
		case <-ctx.Done():
			served <- errors.New("the server never saw the disconnect")
			return
		}
		if s, _ := server.qp.Query(); s.State != roce.StateRTS {
			served <- fmt.Errorf("server QP in %v after the DREQ, before its Disconnect", s.State)
			r.c.Disconnect(ctx)
			return
		}
		served <- r.c.Disconnect(ctx)
	}()
	if err := c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.c.Err(), ErrDisconnected) || c.Err() != nil {
		t.Fatalf("server %v, client %v", r.c.Err(), c.Err())
	}
	if s, _ := server.qp.Query(); s.State != roce.StateErr {
		t.Fatalf("server QP in %v after its Disconnect", s.State)
	}
}

// TestDialRejected: no listener gives REJ 8, a rejecting server REJ 28
// with its data, and the errors say so.
func TestDialRejected(t *testing.T) {
	aa, ab := pipeAgents(t, 1, link.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := newEnd(t, aa.Device())
	_, err := aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
		t.Fatalf("no listener: %v", err)
	}
	l, _ := ab.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), nil)
	go func() {
		if req, err := l.Accept(ctx); err == nil {
			req.Reject([]byte("go away"))
		}
	}()
	_, err = aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
	if !errors.As(err, &rej) || rej.Reason != mad.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("rejected: %v", err)
	}
}

// TestDialLossy: under 20% loss both ways, connections still come up (the
// CM retries) and carry a message.
func TestDialLossy(t *testing.T) {
	aa, ab := pipeAgents(t, 1, link.Faults{Loss: 0.2})
	l, _ := ab.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		server, client := newEnd(t, ab.Device()), newEnd(t, aa.Device())
		go func() {
			if req, err := l.Accept(ctx); err == nil {
				PrepareQP(server.qp)
				server.qp.PostRecv(&roce.RecvWR{ID: 1, SGL: []roce.SGE{server.mr.SGE(0, 64)}})
				req.Accept(ctx, server.qp, nil)
			}
		}()
		c, err := aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		client.qp.PostSend(&roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{client.mr.SGE(0, 8)}})
		if wc := waitWC(t, server.cq); wc.Status != roce.WCSuccess {
			t.Fatalf("connection %d: %+v", i, wc)
		}
		c.Close()
	}
}

// TestResolveUD: SIDR finds a UD service's QP number and Q_Key, and a
// datagram sent there arrives; an unknown port answers "service ID not
// supported".
func TestResolveUD(t *testing.T) {
	aa, ab := pipeAgents(t, 2, link.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := aa.ResolveUD(ctx, netip.AddrPortFrom(ipB, 7174), nil)
	var se *SIDRError
	if !errors.As(err, &se) || se.Status != mad.SIDRUnsupported {
		t.Fatalf("no listener: %v", err)
	}
	l, err := ab.Listen(netip.AddrPortFrom(netip.Addr{}, 7174), &ListenOptions{PortSpace: mad.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	server := udEnd(t, ab.Device())
	go func() {
		req, err := l.Accept(ctx)
		if err != nil || !req.UD() || !bytes.HasPrefix(req.Param.PrivateData, []byte("who")) {
			t.Errorf("request %+v: %v", req, err)
			return
		}
		if err := req.AcceptUD(server.qp, []byte("here")); err != nil {
			t.Error(err)
		}
	}()
	target, err := aa.ResolveUD(ctx, netip.AddrPortFrom(ipB, 7174), &DialOptions{Param: &ConnParam{PrivateData: []byte("who")}})
	if err != nil {
		t.Fatal(err)
	}
	if target.QPN != server.qp.QPN() || target.QKey != mad.RDMAUDPQKey || !bytes.HasPrefix(target.PrivateData, []byte("here")) {
		t.Fatalf("target %+v", target)
	}
	client := udEnd(t, aa.Device())
	copy(client.buf, "datagram")
	if err := client.qp.PostSend(&roce.SendWR{ID: 1, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{client.mr.SGE(0, 8)},
		AV: &target.AV, RemoteQPN: target.QPN, RemoteQKey: target.QKey}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, server.cq); wc.Status != roce.WCSuccess || string(server.buf[40:48]) != "datagram" {
		t.Fatalf("UD receive %+v %q", wc, server.buf[40:48])
	}
}

// udEnd makes a UD QP at RTS with rdma_cm's UDP Q_Key and a posted receive.
func udEnd(t testing.TB, d *roce.Device) *end {
	t.Helper()
	e := &end{}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(roce.QPConfig{Type: roce.UD, SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Connect(context.Background(), roce.Endpoint{}, roce.Endpoint{}, roce.ConnectOptions{QKey: mad.RDMAUDPQKey}); err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, 4096)
	if e.mr, err = e.pd.RegMR(e.buf, roce.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.PostRecv(&roce.RecvWR{ID: 9, SGL: []roce.SGE{e.mr.SGE(0, 1024)}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestDialUnreachable: a peer that never answers ends the dial with
// ErrUnreachable after the kernel's retries, and the error says so.
func TestDialUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for 16 REQ time-outs (24.6 s)")
	}
	aa, ab := pipeAgents(t, 1, link.Faults{})
	ab.Close() // B's QP 1 is gone: nothing answers
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := newEnd(t, aa.Device())
	start := time.Now()
	_, err := aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "the REQ went out 16 times") {
		t.Fatalf("dial: %v", err)
	}
	if took, want := time.Since(start), 16*(2*ms(PacketLifeTime)+ms(ResponseTimeout)); took < want {
		t.Fatalf("gave up after %v, before the %v the retries take", took, want)
	}
	if st := aa.Stats(); st.Retransmits.Load() != 15 || st.Timeouts.Load() != 1 {
		t.Fatalf("retransmits %d, timeouts %d", st.Retransmits.Load(), st.Timeouts.Load())
	}
}

// TestListenAddresses: two listeners on one port, one bound to the
// device's address and one to any; a REQ goes to the bound one; a second
// wildcard or the same address is refused, a foreign address too.
func TestListenAddresses(t *testing.T) {
	aa, ab := pipeAgents(t, 1, link.Faults{})
	bound, err := ab.Listen(netip.AddrPortFrom(ipB, 7471), nil)
	if err != nil {
		t.Fatal(err)
	}
	wild, err := ab.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7471), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []netip.Addr{ipB, {}, netip.IPv4Unspecified()} {
		if _, err := ab.Listen(netip.AddrPortFrom(addr, 7471), nil); !errors.Is(err, ErrListening) {
			t.Fatalf("second listener on %v: %v", addr, err)
		}
	}
	if _, err := ab.Listen(netip.AddrPortFrom(ipA, 7471), nil); !errors.Is(err, ErrAddrNotLocal) {
		t.Fatalf("listen on a foreign address: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if req, err := bound.Accept(ctx); err == nil {
			req.Reject([]byte("bound"))
		}
	}()
	client := newEnd(t, aa.Device())
	_, err = aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
	var rej *RejectError
	if !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("bound")) {
		t.Fatalf("dial: %v", err)
	}
	bound.Close()
	go func() {
		if req, err := wild.Accept(ctx); err == nil {
			req.Reject([]byte("wild"))
		}
	}()
	_, err = aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
	if !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("wild")) {
		t.Fatalf("dial after the bound listener closed: %v", err)
	}
	wild.Close()
	_, err = aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), client.qp, nil)
	if !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
		t.Fatalf("dial with no listener: %v", err)
	}
}
