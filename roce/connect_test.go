package roce

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/xroce/xroce/link"
)

// TestConnectOptions: the requester's and responder's read/atomic depths
// are set apart (the responder's following the requester's when not
// given), and the hop limit and traffic class reach the address vector.
func TestConnectOptions(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	for _, c := range []struct {
		name              string
		opts              ConnectOptions
		rd, dest, hop, tc uint8
	}{
		{"defaults", ConnectOptions{}, 16, 16, 0, 0},
		{"one depth", ConnectOptions{MaxRdAtomic: 4}, 4, 4, 0, 0},
		{"two depths", ConnectOptions{MaxRdAtomic: 1, MaxDestRdAtomic: 8}, 1, 8, 0, 0},
		{"hop limit and class", ConnectOptions{HopLimit: 1, TrafficClass: 0x68}, 16, 16, 1, 0x68},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newSide(t, da, RC, 4096, nil, nil), newSide(t, db, RC, 4096, nil, nil)
			connect(t, a, b, c.opts)
			at, err := a.qp.Query()
			if err != nil {
				t.Fatal(err)
			}
			if at.MaxRdAtomic != c.rd || at.MaxDestRdAtomic != c.dest {
				t.Errorf("max_rd_atomic %d, max_dest_rd_atomic %d; want %d, %d", at.MaxRdAtomic, at.MaxDestRdAtomic, c.rd, c.dest)
			}
			if at.AV.HopLimit != c.hop || at.AV.TrafficClass != c.tc {
				t.Errorf("hop limit %d, traffic class %#x; want %d, %#x", at.AV.HopLimit, at.AV.TrafficClass, c.hop, c.tc)
			}
			// The connection works with these attributes.
			if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 100)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)}}); err != nil {
				t.Fatal(err)
			}
			want(t, a.cq, WCSend, WCSuccess)
			want(t, b.cq, WCRecv, WCSuccess)
		})
	}
}

// TestConnectSourceGID: a QP whose endpoint advertised the device's
// second address sends from it, not from the first address of the
// family; a GID the device does not have leaves Resolve's choice.
func TestConnectSourceGID(t *testing.T) {
	ipA2 := netip.MustParseAddr("198.18.0.3")
	la, lb := link.NewPipe(link.PipeConfig{Seed: 1, Buffers: 2048, MACA: macA, MACB: macB})
	da, err := NewDevice([]link.Link{la}, Config{Addrs: []netip.Addr{ipA, ipA2}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := NewDevice([]link.Link{lb}, Config{Addrs: []netip.Addr{ipB}, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: macA, ipA2: macA}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	idx := -1
	for i, g := range da.GIDs() {
		if g.Unmap() == ipA2 {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatalf("no GID for %v in %v", ipA2, da.GIDs())
	}
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		gid     func(Endpoint) netip.Addr
		wantSrc netip.Addr
	}{
		{"second address", func(e Endpoint) netip.Addr { return e.GID }, ipA2},
		{"not the device's", func(Endpoint) netip.Addr { return netip.MustParseAddr("::ffff:198.18.0.9") }, ipA},
		{"none", func(Endpoint) netip.Addr { return netip.Addr{} }, ipA},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newSide(t, da, RC, 4096, nil, nil), newSide(t, db, RC, 4096, nil, nil)
			ea, err := a.qp.LocalEndpoint(1, ConnectOptions{GIDIndex: idx})
			if err != nil {
				t.Fatal(err)
			}
			eb, _ := b.qp.LocalEndpoint(2, ConnectOptions{})
			local := ea
			local.GID = c.gid(ea)
			if err := a.qp.Connect(ctx, local, eb, ConnectOptions{}); err != nil {
				t.Fatal(err)
			}
			at, _ := a.qp.Query()
			if got := at.AV.SrcIP.Unmap(); got != c.wantSrc {
				t.Fatalf("source %v, want %v", got, c.wantSrc)
			}
			// b expects a's packets from the address a sends from.
			eaSeen := ea
			eaSeen.GID = netip.AddrFrom16(c.wantSrc.As16())
			if err := b.qp.Connect(ctx, eb, eaSeen, ConnectOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 100)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)}}); err != nil {
				t.Fatal(err)
			}
			want(t, a.cq, WCSend, WCSuccess)
			want(t, b.cq, WCRecv, WCSuccess)
		})
	}
}
