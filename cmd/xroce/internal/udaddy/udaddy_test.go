//go:build linux

package udaddy

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// The usage, as rdma-core 44's udaddy prints it (captured from Debian's
// binary), and the flags' warnings.
func TestUdaddyUsage(t *testing.T) {
	want := cmtest.Usage44(t, "udaddy")
	for _, args := range [][]string{{"-C", "3", "-x"}, {"-h"}} {
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), append([]string{"udaddy"}, args...), &out, &errb)
		if want := strings.Replace(want, "'x'", "'"+args[len(args)-1][1:]+"'", 1); base.ExitCode(err) != 1 || !base.Reported(err) ||
			errb.String()+out.String() != want {
			t.Errorf("udaddy %q: exit %d, output:\n%s%s\nwant:\n%s", args, base.ExitCode(err), errb.String(), out.String(), want)
		}
	}
	for _, tc := range []struct {
		args   []string
		want   rdmacm.CmatestOptions
		ps     int32
		stderr string
	}{
		{nil, rdmacm.CmatestOptions{Connections: 1, Count: 10, Size: 100}, 0x111, ""},
		{[]string{"-s", "h", "-b", "a", "-c2", "-C", "20", "-S500", "-t", "0x20", "-f", "IP", "-P", "udp"},
			rdmacm.CmatestOptions{Dst: "h", Src: "a", Numeric: true, Connections: 2, Count: 20, Size: 500, TOS: 0x20, SetTOS: true}, 0x111, ""},
		{[]string{"-P", "ipoib"}, rdmacm.CmatestOptions{Connections: 1, Count: 10, Size: 100}, 2, ""},
		{[]string{"-p", "0x13f", "-P", "UDPX"}, rdmacm.CmatestOptions{Connections: 1, Count: 10, Size: 100}, 0x13f, ""},
		{[]string{"-P", "tcp", "-f", "ipv6"}, rdmacm.CmatestOptions{Numeric: true, Connections: 1, Count: 10, Size: 100}, 0x111,
			"Warning: unknown port space format\n"},
		{[]string{"-f", "dns", "-d", "veth0"}, rdmacm.CmatestOptions{Connections: 1, Count: 10, Size: 100, Ifname: "veth0"}, 0x111,
			"Warning: unknown address format\n"},
	} {
		var out, errb bytes.Buffer
		o, _, done := parseUdaddy(&out, &errb, tc.args)
		if want := (udaddyOptions{tc.want, tc.ps}); done || *o != want || errb.String() != tc.stderr || out.Len() != 0 {
			t.Errorf("%q: %+v, stderr %q, want %+v, %q", tc.args, o, errb.String(), want, tc.stderr)
		}
	}
}

const (
	udaddyServerOut = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\n" +
		"test complete\nreturn status 0\n"
	udaddyClientOut = "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
)

// Both roles against each other, between two network namespaces.
func TestUdaddy(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	testCmatest(t, p, "udaddy", []cmtest.CmatestCase{
		{Name: "default", Server: nil, Client: []string{"-s", b}, Sout: udaddyServerOut, Cout: udaddyClientOut},
		{Name: "many", Server: []string{"-c", "2", "-C", "20", "-S", "500"}, Client: []string{"-s", b, "-c", "2", "-C", "20", "-S", "500"},
			Sout: udaddyServerOut, Cout: udaddyClientOut},
		{Name: "bound", Server: []string{"-b", b, "-C", "5", "-S", "1024", "-f", "ip", "-P", "udp"},
			Client: []string{"-s", b, "-b", p.A.IP.String(), "-C5", "-S1024", "-t", "0x20", "-f", "ip", "-p", "0x111"},
			Sout:   udaddyServerOut, Cout: udaddyClientOut},
		{Name: "no-data", Server: []string{"-S", "0"}, Client: []string{"-s", b, "-C", "0"},
			Sout: "udaddy: starting server\ntest complete\nreturn status 0\n",
			Cout: "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status 0\n"},
	})
}

