package roce_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
)

// Two devices joined by an in-memory pipe: an RC QP on each, connected,
// then an RDMA WRITE, a SEND and a FETCH_ADD. On a real network use
// nic.Open(ifname, nic.Config{}) and exchange Endpoints with ConnectTCP.
func Example() {
	pa, pb := link.NewPipe(link.PipeConfig{})
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	da, err := roce.NewDevice([]link.Link{pa}, roce.Config{Addrs: []netip.Addr{ipA},
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: pb.Info().MAC}})
	if err != nil {
		log.Fatal(err)
	}
	defer da.Close()
	db, err := roce.NewDevice([]link.Link{pb}, roce.Config{Addrs: []netip.Addr{ipB},
		Neighbors: map[netip.Addr]net.HardwareAddr{ipA: pa.Info().MAC}})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	type end struct {
		qp  *roce.QP
		cq  *roce.CQ
		mr  *roce.MR
		buf []byte
	}
	setup := func(d *roce.Device) end {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(16)
		q, _ := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		buf := make([]byte, 64)
		mr, err := pd.RegMR(buf, roce.AccessLocalWrite|roce.AccessRemoteWrite|roce.AccessRemoteAtomic)
		if err != nil {
			log.Fatal(err)
		}
		return end{q, cq, mr, buf}
	}
	a, b := setup(da), setup(db)
	ea, _ := a.qp.LocalEndpoint(100, roce.ConnectOptions{})
	eb, _ := b.qp.LocalEndpoint(200, roce.ConnectOptions{})
	ctx := context.Background()
	if err := a.qp.Connect(ctx, ea, eb, roce.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}
	if err := b.qp.Connect(ctx, eb, ea, roce.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}
	wait := func(cq *roce.CQ) roce.WC {
		var wc [1]roce.WC
		for cq.Poll(wc[:]) == 0 {
			cq.Wait(ctx)
		}
		return wc[0]
	}

	copy(a.buf, "written by a")
	a.qp.PostSend(&roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
		SGL: []roce.SGE{a.mr.SGE(0, 12)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	fmt.Println(wait(a.cq).Status, string(b.buf[:12]))

	b.qp.PostRecv(&roce.RecvWR{ID: 7, SGL: []roce.SGE{b.mr.SGE(32, 32)}})
	copy(a.buf, "hello")
	a.qp.PostSend(&roce.SendWR{Opcode: roce.WRSend, SGL: []roce.SGE{a.mr.SGE(0, 5)}})
	wc := wait(b.cq)
	fmt.Println(wc.Opcode, wc.ID, string(b.buf[32:32+wc.ByteLen]))

	b.buf[16] = 40 // a little-endian 64-bit counter at offset 16
	a.qp.PostSend(&roce.SendWR{Opcode: roce.WRAtomicFetchAdd, Flags: roce.SendSignaled, CompareAdd: 2,
		SGL: []roce.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 16, RKey: b.mr.RKey()})
	fmt.Println(wait(a.cq).Opcode, a.buf[0], b.buf[16])
	// Output:
	// SUCCESS written by a
	// RECV 7 hello
	// FETCH_ADD 40 42
}
