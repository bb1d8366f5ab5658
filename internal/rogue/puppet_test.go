package rogue_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/xroce/xroce/conform"
	"github.com/xroce/xroce/internal/rogue"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
)

// TestPuppetConform runs every conform check through a Puppet over
// link.Pipe against a live xroce device, each check on a fresh QP: the
// device passes each, or the check cannot run on it (SKIP), or fails in
// a documented way (KNOWN).
func TestPuppetConform(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: a few seconds")
	}
	macA, macB := net.HardwareAddr{2, 0, 0, 0, 0xa, 1}, net.HardwareAddr{2, 0, 0, 0, 0xa, 2}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	la, lb := link.NewPipe(link.PipeConfig{Seed: 1, Buffers: 4096, MACA: macA, MACB: macB})
	d, err := roce.NewDevice([]link.Link{la}, roce.Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); lb.Close() })
	peer := &rogue.Peer{Link: lb, IP: ipB, QPN: 0x4242, VictimIP: ipA}
	copy(peer.MAC[:], macB)
	copy(peer.VictimMAC[:], macA)
	puppet := rogue.NewPuppet(peer)

	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(1024)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16384)
	mr, err := pd.RegMR(buf, roce.AccessLocalWrite|roce.AccessRemoteWrite|roce.AccessRemoteRead|roce.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	// A region open to remote WRITE only, for resp.access-denied.
	wbuf := make([]byte, 16384)
	wmr, err := pd.RegMR(wbuf, roce.AccessLocalWrite|roce.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conform.Checks() {
		if c.IsRequester() {
			continue // the peer as requester: conform's Server, TestConformServe
		}
		t.Run(c.Name, func(t *testing.T) {
			q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Destroy()
			opts := roce.ConnectOptions{Timeout: -1, MaxDestRdAtomic: 4}
			local, err := q.LocalEndpoint(5000, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Connect(context.Background(), local, roce.Endpoint{QPN: peer.QPN, PSN: 1000, GID: ipB, MTU: roce.MTU1024}, opts); err != nil {
				t.Fatal(err)
			}
			peer.VictimQPN = q.QPN()
			tgt := conform.Target{QPN: q.QPN(), PSN: 1000, MTU: 1024, VA: mr.Addr(), RKey: mr.RKey(), Len: uint32(len(buf)),
				Allows: conform.OpWrite | conform.OpRead | conform.OpAtomic, MinRNRTimer: 12, MaxDestRdAtomic: 4}
			if c.Name == "resp.access-denied" {
				tgt.VA, tgt.RKey, tgt.Allows, tgt.Denies = wmr.Addr(), wmr.RKey(), conform.OpWrite, conform.OpRead|conform.OpAtomic
			}
			r := conform.Run(puppet, c, &tgt, peer, peer.QPN)
			t.Logf("%v %s (%d frames)", r.Verdict, r.Observed, len(r.Frames))
			if r.Verdict == conform.Fail {
				t.Errorf("%s: FAIL: %s", c.Name, r.Observed)
			}
		})
	}
}
