package roce

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/internal/netns"
)

// vethDevices opens a device on each end of a veth pair between two new
// network namespaces, with AF_XDP on 2 queues. With steer, each end gets
// its own XDP program (for loss injection), returned in progs.
func vethDevices(t testing.TB, cfg Config, steer bool) (da, db *Device, progs [2]*bpf.Program) {
	t.Helper()
	da, db, progs, _ = vethPair(t, cfg, steer)
	return da, db, progs
}

func vethPair(t testing.TB, cfg Config, steer bool) (da, db *Device, progs [2]*bpf.Program, p *netns.Pair) {
	t.Helper()
	p = netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	for i, h := range []*netns.Host{p.A, p.B} {
		c := cfg
		if c.Datapath == DatapathAuto {
			c.Datapath = DatapathXDP
		}
		var d *Device
		err := h.Do(func() error {
			if steer && c.Datapath == DatapathXDP {
				prog, err := bpf.Load(bpf.Options{})
				if err != nil {
					return err
				}
				if _, err := prog.Attach(h.Index); err != nil {
					prog.Close()
					return err
				}
				progs[i] = prog
				t.Cleanup(func() { prog.Close() })
				c.XDP.Steering = prog
			}
			var err error
			d, err = Open(h.Ifname, c)
			return err
		})
		if err != nil {
			t.Fatalf("open %s: %v", h.Ifname, err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		if i == 0 {
			da = d
		} else {
			db = d
		}
	}
	return da, db, progs, p
}

func TestVethInfo(t *testing.T) {
	da, _, _ := vethDevices(t, Config{}, false)
	info := da.Info()
	t.Logf("%+v", info)
	if info.Datapath != DatapathXDP || info.Queues != 2 || info.ActiveMTU != MTU1024 || info.Mode == "" {
		t.Fatalf("info %+v: want af_xdp on 2 queues with MTU 1024", info)
	}
	if prog := da.XDPProgram(); prog == nil || prog.Loss() != 0 {
		t.Fatalf("XDPProgram() = %v, want the program Open loaded, without loss", prog)
	}
	gids := da.GIDs()
	if len(gids) < 2 || !gids[0].IsLinkLocalUnicast() || gids[1].String() != "::ffff:198.18.0.1" {
		t.Fatalf("GIDs %v: want fe80::… then ::ffff:198.18.0.1", gids)
	}
}

func TestVethOps(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	a, b := rcPair(t, da, db, 4<<20)
	testOps(t, a, b, []int{0, 1, 1024, 1025, 4096, 100000, 1 << 20, 4 << 20})
}

func TestVethManyQPs(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	newSide(t, db, RC, 0, nil, nil) // peers on the other worker: frames are forwarded
	manyQPs(t, da, db, 64, 64<<10)
	t.Logf("a: %+v", da.Stats().Forwarded)
}

func TestVethSRQ(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	testSRQ(t, da, db)
}

func TestVethUD(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	testUD(t, da, db)
}

func TestVethBusyPoll(t *testing.T) {
	da, db, _ := vethDevices(t, Config{BusyPoll: true, Queues: 1}, false)
	a, b := rcPair(t, da, db, 64<<10)
	testOps(t, a, b, []int{64, 64 << 10})
}

// Loss injected by the XDP programs on both ends: everything byte-exact.
func TestVethLoss(t *testing.T) {
	for _, loss := range []float64{0.01, 0.1} {
		t.Run(fmt.Sprint(loss), func(t *testing.T) {
			da, db, progs := vethDevices(t, Config{}, true)
			a, b := newSide(t, da, RC, 1<<20, nil, nil), newSide(t, db, RC, 1<<20, nil, nil)
			connect(t, a, b, ConnectOptions{Timeout: 10}) // 4 ms ACK timeout
			for _, p := range progs {
				if err := p.SetLoss(loss); err != nil {
					t.Fatal(err)
				}
			}
			testOps(t, a, b, []int{0, 3000, 1 << 20})
			c, _ := progs[1].Counters()
			s := da.Stats()
			t.Logf("loss %v: b dropped %d of %d; a: %d retransmits, %d timeouts", loss, c.InjectedDrops, c.Redirected+c.InjectedDrops, s.Retransmits, s.Timeouts)
			if c.InjectedDrops == 0 {
				t.Errorf("no frame dropped")
			}
		})
	}
}

// A big transfer of 4 MiB writes, checked with SHA-256: 64 MiB (16 MiB
// with -short); 1 GiB with XROCE_1GIB=1 (about 15 s here).
// TestVethLossOwnProgram injects loss with SetLoss on the program Open
// loaded (Device.XDPProgram): transfers still complete, by retransmission.
func TestVethLossOwnProgram(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	pa, pb := da.XDPProgram(), db.XDPProgram()
	if pa == nil || pb == nil {
		t.Fatal("XDPProgram() = nil")
	}
	for _, p := range []*bpf.Program{pa, pb} {
		if err := p.SetLoss(0.02); err != nil {
			t.Fatal(err)
		}
	}
	a, b := rcPair(t, da, db, 1<<20)
	testOps(t, a, b, []int{1, 4096, 1 << 20})
	ca, _ := pa.Counters()
	cb, _ := pb.Counters()
	if ca.InjectedDrops+cb.InjectedDrops == 0 || da.Stats().Retransmits+db.Stats().Retransmits == 0 {
		t.Errorf("drops %d+%d, retransmits %d+%d: want some", ca.InjectedDrops, cb.InjectedDrops, da.Stats().Retransmits, db.Stats().Retransmits)
	}
}

// A post on an idle device sends at once from the caller's goroutine and
// arms the ACK timer; the sleeping worker must still wake for it: with
// every frame lost the request fails with RETRY_EXC_ERR in its budget.
func TestVethDirectPostTimer(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	a, b := newSide(t, da, RC, 4096, nil, nil), newSide(t, db, RC, 4096, nil, nil)
	connect(t, a, b, ConnectOptions{Timeout: 12, RetryCnt: 2}) // 16.8 ms × 3
	time.Sleep(50 * time.Millisecond)                          // the workers go to sleep
	if err := db.XDPProgram().SetLoss(1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.qp.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	want(t, a.cq, WCRDMAWrite, WCRetryExcErr)
	if el := time.Since(start); el > 2*time.Second || el < 3*16*time.Millisecond {
		t.Fatalf("RETRY_EXC_ERR after %v, want about 50 ms", el)
	}
	if s := a.qp.Stats(); s.Timeouts != 3 || s.TxFrames != 3 {
		t.Errorf("QP counters %+v: want 3 timeouts and 3 frames", s.PacketStats)
	}
}

func TestVethBig(t *testing.T) {
	size, total := 4<<20, 64<<20
	switch {
	case os.Getenv("XROCE_1GIB") == "1":
		total = 1 << 30
	case testing.Short():
		total = 16 << 20
	}
	da, db, _ := vethDevices(t, Config{}, false)
	a, b := rcPair(t, da, db, size)
	ha, hb := sha256.New(), sha256.New()
	start := time.Now()
	for off := 0; off < total; off += size {
		fill(a.buf, uint64(off))
		ha.Write(a.buf)
		if err := a.qp.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, size)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		want(t, a.cq, WCRDMAWrite, WCSuccess)
		b.mr.Sync()
		hb.Write(b.buf)
		b.mr.Sync() // before the device writes it again
	}
	el := time.Since(start)
	if string(ha.Sum(nil)) != string(hb.Sum(nil)) {
		t.Fatal("checksums differ")
	}
	t.Logf("%d MiB in %v: %.2f Gbit/s", total>>20, el, float64(total)*8/el.Seconds()/1e9)
}

// The peer's namespace vanishes mid-transfer: RETRY_EXC_ERR.
func TestVethPeerVanishes(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	a, b := newSide(t, da, RC, 1<<20, nil, nil), newSide(t, db, RC, 1<<20, nil, nil)
	connect(t, a, b, ConnectOptions{Timeout: 12, RetryCnt: 3})
	for i := range 8 {
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	want(t, a.cq, WCRDMAWrite, WCSuccess)
	db.Close()
	// The rest may have completed already: one more request after the
	// close is sure to be in flight.
	if err := a.qp.PostSend(&SendWR{ID: 8, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		wc := wait(t, a.cq, 5*time.Second)
		if wc.Status == WCSuccess {
			continue
		}
		if wc.Status != WCRetryExcErr {
			t.Fatalf("completion %v, want RETRY_EXC_ERR", wc.Status)
		}
		break
	}
	t.Logf("RETRY_EXC_ERR %v after the peer closed", time.Since(start))
	if time.Since(start) > 2*time.Second {
		t.Fatal("too late")
	}
}

// Resolve: the kernel's neighbour table, and an unreachable peer.
func TestVethResolve(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	av, err := da.Resolve(context.Background(), ipOf(db))
	if err != nil {
		t.Fatal(err)
	}
	if string(av.DstMAC[:]) != string(db.Info().MAC) || av.SrcIP != ipOf(da) {
		t.Fatalf("av %+v", av)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = da.Resolve(ctx, ipOf(db).Next()) // 198.18.0.3: on the link, nobody there
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("resolve an absent host: %v, want ErrUnreachable", err)
	}
	_, err = da.Resolve(ctx, netipMust("198.19.255.1")) // no route
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("resolve without a route: %v, want ErrUnreachable", err)
	}
}

// The AF_PACKET datapath, asked for explicitly.
func TestVethAFPacket(t *testing.T) {
	da, db, _ := vethDevices(t, Config{Datapath: DatapathAFPacket}, false)
	if i := da.Info(); i.Datapath != DatapathAFPacket || i.Queues != 1 {
		t.Fatalf("info %+v: want af_packet, 1 queue", i)
	}
	a, b := rcPair(t, da, db, 1<<20)
	testOps(t, a, b, []int{0, 5000, 1 << 20})
}

// Connection setup over TCP between the namespaces, with the rkey and
// address of the server's buffer, then an RDMA WRITE into it.
func TestVethConnectTCP(t *testing.T) {
	da, db, _, p := vethPair(t, Config{}, false)
	a, b := newSide(t, da, RC, 1<<16, nil, nil), newSide(t, db, RC, 1<<16, nil, nil)
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp4", p.B.IP.String()+":18515")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		le, _ := b.qp.LocalEndpoint(7, ConnectOptions{})
		le.RKey, le.Addr = b.mr.RKey(), b.mr.Addr()
		_, err = b.qp.ConnectTCP(ctx, c, false, le, XroceCodec, ConnectOptions{})
		errc <- err
	}()
	var c net.Conn
	if err := p.A.Do(func() (err error) {
		c, err = net.Dial("tcp4", p.B.IP.String()+":18515")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	le, _ := a.qp.LocalEndpoint(9, ConnectOptions{})
	remote, err := a.qp.ConnectTCP(ctx, c, true, le, XroceCodec, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	fill(a.buf, 1)
	if err := a.qp.PostSend(&SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, len(a.buf))},
		RemoteAddr: remote.Addr, RKey: remote.RKey}); err != nil {
		t.Fatal(err)
	}
	want(t, a.cq, WCRDMAWrite, WCSuccess)
	b.mr.Sync()
	same(t, "write", b.buf, a.buf)
}

// Blocking mode only: busy polling needs a core per worker, and these
// benchmarks run both devices on one machine (2 cores here).
func BenchmarkVethWrite(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			da, db, _ := vethDevices(b, Config{Queues: 1}, false)
			a, r := rcPair(b, da, db, size)
			benchWrite(b, a, r, size, 16)
		})
	}
}