// A client refused: no UD listener on the port at the server's CM (its
// SIDR_REP says "service ID not supported", status 1), a server that
// fails the request (-S above its MTU: "rejected", status 2, while the
// server goes on without it, as udaddy's does), no CM at all (silence,
// -ETIMEDOUT); all reported as the kernel's rdma_cm reports them
// (RDMA_CM_EVENT_UNREACHABLE with the status). And a client whose -S
// does not fit the MTU.
func TestUdaddyRefused(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	refused := func(st string) string {
		return "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: " + st +
			"\ntest complete\nreturn status " + st + "\n"
	}
	listened := cmtest.ListenHook(t)

	t.Run("no-listener", func(t *testing.T) {
		// A CM on B, listening on 7174 of the TCP port space only (as
		// an rping server does).
		d := cmtest.OpenCMIn(t, p.B)
		l, err := d.Agent.Listen(netip.AddrPortFrom(netip.Addr{}, 7174), &cm.ListenOptions{PortSpace: mad.PortSpaceTCP})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cmtest.WantRun(t, "client", <-runIn(ctx, p.A, "udaddy", "-s", b), 1, refused("1"), "")
		cmtest.WantRun(t, "client -c 3", <-runIn(ctx, p.A, "udaddy", "-s", b, "-c", "3"), 1, refused("1"), "")
	})

	t.Run("server-mtu", func(t *testing.T) {
		sc, _ := startServer(t, p.B, listened, "udaddy", "-d", p.B.Ifname, "-S", "2000")
		cmtest.WantRun(t, "client", <-runIn(ctx, p.A, "udaddy", "-s", b), 2, refused("2"), "")
		cmtest.WantRun(t, "server", <-sc, 0, "udaddy: starting server\nudaddy: message_size 2000 is larger than active mtu 1024\n"+
			"udaddy: failing connection request\n"+strings.TrimPrefix(udaddyServerOut, "udaddy: starting server\n"), "")
	})

	t.Run("client-mtu", func(t *testing.T) {
		cmtest.WantRun(t, "client", <-runIn(ctx, p.A, "udaddy", "-s", b, "-S", "1025"), 234,
			"udaddy: starting client\nudaddy: connecting\nudaddy: message_size 1025 is larger than active mtu 1024\n"+
				"test complete\nreturn status -22\n", "")
	})

	t.Run("port-spaces", func(t *testing.T) {
		// On RoCE an IPoIB ID has no Q_Key (no IB broadcast group), a
		// TCP or IB one is RC: rdma_create_qp fails; a port space the
		// kernel does not know fails rdma_create_id.
		cmtest.WantRun(t, "ipoib", <-runIn(ctx, p.A, "udaddy", "-s", b, "-P", "ipoib"), 255,
			"udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status -1\n", "udaddy: unable to create QP: No such device\n")
		for _, ps := range []string{"0x106", "0x13f"} {
			cmtest.WantRun(t, ps, <-runIn(ctx, p.A, "udaddy", "-s", b, "-p", ps), 255,
				"udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status -1\n", "udaddy: unable to create QP: Invalid argument\n")
		}
		cmtest.WantRun(t, "bogus client", <-runIn(ctx, p.A, "udaddy", "-s", b, "-p", "7"), 1, "", "")
		cmtest.WantRun(t, "bogus server", <-runIn(ctx, p.B, "udaddy", "-d", p.B.Ifname, "-p", "7"), 255,
			"udaddy: starting server\ntest complete\nreturn status -1\n", "udaddy: listen request failed: Invalid argument\n")
	})

	t.Run("unanswered", func(t *testing.T) {
		cmtest.ShortPeerTimeout(t)
		start := time.Now()
		cmtest.WantRun(t, "client", <-runIn(ctx, p.A, "udaddy", "-s", b), 146, refused("-110"), "")
		cmtest.CheckGaveUp(t, "the client", start)
	})
}

