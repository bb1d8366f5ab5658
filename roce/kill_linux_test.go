package roce

import (
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
)

// TestHelperPeerProcess is the peer of TestVethPeerKilled, run as a
// separate process in the other namespace (the environment names its
// interface, its address and its peer's); it does nothing in a normal run.
func TestHelperPeerProcess(t *testing.T) {
	dev := os.Getenv("XROCE_PEER_DEV")
	if dev == "" {
		return // not the helper process
	}
	mac, err := net.ParseMAC(os.Getenv("XROCE_PEER_MAC"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Addrs:     []netip.Addr{netip.MustParseAddr(os.Getenv("XROCE_PEER_ADDR"))},
		Neighbors: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr(os.Getenv("XROCE_PEER_IP")): mac},
	}
	d, err := openXDP(dev, cfg, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := newSide(t, d, RC, 16<<20, nil, nil)
	ln, err := net.Listen("tcp", ":18516")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	le, _ := b.qp.LocalEndpoint(5, ConnectOptions{})
	le.RKey, le.Addr = b.mr.RKey(), b.mr.Addr()
	if _, err := b.qp.ConnectTCP(ctx, c, false, le, XroceCodec, ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Second) // until killed
}

// A peer process killed with SIGKILL mid-transfer: its XDP program goes
// with it, and the requester ends in RETRY_EXC_ERR when its retry budget
// is spent.
func TestVethPeerKilled(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	cmd := p.B.Command(os.Args[0], "-test.run=^TestHelperPeerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XROCE_PEER_DEV="+p.B.Ifname, "XROCE_PEER_ADDR="+p.B.IP.String(),
		"XROCE_PEER_IP="+p.A.IP.String(), "XROCE_PEER_MAC="+p.A.MAC.String())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	var da *Device
	if err := p.A.Do(func() (err error) {
		da, err = openVeth(p.A, Config{}, vethOpts{}, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	a := newSide(t, da, RC, 1<<20, nil, nil)
	var c net.Conn
	deadline := time.Now().Add(eventually)
	for {
		err := p.A.Do(func() (err error) {
			c, err = net.DialTimeout("tcp", p.B.IP.String()+":18516", time.Second)
			return err
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer process not listening: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	le, _ := a.qp.LocalEndpoint(9, ConnectOptions{})
	opts := ConnectOptions{Timeout: 12, RetryCnt: 3} // 16.8 ms × 4
	remote, err := a.qp.ConnectTCP(ctx, c, true, le, XroceCodec, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Stream 1 MiB WRITEs; kill the peer after the first few complete.
	posted, completed := 0, 0
	post := func() {
		off := uint64(posted%16) << 20
		if err := a.qp.PostSend(&SendWR{ID: uint64(posted), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
			RemoteAddr: remote.Addr + off, RKey: remote.RKey}); err != nil {
			t.Fatal(err)
		}
		posted++
	}
	for range 8 {
		post()
	}
	var killedAt time.Time
	for {
		wc := wait(t, a.cq, eventually) // a requester that stopped retrying: a hang
		if wc.Status == WCSuccess {
			completed++
			if completed == 4 && killedAt.IsZero() {
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				killedAt = time.Now()
			}
			if killedAt.IsZero() || posted < 64 {
				post()
			}
			continue
		}
		if wc.Status != WCRetryExcErr {
			t.Fatalf("completion %v after %d successes, want RETRY_EXC_ERR", wc.Status, completed)
		}
		break
	}
	t.Logf("%d writes completed, RETRY_EXC_ERR %v after SIGKILL", completed, time.Since(killedAt))
	// The budget was spent: the first try and RetryCnt retries timed
	// out (how long that took on real time depends on the load).
	if s := a.qp.Stats(); s.Timeouts < 4 {
		t.Errorf("RETRY_EXC_ERR after %d timeouts, want at least the first try and 3 retries", s.Timeouts)
	}
	if st := a.qp.State(); st != StateErr {
		t.Fatalf("QP in %v, want ERR", st)
	}
}