// BenchmarkVethPingPong/wait waits with CQ.Wait (the waiter watches the
// socket and receives itself), /arm sleeps on the CQ's armed notification
// (the worker goroutine receives and wakes it), /spin spins on Poll and
// Progress (as ibv_rc_pingpong does).
func BenchmarkVethPingPong(b *testing.B) {
	for _, how := range []string{waitWait, waitArm, waitSpin} {
		b.Run(how, func(b *testing.B) {
			da, db, _ := vethDevices(b, Config{Queues: 1}, false)
			a, r := rcPair(b, da, db, 64)
			benchPingPong(b, a, r, 64, how)
		})
	}
}

// Close with writes in flight over AF_XDP: every request is flushed and
// the device lets go of everything (a new device opens on the same queues).
func TestVethCloseInFlight(t *testing.T) {
	da, db, _, p := vethPair(t, Config{}, false)
	a, b := rcPair(t, da, db, 1<<20)
	for i := range 32 {
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Millisecond)
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	var wcs [64]WC
	n := a.cq.Poll(wcs[:])
	flushed := 0
	for _, wc := range wcs[:n] {
		if wc.Status == WCWRFlushErr {
			flushed++
		} else if wc.Status != WCSuccess {
			t.Fatalf("completion %v", wc.Status)
		}
	}
	if n != 32 || flushed == 0 {
		t.Fatalf("%d completions, %d flushed; want 32, some flushed", n, flushed)
	}
	if s := da.Stats(); s.MRs != 0 || s.PinnedPages != 0 {
		t.Fatalf("after Close: %d MRs, %d pinned pages", s.MRs, s.PinnedPages)
	}
	err := p.A.Do(func() error {
		d, err := Open(p.A.Ifname, Config{Datapath: DatapathXDP})
		if err != nil {
			return err
		}
		return d.Close()
	})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
}