// udaddyPeer is a UD QP at RTS with rdma_cm's Q_Key, a CQ and a buffer of
// slots for receives, made on d.
type udaddyPeer struct {
	cq  *roce.CQ
	qp  *roce.QP
	mr  *roce.MR
	buf []byte
}

const udaddySlot = 2048

func newUdaddyPeer(t *testing.T, d *roce.Device, recvs int) *udaddyPeer {
	t.Helper()
	u := &udaddyPeer{buf: make([]byte, (recvs+1)*udaddySlot)}
	pd, err := d.AllocPD()
	if err == nil {
		u.cq, err = d.CreateCQ(256)
	}
	if err == nil {
		u.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.UD, SendCQ: u.cq, RecvCQ: u.cq, SignalAll: true})
	}
	if err == nil {
		err = u.qp.Connect(context.Background(), roce.Endpoint{}, roce.Endpoint{}, roce.ConnectOptions{QKey: mad.RDMAUDPQKey})
	}
	if err == nil {
		u.mr, err = pd.RegMR(u.buf, roce.AccessLocalWrite)
	}
	for i := 1; err == nil && i <= recvs; i++ {
		err = u.qp.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{u.mr.SGE(i*udaddySlot, udaddySlot)}})
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// wait returns the next completion, failing the test after 10 s.
func (u *udaddyPeer) wait(t *testing.T) roce.WC {
	t.Helper()
	var wc [1]roce.WC
	ok, err := rdmacm.PollOne(context.Background(), u.cq, wc[:], nil, clitest.Slowdown*10*time.Second)
	if err != nil || !ok {
		t.Fatalf("no completion: %v", err)
	}
	return wc[0]
}

// received checks that wc is a receive of n bytes from QP src with the
// immediate imm, and returns its GRH area's IPv4 header.
func (u *udaddyPeer) received(t *testing.T, wc roce.WC, n int, src, imm uint32) []byte {
	t.Helper()
	if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCRecv || wc.Flags&roce.WCWithImm == 0 || int(wc.ByteLen) != n+40 ||
		wc.SrcQP != src || wc.Imm != imm {
		t.Fatalf("receive %+v, want %d bytes from QP %#x with immediate %#x", wc, n, src, imm)
	}
	return u.buf[int(wc.ID)*udaddySlot+20 : int(wc.ID)*udaddySlot+40]
}

