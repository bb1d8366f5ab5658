package cm

import (
	"testing"
	"time"

	"github.com/xroce/xroce/mad"
)

// FuzzEngine feeds an engine with listeners, pending and established
// connections a sequence of MADs cut from the input (each 256 bytes,
// the first two bytes overwritten with a valid header's attribute half
// the time), at growing times: no panic, no more connections than the
// configured bounds, and every connection's timer either armed or not
// needed.
func FuzzEngine(f *testing.F) {
	var seed [mad.Size]byte
	m := mad.MAD(seed[:])
	for _, attr := range []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrREJ, mad.AttrMRA, mad.AttrDREQ, mad.AttrDREP, mad.AttrSIDRREQ, mad.AttrSIDRREP} {
		m.EncodeCM(1, attr, 0)
		f.Add(append([]byte(nil), seed[:]...))
	}
	mad.REQ(m.Body()).Encode(&mad.REQFields{LocalCommID: 5, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), LocalQPN: 0x11, PKey: 0xffff, MaxCMRetries: 3})
	m.EncodeCM(1, mad.AttrREQ, 0)
	f.Add(append([]byte(nil), seed[:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSimNet(t)
		a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
		b.e.cfg.Backlog, b.e.cfg.MaxConns = 4, 8
		b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
		b.e.Listen(mad.ServiceID(mad.PortSpaceUDP, 7174))
		s.connect(a, b, nil)
		s.run(time.Second)
		from := &Peer{Addr: a.addr, Local: b.addr}
		for i := 0; len(data) > 0; i++ {
			var buf [mad.Size]byte
			n := copy(buf[:], data)
			data = data[n:]
			if n > 2 && buf[0]&1 == 0 {
				mad.MAD(buf[:]).EncodeCM(uint64(buf[1]), mad.AttrID(0x10+buf[2]%9), 0)
			}
			b.e.Input(s.now, buf[:n], from)
			a.e.Input(s.now, buf[:n], &Peer{Addr: b.addr, Local: a.addr})
			s.now += time.Duration(i) * 100 * time.Millisecond
			s.run(s.now)
		}
		s.run(s.now + 10*time.Minute)
		for _, n := range []*simNode{a, b} {
			if n.e.Conns() > n.e.cfg.MaxConns {
				t.Fatalf("%d connections", n.e.Conns())
			}
			for _, c := range n.e.conns {
				if c.hidx < 0 && c.state != StateEstablished {
					t.Fatalf("connection in %v without a timer", c.state)
				}
			}
		}
	})
}
