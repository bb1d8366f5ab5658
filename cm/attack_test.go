package cm

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/internal/rogue"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/qp"
	"github.com/xroce/xroce/roce"
)

// TestAttackGSI: raw frames from a hostile peer to a device's QP 1 with a
// listener. Malformed MADs are counted and dropped; requests the CM must
// refuse are answered as the kernel answers them; a REQ flood holds no
// more than the backlog.
func TestAttackGSI(t *testing.T) {
	la, lb := link.NewPipe(link.PipeConfig{Seed: 1, Buffers: 8192, MACA: macA, MACB: macB})
	d, err := roce.NewDevice([]link.Link{la}, roce.Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); lb.Close() })
	const backlog = 16
	a, err := Open(d, AgentConfig{Backlog: backlog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, err := a.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), &ListenOptions{Backlog: backlog}); err != nil {
		t.Fatal(err)
	}
	peer := &rogue.Peer{Link: lb, IP: ipB, QPN: qp.GSIQPN, VictimIP: ipA, VictimQPN: qp.GSIQPN}
	copy(peer.MAC[:], macB)
	copy(peer.VictimMAC[:], macA)
	send := func(qkey uint32, payload []byte) {
		t.Helper()
		f := peer.Build(bth.FrameFields{BTH: bth.BTHFields{Opcode: bth.UDSendOnly}, DETH: bth.DETHFields{QKey: qkey, SrcQP: qp.GSIQPN}}, payload)
		if err := peer.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(t *testing.T, want mad.AttrID) mad.MAD {
		t.Helper()
		got := peer.Receive(1, 2*time.Second)
		if len(got) != 1 {
			t.Fatalf("no %v answer", want)
		}
		m, err := mad.Parse(got[0].Payload)
		if err != nil || m.AttrID() != want {
			t.Fatalf("answer %v (%v), want %v", m.AttrID(), err, want)
		}
		return m
	}
	req := func(commID uint32, mutate func(f *mad.REQFields, h mad.CMAHeader)) []byte {
		var b [mad.Size]byte
		m := mad.MAD(b[:])
		m.EncodeCM(uint64(commID), mad.AttrREQ, 0)
		var priv [mad.REQPrivateSize]byte
		h := mad.CMAHeader(priv[:mad.CMAHeaderSize])
		h.Encode(ipB, ipA, 40000)
		f := mad.REQFields{LocalCommID: commID, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), LocalCAGUID: 0x42,
			LocalQPN: 0x100 + commID, StartingPSN: 1, PathMTU: 3, PKey: 0xffff, MaxCMRetries: 15,
			LocalCMResponseTimeout: 18, RemoteCMResponseTimeout: 18, PrimaryLocalACKTimeout: 18,
			PrimaryLocalGID: gidOf(ipB), PrimaryRemoteGID: gidOf(ipA)}
		if mutate != nil {
			mutate(&f, h)
		}
		f.PrivateData = priv[:]
		mad.REQ(m.Body()).Encode(&f)
		return b[:]
	}
	st := a.Stats()
	quiet := func(t *testing.T) {
		t.Helper()
		if got, ok := peer.Quiet(200 * time.Millisecond); !ok {
			t.Fatalf("answered %v", got)
		}
	}

	t.Run("truncated", func(t *testing.T) {
		before := st.RxMalformed.Load()
		send(qp.GSIQKey, req(1, nil)[:100])
		quiet(t)
		if st.RxMalformed.Load() != before+1 {
			t.Fatal("not counted")
		}
	})
	t.Run("wrong Q_Key", func(t *testing.T) {
		send(0x11111111, req(2, nil))
		quiet(t)
	})
	t.Run("wrong class, version, method", func(t *testing.T) {
		before := st.RxMalformed.Load()
		for _, off := range []int{0, 1, 2, 3} {
			b := req(3, nil)
			b[off] ^= 0x40
			send(qp.GSIQKey, b)
		}
		quiet(t)
		if st.RxMalformed.Load() != before+4 {
			t.Fatalf("malformed %d, want %d", st.RxMalformed.Load()-before, 4)
		}
	})
	t.Run("no listener", func(t *testing.T) {
		send(qp.GSIQKey, req(4, func(f *mad.REQFields, _ mad.CMAHeader) { f.ServiceID = mad.ServiceID(mad.PortSpaceTCP, 1) }))
		if r := mad.REJ(answer(t, mad.AttrREJ).Body()); r.Reason() != mad.RejInvalidServiceID || r.RemoteCommID() != 4 {
			t.Fatalf("REJ %v to %#x", r.Reason(), r.RemoteCommID())
		}
	})
	t.Run("bad rdma_cm header", func(t *testing.T) {
		send(qp.GSIQKey, req(5, func(_ *mad.REQFields, h mad.CMAHeader) { h[1] = 0x50 }))
		if r := mad.REJ(answer(t, mad.AttrREJ).Body()); r.Reason() != mad.RejConsumerDefined {
			t.Fatalf("REJ %v", r.Reason())
		}
	})
	t.Run("not our GID", func(t *testing.T) {
		send(qp.GSIQKey, req(6, func(f *mad.REQFields, _ mad.CMAHeader) { f.PrimaryRemoteGID = gidOf(netip.MustParseAddr("198.18.9.9")) }))
		if r := mad.REJ(answer(t, mad.AttrREJ).Body()); r.Reason() != mad.RejInvalidGID {
			t.Fatalf("REJ %v", r.Reason())
		}
	})
	t.Run("unknown DREQ", func(t *testing.T) {
		var b [mad.Size]byte
		m := mad.MAD(b[:])
		m.EncodeCM(77, mad.AttrDREQ, 0)
		mad.DREQ(m.Body()).Encode(&mad.DREQFields{LocalCommID: 0x1234, RemoteCommID: 0x5678, RemoteQPN: 0x11})
		send(qp.GSIQKey, b[:])
		d := answer(t, mad.AttrDREP)
		if r := mad.DREP(d.Body()); r.LocalCommID() != 0x5678 || r.RemoteCommID() != 0x1234 || d.TID() != 77 {
			t.Fatalf("DREP %#x/%#x tid %d", r.LocalCommID(), r.RemoteCommID(), d.TID())
		}
	})
	t.Run("REQ flood", func(t *testing.T) {
		const n = 2000
		noRecv := d.Stats().RxNoRecv
		for i := range uint32(n) {
			send(qp.GSIQKey, req(1000+i, nil))
			if i%256 == 255 {
				peer.Receive(1<<20, 5*time.Millisecond) // keep the attacker's receive ring drained
			}
		}
		peer.Receive(1<<20, 500*time.Millisecond)
		a.mu.Lock()
		conns, reqs := a.eng.Conns(), len(a.reqs)
		a.mu.Unlock()
		if conns > backlog || reqs > backlog {
			t.Fatalf("%d connections and %d requests held after a flood, backlog %d", conns, reqs, backlog)
		}
		// A REQ the GSI QP had no receive request for is dropped
		// silently (UD: a loaded machine falls behind the
		// flood); every other one beyond the backlog is refused.
		refused, dropped := st.Refused.Load(), d.Stats().RxNoRecv-noRecv
		if refused+dropped < n-backlog-100 || refused < n/2 {
			t.Fatalf("refused %d and dropped %d for want of receive requests of %d REQs", refused, dropped, n)
		}
	})
}