// A region over mmap'd memory, written by the peer.
func TestVethMmapMR(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, false)
	a, b := rcPair(t, da, db, 1<<16)
	mem, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	mr, err := b.pd.RegMR(mem, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	fill(a.buf, 3)
	if err := a.qp.PostSend(&SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<16)},
		RemoteAddr: mr.Addr() + 4096, RKey: mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	want(t, a.cq, WCRDMAWrite, WCSuccess)
	mr.Sync()
	same(t, "mmap region", mem[4096:4096+1<<16], a.buf)
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// RoCE over IPv6: the link-local GIDs (index 0) on both sides.
func TestVethIPv6(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, IPv6: true})
	var devs [2]*Device
	for i, h := range []*netns.Host{p.A, p.B} {
		if err := h.Do(func() (err error) {
			devs[i], err = Open(h.Ifname, Config{Datapath: DatapathXDP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	if g := devs[1].GIDs()[0]; g != p.B.IP6.WithZone("") {
		t.Fatalf("GID 0 %v, want %v", g, p.B.IP6)
	}
	a, b := newSide(t, devs[0], RC, 1<<16, nil, nil), newSide(t, devs[1], RC, 1<<16, nil, nil)
	opts := ConnectOptions{}
	ea, _ := a.qp.LocalEndpoint(1, opts)
	eb, _ := b.qp.LocalEndpoint(2, opts)
	ea.GID, eb.GID = devs[0].GIDs()[0], devs[1].GIDs()[0] // GID 0: the link-local one
	ctx := context.Background()
	if err := a.qp.Connect(ctx, ea, eb, opts); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(ctx, eb, ea, opts); err != nil {
		t.Fatal(err)
	}
	testOps(t, a, b, []int{0, 3000, 1 << 16})
}

// When AF_XDP cannot be opened, Open falls back to AF_PACKET and says why.
func TestVethFallback(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500})
	var d *Device
	err := p.A.Do(func() (err error) {
		cfg := Config{}
		cfg.XDP.FrameSize = 1000 // refused by xdp.Open
		d, err = Open(p.A.Ifname, cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if i := d.Info(); i.Datapath != DatapathAFPacket || i.Fallback == "" {
		t.Fatalf("info %+v: want af_packet with the reason", i)
	}
	t.Logf("fallback: %s", d.Info().Fallback)
	err = p.A.Do(func() error {
		cfg := Config{Datapath: DatapathXDP}
		cfg.XDP.FrameSize = 1000
		_, err := Open(p.A.Ifname, cfg)
		return err
	})
	if err == nil {
		t.Fatal("Open with DatapathXDP did not fail")
	}
}

// TestVethThousandQPs: 1024 QPs share a veth pair (issue 20: 256 used to
// complete nothing in 30 s).
func TestVethThousandQPs(t *testing.T) {
	nqp := 1024
	if testing.Short() {
		nqp = 256
	}
	da, db, _ := vethDevices(t, Config{}, false)
	shareLink(t, da, db, nqp, 8, 16<<10, ConnectOptions{}) // 128 packets a QP: a full window each
}
