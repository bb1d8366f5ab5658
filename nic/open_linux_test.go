package nic

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/roce"
)

// open opens a device on host h's end of its veth pair.
func open(t *testing.T, h *netns.Host, cfg Config) *Device {
	t.Helper()
	var d *Device
	if err := h.Do(func() (err error) {
		d, err = Open(h.Ifname, cfg)
		return err
	}); err != nil {
		t.Fatalf("open %s: %v", h.Ifname, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

// By default Open serves every queue of the interface over AF_XDP with the
// XDP program it loaded, and takes the GIDs from the interface's addresses.
func TestOpenXDP(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	d := open(t, p.A, Config{})
	info := d.Info()
	t.Logf("%+v, attached %q", info, d.Attach())
	if info.Datapath != DatapathXDP || info.Queues != 2 || info.ActiveMTU != roce.MTU1024 || info.Mode == "" || info.Name != p.A.Ifname {
		t.Fatalf("info %+v: want af_xdp on 2 queues of %s with MTU 1024", info, p.A.Ifname)
	}
	if d.Fallback() != nil || d.Attach() == "" {
		t.Fatalf("Fallback() = %v, Attach() = %q: want nil and an attach mode", d.Fallback(), d.Attach())
	}
	if prog := d.XDPProgram(); prog == nil || prog.Loss() != 0 {
		t.Fatalf("XDPProgram() = %v, want the program Open loaded, without loss", prog)
	}
	gids := d.GIDs()
	if len(gids) < 2 || !gids[0].IsLinkLocalUnicast() || gids[1].String() != "::ffff:"+p.A.IP.String() {
		t.Fatalf("GIDs %v: want fe80::… then ::ffff:%v", gids, p.A.IP)
	}
}

// When AF_XDP cannot be opened, Open with DatapathAuto falls back to
// AF_PACKET and Fallback says why; asked for AF_XDP, it fails.
func TestOpenFallback(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500})
	cfg := Config{}
	cfg.XDP.FrameSize = 1000 // refused by xdp.Open
	d := open(t, p.A, cfg)
	if i := d.Info(); i.Datapath != DatapathAFPacket || i.Queues != 1 || d.Fallback() == nil || d.XDPProgram() != nil {
		t.Fatalf("info %+v, fallback %v: want af_packet with the reason", i, d.Fallback())
	}
	t.Logf("fallback: %v", d.Fallback())
	cfg.Datapath = DatapathXDP
	err := p.A.Do(func() error {
		d, err := Open(p.A.Ifname, cfg)
		if err == nil {
			d.Close()
		}
		return err
	})
	if err == nil {
		t.Fatal("Open with DatapathXDP did not fail")
	}
}

// Asked for AF_PACKET, Open does not try AF_XDP: no fallback to report.
func TestOpenAFPacket(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	d := open(t, p.A, Config{Datapath: DatapathAFPacket})
	if i := d.Info(); i.Datapath != DatapathAFPacket || i.Queues != 1 || d.Fallback() != nil || d.Attach() != "" {
		t.Fatalf("info %+v, fallback %v, attach %q: want af_packet, no fallback", i, d.Fallback(), d.Attach())
	}
}

// Bad configurations fail before anything is opened.
func TestOpenInvalid(t *testing.T) {
	for _, cfg := range []Config{{Datapath: "dpdk"}, {Queues: -1}, {Queues: 65}} {
		if _, err := Open("lo", cfg); !errors.Is(err, roce.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
}

// Close lets go of everything: a device opens again on the same queues.
func TestOpenCloseReopen(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	for range 2 {
		err := p.A.Do(func() error {
			d, err := Open(p.A.Ifname, Config{Datapath: DatapathXDP})
			if err != nil {
				return err
			}
			return d.Close()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The device resolves peers through the kernel's neighbour table,
// triggering ARP, and says when one is unreachable.
func TestResolveKernel(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500})
	da := open(t, p.A, Config{})
	av, err := da.Resolve(context.Background(), p.B.IP)
	if err != nil {
		t.Fatal(err)
	}
	if string(av.DstMAC[:]) != string(p.B.MAC) || av.SrcIP != p.A.IP || av.DstIP != p.B.IP {
		t.Fatalf("av %+v: want %v from %v", av, p.B.MAC, p.A.IP)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = da.Resolve(ctx, p.B.IP.Next()) // on the link, nobody there
	if !errors.Is(err, roce.ErrUnreachable) {
		t.Fatalf("resolve an absent host: %v, want ErrUnreachable", err)
	}
	_, err = da.Resolve(ctx, netip.MustParseAddr("198.19.255.1")) // no route
	if !errors.Is(err, roce.ErrUnreachable) {
		t.Fatalf("resolve without a route: %v, want ErrUnreachable", err)
	}
}

// A link-local IPv6 peer is on the link: no route is looked up, and the
// source is the device's link-local GID.
func TestResolveKernelLinkLocal(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, IPv6: true})
	da := open(t, p.A, Config{})
	av, err := da.Resolve(context.Background(), p.B.IP6)
	if err != nil {
		t.Fatal(err)
	}
	if string(av.DstMAC[:]) != string(p.B.MAC) || av.SrcIP != da.GIDs()[0] {
		t.Fatalf("av %+v: want %v from %v", av, p.B.MAC, da.GIDs()[0])
	}
}

// Two devices Open made exchange an RDMA WRITE, connected through the
// kernel's address resolution.
func TestOpenWrite(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	da, db := open(t, p.A, Config{}), open(t, p.B, Config{})
	type end struct {
		qp  *roce.QP
		cq  *roce.CQ
		mr  *roce.MR
		buf []byte
	}
	setup := func(d *Device) end {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<16)
		mr, err := pd.RegMR(buf, roce.AccessLocalWrite|roce.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		return end{q, cq, mr, buf}
	}
	a, b := setup(da), setup(db)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ea, _ := a.qp.LocalEndpoint(1, roce.ConnectOptions{})
	eb, _ := b.qp.LocalEndpoint(1, roce.ConnectOptions{})
	if err := a.qp.Connect(ctx, ea, eb, roce.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(ctx, eb, ea, roce.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range a.buf {
		a.buf[i] = byte(i * 7)
	}
	if err := a.qp.PostSend(&roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
		SGL: []roce.SGE{a.mr.SGE(0, len(a.buf))}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if err := a.cq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var wc [1]roce.WC
	if n := a.cq.Poll(wc[:]); n != 1 || wc[0].Status != roce.WCSuccess {
		t.Fatalf("%d completions: %+v", n, wc[0])
	}
	b.mr.Sync()
	if string(a.buf) != string(b.buf) {
		t.Fatal("the written buffer differs")
	}
}