// udaddyListen listens on udaddy's port of d's UDP port space.
func udaddyListen(t *testing.T, d *rdmacm.Device) *cm.Listener {
	t.Helper()
	l, err := d.Agent.Listen(netip.AddrPortFrom(netip.Addr{}, udaddyPort), &cm.ListenOptions{PortSpace: mad.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// What goes on the wire: the client sends -C datagrams of -S bytes with
// its QP number in the immediate and -t's TOS; the server answers the QP
// number of the immediate (not the sender's), with its own QP number in
// the immediate, at the address, TTL and TOS the first datagram came
// with.
func TestUdaddyWire(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()

	t.Run("client", func(t *testing.T) {
		d := cmtest.OpenCMIn(t, p.B)
		l := udaddyListen(t, d)
		cc := runIn(ctx, p.A, "udaddy", "-s", p.B.IP.String(), "-C", "3", "-S", "64", "-t", "0x48")
		req, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !req.UD() || req.Remote.Addr() != p.A.IP || req.Local != netip.AddrPortFrom(p.B.IP, udaddyPort) ||
			len(bytes.Trim(req.Param.PrivateData, "\x00")) != 0 {
			t.Errorf("request UD %v from %v to %v, data %q", req.UD(), req.Remote, req.Local, bytes.Trim(req.Param.PrivateData, "\x00"))
		}
		u := newUdaddyPeer(t, d.Dev, 3)
		if err := req.AcceptUD(u.qp, nil); err != nil {
			t.Fatal(err)
		}
		var client uint32
		for i := range 3 {
			wc := u.wait(t)
			if i == 0 {
				client = wc.SrcQP
			}
			// -t 0x48, ECT(0) added as ConnectX does.
			if ip := u.received(t, wc, 64, client, client); ip[1] != 0x4a {
				t.Errorf("datagram %d: TOS %#x, want 0x4a", i, ip[1])
			}
		}
		av := req.AddressVector()
		for range 3 {
			if err := u.qp.PostSend(&roce.SendWR{Opcode: roce.WRSendWithImm, SGL: []roce.SGE{u.mr.SGE(0, 64)}, Imm: u.qp.QPN(),
				AV: &av, RemoteQPN: client, RemoteQKey: mad.RDMAUDPQKey}); err != nil {
				t.Fatal(err)
			}
			if wc := u.wait(t); wc.Status != roce.WCSuccess {
				t.Fatalf("send %+v", wc)
			}
		}
		cmtest.WantRun(t, "client", <-cc, 0, udaddyClientOut, "")
	})

	t.Run("server", func(t *testing.T) {
		sc, _ := startServer(t, p.B, cmtest.ListenHook(t), "udaddy", "-d", p.B.Ifname, "-C", "3", "-S", "64")
		d := cmtest.OpenCMIn(t, p.A)
		target, err := d.Agent.ResolveUD(ctx, netip.AddrPortFrom(p.B.IP, udaddyPort), nil)
		if err != nil {
			t.Fatal(err)
		}
		if target.QKey != mad.RDMAUDPQKey {
			t.Errorf("Q_Key %#x", target.QKey)
		}
		// One QP sends, naming the other in the immediate; the answers
		// go to the other, at the TTL and TOS the first datagram had.
		from, to := newUdaddyPeer(t, d.Dev, 0), newUdaddyPeer(t, d.Dev, 3)
		av := target.AV
		av.HopLimit, av.TrafficClass = 33, 0x48
		for range 3 {
			if err := from.qp.PostSend(&roce.SendWR{Opcode: roce.WRSendWithImm, SGL: []roce.SGE{from.mr.SGE(0, 64)}, Imm: to.qp.QPN(),
				AV: &av, RemoteQPN: target.QPN, RemoteQKey: target.QKey}); err != nil {
				t.Fatal(err)
			}
			if wc := from.wait(t); wc.Status != roce.WCSuccess {
				t.Fatalf("send %+v", wc)
			}
		}
		for i := range 3 {
			ip := to.received(t, to.wait(t), 64, target.QPN, target.QPN)
			// 0x48 with the ECT(0) the first datagram carried.
			if ip[1] != 0x4a || ip[8] != 33 || netip.AddrFrom4([4]byte(ip[16:20])) != p.A.IP {
				t.Errorf("answer %d: TOS %#x, TTL %d, to %v; want 0x4a, 33, %v", i, ip[1], ip[8], netip.AddrFrom4([4]byte(ip[16:20])), p.A.IP)
			}
		}
		cmtest.WantRun(t, "server", <-sc, 0, udaddyServerOut, "")
	})

	t.Run("silent", func(t *testing.T) {
		// A server that answers the SIDR_REQ and then nothing: both
		// clones give up after their bounded wait.
		cmtest.ShortPeerTimeout(t)
		d := cmtest.OpenCMIn(t, p.B)
		l := udaddyListen(t, d)
		u := newUdaddyPeer(t, d.Dev, 0)
		go func() {
			if req, err := l.Accept(ctx); err == nil {
				req.AcceptUD(u.qp, nil)
			}
		}()
		cmtest.WantRun(t, "client", <-runIn(ctx, p.A, "udaddy", "-s", p.B.IP.String()), 146,
			"udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n"+
				"udaddy: nothing from the peer for 1s: giving up (is it still there?)\ntest complete\nreturn status -110\n", "")
	})
}
