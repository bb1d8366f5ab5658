package roce

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/xdp"
)

// vethOpts says how vethPair opens the devices.
type vethOpts struct {
	queues   int  // AF_XDP queues, one worker each; 0: all of them (2)
	afpacket bool // one AF_PACKET socket instead of AF_XDP
	steer    bool // each end gets its own XDP program (for loss injection), returned in progs
}

// vethDevices opens a device on each end of a veth pair with 2 queues
// between two new network namespaces, as o says: AF_XDP on all the queues
// by default.
func vethDevices(t testing.TB, cfg Config, o vethOpts) (da, db *Device, progs [2]*bpf.Program) {
	t.Helper()
	da, db, progs, _ = vethPair(t, cfg, o)
	return da, db, progs
}

func vethPair(t testing.TB, cfg Config, o vethOpts) (da, db *Device, progs [2]*bpf.Program, p *netns.Pair) {
	t.Helper()
	p = netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	for i, h := range []*netns.Host{p.A, p.B} {
		var d *Device
		err := h.Do(func() error {
			var steer xdp.Steering
			if o.steer && !o.afpacket {
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
				steer = prog
			}
			var err error
			d, err = openVeth(h, cfg, o, steer)
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

// openVeth opens a device on host h's end of its veth pair, as o says,
// with h's addresses and its peer as a static neighbour (resolving through
// the kernel is package nic's and tested there). It must run in h's
// namespace.
func openVeth(h *netns.Host, cfg Config, o vethOpts, steer xdp.Steering) (*Device, error) {
	cfg.Addrs = []netip.Addr{h.IP}
	cfg.Neighbors = map[netip.Addr]net.HardwareAddr{h.Peer.IP: h.Peer.MAC}
	if h.IP6.IsValid() {
		cfg.Addrs = append(cfg.Addrs, h.IP6.WithZone(""))
		cfg.Neighbors[h.Peer.IP6.WithZone("")] = h.Peer.MAC
	}
	if o.afpacket {
		l, err := afpacket.Open(h.Ifname, afpacket.Config{})
		if err != nil {
			return nil, err
		}
		return NewDevice([]link.Link{l}, cfg)
	}
	return openXDP(h.Ifname, cfg, o.queues, steer)
}

// openXDP opens a device on AF_XDP sockets on queues 0 to queues-1 of
// ifname (all its receive queues when queues is 0), with package bpf's XDP
// program unless steer is given.
func openXDP(ifname string, cfg Config, queues int, steer xdp.Steering) (*Device, error) {
	if queues == 0 {
		n, err := xdp.RxQueues(ifname)
		if err != nil {
			return nil, err
		}
		queues = n
	}
	xc := xdp.Config{Steering: steer}
	for q := range queues {
		xc.Queues = append(xc.Queues, q)
	}
	xd, err := xdp.Open(ifname, xc)
	if err != nil {
		return nil, err
	}
	cfg.Closer = xd
	return NewDevice(xd.Links(), cfg)
}

// xdpProgram is the XDP program openXDP loaded for d.
func xdpProgram(t testing.TB, d *Device) *bpf.Program {
	t.Helper()
	xd, ok := d.closer.(*xdp.Device)
	if !ok || xd.Program() == nil {
		t.Fatalf("device on %s has no XDP program of its own", d.Info().Name)
	}
	return xd.Program()
}

func TestVethInfo(t *testing.T) {
	da, _, _ := vethDevices(t, Config{}, vethOpts{})
	info := da.Info()
	t.Logf("%+v", info)
	if info.Datapath != "af_xdp" || info.Queues != 2 || info.ActiveMTU != MTU1024 || info.Mode == "" {
		t.Fatalf("info %+v: want af_xdp on 2 queues with MTU 1024", info)
	}
	gids := da.GIDs()
	if len(gids) < 2 || !gids[0].IsLinkLocalUnicast() || gids[1].String() != "::ffff:198.18.0.1" {
		t.Fatalf("GIDs %v: want fe80::… then ::ffff:198.18.0.1", gids)
	}
}

func TestVethOps(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	a, b := rcPair(t, da, db, 4<<20)
	testOps(t, a, b, []int{0, 1, 1024, 1025, 4096, 100000, 1 << 20, 4 << 20})
}

func TestVethManyQPs(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	newSide(t, db, RC, 0, nil, nil) // peers on the other worker: frames are forwarded
	manyQPs(t, da, db, 64, 64<<10)
	t.Logf("a: %+v", da.Stats().Forwarded)
}

func TestVethSRQ(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	testSRQ(t, da, db)
}

func TestVethUD(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	testUD(t, da, db)
}

func TestVethBusyPoll(t *testing.T) {
	da, db, _ := vethDevices(t, Config{BusyPoll: true}, vethOpts{queues: 1})
	a, b := rcPair(t, da, db, 64<<10)
	testOps(t, a, b, []int{64, 64 << 10})
}

// Loss injected by the XDP programs on both ends: everything byte-exact.
func TestVethLoss(t *testing.T) {
	for _, loss := range []float64{0.01, 0.1} {
		t.Run(fmt.Sprint(loss), func(t *testing.T) {
			da, db, progs := vethDevices(t, Config{}, vethOpts{steer: true})
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

// TestVethLossOwnProgram injects loss with SetLoss on the program
// xdp.Open loaded: transfers still complete, by retransmission.
func TestVethLossOwnProgram(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	pa, pb := xdpProgram(t, da), xdpProgram(t, db)
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
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	a, b := newSide(t, da, RC, 4096, nil, nil), newSide(t, db, RC, 4096, nil, nil)
	connect(t, a, b, ConnectOptions{Timeout: 12, RetryCnt: 2}) // 16.8 ms × 3
	time.Sleep(50 * time.Millisecond)                          // the workers go to sleep
	if err := xdpProgram(t, db).SetLoss(1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.qp.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	// A worker that slept through the timer would leave want waiting
	// (20 s, a hang). On real time only the lower bound is sure: the
	// first try and two retries each waited out 4.096 µs × 2^12;
	// TestPipePeerVanishes checks the exact time on fake time.
	want(t, a.cq, WCRDMAWrite, WCRetryExcErr)
	if el, least := time.Since(start), 3*(4096*time.Nanosecond<<12); el < least {
		t.Fatalf("RETRY_EXC_ERR after %v, before the %v of three timeouts", el, least)
	}
	if s := a.qp.Stats(); s.Timeouts != 3 || s.TxFrames != 3 {
		t.Errorf("QP counters %+v: want 3 timeouts and 3 frames", s.PacketStats)
	}
}

// A big transfer of 4 MiB writes, checked with SHA-256: 64 MiB (16 MiB
// with -short); 1 GiB with XROCE_1GIB=1.
func TestVethBig(t *testing.T) {
	size, total := 4<<20, 64<<20
	switch {
	case os.Getenv("XROCE_1GIB") == "1":
		total = 1 << 30
	case testing.Short():
		total = 16 << 20
	}
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
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
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	a, b := newSide(t, da, RC, 1<<20, nil, nil), newSide(t, db, RC, 1<<20, nil, nil)
	// A retry budget of 7 × 268 ms: the first WRITE must succeed on a
	// starved machine too (with 4 × 16.8 ms, a peer that got no CPU for
	// 67 ms ended it in RETRY_EXC_ERR before the close), and the budget
	// is still spent soon after the peer has gone.
	connect(t, a, b, ConnectOptions{Timeout: 16, RetryCnt: 6})
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
	// A requester that stopped retrying would leave wait to give up (a
	// hang, not a slow machine).
	start := time.Now()
	for {
		wc := wait(t, a.cq, eventually)
		if wc.Status == WCSuccess {
			continue
		}
		if wc.Status != WCRetryExcErr {
			t.Fatalf("completion %v, want RETRY_EXC_ERR", wc.Status)
		}
		break
	}
	t.Logf("RETRY_EXC_ERR %v after the peer closed", time.Since(start))
	if st := a.qp.State(); st != StateErr {
		t.Errorf("QP in %v after RETRY_EXC_ERR, want ERR", st)
	}
}

// The AF_PACKET datapath, asked for explicitly.
func TestVethAFPacket(t *testing.T) {
	da, db, _ := vethDevices(t, Config{}, vethOpts{afpacket: true})
	if i := da.Info(); i.Datapath != "af_packet" || i.Queues != 1 {
		t.Fatalf("info %+v: want af_packet, 1 queue", i)
	}
	a, b := rcPair(t, da, db, 1<<20)
	testOps(t, a, b, []int{0, 5000, 1 << 20})
}

// Connection setup over TCP between the namespaces, with the rkey and
// address of the server's buffer, then an RDMA WRITE into it.
func TestVethConnectTCP(t *testing.T) {
	da, db, _, p := vethPair(t, Config{}, vethOpts{})
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
			da, db, _ := vethDevices(b, Config{}, vethOpts{queues: 1})
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
			da, db, _ := vethDevices(b, Config{}, vethOpts{queues: 1})
			a, r := rcPair(b, da, db, 64)
			benchPingPong(b, a, r, 64, how)
		})
	}
}

// Close with writes in flight over AF_XDP: every request is flushed and
// the device lets go of everything (a new device opens on the same queues).
func TestVethCloseInFlight(t *testing.T) {
	da, db, _, p := vethPair(t, Config{}, vethOpts{})
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
		d, err := openVeth(p.A, Config{}, vethOpts{}, nil)
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
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
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
			devs[i], err = openVeth(h, Config{}, vethOpts{}, nil)
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

// TestVethThousandQPs: 1024 QPs share a veth pair (issue 20: 256 used to
// complete nothing in 30 s).
func TestVethThousandQPs(t *testing.T) {
	nqp := 1024
	if testing.Short() {
		nqp = 256
	}
	da, db, _ := vethDevices(t, Config{}, vethOpts{})
	shareLink(t, da, db, nqp, 8, 16<<10, ConnectOptions{}) // 128 packets a QP: a full window each
}
